//! The steps of an attachment, as data: each carries what applying it needs
//! (kept in memory only) and what undoing it needs (written to the journal),
//! with its `apply` and its `undo` beside it.
//!
//! Every undo is idempotent and harmless for a step that never ran, because
//! the journal lists all planned steps before the first one runs: a crash
//! anywhere leaves DEL enough to restore the host.

use std::os::fd::RawFd;
use std::path::PathBuf;

use nic::netlink::link::{Link, LinkChange, LinkError, RouteSocket};
use nic::netlink::vf::{self as vfnl, VfLink, VfSettings, VfVlanSetting};
use nic::netns::{Netns, Spawned};
use nic::vfdev::VfDev;
use nic::{PciAddr, Roots};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conf::{fmt_mac, parse_mac, Env};
use crate::error::{Error, Result};
use crate::vf_record::VfHolder;
use crate::{ipam, rdma};

/// One step of an attachment.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    /// PF-side VF attributes (`ip link set PF vf N ...`).
    PfAttrs(PfAttrs),
    /// An IPAM allocation (the plugin's ADD; undone by its DEL).
    Ipam(IpamLease),
    /// The VF netdev moved into the pod, renamed and configured in one request.
    MoveNetdev(NetdevMove),
    /// RDMA device(s) moved into the pod (nldev SET + NET_NS_FD).
    MoveRdma(RdmaMove),
    /// Our fields merged into the device-info file.
    DeviceInfo(DeviceInfoFile),
    /// DRA mode: what this attachment made of a prepared device, for the
    /// driver to publish in the claim's status.
    ClaimAttachment(ClaimAttachment),
    /// A VF bound to a userspace driver, recorded node-wide as this
    /// attachment's.
    UserspaceVf(UserspaceVf),
}

impl Step {
    /// A short name (logs, the failpoint, migration tests).
    pub fn name(&self) -> &'static str {
        match self {
            Step::PfAttrs(_) => "pf_attrs",
            Step::Ipam(_) => "ipam",
            Step::MoveNetdev(_) => "move_netdev",
            Step::MoveRdma(_) => "move_rdma",
            Step::DeviceInfo(_) => "device_info",
            Step::ClaimAttachment(_) => "claim_attachment",
            Step::UserspaceVf(_) => "userspace_vf",
        }
    }

    /// Undoes this step (the IPAM one is started by `txn::undo` itself, so
    /// that it runs while the netdev moves back).
    pub fn undo(&self, cx: &mut UndoCx) -> Result<()> {
        match self {
            Step::PfAttrs(s) => s.undo(cx),
            Step::Ipam(s) => s.start_undo(cx.env, cx.held).and_then(ipam::Pending::wait).map(|_| ()),
            Step::MoveNetdev(s) => s.undo(cx),
            Step::MoveRdma(s) => s.undo(cx),
            Step::DeviceInfo(s) => s.undo(&cx.env.devinfo_dir),
            Step::ClaimAttachment(s) => s.undo(),
            Step::UserspaceVf(s) => s.undo(),
        }
    }
}

/// What undo runs against: the process's roots, an environment for delegated
/// plugins, the attachment's pod netns (if it still exists), the VF and the
/// VF lock held for it.
pub struct UndoCx<'a> {
    /// Sysfs/dev roots.
    pub roots: &'a Roots,
    /// `CNI_*` for delegated plugins (the attachment's container and interface).
    pub env: &'a Env,
    /// The pod's netns, if it can still be opened.
    pub pod: Option<Netns>,
    /// The VF's PCI address.
    pub pci: Option<PciAddr>,
    /// The VF lock's descriptor, which IPAM plugins inherit ([`ipam::start`]).
    pub held: Option<RawFd>,
    /// The attachment the VF was given to after this one (`container/ifname`,
    /// [`UndoCx::owned_after`]): the VF's PF-side settings and its netdev are
    /// that one's now.
    pub reassigned: Option<String>,
    host: Option<RouteSocket>,
    /// The pod's route socket, being opened on a thread in the pod.
    pod_socket: Option<Spawned<std::result::Result<RouteSocket, LinkError>>>,
}

