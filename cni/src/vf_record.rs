//! Who has a VF bound to a userspace driver: the node-wide record
//! `<node dir>/vfs/<pci>.json` that every network's ADD reads
//! (`cmd::add::userspace_free`). Such a VF leaves no trace in the kernel when
//! it is given to a pod (nothing moves), unlike a netdev VF, whose netdev
//! leaves the host; the record is node-wide so that networks with their own
//! state dirs see it too. The step that writes and removes it is
//! `step::UserspaceVf`.

use std::path::{Path, PathBuf};

use nic::PciAddr;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The record of VF `pci`: `<node dir>/vfs/<pci>.json`.
pub fn path(node_dir: &Path, pci: PciAddr) -> PathBuf {
    node_dir.join("vfs").join(format!("{pci}.json"))
}

/// The attachment a userspace VF is given to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfHolder {
    pub container_id: String,
    pub ifname: String,
    /// Its pod netns (`CNI_NETNS` at ADD): while it exists the VF is taken.
    pub netns: String,
    /// Its network.
    pub network: String,
}

impl VfHolder {
    /// The record at `p`, if there is a readable one.
    pub fn read(p: &Path) -> Option<VfHolder> {
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    }

    /// Writes `self` as the record at `p` (temp file and rename; not
    /// flushed: a record that a power loss takes names a netns gone with the
    /// reboot anyway).
    pub fn write(&self, p: &Path) -> Result<()> {
        let body = serde_json::to_vec(self).map_err(|e| Error::io(p, e.into()))?;
        plumbing::atomic_file::write_unsynced(p, &body).map_err(|e| Error::io(&e.path, e.source))
    }

    /// Removes the record at `p` if it is still `self`'s (another attachment
    /// may have taken the VF since, once this one's netns was gone).
    pub fn release(&self, p: &Path) -> Result<()> {
        match VfHolder::read(p) {
            Some(h) if h.container_id == self.container_id && h.ifname == self.ifname => {
                match std::fs::remove_file(p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(p, e)),
                    _ => Ok(()),
                }
            }
            Some(h) => {
                tracing::info!(owner = %format!("{}/{}", h.container_id, h.ifname), "the VF was given to another attachment since: its record stays");
                Ok(())
            }
            None => Ok(()),
        }
    }
}
