//! The kernel's answers to the DCB netlink and ethtool reads of the node's
//! ports, recorded from the description's RoCE settings with the codecs the
//! reader decodes them with ([`crate::netlink::dcb`], the ethtool layouts of
//! [`crate::roce`]). A reader given [`Sim::recording`] as
//! [`DcbSource::Recorded`](crate::roce::DcbSource::Recorded) takes the same
//! path as on hardware; a test can corrupt a recorded datagram and see what
//! the agent makes of a bad reply.
//!
//! What the recording holds, per PF (and shared-mode HCA) netdev:
//! - `RTM_GETDCB DCB_CMD_IEEE_GET`, answered as `dcbnl_ieee_fill` (net/dcb/dcbnl.c)
//!   lays it out: `DCB_ATTR_IFNAME`, then `DCB_ATTR_IEEE { ETS, [MAXRATE], PFC,
//!   [DCB_BUFFER], APP_TABLE }` (mlx5 implements the bracketed ones), then
//!   `DCB_ATTR_DCBX`; then the ACK, a datagram of its own.
//!   - ETS is the driver's boot default: mlx5 (`mlx5e_ets_init`) 8 TCs of
//!     vendor TSA, priority *i* on TC *i* except priorities 0 and 1 swapped;
//!     ice (`ice_dcb_sw_dflt_cfg`) everything on TC 0 with ETS 100%.
//!   - PFC: `roce.pfc`, `pfcDelay`, the `pfcRequests`/`pfcIndications` counters.
//!   - APP: the `dscpToPriority` entries, except on a port without the OFED
//!     `qos/trust` file whose `trust` is `pcp`: upstream drivers trust DSCP
//!     exactly while DSCP entries exist, so such a port has none.
//!   - DCBX: `DCB_CAP_DCBX_HOST` (os) or `LLD_MANAGED` (firmware), IEEE.
//! - `ETHTOOL_GPAUSEPARAM`: rx and tx pause = `globalPause`, no autoneg.
//! - Per SR-IOV PF with VFs: `RTM_GETLINK` with `RTEXT_FILTER_VF` (the VF
//!   counters, [`crate::netlink::vf_stats`]), answered with `IFLA_NUM_VF` and
//!   each VF's `IFLA_VF_MAC` and `IFLA_VF_STATS` (mlx5 and ice both implement
//!   `ndo_get_vf_stats`), then the ACK. The description has no traffic, so the
//!   counters are a fixed function of the VF index, [`sim_vf_stats`], whether
//!   the VF's netdev is on the host or in a pod.
//! - The private flags (`ETHTOOL_GSSET_INFO`, `GSTRINGS`, `GPFLAGS`): ice's
//!   (ice_ethtool.c) with `fw-lldp-agent` = `fwLldpAgent`, or mlx5's
//!   (en_ethtool.c), which have no `fw-lldp-agent`.

use netlink_packet_core::{
    ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};

use super::desc::{Model, PfDesc};
use super::layout::Role;
use super::Sim;
use crate::inventory::RdmaProtocol;
use crate::netlink::dcb::{
    cmd, AppAttr, DcbApp, DcbAttr, DcbBuffer, DcbMsg, IeeeAttr, IeeeEts, IeeeMaxrate, IeeePfc, Priorities,
    RTM_GETDCB,
};
use crate::netlink::devlink::{
    recorded as devlink_recorded, Cmode, DevHandle, Param, ParamReply, ParamType, ParamValue,
};
use crate::netlink::transport::{emit, request_message, Exchange};
use crate::netlink::vf_stats::{new_link_reply, stats_request, LinkBody, VfEntry, VfStats};
use crate::roce::{EthtoolExchange, Recording, Trust};

/// `IEEE_8021QAZ_TSA_VENDOR` and `IEEE_8021QAZ_TSA_ETS` (dcbnl.h).
const TSA_VENDOR: u8 = 255;
const TSA_ETS: u8 = 2;

/// ice's private flags, in bit order (`ice_gstrings_priv_flags`, Linux 6.x).
const ICE_PRIV_FLAGS: [&str; 5] = [
    "link-down-on-close",
    "fw-lldp-agent",
    "vf-true-promisc-support",
    "mdd-auto-reset-vf",
    "vf-vlan-pruning",
];
/// mlx5's private flags, in bit order (`mlx5e_priv_flags`, Linux 6.x).
const MLX5_PRIV_FLAGS: [&str; 8] = [
    "rx_cqe_moder",
    "tx_cqe_moder",
    "rx_cqe_compress",
    "rx_striding_rq",
    "rx_no_csum_complete",
    "xdp_tx_mpwqe",
    "skb_tx_mpwqe",
    "tx_port_ts",
];
/// mlx5's defaults: rx_cqe_moder, rx_striding_rq, xdp_tx_mpwqe, skb_tx_mpwqe on.
const MLX5_PRIV_DEFAULT: u32 = 0b0110_1001;

