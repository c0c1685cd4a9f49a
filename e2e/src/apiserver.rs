//! A real etcd + kube-apiserver, configured as a production cluster runs it
//! (`kubeadm`'s flags: x509 client certificates, bound service-account tokens,
//! `Node,RBAC` authorization, the default admission chain plus
//! `NodeRestriction`, ValidatingAdmissionPolicy), for two users:
//!
//! - tests, through [`ApiServer::start`]: a private control plane on free
//!   loopback ports in a temporary directory, stopped when dropped;
//! - the local cluster ([`crate::cluster`]), which keeps it running.
//!
//! Files under the control plane's directory:
//!
//! ```text
//! pki/ca.{crt,key}               cluster CA (also signs kubelet client certificates)
//! pki/apiserver.{crt,key}        serving certificate (SANs: loopback, the service IP, node IP)
//! pki/sa.{key,pub}               service-account token signing key
//! pki/<user>.{crt,key}           client certificates (admin, components)
//! <user>.kubeconfig              one per client certificate
//! etcd/                          etcd data
//! logs/{etcd,kube-apiserver}.log
//! ```

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::daemon::{self, Daemon, Spec};
use crate::peers;
use crate::pki::{self, Ca, Credentials, Usage};

/// The first address of the default service range: the `kubernetes` Service.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// ClusterIP of the `kubernetes` Service in [`SERVICE_CIDR`].
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
/// Service-account token issuer (as kubeadm sets it).
pub const SA_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A client identity of the control plane: file stem, user (CN), group (O).
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// `pki/<stem>.crt`, `<stem>.kubeconfig`.
    pub stem: &'static str,
    /// The user name.
    pub user: &'static str,
    /// The group, if any.
    pub group: Option<&'static str>,
}

/// The cluster administrator (group `system:masters`, beyond RBAC).
pub const ADMIN: Client =
    Client { stem: "admin", user: "kube-rdma-e2e:admin", group: Some("system:masters") };
/// The API server's identity towards kubelets (exec, logs, port-forward).
pub const APISERVER_KUBELET_CLIENT: Client = Client {
    stem: "apiserver-kubelet-client",
    user: "kube-apiserver-kubelet-client",
    group: Some("system:masters"),
};

/// How to run the control plane.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory for certificates, data and logs; `None`: a new temporary one.
    pub dir: Option<PathBuf>,
    /// Address kube-apiserver binds (`127.0.0.1` for tests).
    pub bind: String,
    /// Address it advertises in the `kubernetes` endpoints.
    pub advertise: String,
    /// Its port (0: a free one).
    pub port: u16,
    /// etcd client and peer ports (0: free ones).
    pub etcd_ports: (u16, u16),
    /// Extra names and addresses for the serving certificate.
    pub sans: Vec<String>,
    /// More client identities to issue certificates and kubeconfigs for.
    pub clients: Vec<Client>,
    /// Extra kube-apiserver flags (`--max-requests-inflight=5`, feature gates...).
    pub extra_args: Vec<String>,
    /// Run both inside the namespaces of this process.
    pub ns_of: Option<i32>,
    /// How long to wait for `/readyz`.
    pub ready_timeout: Duration,
    /// A kube-apiserver binary of its own (`peers::bin("kube-apiserver-1.36")`) instead of
    /// the pinned `kube apiserver`; etcd and kubectl stay the pinned ones.
    pub apiserver_bin: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dir: None,
            bind: "127.0.0.1".into(),
            advertise: "127.0.0.1".into(),
            port: 0,
            etcd_ports: (0, 0),
            sans: vec![],
            clients: vec![],
            extra_args: vec![],
            ns_of: None,
            ready_timeout: Duration::from_secs(120),
            apiserver_bin: None,
        }
    }
}

/// Control planes running at once in one test binary (each is an etcd and a
/// kube-apiserver; two at a time keep two cores busy without starving them).
const MAX_PLANES: usize = 2;
static PLANES: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// A turn to run a control plane: [`PlaneSlot::take`] waits while
/// [`MAX_PLANES`] are taken in this process; dropping it lets the next one go.
/// Tests that start an [`ApiServer`] each hold one for as long as it runs.
pub struct PlaneSlot(());

