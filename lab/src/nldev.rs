//! RDMA netlink (nldev) against a real Soft-RoCE device through `nic::netlink::nldev`.
//!
//! Order matters: the netns-mode test must run before any other test creates a network namespace
//! (the kernel refuses to switch modes while one exists), so these tests come first in the runner.

use crate::check_eq;
use crate::harness::{Lab, Test};
use crate::util::{ifindex, iproute2};
use anyhow::Context;
use nic::netlink::nldev::{self, Nldev, RdmaDevice};
use nic::netlink::transport::{SocketTransport, NETLINK_RDMA};
use nic::netns::NamedNetns;
use nic::NetnsMode;
use std::time::{Duration, Instant};

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "nldev-list-devices-and-ports", run: list },
        Test { name: "nldev-netns-mode-exclusive-and-back", run: netns_mode },
        Test { name: "nldev-set-netns-fd-on-rxe-eopnotsupp", run: set_netns_eopnotsupp },
        Test { name: "nldev-rdma-ports-api-lists-rxe-port", run: ports_api },
    ]
}

fn client() -> anyhow::Result<Nldev> {
    Nldev::open().context("open NETLINK_RDMA socket")
}

fn rxe(c: &mut Nldev, lab: &Lab) -> anyhow::Result<RdmaDevice> {
    let devs = c.devices()?;
    devs.iter().find(|d| d.name == lab.rxe).cloned().with_context(|| format!("{} not in {devs:?}", lab.rxe))
}

fn set_mode(c: &mut Nldev, mode: NetnsMode) -> Result<(), nic::netlink::transport::NlError> {
    c.set_netns_mode(mode)
}

/// Devices and ports as our codec reads them, checked against sysfs and iproute2's `rdma -j`.
fn list(lab: &Lab) -> anyhow::Result<String> {
    let mut c = client()?;
    let d = rxe(&mut c, lab)?;
    let oracle: serde_json::Value =
        serde_json::from_str(&iproute2("rdma", &["-j", "dev", "show", &lab.rxe])?)?;
    check_eq!("device index (rdma -j dev show)", Some(d.index as u64), oracle[0]["ifindex"].as_u64());
    check_eq!("ports", d.ports, 1);
    check_eq!("protocol", d.protocol.as_deref(), Some("roce"));
    let guid_sysfs = crate::util::read_trim(&format!("/sys/class/infiniband/{}/node_guid", lab.rxe))?;
    let guid = d.node_guid.context("no node GUID")?;
    // nldev carries be64_to_cpu(ib_device.node_guid) (drivers/infiniband/core/nldev.c); sysfs prints
    // the same number as four 16-bit groups.
    let be = guid;
    let ours = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        be >> 48,
        (be >> 32) & 0xffff,
        (be >> 16) & 0xffff,
        be & 0xffff
    );
    check_eq!("node GUID vs sysfs", ours, guid_sysfs);

    // `rdma link show DEV`: PORT_GET dump with DEV_INDEX (the kernel's port dumpit requires it).
    let req = nldev::NldevMessage {
        cmd: nldev::RDMA_NLDEV_CMD_PORT_GET,
        attrs: vec![nldev::NldevAttr::DevIndex(d.index)],
    };
    let ports: Vec<nldev::RdmaPortInfo> = c
        .request("RDMA_NLDEV_CMD_PORT_GET dump dev", req, true)?
        .iter()
        .filter_map(nldev::RdmaPortInfo::from_message)
        .collect();
    let p = ports
        .iter()
        .find(|p| p.dev_index == d.index)
        .with_context(|| format!("no port of {} in {ports:?}", d.name))?;
    check_eq!("port", p.port, 1);
    check_eq!("port dev name", p.dev_name, lab.rxe);
    check_eq!("port state (4 = ACTIVE)", p.state, Some(4));
    check_eq!("phys state (5 = LinkUp)", p.phys_state, Some(5));
    check_eq!("port netdev", p.ndev_name.as_deref(), Some(lab.rxe_netdev.as_str()));
    check_eq!("port netdev ifindex", p.ndev_index, Some(ifindex(&lab.rxe_netdev)?));

    // One device per directory in /sys/class/infiniband.
    let sysfs: usize = std::fs::read_dir("/sys/class/infiniband")?.count();
    check_eq!("device count vs sysfs", c.devices()?.len(), sysfs);
    Ok(format!(
        "{} index {} port 1 ACTIVE/LinkUp netdev {} (ifindex {}), guid {ours}",
        d.name,
        d.index,
        lab.rxe_netdev,
        p.ndev_index.unwrap_or(0)
    ))
}