impl Sim {
    /// What the kernel would answer to the agent's DCB and ethtool reads of
    /// every PF and shared-mode HCA netdev, from the current description (see
    /// the [module docs](self)).
    pub fn recording(&self) -> Recording {
        let mut r = Recording::default();
        for a in &self.desc.adapters {
            for p in &a.pfs {
                let on_host = self.funcs.get(&p.bdf).is_some_and(|f| {
                    matches!(f.role, Role::Pf { .. } | Role::Hca) && f.net.as_ref().is_some_and(|n| n.present)
                });
                if !on_host {
                    continue;
                }
                r.dcb.push(ieee_get_exchange(a.model, p));
                r.ethtool.extend(ethtool_answers(a.model, p));
                if !a.model.is_mlx5() {
                    let protocol = self.funcs.get(&p.bdf).map_or(RdmaProtocol::None, |f| f.rdma_protocol());
                    r.devlink.extend(self.devlink_answers(p, protocol));
                }
                r.vf_stats.extend(self.vf_stats_exchange(p));
            }
        }
        if !r.devlink.is_empty() {
            r.devlink.insert(0, devlink_recorded::family(SIM_DEVLINK_FAMILY));
        }
        r
    }

    /// The PF's answer to the VF counters request: every VF of the PF, with
    /// [`sim_vf_stats`]; `None` for a PF without VFs (the agent asks only PFs with VFs).
    fn vf_stats_exchange(&self, p: &PfDesc) -> Option<Exchange> {
        let pf = self.funcs.get(&p.bdf)?;
        let ifindex = pf.net.as_ref()?.ifindex;
        let mut vfs: Vec<VfEntry> = self
            .funcs
            .values()
            .filter_map(|f| match &f.role {
                Role::Vf { pf, index } if *pf == p.bdf => Some(VfEntry {
                    vf: *index,
                    mac: f.net.as_ref().map_or([0; 6], |n| n.mac),
                    stats: Some(sim_vf_stats(*index)),
                }),
                _ => None,
            })
            .collect();
        if vfs.is_empty() {
            return None;
        }
        vfs.sort_by_key(|v| v.vf);
        let request = emit(&mut request_message(NLM_F_REQUEST | NLM_F_ACK, 0, stats_request(ifindex)));
        let reply = emit(&mut request_message(0, 0, new_link_reply(ifindex, &vfs)));
        Some(Exchange { request: request.clone(), replies: vec![reply, ack::<LinkBody>(request)] })
    }

    /// ice's `enable_roce` / `enable_iwarp` (generic, bool, runtime only:
    /// ice_devlink.c) as a PARAM_GET answers them; with the older irdma's
    /// `roce_ena` (no such parameters) the kernel answers EINVAL.
    fn devlink_answers(&self, p: &PfDesc, protocol: RdmaProtocol) -> Vec<Exchange> {
        let h = DevHandle::pci(p.bdf);
        [("enable_roce", RdmaProtocol::RoceV2), ("enable_iwarp", RdmaProtocol::Iwarp)]
            .into_iter()
            .map(|(name, on_for)| {
                if self.desc.irdma_roce_ena.is_some() {
                    return devlink_recorded::param_get_refused(SIM_DEVLINK_FAMILY, &h, name, libc::EINVAL);
                }
                let param = Param {
                    name: name.into(),
                    generic: true,
                    kind: ParamType::Bool,
                    values: vec![(Cmode::Runtime, ParamValue::Bool(protocol == on_for))],
                };
                devlink_recorded::param_get(SIM_DEVLINK_FAMILY, &ParamReply { handle: h.clone(), param })
            })
            .collect()
    }
}

/// The id a simulated kernel gives the devlink generic netlink family.
const SIM_DEVLINK_FAMILY: u16 = 0x15;

/// The counters the simulated PFs report for their VF `vf` (no traffic is
/// simulated; tests predict these): `rx_packets` 1000·(vf+1), `tx_packets`
/// 2000·(vf+1), bytes 1500 per packet, `broadcast` vf+1, `multicast`
/// 10·(vf+1), `rx_dropped` vf, `tx_dropped` 0.
pub fn sim_vf_stats(vf: u32) -> VfStats {
    let n = u64::from(vf) + 1;
    VfStats {
        rx_packets: 1000 * n,
        tx_packets: 2000 * n,
        rx_bytes: 1_500_000 * n,
        tx_bytes: 3_000_000 * n,
        broadcast: n,
        multicast: 10 * n,
        rx_dropped: n - 1,
        tx_dropped: 0,
    }
}

