//! DEL, best effort (CNI spec 1.1.0, "DEL": complete without error even if
//! some resources are missing): undo the attachment's journal, whatever
//! state it is in, going on past what cannot be undone (each logged); without
//! a usable journal (a refused ADD, a lost, unreadable or unusable state dir),
//! release IPAM from the configuration and bring the VF home from the pod
//! when it can be told apart. Only what tearing down needs is read from the
//! configuration, so a value only ADD uses never fails DEL.
//!
//! The journal is read once the VF lock is held (a first look before only
//! finds which VF to lock): an ADD of this attachment holding the lock may
//! write it meanwhile. A DEL that finds none under the lock leaves a record
//! in the VF's lock file, so that an ADD of the attachment still on its way
//! to the lock refuses to attach anything afterwards (journal.rs, "A DEL
//! that overtakes its ADD").
//!
//! Runtimes do not retry a DEL that succeeded, and Multus drops its cache of
//! the pod's networks after one whatever it returned: a journal left behind
//! would never be read again. So DEL fails only when retrying can help: the
//! VF lock is busy (another ADD/DEL of the VF, code 11), or the IPAM plugin's
//! release failed for the first time, which only the plugin can do (its
//! journal is kept for the retry; the reference plugins' DEL also fails then,
//! e.g. containernetworking plugins `host-device` `cmdDel`). The same refusal
//! again (or a code saying the configuration is wrong) is for good: DEL then
//! succeeds and keeps the lease on record ([`refused_for_good`]). An IPAM
//! plugin that cannot be run at all (not in `CNI_PATH`, not executable, or
//! its VERSION fails) is no reason: no
//! retry gets further, so it is logged, naming the plugin and `CNI_PATH`, and
//! DEL goes on and forgets the attachment.

use std::path::PathBuf;

use nic::netlink::link::{Link, LinkChange, RouteSocket};
use nic::netns::Netns;
use nic::{PciAddr, Roots};

use crate::conf::{fmt_mac, Env, NetConf};
use crate::error::{Error, Result};
use crate::journal;
use crate::lock::{self, Lock};
use crate::step::UndoCx;
use crate::txn::{self, lock_wait, VF_LOCK_WAIT};
use crate::{ipam, result, step};

/// What the state dir holds for the attachment.
enum Record {
    Journal(journal::Found),
    /// A journal file that cannot be read: its ADD ran, its steps are
    /// unknown. `garbage`: it did not parse (removed once torn down); else it
    /// could not be read at all (left alone).
    Unreadable {
        path: PathBuf,
        garbage: bool,
    },
    /// None (or a state dir DEL cannot use).
    Nothing,
}

fn lookup(conf: &NetConf, env: &Env) -> Record {
    match journal::find(&conf.state_dir, &env.container_id, &env.ifname) {
        Ok(Some(f)) => Record::Journal(f),
        Ok(None) => Record::Nothing,
        Err(e @ Error::Corrupt { .. }) => {
            tracing::error!(error = %e.chain(), "tearing down without the journal");
            let Error::Corrupt { path, .. } = e else { unreachable!("matched above") };
            Record::Unreadable { path, garbage: true }
        }
        Err(e @ Error::Collision { .. }) => {
            tracing::warn!(error = %e.chain(), "not our journal; tearing down without one");
            Record::Nothing
        }
        Err(e) => {
            tracing::error!(error = %e.chain(), "cannot read the journal; tearing down without it");
            let path = journal::dir(&conf.state_dir).join(journal::file_name(&env.container_id, &env.ifname));
            Record::Unreadable { path, garbage: false }
        }
    }
}

