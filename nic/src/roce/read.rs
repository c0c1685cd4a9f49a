//! The readers behind [`observe`]: sysfs and configfs files under the sysfs
//! root, DCB netlink, ethtool and the PFs' VF counters (`RTM_GETLINK`) from the
//! kernel or from a [`Recording`] of them, through the same decoders.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ethtool::{self, Ethtool, EthtoolAnswer, Ioctl, RecordedEthtool};
use super::write::{CmDir, CmDirMissing};
use super::*;
use crate::inventory::{Inventory, Netdev, RdmaDev};
use crate::netlink::dcb::{Dcb, IeeeState};
use crate::netlink::devlink::{Cmode, DevHandle, Devlink, ParamValue};
use crate::netlink::transport::{Client, Recorded, Transport, NETLINK_ROUTE};
use crate::netlink::vf_stats;
use crate::sysfs::{self, SysfsError};
use crate::Roots;

/// Reads the RoCE settings of every PF netdev (and shared-mode HCA netdev) of
/// `inv` from the node under `roots`, taking DCB, global pause and the fw LLDP
/// flag from `src`. Never fails: what cannot be read is `Unknown` with the
/// reason, what does not exist on this driver is `Unsupported`.
pub fn observe(roots: &Roots, inv: &Inventory, src: &DcbSource, opts: &ObserveOpts) -> NodeRoce {
    match src {
        DcbSource::Netlink => {
            let dcb = Dcb::open().map_err(|e| e.to_string());
            let ethtool = Ioctl::open().map_err(|e| format!("ethtool socket: {e}"));
            let devlink = has_ice(inv).then(|| Devlink::open().map_err(|e| e.to_string()));
            let link = Client::open(NETLINK_ROUTE).map_err(|e| format!("NETLINK_ROUTE socket: {e}"));
            observe_with(roots, inv, Kernel { dcb, ethtool, devlink, link }, opts)
        }
        DcbSource::Recorded(r) => {
            let dcb = Ok(Dcb::new(Recorded::replaying(r.dcb.clone())));
            let ethtool = Ok(RecordedEthtool::new(r.ethtool.clone()));
            let devlink = has_ice(inv)
                .then(|| Devlink::new(Recorded::replaying(r.devlink.clone())).map_err(|e| e.to_string()));
            let link = Ok(Client::new(Recorded::replaying(r.vf_stats.clone())));
            observe_with(roots, inv, Kernel { dcb, ethtool, devlink, link }, opts)
        }
    }
}

/// The kernel interfaces DCB, ethtool, devlink and VF counter reads go through,
/// or why one could not be opened (devlink: only opened on a node with an ice PF).
struct Kernel<T, E> {
    dcb: Result<Dcb<T>, String>,
    ethtool: Result<E, String>,
    devlink: Option<Result<Devlink<T>, String>>,
    /// `NETLINK_ROUTE` for the PFs' `RTM_GETLINK` (VF counters).
    link: Result<Client<T>, String>,
}

/// Whether the node has an E810 (ice) PF, the one driver whose RDMA protocol is a devlink parameter.
fn has_ice(inv: &Inventory) -> bool {
    inv.pfs.iter().any(|p| p.driver.as_deref() == Some("ice"))
}

