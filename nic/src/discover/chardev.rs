//! The uverbs, umad and issm character devices of RDMA devices.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::problem;
use crate::inventory::{CharDev, Problem};
use crate::sysfs::Dir;

/// Names of the character devices in `dir` (a missing directory has none). A
/// regular file or a directory of that name is not a device a container could use.
pub(super) fn char_devices(dir: &Path) -> BTreeSet<String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_char_device()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Char devices next to the RDMA devices of one parent (PCI function or aux device).
#[derive(Default)]
pub(super) struct CharDevs {
    pub(super) verbs: HashMap<String, CharDev>,
    pub(super) umad: HashMap<String, Vec<CharDev>>,
    pub(super) issm: HashMap<String, Vec<CharDev>>,
    pub(super) problems: Vec<Problem>,
}

pub(super) fn char_dev(
    name: String,
    major_minor: Option<(u32, u32)>,
    dev_nodes: &BTreeSet<String>,
) -> CharDev {
    let node_path = Path::new("/dev/infiniband").join(&name);
    let present = dev_nodes.contains(&name);
    CharDev { name, node_path, major_minor, present }
}

impl CharDevs {
    /// Scans `parent/base/infiniband_{verbs,mad}`.
    pub(super) fn scan(parent: &Dir, base: &Path, dev_nodes: &BTreeSet<String>) -> CharDevs {
        let mut c = CharDevs::default();
        // A directory that cannot be listed has no char devices for us.
        let listed = |sub: &str| parent.open_at(base.join(sub)).and_then(|d| Ok((d.list()?, d))).ok();
        if let Some((names, verbs)) = listed("infiniband_verbs") {
            for n in names {
                // `class/infiniband_verbs` also holds `abi_version`.
                if !n.starts_with("uverbs") {
                    continue;
                }
                let d = Path::new(&n);
                match verbs.read_string(d.join("ibdev")) {
                    Ok(ib) => {
                        let mm = verbs.read_major_minor(d.join("dev")).ok();
                        c.verbs.insert(ib, char_dev(n, mm, dev_nodes));
                    }
                    Err(e) => c.problems.push(problem("uverbs", format!("{n}: {e}"))),
                }
            }
        }
        let Some((names, mad)) = listed("infiniband_mad") else { return c };
        for n in names {
            let issm = n.starts_with("issm");
            if !issm && !n.starts_with("umad") {
                continue;
            }
            let d = Path::new(&n);
            match mad.read_string(d.join("ibdev")) {
                Ok(ib) => {
                    let mm = mad.read_major_minor(d.join("dev")).ok();
                    let map = if issm { &mut c.issm } else { &mut c.umad };
                    map.entry(ib).or_default().push(char_dev(n, mm, dev_nodes));
                }
                Err(e) => c.problems.push(problem(if issm { "issm" } else { "umad" }, format!("{n}: {e}"))),
            }
        }
        c
    }
}
