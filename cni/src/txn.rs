//! ADD as a transaction of journaled steps, and the undo shared by a failed
//! ADD, DEL and GC.
//!
//! Each step is recorded in the journal *before* it runs; undo treats the
//! last recorded step as "maybe done" and every undo is idempotent, so a crash
//! anywhere leaves enough for DEL to restore the host.

use std::path::Path;
use std::time::Duration;

use nic::netlink::link::{self as rtnl, LinkError, RouteSocket};
use nic::netlink::nldev::RdmaDevice;
use nic::netlink::transport::{Client, NlError, SocketTransport, NETLINK_RDMA};
use nic::netlink::vf::{self as vfnl, VfLink, VfSettings, VfVlanSetting};
use nic::netns::Netns;
use nic::vfdev::{self, VfDev};
use nic::NetnsMode;
use nic::Roots;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conf::{fmt_mac, parse_mac, Env, NetConf, RdmaMode};
use crate::error::{Error, Result};
use crate::ipam;
use crate::journal::{self, Journal, Lock, Original, VfUndo};

/// How long ADD/DEL wait for the per-VF lock.
pub const VF_LOCK_WAIT: Duration = Duration::from_secs(10);

/// Test-only: `KUBE_RDMA_CNI_LOCK_WAIT_MS` shortens the lock waits so the
/// "busy → code 11" path can be tested quickly. Not for production use.
pub const LOCK_WAIT_ENV: &str = "KUBE_RDMA_CNI_LOCK_WAIT_MS";

fn lock_wait(default: Duration) -> Duration {
    std::env::var(LOCK_WAIT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(default)
}
/// How long ADD/DEL wait for the short per-PF lock (PF-side VF attributes).
pub const PF_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Test-only: `KUBE_RDMA_CNI_FAILPOINT=after:<step>` makes the process exit
/// abruptly (exit status 99, no cleanup) right after `<step>` of ADD;
/// `refuse:combined_move` makes ADD behave as if the kernel refused the
/// one-request move+rename (exercises the temporary-netns fallback).
/// Used by the tests; never set it in production.
pub const FAILPOINT_ENV: &str = "KUBE_RDMA_CNI_FAILPOINT";

/// The mutating steps of ADD, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// PF-side VF attributes (`ip link set PF vf N ...`).
    PfAttrs,
    /// VF netdev moved into the pod and renamed to `CNI_IFNAME`.
    MoveNetdev,
    /// MAC, MTU, link up in the pod.
    LinkConfig,
    /// RDMA device(s) moved into the pod (nldev SET + NET_NS_FD).
    MoveRdma,
    /// IPAM ADD: started before the move so the exec overlaps it; its result
    /// is collected (and the failpoint fires) before the addresses step.
    Ipam,
    /// Addresses and routes in the pod.
    Addresses,
    /// Device-info file written.
    DeviceInfo,
}

impl Step {
    /// Every step, in the order ADD starts them.
    pub const ALL: [Step; 7] = [
        Step::PfAttrs,
        Step::Ipam,
        Step::MoveNetdev,
        Step::LinkConfig,
        Step::MoveRdma,
        Step::Addresses,
        Step::DeviceInfo,
    ];

    /// The name used in the journal and by the failpoint.
    pub fn name(self) -> &'static str {
        match self {
            Step::PfAttrs => "pf_attrs",
            Step::MoveNetdev => "move_netdev",
            Step::LinkConfig => "link_config",
            Step::MoveRdma => "move_rdma",
            Step::Ipam => "ipam",
            Step::Addresses => "addresses",
            Step::DeviceInfo => "device_info",
        }
    }
}

fn failpoint(step: Step) {
    if let Ok(v) = std::env::var(FAILPOINT_ENV) {
        if v.strip_prefix("after:") == Some(step.name()) {
            tracing::warn!(step = step.name(), "failpoint hit: exiting abruptly");
            // SAFETY: _exit ends the process at once; that is the point.
            unsafe { libc::_exit(99) };
        }
    }
}

/// Where journals live.
pub fn attachments_dir(state_dir: &Path) -> std::path::PathBuf {
    state_dir.join("attachments")
}

/// The RDMA subsystem's netns mode: sysfs first (works on the simulated node
/// too), then nldev SYS_GET. `None`: no RDMA subsystem.
pub fn rdma_netns_mode(roots: &Roots) -> Option<NetnsMode> {
    if let Some(m) = vfdev::netns_mode_from_sysfs(roots) {
        return Some(m);
    }
    let t = SocketTransport::open(NETLINK_RDMA).ok()?;
    Client::new(t).rdma_netns_mode().ok()
}

