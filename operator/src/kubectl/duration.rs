//! The one duration syntax of every interval flag, kubectl's: a Go duration
//! (`time.ParseDuration`: `30s`, `2m`, `500ms`, `1h30m`, `1.5s`; units `ns`, `us`,
//! `µs`, `ms`, `s`, `m`, `h`; `0` alone needs none), and a bare whole number as
//! seconds, as client-go's `ParseTimeout` (k8s.io/client-go v0.34.4
//! `tools/clientcmd/helpers.go`) takes `--request-timeout`. Negative durations are
//! refused: no interval here can be one.

use std::time::Duration;

/// What every interval flag's help says it takes.
pub const SYNTAX: &str = "a duration with a unit (30s, 2m, 500ms, 1h30m) or a whole number of seconds";

/// Why a duration cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not the syntax.
    #[error("{0:?} is not {SYNTAX}")]
    Syntax(String),
    /// Too long to represent.
    #[error("{0:?} is out of range")]
    Range(String),
    /// Sub-second precision where whole seconds are counted.
    #[error("{0:?} is not a whole number of seconds")]
    NotWholeSeconds(String),
}

/// The nanoseconds in one of Go's duration units.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// `s` as kubectl reads an interval: a bare whole number is seconds, else a Go duration.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let syntax = || DurationError::Syntax(s.to_string());
    let range = || DurationError::Range(s.to_string());
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map(Duration::from_secs).map_err(|_| range());
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() || rest.starts_with('-') {
        return Err(syntax());
    }
    // Exact arithmetic in nanoseconds: no float rounding, no overflow panic.
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let nanos = unit_nanos(unit).ok_or_else(syntax)?;
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(syntax());
        }
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| range())? };
        let mut part = whole.checked_mul(nanos).ok_or_else(range)?;
        let mut scale = nanos;
        for d in frac.bytes() {
            scale /= 10;
            part += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(part).ok_or_else(range)?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| range())?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// [`parse`] for a flag counted in whole seconds (`agent --poll-interval 30s`).
pub fn parse_secs(s: &str) -> Result<u64, DurationError> {
    let d = parse(s)?;
    if d.subsec_nanos() != 0 {
        return Err(DurationError::NotWholeSeconds(s.to_string()));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_kubectl_reads_request_timeout() {
        let ok = |s: &str| parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("5"), Duration::from_secs(5));
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok(".5h"), Duration::from_secs(1800));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("+10us"), Duration::from_micros(10));
        assert_eq!(ok("3µs"), Duration::from_micros(3));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
    }

    #[test]
    fn what_go_refuses_is_refused_and_nothing_panics() {
        for bad in ["", "s", "10x", "-1s", "1.5.2s", ".s", "1 s", "1S", "30sec", "+", "1e3s"] {
            assert_eq!(parse(bad), Err(DurationError::Syntax(bad.into())), "{bad:?}");
        }
        for huge in ["99999999999999999999999h", "99999999999999999999999", "18446744073709551616s"] {
            assert_eq!(parse(huge), Err(DurationError::Range(huge.into())), "{huge:?}");
        }
    }

    #[test]
    fn a_whole_seconds_flag_takes_both_forms_and_refuses_fractions() {
        assert_eq!(parse_secs("30"), Ok(30));
        assert_eq!(parse_secs("30s"), Ok(30));
        assert_eq!(parse_secs("10m"), Ok(600));
        assert_eq!(parse_secs("1500ms"), Err(DurationError::NotWholeSeconds("1500ms".into())));
        assert!(parse_secs("soon").unwrap_err().to_string().contains("(30s, 2m, 500ms, 1h30m)"));
    }
}
