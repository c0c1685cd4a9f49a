//! Random spread of timers, so a thousand agents started together (a DaemonSet
//! rollout) do not poll, heartbeat or retry in the same second. The randomness
//! comes from std's per-process random SipHash keys; no cryptographic quality needed.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// A random number in `[0, 1)`.
pub fn unit() -> f64 {
    // Each RandomState gets fresh keys (std increments a random per-thread seed).
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x6b75_6265_2d72_646d);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `d` shortened by a random part of up to `frac` (`frac` in `[0, 1]`).
pub fn shorten(d: Duration, frac: f64) -> Duration {
    d.mul_f64(1.0 - frac.clamp(0.0, 1.0) * unit())
}

/// `d` lengthened by a random part of up to `frac`.
pub fn lengthen(d: Duration, frac: f64) -> Duration {
    d.mul_f64(1.0 + frac.max(0.0) * unit())
}

/// `d` moved by up to `±frac`.
pub fn spread(d: Duration, frac: f64) -> Duration {
    d.mul_f64(1.0 + frac.clamp(0.0, 1.0) * (2.0 * unit() - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_in_their_bounds_and_vary() {
        let d = Duration::from_secs(100);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let u = unit();
            assert!((0.0..1.0).contains(&u));
            let s = spread(d, 0.1);
            assert!(s >= Duration::from_secs(90) && s <= Duration::from_secs(110), "{s:?}");
            let l = lengthen(d, 0.1);
            assert!(l >= d && l <= Duration::from_secs(110), "{l:?}");
            seen.insert(s);
        }
        assert!(seen.len() > 100, "not random: {} distinct of 200", seen.len());
        assert_eq!(spread(d, 0.0), d);
    }
}
