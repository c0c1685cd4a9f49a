//! PF-side VF attributes (`ip link set PF vf N ...`): MAC, VLAN + QoS +
//! protocol, spoof check, trust, min/max TX rate, link state.
//!
//! Built on netlink-packet-route's `IFLA_VFINFO_LIST` types. Layout, from
//! `include/uapi/linux/if_link.h`:
//!
//! ```text
//! RTM_SETLINK ifinfomsg{index = PF}
//! └─ IFLA_VFINFO_LIST (22, nested)
//!    └─ IFLA_VF_INFO (1, nested)
//!       ├─ IFLA_VF_MAC        struct ifla_vf_mac  { u32 vf; u8 mac[32]; }
//!       ├─ IFLA_VF_VLAN_LIST  (12, nested)
//!       │  └─ IFLA_VF_VLAN_INFO struct ifla_vf_vlan_info { u32 vf, vlan, qos; __be16 proto; }
//!       ├─ IFLA_VF_SPOOFCHK   struct ifla_vf_spoofchk { u32 vf, setting; }
//!       ├─ IFLA_VF_TRUST      struct ifla_vf_trust    { u32 vf, setting; }
//!       ├─ IFLA_VF_RATE       struct ifla_vf_rate     { u32 vf, min_tx_rate, max_tx_rate; } (Mb/s)
//!       └─ IFLA_VF_LINK_STATE struct ifla_vf_link_state { u32 vf, link_state; }
//! ```
//!
//! Reading needs `IFLA_EXT_MASK = RTEXT_FILTER_VF` in the RTM_GETLINK request,
//! or the kernel leaves the VF list out; `RTEXT_FILTER_SKIP_STATS` leaves out
//! the per-VF counters, which would make a PF with 256 VFs answer with more
//! than netlink-proto's 64 KiB receive buffer (as `ip link show` does). The
//! counters are read apart, over the crate's own transport: [`super::vf_stats`].
//!
//! Requests, by their `ip` equivalent:
//! - [`set_request`]: `ip link set PF vf N mac M vlan V qos Q proto 802.1ad spoofchk on trust off min_tx_rate A max_tx_rate B state auto`
//! - [`get_request`]: `ip -d link show PF` (the `vf N ...` lines)

use super::link::{LinkError, RouteSocket};
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkHeader, LinkMessage, LinkVfInfo, VfInfo, VfInfoLinkState, VfInfoMac,
    VfInfoRate, VfInfoSpoofCheck, VfInfoTrust, VfLinkState, VfVlan, VfVlanInfo, VlanProtocol,
};

/// A VLAN on a VF (`vlan`, `qos`, `proto`). The default is "no VLAN".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VfVlanSetting {
    /// VLAN id, 0..=4095 (0 = no VLAN).
    pub id: u16,
    /// 802.1p priority, 0..=7.
    pub qos: u8,
    /// `true` for 802.1ad (QinQ, ethertype 0x88a8), `false` for 802.1Q.
    pub ad: bool,
}

/// VF link state (`state auto|enable|disable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfLink {
    /// Follow the PF link.
    Auto,
    /// Always up.
    Enable,
    /// Always down.
    Disable,
}

impl From<VfLink> for VfLinkState {
    fn from(v: VfLink) -> Self {
        match v {
            VfLink::Auto => VfLinkState::Auto,
            VfLink::Enable => VfLinkState::Enable,
            VfLink::Disable => VfLinkState::Disable,
        }
    }
}

/// The PF-side settings of one VF. In a request, `None` means "leave alone".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfSettings {
    pub mac: Option<[u8; 6]>,
    pub vlan: Option<VfVlanSetting>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    /// `(min_tx_rate, max_tx_rate)` in Mb/s (0 = no limit).
    pub rate: Option<(u32, u32)>,
    pub link_state: Option<VfLink>,
}

impl VfSettings {
    /// Whether nothing is requested.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The IFLA_VF_* attributes for VF `vf`.
    pub fn to_vf_info(&self, vf: u32) -> LinkVfInfo {
        let mut info = Vec::new();
        if let Some(mac) = self.mac {
            info.push(VfInfo::Mac(VfInfoMac::new(vf, &mac)));
        }
        if let Some(v) = self.vlan {
            let proto = if v.ad { VlanProtocol::Ieee8021Ad } else { VlanProtocol::Ieee8021Q };
            info.push(VfInfo::VlanList(vec![VfVlan::Info(VfVlanInfo::new(
                vf,
                v.id.into(),
                v.qos.into(),
                proto,
            ))]));
        }
        if let Some(s) = self.spoofchk {
            info.push(VfInfo::SpoofCheck(VfInfoSpoofCheck::new(vf, s)));
        }
        if let Some(t) = self.trust {
            info.push(VfInfo::Trust(VfInfoTrust::new(vf, t)));
        }
        if let Some((min, max)) = self.rate {
            info.push(VfInfo::Rate(VfInfoRate::new(vf, min, max)));
        }
        if let Some(l) = self.link_state {
            info.push(VfInfo::LinkState(VfInfoLinkState::new(vf, l.into())));
        }
        LinkVfInfo(info)
    }

    /// The subset of `current` covering the fields set in `self`: what to
    /// write back to undo `self`.
    pub fn undo_from(&self, current: &VfState) -> VfSettings {
        VfSettings {
            mac: self.mac.map(|_| current.mac),
            vlan: self.vlan.map(|_| current.vlan),
            spoofchk: self.spoofchk.and(current.spoofchk),
            trust: self.trust.and(current.trust),
            rate: self.rate.map(|_| (current.min_tx_rate, current.max_tx_rate)),
            link_state: self.link_state.and(current.link_state),
        }
    }
}

