//! Small helpers shared by the in-VM tests.

use anyhow::Context;
use std::fs;

/// A sysfs attribute, trimmed.
pub fn read_trim(path: &str) -> anyhow::Result<String> {
    Ok(fs::read_to_string(path).with_context(|| format!("read {path}"))?.trim().to_string())
}

/// The ifindex of a netdev, from sysfs.
pub fn ifindex(name: &str) -> anyhow::Result<u32> {
    let s = read_trim(&format!("/sys/class/net/{name}/ifindex"))?;
    s.parse().with_context(|| format!("ifindex of {name}: {s:?}"))
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_str(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Runs an iproute2 tool (full path: busybox would shadow `ip`) and returns stdout; used only as an
/// independent oracle, never as the code under test.
pub fn iproute2(tool: &str, args: &[&str]) -> anyhow::Result<String> {
    let path = format!("/usr/sbin/{tool}");
    let out = std::process::Command::new(&path).args(args).output().with_context(|| format!("run {path}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{tool} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
