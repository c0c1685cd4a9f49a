//! IPAM delegation: exec the plugin named by `ipam.type` from `CNI_PATH`,
//! speaking the newest CNI version it supports (asked with VERSION, cached per
//! binary), and convert its result.
//!
//! Why negotiate: Debian's `host-local`/`static` 1.1.1 refuse cniVersion 1.1.0,
//! while runtimes send it; the result is converted back to what the runtime asked.

use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Proc, Stdio};

use serde_json::{json, Value};

use crate::cni_version::{self, SUPPORTED_VERSIONS};
use crate::conf::Env;
use crate::error::{Error, Result};

/// Finds `name` in the `CNI_PATH` directories.
pub fn find_plugin(env: &Env, name: &str) -> Result<PathBuf> {
    env.path.iter().map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| Error::IpamNotRun {
        plugin: name.to_string(),
        why: format!("not found in CNI_PATH ({})", cni_path(env)),
    })
}

/// `CNI_PATH` as given, for messages.
pub fn cni_path(env: &Env) -> String {
    env.path.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":")
}

/// The error of a plugin that could not be started (`exec` failed).
fn not_run(plugin: &Path, e: &std::io::Error) -> Error {
    Error::IpamNotRun {
        plugin: plugin.file_name().and_then(|n| n.to_str()).unwrap_or("ipam").to_string(),
        why: format!("exec {}: {e}", plugin.display()),
    }
}