/// An ice PF's RDMA protocol from its devlink parameters `enable_roce` /
/// `enable_iwarp` (runtime), checked against what discovery saw (the auxiliary
/// device kind). Where devlink has no answer (no devlink, or an older irdma
/// without these parameters) the discovered protocol stands.
fn devlink_protocol<T: Transport>(
    dl: &mut Option<Result<Devlink<T>, String>>,
    pci: PciAddr,
    discovered: Observed<RdmaProtocol>,
) -> Observed<RdmaProtocol> {
    let Some(Ok(d)) = dl else { return discovered };
    let h = DevHandle::pci(pci);
    let mut get =
        |name: &str| d.param_get(&h, name).map(|p| p.value(Cmode::Runtime) == Some(&ParamValue::Bool(true)));
    let by_devlink = match (get("enable_roce"), get("enable_iwarp")) {
        (Ok(true), Ok(false)) => RdmaProtocol::RoceV2,
        (Ok(false), Ok(true)) => RdmaProtocol::Iwarp,
        (Ok(false), Ok(false)) => RdmaProtocol::None,
        (Ok(true), Ok(true)) => {
            return Observed::Unknown(format!("{h}: devlink has both enable_roce and enable_iwarp on"))
        }
        (Err(e), _) | (_, Err(e)) => {
            if !e.is_unsupported() {
                tracing::debug!(%pci, error = %e, "devlink read failed; the auxiliary device kind stands");
            }
            return discovered;
        }
    };
    match discovered {
        Observed::Value(seen) if seen != by_devlink => Observed::Unknown(format!(
            "{h}: devlink says {by_devlink} (enable_roce/enable_iwarp) but the RDMA function runs {seen} \
             (ice did not replug its auxiliary device?)"
        )),
        _ => Observed::Value(by_devlink),
    }
}

fn observe_with<T: Transport, E: Ethtool>(
    roots: &Roots,
    inv: &Inventory,
    mut k: Kernel<T, E>,
    opts: &ObserveOpts,
) -> NodeRoce {
    let mut interfaces = Vec::new();
    for pf in &inv.pfs {
        for nd in pf.netdevs.iter().filter(|n| !is_representor(roots, &n.name)) {
            let target = Target {
                netdev: nd,
                kind: IfaceKind::Pf,
                pci: Some(pf.pci),
                driver: pf.driver.clone(),
                vendor: pf.vendor,
                device: pf.device,
                rdma: rdma_for(&pf.rdma, &nd.name),
                protocol: match pf.driver.as_deref() {
                    Some("ice") => devlink_protocol(
                        &mut k.devlink,
                        pf.pci,
                        Observed::from_option(
                            pf.rdma_protocol,
                            format!("{}: RDMA protocol unreadable (see the inventory's problems)", pf.pci),
                        ),
                    ),
                    _ => Observed::from_option(
                        pf.rdma_protocol,
                        format!("{}: RDMA protocol unreadable (see the inventory's problems)", pf.pci),
                    ),
                },
                num_vfs: Observed::from_option(pf.num_vfs, format!("{}: sriov_numvfs unreadable", pf.pci)),
                total_vfs: Observed::from_option(
                    pf.total_vfs,
                    format!("{}: sriov_totalvfs unreadable", pf.pci),
                ),
            };
            interfaces.push(observe_iface(roots, &target, &mut k, opts));
        }
    }
    for hca in &inv.hcas {
        for nd in hca.netdevs.iter().filter(|n| !is_representor(roots, &n.name)) {
            let no_sriov = || Observed::Unsupported("not an SR-IOV PF (shared-mode HCA)".into());
            let target = Target {
                netdev: nd,
                kind: IfaceKind::Hca,
                pci: hca.pci,
                driver: hca.driver.clone(),
                vendor: hca.vendor,
                device: hca.device,
                rdma: Some(&hca.rdma),
                protocol: Observed::from_option(
                    hca.rdma.protocol,
                    format!("{}: node_type unreadable (see the inventory's problems)", hca.rdma.name),
                ),
                num_vfs: no_sriov(),
                total_vfs: no_sriov(),
            };
            interfaces.push(observe_iface(roots, &target, &mut k, opts));
        }
    }
    let node = opts
        .node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| sysfs::read_string(Path::new("/proc/sys/kernel/hostname")).ok())
        .unwrap_or_else(|| "unknown".into());
    let rdma_vfs = inv.pfs.iter().flat_map(|p| &p.vfs).filter(|v| !v.rdma.is_empty()).count();
    let vf_counters = vf_port_counters(roots, inv);
    let vf_netdev_counters = vf_netdev_counters(roots, inv, &mut k.link);
    NodeRoce {
        node,
        interfaces,
        rdma_netns_mode: netns_mode(roots),
        rdma_vfs,
        vf_counters,
        vf_netdev_counters,
    }
}

