//! What this node has prepared, kept in memory and on disk in the
//! [`nic::prepared`] format (one file per claim, atomic writes): the files are
//! the checkpoint that survives plugin restarts and what the CNI reads. The
//! file is written before memory changes and removed before memory forgets,
//! so a crash between the two leaves the disk right.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nic::prepared::{self, PreparedClaim, PreparedError};

/// Prepared claims by UID, and which claim holds each device.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    claims: BTreeMap<String, PreparedClaim>,
    owners: BTreeMap<String, String>,
}

impl Checkpoint {
    /// Reads every claim in `dir`; files that cannot be read are returned
    /// beside it (logged by the caller, never fatal).
    pub fn load(dir: &Path) -> Result<(Self, Vec<PreparedError>), PreparedError> {
        let listing = prepared::list(dir)?;
        let mut cp = Checkpoint { dir: dir.to_path_buf(), claims: BTreeMap::new(), owners: BTreeMap::new() };
        for c in listing.claims {
            cp.index(&c);
            cp.claims.insert(c.uid.clone(), c);
        }
        Ok((cp, listing.errors))
    }

    fn index(&mut self, c: &PreparedClaim) {
        for d in &c.devices {
            self.owners.insert(d.device.clone(), c.uid.clone());
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The prepared claim `uid`.
    pub fn get(&self, uid: &str) -> Option<&PreparedClaim> {
        self.claims.get(uid)
    }

    /// The claim holding `device`.
    pub fn owner(&self, device: &str) -> Option<&str> {
        self.owners.get(device).map(String::as_str)
    }

    /// Every prepared device, by name, as recorded when it was prepared.
    pub fn devices(&self) -> super::devices::PreparedDevices {
        self.claims
            .values()
            .flat_map(|c| c.devices.iter())
            .map(|d| {
                let r = super::devices::Recorded {
                    pci: d.pci,
                    netdev: d.netdev.clone(),
                    rdma: d.rdma_devices.clone(),
                    port_state: d.port_state.clone(),
                };
                (d.device.clone(), r)
            })
            .collect()
    }

    /// Every prepared claim.
    pub fn claims(&self) -> impl Iterator<Item = &PreparedClaim> {
        self.claims.values()
    }

    /// Records `claim` (file first).
    pub fn insert(&mut self, claim: PreparedClaim) -> Result<(), PreparedError> {
        prepared::write_claim(&self.dir, &claim)?;
        if let Some(old) = self.claims.remove(&claim.uid) {
            self.forget_devices(&old);
        }
        self.index(&claim);
        self.claims.insert(claim.uid.clone(), claim);
        Ok(())
    }

    fn forget_devices(&mut self, c: &PreparedClaim) {
        for d in &c.devices {
            if self.owners.get(&d.device) == Some(&c.uid) {
                self.owners.remove(&d.device);
            }
        }
    }

    /// Forgets claim `uid` and removes its files (and the CNI's attachments);
    /// returns what it held. Unknown is fine.
    pub fn remove(&mut self, uid: &str) -> Result<Option<PreparedClaim>, PreparedError> {
        prepared::remove_claim(&self.dir, uid)?;
        let old = self.claims.remove(uid);
        if let Some(c) = &old {
            self.forget_devices(c);
        }
        Ok(old)
    }
}
