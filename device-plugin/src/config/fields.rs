//! Reading fields out of a parsed YAML/JSON value, with errors that name the
//! file, the pool and the field. Shared by the three formats.
//!
//! Key matching follows the format's origin: our own format matches keys
//! exactly; the two Go projects read their files with `encoding/json`, which
//! matches a key to a field case-insensitively (so generated configs with
//! `"IsRdma": true` or `"NeedVhostNet": false` mean what they meant there).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use nic::PciAddr;
use serde_json::{Map, Value};

use super::{ConfigError, PfName, RootDevice};

/// How keys are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keys {
    /// Exactly as documented (our format).
    Exact,
    /// Any ASCII case, as Go's `encoding/json` does.
    AnyCase,
}

/// Error context: the file and the pool being read.
pub(super) struct Cx {
    pub path: PathBuf,
    pub pool: Option<String>,
}

/// A mapping whose keys were checked against the known ones: lookups use the
/// documented spelling, messages the spelling the file used.
pub(super) struct Obj<'a> {
    at: String,
    fields: BTreeMap<&'static str, (&'a str, &'a Value)>,
}

/// `at.key`, or `key` at the top.
pub(super) fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

impl Cx {
    pub fn err(&self, field: &str, why: impl Into<String>) -> ConfigError {
        ConfigError::Field {
            path: self.path.clone(),
            pool: self.pool.clone(),
            field: field.to_string(),
            why: why.into(),
        }
    }