impl PlaneSlot {
    /// Waits for a turn.
    pub fn take() -> PlaneSlot {
        let (m, cv) = &PLANES;
        let mut n = m.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= MAX_PLANES {
            n = cv.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        PlaneSlot(())
    }
}

impl Drop for PlaneSlot {
    fn drop(&mut self) {
        let (m, cv) = &PLANES;
        *m.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        cv.notify_one();
    }
}

/// A running etcd + kube-apiserver.
pub struct ApiServer {
    /// Its directory (see the module docs).
    pub dir: PathBuf,
    /// `https://<host>:<port>`.
    pub url: String,
    /// `http://127.0.0.1:<port>` of etcd.
    pub etcd_url: String,
    /// The etcd process.
    pub etcd: Daemon,
    /// The kube-apiserver process.
    pub apiserver: Daemon,
    etcd_spec: Spec,
    apiserver_spec: Spec,
    opts: Options,
    owned: bool,
    _tmp: Option<tempfile::TempDir>,
}

impl ApiServer {
    /// A private control plane on free loopback ports, stopped when dropped.
    pub fn start() -> Result<ApiServer> {
        ApiServer::start_with(Options::default())
    }

    /// A control plane as `opts` says.
    ///
    /// With ports and directory of its own choosing, a start that loses a port
    /// to another process between [`daemon::free_port`] and the bind is tried
    /// again from scratch on new ports.
    pub fn start_with(opts: Options) -> Result<ApiServer> {
        let fresh = opts.dir.is_none() && opts.port == 0 && opts.etcd_ports == (0, 0);
        let mut tries = 1;
        loop {
            match ApiServer::start_once(opts.clone()) {
                Err(e) if fresh && tries < 3 && format!("{e:#}").contains("address already in use") => {
                    eprintln!("control plane: a port was taken before its bind; trying again on new ports");
                    tries += 1;
                }
                r => return r,
            }
        }
    }

