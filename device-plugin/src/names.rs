//! Names derived from a pool's prefix and name, in one place: environment
//! variables, CDI kinds and the pool's socket file. Pure functions, so the
//! config loader can check at load time that two pools never derive the same
//! name, and the DRA mode can reuse them.

use std::path::Path;

/// The part of an environment variable name derived from `s`, as
/// sriov-network-device-plugin spells `PCIDEVICE_<PREFIX>_<NAME>`: ASCII letters
/// and digits upper-cased, every other character `_`.
pub fn env_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// `PCIDEVICE_<PREFIX>_<NAME>` (sriov-network-device-plugin's variable).
pub fn pcidevice_env(prefix: &str, name: &str) -> String {
    format!("PCIDEVICE_{}_{}", env_part(prefix), env_part(name))
}

/// Stem of a pool's own variables: `KUBERDMA_<NAME>` (`KUBERDMA_RAIL0_RDMA_DEVICES`).
pub fn pool_env_stem(name: &str) -> String {
    format!("KUBERDMA_{}", env_part(name))
}

/// Whether `s` is a CDI vendor name (CDI `SPEC.md`, "Kind"; container-device-interface
/// `pkg/parser` `ValidateVendorName`): starts with a letter, ends with a letter or digit,
/// letters, digits, `-`, `_` and `.` in between.
pub fn is_cdi_vendor(s: &str) -> bool {
    cdi_label(s, &['-', '_', '.'])
}

/// Whether `s` is a CDI class name valid since cdiVersion 0.3.0 (`ValidateClassName`):
/// as a vendor but without `.` (dots in a class need cdiVersion 0.6.0).
pub fn is_cdi_class(s: &str) -> bool {
    cdi_label(s, &['-', '_'])
}

fn cdi_label(s: &str, inner: &[char]) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || inner.contains(&c))
}

/// Whether `s` is a CDI device name (`ValidateDeviceName`): starts and ends with
/// a letter or digit; letters, digits, `-`, `_`, `.` and `:` in between. A first
/// character that is not a letter needs cdiVersion 0.5.0.
pub fn is_cdi_device(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
}

/// CDI kind (`vendor/class`) of pool `prefix/name`, valid under cdiVersion 0.3.0
/// rules for every pool name and prefix the config accepts: the prefix is the
/// vendor when it starts with a letter (else `kuberdma-<prefix>`), the name is the
/// class when it is a valid class (else `pool-<name>` with every character a class
/// cannot hold turned into `-`). `kuberdma.io/rdma_vfs` stays as it is; `100g`
/// becomes `kuberdma.io/pool-100g`, `rail.0` `kuberdma.io/pool-rail-0`,
/// `9lives.io/x` `kuberdma-9lives.io/x`. Different pools can map to one kind
/// (`rail.0` and `pool-rail-0`): the config loader refuses that.
pub fn cdi_kind(prefix: &str, name: &str) -> String {
    let vendor = if is_cdi_vendor(prefix) { prefix.to_string() } else { format!("kuberdma-{prefix}") };
    let class = if is_cdi_class(name) {
        name.to_string()
    } else {
        let tail: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
        format!("pool-{tail}")
    };
    format!("{vendor}/{class}")
}

/// Longest socket path the kernel accepts: `sun_path` is 108 bytes including the
/// terminating NUL (`struct sockaddr_un`, `include/uapi/linux/un.h`).
pub const SUN_PATH_MAX: usize = 107;

/// Socket file name of a pool in `dir`: `kuberdma-<prefix>-<name>.sock` when the
/// full path fits `sun_path`, else `kuberdma-<16 hex digits>.sock`, the FNV-1a
/// hash of `prefix/name` (deterministic across restarts and nodes, so the kubelet
/// sees the same endpoint). `None` when even that does not fit: `dir` itself is
/// too long.
pub fn socket_name(dir: &Path, prefix: &str, name: &str) -> Option<String> {
    let dir_len = dir.as_os_str().len() + 1;
    let plain = format!("kuberdma-{prefix}-{name}.sock");
    if dir_len + plain.len() <= SUN_PATH_MAX {
        return Some(plain);
    }
    let hashed = format!("kuberdma-{:016x}.sock", fnv1a64(format!("{prefix}/{name}").as_bytes()));
    (dir_len + hashed.len() <= SUN_PATH_MAX).then_some(hashed)
}

/// FNV-1a, 64 bits (offset basis and prime from the FNV reference, draft-eastlake-fnv).
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_parts_follow_sriov_network_device_plugin() {
        assert_eq!(pcidevice_env("intel.com", "sriov-net_a"), "PCIDEVICE_INTEL_COM_SRIOV_NET_A");
        assert_eq!(pool_env_stem("rail.0"), "KUBERDMA_RAIL_0");
    }

    #[test]
    fn fnv_matches_the_reference_vectors() {
        // draft-eastlake-fnv test vectors for FNV-1a 64.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn a_long_kubelet_dir_gets_a_hashed_socket_name_that_fits() {
        let short = Path::new("/var/lib/kubelet/device-plugins");
        assert_eq!(socket_name(short, "kuberdma.io", "a").as_deref(), Some("kuberdma-kuberdma.io-a.sock"));
        let long_name = "n".repeat(63);
        let n = socket_name(short, "kuberdma.io", &long_name).unwrap();
        assert!(n.starts_with("kuberdma-") && n.len() == 30, "{n}");
        assert!(short.join(&n).as_os_str().len() <= SUN_PATH_MAX);
        assert_eq!(socket_name(short, "kuberdma.io", &long_name), Some(n), "deterministic");
        let deep = Path::new("/").join("d".repeat(90));
        assert_eq!(socket_name(&deep, "kuberdma.io", "a"), None);
    }
}