impl<'a> UndoCx<'a> {
    /// A context for undoing an attachment whose pod netns is at `netns`.
    /// Starts opening a route socket in the pod right away: the netdev's
    /// way home starts there.
    pub fn new(
        roots: &'a Roots,
        env: &'a Env,
        netns: &str,
        pci: Option<PciAddr>,
        held: Option<RawFd>,
    ) -> Self {
        let pod = if netns.is_empty() { None } else { Netns::open(netns).ok() };
        let pod_socket = pod.as_ref().and_then(|p| p.spawn(RouteSocket::open_here).ok());
        UndoCx { roots, env, pod, pci, held, reassigned: None, host: None, pod_socket }
    }

    /// Notes the attachment the VF was given to after this one, if any, when
    /// this one's pod netns is gone (the one way another ADD can have had the
    /// VF meanwhile): `later_owner` tells it from the VF (the journals'
    /// `later_owner`), asked only then, since it reads every journal.
    pub fn owned_after(mut self, later_owner: impl FnOnce(PciAddr) -> Option<String>) -> Self {
        if self.pod.is_none() {
            self.reassigned = self.pci.and_then(later_owner);
        }
        self
    }

    /// The pod's route socket (`None`: no pod netns).
    fn pod_socket(&mut self) -> Result<Option<RouteSocket>> {
        match (self.pod_socket.take(), &self.pod) {
            (Some(s), _) => Ok(Some(s.join().map_err(Error::Netns)??)),
            (None, Some(p)) => Ok(Some(RouteSocket::open_in(p)?)),
            (None, None) => Ok(None),
        }
    }

    /// The route socket in our own netns, opened on first use.
    pub fn host(&mut self) -> Result<&mut RouteSocket> {
        if self.host.is_none() {
            self.host = Some(RouteSocket::open_here()?);
        }
        Ok(self.host.as_mut().expect("just opened"))
    }
}

/// The PF-side VF settings, in a form the journal keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfAttrs {
    /// Administrative MAC.
    pub mac: Option<String>,
    /// `(id, qos, 802.1ad)`.
    pub vlan: Option<(u16, u8, bool)>,
    /// Spoof check.
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    /// `(min, max)` Mb/s.
    pub rate: Option<(u32, u32)>,
    /// `auto|enable|disable`.
    pub link_state: Option<String>,
}

impl From<&VfSettings> for VfAttrs {
    fn from(s: &VfSettings) -> Self {
        VfAttrs {
            mac: s.mac.map(|m| fmt_mac(&m)),
            vlan: s.vlan.map(|v| (v.id, v.qos, v.ad)),
            spoofchk: s.spoofchk,
            trust: s.trust,
            rate: s.rate,
            link_state: s.link_state.map(|l| {
                match l {
                    VfLink::Auto => "auto",
                    VfLink::Enable => "enable",
                    VfLink::Disable => "disable",
                }
                .to_string()
            }),
        }
    }
}

impl VfAttrs {
    /// Back to netlink settings.
    pub fn settings(&self) -> VfSettings {
        VfSettings {
            mac: self.mac.as_deref().and_then(parse_mac),
            vlan: self.vlan.map(|(id, qos, ad)| VfVlanSetting { id, qos, ad }),
            spoofchk: self.spoofchk,
            trust: self.trust,
            rate: self.rate,
            link_state: self.link_state.as_deref().and_then(|s| match s {
                "auto" => Some(VfLink::Auto),
                "enable" => Some(VfLink::Enable),
                "disable" => Some(VfLink::Disable),
                _ => None,
            }),
        }
    }
}

/// PF-side VF attributes: `ip link set PF vf N ...`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PfAttrs {
    /// The PF's netdev.
    pub pf_netdev: String,
    /// The VF's index on it.
    pub vf: u32,
    /// The values the settings replaced (only the fields ADD sets).
    pub restore: VfAttrs,
    /// What ADD sets.
    #[serde(skip)]
    pub set: VfSettings,
}