/// The netdev counters of every VF of each SR-IOV PF: one `RTM_GETLINK` per PF,
/// which answers for all its VFs wherever their netdevs are (in a pod's
/// namespace included). A PF that cannot be read is logged and left out.
fn vf_netdev_counters<T: Transport>(
    roots: &Roots,
    inv: &Inventory,
    link: &mut Result<Client<T>, String>,
) -> Vec<VfNetdevCounters> {
    let mut out = Vec::new();
    for pf in inv.pfs.iter().filter(|p| p.num_vfs.unwrap_or(0) > 0 || !p.vfs.is_empty()) {
        let Some(nd) = pf.netdevs.iter().find(|n| !is_representor(roots, &n.name)) else {
            tracing::debug!(pci = %pf.pci, "PF without a netdev on the host: no VF counters through it");
            continue;
        };
        let client = match link {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no VF counters: the NETLINK_ROUTE socket could not be opened");
                return out;
            }
        };
        let Some(ifindex) = nd.ifindex else {
            tracing::debug!(pf = %nd.name, "PF ifindex unreadable: no VF counters through it");
            continue;
        };
        match vf_stats::read(client, ifindex) {
            Ok(r) => {
                for why in &r.skipped {
                    tracing::warn!(pf = %nd.name, reason = %why, "VF counters: an IFLA_VF_INFO entry was skipped");
                }
                let pf_name = &nd.name;
                out.extend(r.vfs.into_iter().map(|(vf, stats)| VfNetdevCounters {
                    pf: pf_name.clone(),
                    vf,
                    stats,
                }));
            }
            // The kernel refusing (or no socket) is the node's state; a reply that
            // does not decode is a bug worth seeing.
            Err(e @ vf_stats::ReadError::Netlink { .. }) => tracing::debug!(
                pf = %nd.name,
                error = %crate::error_chain(&e),
                "reading the VF counters through the PF failed; none for its VFs"
            ),
            Err(e) => tracing::warn!(
                pf = %nd.name,
                error = %crate::error_chain(&e),
                "the PF's VF counters reply does not decode; none for its VFs"
            ),
        }
    }
    out
}

/// Port counters of each VF RDMA device still in this namespace. One that the
/// CNI moved into a pod (exclusive netns mode) has left the host's `infiniband`
/// class: nothing here counts it.
fn vf_port_counters(roots: &Roots, inv: &Inventory) -> Vec<VfPortCounters> {
    let mut out = Vec::new();
    for pf in &inv.pfs {
        let pf_name = pf
            .netdevs
            .iter()
            .find(|n| !is_representor(roots, &n.name))
            .map_or_else(|| pf.pci.to_string(), |n| n.name.clone());
        for vf in &pf.vfs {
            for r in vf.rdma.iter().filter(|r| !r.in_other_netns) {
                let dir = roots.sys(format!("class/infiniband/{}/ports/1/counters", r.name));
                let counters = hw_counters(&dir);
                if !counters.is_empty() {
                    out.push(VfPortCounters {
                        pf: pf_name.clone(),
                        vf: vf.index,
                        rdma_dev: r.name.clone(),
                        counters,
                    });
                }
            }
        }
    }
    out
}

/// What `observe_iface` needs to know about one netdev from the inventory.
struct Target<'a> {
    netdev: &'a Netdev,
    kind: IfaceKind,
    pci: Option<PciAddr>,
    driver: Option<String>,
    vendor: Option<u16>,
    device: Option<u16>,
    rdma: Option<&'a RdmaDev>,
    protocol: Observed<RdmaProtocol>,
    num_vfs: Observed<u32>,
    total_vfs: Observed<u32>,
}

