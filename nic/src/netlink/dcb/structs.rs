//! The uapi structs of `include/uapi/linux/dcbnl.h` with their exact wire
//! layout, and [`Priorities`], the 802.1p priority bitmap they carry. These
//! are also the model: [`crate::roce`] reports PFC and ETS as these types, and
//! the writers take them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::dcbx;

use super::IEEE_8021QAZ_APP_SEL_DSCP;

/// `sizeof(struct ieee_ets)`: 3 + 7 × 8 bytes, no padding.
pub const IEEE_ETS_LEN: usize = 59;
/// `sizeof(struct ieee_pfc)`: u8 ×3, pad, u16 delay, pad to 8, u64 × 16.
pub const IEEE_PFC_LEN: usize = 136;
/// `sizeof(struct ieee_maxrate)`.
pub const IEEE_MAXRATE_LEN: usize = 64;
/// `sizeof(struct dcbnl_buffer)`: u8 × 8, u32 × 8, u32.
pub const DCBNL_BUFFER_LEN: usize = 44;
/// `sizeof(struct dcb_app)`.
pub const DCB_APP_LEN: usize = 4;

/// `struct ieee_ets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IeeeEts {
    pub willing: u8,
    /// TCs that support ETS.
    pub ets_cap: u8,
    /// Credit-based shaper supported.
    pub cbs: u8,
    /// TX bandwidth per TC (percent).
    pub tc_tx_bw: [u8; 8],
    /// RX bandwidth per TC.
    pub tc_rx_bw: [u8; 8],
    /// TSA per TC (0 strict, 1 CBS, 2 ETS, 255 vendor).
    pub tc_tsa: [u8; 8],
    /// Priority → TC.
    pub prio_tc: [u8; 8],
    /// Recommended bandwidth per TC.
    pub tc_reco_bw: [u8; 8],
    /// Recommended TSA per TC.
    pub tc_reco_tsa: [u8; 8],
    /// Recommended priority → TC.
    pub reco_prio_tc: [u8; 8],
}

/// `struct ieee_pfc`.
///
/// ```text
/// 0 pfc_cap u8 | 1 pfc_en u8 | 2 mbc u8 | 3 pad | 4 delay u16 | 6 pad[2]
/// 8 requests u64[8] | 72 indications u64[8] | 136
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IeeePfc {
    /// TCs that can have PFC at once.
    pub pfc_cap: u8,
    /// Priorities with PFC enabled (bit N = priority N).
    pub pfc_en: Priorities,
    /// MACsec bypass capability.
    pub mbc: u8,
    /// Cable delay allowance in bits.
    pub delay: u16,
    /// PFC frames sent per priority.
    pub requests: [u64; 8],
    /// PFC frames received per priority.
    pub indications: [u64; 8],
}

/// `struct ieee_maxrate`: per-TC TX rate limit in kbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IeeeMaxrate {
    /// Rate per TC (0 = unlimited).
    pub tc_maxrate: [u64; 8],
}

/// `struct dcbnl_buffer`: receive buffer split (mlx5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DcbBuffer {
    /// Priority → buffer.
    pub prio2buffer: [u8; 8],
    /// Buffer sizes in bytes.
    pub buffer_size: [u32; 8],
    /// Total port buffer in bytes.
    pub total_size: u32,
}

/// `struct dcb_app`: one APP table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DcbApp {
    /// Selector (5 = DSCP, 1 = EtherType, 255 = PCP …).
    pub selector: u8,
    /// Priority (0..7).
    pub priority: u8,
    /// Protocol: the DSCP value for selector 5.
    pub protocol: u16,
}

impl DcbApp {
    /// A DSCP → priority entry.
    pub fn dscp(dscp: u8, priority: u8) -> Self {
        Self { selector: IEEE_8021QAZ_APP_SEL_DSCP, priority, protocol: dscp as u16 }
    }
}

impl IeeeEts {
    /// The 59 wire bytes.
    pub fn to_bytes(&self) -> [u8; IEEE_ETS_LEN] {
        let mut b = [0u8; IEEE_ETS_LEN];
        b[0] = self.willing;
        b[1] = self.ets_cap;
        b[2] = self.cbs;
        let arrays = [
            &self.tc_tx_bw,
            &self.tc_rx_bw,
            &self.tc_tsa,
            &self.prio_tc,
            &self.tc_reco_bw,
            &self.tc_reco_tsa,
            &self.reco_prio_tc,
        ];
        for (i, a) in arrays.iter().enumerate() {
            b[3 + 8 * i..11 + 8 * i].copy_from_slice(&a[..]);
        }
        b
    }

    /// From exactly 59 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != IEEE_ETS_LEN {
            return None;
        }
        let arr = |i: usize| -> [u8; 8] { std::array::from_fn(|k| b[3 + 8 * i + k]) };
        Some(Self {
            willing: b[0],
            ets_cap: b[1],
            cbs: b[2],
            tc_tx_bw: arr(0),
            tc_rx_bw: arr(1),
            tc_tsa: arr(2),
            prio_tc: arr(3),
            tc_reco_bw: arr(4),
            tc_reco_tsa: arr(5),
            reco_prio_tc: arr(6),
        })
    }
}