/// DEL. Succeeds when the netns, the journal or the VF is already gone, and
/// when something cannot be undone (logged); see the module doc for when it fails.
pub fn del(conf: &NetConf, env: &Env, roots: &Roots) -> Result<()> {
    let t0 = std::time::Instant::now();
    // A state dir that is a file or a dangling symlink holds no journal: the
    // teardown goes on without one (and without locks if the node dir is
    // unusable too).
    let usable = match journal::ensure_dirs(&conf.state_dir) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e.chain(), "state directory unusable: tearing down without a journal");
            false
        }
    };
    let (lock, record) = lock_and_read(conf, env, usable)?;
    let held = lock.as_ref().map(Lock::raw_fd);
    let ipam_failed = match &record {
        Record::Journal(f) => {
            // The runtime may send an empty CNI_NETNS once the sandbox is gone.
            let netns = if env.netns.is_empty() { f.journal.netns.as_str() } else { env.netns.as_str() };
            let mut cx = UndoCx::new(roots, env, netns, f.journal.pci, held)
                .owned_after(|pci| journal::later_owner(&conf.state_dir, &f.path, pci));
            let undone = txn::undo(&f.journal.steps, &mut cx);
            for (step, _) in &undone.steps {
                tracing::error!(step, "left as it is: DEL goes on (best effort)");
            }
            undone.ipam
        }
        Record::Unreadable { .. } | Record::Nothing => without_journal(conf, env, &record, held),
    };
    if let Some(e) = ipam_failed {
        return ipam_failed_once_or_for_good(conf, env, &record, e);
    }
    let forget = match &record {
        Record::Journal(f) => Some(f.path.as_path()),
        Record::Unreadable { path, garbage: true } => Some(path.as_path()),
        _ => None,
    };
    if let Some(p) = forget {
        if let Err(e) = journal::remove(p) {
            tracing::error!(error = %e.chain(), "cannot remove the journal");
        }
    }
    if usable {
        journal::remove_leftovers(&conf.state_dir, &env.container_id, &env.ifname);
    }
    tracing::info!(
        ms = t0.elapsed().as_secs_f64() * 1e3,
        journal = matches!(record, Record::Journal(_)),
        "detached"
    );
    Ok(())
}

/// Takes the lock of the attachment's VF (named by a first look at the
/// journal, else `deviceID`, else `prevResult`) and reads the journal under
/// it. A journal naming another VF than the one locked (an ADD of another
/// `deviceID` wrote it meanwhile) makes it lock that one instead. Without a
/// journal under the lock, the DEL is recorded in the lock file for an ADD
/// still on its way ([`Lock::note_del`]). `None` for the lock: no VF known,
/// or no lock to be had other than busy (logged; only busy fails DEL).
fn lock_and_read(conf: &NetConf, env: &Env, usable: bool) -> Result<(Option<Lock>, Record)> {
    let look = || if usable { lookup(conf, env) } else { Record::Nothing };
    let mut record = look();
    let mut locked: Option<(PciAddr, Lock)> = None;
    // At most three VFs: the first look's, then whatever the journal names under each lock.
    for _ in 0..3 {
        let Some(pci) = journal_pci(&record).or(conf.device).or_else(|| prev_pci(conf, env)) else { break };
        if locked.as_ref().is_some_and(|(p, _)| *p == pci) {
            break;
        }
        locked = None;
        let taken = lock::ensure_node_dir(&env.node_dir).and_then(|()| {
            Lock::take(&env.node_dir, &format!("vf-{pci}"), &format!("VF {pci}"), lock_wait(VF_LOCK_WAIT))
        });
        match taken {
            Ok(l) => locked = Some((pci, l)),
            Err(e @ Error::Busy { .. }) => return Err(e),
            Err(e) => {
                tracing::error!(error = %e.chain(), "tearing down without the VF lock");
                break;
            }
        }
        record = look();
    }
    let lock = locked.map(|(_, l)| l);
    if let (Some(l), Record::Nothing) = (&lock, &record) {
        if let Err(e) = l.note_del(&journal::file_name(&env.container_id, &env.ifname)) {
            tracing::error!(error = %e.chain(), "cannot record this DEL in the VF's lock file; an ADD of the attachment still on its way may attach the VF after it");
        }
    }
    Ok((lock, record))
}

/// Whether an IPAM release failure is for good: the plugin refused the
/// configuration or environment by a CNI spec code that says so (1, 2, 4, 6,
/// 7; 3: it knows no such container), or refused it exactly as at an earlier
/// DEL (`earlier`). The runtime repeats a DEL with the same configuration, so
/// no retry gets further then (host-local answers a range it cannot parse
/// with code 999, the reference plugins' "internal" code).
pub fn refused_for_good(e: &Error, earlier: Option<&str>) -> bool {
    matches!(e, Error::Ipam { code: Some(1 | 2 | 3 | 4 | 6 | 7), .. }) || earlier == Some(e.chain().as_str())
}

