//! Attributes every PCI function has.

use super::{not_found, problem, Entry, Walk};
use crate::inventory::Problem;
use crate::pci::PciAddr;
use crate::sysfs::{Dir, SysfsError};

impl Walk<'_> {
    pub(super) fn read_hex16(&self, e: &Entry<'_>, field: &str, problems: &mut Vec<Problem>) -> Option<u16> {
        self.read_opt(e, field, problems, |d, f| d.read_hex_u16(f))
    }

    /// Reads `<dev>/<field>` with `f`, turning absence or garbage into a problem.
    pub(super) fn read_opt<T>(
        &self,
        e: &Entry<'_>,
        field: &str,
        problems: &mut Vec<Problem>,
        f: impl FnOnce(&Dir, &str) -> Result<T, SysfsError>,
    ) -> Option<T> {
        let r = if e.has(field) { f(&e.dir, field) } else { Err(not_found(e.dir.join(field))) };
        r.map_err(|err| problems.push(problem(field, err.to_string()))).ok()
    }

    pub(super) fn numa(&self, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Option<u32> {
        let v = self.read_opt(e, "numa_node", problems, |d, f| d.read_i64(f))?;
        match u32::try_from(v) {
            Ok(n) => Some(n),
            Err(_) if v == -1 => None, // no NUMA affinity: not a problem
            Err(_) => {
                let p = e.dir.join("numa_node");
                problems
                    .push(problem("numa_node", format!("{p:?}: expected -1 or a node number, found {v}")));
                None
            }
        }
    }

    pub(super) fn driver(&self, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Option<String> {
        if !e.has("driver") {
            let p = e.dir.join("driver");
            problems.push(problem("driver", format!("{p:?} missing: no driver bound")));
            return None;
        }
        e.dir.link_name("driver").map_err(|err| problems.push(problem("driver", err.to_string()))).ok()
    }

    /// Bridges between the function and the root complex, nearest first, from
    /// the `bus/pci/devices/<bdf>` link target (one readlink, no canonicalize).
    pub(super) fn upstream(&self, a: PciAddr, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Vec<PciAddr> {
        match e.bus.read_link(a.to_string()) {
            Ok(t) => {
                let mut chain: Vec<PciAddr> =
                    t.components().filter_map(|c| c.as_os_str().to_str()?.parse().ok()).collect();
                if chain.last() == Some(&a) {
                    chain.pop();
                }
                chain.reverse();
                chain
            }
            Err(e) => {
                problems.push(problem("upstream", e.to_string()));
                vec![]
            }
        }
    }
}