impl PfAttrs {
    /// A step that only restores (migrated journals).
    pub fn restoring(pf_netdev: &str, vf: u32, restore: VfAttrs) -> Self {
        PfAttrs { pf_netdev: pf_netdev.to_string(), vf, restore, set: VfSettings::default() }
    }

    fn pf(&self, host: &mut RouteSocket) -> Result<Option<Link>> {
        Ok(host.link_by_name(&self.pf_netdev)?)
    }

    /// `ip link set PF vf N <set>`.
    pub fn apply(&self, host: &mut RouteSocket) -> Result<()> {
        let pf = self.pf(host)?.ok_or_else(|| Error::Device {
            pci: self.pf_netdev.clone(),
            why: "PF netdev not found to set VF attributes".into(),
        })?;
        vfnl::apply(host, pf.index, self.vf, &self.set)
            .map_err(|e| Error::link(format!("set VF {} attributes on {}", self.vf, self.pf_netdev), e))
    }

    /// `ip link set PF vf N <restore>`. A PF that is gone took its VFs'
    /// settings with it: nothing to restore.
    pub fn undo(&self, cx: &mut UndoCx) -> Result<()> {
        if let Some(owner) = &cx.reassigned {
            tracing::info!(pf = %self.pf_netdev, vf = self.vf, owner = %owner, "the VF was given to another attachment since: its PF-side settings are that one's, left as they are");
            return Ok(());
        }
        let host = cx.host()?;
        let Some(pf) = self.pf(host)? else {
            tracing::warn!(pf = %self.pf_netdev, "PF netdev gone; its VF settings went with it");
            return Ok(());
        };
        vfnl::apply(host, pf.index, self.vf, &self.restore.settings())
            .map_err(|e| Error::link(format!("restore VF {} attributes on {}", self.vf, self.pf_netdev), e))
    }
}

/// An IPAM allocation: the plugin and the configuration its DEL needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamLease {
    /// `ipam.type`.
    pub plugin: String,
    /// What the plugin is given: the network's `cniVersion` (negotiated),
    /// `name`, `ipam`, `args` and `runtimeConfig`, nothing else.
    pub conf: Value,
}

impl IpamLease {
    /// A lease of `plugin` with its delegate configuration.
    pub fn new(plugin: String, conf: Value) -> Self {
        IpamLease { plugin, conf }
    }

    /// Starts the plugin's ADD (it runs while the kernel moves the netdev),
    /// holding the VF lock `held` until it ends.
    pub fn apply(&self, env: &Env, held: Option<RawFd>) -> Result<ipam::Pending> {
        let p = ipam::find_plugin(env, &self.plugin)?;
        Ok(ipam::start(&p, "ADD", env, &self.conf, held))
    }

    /// Starts the plugin's DEL.
    pub fn start_undo(&self, env: &Env, held: Option<RawFd>) -> Result<ipam::Pending> {
        let p = ipam::find_plugin(env, &self.plugin)?;
        Ok(ipam::start(&p, "DEL", env, &self.conf, held))
    }
}

/// A link's state as it was, to put back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkState {
    /// MAC to restore (`None`: ADD did not change it).
    pub mac: Option<String>,
    /// MTU to restore.
    pub mtu: Option<u32>,
    /// Whether it was up.
    pub up: bool,
}

/// The VF netdev moved into the pod under `CNI_IFNAME` with its MAC, MTU and
/// state, in one RTM_SETLINK each way.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetdevMove {
    /// Its name on the host.
    pub host_name: String,
    pub pod_name: String,
    /// The MAC it has in the pod (the one set, else its own), to recognise
    /// a virtual link, which has no bus device to tell it by.
    #[serde(default)]
    pub pod_mac: Option<String>,
    /// Its ifindex on the host.
    #[serde(skip)]
    pub host_index: u32,
    /// What to put back.
    pub original: LinkState,
    /// MAC to set in the pod.
    #[serde(skip)]
    pub mac: Option<[u8; 6]>,
    /// MTU to set in the pod.
    #[serde(skip)]
    pub mtu: Option<u32>,
}