fn plan_rdma(conf: &NetConf, vf: &VfDev, roots: &Roots) -> Result<Vec<String>> {
    if conf.rdma == RdmaMode::Disabled {
        return Ok(vec![]);
    }
    let required = conf.rdma == RdmaMode::Required;
    if vf.rdma.is_empty() {
        if required {
            return Err(Error::Rdma(format!(
                "VF {} has no RDMA device ({} is empty or missing) but rdma is \"required\"; enable RDMA on the VF driver, or set rdma to \"auto\" or \"disabled\"",
                vf.pci,
                vf.dir.join("infiniband").display()
            )));
        }
        tracing::info!(pci = %vf.pci, "VF has no RDMA device; rdma=auto: skipping the RDMA move");
        return Ok(vec![]);
    }
    match rdma_netns_mode(roots) {
        Some(NetnsMode::Exclusive) => Ok(vf.rdma.clone()),
        Some(NetnsMode::Shared) if required => Err(Error::Rdma(format!(
            "the RDMA subsystem is in shared netns mode, so {} cannot be moved into the pod; boot with ib_core netns_mode=0 (e.g. `options ib_core netns_mode=0` in /etc/modprobe.d) or run `rdma system set netns exclusive` before pods start",
            vf.rdma.join(", ")
        ))),
        Some(NetnsMode::Shared) => {
            tracing::info!(rdma = ?vf.rdma, "RDMA netns mode is shared (ib_core netns_mode=1): devices stay visible in every netns; skipping the move");
            Ok(vec![])
        }
        None if required => Err(Error::Rdma("no RDMA subsystem (NETLINK_RDMA unavailable; is ib_core loaded?)".into())),
        None => {
            tracing::info!("no RDMA subsystem; skipping the RDMA move");
            Ok(vec![])
        }
    }
}

fn vf_undo_of(pf_netdev: &str, vf: u32, want: &VfSettings, cur: &vfnl::VfState) -> VfUndo {
    let u = want.undo_from(cur);
    VfUndo {
        pf_netdev: pf_netdev.to_string(),
        vf,
        mac: u.mac.map(|m| fmt_mac(&m)),
        vlan: u.vlan.map(|v| (v.id, v.qos, v.ad)),
        spoofchk: u.spoofchk,
        trust: u.trust,
        rate: u.rate,
        link_state: u.link_state.map(|l| {
            match l {
                VfLink::Auto => "auto",
                VfLink::Enable => "enable",
                VfLink::Disable => "disable",
            }
            .to_string()
        }),
    }
}

fn vf_settings_of(u: &VfUndo) -> VfSettings {
    VfSettings {
        mac: u.mac.as_deref().and_then(parse_mac),
        vlan: u.vlan.map(|(id, qos, ad)| VfVlanSetting { id, qos, ad }),
        spoofchk: u.spoofchk,
        trust: u.trust,
        rate: u.rate,
        link_state: u.link_state.as_deref().and_then(|s| match s {
            "auto" => Some(VfLink::Auto),
            "enable" => Some(VfLink::Enable),
            "disable" => Some(VfLink::Disable),
            _ => None,
        }),
    }
}

struct Ctx<'a> {
    conf: &'a NetConf,
    jpath: std::path::PathBuf,
    journal: Journal,
}

impl Ctx<'_> {
    fn begin(&mut self, s: Step) -> Result<()> {
        self.journal.steps.push(s);
        self.journal.save(&self.jpath)
    }
}

/// The result JSON for `version`.
pub fn build_result(
    version: &str,
    ifname: &str,
    mac: &str,
    mtu: Option<u32>,
    sandbox: &str,
    pci: &str,
    ipam: Option<&Value>,
) -> Value {
    let v11 = ipam::version_key(version) >= (1, 1, 0);
    let pre1 = ipam::version_key(version) < (1, 0, 0);
    let mut iface = serde_json::json!({"name": ifname, "mac": mac, "sandbox": sandbox});
    if v11 {
        if let Some(m) = mtu {
            iface["mtu"] = m.into();
        }
        iface["pciID"] = pci.into();
    }
    let mut ips = Vec::new();
    let mut routes = Vec::new();
    let mut dns = serde_json::json!({});
    if let Some(r) = ipam {
        for ip in r.get("ips").and_then(Value::as_array).into_iter().flatten() {
            let mut o = serde_json::Map::new();
            if let Some(a) = ip.get("address") {
                o.insert("address".into(), a.clone());
                if pre1 {
                    let six = a.as_str().is_some_and(|s| s.contains(':'));
                    o.insert("version".into(), if six { "6" } else { "4" }.into());
                }
            }
            if let Some(g) = ip.get("gateway") {
                o.insert("gateway".into(), g.clone());
            }
            o.insert("interface".into(), 0.into());
            ips.push(Value::Object(o));
        }
        routes = r.get("routes").and_then(Value::as_array).cloned().unwrap_or_default();
        if let Some(d) = r.get("dns") {
            dns = d.clone();
        }
    }
    serde_json::json!({
        "cniVersion": version,
        "interfaces": [iface],
        "ips": ips,
        "routes": routes,
        "dns": dns,
    })
}

