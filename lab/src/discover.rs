//! `nic::discover` on the VM's real `/sys` and `/dev`: Soft-RoCE shows up as a virtual HCA with its
//! real char devices, never as (part of) an SR-IOV PF or VF.

use crate::check_eq;
use crate::harness::{Lab, Test};
use anyhow::Context;
use nic::inventory::{CharDev, RdmaVia};
use nic::Roots;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "discover-rxe-virtual-hca-real-chardevs", run: rxe_virtual },
        Test { name: "discover-rxe-umad-issm", run: rxe_mad },
    ]
}

/// major:minor of a device node, from stat(2) on the real /dev.
fn node_dev(path: &std::path::Path) -> anyhow::Result<(u32, u32)> {
    let m = std::fs::metadata(path).with_context(|| format!("stat {}", path.display()))?;
    anyhow::ensure!(m.file_type().is_char_device(), "{} is not a char device", path.display());
    Ok((libc::major(m.rdev()), libc::minor(m.rdev())))
}

fn check_chardev(what: &str, c: &CharDev) -> anyhow::Result<String> {
    anyhow::ensure!(c.present, "{what} {}: not present under /dev", c.name);
    check_eq!(
        format!("{what} node path"),
        c.node_path,
        std::path::PathBuf::from(format!("/dev/infiniband/{}", c.name))
    );
    check_eq!(format!("{what} {} major:minor vs stat", c.name), c.major_minor, Some(node_dev(&c.node_path)?));
    let (ma, mi) = c.major_minor.unwrap_or_default();
    Ok(format!("{}={ma}:{mi}", c.name))
}

fn rxe_virtual(lab: &Lab) -> anyhow::Result<String> {
    let roots = Roots { sysfs: "/sys".into(), dev: "/dev".into() };
    let inv = nic::discover(&roots);
    let hca = inv.hcas.iter().find(|h| h.rdma.name == lab.rxe).with_context(|| {
        format!(
            "{} not among the HCAs: {:?}",
            lab.rxe,
            inv.hcas.iter().map(|h| &h.rdma.name).collect::<Vec<_>>()
        )
    })?;
    check_eq!("rxe via", hca.rdma.via, RdmaVia::Virtual);
    check_eq!("rxe PCI address", hca.pci, None);
    anyhow::ensure!(
        hca.netdevs.iter().any(|n| n.name == lab.rxe_netdev),
        "rxe netdevs {:?} lack {}",
        hca.netdevs.iter().map(|n| &n.name).collect::<Vec<_>>(),
        lab.rxe_netdev
    );
    // Never a VF, never on a PF.
    for pf in &inv.pfs {
        anyhow::ensure!(!pf.rdma.iter().any(|r| r.name == lab.rxe), "{} attached to PF {}", lab.rxe, pf.pci);
        for vf in &pf.vfs {
            anyhow::ensure!(
                !vf.rdma.iter().any(|r| r.name == lab.rxe),
                "{} attached to VF {} of {}",
                lab.rxe,
                vf.pci,
                pf.pci
            );
        }
    }
    let seen = [check_chardev("uverbs", hca.rdma.uverbs.as_ref().context("rxe has no uverbs")?)?];
    check_eq!("rdma_cm present", inv.rdma_cm, true);
    let (ma, mi) = node_dev(std::path::Path::new("/dev/infiniband/rdma_cm"))?;
    let port = hca.rdma.ports.first().context("rxe has no port")?;
    check_eq!("port 1 state", port.state.as_deref(), Some("ACTIVE"));
    // The PCI functions QEMU gives the VM (virtio-net etc.) carry no SR-IOV: nothing is a PF here.
    check_eq!("PFs on the VM", inv.pfs.len(), 0);
    Ok(format!(
        "{} virtual, no PCI, netdev {}, {} rdma_cm={ma}:{mi}",
        lab.rxe,
        lab.rxe_netdev,
        seen.join(" ")
    ))
}

/// The MAD char devices (umadN, issmN) of rxe: the device plugin hands them to pods "where present",
/// and on this kernel they are present (`/sys/class/infiniband_mad/*/ibdev` = rxe0).
fn rxe_mad(lab: &Lab) -> anyhow::Result<String> {
    let inv = nic::discover(&Roots { sysfs: "/sys".into(), dev: "/dev".into() });
    let hca = inv
        .hcas
        .iter()
        .find(|h| h.rdma.name == lab.rxe)
        .with_context(|| format!("{} not an HCA", lab.rxe))?;
    let mut in_sysfs = Vec::new();
    for e in std::fs::read_dir("/sys/class/infiniband_mad")?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if std::fs::read_to_string(e.path().join("ibdev")).map(|s| s.trim() == lab.rxe).unwrap_or(false) {
            in_sysfs.push(n);
        }
    }
    in_sysfs.sort();
    let mut ours: Vec<String> =
        hca.rdma.umad.iter().chain(hca.rdma.issm.iter()).map(|c| c.name.clone()).collect();
    ours.sort();
    check_eq!("umad/issm of rxe (discover vs /sys/class/infiniband_mad)", ours, in_sysfs);
    let mut seen = Vec::new();
    for c in hca.rdma.umad.iter().chain(hca.rdma.issm.iter()) {
        seen.push(check_chardev("mad", c)?);
    }
    Ok(seen.join(" "))
}