impl NetdevMove {
    /// A step that only restores (migrated journals).
    pub fn restoring(host_name: &str, pod_name: &str, pod_mac: Option<String>, original: LinkState) -> Self {
        NetdevMove {
            host_name: host_name.to_string(),
            pod_name: pod_name.to_string(),
            pod_mac,
            host_index: 0,
            original,
            mac: None,
            mtu: None,
        }
    }

    /// `ip link set HOST netns POD name IFNAME [address MAC] [mtu MTU] up`, one request.
    pub fn apply(&self, host: &mut RouteSocket, pod: &Netns) -> Result<()> {
        let change = LinkChange {
            netns_fd: Some(pod.raw_fd()),
            name: Some(self.pod_name.clone()),
            mac: self.mac.map(|m| m.to_vec()),
            mtu: self.mtu,
            up: Some(true),
        };
        host.set_link(self.host_index, &change).map_err(|e| {
            if e.errno() == Some(libc::EEXIST) {
                Error::Env {
                    var: "CNI_IFNAME",
                    why: format!("{} already exists in the container", self.pod_name),
                }
            } else {
                Error::link(format!("move {} into the pod as {}", self.host_name, self.pod_name), e)
            }
        })
    }

    /// Whether `l` is the VF this step moved: its bus device is the VF, or,
    /// for a virtual stand-in without one, it has the MAC we gave it (ifindex
    /// is no help: the kernel renumbers a link whose index is taken in the
    /// pod). Unknown (a migrated journal): assumed, as the old DEL did.
    pub fn is_ours(&self, l: &Link, pci: Option<PciAddr>) -> bool {
        match (&l.parent, pci) {
            (Some(p), Some(pci)) => *p == pci.to_string(),
            (Some(_), None) => true,
            (None, _) => match (&self.pod_mac, &l.mac) {
                (Some(want), Some(have)) => want.eq_ignore_ascii_case(&fmt_mac(have)),
                (Some(_), None) => false,
                (None, _) => true,
            },
        }
    }

    /// Whether `l`, on the host, is this VF: [`Self::is_ours`], or a virtual
    /// stand-in already given its original MAC back by an earlier undo.
    fn is_ours_home(&self, l: &Link, pci: Option<PciAddr>) -> bool {
        self.is_ours(l, pci)
            || (l.parent.is_none()
                && matches!((&self.original.mac, &l.mac), (Some(want), Some(have)) if want.eq_ignore_ascii_case(&fmt_mac(have))))
    }

    /// The restoring part of a change, for a link now in state `l`.
    fn restore(&self, l: &Link) -> LinkChange {
        let mac =
            self.original.mac.as_deref().and_then(parse_mac).filter(|m| l.mac.as_deref() != Some(&m[..]));
        LinkChange {
            mac: mac.map(|m| m.to_vec()),
            mtu: self.original.mtu.filter(|m| l.mtu != Some(*m)),
            up: (l.up != self.original.up).then_some(self.original.up),
            ..LinkChange::default()
        }
    }

