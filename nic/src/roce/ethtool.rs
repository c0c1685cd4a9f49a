//! The two ethtool reads the agent needs, over the legacy `SIOCETHTOOL` ioctl
//! (include/uapi/linux/ethtool.h, include/uapi/linux/sockios.h): link-level
//! pause (`ethtool -a X`) and the ice `fw-lldp-agent` private flag
//! (`ethtool --show-priv-flags X`). The ioctl acts in the caller's netns.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GPAUSEPARAM`: get `struct ethtool_pauseparam`.
const ETHTOOL_GPAUSEPARAM: u32 = 0x12;
/// `ETHTOOL_GSTRINGS`: get a string set (`struct ethtool_gstrings`).
const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GPFLAGS`: get private flags (`struct ethtool_value`).
const ETHTOOL_GPFLAGS: u32 = 0x27;
/// `ETHTOOL_GSSET_INFO`: string set sizes (`struct ethtool_sset_info`).
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETH_SS_PRIV_FLAGS` (`enum ethtool_stringset`).
const ETH_SS_PRIV_FLAGS: u32 = 2;
/// `ETH_GSTRING_LEN`.
const ETH_GSTRING_LEN: usize = 32;

/// `struct ifreq` with the `ifr_data` member: 16-byte name + pointer, padded
/// to the kernel's 40-byte union size on 64-bit.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// What an ethtool read found.
#[derive(Debug)]
pub(crate) enum EthtoolAnswer<T> {
    /// The value.
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
pub(crate) fn pause(ifname: &str) -> io::Result<EthtoolAnswer<(bool, bool, bool)>> {
    let fd = socket()?;
    // struct ethtool_pauseparam { u32 cmd, autoneg, rx_pause, tx_pause }
    let mut buf = [0u8; 16];
    buf[..4].copy_from_slice(&ETHTOOL_GPAUSEPARAM.to_ne_bytes());
    match ioctl(&fd, ifname, &mut buf) {
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

/// The private flag `flag` (`ethtool --show-priv-flags <if>`).
pub(crate) fn priv_flag(ifname: &str, flag: &str) -> io::Result<EthtoolAnswer<bool>> {
    let fd = socket()?;
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[] }
    let mut info = [0u8; 8 + 8 + 4];
    info[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    info[8..16].copy_from_slice(&(1u64 << ETH_SS_PRIV_FLAGS).to_ne_bytes());
    match ioctl(&fd, ifname, &mut info) {
        Ok(()) => {}
        Err(e) if unsupported(&e) => {
            return Ok(EthtoolAnswer::Unsupported(format!(
                "driver has no private flags (ETHTOOL_GSSET_INFO: {e})"
            )))
        }
        Err(e) => return Err(e),
    }
    let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or([0; 8]));
    let count = u32::from_ne_bytes(info[16..20].try_into().unwrap_or([0; 4])) as usize;
    // The kernel clears the bit of a set the driver does not have.
    if mask & (1 << ETH_SS_PRIV_FLAGS) == 0 || count == 0 {
        return Ok(EthtoolAnswer::Unsupported("driver has no private flags".into()));
    }
    // Private flags are a u32 bitmap: more than 32 names cannot be addressed.
    let count = count.min(32);
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[] }
    let mut strings = vec![0u8; 12 + count * ETH_GSTRING_LEN];
    strings[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_PRIV_FLAGS.to_ne_bytes());
    strings[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ioctl(&fd, ifname, &mut strings)?;
    let names: Vec<String> = strings[12..]
        .chunks(ETH_GSTRING_LEN)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();
    let Some(bit) = names.iter().position(|n| n == flag) else {
        return Ok(EthtoolAnswer::Unsupported(format!(
            "driver has no {flag} private flag (has: {})",
            names.join(", ")
        )));
    };
    // struct ethtool_value { u32 cmd; u32 data }
    let mut val = [0u8; 8];
    val[..4].copy_from_slice(&ETHTOOL_GPFLAGS.to_ne_bytes());
    ioctl(&fd, ifname, &mut val)?;
    let bits = u32::from_ne_bytes([val[4], val[5], val[6], val[7]]);
    Ok(EthtoolAnswer::Value(bits & (1 << bit) != 0))
}
