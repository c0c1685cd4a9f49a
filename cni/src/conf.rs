//! The plugin's inputs: CNI environment variables and the network
//! configuration on stdin, validated into plain values before anything is
//! touched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use nic::netlink::vf::{VfLink, VfSettings, VfVlanSetting};
use nic::PciAddr;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

/// Default state directory (DESIGN.md).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/kube-rdma";

/// The CNI operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// ADD.
    Add,
    /// DEL.
    Del,
    /// CHECK.
    Check,
    /// STATUS.
    Status,
    /// GC.
    Gc,
    /// VERSION.
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
    /// `CNI_ARGS`, parsed `K=V;...`.
    pub args: BTreeMap<String, String>,
    /// `CNI_PATH` directories.
    pub path: Vec<PathBuf>,
}

/// Reads a variable through `get` (so tests need not touch the process env).
pub fn read_env(cmd: Command, get: &dyn Fn(&str) -> Option<String>) -> Result<Env> {
    let need = |var: &'static str| -> Result<String> {
        match get(var) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(Error::Env { var, why: format!("missing (required for {cmd:?})") }),
        }
    };
    let mut env = Env::default();
    let needs_container = matches!(cmd, Command::Add | Command::Del | Command::Check);
    if needs_container {
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
    if matches!(cmd, Command::Add | Command::Check) {
        env.netns = need("CNI_NETNS")?;
    } else {
        env.netns = get("CNI_NETNS").unwrap_or_default();
    }
    if let Some(a) = get("CNI_ARGS") {
        for kv in a.split(';').filter(|s| !s.is_empty()) {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(Error::Env { var: "CNI_ARGS", why: format!("{kv:?} is not KEY=VALUE") });
            };
            env.args.insert(k.to_string(), v.to_string());
        }
    }
    env.path =
        get("CNI_PATH").unwrap_or_default().split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect();
    Ok(env)
}

/// CNI spec: container ID is alphanumeric plus `_ . -`, non-empty.
pub fn valid_container_id(s: &str) -> bool {
    s.len() <= 1024
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
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

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeConfig {
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    mac: Option<String>,
    #[serde(rename = "CNIDeviceInfoFile")]
    cni_device_info_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    cni_version: String,
    #[serde(default)]
    name: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    #[serde(rename = "pciBusID")]
    pci_bus_id: Option<String>,
    vlan: Option<i64>,
    #[serde(rename = "vlanQoS")]
    vlan_qos: Option<i64>,
    vlan_proto: Option<String>,
    mac: Option<String>,
    spoofchk: Option<String>,
    trust: Option<String>,
    #[serde(rename = "link_state")]
    link_state: Option<String>,
    #[serde(rename = "min_tx_rate")]
    min_tx_rate: Option<i64>,
    #[serde(rename = "max_tx_rate")]
    max_tx_rate: Option<i64>,
    mtu: Option<i64>,
    rdma: Option<String>,
    ipam: Option<Value>,
    state_dir: Option<String>,
    log_level: Option<String>,
    log_file: Option<String>,
    #[serde(default)]
    runtime_config: RuntimeConfig,
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<Attachment>>,
    #[serde(rename = "cni.dev/attachments")]
    attachments: Option<Vec<Attachment>>,
}

/// One `{containerID, ifname}` pair of a GC request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    /// Container ID.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name.
    pub ifname: String,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `cniVersion` as given.
    pub cni_version: String,
    /// Network name.
    pub name: String,
    /// The VF (absent only where allowed: DEL, STATUS, GC, VERSION).
    pub device: Option<PciAddr>,
    /// PF-side VF attributes requested (empty: none; the PF is not touched).
    pub vf: VfSettings,
    /// MAC for the VF netdev in the pod.
    pub mac: Option<[u8; 6]>,
    /// MTU for the VF netdev in the pod.
    pub mtu: Option<u32>,
    /// RDMA handling.
    pub rdma: RdmaMode,
    /// The `ipam` section, if any.
    pub ipam: Option<Value>,
    /// IPAM plugin type.
    pub ipam_type: Option<String>,
    /// State directory.
    pub state_dir: PathBuf,
    /// Log level.
    pub log_level: Option<String>,
    /// Log file.
    pub log_file: Option<String>,
    /// `runtimeConfig.CNIDeviceInfoFile`.
    pub device_info_file: Option<PathBuf>,
    /// `prevResult`.
    pub prev_result: Option<Value>,
    /// GC: attachments to keep (`None`: not a GC request or none given).
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The raw stdin JSON (forwarded to IPAM).
    pub raw: Value,
}

/// Parses a MAC `aa:bb:cc:dd:ee:ff` (also `-` separated).
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