    /// Checks `m` (found at `at`) against `known`: an unknown key is an error
    /// naming it (a typo must not silently widen a selection), and so is a key
    /// given twice in different cases.
    pub fn obj<'a>(
        &self,
        m: &'a Map<String, Value>,
        at: &str,
        known: &[&'static str],
        keys: Keys,
    ) -> Result<Obj<'a>, ConfigError> {
        let mut fields = BTreeMap::new();
        for (k, v) in m {
            let canon = known.iter().copied().find(|c| match keys {
                Keys::Exact => *c == k,
                Keys::AnyCase => c.eq_ignore_ascii_case(k),
            });
            let Some(canon) = canon else {
                return Err(
                    self.err(&join(at, k), format!("unknown field; expected one of: {}", known.join(", ")))
                );
            };
            if let Some((first, _)) = fields.insert(canon, (k.as_str(), v)) {
                return Err(self.err(&join(at, k), format!("given twice (also as `{first}`)")));
            }
        }
        Ok(Obj { at: at.to_string(), fields })
    }

    /// The mapping at `key` of `o`, if present.
    pub fn mapping<'a>(&self, o: &Obj<'a>, key: &str) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.err(&o.path(key), format!("expected a mapping, found {v}"))),
        }
    }

    pub fn opt_str(&self, o: &Obj, key: &str) -> Result<Option<String>, ConfigError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.err(&o.path(key), format!("expected a string, found {v}"))),
        }
    }

    pub fn opt_bool(&self, o: &Obj, key: &str) -> Result<Option<bool>, ConfigError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(&o.path(key), format!("expected true or false, found {v}"))),
        }
    }

    /// A whole number in `range`, if present.
    pub fn opt_int(
        &self,
        o: &Obj,
        key: &str,
        range: RangeInclusive<i64>,
    ) -> Result<Option<i64>, ConfigError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if range.contains(&n) => Ok(Some(n)),
                _ => Err(self.err(
                    &o.path(key),
                    format!("expected a whole number from {} to {}, found {v}", range.start(), range.end()),
                )),
            },
        }
    }

    /// A list of non-empty strings. Numbers are refused: YAML reads an unquoted
    /// `0x15b3` as the number 5555 and `1e3` as 1000, so the text the user
    /// wrote is lost; only a quoted value is taken as written.
    pub fn strings(&self, o: &Obj, key: &str) -> Result<Vec<String>, ConfigError> {
        let at = o.path(key);
        match o.get(key) {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    Value::Number(n) => Err(self.err(
                        &format!("{at}[{i}]"),
                        format!("found the number {n}: quote it (\"…\"); YAML reads unquoted 8086 as a decimal number and 0x15b3 as 5555, so the digits as written are lost"),
                    )),
                    v => Err(self.err(&format!("{at}[{i}]"), format!("expected a non-empty string, found {v}"))),
                })
                .collect(),
            Some(v) => Err(self.err(&at, format!("expected a list, found {v}"))),
        }
    }

    /// PCI vendor or device ids. `Strict`: exactly as sysfs and the Go projects
    /// spell them (4 lower-case hex digits, compared as strings there: `"0x15b3"`
    /// or `"15B3"` select nothing upstream, so they are refused with the spelling
    /// that works). `Lenient` (ours): also `0x` and upper case.
    pub fn pci_ids(&self, o: &Obj, key: &str, strict: bool) -> Result<Vec<u16>, ConfigError> {
        let at = o.path(key);
        self.strings(o, key)?
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let field = format!("{at}[{i}]");
                let hex4 = |t: &str| t.len() == 4 && t.bytes().all(|b| b.is_ascii_hexdigit());
                let bare = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
                if strict && bare != s && hex4(bare) {
                    return Err(self.err(
                        &field,
                        format!("{s:?}: write {:?}; the ids are compared as text upstream, so this spelling selects nothing there", bare.to_ascii_lowercase()),
                    ));
                }
                let t = if strict { s.as_str() } else { bare };
                if !hex4(t) {
                    return Err(self.err(&field, format!("{s:?} is not a 4-digit hex PCI id (e.g. \"15b3\")")));
                }
                if strict && t.bytes().any(|b| b.is_ascii_uppercase()) {
                    return Err(self.err(
                        &field,
                        format!("{s:?}: write {:?}; the ids are compared as lower-case strings upstream, so this one selects nothing there", t.to_ascii_lowercase()),
                    ));
                }
                u16::from_str_radix(t, 16).map_err(|_| self.err(&field, format!("{s:?} is not a hex PCI id")))
            })
            .collect()
    }

    /// PCI addresses. `full`: only the `DDDD:BB:DD.F` form the kernel prints
    /// (the Go projects compare strings, so a short `3d:00.2` selects nothing there).
    pub fn pcis(&self, o: &Obj, key: &str, full: bool) -> Result<Vec<PciAddr>, ConfigError> {
        let at = o.path(key);
        self.strings(o, key)?
            .iter()
            .enumerate()
            .map(|(i, s)| self.pci(&format!("{at}[{i}]"), s, full))
            .collect()
    }

    pub fn pci(&self, field: &str, s: &str, full: bool) -> Result<PciAddr, ConfigError> {
        let a: PciAddr = s.parse().map_err(|e: nic::PciAddrError| self.err(field, e.to_string()))?;
        if full && a.to_string() != *s {
            return Err(self.err(field, format!("{s:?}: write {:?} (the full, lower-case form sysfs uses; upstream compares the text, so this spelling selects nothing there)", a.to_string())));
        }
        Ok(a)
    }

    pub fn numbers(&self, o: &Obj, key: &str) -> Result<Vec<u32>, ConfigError> {
        let at = o.path(key);
        match o.get(key) {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_u64().filter(|n| *n <= u64::from(u32::MAX)).map(|n| n as u32).ok_or_else(|| {
                        self.err(&format!("{at}[{i}]"), format!("expected a whole number, found {v}"))
                    })
                })
                .collect(),
            Some(v) => Err(self.err(&at, format!("expected a list of numbers, found {v}"))),
        }
    }

    /// `pfNames`: `ens1f0`, `ens1f0#0-3,6`.
    pub fn pf_names(&self, o: &Obj, key: &str) -> Result<Vec<PfName>, ConfigError> {
        let at = o.path(key);
        let mut out = vec![];
        for (i, p) in self.strings(o, key)?.iter().enumerate() {
            out.push(super::parse_pf_name(p).map_err(|why| self.err(&format!("{at}[{i}]"), why))?);
        }
        Ok(out)
    }

    /// `rootDevices`: `0000:3d:00.0`, `0000:3d:00.0#0-3`.
    pub fn root_devices(&self, o: &Obj, key: &str, full: bool) -> Result<Vec<RootDevice>, ConfigError> {
        let at = o.path(key);
        let mut out = vec![];
        for (i, s) in self.strings(o, key)?.iter().enumerate() {
            let field = format!("{at}[{i}]");
            let (addr, ranges) = match s.split_once('#') {
                None => (s.as_str(), None),
                Some((a, r)) => (a, Some(r)),
            };
            let pci = self.pci(&field, addr, full)?;
            let vfs = match ranges {
                None => None,
                Some(r) => Some(super::parse_vf_ranges(s, r).map_err(|why| self.err(&field, why))?),
            };
            out.push(RootDevice { pci, vfs });
        }
        Ok(out)
    }
}

impl<'a> Obj<'a> {
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.fields.get(key).map(|(_, v)| *v)
    }

    /// The field's path as the file spells it (`selectors.IsRdma`).
    pub fn path(&self, key: &str) -> String {
        join(&self.at, self.fields.get(key).map(|(k, _)| *k).unwrap_or(key))
    }
}