    /// Brings the VF home under its host name with its MAC, MTU and state:
    /// from the pod in one request, or, when the pod is gone and the kernel
    /// returned the VF on its own (under its pod name, sriov-cni #126), by
    /// renaming it on the host.
    pub fn undo(&self, cx: &mut UndoCx) -> Result<()> {
        if let Some(mut ps) = cx.pod_socket()? {
            // Under its host name if the request failed between the move and
            // the rename (the kernel renames during the move only when the
            // old name is taken in the pod).
            for name in [&self.pod_name, &self.host_name] {
                if let Some(l) = ps.link_by_name(name)? {
                    if self.is_ours(&l, cx.pci) {
                        return self.move_home(&mut ps, &l, cx.pci);
                    }
                    tracing::warn!(name = %name, "the pod's link of that name is not our VF; leaving it");
                }
            }
        }
        if let Some(owner) = &cx.reassigned {
            // Not in this attachment's pod: wherever it is, it is another's.
            tracing::info!(name = %self.host_name, owner = %owner, "the VF was given to another attachment since: its netdev is left as it is");
            return Ok(());
        }
        let (pci, roots) = (cx.pci, cx.roots);
        let host = cx.host()?;
        // Its host name may have been taken meanwhile by a link that is not
        // ours: that one is never renamed, brought down or reconfigured.
        let named = host.link_by_name(&self.host_name)?;
        match &named {
            Some(l) if self.is_ours_home(l, pci) => return self.restore_on_host(host, l),
            Some(_) => {
                tracing::warn!(name = %self.host_name, "another link has the VF's host name; leaving it alone");
            }
            None => {}
        }
        // The kernel's name for it: sysfs shows it, or it kept its pod name.
        let current = pci.and_then(|pci| VfDev::lookup(roots, pci).ok()).and_then(|v| v.netdev);
        for cand in current.iter().chain(std::iter::once(&self.pod_name)).filter(|c| **c != self.host_name) {
            let Some(l) = host.link_by_name(cand)?.filter(|l| self.is_ours(l, pci)) else { continue };
            if named.is_some() {
                tracing::warn!(name = %cand, "the VF stays under this name: its host name is taken");
                return self.restore_on_host(host, &l);
            }
            if l.up {
                let down = LinkChange { up: Some(false), ..LinkChange::default() };
                host.set_link(l.index, &down).map_err(|e| Error::link(format!("bring {cand} down"), e))?;
            }
            let rename = LinkChange { name: Some(self.host_name.clone()), ..LinkChange::default() };
            host.set_link(l.index, &rename)
                .map_err(|e| Error::link(format!("rename {cand} back to {}", self.host_name), e))?;
            return match host.link_by_name(&self.host_name)? {
                Some(l) => self.restore_on_host(host, &l),
                None => Ok(()),
            };
        }
        tracing::warn!(name = %self.host_name, "VF netdev not found on the host or in the pod; nothing to restore");
        Ok(())
    }

    /// Puts back MAC, MTU and state of `l`, our VF on the host.
    fn restore_on_host(&self, host: &mut RouteSocket, l: &Link) -> Result<()> {
        let change = self.restore(l);
        if change.is_empty() {
            return Ok(());
        }
        host.set_link(l.index, &change)
            .map_err(|e| Error::link(format!("restore MAC/MTU/state of {}", l.name), e))
    }

    /// `ip -n POD link set IFNAME netns HOST name HOSTNAME [address] [mtu] [up|down]`.
    ///
    /// The kernel moves the link under its pod name and renames it on the
    /// host afterwards (in the same request), unless the pod name is taken
    /// there, in which case it renames during the move. So `EEXIST` (the host
    /// name is taken) may come with the link already home under its pod name.
    fn move_home(&self, pod: &mut RouteSocket, l: &Link, pci: Option<PciAddr>) -> Result<()> {
        let here = Netns::current().map_err(Error::Netns)?;
        let mut change = self.restore(l);
        change.netns_fd = Some(here.raw_fd());
        change.name = Some(self.host_name.clone());
        // The move itself takes the link down (`__dev_change_net_namespace`
        // closes it): its state is set after the move, in the same request.
        change.up = Some(self.original.up);
        match pod.set_link(l.index, &change) {
            Ok(()) => return Ok(()),
            Err(e) if e.errno() == Some(libc::EEXIST) => {}
            Err(e) => {
                return Err(Error::link(
                    format!("move {} back to the host as {}", self.pod_name, self.host_name),
                    e,
                ))
            }
        }
        tracing::warn!(name = %self.host_name, "the host name is taken; the VF stays under another name");
        if let Some(still) = pod.link_by_name(&self.pod_name)?.filter(|x| self.is_ours(x, pci)) {
            // Both names are taken on the host: use the kernel's own fallback.
            change.name = Some(format!("dev{}", still.index));
            return pod
                .set_link(still.index, &change)
                .map_err(|e| Error::link(format!("move {} back to the host", self.pod_name), e));
        }
        let mut host = RouteSocket::open_here()?;
        match host.link_by_name(&self.pod_name)?.filter(|x| self.is_ours(x, pci)) {
            Some(h) => {
                let rest = self.restore(&h);
                if rest.is_empty() {
                    return Ok(());
                }
                host.set_link(h.index, &rest)
                    .map_err(|e| Error::link(format!("restore MAC/MTU/state of {}", self.pod_name), e))
            }
            None => Ok(()),
        }
    }
}

