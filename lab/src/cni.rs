//! The real `kube-rdma-cni` executable, ADD/CHECK/DEL, against the real kernel.
//!
//! netdevsim VFs have no netdevs and no PCI functions, so a small simulated sysfs tree (passed with
//! `KUBE_RDMA_SYSFS_ROOT`) ties a VF PCI address to the real netdevsim PF (`physfn`/`virtfnN`, the PF's
//! `net/<real PF netdev>`) and gives the VF a veth end as its netdev and `rxe0` as its RDMA device.
//! The PF-side attributes therefore land on the real netdevsim VF, the netdev move is a real netns
//! move, and the RDMA move meets the real rxe refusal.

use crate::check_eq;
use crate::harness::{Lab, Test};
use crate::util::{ifindex, iproute2};
use anyhow::Context;
use nic::netlink::link::RouteSocket;
use nic::netlink::nldev::Nldev;
use nic::netlink::vf::{self, VfLink, VfState, VfVlanSetting};
use nic::netns::NamedNetns;
use nic::NetnsMode;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "cni-add-check-del-pf-attrs-rdma-auto-shared", run: add_check_del },
        Test { name: "cni-rdma-required-shared-mode-clear-error", run: required_shared },
        Test { name: "cni-rdma-required-eopnotsupp-rolls-back", run: required_exclusive_rollback },
        Test { name: "cni-userspace-vf-pf-attrs-no-move", run: userspace_vf },
    ]
}

const PF_PCI: &str = "0000:3b:00.0";
/// VF index used (netdevsim VF 2), and its simulated PCI address.
const VF: u32 = 2;
const VF_PCI: &str = "0000:3b:01.2";
const VF_NETDEV: &str = "labvf2";
const POD_IF: &str = "net1";

/// The VF a userspace-driver test uses (netdevsim VF 1, "bound to vfio-pci").
const USERSPACE_VF: u32 = 1;

/// Everything one CNI test sets up; removed on drop.
struct Fixture {
    root: PathBuf,
    state: PathBuf,
    pod: Option<NamedNetns>,
    pf_index: u32,
    /// The VF under test and its simulated PCI address.
    vf: u32,
    vf_pci: String,
    before: VfState,
}

impl Fixture {
    fn new(lab: &Lab, tag: &str, with_rdma: bool) -> anyhow::Result<Fixture> {
        Self::build(lab, tag, with_rdma, false)
    }

    /// VF 1 without a netdev, its driver link naming vfio-pci (sriov-cni's "DPDK mode").
    fn userspace(lab: &Lab, tag: &str) -> anyhow::Result<Fixture> {
        Self::build(lab, tag, false, true)
    }

    fn build(lab: &Lab, tag: &str, with_rdma: bool, userspace: bool) -> anyhow::Result<Fixture> {
        let root = PathBuf::from(format!("/tmp/lab-cni-{tag}/sys"));
        let state = PathBuf::from(format!("/tmp/lab-cni-{tag}/state"));
        let _ = std::fs::remove_dir_all(root.parent().unwrap_or(&root));
        let devs = root.join("bus/pci/devices");
        let pf = devs.join(PF_PCI);
        std::fs::create_dir_all(pf.join("net").join(&lab.pf))?;
        std::fs::write(pf.join("sriov_numvfs"), format!("{}\n", lab.vfs))?;
        for n in 0..lab.vfs {
            let addr = format!("0000:3b:01.{n}");
            let d = devs.join(&addr);
            std::fs::create_dir_all(&d)?;
            std::os::unix::fs::symlink(format!("../{PF_PCI}"), d.join("physfn"))?;
            std::os::unix::fs::symlink(format!("../{addr}"), pf.join(format!("virtfn{n}")))?;
        }
        let vfdir = devs.join(VF_PCI);
        std::fs::create_dir_all(vfdir.join("net").join(VF_NETDEV))?;
        if with_rdma {
            std::fs::create_dir_all(vfdir.join("infiniband").join(&lab.rxe))?;
        }
        let (vf_n, vf_pci) = if userspace {
            let pci = format!("0000:3b:01.{USERSPACE_VF}");
            std::os::unix::fs::symlink("../../../bus/pci/drivers/vfio-pci", devs.join(&pci).join("driver"))?;
            (USERSPACE_VF, pci)
        } else {
            (VF, VF_PCI.to_string())
        };
        // The RDMA netns mode as the kernel exposes it (module parameter of ib_core).
        std::os::unix::fs::symlink("/sys/module", root.join("module"))?;
        let _ = iproute2("ip", &["link", "del", VF_NETDEV]);
        iproute2("ip", &["link", "add", VF_NETDEV, "type", "veth", "peer", "name", "labvf2p"])?;
        iproute2("ip", &["link", "set", "labvf2p", "up"])?;
        let pf_index = ifindex(&lab.pf)?;
        let mut c = RouteSocket::open_here()?;
        let before = vf::read(&mut c, pf_index, vf_n)?.with_context(|| format!("PF reports no VF {vf_n}"))?;
        Ok(Fixture { root, state, pod: None, pf_index, vf: vf_n, vf_pci, before })
    }

