//! The plugin's inputs: CNI environment variables and the network
//! configuration on stdin, read once (bounded), decoded once, and validated
//! into plain values before anything is touched.
//!
//! Keys are matched the way Go's `encoding/json` matches struct fields, which
//! is how sriov-cni reads them: ASCII case-insensitively (`MAC`, `Vlan`,
//! `SpoofChk` all work). Two keys that differ only in case are refused with
//! both names rather than silently picking one.
//!
//! How strict depends on the command: ADD and CHECK validate everything; DEL
//! reads only what tearing down needs and never fails on a value only ADD
//! uses (a runtime repeats DEL with the same configuration until it succeeds,
//! so a DEL that fails on `vlan: 5000` would keep a sandbox forever); GC and
//! STATUS read the network-wide keys only.

use std::io::Read;
use std::path::{Path, PathBuf};

use nic::netlink::vf::{VfLink, VfSettings, VfVlanSetting};
use nic::PciAddr;
use serde_json::{Map, Value};

use crate::cni_version::{LATEST, SUPPORTED_VERSIONS};
use crate::error::{Error, Result};

/// Default state directory (`stateDir`): journals (`journal`), IPAM plugin
/// version cache (`ipam`); the README's CNI section documents it.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/kube-rdma";

/// Where the state every network shares lives (the node dir: VF and PF
/// locks (`lock`), records of VFs given out in userspace mode (`vf_record`)):
/// `KUBE_RDMA_CNI_NODE_DIR`, else [`DEFAULT_STATE_DIR`]. Unlike `stateDir`,
/// not a network's setting: networks with their own state dirs must still
/// meet here. Set only for a simulated node (tests), as `KUBE_RDMA_SYSFS_ROOT`.
pub const NODE_DIR_ENV: &str = "KUBE_RDMA_CNI_NODE_DIR";

/// The one directory `runtimeConfig.CNIDeviceInfoFile` may name a file in:
/// `KUBE_RDMA_CNI_DEVINFO_DIR`, else Multus's ([`nic::devinfo::CNI_DIR`]).
/// Like [`NODE_DIR_ENV`], the runtime's environment (no network
/// configuration sets it): for a simulated node (tests).
pub const DEVINFO_DIR_ENV: &str = "KUBE_RDMA_CNI_DEVINFO_DIR";

/// The directory a network's `stateDir` may be inside (besides
/// [`DEFAULT_STATE_DIR`] itself): `KUBE_RDMA_CNI_STATE_ROOT`, else
/// [`DEFAULT_STATE_ROOT`]. The CNI creates directories and files there as
/// root and GC removes files there, and a network configuration is written by
/// whoever may write a NetworkAttachmentDefinition: so the root is the
/// runtime's environment (the node's admin), never a network's setting.
pub const STATE_ROOT_ENV: &str = "KUBE_RDMA_CNI_STATE_ROOT";

/// [`STATE_ROOT_ENV`]'s default: where CNI plugins keep their state.
pub const DEFAULT_STATE_ROOT: &str = "/var/lib/cni";

/// The directory a network's `preparedDir` may be inside:
/// `KUBE_RDMA_CNI_PREPARED_ROOT`, else [`DEFAULT_PREPARED_ROOT`]. The CNI
/// reads the DRA driver's records there (which name the VF it moves into the
/// pod) and writes attachment files beside them, so, as with
/// [`STATE_ROOT_ENV`], only the runtime's environment sets it.
pub const PREPARED_ROOT_ENV: &str = "KUBE_RDMA_CNI_PREPARED_ROOT";

/// [`PREPARED_ROOT_ENV`]'s default: the kubelet's plugins directory, where
/// the chart's DRA driver keeps its prepared claims.
pub const DEFAULT_PREPARED_ROOT: &str = "/var/lib/kubelet/plugins";

/// Largest network configuration we read from stdin: 1 MiB. Real ones are a
/// few KiB (a Multus delegate with `runtimeConfig` and a `prevResult` stays
/// well under 64 KiB), and Kubernetes objects that carry them are capped by
/// etcd's 1.5 MiB request limit; a bound keeps a runaway writer from making
/// us buffer and journal hundreds of megabytes.
pub const STDIN_LIMIT: usize = 1 << 20;

/// The CNI operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    /// Parses `CNI_COMMAND`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    /// The name in `CNI_COMMAND`.
    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }
}

/// The CNI_* environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS` (may be empty on DEL).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS` exactly as given (delegates get it unchanged).
    pub args: Option<String>,
    /// `CNI_PATH` exactly as given.
    pub path_raw: Option<String>,
    /// `CNI_PATH` directories.
    pub path: Vec<PathBuf>,
    /// The node dir ([`NODE_DIR_ENV`]).
    pub node_dir: PathBuf,
    /// Where device-info files may be ([`DEVINFO_DIR_ENV`]).
    pub devinfo_dir: PathBuf,
    /// Where a network's `stateDir` may be ([`STATE_ROOT_ENV`]).
    pub state_root: PathBuf,
    /// Where a network's `preparedDir` may be ([`PREPARED_ROOT_ENV`]).
    pub prepared_root: PathBuf,
    /// When this process began (`clock::process_began`).
    pub began: u64,
}

/// Reads the environment through `get` (so tests need not touch the process env).
pub fn read_env(cmd: Command, get: &dyn Fn(&str) -> Option<String>) -> Result<Env> {
    let need = |var: &'static str| -> Result<String> {
        match get(var) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(Error::Env { var, why: format!("missing (required for {})", cmd.name()) }),
        }
    };
    let mut env = Env::default();
    if matches!(cmd, Command::Add | Command::Del | Command::Check) {
        env.container_id = need("CNI_CONTAINERID")?;
        if !valid_container_id(&env.container_id) {
            return Err(Error::Env {
                var: "CNI_CONTAINERID",
                why: "must be alphanumeric plus '_', '.', '-', starting with an alphanumeric".into(),
            });
        }
        env.ifname = need("CNI_IFNAME")?;
        if let Err(why) = valid_ifname(&env.ifname) {
            return Err(Error::Env { var: "CNI_IFNAME", why });
        }
    }
    env.netns = match cmd {
        Command::Add | Command::Check => need("CNI_NETNS")?,
        _ => get("CNI_NETNS").unwrap_or_default(),
    };
    env.args = get("CNI_ARGS");
    env.path_raw = get("CNI_PATH");
    env.path = env
        .path_raw
        .as_deref()
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    env.node_dir = env_dir(get, NODE_DIR_ENV, DEFAULT_STATE_DIR)?;
    env.devinfo_dir = env_dir(get, DEVINFO_DIR_ENV, nic::devinfo::CNI_DIR)?;
    env.state_root = env_dir(get, STATE_ROOT_ENV, DEFAULT_STATE_ROOT)?;
    env.prepared_root = env_dir(get, PREPARED_ROOT_ENV, DEFAULT_PREPARED_ROOT)?;
    Ok(env)
}

