//! The CNI versions we speak, the newest of them, and how versions order.

/// CNI versions we speak (results are produced in the one asked for).
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest version, used where the input names none.
pub const LATEST: &str = "1.1.0";

/// Orders CNI versions (`0.3.1` < `1.0.0`).
pub fn key(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0), it.next().unwrap_or(0))
}
