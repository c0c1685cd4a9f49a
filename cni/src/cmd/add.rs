//! ADD: validate everything, plan the steps, journal them once, apply them;
//! on failure undo what was started.
//!
//! The order is chosen for the kernel's costs: the netns move waits for RCU
//! grace periods (~18 ms per direction here), so the IPAM plugin is started
//! on its own thread first and runs meanwhile, and the move, the rename and
//! the MAC/MTU/up changes go in one RTM_SETLINK.

use nic::netlink::link::{Route, RouteSocket};
use nic::netlink::vf as vfnl;
use nic::netns::Netns;
use nic::vfdev::VfDev;
use nic::{PciAddr, Roots};
use serde_json::Value;

use crate::conf::{fmt_mac, Attach, Env, NetConf, RdmaMode};
use crate::error::{Error, Result};
use crate::journal::{self, Journal};
use crate::lock::{self, Lock};
use crate::result::{self, Iface};
use crate::step::{
    ClaimAttachment, DeviceInfoFile, IpamLease, LinkState, NetdevMove, PfAttrs, RdmaMove, Step, UndoCx,
    UserspaceVf, VfAttrs,
};
use crate::txn::{self, failpoint, lock_wait, PF_LOCK_WAIT, VF_LOCK_WAIT};
use crate::vf_record::{self, VfHolder};
use crate::{clock, device, ipam, rdma};

/// How the VF reaches the pod.
enum Target {
    /// Its netdev moves in (`link` as it is on the host now).
    Netdev(nic::netlink::link::Link),
    /// It is bound to a userspace driver: nothing moves; the pod uses it
    /// through vfio/UIO (sriov-cni's "DPDK mode").
    Userspace,
}

pub fn add(conf: &NetConf, env: &Env, roots: &Roots) -> Result<Value> {
    let t0 = std::time::Instant::now();
    let attach = conf.attach.as_ref().ok_or_else(|| Error::config("(stdin)", "not parsed for ADD"))?;
    // --- validation: nothing is touched until all of this passes ---
    let (vf, claimed) = device::resolve(conf, env, roots)?;
    let pod = open_pod(env)?;
    // The pod's route socket (and whether CNI_IFNAME is free there) is
    // opened on a thread inside the pod while this one prepares the rest.
    let ifname = env.ifname.clone();
    let pod_side = pod
        .spawn(move || -> Result<(RouteSocket, bool)> {
            let mut s = RouteSocket::open_here()?;
            let taken = s.link_by_name(&ifname)?.is_some();
            Ok((s, taken))
        })
        .map_err(Error::Netns)?;
    journal::ensure_dirs(&conf.state_dir)?;
    lock::ensure_node_dir(&env.node_dir)?;
    let lease = prepare_lease(conf, env)?;
    failpoint("prepared");
    let vf_lock = lock_new_attachment(conf, env, &vf)?;
    failpoint("locked");
    let mut host = RouteSocket::open_here()?;
    let target = target(&vf, &mut host)?;
    let rdma_plan = rdma_plan(conf, env, attach, &vf, &target, roots)?;
    let PfSide { lock: mut pf_lock, admin_mac, step: pf_step } = pf_side(env, attach, &vf, &mut host)?;
    let (mut podc, taken) = pod_side.join().map_err(Error::Netns)??;
    // A userspace VF puts no interface in the pod: its name cannot clash
    // (sriov-cni does not check it either).
    if taken && matches!(target, Target::Netdev(_)) {
        return Err(Error::Env {
            var: "CNI_IFNAME",
            why: format!("{} already exists in the container", env.ifname),
        });
    }
    let steps = plan(conf, env, attach, &vf, &target, pf_step, lease, &rdma_plan, claimed.as_ref());
    let jpath = journal::dir(&conf.state_dir).join(journal::file_name(&env.container_id, &env.ifname));
    let j = Journal {
        version: journal::VERSION,
        network: Some(conf.name.clone()),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        pci: Some(vf.pci),
        steps,
        ipam_refused: None,
    };
    let saved = journal::save(&jpath, &j)?;
    failpoint("journal");
    tracing::debug!(steps = ?j.steps.iter().map(Step::name).collect::<Vec<_>>(), ms = t0.elapsed().as_secs_f64() * 1e3, "planned");

    let mut run = Run { started: 0, pending: None, held: Some(vf_lock.raw_fd()) };
    // The journal is flushed while the steps run; ADD succeeds once it is on disk.
    let applied = run.apply(&j.steps, env, &mut host, &pod, &mut podc, &mut pf_lock);
    match applied.and_then(|r| saved.durable().map(|()| r)) {
        Ok(ipam_result) => {
            let iface = reported_iface(env, attach, &vf, &target, admin_mac);
            tracing::info!(pci = %vf.pci, ms = t0.elapsed().as_secs_f64() * 1e3, "attached");
            let r = result::build(&conf.cni_version, &iface, ipam_result.as_ref(), conf.prev_result.as_ref());
            Ok(r)
        }
        Err(e) => {
            tracing::warn!(error = %e.chain(), "ADD failed; rolling back");
            drop(pf_lock);
            run.roll_back(&j.steps, &jpath, roots, env, vf.pci);
            Err(e)
        }
    }
}

