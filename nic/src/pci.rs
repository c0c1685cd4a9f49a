//! PCI addresses (`DDDD:BB:DD.F`), parsed strictly so that a string from a
//! config file, CNI stdin or a sysfs link can never smuggle a path into us.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI function address: domain, bus, device (slot) and function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI domain (segment), 16 bits in practice, 32 allowed by Linux.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:3b:00.2): {why}")]
pub struct PciAddrError {
    /// The rejected input (truncated to 64 characters).
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl PciAddr {
    /// Builds an address from its parts.
    pub const fn new(domain: u32, bus: u8, device: u8, function: u8) -> Self {
        Self { domain, bus, device, function }
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

impl FromStr for PciAddr {
    type Err = PciAddrError;

    /// Accepts `DDDD:BB:DD.F` (domain 4–8 hex digits) and the short `BB:DD.F`
    /// (domain 0), hex digits only: no `/`, `..` or whitespace can pass.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| PciAddrError { input: s.chars().take(64).collect(), why };
        if !s.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(err("only hex digits, ':' and '.' are allowed"));
        }
        let (head, func) = s.rsplit_once('.').ok_or_else(|| err("missing '.function'"))?;
        let parts: Vec<&str> = head.split(':').collect();
        let (dom, bus, dev) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0000", *b, *v),
            _ => return Err(err("expected domain:bus:device.function")),
        };
        if !(4..=8).contains(&dom.len()) || bus.len() != 2 || dev.len() != 2 || func.len() != 1 {
            return Err(err("wrong field width"));
        }
        let hex = |t: &str| u32::from_str_radix(t, 16).map_err(|_| err("not hexadecimal"));
        let (domain, bus, device, function) = (hex(dom)?, hex(bus)?, hex(dev)?, hex(func)?);
        if device > 0x1f {
            return Err(err("device number above 1f"));
        }
        if function > 7 {
            return Err(err("function number above 7"));
        }
        Ok(Self::new(domain, bus as u8, device as u8, function as u8))
    }
}

impl Serialize for PciAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonical_form() {
        let a: PciAddr = "0000:3b:00.2".parse().unwrap();
        assert_eq!(a, PciAddr::new(0, 0x3b, 0, 2));
        assert_eq!(a.to_string(), "0000:3b:00.2");
        assert_eq!("3B:1f.7".parse::<PciAddr>().unwrap().to_string(), "0000:3b:1f.7");
        assert_eq!("10000:00:01.0".parse::<PciAddr>().unwrap().domain, 0x10000);
    }

    #[test]
    fn rejects_path_tricks_and_bad_fields() {
        for bad in [
            "../../etc",
            "0000:3b:00.2/..",
            "0000:3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "",
            " 0000:3b:00.0",
            "0000:3b:0.0",
            "zz:00.0",
            "0000:00:3b:00.0",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad:?} accepted");
        }
    }
}