/// The IPAM release failed. The first time (unless [`refused_for_good`]),
/// DEL fails so that the runtime retries it, with the refusal noted in the
/// journal (a journal-less teardown gets one holding the lease). A refusal
/// for good ends the DEL successfully instead, so that the runtime stops
/// retrying (a DEL failing forever keeps the sandbox forever), and keeps the
/// journal with only the lease in it: the record of an IP the plugin may
/// still hold, which GC and a later DEL of the attachment try again.
fn ipam_failed_once_or_for_good(conf: &NetConf, env: &Env, record: &Record, e: Error) -> Result<()> {
    let (path, mut j) = match record {
        Record::Journal(f) => (f.path.clone(), f.journal.clone()),
        Record::Unreadable { path, .. } => (path.clone(), lease_journal(conf, env)),
        Record::Nothing => {
            let name = journal::file_name(&env.container_id, &env.ifname);
            (journal::dir(&conf.state_dir).join(name), lease_journal(conf, env))
        }
    };
    let for_good = refused_for_good(&e, j.ipam_refused.as_deref());
    j.ipam_refused = Some(e.chain());
    if for_good {
        j.steps.retain(|s| matches!(s, step::Step::Ipam(_)));
        j.pci = None;
    }
    let saved = journal::save(&path, &j).and_then(journal::Saved::durable);
    if let Err(se) = &saved {
        tracing::error!(error = %se.chain(), "cannot record the IPAM plugin's refusal in the journal");
    }
    if !for_good || saved.is_err() {
        tracing::error!(error = %e.chain(), "the IPAM release failed: DEL fails so that the runtime retries it");
        return Err(e);
    }
    tracing::error!(
        error = %e.chain(),
        journal = %path.display(),
        "the IPAM plugin refuses the release for good (the same configuration gets the same answer): DEL succeeds so that the runtime stops retrying; a lease it holds may leak, and the journal keeps it for GC and a later DEL"
    );
    Ok(())
}

/// A journal holding only the lease that the configuration's IPAM plugin
/// was asked to release (a teardown without a journal).
fn lease_journal(conf: &NetConf, env: &Env) -> journal::Journal {
    let lease = conf.ipam.as_ref().and_then(|i| {
        let (_, c) = ipam::prepare(&conf.raw, &conf.cni_version, &i.kind, env, &conf.state_dir).ok()?;
        Some(step::Step::Ipam(step::IpamLease::new(i.kind.clone(), c)))
    });
    journal::Journal {
        version: journal::VERSION,
        network: Some(conf.name.clone()).filter(|n| !n.is_empty()),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        pci: None,
        steps: lease.into_iter().collect(),
        ipam_refused: None,
    }
}

fn journal_pci(r: &Record) -> Option<PciAddr> {
    match r {
        Record::Journal(f) => f.journal.pci,
        _ => None,
    }
}

/// The teardown without a journal: IPAM released from the configuration
/// (skipped, logged, when its plugin cannot be run), the VF brought home
/// from the pod when it can be told apart ([`find_vf`]). Returns the IPAM
/// release's failure.
fn without_journal(
    conf: &NetConf,
    env: &Env,
    record: &Record,
    held: Option<std::os::fd::RawFd>,
) -> Option<Error> {
    let release = conf.ipam.as_ref().and_then(|i| {
        match ipam::prepare(&conf.raw, &conf.cni_version, &i.kind, env, &conf.state_dir) {
            Ok((plugin, c)) => Some(ipam::start(&plugin, "DEL", env, &c, held)),
            Err(e) => {
                txn::not_released(&e, env);
                None
            }
        }
    });
    let evidence = match (&conf.prev_result, record) {
        (Some(_), _) => Evidence::PrevResult { mac: prev_mac(conf, env) },
        (None, Record::Unreadable { .. }) => Evidence::UnreadableJournal,
        _ => Evidence::None,
    };
    let pci = conf.device.or_else(|| prev_pci(conf, env));
    if let Some(pci) = pci {
        if let Err(e) = bring_home(env, pci, &evidence) {
            tracing::error!(pci = %pci, error = %e.chain(), "cannot bring the VF home; DEL goes on (best effort)");
        }
    }
    match release?.wait() {
        Ok(_) => None,
        Err(e @ Error::IpamNotRun { .. }) => {
            txn::not_released(&e, env);
            None
        }
        Err(e) => Some(e),
    }
}

/// Our interface in `prevResult` (1.1.0 results name the VF as `pciID`).
fn prev_iface<'a>(conf: &'a NetConf, env: &Env) -> Option<&'a serde_json::Value> {
    result::ours_in(conf.prev_result.as_ref()?, env)
}

