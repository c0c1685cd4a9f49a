//! Faults for the DRA tests. The real server makes them where it can:
//!
//! - [`Frozen`]: kube-apiserver stopped (SIGSTOP): the kernel still accepts
//!   connections, nothing answers, as a wedged server or a black-holed load
//!   balancer looks to a client;
//! - [`MutatingHold`]: kube-apiserver's own in-flight limit
//!   (`--max-mutating-requests-inflight=1`, priority and fairness off) taken
//!   by a request whose body never finishes: every other mutating request
//!   of a user outside system:masters is answered 429 with Retry-After;
//! - restarts ([`ApiServer::restart`]) and compaction ([`ApiServer::compact`],
//!   with `--watch-cache=false` a watch resumed from before it gets 410).
//!
//! What it cannot do, hang one request by path while others are served, is
//! [`FaultProxy`]: a small HTTP proxy in front of it.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use kube_rdma_e2e::apiserver::ApiServer;
use tokio::io::AsyncWriteExt;

/// kube-apiserver stopped with SIGSTOP until this is dropped (SIGCONT).
pub struct Frozen {
    pid: i32,
}

impl Frozen {
    pub fn new(api: &ApiServer) -> Self {
        let pid = api.apiserver.pid;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
        Frozen { pid }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGCONT);
    }
}

/// kube-apiserver flags under which [`MutatingHold`] takes the only slot.
pub const ONE_MUTATING_REQUEST: [&str; 2] =
    ["--enable-priority-and-fairness=false", "--max-mutating-requests-inflight=1"];

/// A ConfigMap create, as the admin, whose body never ends: it holds
/// kube-apiserver's only mutating slot until dropped (the connection closes).
pub struct MutatingHold {
    _conn: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
}

impl MutatingHold {
    /// Takes the slot, and proves it: a mutating request of a user outside
    /// system:masters (`probe`, the driver's kubeconfig) gets 429. Internal
    /// requests of kube-apiserver itself may hold the slot for a moment, and
    /// a request arriving then is let through without taking it (system:masters
    /// is never throttled): then it tries again.
    pub async fn take(api: &ApiServer, probe: &Path) -> Self {
        // The probe sees the first answer (kube's client would retry a 429 for 15 s).
        let mut cfg = super::config_for(probe).await;
        cfg.default_retry = false;
        let probe = kube::Client::try_from(cfg).unwrap();
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(probe, super::NAMESPACE);
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "probe"}})).unwrap();
        let dry = kube::api::PostParams { dry_run: true, ..Default::default() };
        for _ in 0..20 {
            let conn = open_create(api).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            match cms.create(&dry, &cm).await {
                Err(kube::Error::Api(e)) if e.code == 429 => return MutatingHold { _conn: conn },
                _ => drop(conn),
            }
        }
        panic!("could not hold kube-apiserver's mutating slot");
    }
}