impl IeeePfc {
    /// The PFC-enabled priorities, ascending (what the CRD status carries).
    pub fn enabled_priorities(&self) -> Vec<u8> {
        self.pfc_en.to_vec()
    }

    /// The 136 wire bytes (padding zeroed).
    pub fn to_bytes(&self) -> [u8; IEEE_PFC_LEN] {
        let mut b = [0u8; IEEE_PFC_LEN];
        b[0] = self.pfc_cap;
        b[1] = self.pfc_en.bits();
        b[2] = self.mbc;
        b[4..6].copy_from_slice(&self.delay.to_ne_bytes());
        for i in 0..8 {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&self.requests[i].to_ne_bytes());
            b[72 + 8 * i..80 + 8 * i].copy_from_slice(&self.indications[i].to_ne_bytes());
        }
        b
    }

    /// From exactly 136 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != IEEE_PFC_LEN {
            return None;
        }
        Some(Self {
            pfc_cap: b[0],
            pfc_en: Priorities::from_bits(b[1]),
            mbc: b[2],
            delay: u16::from_ne_bytes([b[4], b[5]]),
            requests: std::array::from_fn(|i| u64_at(b, 8 + 8 * i)),
            indications: std::array::from_fn(|i| u64_at(b, 72 + 8 * i)),
        })
    }
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

impl IeeeMaxrate {
    /// The 64 wire bytes.
    pub fn to_bytes(&self) -> [u8; IEEE_MAXRATE_LEN] {
        let mut b = [0u8; IEEE_MAXRATE_LEN];
        for i in 0..8 {
            b[8 * i..8 * i + 8].copy_from_slice(&self.tc_maxrate[i].to_ne_bytes());
        }
        b
    }

    /// From exactly 64 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == IEEE_MAXRATE_LEN).then(|| Self { tc_maxrate: std::array::from_fn(|i| u64_at(b, 8 * i)) })
    }
}

impl DcbBuffer {
    /// The 44 wire bytes.
    pub fn to_bytes(&self) -> [u8; DCBNL_BUFFER_LEN] {
        let mut b = [0u8; DCBNL_BUFFER_LEN];
        b[..8].copy_from_slice(&self.prio2buffer);
        for i in 0..8 {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&self.buffer_size[i].to_ne_bytes());
        }
        b[40..44].copy_from_slice(&self.total_size.to_ne_bytes());
        b
    }

    /// From exactly 44 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == DCBNL_BUFFER_LEN).then(|| Self {
            prio2buffer: std::array::from_fn(|i| b[i]),
            buffer_size: std::array::from_fn(|i| u32_at(b, 8 + 4 * i)),
            total_size: u32_at(b, 40),
        })
    }
}

impl DcbApp {
    /// The 4 wire bytes.
    pub fn to_bytes(&self) -> [u8; DCB_APP_LEN] {
        let p = self.protocol.to_ne_bytes();
        [self.selector, self.priority, p[0], p[1]]
    }

    /// From exactly 4 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == DCB_APP_LEN).then(|| Self { selector: b[0], priority: b[1], protocol: u16_at(b, 2) })
    }
}

/// A set of 802.1p priorities (0..7), as the kernel's bitmaps carry it
/// (`ieee_pfc.pfc_en`: bit N = priority N).
///
/// Text form as `dcb pfc` (iproute2) takes it: `all:off 3:on 4:on`; parsing
/// also reads `dcb pfc show`'s `0:off 1:off 2:off 3:on …`, applying tokens in
/// order. Serialized (CRD status, JSON) as the ascending list `[3, 4]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Priorities(u8);

/// Why a list or text is not a priority set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrioritiesError {
    /// A priority outside 0..7.
    #[error("priority {0} is not an 802.1p priority (0-7)")]
    OutOfRange(u64),
    /// A token that is not `N:on|off` or `all:on|off`.
    #[error("{0:?} is not N:on, N:off, all:on or all:off")]
    Token(String),
}

impl Priorities {
    /// No priority.
    pub const NONE: Priorities = Priorities(0);
    /// All eight.
    pub const ALL: Priorities = Priorities(0xff);

    /// From a bitmap (bit N = priority N).
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// The bitmap.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// From a list of priorities; duplicates are fine, anything above 7 is refused.
    pub fn from_list(list: &[u8]) -> Result<Self, PrioritiesError> {
        list.iter().try_fold(Self::NONE, |s, &p| {
            if p > 7 {
                Err(PrioritiesError::OutOfRange(p.into()))
            } else {
                Ok(s.with(p, true))
            }
        })
    }

    /// Whether priority `p` is in the set (never for `p` > 7).
    pub fn contains(self, p: u8) -> bool {
        p < 8 && self.0 & (1 << p) != 0
    }