    fn pod(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        let ns = NamedNetns::create(name)?;
        let p = ns.path().to_path_buf();
        self.pod = Some(ns);
        Ok(p)
    }

    fn vf_now(&self) -> anyhow::Result<VfState> {
        let mut c = RouteSocket::open_here()?;
        vf::read(&mut c, self.pf_index, self.vf)?.with_context(|| format!("PF reports no VF {}", self.vf))
    }

    /// Runs the plugin; returns (exit status, stdout JSON or Null, stderr).
    fn cni(&self, lab: &Lab, cmd: &str, netns: &Path, conf: &Value) -> anyhow::Result<(i32, Value, String)> {
        let mut child = Command::new(&lab.cni)
            .env_clear()
            .env("PATH", "/bin:/usr/sbin")
            .env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", "labcontainer1")
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", POD_IF)
            .env("CNI_PATH", "/lab/bin")
            .env("KUBE_RDMA_SYSFS_ROOT", &self.root)
            // The fixture's stateDir is under /tmp/lab-cni-<tag>, not /var/lib/cni.
            .env("KUBE_RDMA_CNI_STATE_ROOT", self.state.parent().unwrap_or(&self.state))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {}", lab.cni))?;
        child.stdin.take().context("stdin")?.write_all(conf.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = if stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&stdout).with_context(|| format!("{cmd}: stdout is not JSON: {stdout:?}"))?
        };
        Ok((out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned()))
    }

    fn conf(&self, rdma: &str) -> Value {
        json!({
            "cniVersion": "1.1.0",
            "name": "lab-rdma",
            "type": "kube-rdma-cni",
            "deviceID": self.vf_pci,
            "vlan": 3001,
            "vlanQoS": 4,
            "vlanProto": "802.1ad",
            "spoofchk": "off",
            "trust": "on",
            "min_tx_rate": 100,
            "max_tx_rate": 4000,
            "link_state": "enable",
            "mac": "02:00:00:aa:bb:02",
            "rdma": rdma,
            "stateDir": self.state,
        })
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = iproute2("ip", &["link", "del", VF_NETDEV]);
        let _ = iproute2("ip", &["link", "del", "labvf2p"]);
        self.pod.take();
        if let Ok(mut c) = RouteSocket::open_here() {
            let _ = vf::apply(&mut c, self.pf_index, self.vf, &self.want_undo());
        }
        if let Some(p) = self.root.parent() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

impl Fixture {
    fn want_undo(&self) -> vf::VfSettings {
        let all = vf::VfSettings {
            mac: Some([0; 6]),
            vlan: Some(VfVlanSetting::default()),
            spoofchk: Some(true),
            trust: Some(true),
            rate: Some((0, 0)),
            link_state: Some(VfLink::Auto),
        };
        all.undo_from(&self.before)
    }
}

fn links_in(ns: Option<&str>) -> anyhow::Result<Vec<String>> {
    let out = match ns {
        Some(n) => iproute2("ip", &["-n", n, "-j", "link", "show"])?,
        None => iproute2("ip", &["-j", "link", "show"])?,
    };
    let v: Value = serde_json::from_str(&out)?;
    Ok(v.as_array()
        .map(|a| a.iter().filter_map(|l| l["ifname"].as_str().map(String::from)).collect())
        .unwrap_or_default())
}

fn rxe_in_init_net(lab: &Lab) -> anyhow::Result<bool> {
    let mut c = Nldev::open()?;
    Ok(c.devices()?.iter().any(|d| d.name == lab.rxe))
}

fn set_rdma_mode(mode: NetnsMode) -> anyhow::Result<()> {
    let mut c = Nldev::open()?;
    // The kernel refuses while another netns exists; earlier tests' namespaces are freed asynchronously.
    let t = Instant::now();
    loop {
        match c.set_netns_mode(mode) {
            Ok(_) => return Ok(()),
            Err(e) if e.errno() == Some(libc::EBUSY) && t.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("set RDMA netns mode {mode:?}"))),
        }
    }
}