/// `CNI_NETNS`, refused when it is the plugin's own.
fn open_pod(env: &Env) -> Result<Netns> {
    let pod = Netns::open(&env.netns).map_err(Error::Netns)?;
    let here = Netns::current().map_err(Error::Netns)?;
    if pod.id().map_err(Error::Netns)? == here.id().map_err(Error::Netns)? {
        return Err(Error::Env { var: "CNI_NETNS", why: "is the plugin's own network namespace".into() });
    }
    Ok(pod)
}

fn prepare_lease(conf: &NetConf, env: &Env) -> Result<Option<IpamLease>> {
    let Some(i) = &conf.ipam else { return Ok(None) };
    let (_, c) = ipam::prepare(&conf.raw, &conf.cni_version, &i.kind, env, &conf.state_dir)?;
    Ok(Some(IpamLease::new(i.kind.clone(), c)))
}

/// The VF's lock, refused when this attachment already has a journal, or
/// when its runtime has given up on this ADD: a DEL of the attachment ran
/// after the ADD began (journal.rs, "A DEL that overtakes its ADD").
fn lock_new_attachment(conf: &NetConf, env: &Env, vf: &VfDev) -> Result<Lock> {
    let vf_lock = Lock::take(
        &env.node_dir,
        &format!("vf-{}", vf.pci),
        &format!("VF {}", vf.pci),
        lock_wait(VF_LOCK_WAIT),
    )?;
    if journal::find(&conf.state_dir, &env.container_id, &env.ifname)?.is_some() {
        return Err(Error::Env {
            var: "CNI_CONTAINERID",
            why: format!("attachment {}/{} already exists; DEL it first", env.container_id, env.ifname),
        });
    }
    let attachment = || format!("{}/{}", env.container_id, env.ifname);
    let key = journal::file_name(&env.container_id, &env.ifname);
    if let Some(after) = vf_lock.del_after(&key, env.began)? {
        return Err(Error::Abandoned {
            attachment: attachment(),
            why: format!(
                "its DEL ran {} ms after this ADD began, before the ADD could attach VF {}: the runtime tore the sandbox down and gave up on this ADD",
                after.as_millis(),
                vf.pci
            ),
        });
    }
    let age = clock::monotonic_ns().saturating_sub(env.began);
    if age > lock::DEL_MEMORY.as_nanos() as u64 {
        return Err(Error::Abandoned {
            attachment: attachment(),
            why: format!(
                "this ADD began {} s ago, longer than a DEL of it is remembered ({} s): every runtime has given up on it",
                age / 1_000_000_000,
                lock::DEL_MEMORY.as_secs()
            ),
        });
    }
    Ok(vf_lock)
}

/// The RDMA devices to move with a netdev VF; none for a userspace VF, which
/// must be free and cannot meet `rdma: "required"`.
fn rdma_plan(
    conf: &NetConf,
    env: &Env,
    attach: &Attach,
    vf: &VfDev,
    target: &Target,
    roots: &Roots,
) -> Result<Vec<String>> {
    match target {
        Target::Netdev(_) => rdma::plan(attach.rdma, vf, roots),
        Target::Userspace if attach.rdma == RdmaMode::Required => Err(Error::Rdma(format!(
            "VF {} is bound to {} (userspace), which has no RDMA device, but rdma is \"required\"",
            vf.pci,
            vf.driver.as_deref().unwrap_or("?")
        ))),
        Target::Userspace => {
            userspace_free(&conf.state_dir, vf, env)?;
            Ok(vec![])
        }
    }
}

/// The PF-side attributes to set and what they replace.
struct PfSide {
    /// The PF lock, held until they are set.
    lock: Option<Lock>,
    /// The VF's administrative MAC before ADD.
    admin_mac: Option<[u8; 6]>,
    step: Option<PfAttrs>,
}