/// The VF named in `prevResult`.
fn prev_pci(conf: &NetConf, env: &Env) -> Option<PciAddr> {
    prev_iface(conf, env)?.get("pciID")?.as_str()?.parse().ok()
}

/// The MAC `prevResult` gives our interface.
fn prev_mac(conf: &NetConf, env: &Env) -> Option<String> {
    prev_iface(conf, env)?.get("mac")?.as_str().map(str::to_string)
}

/// What says, without a journal, that this attachment's ADD put a link in
/// the pod.
enum Evidence {
    /// `prevResult`: the ADD succeeded (with the MAC it reported, if any).
    PrevResult { mac: Option<String> },
    /// A journal file that cannot be read: the ADD ran.
    UnreadableJournal,
    /// Nothing (a refused ADD, or a lost state dir).
    None,
}

/// The pod's link that is the VF: its bus device is the VF, and, unless the
/// ADD result says this attachment has the VF, it is named `CNI_IFNAME` (a
/// VF in this pod under that name with no journal left can only be this
/// attachment's). A virtual stand-in without bus device only with evidence
/// the ADD ran, by name (and by the MAC the ADD result gives it), so that a
/// link the pod had of its own stays.
fn find_vf<'a>(links: &'a [Link], env: &Env, pci: PciAddr, ev: &Evidence) -> Option<&'a Link> {
    let want = pci.to_string();
    let named = |l: &&Link| l.name == env.ifname && l.name != "lo";
    links
        .iter()
        .filter(|l| l.parent.as_deref() == Some(want.as_str()))
        .find(|l| matches!(ev, Evidence::PrevResult { .. }) || named(l))
        .or_else(|| {
            links.iter().filter(|l| l.parent.is_none()).filter(named).find(|l| match ev {
                Evidence::PrevResult { mac: Some(m) } => {
                    l.mac.as_deref().is_some_and(|have| fmt_mac(have).eq_ignore_ascii_case(m))
                }
                Evidence::PrevResult { mac: None } | Evidence::UnreadableJournal => true,
                Evidence::None => false,
            })
        })
}

/// Without a journal: finds the VF in the pod ([`find_vf`]) and moves it
/// home, down. Its host name and settings are lost with the journal: it
/// keeps its pod name, or `dev<ifindex>` if that is taken on the host (the
/// kernel's own choice on netns exit).
fn bring_home(env: &Env, pci: PciAddr, ev: &Evidence) -> Result<()> {
    if env.netns.is_empty() {
        return Ok(());
    }
    let Ok(pod) = Netns::open(&env.netns) else { return Ok(()) };
    let mut ps = RouteSocket::open_in(&pod)?;
    let links = ps.links()?;
    let Some(l) = find_vf(&links, env, pci, ev) else {
        tracing::info!(pci = %pci, "VF not in the pod (or not told apart from the pod's own links); nothing to bring home");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, parent: Option<&str>, mac: u8) -> Link {
        Link {
            index: 3,
            name: name.into(),
            mac: Some(vec![2, 0, 0, 0, 0, mac]),
            mtu: None,
            up: true,
            parent: parent.map(String::from),
        }
    }

    #[test]
    fn without_a_journal_only_a_link_the_add_can_have_made_comes_home() {
        let env = Env { ifname: "net1".into(), ..Env::default() };
        let pci: PciAddr = "0000:3b:00.2".parse().unwrap();
        let vf_renamed = [link("eth7", Some("0000:3b:00.2"), 1)];
        let prev = Evidence::PrevResult { mac: Some("02:00:00:00:00:01".into()) };
        assert!(find_vf(&vf_renamed, &env, pci, &prev).is_some(), "the ADD result says it is ours");
        assert!(find_vf(&vf_renamed, &env, pci, &Evidence::None).is_none(), "another name: not told apart");
        let vf = [link("net1", Some("0000:3b:00.2"), 1)];
        assert!(find_vf(&vf, &env, pci, &Evidence::None).is_some(), "the VF itself, under our name");
        let own = [link("net1", None, 9)];
        assert!(find_vf(&own, &env, pci, &Evidence::None).is_none(), "the pod's own link stays");
        assert!(find_vf(&own, &env, pci, &prev).is_none(), "another MAC than the ADD result's");
        assert!(find_vf(&own, &env, pci, &Evidence::UnreadableJournal).is_some());
        let other_vf = [link("net1", Some("0000:3b:00.3"), 1)];
        assert!(find_vf(&other_vf, &env, pci, &prev).is_none(), "another VF");
    }
}