/// The directory `var` names (unset or empty: `default`), which must be absolute.
fn env_dir(get: &dyn Fn(&str) -> Option<String>, var: &'static str, default: &str) -> Result<PathBuf> {
    let d = get(var).filter(|d| !d.is_empty()).map_or_else(|| PathBuf::from(default), PathBuf::from);
    if !d.is_absolute() {
        return Err(Error::Env { var, why: "must be an absolute path".into() });
    }
    Ok(d)
}

/// `dir` with inner `.` dropped, when it is absolute, has no `..` and lies
/// strictly inside `root` (compared component by component: nothing is
/// resolved, so a `..` cannot climb out); else why not, naming the root and
/// `var`, which sets it.
pub fn confined_dir(dir: &Path, root: &Path, var: &str) -> std::result::Result<PathBuf, String> {
    use std::path::Component;
    let allowed = || {
        format!(
            "only a directory inside {} is allowed (the runtime's environment may name another root in {var}; a network configuration cannot)",
            root.display()
        )
    };
    if !dir.is_absolute() {
        return Err(format!("is not an absolute path; {}", allowed()));
    }
    if dir.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("has .. in it; {}", allowed()));
    }
    let lexical: PathBuf = dir.components().filter(|c| !matches!(c, Component::CurDir)).collect();
    if !lexical.starts_with(root) || lexical.components().eq(root.components()) {
        return Err(format!("is outside {}; {}", root.display(), allowed()));
    }
    Ok(lexical)
}

/// The `MAC` of `CNI_ARGS` (see [`cni_arg`]).
pub fn mac_from_args(args: Option<&str>) -> Result<Option<String>> {
    cni_arg(args, "MAC")
}

/// The value of `key` in `CNI_ARGS` (`K=V;K=V`, as libcni's `LoadArgs` splits
/// it: every pair needs exactly one `=`; keys are case-sensitive, others ignored).
pub fn cni_arg(args: Option<&str>, key: &str) -> Result<Option<String>> {
    let mut found = None;
    for pair in args.unwrap_or_default().split(';').filter(|s| !s.is_empty()) {
        match pair.split('=').collect::<Vec<_>>()[..] {
            [k, v] => {
                if k == key {
                    found = Some(v.to_string());
                }
            }
            _ => return Err(Error::Env { var: "CNI_ARGS", why: format!("{pair:?} is not KEY=VALUE") }),
        }
    }
    Ok(found)
}

/// CNI spec: container ID, the same characters as a network name. No length
/// limit in the spec; 1024 bytes bounds what we hash into a journal name.
pub fn valid_container_id(s: &str) -> bool {
    s.len() <= 1024 && valid_network_name(s)
}

/// CNI spec, "Network configuration" `name`: an alphanumeric, then
/// alphanumerics, `_`, `.` or `-` (libcni `ValidateNetworkName`, which the
/// reference plugins' skel applies to every command but VERSION).
pub fn valid_network_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Linux `dev_valid_name`: 1..=15 bytes, not `.`/`..`, no `/`, `:` or whitespace.
pub fn valid_ifname(s: &str) -> std::result::Result<(), String> {
    if s.is_empty() || s.len() > 15 {
        return Err(format!("{s:?} must be 1 to 15 bytes (IFNAMSIZ)"));
    }
    if s == "." || s == ".." {
        return Err(format!("{s:?} is not a valid interface name"));
    }
    if s.bytes().any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0) {
        return Err(format!("{s:?} contains '/', ':' or whitespace"));
    }
    Ok(())
}

/// Reads stdin up to [`STDIN_LIMIT`]; more is an error naming the limit.
pub fn read_stdin(r: impl Read) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.take(STDIN_LIMIT as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::Decode(format!("cannot read stdin: {e}")))?;
    if buf.len() > STDIN_LIMIT {
        return Err(Error::TooLarge { limit: STDIN_LIMIT });
    }
    Ok(buf)
}

/// Decodes stdin once: it must be a JSON object.
pub fn decode(stdin: &[u8]) -> Result<Value> {
    let v: Value = serde_json::from_slice(stdin).map_err(|e| Error::Decode(e.to_string()))?;
    if !v.is_object() {
        return Err(Error::Decode("the network configuration must be a JSON object".into()));
    }
    Ok(v)
}

/// A JSON object read with Go's key matching: exact or ASCII
/// case-insensitive, `null` as absent.
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    map: &'a Map<String, Value>,
    /// Prefix for messages (`""` or `"runtimeConfig."`).
    at: &'static str,
}

impl<'a> Keys<'a> {
    /// A view of `v` (an empty one if `v` is not an object).
    pub fn of(v: &'a Value, at: &'static str) -> Self {
        match v.as_object() {
            Some(map) => Keys { map, at },
            None => Self::empty(at),
        }
    }

    /// A view of no keys.
    pub fn empty(at: &'static str) -> Self {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        Keys { map: EMPTY.get_or_init(Map::new), at }
    }

    /// The key (as spelled in the input) and value matching `name`.
    pub fn get(&self, name: &str) -> Result<Option<(String, &'a Value)>> {
        let mut found = self.map.iter().filter(|(k, v)| k.eq_ignore_ascii_case(name) && !v.is_null());
        let first = found.next();
        if let Some((other, _)) = found.next() {
            let (k, _) = first.expect("a second match implies a first");
            return Err(Error::config(
                format!("{}{name}", self.at),
                format!(
                    "set twice, as {k:?} and {other:?} (keys match regardless of case, as in Go); keep one"
                ),
            ));
        }
        Ok(first.map(|(k, v)| (format!("{}{k}", self.at), v)))
    }

    /// A string value.
    pub fn str(&self, name: &str) -> Result<Option<(String, &'a str)>> {
        match self.get(name)? {
            None => Ok(None),
            Some((k, Value::String(s))) => Ok(Some((k, s.as_str()))),
            Some((k, v)) => Err(Error::config(k, format!("{v} is not a string"))),
        }
    }

    /// An integer value.
    pub fn int(&self, name: &str) -> Result<Option<(String, i64)>> {
        match self.get(name)? {
            None => Ok(None),
            Some((k, v)) => match v.as_i64() {
                Some(i) => Ok(Some((k, i))),
                None => Err(Error::config(k, format!("{v} is not an integer"))),
            },
        }
    }

    /// A nested object.
    pub fn obj(&self, name: &str, at: &'static str) -> Result<Option<(String, Keys<'a>)>> {
        match self.get(name)? {
            None => Ok(None),
            Some((k, v @ Value::Object(_))) => Ok(Some((k, Keys::of(v, at)))),
            Some((k, v)) => Err(Error::config(k, format!("{v} is not an object"))),
        }
    }
}

/// What to do about the VF's RDMA device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaMode {
    /// Move it if the system allows, else skip with a log line.
    Auto,
    /// Move it or fail.
    Required,
    /// Leave it alone.
    Disabled,
}

/// One `{containerID, ifname}` pair of a GC request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    /// Interface name.
    pub ifname: String,
}

