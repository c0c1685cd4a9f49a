//! Object-level helpers: metadata access, server-set fields (uid,
//! timestamps), name and label validation, the `PartialObjectMetadata` view.
//! Pure apart from the clock and the id generator.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

/// `metadata.<key>` as a string.
pub(crate) fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(key)?.as_str()
}

/// `metadata` as a mutable map, created when missing (and the object made an
/// object when it is not).
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(map) = obj else { unreachable!("made an object above") };
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// `metadata.resourceVersion` parsed, when present and numeric.
pub(crate) fn resource_version(obj: &Value) -> Option<u64> {
    meta_str(obj, "resourceVersion").and_then(|s| s.parse().ok())
}

/// The current time as an RFC 3339 `metav1.Time` (seconds, UTC).
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    rfc3339(secs)
}

/// Formats Unix seconds as `YYYY-MM-DDThh:mm:ssZ` (proleptic Gregorian,
/// days-to-civil conversion after H. Hinnant's `chrono`-compatible algorithm).
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Unique ids for `metadata.uid` and `generateName` suffixes: a splitmix64
/// sequence from a per-process random seed (std's `RandomState` keys), so no
/// RNG crate is needed; uniqueness within one emulator is what matters.
#[derive(Debug)]
pub(crate) struct Ids {
    state: AtomicU64,
}

impl Ids {
    pub(crate) fn new() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0));
        Ids { state: AtomicU64::new(h.finish()) }
    }

    fn next(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A version-4-shaped UUID string.
    pub(crate) fn uid(&self) -> String {
        let (a, b) = (self.next(), self.next());
        let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x4000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFFF,
            b >> 48,
            b & 0xFFFF_FFFF_FFFF
        )
    }

    /// A 5-character `generateName` suffix from the alphabet the real server
    /// uses (`k8s.io/apimachinery/pkg/util/rand`: no vowels, no 0/1/3).
    pub(crate) fn suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    /// A random token (32 hex digits) for kubeconfig users.
    pub(crate) fn token(&self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain, as object names must be (`IsDNS1123Subdomain`).
pub(crate) fn check_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 || !s.split('.').all(is_dns_label) {
        return Err(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (got {s:?})"
        ));
    }
    Ok(())
}

/// RFC 1123 label, as namespace names must be.
pub(crate) fn check_label_name(s: &str) -> Result<(), String> {
    if !is_dns_label(s) {
        return Err(format!(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', start and end with an alphanumeric character, at most 63 characters (got {s:?})"
        ));
    }
    Ok(())
}

/// A label value or the name part of a label key (`IsQualifiedName` /
/// `IsValidLabelValue`): at most 63 of `[A-Za-z0-9_.-]`, alphanumeric at
/// both ends (values may be empty).
fn is_label_token(s: &str) -> bool {
    s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// Validates `metadata.labels`: keys `[prefix/]name`, values as above.
pub(crate) fn check_labels(obj: &Value) -> Result<(), String> {
    let Some(labels) = obj.pointer("/metadata/labels") else { return Ok(()) };
    if labels.is_null() {
        return Ok(());
    }
    let Some(labels) = labels.as_object() else {
        return Err("metadata.labels: must be a map of strings".into());
    };
    for (k, v) in labels {
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if name.is_empty() || !is_label_token(name) || prefix.is_some_and(|p| check_subdomain(p).is_err()) {
            return Err(format!("metadata.labels: Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', at most 63, with an optional DNS subdomain prefix and '/'"));
        }
        let Some(v) = v.as_str() else {
            return Err(format!("metadata.labels.{k}: must be a string"));
        };
        if !is_label_token(v) {
            return Err(format!("metadata.labels: Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63"));
        }
    }
    Ok(())
}

/// The part of an object whose change bumps `metadata.generation`:
/// everything but `metadata` (and `status` when the resource has a status
/// subresource), as the CRD strategy compares (apiextensions-apiserver
/// `customresource/strategy.go`).
pub(crate) fn generation_part(obj: &Value, status_subresource: bool) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if status_subresource {
            m.remove("status");
        }
    }
    v
}

/// `meta.k8s.io/v1 PartialObjectMetadata` of an object.
pub(crate) fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_seconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn ids_are_unique_and_well_formed() {
        let ids = Ids::new();
        let (a, b) = (ids.uid(), ids.uid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        let s = ids.suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)));
    }

    #[test]
    fn names_and_labels_are_validated_like_the_real_server() {
        assert!(check_subdomain("node-1.example").is_ok());
        assert!(check_subdomain("Node1").is_err());
        assert!(check_subdomain("-a").is_err());
        assert!(check_label_name("a.b").is_err());
        let ok = json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "true", "a": "", "x_y.z": "A-1"}}});
        assert!(check_labels(&ok).is_ok());
        for bad in [
            json!({"a": "-x"}),
            json!({"a/": "x"}),
            json!({"Bad_Prefix/a": "x"}),
            json!({"a": 1}),
            json!({"a": "x".repeat(64)}),
        ] {
            assert!(check_labels(&json!({"metadata": {"labels": bad.clone()}})).is_err(), "{bad}");
        }
    }

    #[test]
    fn generation_ignores_metadata_and_subresource_status() {
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"s": 1}});
        let b = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"x": 1}, "status": {"s": 2}});
        assert_eq!(generation_part(&a, true), generation_part(&b, true));
        assert_ne!(generation_part(&a, false), generation_part(&b, false));
    }
}