/// Shared by default; exclusive while no other netns exists; back to shared. With a netns present
/// the kernel refuses the switch (EBUSY).
fn netns_mode(_lab: &Lab) -> anyhow::Result<String> {
    let mut c = client()?;
    check_eq!("initial netns mode", c.netns_mode()?, NetnsMode::Shared);
    set_mode(&mut c, NetnsMode::Exclusive)?;
    let got = c.netns_mode();
    set_mode(&mut c, NetnsMode::Shared)?;
    check_eq!("mode after switching to exclusive", got?, NetnsMode::Exclusive);
    check_eq!("mode after switching back", c.netns_mode()?, NetnsMode::Shared);
    let oracle = iproute2("rdma", &["system", "show", "netns"])?;
    anyhow::ensure!(oracle.contains("shared"), "rdma system show: {oracle}");

    let ns = NamedNetns::create("lab-nldev-busy")?;
    let busy = set_mode(&mut c, NetnsMode::Exclusive);
    drop(ns);
    let e = match busy {
        Ok(()) => {
            set_mode(&mut c, NetnsMode::Shared)?;
            anyhow::bail!("switch to exclusive succeeded while another netns existed");
        }
        Err(e) => e,
    };
    check_eq!("errno with another netns", e.errno(), Some(libc::EBUSY));
    check_eq!("mode after refused switch", c.netns_mode()?, NetnsMode::Shared);
    Ok(format!("shared -> exclusive -> shared; with a netns: {e}"))
}

/// `rdma dev set rxe0 netns X` is refused with EOPNOTSUPP (rxe has no ucontext disassociation), in
/// shared mode and in exclusive mode: the kernel parsed our message (a malformed one would give
/// EINVAL), and the device stays in init_net.
fn set_netns_eopnotsupp(lab: &Lab) -> anyhow::Result<String> {
    let mut c = client()?;
    let d = rxe(&mut c, lab)?;
    let mut seen = Vec::new();
    for mode in [NetnsMode::Shared, NetnsMode::Exclusive] {
        // Exclusive mode can only be entered with no other netns: wait for earlier ones to be freed.
        if mode == NetnsMode::Exclusive {
            let t = Instant::now();
            loop {
                match set_mode(&mut c, mode) {
                    Ok(()) => break,
                    Err(e) if e.errno() == Some(libc::EBUSY) && t.elapsed() < Duration::from_secs(10) => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let ns = NamedNetns::create(&format!("lab-nldev-{mode:?}"))?;
        let fd = ns.open()?;
        let r = c.set_netns(&d, fd.raw_fd() as u32);
        drop(fd);
        drop(ns);
        let still_here = rxe(&mut c, lab);
        if mode == NetnsMode::Exclusive {
            let t = Instant::now();
            loop {
                match set_mode(&mut c, NetnsMode::Shared) {
                    Ok(()) => break,
                    Err(e) if e.errno() == Some(libc::EBUSY) && t.elapsed() < Duration::from_secs(10) => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(anyhow::Error::new(e).context("switch back to shared mode")),
                }
            }
        }
        let e = match r {
            Ok(()) => anyhow::bail!("{mode:?} mode: moving {} into a netns succeeded", d.name),
            Err(e) => e,
        };
        check_eq!(format!("{mode:?} mode: errno"), e.errno(), Some(libc::EOPNOTSUPP));
        check_eq!(format!("{mode:?} mode: device still in init_net"), still_here?.index, d.index);
        seen.push(format!("{mode:?}: {e}"));
    }
    Ok(seen.join("; "))
}

/// Records every datagram the kernel sends, to look at what the client's parser made of it.
struct Tap {
    inner: SocketTransport,
    got: Vec<Vec<u8>>,
}

impl nic::netlink::transport::Transport for Tap {
    fn send(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.send(buf)
    }
    fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let d = self.inner.recv()?;
        self.got.push(d.clone());
        Ok(d)
    }
}

/// The error code an NLMSG_DONE (type 3) carries in its first 4 payload bytes
/// (include/uapi/linux/netlink.h: a dump that fails ends with DONE holding -errno).
fn done_errors(dgrams: &[Vec<u8>]) -> Vec<i32> {
    let mut out = Vec::new();
    for d in dgrams {
        for (_, m) in nic::netlink::transport::split_datagram(d).whole().unwrap_or_default() {
            if m.len() >= 20 && u16::from_ne_bytes([m[4], m[5]]) == 3 {
                out.push(i32::from_ne_bytes([m[16], m[17], m[18], m[19]]));
            }
        }
    }
    out
}

/// `Nldev::ports()`, the API callers use, must list rxe's port (or fail loudly, never return
/// an empty list for a kernel error).
fn ports_api(lab: &Lab) -> anyhow::Result<String> {
    let mut c = Nldev::new(Tap { inner: SocketTransport::open(NETLINK_RDMA)?, got: Vec::new() });
    let d = c.devices()?.into_iter().find(|d| d.name == lab.rxe).context("rxe not listed")?;
    let mut c = Nldev::new(Tap { inner: SocketTransport::open(NETLINK_RDMA)?, got: Vec::new() });
    let ports = c.ports();
    let done = done_errors(&c.transport().got);
    let ports = ports?;
    anyhow::ensure!(
        ports.iter().any(|p| p.dev_index == d.index && p.port == 1),
        "Nldev::ports() = {ports:?}; NLMSG_DONE error codes from the kernel: {done:?} (nonzero = the dump failed)"
    );
    Ok(format!("{} port(s), rxe port 1 present", ports.len()))
}