/// The delegated IPAM plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipam {
    /// `ipam.type`: the plugin's executable name in `CNI_PATH`.
    pub kind: String,
}

/// What ADD (and CHECK) configure on the VF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attach {
    /// PF-side VF attributes requested (empty: none; the PF is not touched).
    pub vf: VfSettings,
    /// MAC for the VF netdev in the pod (also set PF-side, as sriov-cni does).
    pub mac: Option<[u8; 6]>,
    /// MTU for the VF netdev in the pod.
    pub mtu: Option<u32>,
    /// RDMA handling.
    pub rdma: RdmaMode,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `cniVersion` as given (results and errors are written in it).
    pub cni_version: String,
    /// Network name (journals record it; GC collects per network).
    pub name: String,
    /// The VF (absent where allowed: DEL, STATUS, GC, VERSION, and DRA mode).
    pub device: Option<PciAddr>,
    /// DRA mode (no `deviceID`): the prepared device of the pod to attach.
    pub claim: Option<ClaimRef>,
    /// ADD/CHECK settings (`None` for the other commands).
    pub attach: Option<Attach>,
    /// The delegated IPAM plugin, if any.
    pub ipam: Option<Ipam>,
    /// State directory.
    pub state_dir: PathBuf,
    /// `runtimeConfig.CNIDeviceInfoFile` (ADD and CHECK only): its name,
    /// directly inside [`Env::devinfo_dir`], the only place it may be.
    pub device_info_file: Option<String>,
    pub prev_result: Option<Value>,
    /// GC: attachments to keep (`None`: the key is absent).
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The decoded stdin (delegated to IPAM).
    pub raw: Value,
}

/// Where DRA mode finds the VF: the device the DRA driver prepared for the
/// pod (`K8S_POD_UID` in `CNI_ARGS`), of the claim and request the network
/// names (any, when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// `K8S_POD_UID` (`None` on a DEL without it: only the journal is used then).
    pub pod_uid: Option<String>,
    /// `claim`: the pod's name for the claim, or the ResourceClaim's name.
    pub claim: Option<String>,
    /// `request`: the request of the claim (`req` also matches `req/sub`).
    pub request: Option<String>,
    /// `preparedDir`: the DRA driver's `--prepared-dir`.
    pub prepared_dir: PathBuf,
}

