//! `ResourceClaim.status.devices[]` network data from what the CNI recorded.
//!
//! Who writes the claim status: this plugin, not the CNI. The CNI runs as a
//! child of the container runtime with no API credentials, in the path of
//! every pod start; giving it a kubeconfig would put claim-write rights on
//! every node's CNI binary and an API round trip (and its failures) into pod
//! start. Instead the CNI writes an [`nic::prepared::Attachment`] file next
//! to the prepared claim (interface name, MAC, IPs), and this task, which
//! already has RBAC on claims, watches the directory (inotify) and applies
//! the entries with server-side apply under our field manager — only our
//! entries (`driver`, `pool`, `device` are the list-map keys), so other
//! drivers' entries are untouched. When a claim is unprepared, its entries
//! are released by applying an empty list. Failed writes are retried; each
//! is bounded by [`super::API_TIMEOUT`], and none of this waits in the path of
//! a prepare or a rescan.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams};
use nic::prepared::{self, Listing};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::FIELD_MANAGER;
use crate::kubelet::{self, DirEvent};

/// Retry failed writes this often.
const RETRY: Duration = Duration::from_secs(5);

/// Our `status.devices` entries per claim UID, with the claim's namespace and name.
pub type Wanted = BTreeMap<String, ((String, String), Vec<Value>)>;

/// The entries every prepared claim should carry, from a directory listing.
pub fn wanted(listing: &Listing, driver: &str) -> Wanted {
    let mut out = Wanted::new();
    for c in &listing.claims {
        let mut entries = Vec::new();
        for d in &c.devices {
            let Some(a) = listing.attachments.iter().find(|a| a.claim_uid == c.uid && a.device == d.device)
            else {
                continue;
            };
            let mut net = json!({ "interfaceName": a.ifname, "ips": a.ips });
            if let Some(mac) = &a.mac {
                net["hardwareAddress"] = mac.clone().into();
            }
            entries.push(json!({ "driver": driver, "pool": d.pool, "device": d.device, "networkData": net }));
        }
        out.insert(c.uid.clone(), ((c.namespace.clone(), c.name.clone()), entries));
    }
    out
}

/// The apply body for a claim's status.
pub fn body(namespace: &str, name: &str, entries: &[Value]) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": { "name": name, "namespace": namespace },
        "status": { "devices": entries },
    })
}

/// Runs until `changed` closes: keeps claim status equal to what the CNI
/// recorded in `dir`. Only attachment files are read on a change (a node
/// with hundreds of prepared claims does not re-read them all per pod start),
/// plus the claims they name.
pub async fn run(
    client: kube::Client,
    driver: String,
    dir: PathBuf,
    mut changed: mpsc::UnboundedReceiver<String>,
) {
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create the prepared-claims dir");
    }
    let mut events = match kubelet::watch_dir(&dir) {
        Ok(rx) => Some(rx),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the prepared-claims dir; polling it");
            None
        }
    };
    // What the API holds from us, per claim.
    let mut applied: Wanted = Wanted::new();
    let mut dirty = true;
    let mut retry = false;
    loop {
        if dirty {
            retry = sync(&client, &driver, &dir, &mut applied).await;
        }
        // Without inotify, look every RETRY; with it, on events (or to retry).
        let wait = if retry || events.is_none() { RETRY } else { Duration::from_secs(3600) };
        tokio::select! {
            ev = crate::nodewatch::recv_opt(&mut events) => dirty = match ev {
                Some(DirEvent::Created(n) | DirEvent::Deleted(n)) => n.ends_with(prepared::ATTACH_SUFFIX),
                Some(DirEvent::Rescan) => true,
                None => {
                    events = None;
                    true
                }
            },
            c = changed.recv() => match c {
                None => return,
                Some(uid) => dirty = applied.contains_key(&uid),
            },
            _ = tokio::time::sleep(wait) => dirty = true,
        }
        if dirty {
            // Coalesce a burst (a write is a create and a rename).
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Some(rx) = events.as_mut() {
                while rx.try_recv().is_ok() {}
            }
            while changed.try_recv().is_ok() {}
        }
    }
}