/// Switchdev representors (`pf0vf3`, `pf0sf1`) sit in the PF's `net/` too but
/// carry no RoCE settings of their own.
fn is_representor(roots: &Roots, netdev: &str) -> bool {
    let p = roots.sys(format!("class/net/{netdev}/phys_port_name"));
    match sysfs::read_string(&p) {
        Ok(name) => name.starts_with("pf") && (name.contains("vf") || name.contains("sf")),
        Err(_) => false,
    }
}

/// The RDMA device whose GID table binds `netdev`, else the only one.
fn rdma_for<'a>(devs: &'a [RdmaDev], netdev: &str) -> Option<&'a RdmaDev> {
    let bound = devs
        .iter()
        .find(|d| d.ports.iter().flat_map(|p| p.gids.iter()).any(|g| g.netdev.as_deref() == Some(netdev)));
    bound.or(if devs.len() == 1 { devs.first() } else { None })
}

fn why(e: &SysfsError) -> String {
    e.to_string()
}

fn read_u32(p: &Path) -> Observed<u32> {
    match sysfs::read_u32(p) {
        Ok(v) => Observed::Value(v),
        Err(e) => Observed::Unknown(why(&e)),
    }
}

fn read_bool01(p: &Path) -> Result<bool, SysfsError> {
    sysfs::read_u32(p).map(|v| v != 0)
}

fn speed(p: &Path) -> Observed<u32> {
    match sysfs::read_i64(p) {
        Ok(v) if v > 0 && v <= u32::MAX as i64 => Observed::Value(v as u32),
        Ok(v) => Observed::Unknown(format!("{}: {v} (link down or speed unknown)", p.display())),
        Err(e) if e.is_einval() => {
            Observed::Unknown(format!("{}: unreadable while the link is down", p.display()))
        }
        Err(e) => Observed::Unknown(why(&e)),
    }
}

fn observe_iface<T: Transport, E: Ethtool>(
    roots: &Roots,
    t: &Target<'_>,
    k: &mut Kernel<T, E>,
    opts: &ObserveOpts,
) -> InterfaceRoce {
    let name = t.netdev.name.as_str();
    let net = |f: &str| roots.sys(format!("class/net/{name}/{f}"));
    let mtu = read_u32(&net("mtu"));
    let active_mtu = mtu.clone().and_then(|m| match roce_active_mtu(m) {
        Some(a) => Observed::Value(a),
        None => Observed::Unknown(format!("netdev MTU {m} is below the smallest RoCE MTU (256 + 96)")),
    });
    let operstate = match sysfs::read_string(&net("operstate")) {
        Ok(s) => Observed::Value(s),
        Err(e) => Observed::Unknown(why(&e)),
    };
    let mlx5 = t.driver.as_deref() == Some("mlx5_core");
    let (ecn, ecn_detail, cnp) = ecn_and_cnp(&net("ecn"), mlx5, t.driver.as_deref());

    let rdma_name = t.rdma.map(|r| r.name.clone());
    fn no_rdma<T>(name: &str) -> Observed<T> {
        Observed::Unknown(format!("no RDMA device found for {name}"))
    }
    let (roce_mode, tos) = match &rdma_name {
        Some(d) => rdma_cm_defaults(roots, d, opts.read_rdma_cm_configfs),
        None => (no_rdma(name), no_rdma(name)),
    };
    let gid_index = match t.rdma {
        Some(r) => Observed::from_option(
            r.roce_v2_gid_index(name),
            format!("{}: no RoCE v2 GID bound to {name} (no IP address on it?)", r.name),
        ),
        None => no_rdma(name),
    };
    let (port_state, hw_counters, port_counters) = match &rdma_name {
        Some(d) => {
            let port = roots.sys(format!("class/infiniband/{d}/ports/1"));
            let state = match sysfs::read_string(&port.join("state")) {
                // "4: ACTIVE"
                Ok(s) => Observed::Value(s.split_once(':').map(|(_, n)| n.trim().to_string()).unwrap_or(s)),
                Err(e) => Observed::Unknown(why(&e)),
            };
            (state, hw_counters(&port.join("hw_counters")), hw_counters(&port.join("counters")))
        }
        None => (no_rdma(name), BTreeMap::new(), BTreeMap::new()),
    };

    let legacy_trust = legacy_trust(&net("qos/trust"));
    let trust_file = legacy_trust.is_some();
    let d = dcb_part(k, name, legacy_trust);

    InterfaceRoce {
        netdev: name.to_string(),
        kind: t.kind,
        pci: t.pci,
        driver: t.driver.clone(),
        rdma_dev: rdma_name,
        vendor: t.vendor,
        device: t.device,
        speed_mbps: speed(&net("speed")),
        mtu,
        active_mtu,
        operstate,
        dcbx: d.dcbx,
        dcbx_bits: d.dcbx_bits,
        trust: d.trust,
        trust_file,
        dscp_to_priority: d.dscp_to_priority,
        pfc: d.pfc,
        ets: d.ets,
        global_pause: d.global_pause,
        ecn,
        ecn_detail,
        cnp,
        roce_mode,
        tos,
        gid_index,
        port_state,
        hw_counters,
        port_counters,
        num_vfs: t.num_vfs.clone(),
        total_vfs: t.total_vfs.clone(),
        fw_lldp_agent: d.fw_lldp_agent,
        fec: d.fec,
        rdma_protocol: t.protocol.clone(),
    }
}

