//! GC (spec 1.1.0): undo and forget this network's attachments that are not
//! in `cni.dev/valid-attachments`, remove leftover journal files no DEL will
//! come for ([`journal::sweep`]), then forward GC to a 1.1 IPAM plugin.
//! Other networks' attachments (they share the state dir) are not ours to
//! judge; a GC without the list is refused rather than read as "none valid".

use nic::Roots;

use crate::conf::{Env, NetConf};
use crate::error::{Error, Result};
use crate::ipam;
use crate::journal;
use crate::lock::{self, Lock};
use crate::step::UndoCx;
use crate::txn::{self, lock_wait, VF_LOCK_WAIT};

/// A journal temp file older than this is a leftover of a killed ADD (its
/// own write renames it within milliseconds; runtimes give an ADD minutes at
/// most: kubelet's runtime request timeout is 2 min).
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(600);

pub fn gc(conf: &NetConf, roots: &Roots, env: &Env) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config(
            "cni.dev/valid-attachments",
            "missing: GC needs the list of attachments to keep (CNI spec 1.1.0); without it nothing is collected",
        )
    })?;
    let mut problems: Vec<Error> = Vec::new();
    for (path, j) in journal::list(&conf.state_dir)? {
        let j = match j {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(error = %e.chain(), "GC: skipping an unreadable journal");
                problems.push(e);
                continue;
            }
        };
        if j.network.as_deref() != Some(conf.name.as_str()) {
            if j.network.is_none() {
                tracing::debug!(file = %path.display(), "GC: a migrated journal that names no network; left to DEL");
            }
            continue;
        }
        if valid.iter().any(|a| j.is(&a.container_id, &a.ifname)) {
            continue;
        }
        tracing::info!(container = %j.container_id, ifname = %j.ifname, "GC: removing a stale attachment");
        let r = (|| -> Result<()> {
            let _lock = match j.pci {
                Some(pci) => Some(lock::ensure_node_dir(&env.node_dir).and_then(|()| {
                    Lock::take(
                        &env.node_dir,
                        &format!("vf-{pci}"),
                        &format!("VF {pci}"),
                        lock_wait(VF_LOCK_WAIT),
                    )
                })?),
                None => None,
            };
            // Re-read under the lock, as DEL does: the attachment's DEL may have
            // finished while we waited, and the VF been given to another
            // attachment since, whose PF-side settings, lease and netdev an
            // undo of this stale copy would take.
            let j = match journal::read(&path)? {
                // Another VF: a new ADD of the same IDs, under a lock we do not hold.
                Some(now) if now.is(&j.container_id, &j.ifname) && now.pci == j.pci => now,
                _ => {
                    tracing::info!(container = %j.container_id, ifname = %j.ifname, "GC: the attachment was removed meanwhile (its DEL ran); nothing to collect");
                    return Ok(());
                }
            };
            // Delegates see the stale attachment's IDs; its netns is gone or unknown.
            let genv = Env {
                container_id: j.container_id.clone(),
                ifname: j.ifname.clone(),
                netns: String::new(),
                ..env.clone()
            };
            let mut cx = UndoCx::new(roots, &genv, &j.netns, j.pci, _lock.as_ref().map(Lock::raw_fd))
                .owned_after(|pci| journal::later_owner(&conf.state_dir, &path, pci));
            // Best effort, as DEL: only a failed IPAM release keeps the
            // journal (for the next GC or DEL to retry it).
            if let Some(e) = txn::undo(&j.steps, &mut cx).ipam {
                return Err(e);
            }
            journal::remove(&path)
        })();
        if let Err(e) = r {
            problems.push(e);
        }
    }
    for p in journal::sweep(&conf.state_dir, STALE_TEMP) {
        tracing::info!(file = %p.display(), "GC: removed a leftover journal file");
    }
    if let Some(i) = &conf.ipam {
        // The IPAM plugin may hold leases we have no journal for.
        if let Err(e) = ipam::forward_v11(&conf.raw, &i.kind, "GC", env, &conf.state_dir) {
            problems.push(e);
        }
    }
    match problems.len() {
        0 => Ok(()),
        1 => Err(problems.remove(0)),
        n => {
            let first = problems.remove(0);
            tracing::error!(count = n, "GC: several attachments could not be collected");
            Err(first)
        }
    }
}