async fn open_create(api: &ApiServer) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let pki = api.dir.join("pki");
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(api.ca_file()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(pki.join("admin.crt")).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .unwrap();
    let hostport = api.url.strip_prefix("https://").unwrap().to_string();
    let tcp = tokio::net::TcpStream::connect(&hostport).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.unwrap();
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {hostport}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{\"apiVersion\": \"v1\", "
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

type ProxyBody = UnsyncBoxBody<Bytes, kube::Error>;

#[derive(Debug, Clone)]
struct Rule {
    id: usize,
    method: http::Method,
    path: String,
    prefix: bool,
    fired: usize,
}

/// A plain-HTTP proxy in front of kube-apiserver that passes each request
/// on with the client's own `Authorization` (the driver's token), except the
/// ones a rule matches: those hang for [`FaultProxy::HANG`] and then get 504
/// without reaching the server (a hung request never lands late).
pub struct FaultProxy {
    pub addr: std::net::SocketAddr,
    rules: Arc<Mutex<Vec<Rule>>>,
    next: Mutex<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    pub const HANG: Duration = Duration::from_secs(120);

    pub async fn start(api: &ApiServer) -> Self {
        // Upstream as nobody: the forwarded Authorization header is the only credential.
        let kc = api.dir.join("anonymous-proxy.kubeconfig");
        std::fs::write(
            &kc,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{}\", certificate-authority: \"{}\"}}\n\
                 users:\n- name: none\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: none}}\ncurrent-context: c\n",
                api.url,
                api.ca_file().display()
            ),
        )
        .unwrap();
        let mut cfg = super::config_for(&kc).await;
        cfg.default_retry = false;
        let upstream = kube::Client::try_from(cfg).unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let r = rules.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (upstream, rules) = (upstream.clone(), r.clone());
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req| handle(req, upstream.clone(), rules.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        FaultProxy { addr, rules, next: Mutex::new(0), task }
    }

    /// Hangs `method` requests to exactly `path`; returns the rule's id.
    pub fn hang(&self, method: http::Method, path: &str) -> usize {
        self.add(method, path, false)
    }

    /// Hangs `method` requests to paths starting with `prefix`.
    pub fn hang_prefix(&self, method: http::Method, prefix: &str) -> usize {
        self.add(method, prefix, true)
    }

    fn add(&self, method: http::Method, path: &str, prefix: bool) -> usize {
        let mut n = self.next.lock().unwrap();
        *n += 1;
        self.rules.lock().unwrap().push(Rule { id: *n, method, path: path.into(), prefix, fired: 0 });
        *n
    }

    pub fn remove(&self, id: usize) {
        self.rules.lock().unwrap().retain(|r| r.id != id);
    }

    /// How many requests rule `id` has hung.
    pub fn fired(&self, id: usize) -> usize {
        self.rules.lock().unwrap().iter().find(|r| r.id == id).map_or(0, |r| r.fired)
    }

    /// `template` (a kubeconfig) with every cluster's server pointing here.
    pub fn kubeconfig(&self, template: &Path, path: &Path) -> PathBuf {
        let mut kc: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(template).unwrap()).unwrap();
        for c in kc["clusters"].as_sequence_mut().unwrap() {
            c["cluster"]["server"] = format!("http://{}", self.addr).into();
        }
        std::fs::write(path, serde_yaml::to_string(&kc).unwrap()).unwrap();
        path.to_path_buf()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn full(status: http::StatusCode, msg: &str) -> http::Response<ProxyBody> {
    let mut r =
        http::Response::new(Full::new(Bytes::from(msg.to_string())).map_err(|e| match e {}).boxed_unsync());
    *r.status_mut() = status;
    r
}

async fn handle(
    req: http::Request<Incoming>,
    upstream: kube::Client,
    rules: Arc<Mutex<Vec<Rule>>>,
) -> Result<http::Response<ProxyBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let hung = {
        let mut rules = rules.lock().unwrap();
        let hit = rules.iter_mut().find(|r| {
            r.method == parts.method && if r.prefix { path.starts_with(&r.path) } else { path == r.path }
        });
        hit.map(|r| r.fired += 1).is_some()
    };
    if hung {
        tokio::time::sleep(FaultProxy::HANG).await;
        return Ok(full(http::StatusCode::GATEWAY_TIMEOUT, "hung by the test's proxy"));
    }
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(full(http::StatusCode::BAD_REQUEST, &e.to_string())),
    };
    let mut b = http::Request::builder()
        .method(parts.method)
        .uri(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::CONTENT_LENGTH {
            b = b.header(k, v);
        }
    }
    let req = b.body(kube::client::Body::from(bytes.to_vec())).unwrap();
    Ok(match upstream.send(req).await {
        Ok(resp) => {
            let (mut p, body) = resp.into_parts();
            p.headers.remove(http::header::TRANSFER_ENCODING);
            p.headers.remove(http::header::CONNECTION);
            http::Response::from_parts(p, body.boxed_unsync())
        }
        Err(e) => full(http::StatusCode::BAD_GATEWAY, &e.to_string()),
    })
}