/// ADD: validates everything, then runs the steps; on failure undoes what was
/// done and returns the error.
pub fn add(conf: &NetConf, env: &Env, roots: &Roots) -> Result<Value> {
    let pci = conf.device.ok_or_else(|| Error::config("deviceID", "missing"))?;
    // --- validation: nothing is touched until all of this passes ---
    let vf = VfDev::lookup(roots, pci)?;
    let host_name = vf.netdev.clone().ok_or_else(|| Error::Device {
        pci: pci.to_string(),
        why: format!(
            "has no netdev on the host ({} is empty): already in a pod, or bound to vfio-pci",
            vf.dir.join("net").display()
        ),
    })?;
    let pod = Netns::open(&env.netns).map_err(Error::Netns)?;
    let here = Netns::current().map_err(Error::Netns)?;
    if pod.id().map_err(Error::Netns)? == here.id().map_err(Error::Netns)? {
        return Err(Error::Env { var: "CNI_NETNS", why: "is the plugin's own network namespace".into() });
    }
    let mut host = rtnl::open_here()?;
    let link = rtnl::link_by_name(&mut host, &host_name)?.ok_or_else(|| Error::Device {
        pci: pci.to_string(),
        why: format!("netdev {host_name} is not in the plugin's network namespace"),
    })?;
    let mut podc = rtnl::open_in(&pod)?;
    if rtnl::link_by_name(&mut podc, &env.ifname)?.is_some() {
        return Err(Error::Env {
            var: "CNI_IFNAME",
            why: format!("{} already exists in the container", env.ifname),
        });
    }
    let rdma_plan = plan_rdma(conf, &vf, roots)?;
    let pf_netdev = if conf.vf.is_empty() { None } else { Some(vf.pf_netdev()?) };
    journal::ensure_dir(&conf.state_dir)?;
    std::fs::create_dir_all(attachments_dir(&conf.state_dir)).map_err(|e| Error::io(&conf.state_dir, e))?;
    let ipam = match &conf.ipam_type {
        Some(t) => Some(ipam::prepare(&conf.raw, &conf.cni_version, t, env, &conf.state_dir)?),
        None => None,
    };
    let _vf_lock =
        Lock::take(&conf.state_dir, &format!("vf-{pci}"), &format!("VF {pci}"), lock_wait(VF_LOCK_WAIT))?;
    let jpath = journal::path(&attachments_dir(&conf.state_dir), &env.container_id, &env.ifname);
    if Journal::load(&jpath)?.is_some() {
        return Err(Error::Env {
            var: "CNI_CONTAINERID",
            why: format!("attachment {}/{} already exists; DEL it first", env.container_id, env.ifname),
        });
    }
    // Re-check under the lock: another ADD may have taken this VF meanwhile.
    let link = match rtnl::link_by_name(&mut host, &host_name)? {
        Some(l) if l.index == link.index => l,
        _ => {
            return Err(Error::Device {
                pci: pci.to_string(),
                why: format!("netdev {host_name} was taken by another attachment"),
            })
        }
    };
    let mut ctx = Ctx {
        conf,
        jpath,
        journal: Journal {
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            pci: Some(pci),
            original: Original {
                name: host_name.clone(),
                mac: link.mac.as_deref().map(fmt_mac),
                mtu: link.mtu,
                up: link.up,
            },
            mac: conf.mac.map(|m| fmt_mac(&m)),
            mtu: conf.mtu,
            device_info_file: conf.device_info_file.clone(),
            ..Journal::default()
        },
    };
    // The IPAM plugin runs while the kernel moves the netdev (see ipam::Pending).
    let mut pending: Option<ipam::Pending> = None;
    let run = (|| -> Result<Value> {
        // PF-side VF attributes, only when asked.
        if let Some(pfn) = &pf_netdev {
            let _pf_lock = Lock::take(
                &conf.state_dir,
                &format!("pf-{}", vf.pf),
                &format!("PF {}", vf.pf),
                lock_wait(PF_LOCK_WAIT),
            )?;
            let pf = rtnl::link_by_name(&mut host, pfn)?.ok_or_else(|| Error::Device {
                pci: vf.pf.to_string(),
                why: format!("PF netdev {pfn} not found"),
            })?;
            let cur = vfnl::read(&mut host, pf.index, vf.index)
                .map_err(|e| Error::netlink(format!("read VF {} of {pfn}", vf.index), e))?
                .ok_or_else(|| Error::Device {
                    pci: pci.to_string(),
                    why: format!("{pfn} does not report VF {}", vf.index),
                })?;
            ctx.journal.vf_undo = Some(vf_undo_of(pfn, vf.index, &conf.vf, &cur));
            ctx.begin(Step::PfAttrs)?;
            vfnl::apply(&mut host, pf.index, vf.index, &conf.vf)
                .map_err(|e| Error::netlink(format!("set VF {} attributes on {pfn}", vf.index), e))?;
            failpoint(Step::PfAttrs);
        }
        if let Some((plugin, iconf)) = &ipam {
            ctx.journal.ipam_conf = Some(iconf.clone());
            ctx.journal.ipam_type = conf.ipam_type.clone();
            ctx.begin(Step::Ipam)?;
            pending = Some(ipam::spawn(plugin, "ADD", env, &serde_json::to_vec(iconf).unwrap_or_default())?);
        }
        ctx.begin(Step::MoveNetdev)?;
        move_into_pod(&mut host, link.index, &pod, &env.ifname)?;
        failpoint(Step::MoveNetdev);

        ctx.begin(Step::LinkConfig)?;
        let plink = rtnl::link_by_name(&mut podc, &env.ifname)?
            .ok_or_else(|| Error::Check(format!("{} vanished from the pod after the move", env.ifname)))?;
        rtnl::configure(&mut podc, plink.index, conf.mac.as_ref().map(|m| &m[..]), conf.mtu, Some(true))
            .map_err(|e| Error::link(format!("configure {} in the pod", env.ifname), e))?;
        failpoint(Step::LinkConfig);

        if !rdma_plan.is_empty() {
            ctx.journal.rdma = rdma_plan.clone();
            ctx.begin(Step::MoveRdma)?;
            move_rdma(&rdma_plan, &pod, None)?;
            failpoint(Step::MoveRdma);
        }

        let ipam_result = match pending.take() {
            Some(p) => Some(p.wait_add()?),
            None => None,
        };
        if ipam_result.is_some() {
            failpoint(Step::Ipam);
        }

        ctx.begin(Step::Addresses)?;
        if let Some(r) = &ipam_result {
            let (ips, routes) = ipam::parse_result(r)?;
            for ip in &ips {
                rtnl::add_address(&mut podc, plink.index, ip.addr, ip.prefix).map_err(|e| {
                    Error::link(format!("add {}/{} to {}", ip.addr, ip.prefix, env.ifname), e)
                })?;
            }
            for r in &routes {
                // A route without gw uses the gateway of the first address of
                // its family, as the reference plugins' ConfigureIface does.
                let gw = r.gw.or_else(|| {
                    ips.iter().filter(|i| i.addr.is_ipv4() == r.dst.is_ipv4()).find_map(|i| i.gateway)
                });
                rtnl::add_route(&mut podc, plink.index, r.dst, r.prefix, gw)
                    .map_err(|e| Error::link(format!("add route {}/{} in the pod", r.dst, r.prefix), e))?;
            }
        }
        failpoint(Step::Addresses);

        if let Some(f) = &conf.device_info_file {
            ctx.begin(Step::DeviceInfo)?;
            // device-info-spec 1.1.0: keep what the device plugin wrote
            // (its PF address included), add ours.
            let info = nic::devinfo::DeviceInfo {
                pci: Some(pci),
                pf: None,
                rdma_device: rdma_plan.first().or(vf.rdma.first()).cloned(),
            };
            nic::devinfo::merge_into_file(f, &info).map_err(|e| Error::io(&e.path, e.source))?;
            failpoint(Step::DeviceInfo);
        }

        let final_link = rtnl::link_by_name(&mut podc, &env.ifname)?.unwrap_or(plink);
        let mac = final_link.mac.as_deref().map(fmt_mac).unwrap_or_default();
        let result = build_result(
            &conf.cni_version,
            &env.ifname,
            &mac,
            final_link.mtu,
            &env.netns,
            &pci.to_string(),
            ipam_result.as_ref(),
        );
        ctx.journal.mac = Some(mac);
        ctx.journal.complete = true;
        ctx.journal.result = Some(result.clone());
        ctx.journal.save(&ctx.jpath)?;
        Ok(result)
    })();
    match run {
        Ok(r) => Ok(r),
        Err(e) => {
            tracing::warn!(error = %e, "ADD failed; rolling back");
            if let Some(p) = pending.take() {
                // Let an in-flight IPAM ADD finish so its allocation can be released.
                let _ = p.wait();
            }
            let mut ok = true;
            if ctx.journal.steps.contains(&Step::Ipam) {
                if let Some((plugin, iconf)) = &ipam {
                    if let Err(u) = ipam::del(plugin, iconf, env) {
                        tracing::error!(error = %u, "rollback: IPAM DEL failed");
                        ok = false;
                    }
                }
            }
            if let Err(u) = undo(&ctx.journal, roots) {
                tracing::error!(error = %u, "rollback failed; the journal stays for DEL");
                ok = false;
            }
            if ok {
                let _ = journal::remove(&ctx.jpath);
            }
            let _ = ctx.conf;
            Err(e)
        }
    }
}