/// NVIDIA OFED's `ecn/roce_{np,rp}/enable/<prio>` and `ecn/roce_np/cnp_*`.
fn ecn_and_cnp(
    ecn_dir: &Path,
    mlx5: bool,
    driver: Option<&str>,
) -> (Observed<Vec<u8>>, Observed<Ecn>, Observed<Cnp>) {
    if !sysfs::exists(ecn_dir) {
        let why = if mlx5 {
            "no NVIDIA OFED ECN sysfs (upstream mlx5)".to_string()
        } else {
            format!("no NVIDIA OFED ECN sysfs (driver {})", driver.unwrap_or("unknown"))
        };
        return (
            Observed::Unsupported(why.clone()),
            Observed::Unsupported(why.clone()),
            Observed::Unsupported(why),
        );
    }
    let role = |r: &str| -> Result<Vec<u8>, SysfsError> {
        let mut on = Vec::new();
        for p in 0u8..8 {
            if read_bool01(&ecn_dir.join(format!("{r}/enable/{p}")))? {
                on.push(p);
            }
        }
        Ok(on)
    };
    let detail = match (role("roce_np"), role("roce_rp")) {
        (Ok(np), Ok(rp)) => Observed::Value(Ecn { np, rp }),
        (Err(e), _) | (_, Err(e)) => Observed::Unknown(why(&e)),
    };
    let both = detail.clone().map(|e| e.np.iter().copied().filter(|p| e.rp.contains(p)).collect());
    let byte = |f: &str| -> Result<u8, String> {
        let p = ecn_dir.join("roce_np").join(f);
        let v = sysfs::read_u32(&p).map_err(|e| why(&e))?;
        u8::try_from(v).map_err(|_| format!("{}: {v} out of range", p.display()))
    };
    let cnp = match (byte("cnp_dscp"), byte("cnp_802p_prio")) {
        (Ok(dscp), Ok(priority)) => Observed::Value(Cnp { dscp, priority }),
        (Err(e), _) | (_, Err(e)) => Observed::Unknown(e),
    };
    (both, detail, cnp)
}