    /// The set with priority `p` (0..7) added or removed.
    #[must_use]
    pub fn with(self, p: u8, on: bool) -> Self {
        let bit = 1u8.checked_shl(p.into()).unwrap_or(0);
        Self(if on { self.0 | bit } else { self.0 & !bit })
    }

    /// The priorities, ascending.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0u8..8).filter(move |&p| self.contains(p))
    }

    /// The priorities as an ascending list (what the CRD carries).
    pub fn to_vec(self) -> Vec<u8> {
        self.iter().collect()
    }

    /// Number of priorities in the set.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl TryFrom<&[u8]> for Priorities {
    type Error = PrioritiesError;
    fn try_from(list: &[u8]) -> Result<Self, Self::Error> {
        Self::from_list(list)
    }
}

impl From<Priorities> for Vec<u8> {
    fn from(p: Priorities) -> Self {
        p.to_vec()
    }
}

impl fmt::Debug for Priorities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// `all:off 3:on 4:on`: the `prio-pfc` argument of `dcb pfc set` that makes this set.
impl fmt::Display for Priorities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("all:off")?;
        self.iter().try_for_each(|p| write!(f, " {p}:on"))
    }
}

impl FromStr for Priorities {
    type Err = PrioritiesError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split_whitespace().try_fold(Self::NONE, |set, tok| {
            let bad = || PrioritiesError::Token(tok.to_string());
            let (who, state) = tok.split_once(':').ok_or_else(bad)?;
            let on = match state {
                "on" => true,
                "off" => false,
                _ => return Err(bad()),
            };
            if who == "all" {
                return Ok(if on { Self::ALL } else { Self::NONE });
            }
            let p: u64 = who.parse().map_err(|_| bad())?;
            if p > 7 {
                return Err(PrioritiesError::OutOfRange(p));
            }
            Ok(set.with(p as u8, on))
        })
    }
}

impl Serialize for Priorities {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Priorities {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = Vec::<u8>::deserialize(d)?;
        Self::from_list(&list).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_convert_between_bitmap_list_and_dcb_text() {
        let p = Priorities::from_list(&[4, 3, 3]).unwrap();
        assert_eq!(p.bits(), 0x18);
        assert_eq!(p.to_vec(), vec![3, 4]);
        assert_eq!(p.to_string(), "all:off 3:on 4:on");
        assert_eq!("all:off 3:on 4:on".parse::<Priorities>().unwrap(), p);
        assert_eq!("0:off 1:off 2:off 3:on 4:on 5:off 6:off 7:off".parse::<Priorities>().unwrap(), p);
        assert_eq!("all:on 0:off".parse::<Priorities>().unwrap().bits(), 0xfe);
        assert_eq!(Priorities::NONE.to_string(), "all:off");
        assert_eq!(Priorities::from_list(&[8]), Err(PrioritiesError::OutOfRange(8)));
        assert_eq!("9:on".parse::<Priorities>(), Err(PrioritiesError::OutOfRange(9)));
        assert!(matches!("3:maybe".parse::<Priorities>(), Err(PrioritiesError::Token(_))));
        assert!(matches!("3".parse::<Priorities>(), Err(PrioritiesError::Token(_))));
        assert!(!p.contains(200) && p.contains(3) && p.len() == 2);
        assert_eq!(serde_json::to_string(&p).unwrap(), "[3,4]");
        assert_eq!(serde_json::from_str::<Priorities>("[4,3]").unwrap(), p);
        assert!(serde_json::from_str::<Priorities>("[8]").is_err());
        assert_eq!(format!("{p:?}"), "{3, 4}");
    }
}

/// Who runs DCBX on a port: the mode `dcb dcbx set` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DcbxMode {
    /// Host (OS) controlled, IEEE (`dcbx::DCB_CAP_DCBX_HOST | dcbx::DCB_CAP_DCBX_VER_IEEE`).
    #[default]
    Os,
    /// Firmware managed (`dcbx::DCB_CAP_DCBX_LLD_MANAGED`).
    Firmware,
}

impl DcbxMode {
    /// The `dcbx::DCB_CAP_DCBX_*` bits (dcbnl.h) that select this mode, IEEE flavour in both.
    pub fn bits(self) -> u8 {
        match self {
            DcbxMode::Os => dcbx::DCB_CAP_DCBX_HOST | dcbx::DCB_CAP_DCBX_VER_IEEE,
            DcbxMode::Firmware => dcbx::DCB_CAP_DCBX_LLD_MANAGED | dcbx::DCB_CAP_DCBX_VER_IEEE,
        }
    }

    /// The mode `dcbx::DCB_CAP_DCBX_*` bits name: firmware when LLD-managed, else OS
    /// when host; `None` when they name neither.
    pub fn from_bits(bits: u8) -> Option<Self> {
        if bits & dcbx::DCB_CAP_DCBX_LLD_MANAGED != 0 {
            Some(DcbxMode::Firmware)
        } else if bits & dcbx::DCB_CAP_DCBX_HOST != 0 {
            Some(DcbxMode::Os)
        } else {
            None
        }
    }
}
