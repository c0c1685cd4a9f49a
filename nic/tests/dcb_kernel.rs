// DCB netlink and the ethtool reads against this machine's real kernel, on a
// veth pair in a netns of its own. veth has no dcbnl_ops, so the kernel answers
// RTM_GETDCB with EOPNOTSUPP (net/dcb/dcbnl.c:dcb_doit), or, with CONFIG_DCB
// off, rtnetlink has no handler and answers EOPNOTSUPP too: either way the
// agent must report Unsupported, not fail. Runs as root (CI and these machines are).

use std::collections::BTreeMap;
use std::process::Command;

use nic::netlink::dcb::{self, Dcb, DcbError, DcbMsg, IeeePfc, Priorities};
use nic::netns::NamedNetns;
use nic::roce::{observe, DcbSource, ObserveOpts, Observed};
use nic::{Inventory, Netdev, PciAddr, Pf};

/// A netns holding a veth pair `<tag>a` / `<tag>b`, both up; deleted on drop.
struct VethLab {
    ns: NamedNetns,
    a: String,
}

impl VethLab {
    fn new(tag: &str) -> Self {
        let name = format!("krdma-{tag}-{}", std::process::id());
        let ns = NamedNetns::create(&name).expect("create netns (tests run as root)");
        let (a, b) = (format!("{tag}a"), format!("{tag}b"));
        let ip = |args: &[&str]| {
            let out = Command::new("ip").arg("-n").arg(&name).args(args).output().expect("run ip");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "up"]);
        ip(&["link", "set", &b, "up"]);
        Self { ns, a }
    }

    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.ns.open().expect("open netns").run(f).expect("run in netns")
    }
}

#[test]
fn dcb_get_on_a_veth_is_unsupported_by_the_real_kernel() {
    let lab = VethLab::new("kdg");
    let a = lab.a.clone();
    let (ieee, dcbx) = lab.run(move || {
        let mut s = Dcb::open().expect("NETLINK_ROUTE socket");
        (s.get_ieee(&a), s.get_dcbx(&a))
    });
    for r in [ieee.map(|_| ()), dcbx.map(|_| ())] {
        match r {
            Err(DcbError::Unsupported { errno, ref op, .. }) => {
                assert_eq!(errno, libc::EOPNOTSUPP, "{op}");
                assert!(op.contains("RTM_GETDCB"), "{op}");
            }
            other => panic!("expected Unsupported from the kernel, got {other:?}"),
        }
    }
}

#[test]
fn dcb_get_on_a_missing_interface_is_unsupported() {
    let lab = VethLab::new("kdm");
    let r = lab.run(|| Dcb::open().unwrap().get_ieee("nosuchdev0"));
    match r {
        Err(e @ DcbError::Unsupported { .. }) => assert!(e.is_unsupported()),
        other => panic!("expected Unsupported (ENODEV or EOPNOTSUPP), got {other:?}"),
    }
}

#[test]
fn dcb_set_on_a_veth_is_refused_not_hung() {
    let lab = VethLab::new("kds");
    let a = lab.a.clone();
    let r = lab.run(move || {
        let mut s = Dcb::open().unwrap();
        s.set(
            "RTM_SETDCB DCB_CMD_IEEE_SET (dcb pfc set)",
            &a,
            DcbMsg::set_pfc(
                &a,
                IeeePfc { pfc_cap: 8, pfc_en: Priorities::from_bits(0x08), ..Default::default() },
            ),
        )
    });
    assert!(r.as_ref().is_err_and(|e| e.is_unsupported()), "{r:?}");
}

#[test]
fn rtnlgrp_dcb_subscription_is_accepted_by_the_kernel() {
    assert_eq!(dcb::RTNLGRP_DCB, libc::RTNLGRP_DCB);
    assert_eq!(dcb::RTM_GETDCB, libc::RTM_GETDCB);
    let lab = VethLab::new("kdn");
    lab.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let events = nic::netlink::events::subscribe(&[nic::netlink::events::Group::Dcb], 4);
            events.expect("join RTNLGRP_DCB");
        });
    });
}

fn write(p: &std::path::Path, v: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, v).unwrap();
}

#[test]
fn observe_with_the_real_kernel_reports_unsupported_dcb_pause_and_lldp() {
    let lab = VethLab::new("kdo");
    // A sysfs tree naming the veth as a PF netdev (the real /sys shows the
    // test's own netns, not the lab's).
    let dir = tempfile::tempdir().unwrap();
    let roots = nic::Roots { sysfs: dir.path().join("sys"), dev: dir.path().join("dev") };
    let net = roots.sys(format!("class/net/{}", lab.a));
    write(&net.join("mtu"), "9000\n");
    write(&net.join("operstate"), "up\n");
    write(&net.join("speed"), "10000\n");
    let pci: PciAddr = "0000:3d:00.0".parse().unwrap();
    let inv = Inventory {
        pfs: vec![Pf {
            pci,
            vendor: Some(0x15b3),
            device: Some(0x101d),
            driver: Some("mlx5_core".into()),
            total_vfs: Some(8),
            num_vfs: Some(0),
            numa_node: None,
            netdevs: vec![Netdev {
                name: lab.a.clone(),
                ifindex: None,
                speed_mbps: None,
                operstate: None,
                mtu: None,
                mac: None,
                link_layer: None,
                problems: vec![],
            }],
            rdma: vec![],
            rdma_aux: vec![],
            rdma_protocol: None,
            upstream: vec![],
            vfs: vec![],
            problems: vec![],
        }],
        ..Default::default()
    };
    let r = lab.run(|| observe(&roots, &inv, &DcbSource::Netlink, &ObserveOpts::default()));
    let i = &r.interfaces[0];
    assert_eq!(i.mtu, Observed::Value(9000));
    assert_eq!(i.active_mtu, Observed::Value(4096));
    assert_eq!(i.speed_mbps, Observed::Value(10000));
    for (what, o) in [
        ("dcbx", i.dcbx.as_ref().map(|_| ())),
        ("pfc", i.pfc.as_ref().map(|_| ())),
        ("ets", i.ets.as_ref().map(|_| ())),
    ] {
        assert!(o.is_unsupported(), "{what}: {o:?}");
        assert!(o.reason().unwrap().contains("errno 95"), "{what}: {o:?}");
    }
    assert!(i.dscp_to_priority.is_unsupported());
    assert!(i.trust.is_unsupported(), "{:?}", i.trust);
    // veth has no get_pauseparam and no private flags: real ioctl answers.
    assert!(i.global_pause.is_unsupported(), "{:?}", i.global_pause);
    assert!(i.fw_lldp_agent.is_unsupported(), "{:?}", i.fw_lldp_agent);
    assert_eq!(i.ecn, Observed::Unsupported("no NVIDIA OFED ECN sysfs (upstream mlx5)".into()));
    assert_eq!(i.hw_counters, BTreeMap::new());
    assert!(i.gid_index.is_unknown());
}