/// rdma_cm defaults from configfs: `kernel/config/rdma_cm/<dev>/ports/1/default_roce_{mode,tos}`.
/// Making the `<dev>` directory is opt-in ([`CmDir`]).
fn rdma_cm_defaults(roots: &Roots, dev: &str, may_create: bool) -> (Observed<String>, Observed<u8>) {
    let both = |o: Observed<()>| (o.clone().map(|_| String::new()), o.map(|_| 0u8));
    let dir = match CmDir::open(roots, dev, may_create) {
        Ok(d) => d,
        Err(CmDirMissing::NoConfigfs(base)) => {
            return both(Observed::Unsupported(format!(
                "{}: no rdma_cm configfs (configfs not mounted or rdma_cm not loaded)",
                base.display()
            )))
        }
        Err(CmDirMissing::NotCreated(dir)) => {
            return both(Observed::Unknown(format!(
                "{} does not exist; reading the rdma_cm defaults needs mkdir (enable read_rdma_cm_configfs)",
                dir.display()
            )))
        }
        Err(CmDirMissing::Mkdir(dir, e)) => {
            return both(Observed::Unknown(format!("mkdir {}: {e}", dir.display())))
        }
    };
    let port = dir.path.join("ports/1");
    let mode = match sysfs::read_string(&port.join("default_roce_mode")) {
        Ok(s) => Observed::Value(s),
        Err(e) => Observed::Unknown(why(&e)),
    };
    let tos = match sysfs::read_u32(&port.join("default_roce_tos")) {
        Ok(v) => u8::try_from(v)
            .map(Observed::Value)
            .unwrap_or_else(|_| Observed::Unknown(format!("ToS {v} out of range"))),
        Err(e) => Observed::Unknown(why(&e)),
    };
    (mode, tos)
}

/// A directory of counter files (`hw_counters/`, `counters/`): name → value,
/// files that do not read as a number left out.
fn hw_counters(dir: &Path) -> BTreeMap<String, u64> {
    let Ok(names) = sysfs::list_dir(dir) else { return BTreeMap::new() };
    names
        .into_iter()
        .filter_map(|n| {
            let v = sysfs::read_string(&dir.join(&n)).ok()?.parse::<u64>().ok()?;
            Some((n, v))
        })
        .collect()
}

/// The OFED `qos/trust` file ("pcp" / "dscp", sometimes "Priority trust state: dscp").
fn legacy_trust(p: &Path) -> Option<Observed<Trust>> {
    match sysfs::read_string(p) {
        Ok(s) if s.contains("dscp") => Some(Observed::Value(Trust::Dscp)),
        Ok(s) if s.contains("pcp") => Some(Observed::Value(Trust::Pcp)),
        Ok(s) => Some(Observed::Unknown(format!("{}: unexpected contents {s:?}", p.display()))),
        Err(e) if e.is_not_found() => None,
        Err(e) => Some(Observed::Unknown(why(&e))),
    }
}

fn netns_mode(roots: &Roots) -> Observed<NetnsMode> {
    // ib_core's `netns_mode` parameter is the variable `rdma system set netns`
    // changes (ib_devices_shared_netns), so it reads the current mode.
    let p: PathBuf = roots.sys("module/ib_core/parameters/netns_mode");
    match sysfs::read_string(&p) {
        Ok(s) if s == "Y" || s == "1" => Observed::Value(NetnsMode::Shared),
        Ok(s) if s == "N" || s == "0" => Observed::Value(NetnsMode::Exclusive),
        Ok(s) => Observed::Unknown(format!("{}: unexpected contents {s:?}", p.display())),
        Err(e) if e.is_not_found() => Observed::Unsupported("ib_core is not loaded".into()),
        Err(e) => Observed::Unknown(why(&e)),
    }
}

/// The settings that come from DCB netlink + ethtool.
struct DcbPart {
    dcbx: Observed<DcbxMode>,
    dcbx_bits: Observed<u8>,
    trust: Observed<Trust>,
    dscp_to_priority: Observed<BTreeMap<u8, u8>>,
    pfc: Observed<IeeePfc>,
    ets: Observed<IeeeEts>,
    global_pause: Observed<bool>,
    fw_lldp_agent: Observed<bool>,
    fec: Observed<String>,
}