/// ADD applies the PF-side attributes to the real netdevsim VF and moves the VF netdev into the pod;
/// `rdma: auto` in shared mode skips the RDMA move and succeeds; CHECK passes; DEL restores the VF
/// attributes and brings the netdev home under its name; a second DEL succeeds.
fn add_check_del(lab: &Lab) -> anyhow::Result<String> {
    let mut f = Fixture::new(lab, "auto", true)?;
    let netns = f.pod("lab-cni-auto")?;
    let conf = f.conf("auto");
    let (rc, out, err) = f.cni(lab, "ADD", &netns, &conf)?;
    anyhow::ensure!(rc == 0, "ADD exit {rc}: {out} {}", err.trim());
    let iface = out["interfaces"].as_array().and_then(|a| a.iter().find(|i| i["name"] == POD_IF)).cloned();
    let iface = iface.with_context(|| format!("ADD result has no interface {POD_IF}: {out}"))?;
    check_eq!("result pciID", iface["pciID"].as_str(), Some(VF_PCI));
    check_eq!("result mac", iface["mac"].as_str(), Some("02:00:00:aa:bb:02"));
    check_eq!("result sandbox", iface["sandbox"].as_str().map(PathBuf::from), Some(netns.clone()));
    anyhow::ensure!(links_in(Some("lab-cni-auto"))?.contains(&POD_IF.to_string()), "{POD_IF} not in the pod");
    anyhow::ensure!(!links_in(None)?.contains(&VF_NETDEV.to_string()), "{VF_NETDEV} still on the host");
    // `mac` is the VF's administrative MAC too (sriov-cni), and the netdev's in the pod.
    let pod_mac = iproute2("ip", &["-n", "lab-cni-auto", "-j", "link", "show", "dev", POD_IF])?;
    anyhow::ensure!(pod_mac.contains("02:00:00:aa:bb:02"), "netdev MAC in the pod: {pod_mac}");
    let got = f.vf_now()?;
    let want = VfState {
        vf: VF,
        mac: [0x02, 0, 0, 0xaa, 0xbb, 0x02],
        vlan: VfVlanSetting { id: 3001, qos: 4, ad: true },
        spoofchk: Some(false),
        trust: Some(true),
        min_tx_rate: 100,
        max_tx_rate: 4000,
        link_state: Some(VfLink::Enable),
    };
    check_eq!("VF 2 after ADD (kernel)", got, want);
    anyhow::ensure!(rxe_in_init_net(lab)?, "{} left init_net in shared mode", lab.rxe);

    let mut check = conf.clone();
    check["prevResult"] = out.clone();
    let (rc, out, err) = f.cni(lab, "CHECK", &netns, &check)?;
    anyhow::ensure!(rc == 0, "CHECK exit {rc}: {out} {}", err.trim());

    let (rc, out, err) = f.cni(lab, "DEL", &netns, &conf)?;
    anyhow::ensure!(rc == 0, "DEL exit {rc}: {out} {}", err.trim());
    anyhow::ensure!(
        links_in(None)?.contains(&VF_NETDEV.to_string()),
        "{VF_NETDEV} not back on the host after DEL"
    );
    anyhow::ensure!(
        !links_in(Some("lab-cni-auto"))?.contains(&POD_IF.to_string()),
        "{POD_IF} still in the pod"
    );
    check_eq!("VF 2 after DEL (kernel)", f.vf_now()?, f.before);
    let (rc, out, err) = f.cni(lab, "DEL", &netns, &conf)?;
    anyhow::ensure!(rc == 0, "second DEL exit {rc}: {out} {}", err.trim());
    Ok(format!("ADD: mac 02:00:00:aa:bb:02 vlan 3001 qos 4 802.1ad spoofchk off trust on rate 100/4000 enable on {} VF {VF}, {VF_NETDEV} -> pod {POD_IF}, rxe stays (shared); CHECK ok; DEL restored", lab.pf))
}

/// `rdma: required` while the subsystem is shared: a clear error before anything is touched.
fn required_shared(lab: &Lab) -> anyhow::Result<String> {
    let mut f = Fixture::new(lab, "reqshared", true)?;
    let netns = f.pod("lab-cni-reqshared")?;
    let (rc, out, _) = f.cni(lab, "ADD", &netns, &f.conf("required"))?;
    anyhow::ensure!(rc != 0, "ADD with rdma required in shared mode succeeded: {out}");
    let msg = format!("{} {}", out["msg"].as_str().unwrap_or(""), out["details"].as_str().unwrap_or(""));
    anyhow::ensure!(msg.contains("shared"), "error does not name the shared netns mode: {out}");
    anyhow::ensure!(out["code"].as_u64().is_some(), "error JSON without code: {out}");
    check_eq!("VF 2 untouched", f.vf_now()?, f.before);
    anyhow::ensure!(links_in(None)?.contains(&VF_NETDEV.to_string()), "{VF_NETDEV} left the host");
    Ok(format!("code {}: {}", out["code"], out["msg"].as_str().unwrap_or("")))
}

