//! Which VF an attachment gets.

use nic::prepared::{self, Wanted};
use nic::vfdev::VfDev;
use nic::Roots;

use crate::conf::{ClaimRef, Env, NetConf};
use crate::error::{Error, Result};

/// The DRA-prepared device an ADD attaches (its attachment file names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The claim's UID.
    pub claim_uid: String,
    /// The device of the claim.
    pub device: String,
    /// `K8S_POD_UID`.
    pub pod_uid: String,
    /// The DRA driver's prepared directory.
    pub dir: std::path::PathBuf,
}

/// The VF for an ADD or CHECK: the configuration's `deviceID` (Multus fills it
/// from the device plugin's allocation), else, in DRA mode, the device the DRA
/// driver prepared for the pod. The one place that decides.
pub fn resolve(conf: &NetConf, env: &Env, roots: &Roots) -> Result<(VfDev, Option<Claimed>)> {
    if let Some(pci) = conf.device {
        return Ok((VfDev::lookup(roots, pci)?, None));
    }
    let c = conf.claim.as_ref().ok_or_else(|| Error::config("deviceID", "missing"))?;
    let (pci, claimed) = select(c, env)?;
    Ok((VfDev::lookup(roots, pci)?, Some(claimed)))
}

/// Reads the prepared claims and attachments and picks the pod's device.
fn select(c: &ClaimRef, env: &Env) -> Result<(nic::PciAddr, Claimed)> {
    let pod_uid = c.pod_uid.as_deref().ok_or_else(|| Error::Env {
        var: "CNI_ARGS",
        why: "has no K8S_POD_UID, which DRA mode (no deviceID) needs to find the pod's claim".into(),
    })?;
    let listing = prepared::list(&c.prepared_dir).map_err(|e| Error::Claim(nic::error_chain(&e)))?;
    for e in &listing.errors {
        // Another claim's unreadable file must not stop this pod; say it.
        tracing::warn!(error = %nic::error_chain(e), "skipping an unreadable prepared-claim file");
    }
    let w = Wanted {
        pod_uid,
        claim: c.claim.as_deref(),
        request: c.request.as_deref(),
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    let (claim, dev) = prepared::select(&listing.claims, &listing.attachments, &w).map_err(|e| {
        // Without claim/request keys this may as well be a device plugin network
        // whose deviceID Multus did not fill: say both.
        let hint = if c.claim.is_none() && c.request.is_none() {
            "; or, in device plugin mode, the configuration has no deviceID (does the network carry the k8s.v1.cni.cncf.io/resourceName annotation, and does the pod request that resource?)"
        } else {
            ""
        };
        Error::Claim(format!("{e} (prepared directory {}){hint}", c.prepared_dir.display()))
    })?;
    tracing::debug!(claim = %claim.uid, device = %dev.device, pci = %dev.pci, "DRA: the pod's prepared device");
    Ok((
        dev.pci,
        Claimed {
            claim_uid: claim.uid.clone(),
            device: dev.device.clone(),
            pod_uid: pod_uid.to_string(),
            dir: c.prepared_dir.clone(),
        },
    ))
}