    fn start_once(mut opts: Options) -> Result<ApiServer> {
        peers::ensure_built()?;
        let (tmp, dir) = match &opts.dir {
            Some(d) => (None, d.clone()),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("kube-rdma-apiserver-")
                    .tempdir()
                    .context("creating a temp dir")?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        if opts.port == 0 {
            opts.port = daemon::free_port()?;
        }
        if opts.etcd_ports.0 == 0 {
            opts.etcd_ports = (daemon::free_port()?, daemon::free_port()?);
        }
        let host = if opts.bind == "0.0.0.0" { opts.advertise.clone() } else { opts.bind.clone() };
        let url = format!("https://{host}:{}", opts.port);
        if !dir.join("pki/ca.crt").exists() {
            write_pki(&dir, &url, &opts)?;
        }
        let etcd_url = format!("http://127.0.0.1:{}", opts.etcd_ports.0);
        let e_spec = etcd_spec(&dir, &opts);
        let mut etcd = daemon::spawn(&e_spec)?;
        let probe = etcd_url.clone();
        let ns_of = opts.ns_of;
        let served = daemon::wait_ready(&mut etcd, "serving", Duration::from_secs(60), || {
            daemon::in_netns_of(ns_of, || http_post(&probe, "/v3/kv/range", r#"{"key":"AA=="}"#)).is_ok()
        });
        if let Err(e) = served {
            etcd.stop(Duration::from_secs(5));
            return Err(e);
        }
        let spec = apiserver_spec(&dir, &opts, &etcd_url);
        let apiserver = daemon::spawn(&spec)?;
        let mut s = ApiServer {
            dir,
            url,
            etcd_url,
            etcd,
            apiserver,
            etcd_spec: e_spec,
            apiserver_spec: spec,
            opts,
            owned: true,
            _tmp: tmp,
        };
        s.wait_ready()?;
        Ok(s)
    }

    fn wait_ready(&mut self) -> Result<Duration> {
        let kubeconfig = self.kubeconfig();
        let timeout = self.opts.ready_timeout;
        daemon::wait_ready(&mut self.apiserver, "ready (/readyz)", timeout, || {
            kubectl(&kubeconfig)
                .args(["get", "--raw=/readyz", "--request-timeout=5s"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
    }

    /// The cluster-admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join(format!("{}.kubeconfig", ADMIN.stem))
    }

    /// The kubeconfig of a client identity given in [`Options::clients`].
    pub fn client_kubeconfig(&self, c: &Client) -> PathBuf {
        self.dir.join(format!("{}.kubeconfig", c.stem))
    }

    /// The CA certificate file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// The pinned kubectl, as the admin.
    pub fn kubectl(&self) -> Command {
        kubectl(&self.kubeconfig())
    }

    /// A kubeconfig (written under the control plane's directory) that
    /// authenticates with `token`, e.g. a ServiceAccount's.
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> Result<PathBuf> {
        let y = pki::kubeconfig(&self.url, &self.ca_file(), name, Credentials::Token(token), "e2e");
        pki::write_private(&self.dir, &format!("{name}.kubeconfig"), &y)
    }

    /// A token for ServiceAccount `ns/sa` (TokenRequest, 1 h), bound to a
    /// Pod, Node or Secret when `bound` names one (`("Pod", "name")`): a
    /// token bound to a scheduled pod carries that node's name and uid
    /// (`kubernetes.io.node` claims), which admission policies can read.
    pub fn service_account_token(&self, ns: &str, sa: &str, bound: Option<(&str, &str)>) -> Result<String> {
        let mut c = self.kubectl();
        c.args(["create", "token", sa, "-n", ns, "--duration=1h"]);
        if let Some((kind, name)) = bound {
            c.arg(format!("--bound-object-kind={kind}")).arg(format!("--bound-object-name={name}"));
        }
        Ok(daemon::run(&mut c)?.trim().to_string())
    }

    /// Restarts kube-apiserver (etcd keeps its data): every watch is dropped
    /// and clients see connection errors until it is ready again.
    pub fn restart(&mut self) -> Result<Duration> {
        self.apiserver.stop(Duration::from_secs(10));
        self.apiserver = daemon::spawn(&self.apiserver_spec)?;
        self.wait_ready()
    }

    /// Compacts etcd at its current revision: watches and lists from an older
    /// resourceVersion then get `410 Gone` ("too old resource version").
    pub fn compact(&self) -> Result<u64> {
        let (ns, url) = (self.opts.ns_of, self.etcd_url.clone());
        let body = daemon::in_netns_of(ns, || http_post(&url, "/v3/kv/range", r#"{"key":"AA=="}"#))?;
        let v: serde_json::Value = serde_json::from_str(&body).context("etcd range reply")?;
        let rev: u64 = v["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no revision in etcd's reply {body}"))?;
        daemon::in_netns_of(ns, || {
            http_post(&url, "/v3/kv/compaction", &format!(r#"{{"revision":"{rev}","physical":true}}"#))
        })?;
        Ok(rev)
    }

    /// Stops both processes now (also done on drop for a test's control plane).
    pub fn stop(&mut self) {
        self.apiserver.stop(Duration::from_secs(10));
        self.etcd.stop(Duration::from_secs(10));
    }

    /// Keeps both running after this value is gone (the local cluster):
    /// their names, pids and how to start them again.
    pub fn detach(mut self) -> Vec<(String, i32, Spec)> {
        self.owned = false;
        let e = std::mem::replace(&mut self.etcd, Daemon::from_pid("etcd", 0, Path::new("/")));
        let a = std::mem::replace(&mut self.apiserver, Daemon::from_pid("kube-apiserver", 0, Path::new("/")));
        if let Some(t) = self._tmp.take() {
            let _ = t.keep();
        }
        let (en, ep) = e.detach();
        let (an, ap) = a.detach();
        vec![(en, ep, self.etcd_spec.clone()), (an, ap, self.apiserver_spec.clone())]
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if self.owned {
            self.stop();
        }
    }
}

/// The pinned kubectl with `kubeconfig`.
pub fn kubectl(kubeconfig: &Path) -> Command {
    let mut c = Command::new(peers::bin("kubectl"));
    c.arg(format!("--kubeconfig={}", kubeconfig.display()));
    c
}

fn write_pki(dir: &Path, url: &str, opts: &Options) -> Result<()> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).with_context(|| format!("creating {}", pki.display()))?;
    let ca = Ca::new("kube-rdma-e2e CA")?;
    std::fs::write(pki.join("ca.crt"), &ca.cert_pem)?;
    let mut sans: Vec<String> = [
        "127.0.0.1",
        "localhost",
        KUBERNETES_SERVICE_IP,
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    sans.push(opts.advertise.clone());
    sans.extend(opts.sans.iter().cloned());
    sans.sort();
    sans.dedup();
    let server = ca.issue("kube-apiserver", None, &sans, Usage::Server)?;
    std::fs::write(pki.join("apiserver.crt"), &server.cert_pem)?;
    pki::write_private(&pki, "apiserver.key", &server.key_pem)?;
    let (sa_key, sa_pub) = pki::signing_key()?;
    pki::write_private(&pki, "sa.key", &sa_key)?;
    std::fs::write(pki.join("sa.pub"), sa_pub)?;
    // The CA key stays for the controller-manager's CSR signer.
    pki::write_private(&pki, "ca.key", &ca.key_pem())?;
    let mut clients = vec![ADMIN, APISERVER_KUBELET_CLIENT];
    clients.extend(opts.clients.iter().copied());
    for c in clients {
        let p = ca.issue(c.user, c.group, &[], Usage::Client)?;
        let crt = pki.join(format!("{}.crt", c.stem));
        std::fs::write(&crt, &p.cert_pem)?;
        let key = pki::write_private(&pki, &format!("{}.key", c.stem), &p.key_pem)?;
        let kc = pki::kubeconfig(
            url,
            &pki.join("ca.crt"),
            c.user,
            Credentials::Cert { cert: &crt, key: &key },
            "kube-rdma-e2e",
        );
        pki::write_private(dir, &format!("{}.kubeconfig", c.stem), &kc)?;
    }
    Ok(())
}

fn etcd_spec(dir: &Path, opts: &Options) -> Spec {
    let (client, peer) = opts.etcd_ports;
    Spec::new("etcd", peers::bin("etcd"), dir.join("logs/etcd.log"))
        .args([
            "--name=e2e".to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=e2e=http://127.0.0.1:{peer}"),
            // A test control plane: losing the last writes on a power cut is fine.
            "--unsafe-no-fsync".to_string(),
            "--log-level=warn".to_string(),
            "--quota-backend-bytes=4294967296".to_string(),
        ])
        .in_ns_of(opts.ns_of)
}

fn apiserver_spec(dir: &Path, opts: &Options, etcd_url: &str) -> Spec {
    let pki = dir.join("pki");
    let p = |f: &str| pki.join(f).display().to_string();
    let mut args = vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--bind-address={}", opts.bind),
        format!("--advertise-address={}", opts.advertise),
        format!("--secure-port={}", opts.port),
        format!("--cert-dir={}", pki.display()),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        format!("--service-account-issuer={SA_ISSUER}"),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--authorization-mode=Node,RBAC".to_string(),
        // The default chain (ValidatingAdmissionPolicy, PodSecurity, ServiceAccount, ...) plus
        // NodeRestriction, as kubeadm enables it.
        "--enable-admission-plugins=NodeRestriction".to_string(),
        format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
        format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
        "--kubelet-preferred-address-types=InternalIP,Hostname".to_string(),
        "--allow-privileged=true".to_string(),
        "--profiling=false".to_string(),
        "--v=1".to_string(),
    ];
    args.extend(opts.extra_args.iter().cloned());
    let log = dir.join("logs/kube-apiserver.log");
    match &opts.apiserver_bin {
        Some(bin) => Spec::new("kube-apiserver", bin.clone(), log),
        None => Spec::new("kube-apiserver", peers::bin("kube"), log).args(["apiserver".to_string()]),
    }
    .args(args)
    .in_ns_of(opts.ns_of)
}

/// A minimal HTTP/1.1 POST (etcd's JSON gateway); returns the body of a 200.
fn http_post(base: &str, path: &str, body: &str) -> Result<String> {
    let hostport = base.strip_prefix("http://").context("an http:// URL")?;
    let mut s =
        std::net::TcpStream::connect(hostport).with_context(|| format!("connecting to {hostport}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, rest) = out.split_once("\r\n\r\n").context("an HTTP reply")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("POST {base}{path}: {}", head.lines().next().unwrap_or(""));
    }
    // The gateway answers chunked; a chunked body is "<hex>\r\n<data>\r\n0\r\n\r\n".
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut body = String::new();
        let mut rest = rest;
        while let Some((len, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            body.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        return Ok(body);
    }
    Ok(rest.to_string())
}
