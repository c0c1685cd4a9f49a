//! The ethtool reads and writes the agent needs, over the legacy `SIOCETHTOOL`
//! ioctl (include/uapi/linux/ethtool.h, include/uapi/linux/sockios.h): link-level
//! pause (`ethtool -a|-A X`) and the ice `fw-lldp-agent` private flag
//! (`ethtool --show-priv-flags|--set-priv-flags X`). The ioctl acts in the
//! caller's netns.
//!
//! Reads go through an [`Ethtool`]: the kernel ([`Ioctl`]) or recorded answers
//! ([`RecordedEthtool`], e.g. a simulated node's), decoded by the same code. The
//! recordings are built here too ([`EthtoolExchange`]), from the same layouts.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GPAUSEPARAM`: get `struct ethtool_pauseparam`.
const ETHTOOL_GPAUSEPARAM: u32 = 0x12;
/// `ETHTOOL_SPAUSEPARAM`: set `struct ethtool_pauseparam`.
const ETHTOOL_SPAUSEPARAM: u32 = 0x13;
/// `ETHTOOL_GSTRINGS`: get a string set (`struct ethtool_gstrings`).
const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GPFLAGS`: get private flags (`struct ethtool_value`).
const ETHTOOL_GPFLAGS: u32 = 0x27;
/// `ETHTOOL_SPFLAGS`: set private flags (`struct ethtool_value`).
const ETHTOOL_SPFLAGS: u32 = 0x28;
/// `ETHTOOL_GSSET_INFO`: string set sizes (`struct ethtool_sset_info`).
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETHTOOL_GFECPARAM`: get `struct ethtool_fecparam`.
const ETHTOOL_GFECPARAM: u32 = 0x50;
/// `enum ethtool_fec_config_bits`, by bit: how `ethtool --show-fec` names them.
const FEC_NAMES: [&str; 6] = ["none", "auto", "off", "rs", "baser", "llrs"];
/// `ETH_SS_PRIV_FLAGS` (`enum ethtool_stringset`).
const ETH_SS_PRIV_FLAGS: u32 = 2;
const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` with the `ifr_data` member: 16-byte name + pointer, padded
/// to the kernel's 40-byte union size on 64-bit.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// Where ethtool commands go. Two implementations: the kernel ([`Ioctl`]) and
/// recorded answers ([`RecordedEthtool`]).
pub(crate) trait Ethtool {
    /// Runs one ethtool command on `ifname`: `cmd` holds the command struct
    /// (its first u32 is the `ETHTOOL_*` number) and receives the answer.
    fn call(&mut self, ifname: &str, cmd: &mut [u8]) -> io::Result<()>;
}

/// The kernel's `SIOCETHTOOL` on a datagram socket of the caller's netns.
pub(crate) struct Ioctl {
    fd: OwnedFd,
}

impl Ioctl {
    /// Opens the socket the ioctls go through.
    pub(crate) fn open() -> io::Result<Self> {
        socket().map(|fd| Self { fd })
    }
}

impl Ethtool for Ioctl {
    fn call(&mut self, ifname: &str, cmd: &mut [u8]) -> io::Result<()> {
        ioctl(&self.fd, ifname, cmd)
    }
}

/// One recorded ethtool command: the interface, the `ETHTOOL_*` number and
/// what the kernel answered (the filled command struct, or an errno).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthtoolExchange {
    pub ifname: String,
    /// `ETHTOOL_*` command number.
    pub cmd: u32,
    /// The command struct as the kernel filled it, or the positive errno it failed with.
    pub answer: Result<Vec<u8>, i32>,
}

fn ne32(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}

impl EthtoolExchange {
    /// `ETHTOOL_GPAUSEPARAM` answered with `struct ethtool_pauseparam`.
    pub fn pause(ifname: &str, autoneg: bool, rx: bool, tx: bool) -> Self {
        let mut b = Vec::with_capacity(16);
        for v in [ETHTOOL_GPAUSEPARAM, autoneg.into(), rx.into(), tx.into()] {
            b.extend_from_slice(&ne32(v));
        }
        Self { ifname: ifname.into(), cmd: ETHTOOL_GPAUSEPARAM, answer: Ok(b) }
    }

    /// `ETHTOOL_GFECPARAM` answered with `struct ethtool_fecparam` (`cmd`,
    /// `active_fec`, `fec`, `reserved`): `active` and `configured` are
    /// `ETHTOOL_FEC_*` masks (`1 << 3` = RS).
    pub fn fec(ifname: &str, active: u32, configured: u32) -> Self {
        let mut b = Vec::with_capacity(16);
        for v in [ETHTOOL_GFECPARAM, active, configured, 0] {
            b.extend_from_slice(&ne32(v));
        }
        Self { ifname: ifname.into(), cmd: ETHTOOL_GFECPARAM, answer: Ok(b) }
    }

    /// The private flags `names` (bit N = `names[N]`) with the word `bits`:
    /// answers to `ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS` and `ETHTOOL_GPFLAGS`,
    /// as `ethtool --show-priv-flags` asks them. At most 32 names (a u32 word);
    /// names are cut at `ETH_GSTRING_LEN - 1` bytes.
    pub fn priv_flags(ifname: &str, names: &[&str], bits: u32) -> Vec<Self> {
        let names = &names[..names.len().min(32)];
        let count = names.len() as u32;
        // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[] }
        let mut info = Vec::with_capacity(20);
        info.extend_from_slice(&ne32(ETHTOOL_GSSET_INFO));
        info.extend_from_slice(&ne32(0));
        let mask: u64 = if count == 0 { 0 } else { 1 << ETH_SS_PRIV_FLAGS };
        info.extend_from_slice(&mask.to_ne_bytes());
        info.extend_from_slice(&ne32(count));
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[] }
        let mut strings = Vec::with_capacity(12 + names.len() * ETH_GSTRING_LEN);
        for v in [ETHTOOL_GSTRINGS, ETH_SS_PRIV_FLAGS, count] {
            strings.extend_from_slice(&ne32(v));
        }
        for n in names {
            let mut s = [0u8; ETH_GSTRING_LEN];
            let b = n.as_bytes();
            let k = b.len().min(ETH_GSTRING_LEN - 1);
            s[..k].copy_from_slice(&b[..k]);
            strings.extend_from_slice(&s);
        }
        // struct ethtool_value { u32 cmd; u32 data }
        let mut val = ne32(ETHTOOL_GPFLAGS).to_vec();
        val.extend_from_slice(&ne32(bits));
        let x = |cmd, b| Self { ifname: ifname.into(), cmd, answer: Ok(b) };
        vec![x(ETHTOOL_GSSET_INFO, info), x(ETHTOOL_GSTRINGS, strings), x(ETHTOOL_GPFLAGS, val)]
    }
}

/// Recorded ethtool answers: a command finds the [`EthtoolExchange`] of its
/// interface and number; one without a recording fails naming both.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordedEthtool {
    answers: Vec<EthtoolExchange>,
}

impl RecordedEthtool {
    pub(crate) fn new(answers: Vec<EthtoolExchange>) -> Self {
        Self { answers }
    }
}

impl Ethtool for RecordedEthtool {
    fn call(&mut self, ifname: &str, cmd: &mut [u8]) -> io::Result<()> {
        let number = cmd.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0);
        let x = self.answers.iter().find(|x| x.ifname == ifname && x.cmd == number).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("the recording has no answer to ethtool command {number:#x} on {ifname}"),
            )
        })?;
        match &x.answer {
            Ok(b) => {
                let n = b.len().min(cmd.len());
                cmd[..n].copy_from_slice(&b[..n]);
                Ok(())
            }
            Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
        }
    }
}

/// What an ethtool read found.
#[derive(Debug)]
pub(crate) enum EthtoolAnswer<T> {
    Value(T),
    /// The driver has no such operation (`EOPNOTSUPP`) or no such flag.
    Unsupported(String),
}

fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs one `SIOCETHTOOL` with `cmd` pointing at a buffer whose first u32 is
/// the ethtool command.
fn ioctl(fd: &OwnedFd, ifname: &str, cmd: &mut [u8]) -> io::Result<()> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {ifname:?}")));
    }
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: cmd.as_mut_ptr().cast(), _pad: [0; 16] };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `req` is a valid ifreq whose data pointer refers to `cmd`, which
    // is large enough for the command written in its first bytes and lives
    // across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfReq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL))
}

/// Link-level pause (`ethtool -a <if>`): `(autoneg, rx, tx)`.
pub(crate) fn pause(e: &mut impl Ethtool, ifname: &str) -> io::Result<EthtoolAnswer<(bool, bool, bool)>> {
    // struct ethtool_pauseparam { u32 cmd, autoneg, rx_pause, tx_pause }
    let mut buf = [0u8; 16];
    buf[..4].copy_from_slice(&ETHTOOL_GPAUSEPARAM.to_ne_bytes());
    match e.call(ifname, &mut buf) {
        Ok(()) => {
            let w = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]) != 0;
            Ok(EthtoolAnswer::Value((w(4), w(8), w(12))))
        }
        Err(e) if unsupported(&e) => Ok(EthtoolAnswer::Unsupported(format!(
            "driver has no pause parameters (ETHTOOL_GPAUSEPARAM: {e})"
        ))),
        Err(e) => Err(e),
    }
}

/// The active FEC mode (`ethtool --show-fec <if>`, "Active FEC encoding"):
/// `rs`, `baser`, `llrs`, `off`, or several joined with `+`.
pub(crate) fn fec(e: &mut impl Ethtool, ifname: &str) -> io::Result<EthtoolAnswer<String>> {
    // struct ethtool_fecparam { u32 cmd, active_fec, fec, reserved }
    let mut buf = [0u8; 16];
    buf[..4].copy_from_slice(&ETHTOOL_GFECPARAM.to_ne_bytes());
    match e.call(ifname, &mut buf) {
        Ok(()) => {
            let active = u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
            Ok(EthtoolAnswer::Value(fec_name(active)))
        }
        Err(e) if unsupported(&e) => {
            Ok(EthtoolAnswer::Unsupported(format!("driver reports no FEC (ETHTOOL_GFECPARAM: {e})")))
        }
        Err(e) => Err(e),
    }
}

/// An `ETHTOOL_FEC_*` mask as names (`1 << 3` → `rs`); an empty mask is `none`.
pub(crate) fn fec_name(mask: u32) -> String {
    let names: Vec<String> = (0..32)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| FEC_NAMES.get(b as usize).map_or(format!("bit{b}"), |n| n.to_string()))
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("+")
    }
}

/// The bit of private flag `flag` in the driver's flag word, or why there is none.
fn priv_flag_bit(e: &mut impl Ethtool, ifname: &str, flag: &str) -> io::Result<Result<u32, String>> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[] }
    let mut info = [0u8; 8 + 8 + 4];
    info[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_PRIV_FLAGS).to_ne_bytes());
    match e.call(ifname, &mut info) {
        Ok(()) => {}
        Err(err) if unsupported(&err) => {
            return Ok(Err(format!("driver has no private flags (ETHTOOL_GSSET_INFO: {err})")))
        }
        Err(err) => return Err(err),
    }
    let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or([0; 8]));
    let count = u32::from_ne_bytes(info[16..20].try_into().unwrap_or([0; 4])) as usize;
    // The kernel clears the bit of a set the driver does not have.
    if mask & (1 << ETH_SS_PRIV_FLAGS) == 0 || count == 0 {
        return Ok(Err("driver has no private flags".into()));
    }
    // Private flags are a u32 bitmap: more than 32 names cannot be addressed.
    let count = count.min(32);
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[] }
    let mut strings = vec![0u8; 12 + count * ETH_GSTRING_LEN];
    strings[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_PRIV_FLAGS.to_ne_bytes());
    strings[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    e.call(ifname, &mut strings)?;
    let names: Vec<String> = strings[12..]
        .chunks(ETH_GSTRING_LEN)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();
    Ok(match names.iter().position(|n| n == flag) {
        Some(bit) => Ok(bit as u32),
        None => Err(format!("driver has no {flag} private flag (has: {})", names.join(", "))),
    })
}

/// The driver's private flag word (`ETHTOOL_GPFLAGS`).
fn priv_flags(e: &mut impl Ethtool, ifname: &str) -> io::Result<u32> {
    // struct ethtool_value { u32 cmd; u32 data }
    let mut val = [0u8; 8];
    val[..4].copy_from_slice(&ETHTOOL_GPFLAGS.to_ne_bytes());
    e.call(ifname, &mut val)?;
    Ok(u32::from_ne_bytes([val[4], val[5], val[6], val[7]]))
}

/// The private flag `flag` (`ethtool --show-priv-flags <if>`).
pub(crate) fn priv_flag(e: &mut impl Ethtool, ifname: &str, flag: &str) -> io::Result<EthtoolAnswer<bool>> {
    match priv_flag_bit(e, ifname, flag)? {
        Ok(bit) => Ok(EthtoolAnswer::Value(priv_flags(e, ifname)? & (1 << bit) != 0)),
        Err(why) => Ok(EthtoolAnswer::Unsupported(why)),
    }
}

/// Turns private flag `flag` on or off, leaving the others as they are
/// (`ethtool --set-priv-flags <if> <flag> on|off`). Needs CAP_NET_ADMIN.
pub fn set_priv_flag(ifname: &str, flag: &str, on: bool) -> io::Result<()> {
    let mut k = Ioctl::open()?;
    let bit = priv_flag_bit(&mut k, ifname, flag)?
        .map_err(|why| io::Error::new(io::ErrorKind::Unsupported, why))?;
    let bits = with_bit(priv_flags(&mut k, ifname)?, bit, on);
    let fd = &k.fd;
    let mut val = [0u8; 8];
    val[..4].copy_from_slice(&ETHTOOL_SPFLAGS.to_ne_bytes());
    val[4..].copy_from_slice(&bits.to_ne_bytes());
    ioctl(fd, ifname, &mut val).map_err(|e| context(e, "ETHTOOL_SPFLAGS", ifname))
}

/// Sets link-level pause: rx and tx both `on`, autonegotiation of pause as it
/// is (`ethtool -A <if> rx on|off tx on|off`). Needs CAP_NET_ADMIN.
pub fn set_pause(ifname: &str, on: bool) -> io::Result<()> {
    let fd = socket()?;
    let mut buf = [0u8; 16];
    buf[..4].copy_from_slice(&ETHTOOL_GPAUSEPARAM.to_ne_bytes());
    ioctl(&fd, ifname, &mut buf).map_err(|e| context(e, "ETHTOOL_GPAUSEPARAM", ifname))?;
    let mut buf = pause_request(buf, on);
    ioctl(&fd, ifname, &mut buf).map_err(|e| context(e, "ETHTOOL_SPAUSEPARAM", ifname))
}

/// `ETHTOOL_SPAUSEPARAM` from a `ETHTOOL_GPAUSEPARAM` answer: same autoneg,
/// rx_pause = tx_pause = `on`.
fn pause_request(got: [u8; 16], on: bool) -> [u8; 16] {
    let mut b = got;
    b[..4].copy_from_slice(&ETHTOOL_SPAUSEPARAM.to_ne_bytes());
    b[8..12].copy_from_slice(&u32::from(on).to_ne_bytes());
    b[12..16].copy_from_slice(&u32::from(on).to_ne_bytes());
    b
}

fn with_bit(bits: u32, bit: u32, on: bool) -> u32 {
    if on {
        bits | 1 << bit
    } else {
        bits & !(1 << bit)
    }
}

fn context(e: io::Error, op: &str, ifname: &str) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => "the driver does not support it".to_string(),
        Some(libc::EPERM) => "needs CAP_NET_ADMIN".to_string(),
        Some(libc::ENODEV) => "no such interface in this network namespace".to_string(),
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("{op} on {ifname}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_request_keeps_autoneg_and_sets_both_directions() {
        let mut got = [0u8; 16];
        got[..4].copy_from_slice(&ETHTOOL_GPAUSEPARAM.to_ne_bytes());
        got[4..8].copy_from_slice(&1u32.to_ne_bytes()); // autoneg on
        got[8..12].copy_from_slice(&1u32.to_ne_bytes()); // rx on
        got[12..16].copy_from_slice(&0u32.to_ne_bytes()); // tx off
        let w = |b: &[u8; 16], i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        let off = pause_request(got, false);
        assert_eq!([w(&off, 0), w(&off, 4), w(&off, 8), w(&off, 12)], [ETHTOOL_SPAUSEPARAM, 1, 0, 0]);
        let on = pause_request(got, true);
        assert_eq!([w(&on, 0), w(&on, 4), w(&on, 8), w(&on, 12)], [0x13, 1, 1, 1]);
    }

    #[test]
    fn one_private_flag_changes_and_the_others_stay() {
        assert_eq!(with_bit(0b1011, 1, false), 0b1001);
        assert_eq!(with_bit(0b1001, 2, true), 0b1101);
        assert_eq!(with_bit(0b1001, 0, true), 0b1001);
    }

    /// Over the real ioctl: an interface that does not exist is named in the
    /// error, and loopback (no pause operations) says the driver cannot.
    #[test]
    fn writes_to_interfaces_that_cannot_take_them_say_why() {
        let e = set_pause("kr-nonexistent0", false).unwrap_err();
        assert!(e.to_string().contains("kr-nonexistent0: no such interface"), "{e}");
        let e = set_priv_flag("kr-nonexistent0", "fw-lldp-agent", false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        assert!(set_pause("lo", false).unwrap_err().to_string().contains("ETHTOOL_"));
        assert!(set_pause("bad/name/that/is/too/long", false).is_err());
    }

    /// The recordings are built from the same layouts the decoder reads:
    /// what is recorded is what is read back.
    #[test]
    fn fec_masks_read_as_ethtool_names_them() {
        assert_eq!(fec_name(1 << 3), "rs");
        assert_eq!(fec_name(1 << 4), "baser");
        assert_eq!(fec_name(1 << 2), "off");
        assert_eq!(fec_name(0), "none");
        assert_eq!(fec_name(1 << 1 | 1 << 3), "auto+rs");
        assert_eq!(fec_name(1 << 9), "bit9");
        let mut e = RecordedEthtool::new(vec![EthtoolExchange::fec("eth0", 1 << 5, 1 << 1)]);
        assert!(matches!(fec(&mut e, "eth0").unwrap(), EthtoolAnswer::Value(ref v) if v == "llrs"));
        let mut e = RecordedEthtool::new(vec![EthtoolExchange {
            ifname: "eth0".into(),
            cmd: ETHTOOL_GFECPARAM,
            answer: Err(libc::EOPNOTSUPP),
        }]);
        assert!(matches!(fec(&mut e, "eth0").unwrap(), EthtoolAnswer::Unsupported(_)));
    }

    #[test]
    fn recorded_answers_decode_through_the_same_reader() {
        let flags = ["link-down-on-close", "fw-lldp-agent", "vf-true-promisc-support"];
        let mut answers = EthtoolExchange::priv_flags("ens2f0", &flags, 0b010);
        answers.push(EthtoolExchange::pause("ens2f0", false, true, false));
        answers.extend(EthtoolExchange::priv_flags("ens1f0np0", &["rx_cqe_moder"], 1));
        answers.push(EthtoolExchange {
            ifname: "lo".into(),
            cmd: ETHTOOL_GPAUSEPARAM,
            answer: Err(libc::EOPNOTSUPP),
        });
        let mut r = RecordedEthtool::new(answers);
        assert!(matches!(priv_flag(&mut r, "ens2f0", "fw-lldp-agent").unwrap(), EthtoolAnswer::Value(true)));
        assert!(matches!(
            priv_flag(&mut r, "ens2f0", "link-down-on-close").unwrap(),
            EthtoolAnswer::Value(false)
        ));
        assert!(matches!(pause(&mut r, "ens2f0").unwrap(), EthtoolAnswer::Value((false, true, false))));
        match priv_flag(&mut r, "ens1f0np0", "fw-lldp-agent").unwrap() {
            EthtoolAnswer::Unsupported(why) => assert!(why.contains("has: rx_cqe_moder"), "{why}"),
            EthtoolAnswer::Value(v) => panic!("mlx5 has no fw-lldp-agent, read {v}"),
        }
        assert!(matches!(pause(&mut r, "lo").unwrap(), EthtoolAnswer::Unsupported(_)));
        let e = pause(&mut r, "ens9").unwrap_err();
        assert!(e.to_string().contains("ens9"), "{e}");
    }
}