fn move_into_pod(host: &mut RouteSocket, index: u32, pod: &Netns, ifname: &str) -> Result<()> {
    let forced = std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == "refuse:combined_move");
    let combined = if forced {
        Err(LinkError::Request {
            op: "move",
            link: format!("ifindex {index}"),
            source: NlError::Kernel {
                op: "combined move (refused by test failpoint)".into(),
                errno: libc::EOPNOTSUPP,
                ext: None,
            },
        })
    } else {
        rtnl::move_to_netns(host, index, pod.raw_fd(), Some(ifname))
    };
    let e = match combined {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // Fallback for kernels/drivers refusing the combined request: move into a
    // private netns, rename there (nothing can clash), then move into the pod.
    let why = std::error::Error::source(&e).map(ToString::to_string);
    tracing::info!(error = %e, why = ?why, "combined move+rename refused; renaming through a temporary netns");
    let tmp = Netns::new_anonymous().map_err(Error::Netns)?;
    let name = rtnl::link_by_index(host, index)
        .ok()
        .flatten()
        .map(|l| l.name)
        .ok_or_else(|| Error::link(format!("find ifindex {index} on the host"), e))?;
    rtnl::move_to_netns(host, index, tmp.raw_fd(), None)
        .map_err(|e| Error::link(format!("move {name} into a temporary netns"), e))?;
    let mut tc = rtnl::open_in(&tmp)?;
    let back = |tc: &mut RouteSocket, err: Error| -> Error {
        // Leave the link on the host, not stranded in a netns that dies with us.
        if let Ok(Some(l)) = rtnl::link_by_name(tc, &name) {
            if let Ok(here) = Netns::current() {
                let _ = rtnl::move_to_netns(tc, l.index, here.raw_fd(), None);
            }
        }
        err
    };
    let l = match rtnl::link_by_name(&mut tc, &name) {
        Ok(Some(l)) => l,
        Ok(None) => return Err(Error::Check(format!("{name} vanished in the temporary netns"))),
        Err(e) => return Err(back(&mut tc, e.into())),
    };
    if let Err(e) = rtnl::rename(&mut tc, l.index, ifname) {
        return Err(back(&mut tc, Error::link(format!("rename {name} to {ifname}"), e)));
    }
    if let Err(e) = rtnl::move_to_netns(&mut tc, l.index, pod.raw_fd(), None) {
        let err = Error::link(format!("move {ifname} into the pod"), e);
        let _ = rtnl::rename(&mut tc, l.index, &name);
        return Err(back(&mut tc, err));
    }
    Ok(())
}