/// Exclusive mode, `rdma: required`: the plugin moves the netdev, then asks the kernel to move rxe,
/// which refuses (EOPNOTSUPP). The error is clear and the netdev move and PF attributes are rolled back.
fn required_exclusive_rollback(lab: &Lab) -> anyhow::Result<String> {
    set_rdma_mode(NetnsMode::Exclusive)?;
    let res = (|| -> anyhow::Result<String> {
        let mut f = Fixture::new(lab, "reqexcl", true)?;
        let netns = f.pod("lab-cni-reqexcl")?;
        let (rc, out, err) = f.cni(lab, "ADD", &netns, &f.conf("required"))?;
        anyhow::ensure!(rc != 0, "ADD with rdma required on rxe succeeded: {out}");
        let msg = out.to_string();
        anyhow::ensure!(
            msg.contains("Operation not supported")
                || msg.contains("EOPNOTSUPP")
                || msg.contains("os error 95"),
            "error does not carry the kernel's EOPNOTSUPP: {out}; stderr: {}",
            err.trim()
        );
        anyhow::ensure!(
            links_in(None)?.contains(&VF_NETDEV.to_string()),
            "{VF_NETDEV} not rolled back to the host"
        );
        anyhow::ensure!(
            !links_in(Some("lab-cni-reqexcl"))?.contains(&POD_IF.to_string()),
            "{POD_IF} left in the pod"
        );
        check_eq!("VF 2 after rollback", f.vf_now()?, f.before);
        anyhow::ensure!(rxe_in_init_net(lab)?, "{} not in init_net", lab.rxe);
        let journals: Vec<_> =
            walk(&f.state).into_iter().filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
        anyhow::ensure!(journals.is_empty(), "journal left after a clean rollback: {journals:?}");
        Ok(format!("code {}: {}", out["code"], out["msg"].as_str().unwrap_or("")))
    })();
    // Back to shared for whoever runs next (waits for the pod netns to be freed).
    let back = set_rdma_mode(NetnsMode::Shared);
    let r = res?;
    back?;
    Ok(r)
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A VF bound to a userspace driver (vfio-pci): ADD sets the PF-side attributes on the real netdevsim VF,
/// moves nothing, and reports the interface with the configured MAC (sriov-cni's "DPDK mode"); CHECK
/// verifies the attributes; DEL restores them.
fn userspace_vf(lab: &Lab) -> anyhow::Result<String> {
    let mut f = Fixture::userspace(lab, "dpdk")?;
    let netns = f.pod("lab-cni-dpdk")?;
    let host_before = links_in(None)?;
    let conf = f.conf("auto");
    let (rc, out, err) = f.cni(lab, "ADD", &netns, &conf)?;
    anyhow::ensure!(rc == 0, "ADD exit {rc}: {out} {}", err.trim());
    let iface = &out["interfaces"][0];
    check_eq!("result name", iface["name"].as_str(), Some(POD_IF));
    check_eq!("result pciID", iface["pciID"].as_str(), Some(f.vf_pci.as_str()));
    check_eq!("result mac", iface["mac"].as_str(), Some("02:00:00:aa:bb:02"));
    check_eq!(
        "links in the pod",
        links_in(Some("lab-cni-dpdk"))?.into_iter().filter(|l| l != "lo").count(),
        0
    );
    check_eq!("host links", links_in(None)?, host_before);
    let got = f.vf_now()?;
    check_eq!("VF 1 vlan", got.vlan, VfVlanSetting { id: 3001, qos: 4, ad: true });
    check_eq!("VF 1 admin MAC", got.mac, [0x02, 0, 0, 0xaa, 0xbb, 0x02]);
    check_eq!("VF 1 trust", got.trust, Some(true));
    let mut check = conf.clone();
    check["prevResult"] = out.clone();
    let (rc, out2, err) = f.cni(lab, "CHECK", &netns, &check)?;
    anyhow::ensure!(rc == 0, "CHECK exit {rc}: {out2} {}", err.trim());
    let (rc, out2, err) = f.cni(lab, "DEL", &netns, &conf)?;
    anyhow::ensure!(rc == 0, "DEL exit {rc}: {out2} {}", err.trim());
    check_eq!("VF 1 after DEL (kernel)", f.vf_now()?, f.before);
    Ok(format!(
        "VF {USERSPACE_VF} (vfio-pci): PF-side attributes set and restored, nothing moved, mac in the result"
    ))
}