/// RDMA devices moved into the pod.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RdmaMove {
    /// Their names.
    pub devices: Vec<String>,
}

impl RdmaMove {
    /// `rdma dev set DEV netns POD` for each.
    pub fn apply(&self, pod: &Netns) -> Result<()> {
        rdma::move_devices(&self.devices, pod, None)
    }

    /// Moves them back from the pod; a pod netns that is gone already
    /// returned them (the kernel does so on netns exit).
    pub fn undo(&self, cx: &mut UndoCx) -> Result<()> {
        match &cx.pod {
            Some(p) => {
                let here = Netns::current().map_err(Error::Netns)?;
                rdma::move_devices(&self.devices, &here, Some(p))
            }
            None => Ok(()),
        }
    }
}

/// The device-info file we added our fields to (device-info-spec 1.1.0).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceInfoFile {
    /// The file (`runtimeConfig.CNIDeviceInfoFile`).
    pub file: PathBuf,
    /// What we add.
    #[serde(skip)]
    pub info: nic::devinfo::DeviceInfo,
}

impl DeviceInfoFile {
    /// A step that only removes (migrated journals).
    pub fn removing(file: PathBuf) -> Self {
        DeviceInfoFile { file, info: nic::devinfo::DeviceInfo::default() }
    }

    /// Merges our fields, keeping the device plugin's, confined to the
    /// file's directory (the parse confined the path to the device-info
    /// directory; [`nic::devinfo::merge_into_confined`]).
    pub fn apply(&self) -> Result<()> {
        let (dir, name) = match (self.file.parent(), self.file.file_name().and_then(|n| n.to_str())) {
            (Some(d), Some(n)) => (d, n),
            _ => return Err(Error::config("runtimeConfig.CNIDeviceInfoFile", "names no file")),
        };
        nic::devinfo::merge_into_confined(dir, name, &self.info).map_err(|e| Error::io(&e.path, e.source))
    }

    /// Removes the file (Multus made it for this attachment) and any temp
    /// file a killed ADD left for it, if it is directly inside `dir`, the
    /// device-info directory: a journal an earlier release wrote may name a
    /// file anywhere a network configuration said, which stays (logged).
    pub fn undo(&self, dir: &std::path::Path) -> Result<()> {
        match nic::devinfo::confined_name(dir, &self.file) {
            Ok(name) => nic::devinfo::remove_confined(dir, &name).map_err(|e| Error::io(&e.path, e.source)),
            Err(why) => {
                tracing::error!(file = %self.file.display(), "not removing the device-info file: {why}");
                Ok(())
            }
        }
    }
}

/// The attachment file of a DRA-prepared device (`nic::prepared`): written
/// once the interface has its addresses, removed by DEL.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimAttachment {
    /// The DRA driver's prepared directory.
    pub dir: PathBuf,
    pub claim_uid: String,
    /// The device of the claim.
    pub device: String,
    /// The rest of the file (addresses are added from the IPAM result).
    #[serde(skip)]
    pub attachment: Option<nic::prepared::Attachment>,
}

