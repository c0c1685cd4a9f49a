//! Small readers for sysfs attribute files, links and directories.
//!
//! Every helper takes the full path (the caller joins it onto its
//! [`crate::Roots`] once) and returns a [`SysfsError`] that carries the path,
//! so that discovery can turn any failure into a [`crate::Problem`] whose
//! reason names the file and what was found. Nothing here panics on what the
//! kernel (or a damaged simulated tree) hands us.
//!
//! Files are read with one `open` + `read` into a small stack buffer: sysfs
//! attributes are at most a page, and skipping `read_to_string`'s size probe
//! keeps discovery of a thousand VFs cheap.

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Why a sysfs attribute, link or directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// The file, link or directory could not be read.
    #[error("{path:?}: {source}")]
    Io {
        /// What was read.
        path: PathBuf,
        /// The OS error (`ENOENT`, `EINVAL` for an attribute the kernel refuses, …).
        #[source]
        source: io::Error,
    },
    /// The contents are not what the attribute should hold.
    #[error("{path:?}: {expected}, found {found:?}")]
    Invalid {
        /// What was read.
        path: PathBuf,
        /// What was expected, e.g. "not a decimal number".
        expected: &'static str,
        /// The trimmed contents (cut to 64 characters).
        found: String,
    },
}

impl SysfsError {
    fn io(path: &Path, source: io::Error) -> Self {
        SysfsError::Io { path: path.to_path_buf(), source }
    }

    fn invalid(path: &Path, expected: &'static str, found: &str) -> Self {
        SysfsError::Invalid { path: path.to_path_buf(), expected, found: found.chars().take(64).collect() }
    }

    /// The path involved.
    pub fn path(&self) -> &Path {
        match self {
            SysfsError::Io { path, .. } | SysfsError::Invalid { path, .. } => path,
        }
    }

    /// The OS error kind, for I/O errors.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            SysfsError::Io { source, .. } => Some(source.kind()),
            SysfsError::Invalid { .. } => None,
        }
    }

    /// The file (or link, or directory) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::NotFound)
    }

    /// The kernel refused the read with `EINVAL`, as it does for attributes
    /// that exist but have no value right now (`speed` of a down link, the
    /// type of an empty GID table entry).
    pub fn is_einval(&self) -> bool {
        matches!(self, SysfsError::Io { source, .. } if source.raw_os_error() == Some(libc::EINVAL))
    }
}

/// Reads an attribute and trims surrounding whitespace (sysfs ends values with `\n`).
pub fn read_string(path: &Path) -> Result<String, SysfsError> {
    let mut buf = [0u8; 4096];
    let mut f = std::fs::File::open(path).map_err(|e| SysfsError::io(path, e))?;
    let mut len = 0;
    // sysfs hands over a whole attribute (at most a page) in the first read, and a
    // regular file returns fewer bytes than asked only at its end: a short read is
    // the end, which saves the extra zero-length read per file.
    loop {
        let n = f.read(&mut buf[len..]).map_err(|e| SysfsError::io(path, e))?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        if len == buf.len() {
            // Longer than a page is not a sysfs attribute; read the rest the slow way.
            let mut rest = Vec::new();
            f.read_to_end(&mut rest).map_err(|e| SysfsError::io(path, e))?;
            let mut all = buf.to_vec();
            all.extend_from_slice(&rest);
            return String::from_utf8(all)
                .map(|s| s.trim().to_string())
                .map_err(|_| SysfsError::invalid(path, "not UTF-8", ""));
        }
    }
    match std::str::from_utf8(&buf[..len]) {
        Ok(s) => Ok(s.trim().to_string()),
        Err(_) => Err(SysfsError::invalid(path, "not UTF-8", &String::from_utf8_lossy(&buf[..len]))),
    }
}

/// Reads a decimal unsigned number (`mtu`, `ifindex`, `sriov_numvfs`).
pub fn read_u32(path: &Path) -> Result<u32, SysfsError> {
    let s = read_string(path)?;
    s.parse().map_err(|_| SysfsError::invalid(path, "not a decimal number", &s))
}