/// Parses a MAC `aa:bb:cc:dd:ee:ff` (also `-` separated, any case).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.len() != 2 {
            return None;
        }
        mac[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// Formats a MAC the way the CNI result and `ip` do.
pub fn fmt_mac(m: &[u8]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn on_off(v: Option<(String, &str)>) -> Result<Option<bool>> {
    match v {
        None => Ok(None),
        Some((_, "on")) => Ok(Some(true)),
        Some((_, "off")) => Ok(Some(false)),
        Some((k, o)) => Err(Error::config(k, format!("{o:?} is not \"on\" or \"off\""))),
    }
}

/// Applies the command's strictness: ADD/CHECK (and, for network-wide keys,
/// GC/STATUS) propagate errors; DEL logs them and goes on without the value.
struct Strictness {
    lenient: bool,
}

impl Strictness {
    fn take<T>(&self, what: &str, r: Result<Option<T>>) -> Result<Option<T>> {
        match r {
            Ok(v) => Ok(v),
            Err(e) if self.lenient => {
                tracing::warn!(error = %e, "ignoring {what} for DEL: tearing down needs no valid value");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// A string key that, when given, must not be empty.
fn nonempty(r: Result<Option<(String, &str)>>) -> Result<Option<(String, &str)>> {
    match r? {
        Some((k, "")) => Err(Error::config(k, "is empty: leave it out to take any")),
        v => Ok(v),
    }
}

fn pci(k: Option<(String, &str)>) -> Result<Option<PciAddr>> {
    match k {
        None => Ok(None),
        Some((key, s)) => s.parse::<PciAddr>().map(Some).map_err(|e| Error::config(key, e.to_string())),
    }
}

/// Decodes the configuration for `cmd`. Malformed JSON was refused by
/// [`decode`] (code 6); wrong values are code 7; an unknown `cniVersion` is 1
/// (but not for DEL, which tears down whatever the version).
pub fn parse(raw: Value, env: &Env, cmd: Command) -> Result<NetConf> {
    let s = Strictness { lenient: cmd == Command::Del };
    let top = Keys::of(&raw, "");
    let cni_version = cni_version(&top, &s)?;
    let name = s.take("name", top.str("name"))?.map(|(_, n)| n.to_string()).unwrap_or_default();
    if name.is_empty() && matches!(cmd, Command::Add | Command::Gc) {
        return Err(Error::config(
            "name",
            "missing: the network name is required (CNI spec), and GC collects attachments per network",
        ));
    }
    if !name.is_empty() && !valid_network_name(&name) {
        // DEL tears down whatever the name (its journal says which network it was).
        if !s.lenient {
            return Err(Error::config(
                "name",
                format!("{name:?} is not a network name: the CNI spec wants an alphanumeric first, then alphanumerics, '_', '.' or '-'"),
            ));
        }
        tracing::warn!(name = %name, "DEL with an invalid network name; tearing down anyway");
    }
    let state_dir = state_dir(&top, &s, &env.state_root)?;
    let ipam = s.take("ipam", parse_ipam(&top))?;
    let rc = s.take("runtimeConfig", top.obj("runtimeConfig", "runtimeConfig."))?.map(|(_, o)| o);
    let rc = rc.unwrap_or_else(|| Keys::empty("runtimeConfig."));
    let device_info_file = match cmd {
        Command::Add | Command::Check => device_info_name(&rc, &env.devinfo_dir)?,
        // DEL removes only the file its ADD journaled, never one its own
        // configuration names; the other commands never touch one.
        _ => None,
    };
    let prev_result = s
        .take("prevResult", top.obj("prevResult", "prevResult."))?
        .map(|(_, o)| Value::Object(o.map.clone()));
    let valid_attachments = if cmd == Command::Gc { parse_attachments(&top)? } else { None };
    let device = device_id(&top, &rc, &s, cmd)?;
    let claim = claim_ref(&top, &s, env, cmd, device.is_some())?;
    if matches!(cmd, Command::Add | Command::Check | Command::Status) {
        refuse_unsupported_keys(&top)?;
        warn_unknown_keys(&raw);
    }
    let attach = match cmd {
        Command::Add | Command::Check => Some(parse_attach(&top, &rc, env)?),
        // STATUS gets the same configuration as ADD: one that no ADD could take is
        // invalid (7), whatever the node's state (50).
        Command::Status => {
            parse_attach(&top, &rc, env)?;
            None
        }
        _ => None,
    };
    Ok(NetConf {
        cni_version,
        name,
        device,
        claim,
        attach,
        ipam,
        state_dir,
        device_info_file,
        prev_result,
        valid_attachments,
        raw,
    })
}

/// The name of `runtimeConfig.CNIDeviceInfoFile` inside `dir`. The key
/// comes from whoever wrote the network configuration (Multus passes a
/// NetworkAttachmentDefinition's own `runtimeConfig` on when it fills in no
/// `deviceID`), and ADD writes there as root: a path anywhere else is refused.
fn device_info_name(rc: &Keys, dir: &Path) -> Result<Option<String>> {
    match rc.str("CNIDeviceInfoFile")? {
        // Go's zero value: none.
        None | Some((_, "")) => Ok(None),
        Some((k, f)) => nic::devinfo::confined_name(dir, Path::new(f))
            .map(Some)
            .map_err(|why| Error::config(k, format!("{f:?} refused: {why}"))),
    }
}

/// `cniVersion`, which must be one we speak (DEL takes any, or none).
fn cni_version(top: &Keys, s: &Strictness) -> Result<String> {
    let cni_version = match top.str("cniVersion") {
        Ok(Some((_, v))) => v.to_string(),
        Ok(None) if s.lenient => LATEST.to_string(),
        Ok(None) => return Err(Error::config("cniVersion", "missing")),
        Err(e) if s.lenient => {
            tracing::warn!(error = %e, "ignoring cniVersion for DEL");
            LATEST.to_string()
        }
        Err(e) => return Err(e),
    };
    if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
        if !s.lenient {
            return Err(Error::Version { requested: cni_version });
        }
        tracing::warn!(version = %cni_version, "DEL with a cniVersion we do not speak; tearing down anyway");
    }
    Ok(cni_version)
}

/// `stateDir`: [`DEFAULT_STATE_DIR`] or a directory inside the state root
/// ([`STATE_ROOT_ENV`]). DEL never acts on another: it looks in the default.
fn state_dir(top: &Keys, s: &Strictness, root: &Path) -> Result<PathBuf> {
    let Some((k, d)) = s.take("stateDir", top.str("stateDir"))? else {
        return Ok(PathBuf::from(DEFAULT_STATE_DIR));
    };
    let default = Path::new(DEFAULT_STATE_DIR);
    let allowed = confined_dir(Path::new(d), root, STATE_ROOT_ENV);
    match allowed {
        Ok(p) => Ok(p),
        Err(_) if Path::new(d).components().eq(default.components()) => Ok(default.to_path_buf()),
        Err(why) => refused_dir(s, k, d, &format!("{why}, or {DEFAULT_STATE_DIR}"), DEFAULT_STATE_DIR),
    }
}

/// A directory key refused: ADD, CHECK, GC and STATUS fail (code 7); DEL,
/// which tears down whatever it can, logs it and takes `default` instead.
fn refused_dir(s: &Strictness, k: String, d: &str, why: &str, default: &str) -> Result<PathBuf> {
    if s.lenient {
        tracing::warn!(key = %k, dir = d, why, "refused for DEL; it looks in {default} instead");
        return Ok(PathBuf::from(default));
    }
    Err(Error::config(k, format!("{d:?} refused: {why}")))
}

/// The VF: runtimeConfig.deviceID (Multus), then deviceID, then pciBusID
/// (Multus writes both, delegateAddDeviceID). DEL takes the first usable
/// one: a wrong type or a case duplicate is an ADD-only problem.
fn device_id(top: &Keys, rc: &Keys, s: &Strictness, cmd: Command) -> Result<Option<PciAddr>> {
    if !matches!(cmd, Command::Add | Command::Check | Command::Del) {
        return Ok(None);
    }
    let sources = [
        ("runtimeConfig.deviceID", rc.str("deviceID")),
        ("deviceID", top.str("deviceID")),
        ("pciBusID", top.str("pciBusID")),
    ];
    // An empty value names no VF (Go's zero value, as sriov-cni reads it):
    // the next source may.
    let mut empty = None;
    for (what, named) in sources {
        let named = match named {
            Ok(Some((k, ""))) => {
                empty.get_or_insert(k);
                continue;
            }
            other => other,
        };
        if let Some(p) = s.take(what, named.and_then(pci))? {
            return Ok(Some(p));
        }
    }
    match empty {
        Some(k) if !s.lenient => Err(Error::config(
            k,
            "is empty: Multus leaves it empty when the pod was given fewer devices of the network's resource (its k8s.v1.cni.cncf.io/resourceName) than it has attachments to that network; request one device per attachment in the pod's resources",
        )),
        _ => Ok(None),
    }
}

/// DRA mode: no deviceID; the claim/request keys (optional) and the pod's UID
/// (Multus passes K8S_POD_UID in CNI_ARGS) find the VF the DRA driver prepared.
fn claim_ref(
    top: &Keys,
    s: &Strictness,
    env: &Env,
    cmd: Command,
    has_device: bool,
) -> Result<Option<ClaimRef>> {
    let claim_key = s.take("claim", nonempty(top.str("claim")))?;
    let request_key = s.take("request", nonempty(top.str("request")))?;
    let prepared_dir = match s.take("preparedDir", top.str("preparedDir"))? {
        None => PathBuf::from(nic::prepared::DEFAULT_DIR),
        Some((k, d)) => match confined_dir(Path::new(d), &env.prepared_root, PREPARED_ROOT_ENV) {
            Ok(p) => p,
            Err(why) => refused_dir(s, k, d, &why, nic::prepared::DEFAULT_DIR)?,
        },
    };
    let pod_uid = match cmd {
        Command::Add | Command::Check | Command::Del => {
            s.take("CNI_ARGS", cni_arg(env.args.as_deref(), "K8S_POD_UID"))?
        }
        _ => None,
    };
    let named = claim_key.is_some() || request_key.is_some();
    if has_device && named && !s.lenient {
        return Err(Error::config(
            if claim_key.is_some() { "claim" } else { "request" },
            "names a DRA claim, but deviceID names the VF already: use one or the other",
        ));
    }
    let claim = (!has_device && (named || pod_uid.is_some())).then(|| ClaimRef {
        pod_uid: pod_uid.clone(),
        claim: claim_key.map(|(_, v)| v.to_string()),
        request: request_key.map(|(_, v)| v.to_string()),
        prepared_dir,
    });
    if !has_device && matches!(cmd, Command::Add | Command::Check) && pod_uid.is_none() {
        return Err(Error::config(
            "deviceID",
            "missing: set deviceID (Multus fills it from the device plugin), runtimeConfig.deviceID or pciBusID; in DRA mode the runtime must pass K8S_POD_UID in CNI_ARGS (Multus does)",
        ));
    }
    Ok(claim)
}

/// Keys of the plugins we replace whose behaviour we do not provide: each is
/// refused with what it did, since ignoring it would attach the VF other
/// than the configuration asks (an unknown key is only logged).
pub const UNSUPPORTED: &[(&str, &str)] = &[(
    "vlan_trunk",
    "sriov-cni's VLAN trunk filter (written to the out-of-tree Intel driver's sysfs file sriov/<vf>/trunk) is not supported by kube-rdma-cni; ignoring it would pass other VLANs than the ones it lists: remove it, or use vlan for one VLAN",
)];

fn refuse_unsupported_keys(top: &Keys) -> Result<()> {
    for (key, why) in UNSUPPORTED {
        // An empty string is Go's absent value (sriov-cni's `omitempty`).
        if let Some((k, v)) = top.get(key)?.filter(|(_, v)| v.as_str() != Some("")) {
            tracing::debug!(key = %k, value = %v, "unsupported key");
            return Err(Error::config(k, *why));
        }
    }
    Ok(())
}

fn warn_unknown_keys(raw: &Value) {
    for k in unknown_keys(raw) {
        match suggest(k) {
            Some(near) => {
                tracing::warn!(key = %k, "unknown configuration key {k:?} ignored; did you mean {near:?}?");
            }
            None => tracing::warn!(key = %k, "unknown configuration key {k:?} ignored"),
        }
    }
}

/// Top-level keys a configuration of ours may carry, besides our own
/// ([`OURS`]): the CNI spec's (SPEC.md 1.1.0, "Network configuration" and
/// "Plugin configuration objects": well-known fields, what runtimes insert
/// for a plugin, GC's attachment list), and what Multus writes into a
/// delegate (`deviceID` and `pciBusID`, pkg/types/conf.go
/// `delegateAddDeviceID`).
const KNOWN: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "disableCheck",
    "disableGC",
    "capabilities",
    "ipMasq",
    "ipam",
    "dns",
    "args",
    "runtimeConfig",
    "prevResult",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
    "deviceID",
    "pciBusID",
];

/// Our own keys: configuration of the VF and of this plugin (matched ASCII
/// case-insensitively, as every key; kept from IPAM plugins).
pub const OURS: &[&str] = &[
    "stateDir",
    "logLevel",
    "logFile",
    "logFormat",
    "vlan",
    "vlanQoS",
    "vlanProto",
    "mac",
    "mtu",
    "spoofchk",
    "trust",
    "link_state",
    "min_tx_rate",
    "max_tx_rate",
    "rdma",
    "claim",
    "request",
    "preparedDir",
];

/// Top-level keys that are neither ours nor the spec's nor Multus's. They are
/// accepted (a meta-plugin may add its own) and logged, so that a typo
/// (`vlna`) does not pass unnoticed.
pub fn unknown_keys(raw: &Value) -> Vec<&str> {
    raw.as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !KNOWN.iter().chain(OURS).any(|x| x.eq_ignore_ascii_case(k)))
        .map(String::as_str)
        .collect()
}

/// The known key `k` is most likely a typo of: at most two edits away
/// (insertions, deletions, substitutions, swaps of neighbours), ignoring case.
fn suggest(k: &str) -> Option<&'static str> {
    let k = k.to_ascii_lowercase();
    KNOWN
        .iter()
        .chain(OURS)
        .map(|x| (osa_distance(&k, &x.to_ascii_lowercase()), *x))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, x)| x)
}