/// One pass: apply what changed; returns whether something must be retried.
async fn sync(client: &kube::Client, driver: &str, dir: &std::path::Path, applied: &mut Wanted) -> bool {
    let mut listing = prepared::list_attachments(dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot list attachments");
        Listing::default()
    });
    let uids: std::collections::BTreeSet<String> =
        listing.attachments.iter().map(|a| a.claim_uid.clone()).collect();
    for uid in uids {
        match prepared::read_claim(dir, &uid) {
            Ok(Some(c)) => listing.claims.push(c),
            Ok(None) => {} // unprepared meanwhile: its attachments go with it
            Err(e) => tracing::warn!(claim = %uid, error = %e, "cannot read a prepared claim"),
        }
    }
    for e in &listing.errors {
        tracing::warn!(error = %e, "an attachment file cannot be read");
    }
    let mut want = wanted(&listing, driver);
    // Claims that no longer have attachments: release our entries once.
    for (uid, (key, entries)) in applied.iter() {
        if !want.contains_key(uid) && !entries.is_empty() {
            want.insert(uid.clone(), (key.clone(), Vec::new()));
        }
    }
    let mut retry = false;
    for (uid, ((ns, name), entries)) in want {
        let unchanged = applied.get(&uid).is_some_and(|(_, e)| *e == entries);
        if unchanged || (entries.is_empty() && !applied.contains_key(&uid)) {
            continue;
        }
        let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(body(&ns, &name, &entries));
        let write = api.patch_status(&name, &pp, &patch);
        match super::bounded("write the ResourceClaim status", write).await {
            Ok(_) => {
                tracing::info!(claim = %format!("{ns}/{name}"), devices = entries.len(), "claim status network data written");
                applied.insert(uid, ((ns, name), entries));
            }
            Err(super::ApiError::Api { source: kube::Error::Api(e), .. }) if e.code == 404 => {
                applied.remove(&uid);
            }
            Err(e) => {
                tracing::warn!(claim = %format!("{ns}/{name}"), error = %nic::error_chain(&e), "cannot write claim status; will retry");
                retry = true;
            }
        }
    }
    applied.retain(|_, (_, e)| !e.is_empty());
    retry
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::prepared::{Attachment, DeviceConfig, PreparedClaim, PreparedDevice, VERSION};

    #[test]
    fn entries_come_from_attachments_of_prepared_devices() {
        let dev = |d: &str| PreparedDevice {
            request: "vf".into(),
            pool: "node-a".into(),
            device: d.into(),
            pci: "0000:3d:00.2".parse().unwrap(),
            pf: None,
            netdev: None,
            rdma_devices: vec![],
            port_state: None,
            cdi_ids: vec![],
            config: DeviceConfig::default(),
        };
        let listing = Listing {
            claims: vec![PreparedClaim {
                version: VERSION,
                uid: "u1".into(),
                namespace: "ns".into(),
                name: "c".into(),
                pod_claim_name: None,
                pods: vec!["p".into()],
                devices: vec![dev("pci-0000-3d-00-2"), dev("pci-0000-3d-00-3")],
            }],
            attachments: vec![Attachment {
                version: VERSION,
                claim_uid: "u1".into(),
                device: "pci-0000-3d-00-3".into(),
                pod_uid: "p".into(),
                container_id: "c1".into(),
                ifname: "net1".into(),
                mac: Some("02:00:00:00:00:01".into()),
                ips: vec!["192.0.2.5/24".into()],
            }],
            errors: vec![],
        };
        let w = wanted(&listing, "rdma.kuberdma.io");
        let ((ns, name), entries) = &w["u1"];
        assert_eq!((ns.as_str(), name.as_str()), ("ns", "c"));
        assert_eq!(
            entries,
            &vec![json!({"driver": "rdma.kuberdma.io", "pool": "node-a", "device": "pci-0000-3d-00-3",
                "networkData": {"interfaceName": "net1", "ips": ["192.0.2.5/24"], "hardwareAddress": "02:00:00:00:00:01"}})]
        );
    }
}