/// netlink_ack (net/netlink/af_netlink.c): error 0 and the whole request echoed.
fn ack<M: netlink_packet_core::NetlinkSerializable>(request: Vec<u8>) -> Vec<u8> {
    let mut ack = ErrorMessage::default();
    ack.header = request;
    let mut ack = NetlinkMessage::<M>::new(NetlinkHeader::default(), NetlinkPayload::Error(ack));
    ack.finalize();
    emit(&mut ack)
}

fn ieee_get_exchange(model: Model, p: &PfDesc) -> Exchange {
    let mut request = request_message(NLM_F_REQUEST | NLM_F_ACK, 0, DcbMsg::ieee_get(&p.netdev));
    let request = emit(&mut request);
    let reply = emit(&mut request_message(0, 0, ieee_reply(model, p)));
    Exchange { request: request.clone(), replies: vec![reply, ack::<DcbMsg>(request)] }
}

fn ieee_reply(model: Model, p: &PfDesc) -> DcbMsg {
    let r = &p.roce;
    let counters = |v: &[u64]| -> [u64; 8] { std::array::from_fn(|i| v.get(i).copied().unwrap_or(0)) };
    let pfc = IeeePfc {
        pfc_cap: 8,
        // Priorities above 7 are refused when the description is loaded.
        pfc_en: Priorities::from_list(&r.pfc).unwrap_or_default(),
        mbc: 0,
        delay: r.pfc_delay,
        requests: counters(&r.pfc_requests),
        indications: counters(&r.pfc_indications),
    };
    let ofed_trust_file = r.ofed_sysfs.unwrap_or(model.is_mlx5());
    let apps: Vec<AppAttr> = if r.trust == Trust::Pcp && !ofed_trust_file {
        vec![]
    } else {
        r.dscp_to_priority.iter().map(|(d, p)| AppAttr::Ieee(DcbApp::dscp(*d, *p))).collect()
    };
    let mut ieee = vec![IeeeAttr::Ets(default_ets(model))];
    if model.is_mlx5() {
        ieee.push(IeeeAttr::Maxrate(IeeeMaxrate::default()));
    }
    ieee.push(IeeeAttr::Pfc(pfc));
    if model.is_mlx5() {
        // All priorities in buffer 0 of a 512 KiB port buffer, as mlx5 boots.
        ieee.push(IeeeAttr::Buffer(DcbBuffer {
            prio2buffer: [0; 8],
            buffer_size: [262_144, 0, 0, 0, 0, 0, 0, 0],
            total_size: 524_288,
        }));
    }
    ieee.push(IeeeAttr::AppTable(apps));
    DcbMsg {
        message_type: RTM_GETDCB,
        family: 0,
        cmd: cmd::DCB_CMD_IEEE_GET,
        attrs: vec![DcbAttr::IfName(p.netdev.clone()), DcbAttr::Ieee(ieee), DcbAttr::Dcbx(r.dcbx.bits())],
    }
}

fn default_ets(model: Model) -> IeeeEts {
    if model.is_mlx5() {
        let mut prio_tc = [0, 1, 2, 3, 4, 5, 6, 7];
        prio_tc.swap(0, 1);
        IeeeEts { ets_cap: 8, tc_tx_bw: [100; 8], tc_tsa: [TSA_VENDOR; 8], prio_tc, ..Default::default() }
    } else {
        let mut tc_tx_bw = [0; 8];
        tc_tx_bw[0] = 100;
        let mut tc_tsa = [0; 8];
        tc_tsa[0] = TSA_ETS;
        IeeeEts { ets_cap: 8, tc_tx_bw, tc_tsa, ..Default::default() }
    }
}

fn ethtool_answers(model: Model, p: &PfDesc) -> Vec<EthtoolExchange> {
    let r = &p.roce;
    let mut v = vec![EthtoolExchange::pause(&p.netdev, false, r.global_pause, r.global_pause)];
    v.extend(if model.is_mlx5() {
        EthtoolExchange::priv_flags(&p.netdev, &MLX5_PRIV_FLAGS, MLX5_PRIV_DEFAULT)
    } else {
        EthtoolExchange::priv_flags(&p.netdev, &ICE_PRIV_FLAGS, u32::from(r.fw_lldp_agent) << 1)
    });
    // FEC configured auto (ETHTOOL_FEC_AUTO, bit 1), active RS (ETHTOOL_FEC_RS,
    // bit 3): what 25G and 100G copper/optical links settle on with both drivers.
    v.push(EthtoolExchange::fec(&p.netdev, 1 << 3, 1 << 1));
    v
}