/// Reads what the PF-side attributes replace, under the PF lock.
fn pf_side(env: &Env, attach: &Attach, vf: &VfDev, host: &mut RouteSocket) -> Result<PfSide> {
    if attach.vf.is_empty() {
        return Ok(PfSide { lock: None, admin_mac: None, step: None });
    }
    let pfn = vf.pf_netdev()?;
    let lock = Lock::take(
        &env.node_dir,
        &format!("pf-{}", vf.pf),
        &format!("PF {}", vf.pf),
        lock_wait(PF_LOCK_WAIT),
    )?;
    let pf = host.link_by_name(&pfn)?.ok_or_else(|| Error::Device {
        pci: vf.pf.to_string(),
        why: format!("PF netdev {pfn} not found in the plugin's network namespace; PF-side settings (mac, vlan, spoofchk, trust, rates, link_state) need it"),
    })?;
    let cur = vfnl::read(host, pf.index, vf.index)
        .map_err(|e| Error::link(format!("read VF {} of {pfn}", vf.index), e))?
        .ok_or_else(|| Error::Device {
            pci: vf.pci.to_string(),
            why: format!("{pfn} does not report VF {}; PF-side settings (mac, vlan, spoofchk, trust, rates, link_state) need it", vf.index),
        })?;
    Ok(PfSide {
        lock: Some(lock),
        admin_mac: Some(cur.mac),
        step: Some(PfAttrs {
            pf_netdev: pfn,
            vf: vf.index,
            restore: VfAttrs::from(&attach.vf.undo_from(&cur)),
            set: attach.vf.clone(),
        }),
    })
}

/// The interface ADD's result reports.
fn reported_iface(
    env: &Env,
    attach: &Attach,
    vf: &VfDev,
    target: &Target,
    admin_mac: Option<[u8; 6]>,
) -> Iface {
    match target {
        Target::Netdev(l) => Iface {
            name: env.ifname.clone(),
            mac: attach.mac.map(|m| fmt_mac(&m)).or_else(|| l.mac.as_deref().map(fmt_mac)),
            mtu: attach.mtu.or(l.mtu),
            sandbox: env.netns.clone(),
            pci: vf.pci.to_string(),
        },
        // sriov-cni reports the configured MAC, else a non-zero
        // administrative one.
        Target::Userspace => Iface {
            name: env.ifname.clone(),
            mac: attach.mac.or(admin_mac.filter(|m| *m != [0; 6])).map(|m| fmt_mac(&m)),
            mtu: None,
            sandbox: env.netns.clone(),
            pci: vf.pci.to_string(),
        },
    }
}

/// The netdev on the host, or userspace mode; an error for a VF with neither.
fn target(vf: &VfDev, host: &mut RouteSocket) -> Result<Target> {
    match &vf.netdev {
        Some(name) => host.link_by_name(name)?.map(Target::Netdev).ok_or_else(|| Error::Device {
            pci: vf.pci.to_string(),
            why: format!("netdev {name} is not in the plugin's network namespace"),
        }),
        None if vf.userspace() => Ok(Target::Userspace),
        None => Err(Error::Device {
            pci: vf.pci.to_string(),
            why: format!(
                "has no netdev on the host ({} is empty) and is bound to {}: already in a pod, or its driver has not created one",
                vf.dir.join("net").display(),
                vf.driver.as_deref().unwrap_or("no driver")
            ),
        }),
    }
}

