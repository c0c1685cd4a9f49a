//! DCB netlink against the real kernel: no software device implements dcbnl_rtnl_ops, so the kernel
//! answers EOPNOTSUPP, which our reader must report as `Unsupported` (a check then says
//! "unsupported", not "fail").

use crate::harness::{Lab, Test};
use nic::netlink::dcb::Dcb;
use nic::roce::{DcbSource, IfaceKind, ObserveOpts, Observed};
use nic::Roots;

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "dcb-ieee-get-eopnotsupp-is-unsupported", run: ieee_get_unsupported },
        Test { name: "dcb-roce-observe-unsupported-not-fail", run: observe_unsupported },
    ]
}

/// `dcb ieee show dev X` on netdevsim, veth, dummy and virtio-net.
fn ieee_get_unsupported(lab: &Lab) -> anyhow::Result<String> {
    let mut sock = Dcb::open()?;
    let mut names = vec![lab.pf.clone(), lab.rxe_netdev.clone(), "dummy0".to_string()];
    // virtio-net: the netdev whose device is on the PCI bus, if QEMU gave us one.
    if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let drv = std::fs::read_link(e.path().join("device/driver")).ok();
            if drv.and_then(|d| d.file_name().map(|f| f.to_string_lossy().into_owned())).as_deref()
                == Some("virtio_net")
            {
                names.push(n);
            }
        }
    }
    let mut out = Vec::new();
    for n in &names {
        match sock.get_ieee(n) {
            Ok(s) => anyhow::bail!("{n}: IEEE_GET answered {s:?}; expected EOPNOTSUPP"),
            Err(e) if e.is_unsupported() => out.push(n.clone()),
            Err(e) => anyhow::bail!("{n}: expected Unsupported, got {e}"),
        }
    }
    // A netdev that does not exist is also "unsupported" (ENODEV), not a transport failure.
    match sock.get_ieee("lab-nosuchdev") {
        Err(e) if e.is_unsupported() => out.push("lab-nosuchdev(ENODEV)".into()),
        other => anyhow::bail!("missing netdev: expected Unsupported, got {other:?}"),
    }
    Ok(format!("Unsupported on {}", out.join(", ")))
}

/// The agent's reader (`nic::roce::observe` over `nic::discover`) on the rxe netdev.
fn observe_unsupported(lab: &Lab) -> anyhow::Result<String> {
    let roots = Roots { sysfs: "/sys".into(), dev: "/dev".into() };
    let inv = nic::discover(&roots);
    let node = nic::roce::observe(&roots, &inv, &DcbSource::Netlink, &ObserveOpts::default());
    let i = node.interface(&lab.rxe_netdev).ok_or_else(|| {
        anyhow::anyhow!(
            "{} not observed; interfaces: {:?}",
            lab.rxe_netdev,
            node.interfaces.iter().map(|i| &i.netdev).collect::<Vec<_>>()
        )
    })?;
    anyhow::ensure!(i.kind == IfaceKind::Hca, "{} kind {:?}", i.netdev, i.kind);
    fn unsupported<T: std::fmt::Debug>(what: &str, o: &Observed<T>) -> anyhow::Result<()> {
        anyhow::ensure!(o.is_unsupported(), "{what}: expected Unsupported, got {o:?}");
        Ok(())
    }
    unsupported("pfc", &i.pfc)?;
    unsupported("ets", &i.ets)?;
    unsupported("dcbx", &i.dcbx)?;
    unsupported("dscp_to_priority", &i.dscp_to_priority)?;
    // The values that do exist on rxe are read, not given up on.
    anyhow::ensure!(i.mtu.is_value(), "mtu: {:?}", i.mtu);
    anyhow::ensure!(
        i.port_state.value().map(String::as_str) == Some("ACTIVE"),
        "port_state: {:?}",
        i.port_state
    );
    Ok(format!(
        "{}: pfc/ets/dcbx/app Unsupported ({}); mtu {:?}",
        i.netdev,
        i.pfc.reason().unwrap_or(""),
        i.mtu.value()
    ))
}