/// Moves RDMA devices into `to` (ADD: `from` = None, socket in our netns) or
/// from `from` back to our netns (DEL).
fn move_rdma(names: &[String], to: &Netns, from: Option<&Netns>) -> Result<()> {
    let transport = match from {
        None => SocketTransport::open(NETLINK_RDMA),
        Some(ns) => SocketTransport::open_in(ns, NETLINK_RDMA).map_err(Error::Netns)?,
    }
    .map_err(|e| Error::Rdma(format!("cannot open a NETLINK_RDMA socket: {e}")))?;
    let mut c = Client::new(transport);
    let devs = c.rdma_devices().map_err(|e| Error::Rdma(e.to_string()))?;
    for n in names {
        let d: &RdmaDevice = match devs.iter().find(|d| &d.name == n) {
            Some(d) => d,
            None if from.is_some() => continue,
            None => return Err(Error::Rdma(format!("RDMA device {n} is not visible in the plugin's netns"))),
        };
        c.rdma_set_netns(d, to.raw_fd() as u32).map_err(|e| Error::Rdma(e.to_string()))?;
    }
    Ok(())
}

/// Undoes every recorded step but IPAM (callers release IPAM themselves, DEL
/// from the stdin config): device-info, RDMA back, netdev home under its
/// original name with its MAC/MTU/state, PF-side attributes.
pub fn undo(j: &Journal, roots: &Roots) -> Result<()> {
    let pod = if j.netns.is_empty() { None } else { Netns::open(&j.netns).ok() };
    let mut first_err: Option<Error> = None;
    let mut keep = |r: Result<()>| {
        if let Err(e) = r {
            tracing::error!(error = %e, "undo step failed");
            first_err.get_or_insert(e);
        }
    };
    for s in j.steps.iter().rev() {
        match s {
            Step::DeviceInfo => {
                if let Some(f) = &j.device_info_file {
                    keep(journal::remove(f));
                }
            }
            Step::Addresses | Step::Ipam | Step::LinkConfig => {}
            Step::MoveRdma => {
                if let Some(p) = &pod {
                    let here = Netns::current().map_err(Error::Netns);
                    keep(here.and_then(|h| move_rdma(&j.rdma, &h, Some(p))));
                }
                // Netns gone: the kernel returns RDMA devices to init_net itself.
            }
            Step::MoveNetdev => keep(bring_home(j, pod.as_ref(), roots)),
            Step::PfAttrs => {
                if let Some(u) = &j.vf_undo {
                    keep(restore_pf(u));
                }
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn restore_pf(u: &VfUndo) -> Result<()> {
    let mut host = rtnl::open_here()?;
    let pf = rtnl::link_by_name(&mut host, &u.pf_netdev)?.ok_or_else(|| Error::Device {
        pci: u.pf_netdev.clone(),
        why: "PF netdev not found to restore VF attributes".into(),
    })?;
    vfnl::apply(&mut host, pf.index, u.vf, &vf_settings_of(u))
        .map_err(|e| Error::netlink(format!("restore VF {} attributes on {}", u.vf, u.pf_netdev), e))
}

/// Brings the VF netdev back to the plugin's netns under its original name and
/// restores MAC, MTU and up/down state. Finds it in the pod by `CNI_IFNAME`, or
/// on the host by name or through sysfs (pod netns gone: the kernel moved a
/// physical VF back to init_net, possibly renamed).
fn bring_home(j: &Journal, pod: Option<&Netns>, roots: &Roots) -> Result<()> {
    let mut host = rtnl::open_here()?;
    let here = Netns::current().map_err(Error::Netns)?;
    if let Some(p) = pod {
        let mut podc = rtnl::open_in(p)?;
        if let Some(l) = rtnl::link_by_name(&mut podc, &j.ifname)? {
            let r = rtnl::move_to_netns(&mut podc, l.index, here.raw_fd(), Some(&j.original.name));
            if let Err(e) = r {
                if e.errno() != Some(libc::EEXIST) {
                    return Err(Error::link(
                        format!("move {} back to the host as {}", j.ifname, j.original.name),
                        e,
                    ));
                }
                tracing::warn!("{} is taken on the host; moving back under the pod name", j.original.name);
                rtnl::move_to_netns(&mut podc, l.index, here.raw_fd(), None)
                    .map_err(|e| Error::link(format!("move {} back to the host", j.ifname), e))?;
            }
        }
    }
    let mut link = rtnl::link_by_name(&mut host, &j.original.name)?;
    if link.is_none() {
        // Look for it under whatever name sysfs shows (kernel rename on netns teardown).
        let current = j.pci.and_then(|pci| VfDev::lookup(roots, pci).ok()).and_then(|v| v.netdev);
        for cand in current.iter().chain(std::iter::once(&j.ifname)) {
            if let Some(l) = rtnl::link_by_name(&mut host, cand)? {
                rtnl::configure(&mut host, l.index, None, None, Some(false))
                    .and_then(|_| rtnl::rename(&mut host, l.index, &j.original.name))
                    .map_err(|e| Error::link(format!("rename {cand} back to {}", j.original.name), e))?;
                link = rtnl::link_by_name(&mut host, &j.original.name)?;
                break;
            }
        }
    }
    let Some(l) = link else {
        tracing::warn!(name = %j.original.name, "VF netdev not found on the host or in the pod; nothing to restore");
        return Ok(());
    };
    let mac = if j.mac.is_some() || j.original.mac.is_some() {
        j.original.mac.as_deref().and_then(parse_mac)
    } else {
        None
    };
    let mac = mac.filter(|m| l.mac.as_deref() != Some(&m[..]));
    let mtu = j.original.mtu.filter(|m| l.mtu != Some(*m));
    rtnl::configure(&mut host, l.index, mac.as_ref().map(|m| &m[..]), mtu, Some(j.original.up))
        .map_err(|e| Error::link(format!("restore MAC/MTU/state of {}", j.original.name), e))
}

/// DEL: releases IPAM from the stdin config, undoes the journal, removes it.
/// Succeeds when the netns, the journal or the VF is already gone.
pub fn del(conf: &NetConf, env: &Env, roots: &Roots) -> Result<()> {
    journal::ensure_dir(&conf.state_dir)?;
    let jpath = journal::path(&attachments_dir(&conf.state_dir), &env.container_id, &env.ifname);
    let j = Journal::load(&jpath)?;
    let pci = j.as_ref().and_then(|j| j.pci).or(conf.device);
    let _lock = match pci {
        Some(p) => Some(Lock::take(
            &conf.state_dir,
            &format!("vf-{p}"),
            &format!("VF {p}"),
            lock_wait(VF_LOCK_WAIT),
        )?),
        None => None,
    };
    // Re-read under the lock.
    let j = Journal::load(&jpath)?;
    // IPAM DEL from the stdin config, running while the netdev moves back.
    let pending = match &conf.ipam_type {
        Some(t) => {
            let (plugin, iconf) = ipam::prepare(&conf.raw, &conf.cni_version, t, env, &conf.state_dir)?;
            Some(ipam::spawn(&plugin, "DEL", env, &serde_json::to_vec(&iconf).unwrap_or_default())?)
        }
        None => None,
    };
    let undone = match &j {
        Some(j) => undo(j, roots),
        None => Ok(()),
    };
    let released = pending.map(|p| p.wait().map(|_| ())).unwrap_or(Ok(()));
    undone?;
    released?;
    if let Some(f) = &conf.device_info_file {
        journal::remove(f)?;
    }
    journal::remove(&jpath)
}

/// CHECK: the attachment is as ADD left it.
pub fn check(conf: &NetConf, env: &Env) -> Result<()> {
    let jpath = journal::path(&attachments_dir(&conf.state_dir), &env.container_id, &env.ifname);
    let j = Journal::load(&jpath)?.filter(|j| j.complete).ok_or_else(|| {
        Error::Check(format!("no completed attachment {}/{}", env.container_id, env.ifname))
    })?;
    let pod = Netns::open(&env.netns).map_err(Error::Netns)?;
    let mut podc = rtnl::open_in(&pod)?;
    let l = rtnl::link_by_name(&mut podc, &env.ifname)?
        .ok_or_else(|| Error::Check(format!("{} is missing from the container", env.ifname)))?;
    if let Some(m) = &j.mac {
        let have = l.mac.as_deref().map(fmt_mac).unwrap_or_default();
        if &have != m {
            return Err(Error::Check(format!("{} has MAC {have}, expected {m}", env.ifname)));
        }
    }
    if let Some(m) = j.mtu {
        if l.mtu != Some(m) {
            return Err(Error::Check(format!("{} has MTU {:?}, expected {m}", env.ifname, l.mtu)));
        }
    }
    if !l.up {
        return Err(Error::Check(format!("{} is down", env.ifname)));
    }
    let want = conf.prev_result.as_ref().or(j.result.as_ref());
    if let Some(r) = want {
        let (ips, _) = ipam::parse_result(r)?;
        let have =
            rtnl::addresses(&mut podc, l.index).map_err(|e| Error::link("list addresses in the pod", e))?;
        for ip in ips {
            if !have.contains(&(ip.addr, ip.prefix)) {
                return Err(Error::Check(format!("{} lacks address {}/{}", env.ifname, ip.addr, ip.prefix)));
            }
        }
    }
    if !j.rdma.is_empty() {
        let t = SocketTransport::open_in(&pod, NETLINK_RDMA)
            .map_err(Error::Netns)?
            .map_err(|e| Error::Check(format!("cannot query RDMA devices in the pod: {e}")))?;
        let devs = Client::new(t).rdma_devices().map_err(|e| Error::Check(e.to_string()))?;
        for n in &j.rdma {
            if !devs.iter().any(|d| &d.name == n) {
                return Err(Error::Check(format!("RDMA device {n} is not in the container's netns")));
            }
        }
    }
    if let Some(u) = &j.vf_undo {
        let mut host = rtnl::open_here()?;
        let pf = rtnl::link_by_name(&mut host, &u.pf_netdev)?
            .ok_or_else(|| Error::Check(format!("PF {} not found", u.pf_netdev)))?;
        let st = vfnl::read(&mut host, pf.index, u.vf)
            .map_err(|e| Error::netlink("read VF attributes", e))?
            .ok_or_else(|| Error::Check(format!("{} does not report VF {}", u.pf_netdev, u.vf)))?;
        st.satisfies(&conf.vf).map_err(Error::Check)?;
    }
    Ok(())
}

/// GC: undoes and forgets attachments not in the valid list, then forwards GC
/// to the IPAM plugin (it may hold leases we have no journal for).
pub fn gc(conf: &NetConf, roots: &Roots, env: &Env) -> Result<()> {
    let local = gc_journaled(conf, roots, env);
    let forwarded = match &conf.ipam_type {
        Some(t) => ipam::forward_v11(&conf.raw, t, "GC", env, &conf.state_dir).map(|_| ()),
        None => Ok(()),
    };
    local.and(forwarded)
}

fn gc_journaled(conf: &NetConf, roots: &Roots, env: &Env) -> Result<()> {
    let dir = attachments_dir(&conf.state_dir);
    let valid = conf.valid_attachments.clone().unwrap_or_default();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut first_err = None;
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(j) = Journal::load(&p)? else { continue };
        if valid.iter().any(|a| a.container_id == j.container_id && a.ifname == j.ifname) {
            continue;
        }
        tracing::info!(container = %j.container_id, ifname = %j.ifname, "GC: removing stale attachment");
        let _lock = match j.pci {
            Some(pci) => Some(Lock::take(
                &conf.state_dir,
                &format!("vf-{pci}"),
                &format!("VF {pci}"),
                lock_wait(VF_LOCK_WAIT),
            )?),
            None => None,
        };
        let mut r = undo(&j, roots);
        if r.is_ok() {
            if let (Some(t), Some(c)) = (&j.ipam_type, &j.ipam_conf) {
                let genv = Env {
                    container_id: j.container_id.clone(),
                    ifname: j.ifname.clone(),
                    netns: String::new(),
                    ..env.clone()
                };
                r = ipam::find_plugin(&genv, t).and_then(|p| ipam::del(&p, c, &genv));
            }
        }
        match r {
            Ok(()) => journal::remove(&p)?,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// STATUS: ready, or 50 with the reason.
pub fn status(conf: &NetConf, env: &Env, roots: &Roots) -> Result<()> {
    journal::ensure_dir(&conf.state_dir)
        .map_err(|e| Error::Unavailable(format!("state directory unusable: {e}")))?;
    let probe = conf.state_dir.join(format!(".status-{}", std::process::id()));
    std::fs::write(&probe, b"").and_then(|_| std::fs::remove_file(&probe)).map_err(|e| {
        Error::Unavailable(format!("state directory {} is not writable: {e}", conf.state_dir.display()))
    })?;
    if conf.rdma == RdmaMode::Required {
        match rdma_netns_mode(roots) {
            Some(NetnsMode::Exclusive) => {}
            Some(NetnsMode::Shared) => {
                return Err(Error::Unavailable(
                    "rdma is \"required\" but the RDMA subsystem is in shared netns mode; boot with ib_core netns_mode=0".into(),
                ))
            }
            None => return Err(Error::Unavailable("rdma is \"required\" but there is no RDMA subsystem (ib_core not loaded)".into())),
        }
    }
    if let Some(t) = &conf.ipam_type {
        // The IPAM plugin's own STATUS decides too; 50/51 pass through as it said them.
        match ipam::forward_v11(&conf.raw, t, "STATUS", env, &conf.state_dir) {
            Ok(_) => {}
            Err(e @ Error::Ipam { code: Some(50 | 51), .. }) => return Err(e),
            Err(e) => return Err(Error::Unavailable(e.to_string())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_follow_the_requested_version() {
        let ipam = serde_json::json!({"ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 5}], "dns": {"nameservers": ["1.1.1.1"]}});
        let r = build_result(
            "1.1.0",
            "net1",
            "02:00:00:00:00:01",
            Some(9000),
            "/run/netns/p",
            "0000:3b:00.2",
            Some(&ipam),
        );
        assert_eq!(r["interfaces"][0]["pciID"], "0000:3b:00.2");
        assert_eq!(r["interfaces"][0]["mtu"], 9000);
        assert_eq!(r["ips"][0]["interface"], 0);
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["dns"]["nameservers"][0], "1.1.1.1");
        let r = build_result("1.0.0", "net1", "m", Some(9000), "s", "p", Some(&ipam));
        assert!(r["interfaces"][0].get("pciID").is_none() && r["interfaces"][0].get("mtu").is_none());
        let r = build_result("0.3.1", "net1", "m", None, "s", "p", Some(&ipam));
        assert_eq!(r["ips"][0]["version"], "4");
        assert_eq!(r["cniVersion"], "0.3.1");
    }

    #[test]
    fn step_names_round_trip_through_the_journal_format() {
        for s in Step::ALL {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(j, format!("\"{}\"", s.name()));
            assert_eq!(serde_json::from_str::<Step>(&j).unwrap(), s);
        }
    }
}