/// The steps, in the order they run.
#[allow(clippy::too_many_arguments)]
fn plan(
    conf: &NetConf,
    env: &Env,
    attach: &Attach,
    vf: &VfDev,
    target: &Target,
    pf: Option<PfAttrs>,
    lease: Option<IpamLease>,
    rdma_plan: &[String],
    claimed: Option<&device::Claimed>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    // IPAM first: it runs on its own while the rest happens.
    steps.extend(lease.map(Step::Ipam));
    steps.extend(pf.map(Step::PfAttrs));
    if let Target::Netdev(l) = target {
        steps.push(Step::MoveNetdev(NetdevMove {
            host_name: l.name.clone(),
            pod_name: env.ifname.clone(),
            host_index: l.index,
            pod_mac: attach.mac.map(|m| fmt_mac(&m)).or_else(|| l.mac.as_deref().map(fmt_mac)),
            original: LinkState {
                mac: attach.mac.and(l.mac.as_deref().map(fmt_mac)),
                mtu: attach.mtu.and(l.mtu),
                up: l.up,
            },
            mac: attach.mac,
            mtu: attach.mtu,
        }));
    }
    if let Target::Userspace = target {
        steps.push(Step::UserspaceVf(UserspaceVf {
            record: vf_record::path(&env.node_dir, vf.pci),
            holder: VfHolder {
                container_id: env.container_id.clone(),
                ifname: env.ifname.clone(),
                netns: env.netns.clone(),
                network: conf.name.clone(),
            },
        }));
    }
    if !rdma_plan.is_empty() {
        steps.push(Step::MoveRdma(RdmaMove { devices: rdma_plan.to_vec() }));
    }
    if let Some(f) = &conf.device_info_file {
        // device-info-spec 1.1.0: keep what the device plugin wrote (its PF
        // address included), add ours.
        steps.push(Step::DeviceInfo(DeviceInfoFile {
            file: env.devinfo_dir.join(f),
            info: nic::devinfo::DeviceInfo {
                pci: Some(vf.pci),
                pf: None,
                rdma_device: rdma_plan.first().or(vf.rdma.first()).cloned(),
            },
        }));
    }
    if let Some(c) = claimed {
        let mac = match target {
            Target::Netdev(l) => attach.mac.map(|m| fmt_mac(&m)).or_else(|| l.mac.as_deref().map(fmt_mac)),
            Target::Userspace => attach.mac.map(|m| fmt_mac(&m)),
        };
        steps.push(Step::ClaimAttachment(ClaimAttachment {
            dir: c.dir.clone(),
            claim_uid: c.claim_uid.clone(),
            device: c.device.clone(),
            attachment: Some(nic::prepared::Attachment {
                version: nic::prepared::VERSION,
                claim_uid: c.claim_uid.clone(),
                device: c.device.clone(),
                pod_uid: c.pod_uid.clone(),
                container_id: env.container_id.clone(),
                ifname: env.ifname.clone(),
                mac,
                ips: vec![],
            }),
        }));
    }
    steps
}

/// ADD's progress, for the rollback.
struct Run {
    /// How many steps were started.
    started: usize,
    /// The IPAM ADD in flight.
    pending: Option<ipam::Pending>,
    /// The VF lock's descriptor, which the IPAM plugin inherits.
    held: Option<std::os::fd::RawFd>,
}

impl Run {
    /// Applies the steps; returns the IPAM result (configured on the netdev
    /// in the pod, when one moved there).
    fn apply(
        &mut self,
        steps: &[Step],
        env: &Env,
        host: &mut RouteSocket,
        pod: &Netns,
        podc: &mut RouteSocket,
        pf_lock: &mut Option<Lock>,
    ) -> Result<Option<Value>> {
        let netdev = steps.iter().any(|s| matches!(s, Step::MoveNetdev(_)));
        let mut result = None;
        let mut collected = false;
        for s in steps {
            // The device-info and claim attachment files come last, after the addresses.
            if matches!(s, Step::DeviceInfo(_) | Step::ClaimAttachment(_)) && !collected {
                result = self.collect(env, podc, netdev)?;
                collected = true;
            }
            let t = std::time::Instant::now();
            self.started += 1;
            match s {
                Step::Ipam(l) => self.pending = Some(l.apply(env, self.held)?),
                Step::PfAttrs(p) => {
                    p.apply(host)?;
                    pf_lock.take();
                }
                Step::MoveNetdev(m) => m.apply(host, pod)?,
                Step::MoveRdma(r) => r.apply(pod)?,
                Step::DeviceInfo(d) => d.apply()?,
                Step::ClaimAttachment(a) => a.apply(result.as_ref())?,
                Step::UserspaceVf(u) => u.apply()?,
            }
            tracing::debug!(step = s.name(), ms = t.elapsed().as_secs_f64() * 1e3, "applied");
            if !matches!(s, Step::Ipam(_)) {
                failpoint(s.name());
            }
        }
        if !collected {
            result = self.collect(env, podc, netdev)?;
        }
        Ok(result)
    }

    /// Undoes the steps started; the journal goes once they are all undone.
    fn roll_back(mut self, steps: &[Step], jpath: &std::path::Path, roots: &Roots, env: &Env, pci: PciAddr) {
        if let Some(p) = self.pending.take() {
            // Let an in-flight IPAM ADD finish so that its DEL releases it.
            let _ = p.wait();
        }
        let mut cx = UndoCx::new(roots, env, &env.netns, Some(pci), self.held);
        if txn::undo(&steps[..self.started], &mut cx).complete() {
            let _ = journal::remove(jpath);
        } else {
            tracing::error!("rollback incomplete; the journal stays for the DEL the runtime sends");
        }
    }