fn on_off(field: &str, v: &Option<String>) -> Result<Option<bool>> {
    match v.as_deref() {
        None => Ok(None),
        Some("on") => Ok(Some(true)),
        Some("off") => Ok(Some(false)),
        Some(o) => Err(Error::config(field, format!("{o:?} is not \"on\" or \"off\""))),
    }
}

/// Decodes stdin. Malformed JSON is code 6; well-formed but wrong is 7;
/// an unknown `cniVersion` is 1.
pub fn parse(stdin: &[u8], env: &Env, cmd: Command) -> Result<NetConf> {
    let raw: Value = serde_json::from_slice(stdin).map_err(|e| Error::Decode(e.to_string()))?;
    if !raw.is_object() {
        return Err(Error::Decode("the network configuration must be a JSON object".into()));
    }
    let r: Raw = serde_json::from_value(raw.clone()).map_err(|e| Error::config("(stdin)", e.to_string()))?;
    if !crate::SUPPORTED_VERSIONS.contains(&r.cni_version.as_str()) {
        return Err(Error::Version { requested: r.cni_version });
    }
    let dev_str = r.runtime_config.device_id.clone().or(r.device_id.clone()).or(r.pci_bus_id.clone());
    let device = match dev_str {
        Some(s) => Some(s.parse::<PciAddr>().map_err(|e| Error::config("deviceID", e.to_string()))?),
        None => None,
    };
    if device.is_none() && matches!(cmd, Command::Add | Command::Check) {
        return Err(Error::config(
            "deviceID",
            "missing: set deviceID (Multus fills it from the device plugin), runtimeConfig.deviceID or pciBusID",
        ));
    }
    let mut vf = VfSettings::default();
    if let Some(id) = r.vlan {
        if !(0..=4095).contains(&id) {
            return Err(Error::config("vlan", format!("{id} is outside 0..4095")));
        }
        let qos = r.vlan_qos.unwrap_or(0);
        if !(0..=7).contains(&qos) {
            return Err(Error::config("vlanQoS", format!("{qos} is outside 0..7")));
        }
        let ad = match r.vlan_proto.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("802.1q") => false,
            Some("802.1ad") => true,
            Some(o) => {
                return Err(Error::config("vlanProto", format!("{o:?} is not \"802.1q\" or \"802.1ad\"")))
            }
        };
        if id == 0 && (qos != 0 || ad) {
            return Err(Error::config("vlan", "vlanQoS or vlanProto 802.1ad need a non-zero vlan"));
        }
        vf.vlan = Some(VfVlanSetting { id: id as u16, qos: qos as u8, ad });
    } else if r.vlan_qos.is_some() || r.vlan_proto.is_some() {
        return Err(Error::config("vlan", "vlanQoS/vlanProto given without vlan"));
    }
    vf.spoofchk = on_off("spoofchk", &r.spoofchk)?;
    vf.trust = on_off("trust", &r.trust)?;
    vf.link_state = match r.link_state.as_deref() {
        None => None,
        Some("auto") => Some(VfLink::Auto),
        Some("enable") => Some(VfLink::Enable),
        Some("disable") => Some(VfLink::Disable),
        Some(o) => return Err(Error::config("link_state", format!("{o:?} is not auto, enable or disable"))),
    };
    let rate = |f: &str, v: Option<i64>| -> Result<Option<u32>> {
        match v {
            None => Ok(None),
            Some(x) if (0..=u32::MAX as i64).contains(&x) => Ok(Some(x as u32)),
            Some(x) => Err(Error::config(f, format!("{x} is not a rate in Mb/s"))),
        }
    };
    let (min, max) = (rate("min_tx_rate", r.min_tx_rate)?, rate("max_tx_rate", r.max_tx_rate)?);
    if min.is_some() || max.is_some() {
        let (mn, mx) = (min.unwrap_or(0), max.unwrap_or(0));
        if mx != 0 && mn > mx {
            return Err(Error::config("min_tx_rate", format!("{mn} is above max_tx_rate {mx}")));
        }
        vf.rate = Some((mn, mx));
    }
    let mac_src = r
        .runtime_config
        .mac
        .clone()
        .map(|m| ("runtimeConfig.mac", m))
        .or_else(|| env.args.get("MAC").map(|m| ("CNI_ARGS MAC", m.clone())))
        .or_else(|| r.mac.clone().map(|m| ("mac", m)));
    let mac = match mac_src {
        None => None,
        Some((field, m)) => {
            let mac =
                parse_mac(&m).ok_or_else(|| Error::config(field, format!("{m:?} is not a MAC address")))?;
            if mac[0] & 1 == 1 {
                return Err(Error::config(field, format!("{m} is a multicast address")));
            }
            if mac == [0; 6] {
                return Err(Error::config(field, "00:00:00:00:00:00 is not usable"));
            }
            Some(mac)
        }
    };
    let mtu = match r.mtu {
        None => None,
        Some(m) if (68..=65535).contains(&m) => Some(m as u32),
        Some(m) => return Err(Error::config("mtu", format!("{m} is outside 68..65535"))),
    };
    let rdma = match r.rdma.as_deref() {
        None | Some("auto") => RdmaMode::Auto,
        Some("required") => RdmaMode::Required,
        Some("disabled") => RdmaMode::Disabled,
        Some(o) => return Err(Error::config("rdma", format!("{o:?} is not auto, required or disabled"))),
    };
    let ipam_type = match &r.ipam {
        None => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(Value::Object(m)) => match m.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() && !t.contains('/') && t != "." && t != ".." => Some(t.to_string()),
            _ => return Err(Error::config("ipam.type", "missing or not a plain plugin name")),
        },
        Some(_) => return Err(Error::config("ipam", "must be an object")),
    };
    let state_dir = PathBuf::from(r.state_dir.clone().unwrap_or_else(|| DEFAULT_STATE_DIR.into()));
    if !state_dir.is_absolute() {
        return Err(Error::config("stateDir", "must be an absolute path"));
    }
    if r.kind != "kube-rdma-cni" && !r.kind.is_empty() {
        tracing::debug!(kind = %r.kind, "plugin invoked under another type name");
    }
    Ok(NetConf {
        cni_version: r.cni_version,
        name: r.name,
        device,
        vf,
        mac,
        mtu,
        rdma,
        ipam: r.ipam.filter(|v| v.as_object().is_some_and(|m| !m.is_empty())),
        ipam_type,
        state_dir,
        log_level: r.log_level,
        log_file: r.log_file,
        device_info_file: r.runtime_config.cni_device_info_file.map(PathBuf::from),
        prev_result: r.prev_result,
        valid_attachments: r.valid_attachments.or(r.attachments),
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env { container_id: "c".into(), ifname: "net1".into(), netns: "/x".into(), ..Env::default() }
    }

    #[test]
    fn device_id_precedence_runtime_config_then_top_level_then_pci_bus_id() {
        let c = parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"kube-rdma-cni","pciBusID":"0000:01:00.3","deviceID":"0000:01:00.2","runtimeConfig":{"deviceID":"0000:01:00.1"}}"#,
            &env(),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.device.unwrap().to_string(), "0000:01:00.1");
        let c = parse(br#"{"cniVersion":"1.1.0","pciBusID":"0000:01:00.3"}"#, &env(), Command::Add).unwrap();
        assert_eq!(c.device.unwrap().to_string(), "0000:01:00.3");
    }

    #[test]
    fn mac_precedence_runtime_config_then_cni_args_then_config() {
        let mut e = env();
        e.args.insert("MAC".into(), "02:00:00:00:00:02".into());
        let c = parse(
            br#"{"cniVersion":"1.1.0","deviceID":"0000:01:00.1","mac":"02:00:00:00:00:03"}"#,
            &e,
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 2]));
        let c = parse(
            br#"{"cniVersion":"1.1.0","deviceID":"0000:01:00.1","mac":"02:00:00:00:00:03","runtimeConfig":{"mac":"02:00:00:00:00:01"}}"#,
            &e,
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn vf_attributes_only_when_asked() {
        let c = parse(br#"{"cniVersion":"1.0.0","deviceID":"0000:01:00.1"}"#, &env(), Command::Add).unwrap();
        assert!(c.vf.is_empty(), "no PF-side attribute requested: the PF is never touched");
        let c = parse(
            br#"{"cniVersion":"1.0.0","deviceID":"0000:01:00.1","vlan":100,"vlanQoS":5,"vlanProto":"802.1ad","spoofchk":"off","trust":"on","link_state":"disable","min_tx_rate":10,"max_tx_rate":0}"#,
            &env(),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.vf.vlan, Some(VfVlanSetting { id: 100, qos: 5, ad: true }));
        assert_eq!((c.vf.spoofchk, c.vf.trust), (Some(false), Some(true)));
        assert_eq!(c.vf.link_state, Some(VfLink::Disable));
        assert_eq!(c.vf.rate, Some((10, 0)), "max 0 means no limit, so min above it is fine");
    }

    #[test]
    fn gc_accepts_both_attachment_keys() {
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let s = format!(r#"{{"cniVersion":"1.1.0","{key}":[{{"containerID":"a","ifname":"net1"}}]}}"#);
            let c = parse(s.as_bytes(), &Env::default(), Command::Gc).unwrap();
            assert_eq!(
                c.valid_attachments.unwrap(),
                vec![Attachment { container_id: "a".into(), ifname: "net1".into() }]
            );
        }
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
    }
}
