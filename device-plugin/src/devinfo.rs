//! Device-info files for Multus and the CNI (device-info-spec 1.1.0), one per
//! device a container is given, written by [`nic::devinfo`], the one writer
//! of that format, atomically (temp file in the same dir, then `rename`) and
//! not flushed: they are on Allocate's path, under `/var/run`
//! ([`plumbing::atomic_file`] says why that is the right trade). The CDI
//! specs of pools are [`crate::cdi`]'s.

use std::path::{Path, PathBuf};

use plumbing::atomic_file::FileError;

use crate::pools::{Device, Pool};

/// What the device-info file of `d` says; `None` for devices that are no PCI
/// function of their own (k8s-rdma-shared-dev-plugin's per-resource IDs).
pub fn device_info(d: &Device) -> Option<nic::devinfo::DeviceInfo> {
    let pci = d.pci?;
    Some(nic::devinfo::DeviceInfo {
        pci: Some(pci),
        pf: d.pf,
        rdma_device: d.rdma.first().map(|r| r.name.clone()),
    })
}

/// Writes the device-info file of each device that has one; returns the paths written.
pub fn write_devinfo(dir: &Path, pool: &Pool, devs: &[&Device]) -> Result<Vec<PathBuf>, FileError> {
    let resource = pool.resource_name();
    devs.iter()
        .filter_map(|d| device_info(d).map(|i| (d, i)))
        .map(|(d, i)| nic::devinfo::write(dir, &resource, &d.id, &i))
        .collect()
}

/// Removes every device-info file of `resource` in `dir` (on shutdown or pool removal).
pub fn remove_devinfo(dir: &Path, resource: &str) -> Result<usize, FileError> {
    nic::devinfo::remove_all(dir, resource)
}