/// Optimal string alignment distance (Levenshtein plus transpositions).
fn osa_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: the distance between a[..i] and b[..j].
    let mut d: Vec<Vec<usize>> = (0..=a.len())
        .map(|i| (0..=b.len()).map(|j| i.max(j) * usize::from(i == 0 || j == 0)).collect())
        .collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

fn parse_ipam(top: &Keys) -> Result<Option<Ipam>> {
    let Some((k, ipam)) = top.obj("ipam", "ipam.")? else { return Ok(None) };
    if ipam.map.is_empty() {
        return Ok(None);
    }
    match ipam.str("type")? {
        Some((_, t)) if !t.is_empty() && !t.contains('/') && t != "." && t != ".." => {
            Ok(Some(Ipam { kind: t.to_string() }))
        }
        _ => Err(Error::config(format!("{k}.type"), "missing or not a plain plugin name")),
    }
}

/// `cni.dev/valid-attachments` (spec 1.1.0 GC; `cni.dev/attachments` as
/// early 1.1 drafts named it).
fn parse_attachments(top: &Keys) -> Result<Option<Vec<Attachment>>> {
    let found = match top.get("cni.dev/valid-attachments")? {
        Some(f) => Some(f),
        None => top.get("cni.dev/attachments")?,
    };
    let Some((k, v)) = found else { return Ok(None) };
    let list = v.as_array().ok_or_else(|| Error::config(&k, "must be a list of {containerID, ifname}"))?;
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            let o = Keys::of(a, "");
            let cid = o.str("containerID")?.map(|(_, s)| s.to_string());
            let ifname = o.str("ifname")?.map(|(_, s)| s.to_string());
            match (cid, ifname) {
                (Some(container_id), Some(ifname)) => Ok(Attachment { container_id, ifname }),
                _ => Err(Error::config(format!("{k}[{i}]"), "needs containerID and ifname")),
            }
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn parse_attach(top: &Keys, rc: &Keys, env: &Env) -> Result<Attach> {
    let mut vf = VfSettings::default();
    let vlan = top.int("vlan")?;
    let qos = top.int("vlanQoS")?;
    let proto = top.str("vlanProto")?;
    match vlan {
        Some((k, id)) => {
            // sriov-cni's range: 4095 is reserved by 802.1Q.
            if !(0..=4094).contains(&id) {
                return Err(Error::config(k, format!("{id} is outside 0..4094")));
            }
            let q = match &qos {
                Some((qk, q)) if !(0..=7).contains(q) => {
                    return Err(Error::config(qk, format!("{q} is outside 0..7")))
                }
                Some((_, q)) => *q,
                None => 0,
            };
            let ad = match proto.as_ref().map(|(k, p)| (k, p.to_ascii_lowercase())) {
                None => false,
                Some((_, p)) if p == "802.1q" => false,
                Some((_, p)) if p == "802.1ad" => true,
                Some((pk, p)) => {
                    return Err(Error::config(pk, format!("{p:?} is not \"802.1q\" or \"802.1ad\"")))
                }
            };
            if id == 0 && (q != 0 || ad) {
                return Err(Error::config(k, "vlanQoS or vlanProto 802.1ad need a non-zero vlan"));
            }
            vf.vlan = Some(VfVlanSetting { id: id as u16, qos: q as u8, ad });
        }
        None => {
            if let Some((k, _)) =
                qos.map(|(k, v)| (k, v.to_string())).or(proto.map(|(k, v)| (k, v.to_string())))
            {
                return Err(Error::config(k, "given without vlan"));
            }
        }
    }
    vf.spoofchk = on_off(top.str("spoofchk")?)?;
    vf.trust = on_off(top.str("trust")?)?;
    vf.link_state = match top.str("link_state")? {
        None => None,
        Some((_, "auto")) => Some(VfLink::Auto),
        Some((_, "enable")) => Some(VfLink::Enable),
        Some((_, "disable")) => Some(VfLink::Disable),
        Some((k, o)) => return Err(Error::config(k, format!("{o:?} is not auto, enable or disable"))),
    };
    let rate = |v: Option<(String, i64)>| -> Result<Option<u32>> {
        match v {
            None => Ok(None),
            Some((_, x)) if (0..=u32::MAX as i64).contains(&x) => Ok(Some(x as u32)),
            Some((k, x)) => Err(Error::config(k, format!("{x} is not a rate in Mb/s"))),
        }
    };
    let (min, max) = (rate(top.int("min_tx_rate")?)?, rate(top.int("max_tx_rate")?)?);
    if min.is_some() || max.is_some() {
        let (mn, mx) = (min.unwrap_or(0), max.unwrap_or(0));
        if mx != 0 && mn > mx {
            return Err(Error::config("min_tx_rate", format!("{mn} is above max_tx_rate {mx}")));
        }
        vf.rate = Some((mn, mx));
    }
    // sriov-cni's precedence: runtimeConfig.mac over CNI_ARGS MAC over mac.
    let mac_src = match rc.str("mac")? {
        Some((k, m)) => Some((k, m.to_string())),
        None => match mac_from_args(env.args.as_deref())? {
            Some(m) => Some(("CNI_ARGS MAC".to_string(), m)),
            None => top.str("mac")?.map(|(k, m)| (k, m.to_string())),
        },
    };
    let mac = match mac_src {
        None => None,
        Some((field, m)) => {
            let mac =
                parse_mac(&m).ok_or_else(|| Error::config(&field, format!("{m:?} is not a MAC address")))?;
            if mac[0] & 1 == 1 {
                return Err(Error::config(field, format!("{m} is a multicast address")));
            }
            if mac == [0; 6] {
                return Err(Error::config(field, "00:00:00:00:00:00 is not usable"));
            }
            Some(mac)
        }
    };
    // sriov-cni sets the MAC twice: PF-side (the administrative MAC the
    // switch enforces) and on the netdev in the pod.
    vf.mac = mac;
    let mtu = match top.int("mtu")? {
        None => None,
        Some((_, m)) if (68..=65535).contains(&m) => Some(m as u32),
        Some((k, m)) => return Err(Error::config(k, format!("{m} is outside 68..65535"))),
    };
    let rdma = match top.str("rdma")? {
        None | Some((_, "auto")) => RdmaMode::Auto,
        Some((_, "required")) => RdmaMode::Required,
        Some((_, "disabled")) => RdmaMode::Disabled,
        Some((k, o)) => return Err(Error::config(k, format!("{o:?} is not auto, required or disabled"))),
    };
    Ok(Attach { vf, mac, mtu, rdma })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env() -> Env {
        Env {
            container_id: "c".into(),
            ifname: "net1".into(),
            netns: "/x".into(),
            state_root: DEFAULT_STATE_ROOT.into(),
            prepared_root: DEFAULT_PREPARED_ROOT.into(),
            ..Env::default()
        }
    }

    fn add(v: Value) -> Result<NetConf> {
        parse(v, &env(), Command::Add)
    }

    fn base() -> Value {
        json!({"cniVersion": "1.1.0", "name": "n", "deviceID": "0000:01:00.1"})
    }

    fn with(k: &str, v: Value) -> Value {
        let mut b = base();
        b[k] = v;
        b
    }

    #[test]
    fn device_id_precedence_runtime_config_then_top_level_then_pci_bus_id() {
        let c = add(json!({"cniVersion":"1.1.0","name":"n","type":"kube-rdma-cni","pciBusID":"0000:01:00.3","deviceID":"0000:01:00.2","runtimeConfig":{"deviceID":"0000:01:00.1"}})).unwrap();
        assert_eq!(c.device.unwrap().to_string(), "0000:01:00.1");
        let c = add(json!({"cniVersion":"1.1.0","name":"n","pciBusID":"0000:01:00.3"})).unwrap();
        assert_eq!(c.device.unwrap().to_string(), "0000:01:00.3");
    }

    #[test]
    fn dra_mode_takes_the_pod_uid_and_the_optional_claim_and_request() {
        let mut e = env();
        e.args = Some("IgnoreUnknown=1;K8S_POD_UID=p-1".into());
        let v = json!({"cniVersion": "1.1.0", "name": "n", "claim": "rdma"});
        let c = parse(v.clone(), &e, Command::Add).unwrap();
        assert_eq!(c.device, None);
        let r = c.claim.unwrap();
        assert_eq!(
            (r.pod_uid.as_deref(), r.claim.as_deref(), r.request.as_deref()),
            (Some("p-1"), Some("rdma"), None)
        );
        assert_eq!(r.prepared_dir, PathBuf::from(nic::prepared::DEFAULT_DIR));
        // deviceID and a claim cannot both say which VF.
        let both = with("claim", json!("rdma"));
        assert!(parse(both, &e, Command::Add).unwrap_err().to_string().contains("claim"));
        let empty = json!({"cniVersion": "1.1.0", "name": "n", "request": ""});
        assert!(parse(empty, &e, Command::Add).unwrap_err().to_string().contains("request"));
        let rel = json!({"cniVersion": "1.1.0", "name": "n", "preparedDir": "prepared"});
        assert!(parse(rel, &e, Command::Add).unwrap_err().to_string().contains("preparedDir"));
        // Without the pod UID nothing names a VF.
        let e = env();
        assert!(parse(v, &e, Command::Add).unwrap_err().to_string().contains("K8S_POD_UID"));
    }

    #[test]
    fn a_state_dir_is_the_default_or_a_directory_inside_the_state_root() {
        let dir = |d: &str, e: &Env, cmd| parse(with("stateDir", json!(d)), e, cmd).map(|c| c.state_dir);
        let e = env();
        for (d, want) in [
            (DEFAULT_STATE_DIR, DEFAULT_STATE_DIR),
            ("/var/lib/cni/other-net", "/var/lib/cni/other-net"),
            ("/var/lib/cni/./a/b/", "/var/lib/cni/a/b"),
        ] {
            assert_eq!(dir(d, &e, Command::Add).unwrap(), Path::new(want), "{d}");
        }
        let mut srv = env();
        srv.state_root = "/srv/cni".into();
        assert_eq!(dir("/srv/cni/net", &srv, Command::Add).unwrap(), Path::new("/srv/cni/net"));
        assert_eq!(
            dir(DEFAULT_STATE_DIR, &srv, Command::Add).unwrap(),
            Path::new(DEFAULT_STATE_DIR),
            "the default is always allowed"
        );
        assert!(dir("/var/lib/cni/x", &srv, Command::Add).is_err(), "the root is the environment's");
    }

    #[test]
    fn a_state_dir_outside_the_state_root_is_refused_naming_the_key_and_the_root() {
        let e = env();
        for bad in ["/etc", "/tmp/x", "/var/lib/cni", "/var/lib/cnix", "rel", "/var/lib/cni/../../etc/cron.d"]
        {
            let err = parse(with("stateDir", json!(bad)), &e, Command::Add).unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.code(), 7, "{bad}: {msg}");
            for want in ["stateDir", DEFAULT_STATE_ROOT, STATE_ROOT_ENV] {
                assert!(msg.contains(want), "{bad}: {msg} does not name {want}");
            }
            for cmd in [Command::Gc, Command::Status, Command::Check] {
                let mut v = with("stateDir", json!(bad));
                v["cni.dev/valid-attachments"] = json!([]);
                let err = parse(v, &e, cmd).unwrap_err().to_string();
                assert!(err.contains("stateDir"), "{bad} {cmd:?}: {err}");
            }
        }
    }

    #[test]
    fn a_dot_dot_in_a_state_dir_is_refused_even_when_it_stays_inside() {
        let err = parse(with("stateDir", json!("/var/lib/cni/a/../b")), &env(), Command::Add).unwrap_err();
        assert!(err.to_string().contains(".."), "{err}");
    }

    #[test]
    fn del_with_a_refused_state_dir_looks_in_the_default() {
        for bad in ["/etc", "/var/lib/cni/../../etc", "rel"] {
            let c = parse(with("stateDir", json!(bad)), &env(), Command::Del).unwrap();
            assert_eq!(c.state_dir, Path::new(DEFAULT_STATE_DIR), "{bad}");
        }
    }

    #[test]
    fn a_prepared_dir_must_be_inside_the_prepared_root() {
        let mut e = env();
        e.args = Some("K8S_POD_UID=p-1".into());
        let conf = |d: &str| json!({"cniVersion": "1.1.0", "name": "n", "preparedDir": d});
        let dir = |d: &str, e: &Env, cmd| parse(conf(d), e, cmd).map(|c| c.claim.unwrap().prepared_dir);
        let own = "/var/lib/kubelet/plugins/rdma.kuberdma.io/prepared";
        assert_eq!(dir(own, &e, Command::Add).unwrap(), Path::new(own));
        assert_eq!(
            dir("/var/lib/kubelet/plugins/./x/", &e, Command::Add).unwrap(),
            Path::new("/var/lib/kubelet/plugins/x")
        );
        for bad in
            ["/tmp/prepared", "/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins/../pods", "prepared"]
        {
            let err = parse(conf(bad), &e, Command::Add).unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.code(), 7, "{bad}: {msg}");
            for want in ["preparedDir", DEFAULT_PREPARED_ROOT, PREPARED_ROOT_ENV] {
                assert!(msg.contains(want), "{bad}: {msg} does not name {want}");
            }
            // DEL reads the driver's records only where they may be.
            assert_eq!(dir(bad, &e, Command::Del).unwrap(), Path::new(nic::prepared::DEFAULT_DIR), "{bad}");
        }
        e.prepared_root = "/srv/kubelet/plugins".into();
        let other = "/srv/kubelet/plugins/rdma.kuberdma.io/prepared";
        assert_eq!(dir(other, &e, Command::Add).unwrap(), Path::new(other));
        assert!(dir(own, &e, Command::Add).is_err(), "the root is the environment's");
    }

    #[test]
    fn the_roots_come_from_the_environment_and_must_be_absolute() {
        let get = |k: &str| match k {
            STATE_ROOT_ENV => Some("/srv/state".to_string()),
            PREPARED_ROOT_ENV => Some(String::new()),
            _ => None,
        };
        let e = read_env(Command::Status, &get).unwrap();
        assert_eq!(
            (e.state_root.as_path(), e.prepared_root.as_path()),
            (Path::new("/srv/state"), Path::new(DEFAULT_PREPARED_ROOT))
        );
        let rel = |k: &str| (k == PREPARED_ROOT_ENV).then(|| "plugins".to_string());
        let err = read_env(Command::Status, &rel).unwrap_err();
        assert!(err.to_string().contains(PREPARED_ROOT_ENV), "{err}");
    }

    #[test]
    fn mac_precedence_runtime_config_then_cni_args_then_config() {
        let mut e = env();
        e.args = Some("IgnoreUnknown=1;MAC=02:00:00:00:00:02".into());
        let c = parse(with("mac", json!("02:00:00:00:00:03")), &e, Command::Add).unwrap();
        assert_eq!(c.attach.unwrap().mac, Some([2, 0, 0, 0, 0, 2]));
        let mut v = with("mac", json!("02:00:00:00:00:03"));
        v["runtimeConfig"] = json!({"mac": "02:00:00:00:00:01"});
        let c = parse(v, &e, Command::Add).unwrap().attach.unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(c.vf.mac, c.mac, "the MAC is also the VF's administrative MAC (sriov-cni)");
    }

    #[test]
    fn vf_attributes_only_when_asked() {
        let c = add(base()).unwrap().attach.unwrap();
        assert!(c.vf.is_empty(), "no PF-side attribute requested: the PF is never touched");
        let mut v = base();
        for (k, x) in [
            ("vlan", json!(100)),
            ("vlanQoS", json!(5)),
            ("vlanProto", json!("802.1ad")),
            ("spoofchk", json!("off")),
            ("trust", json!("on")),
            ("link_state", json!("disable")),
            ("min_tx_rate", json!(10)),
            ("max_tx_rate", json!(0)),
        ] {
            v[k] = x;
        }
        let c = add(v).unwrap().attach.unwrap();
        assert_eq!(c.vf.vlan, Some(VfVlanSetting { id: 100, qos: 5, ad: true }));
        assert_eq!((c.vf.spoofchk, c.vf.trust), (Some(false), Some(true)));
        assert_eq!(c.vf.link_state, Some(VfLink::Disable));
        assert_eq!(c.vf.rate, Some((10, 0)), "max 0 means no limit, so min above it is fine");
    }

    #[test]
    fn keys_match_regardless_of_case_as_sriov_cni_reads_them() {
        let mut v = json!({"CNIVersion": "1.0.0", "Name": "n", "DeviceID": "0000:01:00.1"});
        for (k, x) in [
            ("MAC", json!("CA:FE:C0:FF:EE:00")),
            ("Vlan", json!(7)),
            ("SpoofChk", json!("off")),
            ("MTU", json!(1400)),
        ] {
            v[k] = x;
        }
        let c = add(v).unwrap();
        assert_eq!(c.cni_version, "1.0.0");
        let a = c.attach.unwrap();
        assert_eq!(a.mac, Some([0xca, 0xfe, 0xc0, 0xff, 0xee, 0x00]));
        assert_eq!(a.vf.vlan.map(|v| v.id), Some(7));
        assert_eq!((a.vf.spoofchk, a.mtu), (Some(false), Some(1400)));
        let e = add(
            json!({"cniVersion": "1.0.0", "name": "n", "deviceID": "0000:01:00.1", "vlan": 1, "VLAN": 2}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"VLAN\"") && e.to_string().contains("\"vlan\""), "{e}");
    }

    #[test]
    fn del_ignores_values_only_add_uses() {
        let mut e = env();
        e.args = Some("MAC=zz;broken".into());
        for (k, v) in [
            ("vlan", json!(5000)),
            ("mtu", json!(70000)),
            ("trust", json!("yes")),
            ("deviceID", json!("nope")),
            ("cniVersion", json!("9.9.9")),
            ("stateDir", json!("rel")),
        ] {
            let c =
                parse(with(k, v.clone()), &e, Command::Del).unwrap_or_else(|err| panic!("{k}={v}: {err}"));
            assert!(c.attach.is_none());
        }
        assert!(parse(with("vlan", json!(5000)), &env(), Command::Add).is_err());
        assert!(parse(base(), &e, Command::Add).is_err(), "ADD refuses a malformed CNI_ARGS");
    }

    #[test]
    fn del_takes_the_first_usable_device_source() {
        // Wrong types and case duplicates are ADD's problem: DEL falls through to the next source.
        let mut v = json!({"cniVersion": "1.1.0", "name": "n", "deviceID": 7, "pciBusID": "0000:01:00.4"});
        assert_eq!(
            parse(v.clone(), &env(), Command::Del).unwrap().device.unwrap().to_string(),
            "0000:01:00.4"
        );
        assert!(parse(v.clone(), &env(), Command::Add).is_err());
        v["deviceID"] = json!("0000:01:00.5");
        v["DeviceID"] = json!("0000:01:00.6");
        v["runtimeConfig"] = json!({"deviceID": ["x"]});
        assert_eq!(
            parse(v.clone(), &env(), Command::Del).unwrap().device.unwrap().to_string(),
            "0000:01:00.4"
        );
        let e = parse(v, &env(), Command::Add).unwrap_err();
        assert!(e.to_string().contains("runtimeConfig.deviceID"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named_and_what_runtimes_and_multus_add_is_not() {
        let mut v = base();
        for k in [
            "type",
            "ipam",
            "dns",
            "args",
            "runtimeConfig",
            "capabilities",
            "prevResult",
            "pciBusID",
            "disableCheck",
            "cni.dev/valid-attachments",
            "LogLevel",
            "preparedDir",
        ] {
            v[k] = json!({});
        }
        assert!(unknown_keys(&v).is_empty(), "{:?}", unknown_keys(&v));
        v["vlna"] = json!(3);
        v["kubernetes"] = json!({});
        assert_eq!(unknown_keys(&v), ["kubernetes", "vlna"]);
        assert_eq!(
            (suggest("vlna"), suggest("Spoofchek"), suggest("kubernetes")),
            (Some("vlan"), Some("spoofchk"), None)
        );
    }

    #[test]
    fn gc_reads_both_attachment_keys_and_needs_a_name() {
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let v =
                json!({"cniVersion": "1.1.0", "name": "n", key: [{"containerID": "a", "ifname": "net1"}]});
            let c = parse(v, &Env::default(), Command::Gc).unwrap();
            assert_eq!(
                c.valid_attachments.unwrap(),
                vec![Attachment { container_id: "a".into(), ifname: "net1".into() }]
            );
        }
        let c = parse(json!({"cniVersion": "1.1.0", "name": "n"}), &Env::default(), Command::Gc).unwrap();
        assert_eq!(c.valid_attachments, None);
        assert!(parse(json!({"cniVersion": "1.1.0"}), &Env::default(), Command::Gc).is_err());
    }

    #[test]
    fn network_names_follow_the_spec_except_for_del() {
        for bad in ["n/x", "-n", ".hidden", "n x", "ü"] {
            let e = add(with("name", json!(bad))).unwrap_err();
            assert!(e.to_string().contains("name") && e.code() == 7, "{bad}: {e}");
            let gc = json!({"cniVersion": "1.1.0", "name": bad, "cni.dev/valid-attachments": []});
            assert!(parse(gc, &Env::default(), Command::Gc).is_err(), "{bad}");
            assert!(parse(with("name", json!(bad)), &env(), Command::Del).is_ok(), "{bad}");
        }
        assert!(add(with("name", json!("rdma-net_1.v2"))).is_ok());
    }

    #[test]
    fn sriov_cni_keys_we_do_not_implement_are_refused_not_ignored() {
        let e = add(with("vlan_trunk", json!("10,20-30"))).unwrap_err();
        assert!(e.to_string().contains("vlan_trunk") && e.to_string().contains("not supported"), "{e}");
        let e = add(with("VLAN_Trunk", json!("10"))).unwrap_err();
        assert!(e.to_string().contains("VLAN_Trunk"), "{e}");
        // Go's zero value is no trunk; DEL never cares.
        assert!(add(with("vlan_trunk", json!(""))).is_ok());
        assert!(parse(with("vlan_trunk", json!("10")), &env(), Command::Del).is_ok());
    }

    #[test]
    fn an_empty_device_id_is_absent_and_named_when_nothing_else_names_the_vf() {
        // Multus writes "" when the pod got fewer devices than attachments.
        let v = json!({"cniVersion": "1.1.0", "name": "n", "deviceID": "", "pciBusID": ""});
        let e = add(v.clone()).unwrap_err();
        assert!(e.to_string().contains("deviceID") && e.to_string().contains("is empty"), "{e}");
        let mut e2 = env();
        e2.args = Some("K8S_POD_UID=p".into());
        assert!(parse(v.clone(), &e2, Command::Add).unwrap_err().to_string().contains("is empty"));
        assert_eq!(parse(v.clone(), &env(), Command::Del).unwrap().device, None);
        let mut v = v;
        v["runtimeConfig"] = json!({"deviceID": ""});
        v["pciBusID"] = json!("0000:01:00.4");
        assert_eq!(add(v).unwrap().device.unwrap().to_string(), "0000:01:00.4");
    }

    #[test]
    fn stdin_is_bounded() {
        assert_eq!(read_stdin(&b"{}"[..]).unwrap(), b"{}");
        let big = vec![b' '; STDIN_LIMIT + 1];
        let e = read_stdin(&big[..]).unwrap_err();
        assert!(e.to_string().contains("1048576"), "{e}");
        assert_eq!(read_stdin(&big[..STDIN_LIMIT]).unwrap().len(), STDIN_LIMIT);
    }

    #[test]
    fn names_and_macs() {
        assert!(valid_ifname("net1").is_ok());
        assert!(valid_ifname("a234567890123456").is_err());
        assert!(valid_ifname("..").is_err());
        assert!(valid_container_id("abc-1.2_3"));
        assert!(!valid_container_id("-abc") && !valid_container_id("a/b") && !valid_container_id(""));
        assert_eq!(parse_mac("02-AA-bb-cc-dd-ee"), Some([2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]));
        assert_eq!(parse_mac("02:aa:bb:cc:dd"), None);
        assert_eq!(fmt_mac(&[2, 0xaa, 0, 1, 2, 3]), "02:aa:00:01:02:03");
        assert_eq!(
            mac_from_args(Some("K8S_POD_NAME=x;MAC=02:00:00:00:00:01")).unwrap().as_deref(),
            Some("02:00:00:00:00:01")
        );
        assert!(mac_from_args(Some("a=b=c")).is_err());
    }
}