impl ClaimAttachment {
    /// Writes the file with the addresses of `ipam_result` (CIDR, as the result has them).
    pub fn apply(&self, ipam_result: Option<&Value>) -> Result<()> {
        let Some(a) = &self.attachment else { return Ok(()) };
        let mut a = a.clone();
        a.ips = ipam_result
            .and_then(|r| r.get("ips"))
            .and_then(Value::as_array)
            .map(|ips| ips.iter().filter_map(|i| i.get("address")?.as_str().map(String::from)).collect())
            .unwrap_or_default();
        nic::prepared::write_attachment(&self.dir, &a).map(|_| ()).map_err(prepared_err)
    }

    /// Removes the file (gone already is fine).
    pub fn undo(&self) -> Result<()> {
        nic::prepared::remove_attachment(&self.dir, &self.claim_uid, &self.device).map_err(prepared_err)
    }
}

/// A VF bound to a userspace driver, given to this attachment: its
/// node-wide record ([`crate::vf_record`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserspaceVf {
    /// The record.
    pub record: PathBuf,
    /// What it says.
    pub holder: VfHolder,
}

impl UserspaceVf {
    /// Writes the record.
    pub fn apply(&self) -> Result<()> {
        self.holder.write(&self.record)
    }

    /// Removes the record if it is still this attachment's.
    pub fn undo(&self) -> Result<()> {
        self.holder.release(&self.record)
    }
}

fn prepared_err(e: nic::prepared::PreparedError) -> Error {
    match e {
        nic::prepared::PreparedError::File(f) => Error::io(&f.path, f.source),
        other => Error::Claim(nic::error_chain(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_keeps_only_what_undo_needs() {
        let s = Step::PfAttrs(PfAttrs {
            pf_netdev: "ens1f0".into(),
            vf: 3,
            restore: VfAttrs { trust: Some(false), ..VfAttrs::default() },
            set: VfSettings { trust: Some(true), ..VfSettings::default() },
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"pfAttrs": {"pfNetdev": "ens1f0", "vf": 3, "restore": {"mac": null, "vlan": null, "spoofchk": null, "trust": false, "rate": null, "linkState": null}}})
        );
        let back: Step = serde_json::from_value(v).unwrap();
        assert_eq!(back.name(), "pf_attrs");
        let m = NetdevMove {
            mac: Some([2, 0, 0, 0, 0, 9]),
            mtu: Some(9000),
            host_index: 7,
            ..NetdevMove::restoring("v0", "net1", None, LinkState::default())
        };
        let v = serde_json::to_value(Step::MoveNetdev(m)).unwrap();
        assert!(["mac", "mtu", "hostIndex"].iter().all(|k| v["moveNetdev"].get(k).is_none()), "{v}");
    }

    #[test]
    fn vf_attrs_round_trip() {
        let s = VfSettings {
            mac: Some([2, 0, 0, 0, 0, 1]),
            vlan: Some(VfVlanSetting { id: 5, qos: 1, ad: true }),
            spoofchk: Some(false),
            trust: Some(true),
            rate: Some((1, 2)),
            link_state: Some(VfLink::Disable),
        };
        assert_eq!(VfAttrs::from(&s).settings(), s);
    }

    #[test]
    fn a_link_is_ours_by_its_bus_device_or_else_by_the_mac_we_gave_it() {
        let m = NetdevMove::restoring("v0", "net1", Some("02:00:00:00:00:07".into()), LinkState::default());
        let pci: PciAddr = "0000:3b:00.2".parse().unwrap();
        let link = |mac: u8, parent: Option<&str>| Link {
            index: 3,
            name: "net1".into(),
            mac: Some(vec![2, 0, 0, 0, 0, mac]),
            mtu: None,
            up: true,
            parent: parent.map(String::from),
        };
        assert!(m.is_ours(&link(9, Some("0000:3b:00.2")), Some(pci)));
        assert!(!m.is_ours(&link(7, Some("0000:3b:00.3")), Some(pci)), "another VF");
        assert!(m.is_ours(&link(7, None), Some(pci)));
        assert!(!m.is_ours(&link(8, None), Some(pci)), "a virtual link the pod had before");
    }
}