/// One VF as the PF reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfState {
    pub vf: u32,
    /// Administrative MAC (00:00:00:00:00:00 when unset).
    pub mac: [u8; 6],
    /// VLAN (id 0: none).
    pub vlan: VfVlanSetting,
    /// Spoof checking (absent when the driver does not report it).
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    /// Minimum TX rate, Mb/s.
    pub min_tx_rate: u32,
    /// Maximum TX rate, Mb/s.
    pub max_tx_rate: u32,
    pub link_state: Option<VfLink>,
}

impl VfState {
    /// Reads one `IFLA_VF_INFO`. `None` if it carries no VF index.
    pub fn from_info(info: &LinkVfInfo) -> Option<Self> {
        let mut s = VfState::default();
        let mut seen = false;
        for a in &info.0 {
            match a {
                VfInfo::Mac(m) => {
                    s.vf = m.vf_id;
                    s.mac.copy_from_slice(&m.mac[..6]);
                    seen = true;
                }
                VfInfo::Vlan(v) => {
                    // Legacy IFLA_VF_VLAN: 802.1Q only; VLAN_LIST below overrides.
                    s.vf = v.vf_id;
                    s.vlan.id = v.vlan_id as u16;
                    s.vlan.qos = v.qos as u8;
                    seen = true;
                }
                VfInfo::VlanList(list) => {
                    if let Some(VfVlan::Info(v)) = list.first() {
                        s.vlan = VfVlanSetting {
                            id: v.vlan_id as u16,
                            qos: v.qos as u8,
                            ad: v.protocol == VlanProtocol::Ieee8021Ad,
                        };
                    }
                }
                VfInfo::SpoofCheck(v) => s.spoofchk = Some(v.enabled),
                VfInfo::Trust(v) => s.trust = Some(v.enabled),
                VfInfo::Rate(r) => {
                    s.min_tx_rate = r.min_tx_rate;
                    s.max_tx_rate = r.max_tx_rate;
                }
                VfInfo::LinkState(l) => {
                    s.link_state = match l.state {
                        VfLinkState::Auto => Some(VfLink::Auto),
                        VfLinkState::Enable => Some(VfLink::Enable),
                        VfLinkState::Disable => Some(VfLink::Disable),
                        _ => None,
                    }
                }
                _ => {}
            }
        }
        seen.then_some(s)
    }

    /// Whether every field requested in `want` has the requested value.
    pub fn satisfies(&self, want: &VfSettings) -> Result<(), String> {
        let mut bad = Vec::new();
        if want.mac.is_some_and(|m| m != self.mac) {
            bad.push("mac");
        }
        if want.vlan.is_some_and(|v| v != self.vlan) {
            bad.push("vlan");
        }
        if want.spoofchk.is_some_and(|v| Some(v) != self.spoofchk) {
            bad.push("spoofchk");
        }
        if want.trust.is_some_and(|v| Some(v) != self.trust) {
            bad.push("trust");
        }
        if want.rate.is_some_and(|r| r != (self.min_tx_rate, self.max_tx_rate)) {
            bad.push("tx rate");
        }
        if want.link_state.is_some_and(|l| Some(l) != self.link_state) {
            bad.push("link_state");
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("VF {} differs in {}", self.vf, bad.join(", ")))
        }
    }
}

/// The RTM_SETLINK payload applying `settings` to VF `vf` of the PF with
/// ifindex `pf_index`.
pub fn set_request(pf_index: u32, vf: u32, settings: &VfSettings) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index: pf_index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::VfInfoList(vec![settings.to_vf_info(vf)]));
    m
}

/// The RTM_GETLINK payload reading the PF with ifindex `pf_index` including
/// its VF list, without VF statistics.
pub fn get_request(pf_index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index: pf_index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::ExtMask(vec![LinkExtentMask::Vf, LinkExtentMask::SkipStats]));
    m
}

/// Every VF in a PF's RTM_NEWLINK reply.
pub fn parse_vfs(msg: &LinkMessage) -> Vec<VfState> {
    msg.attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::VfInfoList(l) => Some(l),
            _ => None,
        })
        .flatten()
        .filter_map(VfState::from_info)
        .collect()
}

/// Reads VF `vf` of PF `pf_index` (`ip -d link show PF`); `None` when the
/// PF does not report that VF.
pub fn read(c: &mut RouteSocket, pf_index: u32, vf: u32) -> Result<Option<VfState>, LinkError> {
    let op = format!("RTM_GETLINK ifindex {pf_index} (VF list)");
    let m = c.get_link_message(&op, get_request(pf_index)).map_err(|source| LinkError::Request {
        op: "read the VFs of",
        link: format!("ifindex {pf_index}"),
        source,
    })?;
    Ok(m.iter().flat_map(parse_vfs).find(|s| s.vf == vf))
}

/// Applies `settings` to VF `vf` of PF `pf_index` in one RTM_SETLINK
/// (`ip link set PF vf N ...`); nothing is sent when `settings` is empty.
pub fn apply(c: &mut RouteSocket, pf_index: u32, vf: u32, settings: &VfSettings) -> Result<(), LinkError> {
    if settings.is_empty() {
        return Ok(());
    }
    let op = format!("RTM_SETLINK ifindex {pf_index} vf {vf}");
    c.set_link_message(&op, set_request(pf_index, vf, settings)).map_err(|source| LinkError::Request {
        op: "set VF attributes on",
        link: format!("ifindex {pf_index} (vf {vf})"),
        source,
    })
}