/// Reads a decimal signed number (`numa_node`, `speed`, which use -1 for "none").
pub fn read_i64(path: &Path) -> Result<i64, SysfsError> {
    let s = read_string(path)?;
    s.parse().map_err(|_| SysfsError::invalid(path, "not a decimal number", &s))
}

/// Reads a `0x`-prefixed hexadecimal number (`vendor`, `device`, `class`).
pub fn read_hex_u32(path: &Path) -> Result<u32, SysfsError> {
    let s = read_string(path)?;
    parse_hex(&s).ok_or_else(|| SysfsError::invalid(path, "not a 0x-prefixed hex number", &s))
}

/// Reads a 16-bit `0x`-prefixed hexadecimal id (`vendor`, `device`).
pub fn read_hex_u16(path: &Path) -> Result<u16, SysfsError> {
    let s = read_string(path)?;
    parse_hex(&s)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| SysfsError::invalid(path, "not a 16-bit 0x-prefixed hex id", &s))
}

fn parse_hex(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// Reads a `major:minor` attribute (`dev` of a char device).
pub fn read_major_minor(path: &Path) -> Result<(u32, u32), SysfsError> {
    let s = read_string(path)?;
    let parsed = s.split_once(':').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
    parsed.ok_or_else(|| SysfsError::invalid(path, "not major:minor", &s))
}

/// The target of a symbolic link, as stored (usually relative).
pub fn read_link(path: &Path) -> Result<PathBuf, SysfsError> {
    std::fs::read_link(path).map_err(|e| SysfsError::io(path, e))
}

/// The last component of a link's target: `driver` → `mlx5_core`,
/// `virtfn3` → `0000:3d:00.5`.
pub fn link_name(path: &Path) -> Result<String, SysfsError> {
    let target = read_link(path)?;
    let name = target.file_name().and_then(|n| n.to_str()).map(str::to_string);
    name.ok_or_else(|| {
        SysfsError::invalid(path, "link target without a UTF-8 file name", &target.to_string_lossy())
    })
}

/// Entry names of a directory, sorted; names that are not UTF-8 are skipped
/// (no sysfs name we care about is).
pub fn list_dir(path: &Path) -> Result<Vec<String>, SysfsError> {
    let mut names: Vec<String> =
        list_dir_os(path)?.into_iter().filter_map(|n| n.into_string().ok()).collect();
    names.sort_unstable();
    Ok(names)
}

/// Entry names of a directory, unsorted and raw.
pub fn list_dir_os(path: &Path) -> Result<Vec<OsString>, SysfsError> {
    let rd = std::fs::read_dir(path).map_err(|e| SysfsError::io(path, e))?;
    let mut out = Vec::new();
    for entry in rd {
        out.push(entry.map_err(|e| SysfsError::io(path, e))?.file_name());
    }
    Ok(out)
}

/// Whether something (file, dir or link target) exists at `path`.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path_and_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("numa_node");
        std::fs::write(&p, "abc\n").unwrap();
        let e = read_i64(&p).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("numa_node") && msg.contains("\"abc\""), "{msg}");
        std::fs::write(&p, "-1\n").unwrap();
        assert_eq!(read_i64(&p).unwrap(), -1);
        std::fs::write(&p, "0x15b3\n").unwrap();
        assert_eq!(read_hex_u16(&p).unwrap(), 0x15b3);
        std::fs::write(&p, "0x12345\n").unwrap();
        assert!(read_hex_u16(&p).is_err());
        std::fs::write(&p, "231:192\n").unwrap();
        assert_eq!(read_major_minor(&p).unwrap(), (231, 192));
        assert!(read_string(&dir.path().join("missing")).unwrap_err().is_not_found());
    }

    #[test]
    fn link_name_and_sorted_listing() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("../../bus/pci/drivers/mlx5_core", dir.path().join("driver")).unwrap();
        std::fs::write(dir.path().join("b"), "").unwrap();
        assert_eq!(link_name(&dir.path().join("driver")).unwrap(), "mlx5_core");
        assert_eq!(list_dir(dir.path()).unwrap(), vec!["b".to_string(), "driver".to_string()]);
    }
}
