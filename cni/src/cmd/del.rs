//! DEL: undo the attachment's journal, whatever state it is in; without a
//! journal (a refused ADD, or a lost state dir), release IPAM and, given the
//! ADD result, bring the VF home from the pod. Only what tearing down needs
//! is read from the configuration, so a value only ADD uses never fails DEL.

use nic::netlink::link::{LinkChange, RouteSocket};
use nic::netns::Netns;
use nic::{PciAddr, Roots};

use crate::conf::{Env, NetConf};
use crate::error::{Error, Result};
use crate::journal::{self, Lock};
use crate::step::UndoCx;
use crate::txn::{self, lock_wait, VF_LOCK_WAIT};
use crate::{ipam, result, step};

/// DEL. Succeeds when the netns, the journal or the VF is already gone.
pub fn del(conf: &NetConf, env: &Env, roots: &Roots) -> Result<()> {
    let t0 = std::time::Instant::now();
    journal::ensure_dirs(&conf.state_dir)?;
    let (found, corrupt) = match journal::find(&conf.state_dir, &env.container_id, &env.ifname) {
        Ok(f) => (f, None),
        Err(e @ Error::Corrupt { .. }) => {
            tracing::error!(error = %e.chain(), "tearing down without the journal");
            (None, Some(e))
        }
        Err(e) => return Err(e),
    };
    let pci = found.as_ref().and_then(|f| f.journal.pci).or(conf.device).or_else(|| prev_pci(conf, env));
    let _lock = match pci {
        Some(p) => Some(Lock::take(
            &conf.state_dir,
            &format!("vf-{p}"),
            &format!("VF {p}"),
            lock_wait(VF_LOCK_WAIT),
        )?),
        None => None,
    };
    // Re-read under the lock: a concurrent DEL may have finished it.
    let found = match corrupt {
        Some(_) => None,
        None => journal::find(&conf.state_dir, &env.container_id, &env.ifname)?,
    };
    match &found {
        Some(f) => {
            // The runtime may send an empty CNI_NETNS once the sandbox is gone.
            let netns = if env.netns.is_empty() { f.journal.netns.as_str() } else { env.netns.as_str() };
            let mut cx = UndoCx::new(roots, env, netns, f.journal.pci);
            txn::undo(&f.journal.steps, &mut cx)?;
        }
        None => {
            let release = conf.ipam.as_ref().map(|i| -> Result<ipam::Pending> {
                let (plugin, c) = ipam::prepare(&conf.raw, &conf.cni_version, &i.kind, env, &conf.state_dir)?;
                Ok(ipam::start(&plugin, "DEL", env, &c))
            });
            let home = match (pci, &conf.prev_result) {
                (Some(pci), Some(_)) => bring_home(env, pci),
                _ => Ok(()),
            };
            let released = release.map(|r| r.and_then(ipam::Pending::wait).map(|_| ())).unwrap_or(Ok(()));
            home?;
            released?;
        }
    }
    if let Some(f) = &conf.device_info_file {
        step::DeviceInfoFile::removing(f.clone()).undo()?;
    }
    match (&found, corrupt) {
        (Some(f), _) => journal::remove(&f.path)?,
        (None, Some(Error::Corrupt { path, .. })) => {
            let aside = path.with_extension("json.corrupt");
            tracing::error!(from = %path.display(), to = %aside.display(), "moving the unreadable journal aside");
            std::fs::rename(&path, &aside).map_err(|e| Error::io(&path, e))?;
        }
        _ => {}
    }
    tracing::info!(ms = t0.elapsed().as_secs_f64() * 1e3, journal = found.is_some(), "detached");
    Ok(())
}

/// The VF named in `prevResult`: our interface's `pciID` (1.1.0 results).
fn prev_pci(conf: &NetConf, env: &Env) -> Option<PciAddr> {
    result::ours_in(conf.prev_result.as_ref()?, env)?.get("pciID")?.as_str()?.parse().ok()
}

/// Without a journal: finds the VF in the pod by its PCI address (its bus
/// device), or, for a virtual stand-in without one, as the `CNI_IFNAME` the
/// ADD result names, and moves it home, down. Its host name and settings
/// are lost with the journal: it keeps its pod name, or `dev<ifindex>` if
/// that is taken on the host (the kernel's own choice on netns exit).
fn bring_home(env: &Env, pci: PciAddr) -> Result<()> {
    if env.netns.is_empty() {
        return Ok(());
    }
    let Ok(pod) = Netns::open(&env.netns) else { return Ok(()) };
    let mut ps = RouteSocket::open_in(&pod)?;
    let links = ps.links()?;
    let want = pci.to_string();
    let found = links
        .iter()
        .find(|l| l.parent.as_deref() == Some(want.as_str()))
        .or_else(|| links.iter().find(|l| l.parent.is_none() && l.name == env.ifname && l.name != "lo"));
    let Some(l) = found else {
        tracing::info!(pci = %pci, "VF not in the pod; nothing to bring home");
        return Ok(());
    };
    tracing::warn!(pci = %pci, name = %l.name, "no journal: bringing the VF home without its host name and settings");
    let here = Netns::current().map_err(Error::Netns)?;
    let change = LinkChange { netns_fd: Some(here.raw_fd()), up: Some(false), ..LinkChange::default() };
    match ps.set_link(l.index, &change) {
        Err(e) if e.errno() == Some(libc::EEXIST) => {
            let named = LinkChange { name: Some(format!("dev{}", l.index)), ..change };
            ps.set_link(l.index, &named).map_err(|e| Error::link(format!("move {} home", l.name), e))
        }
        r => r.map_err(|e| Error::link(format!("move {} home", l.name), e)),
    }
}