    /// Waits for the IPAM ADD and, for a netdev, sets its addresses and
    /// routes in the pod.
    fn collect(&mut self, env: &Env, podc: &mut RouteSocket, netdev: bool) -> Result<Option<Value>> {
        let Some(p) = self.pending.take() else { return Ok(None) };
        let t = std::time::Instant::now();
        let r = p.wait_add()?;
        tracing::debug!(ms = t.elapsed().as_secs_f64() * 1e3, "waited for IPAM");
        failpoint("ipam");
        if netdev {
            let t = std::time::Instant::now();
            configure_addresses(env, podc, &r)?;
            tracing::debug!(ms = t.elapsed().as_secs_f64() * 1e3, "addresses set");
            failpoint("addresses");
        }
        Ok(Some(r))
    }
}

/// The IPAM result's addresses and routes on `CNI_IFNAME` in the pod.
fn configure_addresses(env: &Env, ps: &mut RouteSocket, r: &Value) -> Result<()> {
    let (ips, routes) = ipam::parse_result(r)?;
    if ips.is_empty() && routes.is_empty() {
        return Ok(());
    }
    let l = ps
        .link_by_name(&env.ifname)?
        .ok_or_else(|| Error::Check(format!("{} vanished from the pod after the move", env.ifname)))?;
    for ip in &ips {
        ps.add_address(l.index, ip.addr, ip.prefix)
            .map_err(|e| Error::link(format!("add {}/{} to {}", ip.addr, ip.prefix, env.ifname), e))?;
    }
    for r in &routes {
        // A route without gw uses the gateway of the first address of its
        // family, as the reference plugins' ConfigureIface does.
        let gw = r
            .gw
            .or_else(|| ips.iter().filter(|i| i.addr.is_ipv4() == r.dst.is_ipv4()).find_map(|i| i.gateway));
        let route = Route { dst: r.dst, prefix: r.prefix, gw };
        // Added beside a route to the same destination out of another link
        // (another VF of this network, eth0's default), as the reference
        // plugins do (`RouteAddEcmp`, see `RouteSocket::add_route`). Only an
        // identical route is EEXIST (a result listing one twice): accepted
        // once the table shows it there as asked, never on the kernel's word
        // alone.
        let add = |e| Error::link(format!("add route {}/{} via {:?} in the pod", r.dst, r.prefix, gw), e);
        match ps.add_route(l.index, &route) {
            Ok(()) => {}
            Err(e) if e.errno() == Some(libc::EEXIST) => {
                let have = ps.routes(Some(l.index)).map_err(|e| Error::link("list routes in the pod", e))?;
                if !have.contains(&route) {
                    return Err(add(e));
                }
                tracing::debug!(dst = %r.dst, prefix = r.prefix, "route already there");
            }
            Err(e) => return Err(add(e)),
        }
    }
    Ok(())
}

/// A VF bound to a userspace driver leaves no trace in the kernel when it is
/// given to a pod, so records tell: the node-wide record of the VF
/// ([`UserspaceVf`], every network's ADD reads it), or, for an attachment an
/// earlier build made, a journal of this state dir; one of another
/// attachment whose pod netns still exists holds it (sriov-cni refuses
/// "already allocated" on the same rule, pkg/utils `allocator`: a saved
/// netns that still opens). A netdev VF in a pod is refused because its
/// netdev left the host. Called under the VF lock, which is node-wide too.
fn userspace_free(state_dir: &std::path::Path, vf: &VfDev, env: &Env) -> Result<()> {
    let recorded = VfHolder::read(&vf_record::path(&env.node_dir, vf.pci));
    let journaled = journal::list(state_dir)?
        .into_iter()
        .filter_map(|(_, j)| j.ok())
        .filter(|j| j.pci == Some(vf.pci))
        .map(|j| VfHolder {
            container_id: j.container_id,
            ifname: j.ifname,
            netns: j.netns,
            network: j.network.unwrap_or_default(),
        });
    for h in recorded.into_iter().chain(journaled) {
        if (h.container_id == env.container_id && h.ifname == env.ifname) || h.netns.is_empty() {
            continue;
        }
        if Netns::open(&h.netns).is_ok() {
            return Err(Error::Device {
                pci: vf.pci.to_string(),
                why: format!(
                    "is bound to {} and already given to container {} (interface {}, network {}) whose network namespace {} still exists; a VF serves one attachment: DEL that one first",
                    vf.driver.as_deref().unwrap_or("a userspace driver"),
                    h.container_id,
                    h.ifname,
                    h.network,
                    h.netns
                ),
            });
        }
        tracing::info!(container = %h.container_id, netns = %h.netns, "a stale attachment of this VF (its netns is gone); taking the VF");
    }
    Ok(())
}
