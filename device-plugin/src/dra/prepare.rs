//! What preparing one claim means, as a pure function: the ResourceClaim read
//! from the API, the node's devices and who holds them in → the record to
//! keep and the CDI spec to write out, or an error that names the claim and
//! why. [`super::service`] does the I/O around it.

use k8s_openapi::api::resource::v1::ResourceClaim;
use nic::prepared::{PreparedClaim, PreparedDevice, VERSION};
use serde_json::Value;

use super::cdi;
use super::claimconfig;
use super::devices::View;

/// The annotation Kubernetes puts on claims made from a template: the pod's
/// name for the claim (`pod.spec.resourceClaims[].name`).
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// The kubelet's name for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResourceClaim {}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// Why a claim cannot be prepared. Each message is what the kubelet shows in
/// the pod's events, so it says what to look at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The claim does not exist (any more).
    #[error("{claim}: not found in the API")]
    NotFound {
        /// The claim.
        claim: ClaimRef,
    },
    /// Reading it failed.
    #[error("{claim}: cannot read it: {why}")]
    Read {
        /// The claim.
        claim: ClaimRef,
        /// The API error.
        why: String,
    },
    /// A claim of that name exists with another UID (deleted and recreated).
    #[error("{claim}: the API has UID {actual} for that name (the claim was recreated)")]
    WrongUid {
        /// The claim.
        claim: ClaimRef,
        /// UID in the API.
        actual: String,
    },
    /// Something about the claim's allocation or reservation.
    #[error("{claim}: {why}")]
    Claim {
        /// The claim.
        claim: ClaimRef,
        /// What.
        why: String,
    },
    /// Our opaque config in the allocation is bad.
    #[error("{claim}: {error}")]
    Config {
        /// The claim.
        claim: ClaimRef,
        /// The entry and what is wrong with it (shown whole: the kubelet
        /// shows only this message).
        error: claimconfig::ConfigError,
    },
}

/// A prepared claim: the record and its CDI spec (none without devices).
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// What to keep (checkpoint, CNI).
    pub record: PreparedClaim,
    /// The claim's CDI spec.
    pub cdi_spec: Option<Value>,
}

/// Plans the preparation of `claim` (as read from the API) for the kubelet's
/// request `want` on the node whose pool is `pool`. `owner(device)` tells which
/// claim holds a device already.
pub fn plan<'a>(
    want: &ClaimRef,
    claim: &ResourceClaim,
    driver: &str,
    pool: &str,
    view: &View,
    owner: impl Fn(&str) -> Option<&'a str>,
) -> Result<Prepared, PrepareError> {
    let err = |why: String| PrepareError::Claim { claim: want.clone(), why };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    if uid != want.uid {
        return Err(PrepareError::WrongUid { claim: want.clone(), actual: uid });
    }
    let status = claim.status.as_ref();
    let Some(alloc) = status.and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref()) else {
        return Err(err("not allocated yet".into()));
    };
    let pods: Vec<String> = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        .map(|r| r.uid.clone())
        .collect();
    if pods.is_empty() {
        return Err(err("not reserved for any pod (status.reservedFor has no pod)".into()));
    }
    let configs = claimconfig::ours(alloc.config.as_deref().unwrap_or_default(), driver)
        .map_err(|error| PrepareError::Config { claim: want.clone(), error })?;

    let mut picked = Vec::new();
    for r in alloc.results.iter().flatten().filter(|r| r.driver == driver) {
        let what = format!("request {} device {}", r.request, r.device);
        if r.admin_access == Some(true) {
            return Err(err(format!(
                "{what}: adminAccess is not supported by {driver} (a VF is moved into one pod; it cannot be shared for monitoring)"
            )));
        }
        if r.pool != pool {
            return Err(err(format!("{what}: allocated from pool {:?}, but this node's pool is {pool:?}", r.pool)));
        }
        let Some(d) = view.device(&r.device) else {
            return Err(err(format!("{what}: not published by this node (gone since it was allocated?)")));
        };
        if let crate::health::Health::Unhealthy(why) = &d.health {
            return Err(err(format!("{what}: unhealthy: {why}")));
        }
        if let Some(other) = owner(&r.device).filter(|o| *o != want.uid) {
            return Err(err(format!("{what}: already prepared for claim {other}")));
        }
        if picked.iter().any(|(_, p): &(String, &super::devices::DraDevice)| p.name == d.name) {
            return Err(err(format!("{what}: allocated twice in the same claim")));
        }
        picked.push((r.request.clone(), d));
    }

    let devices = picked
        .iter()
        .map(|(req, d)| PreparedDevice {
            request: req.clone(),
            pool: pool.to_string(),
            device: d.name.clone(),
            pci: d.pci,
            pf: Some(d.pf),
            netdev: d.netdev.clone(),
            rdma_devices: d.rdma.iter().map(|r| r.name.clone()).collect(),
            cdi_ids: vec![cdi::device_id(&d.name, &want.uid)],
            config: claimconfig::effective(&configs, req),
        })
        .collect();
    let record = PreparedClaim {
        version: VERSION,
        uid: want.uid.clone(),
        namespace: want.namespace.clone(),
        name: want.name.clone(),
        pod_claim_name: claim.metadata.annotations.as_ref().and_then(|a| a.get(POD_CLAIM_NAME)).cloned(),
        pods,
        devices,
    };
    let cdi_spec = cdi::spec_for(&record, view).map_err(err)?;
    Ok(Prepared { record, cdi_spec })
}