impl DcbPart {
    /// Every field `Unknown` (or `Unsupported`) for the same reason.
    fn all(reason: &str, unsupported: bool) -> Self {
        fn o<T>(r: &str, unsupported: bool) -> Observed<T> {
            if unsupported {
                Observed::Unsupported(r.to_string())
            } else {
                Observed::Unknown(r.to_string())
            }
        }
        Self {
            dcbx: o(reason, unsupported),
            dcbx_bits: o(reason, unsupported),
            trust: o(reason, unsupported),
            dscp_to_priority: o(reason, unsupported),
            pfc: o(reason, unsupported),
            ets: o(reason, unsupported),
            global_pause: o(reason, unsupported),
            fw_lldp_agent: o(reason, unsupported),
            fec: o(reason, unsupported),
        }
    }
}

/// `DCB_CAP_DCBX_*` bits → mode ([`DcbxMode::from_bits`]), or why they name none.
pub(crate) fn dcbx_mode(bits: u8) -> Observed<DcbxMode> {
    Observed::from_option(
        DcbxMode::from_bits(bits),
        format!("DCBX bits {bits:#04x} name neither host nor LLD-managed"),
    )
}

/// The DCB part of one netdev from an `IEEE_GET` reply.
#[allow(clippy::type_complexity)]
fn dcb_from_ieee(
    s: &IeeeState,
    legacy_trust: Option<Observed<Trust>>,
) -> (
    Observed<DcbxMode>,
    Observed<u8>,
    Observed<Trust>,
    Observed<BTreeMap<u8, u8>>,
    Observed<IeeePfc>,
    Observed<IeeeEts>,
) {
    let name = s.ifname.clone().unwrap_or_default();
    let (dcbx, bits) = match s.dcbx {
        Some(b) => (dcbx_mode(b), Observed::Value(b)),
        None => {
            let r = format!("{name}: driver reports no DCBX mode (no getdcbx)");
            (Observed::Unsupported(r.clone()), Observed::Unsupported(r))
        }
    };
    let map = s.dscp_map();
    let trust =
        legacy_trust.unwrap_or(Observed::Value(if map.is_empty() { Trust::Pcp } else { Trust::Dscp }));
    let pfc = match &s.pfc {
        Some(p) => Observed::Value(*p),
        None => Observed::Unsupported(format!("{name}: driver reports no IEEE PFC")),
    };
    let ets = match &s.ets {
        Some(e) => Observed::Value(*e),
        None => Observed::Unsupported(format!("{name}: driver reports no IEEE ETS")),
    };
    (dcbx, bits, trust, Observed::Value(map), pfc, ets)
}