/// The plugin's process: the runtime's `CNI_*` values (as libcni's
/// `DelegateArgs` passes them: our environment, `CNI_COMMAND` replaced) and,
/// when `held` is given, that lock descriptor left open across `exec`.
///
/// The child is not tied to our life (no `PR_SET_PDEATHSIG`), as in the
/// reference delegation (containernetworking/cni `pkg/invoke`, `exec.Cmd`
/// with the plugin's own context): killed by the runtime's timeout, we must
/// not kill host-local between creating a lease file and writing its owner
/// into it, which leaves an empty lease no DEL can match. The VF lock it
/// inherits makes the DEL that follows wait for it to finish, so the DEL's
/// release sees its lease (issue 22, defect 3).
fn command(plugin: &Path, cmd: &str, env: &Env, held: Option<RawFd>) -> Proc {
    let mut c = Proc::new(plugin);
    // CNI_ARGS and CNI_PATH exactly as we got them (spec: delegates see the
    // runtime's values).
    c.env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", &env.container_id)
        .env("CNI_NETNS", &env.netns)
        .env("CNI_IFNAME", &env.ifname)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match &env.args {
        Some(a) => c.env("CNI_ARGS", a),
        None => c.env_remove("CNI_ARGS"),
    };
    match &env.path_raw {
        Some(p) => c.env("CNI_PATH", p),
        None => c.env_remove("CNI_PATH"),
    };
    if let Some(fd) = held {
        // SAFETY: fcntl is async-signal-safe; `fd` is open in the parent (a
        // lock it holds while the child runs), hence in the forked child.
        unsafe {
            c.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    c
}

/// A running IPAM plugin. Started on its own thread, which forks, feeds
/// stdin and waits: the fork and exec (about a millisecond here) then overlap
/// the kernel's netns move instead of preceding it.
#[derive(Debug)]
pub struct Pending {
    /// The outer error: the plugin could not be started ([`Error::IpamNotRun`]).
    thread: std::thread::JoinHandle<Result<std::io::Result<std::process::Output>>>,
    name: String,
    cmd: &'static str,
}

/// Starts `plugin` with `cmd` and `conf` on stdin; `held`: a lock the
/// plugin inherits (see [`command`]).
pub fn start(plugin: &Path, cmd: &'static str, env: &Env, conf: &Value, held: Option<RawFd>) -> Pending {
    let mut c = command(plugin, cmd, env, held);
    let stdin = serde_json::to_vec(conf).unwrap_or_default();
    let name = plugin.file_name().and_then(|n| n.to_str()).unwrap_or("ipam").to_string();
    let path = plugin.to_path_buf();
    let thread = std::thread::spawn(move || {
        let mut child = c.spawn().map_err(|e| not_run(&path, &e))?;
        if let Some(mut i) = child.stdin.take() {
            // A plugin that exits without reading (VERSION) is reported by its
            // status instead.
            let _ = i.write_all(&stdin);
        }
        Ok(child.wait_with_output())
    });
    Pending { thread, name, cmd }
}

impl Pending {
    /// Waits; returns stdout on success, the plugin's error otherwise. Its
    /// stderr goes to our log at warn level.
    pub fn wait(self) -> Result<Vec<u8>> {
        let out = self
            .thread
            .join()
            .unwrap_or_else(|_| Ok(Err(std::io::Error::other("IPAM thread panicked"))))?
            .map_err(|e| Error::io(&self.name, e))?;
        if !out.stderr.is_empty() {
            tracing::warn!(plugin = %self.name, cmd = self.cmd, stderr = %String::from_utf8_lossy(&out.stderr).trim_end(), "IPAM stderr");
        }
        if !out.status.success() {
            let mut e = plugin_error(&self.name, self.cmd, &out.stdout);
            if let Error::Ipam { msg, .. } = &mut e {
                if msg.is_empty() {
                    *msg = format!("{} ({})", out.status, String::from_utf8_lossy(&out.stderr).trim());
                }
            }
            return Err(e);
        }
        Ok(out.stdout)
    }

    /// Waits for an ADD and parses its result.
    pub fn wait_add(self) -> Result<Value> {
        let name = self.name.clone();
        let out = self.wait()?;
        serde_json::from_slice(&out).map_err(|e| Error::Ipam {
            plugin: name,
            cmd: "ADD",
            code: None,
            msg: format!("unreadable result: {e}"),
        })
    }
}

fn exec(plugin: &Path, cmd: &'static str, env: &Env, stdin: &[u8]) -> Result<(bool, Vec<u8>)> {
    let mut child = command(plugin, cmd, env, None).spawn().map_err(|e| not_run(plugin, &e))?;
    if let Some(mut i) = child.stdin.take() {
        // VERSION answers without reading stdin: EPIPE here is normal.
        let _ = i.write_all(stdin);
    }
    let out = child.wait_with_output().map_err(|e| Error::io(plugin, e))?;
    if !out.stderr.is_empty() {
        tracing::warn!(plugin = %plugin.display(), cmd, stderr = %String::from_utf8_lossy(&out.stderr).trim_end(), "IPAM stderr");
    }
    Ok((out.status.success(), out.stdout))
}

fn plugin_error(plugin: &str, cmd: &'static str, out: &[u8]) -> Error {
    let v: Value = serde_json::from_slice(out).unwrap_or(Value::Null);
    let code = v.get("code").and_then(Value::as_u64).map(|c| c as u32);
    let mut msg = v
        .get("msg")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(out).trim().to_string());
    if let Some(d) = v.get("details").and_then(Value::as_str).filter(|d| !d.is_empty()) {
        msg = format!("{msg}: {d}");
    }
    Error::Ipam { plugin: plugin.to_string(), cmd, code, msg }
}

/// The versions the plugin supports, from the cache or by asking it.
fn plugin_versions(plugin: &Path, env: &Env, state_dir: &Path) -> Result<Vec<String>> {
    let meta = std::fs::metadata(plugin).map_err(|e| Error::io(plugin, e))?;
    let key = format!(
        "{}|{}|{}|{}",
        plugin.display(),
        meta.ino(),
        meta.size(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    );
    let cache_path = state_dir.join("ipam-versions.json");
    let mut cache: serde_json::Map<String, Value> =
        std::fs::read(&cache_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    if let Some(Value::Array(vs)) = cache.get(&key) {
        return Ok(vs.iter().filter_map(Value::as_str).map(str::to_string).collect());
    }
    let (ok, out) = exec(plugin, "VERSION", env, br#"{"cniVersion":"0.3.1"}"#)?;
    let name = plugin.file_name().and_then(|n| n.to_str()).unwrap_or("ipam");
    if !ok {
        return Err(plugin_error(name, "VERSION", &out));
    }
    let v: Value = serde_json::from_slice(&out).map_err(|e| Error::Ipam {
        plugin: name.into(),
        cmd: "VERSION",
        code: None,
        msg: format!("unreadable VERSION answer: {e}"),
    })?;
    let vs: Vec<String> = v
        .get("supportedVersions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    cache.insert(key, json!(vs));
    store_versions(&cache_path, cache);
    Ok(vs)
}

/// Adds `ours` to the VERSION cache in place, under an exclusive `flock` of
/// the file (entries other processes added meanwhile kept). Best effort: a
/// lost or torn cache (a reader racing the write, a process killed during
/// it) reads as empty and only costs one more VERSION exec, and in place no
/// temp file is left behind by a kill. Not [`plumbing::atomic_file`] on
/// purpose: the lock is on the file's inode, and a rename would put a new
/// inode in place while other processes wait on the old one's lock, then read
/// and rewrite a file nobody holds (each dropping the other's entries).
fn store_versions(path: &Path, ours: serde_json::Map<String, Value>) {
    use std::io::{Read, Seek};
    let Ok(mut f) =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
    else {
        return;
    };
    // `flock(LOCK_EX)`, waiting; released when `f` is closed.
    if f.lock().is_err() {
        return;
    }
    let mut have = Vec::new();
    let mut cache: serde_json::Map<String, Value> =
        f.read_to_end(&mut have).ok().and_then(|_| serde_json::from_slice(&have).ok()).unwrap_or_default();
    cache.extend(ours);
    let body = serde_json::to_vec(&cache).unwrap_or_default();
    let _ = f.set_len(0).and_then(|_| f.rewind()).and_then(|_| f.write_all(&body));
}

/// Picks the newest version both sides speak, not above what the runtime asked
/// unless the runtime's is unknown to the plugin (then the plugin's newest we know).
pub fn negotiate(requested: &str, plugin: &[String]) -> Option<String> {
    let ours: Vec<&str> =
        SUPPORTED_VERSIONS.iter().copied().filter(|v| plugin.iter().any(|p| p == v)).collect();
    if ours.contains(&requested) {
        return Some(requested.to_string());
    }
    ours.iter().max_by_key(|v| cni_version::key(v)).map(|v| v.to_string())
}

/// Keys an IPAM plugin has no use for besides our own ([`crate::conf::OURS`]):
/// which VF, the previous result, GC's list (compared ASCII
/// case-insensitively, as read).
const NOT_FOR_IPAM: &[&str] =
    &["deviceID", "pciBusID", "prevResult", "cni.dev/valid-attachments", "cni.dev/attachments"];

/// The stdin for the IPAM plugin: the network configuration with
/// `cniVersion` replaced, without our own keys and `prevResult`. Which other
/// keys an IPAM plugin reads is its business (host-local reads `args` and
/// `runtimeConfig`, whereabouts top-level keys), so those stay.
pub fn delegate_conf(raw: &Value, version: &str) -> Value {
    let mut m: serde_json::Map<String, Value> = raw
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !NOT_FOR_IPAM.iter().chain(crate::conf::OURS).any(|x| x.eq_ignore_ascii_case(k))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    m.retain(|k, _| !k.eq_ignore_ascii_case("cniVersion"));
    m.insert("cniVersion".into(), json!(version));
    Value::Object(m)
}

/// Prepares the delegate config: finds the plugin and negotiates a version.
pub fn prepare(
    raw: &Value,
    requested: &str,
    ipam_type: &str,
    env: &Env,
    state_dir: &Path,
) -> Result<(PathBuf, Value)> {
    let plugin = find_plugin(env, ipam_type)?;
    let vs = plugin_versions(&plugin, env, state_dir)?;
    let v = negotiate(requested, &vs).ok_or_else(|| Error::Ipam {
        plugin: ipam_type.into(),
        cmd: "VERSION",
        code: Some(1),
        msg: format!("speaks none of our versions (it supports {})", vs.join(", ")),
    })?;
    Ok((plugin, delegate_conf(raw, &v)))
}

/// Forwards a spec 1.1 verb (`GC`, `STATUS`) to the IPAM plugin, as a plugin
/// with delegated IPAM must, when the plugin speaks 1.1.0. Returns whether it
/// did: older plugins (Debian's `host-local` 1.1.1) know neither verb.
pub fn forward_v11(
    raw: &Value,
    ipam_type: &str,
    cmd: &'static str,
    env: &Env,
    state_dir: &Path,
) -> Result<bool> {
    let plugin = find_plugin(env, ipam_type)?;
    if !plugin_versions(&plugin, env, state_dir)?.iter().any(|v| v == "1.1.0") {
        tracing::debug!(plugin = ipam_type, cmd, "IPAM plugin predates spec 1.1.0; not forwarded");
        return Ok(false);
    }
    let mut conf = raw.clone();
    if let Some(m) = conf.as_object_mut() {
        m.retain(|k, _| !k.eq_ignore_ascii_case("cniVersion"));
        m.insert("cniVersion".into(), json!("1.1.0"));
    }
    start(&plugin, cmd, env, &conf, None).wait()?;
    Ok(true)
}

/// An address from an IPAM result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpCfg {
    /// Address.
    pub addr: std::net::IpAddr,
    /// Prefix length.
    pub prefix: u8,
    pub gateway: Option<std::net::IpAddr>,
}

/// A route from an IPAM result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCfg {
    /// Destination.
    pub dst: std::net::IpAddr,
    /// Prefix length.
    pub prefix: u8,
    /// Gateway.
    pub gw: Option<std::net::IpAddr>,
}

/// Parses `a.b.c.d/n`.
pub fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (a, p) = s.split_once('/')?;
    let addr: std::net::IpAddr = a.parse().ok()?;
    let prefix: u8 = p.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some((addr, prefix))
}

/// Reads the addresses and routes of a result (any version).
pub fn parse_result(v: &Value) -> Result<(Vec<IpCfg>, Vec<RouteCfg>)> {
    let bad = |why: String| Error::Ipam { plugin: "ipam".into(), cmd: "ADD", code: None, msg: why };
    let mut ips = Vec::new();
    for ip in v.get("ips").and_then(Value::as_array).into_iter().flatten() {
        let a = ip.get("address").and_then(Value::as_str).unwrap_or_default();
        let (addr, prefix) = parse_cidr(a).ok_or_else(|| bad(format!("bad address {a:?}")))?;
        let gateway = ip.get("gateway").and_then(Value::as_str).and_then(|g| g.parse().ok());
        ips.push(IpCfg { addr, prefix, gateway });
    }
    let mut routes = Vec::new();
    for r in v.get("routes").and_then(Value::as_array).into_iter().flatten() {
        let d = r.get("dst").and_then(Value::as_str).unwrap_or_default();
        let (dst, prefix) = parse_cidr(d).ok_or_else(|| bad(format!("bad route dst {d:?}")))?;
        let gw = r.get("gw").and_then(Value::as_str).and_then(|g| g.parse().ok());
        routes.push(RouteCfg { dst, prefix, gw });
    }
    Ok((ips, routes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_speaks_the_newest_common_version() {
        let debian_1_1_1: Vec<String> =
            ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"].map(String::from).to_vec();
        assert_eq!(negotiate("1.1.0", &debian_1_1_1).as_deref(), Some("1.0.0"));
        assert_eq!(negotiate("0.3.1", &debian_1_1_1).as_deref(), Some("0.3.1"));
        assert_eq!(negotiate("1.1.0", &["0.2.0".to_string()]), None);
    }

    #[test]
    fn delegate_conf_rewrites_the_version_and_keeps_only_what_is_not_ours() {
        let c = delegate_conf(
            &json!({"CNIVersion": "1.1.0", "name": "n", "prevResult": {}, "ipam": {"type": "static"}, "Vlan": 5,
                    "deviceID": "0000:01:00.1", "args": {"cni": {"ips": ["10.0.0.9"]}}, "runtimeConfig": {"ips": []},
                    "logFile": "/x"}),
            "1.0.0",
        );
        assert_eq!(
            c,
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "static"},
                   "args": {"cni": {"ips": ["10.0.0.9"]}}, "runtimeConfig": {"ips": []}})
        );
    }

    #[test]
    fn results_parse_in_any_version() {
        let r = json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24", "gateway": "10.0.0.1"}, {"address": "fd00::2/64"}],
                       "routes": [{"dst": "0.0.0.0/0"}]});
        let (ips, routes) = parse_result(&r).unwrap();
        assert_eq!(ips.len(), 2);
        assert_eq!(ips[0].gateway, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(routes[0].prefix, 0);
        assert!(parse_result(&json!({"ips": [{"address": "10.0.0.2/33"}]})).is_err());
        assert!(parse_cidr("10.0.0.1").is_none());
    }
}