fn dcb_part<T: Transport, E: Ethtool>(
    k: &mut Kernel<T, E>,
    name: &str,
    legacy: Option<Observed<Trust>>,
) -> DcbPart {
    let (global_pause, fw_lldp_agent, fec) = match &mut k.ethtool {
        Ok(e) => {
            let pause = match ethtool::pause(e, name) {
                Ok(EthtoolAnswer::Value((_, rx, tx))) => Observed::Value(rx || tx),
                Ok(EthtoolAnswer::Unsupported(r)) => Observed::Unsupported(format!("{name}: {r}")),
                Err(e) => Observed::Unknown(format!("{name}: ETHTOOL_GPAUSEPARAM: {e}")),
            };
            let lldp = match ethtool::priv_flag(e, name, "fw-lldp-agent") {
                Ok(EthtoolAnswer::Value(v)) => Observed::Value(v),
                Ok(EthtoolAnswer::Unsupported(r)) => Observed::Unsupported(format!("{name}: {r}")),
                Err(e) => Observed::Unknown(format!("{name}: ethtool private flags: {e}")),
            };
            let fec = match ethtool::fec(e, name) {
                Ok(EthtoolAnswer::Value(v)) => Observed::Value(v),
                Ok(EthtoolAnswer::Unsupported(r)) => Observed::Unsupported(format!("{name}: {r}")),
                Err(e) => Observed::Unknown(format!("{name}: ETHTOOL_GFECPARAM: {e}")),
            };
            (pause, lldp, fec)
        }
        Err(e) => (Observed::Unknown(e.clone()), Observed::Unknown(e.clone()), Observed::Unknown(e.clone())),
    };
    let dcb = match &mut k.dcb {
        Ok(c) => c,
        Err(e) => {
            let mut p = DcbPart::all(e, false);
            p.global_pause = global_pause;
            p.fw_lldp_agent = fw_lldp_agent;
            p.fec = fec;
            return p;
        }
    };
    match dcb.get_ieee(name) {
        Ok(state) => {
            let (dcbx, dcbx_bits, trust, dscp_to_priority, pfc, ets) = dcb_from_ieee(&state, legacy);
            DcbPart { dcbx, dcbx_bits, trust, dscp_to_priority, pfc, ets, global_pause, fw_lldp_agent, fec }
        }
        Err(e) => {
            if !e.is_unsupported() {
                tracing::debug!(netdev = name, error = %e, "DCB netlink read failed");
            }
            let mut p = DcbPart::all(&crate::error_chain(&e), e.is_unsupported());
            if let Some(t) = legacy {
                p.trust = t;
            }
            p.global_pause = global_pause;
            p.fw_lldp_agent = fw_lldp_agent;
            p.fec = fec;
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::dcb::{DcbApp, IeeePfc, Priorities};

    #[test]
    fn trust_is_inferred_from_dscp_app_entries_unless_the_legacy_file_says() {
        let mut s = IeeeState { ifname: Some("eth0".into()), ..Default::default() };
        let (.., trust, map, pfc, ets) = dcb_from_ieee(&s, None);
        assert_eq!(trust, Observed::Value(Trust::Pcp));
        assert_eq!(map, Observed::Value(BTreeMap::new()));
        assert!(pfc.is_unsupported() && ets.is_unsupported());

        s.apps = vec![DcbApp::dscp(26, 3), DcbApp { selector: 255, priority: 1, protocol: 1 }];
        s.pfc =
            Some(IeeePfc { pfc_cap: 8, pfc_en: Priorities::from_bits(0x48), delay: 7, ..Default::default() });
        s.dcbx = Some(0x0a);
        let (dcbx, bits, trust, map, pfc, _) = dcb_from_ieee(&s, None);
        assert_eq!(dcbx, Observed::Value(DcbxMode::Firmware));
        assert_eq!(bits, Observed::Value(0x0a));
        assert_eq!(trust, Observed::Value(Trust::Dscp));
        assert_eq!(map, Observed::Value(BTreeMap::from([(26, 3)])));
        assert_eq!(pfc.value().unwrap().enabled_priorities(), vec![3, 6]);

        let (_, _, trust, ..) = dcb_from_ieee(&s, Some(Observed::Value(Trust::Pcp)));
        assert_eq!(trust, Observed::Value(Trust::Pcp));
    }

    #[test]
    fn dcbx_bits_map_to_modes() {
        assert_eq!(dcbx_mode(0x09), Observed::Value(DcbxMode::Os));
        assert_eq!(dcbx_mode(0x0a), Observed::Value(DcbxMode::Firmware));
        assert_eq!(dcbx_mode(0x06), Observed::Value(DcbxMode::Firmware));
        assert!(dcbx_mode(0x08).is_unknown());
        assert_eq!(DcbxMode::Os.bits(), 0x09);
        assert_eq!(DcbxMode::Firmware.bits(), 0x0a);
    }

    #[test]
    fn legacy_trust_file_contents() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("trust");
        assert_eq!(legacy_trust(&p), None);
        std::fs::write(&p, "Priority trust state: dscp\n").unwrap();
        assert_eq!(legacy_trust(&p), Some(Observed::Value(Trust::Dscp)));
        std::fs::write(&p, "pcp\n").unwrap();
        assert_eq!(legacy_trust(&p), Some(Observed::Value(Trust::Pcp)));
        std::fs::write(&p, "what\n").unwrap();
        assert!(legacy_trust(&p).unwrap().is_unknown());
    }
}
