//! `nic::netlink::link` against the real kernel: veth links in private
//! network namespaces (root; the tests create and delete their own).

use std::process::Command;

use nic::netlink::link::{LinkChange, Route, RouteSocket};
use nic::netns::NamedNetns;

fn ip(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip").arg("-n").arg(ns).args(args).output().expect("run ip");
    assert!(out.status.success(), "ip -n {ns} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn netns(tag: &str) -> NamedNetns {
    NamedNetns::create(&format!("nic-lk-{tag}-{}", std::process::id())).unwrap()
}

#[test]
fn move_rename_mac_mtu_and_up_in_one_request_cannot_clash_and_come_back() {
    let (a, b) = (netns("a1"), netns("b1"));
    ip(a.name(), &["link", "add", "lkv0", "type", "veth", "peer", "name", "lkv0p"]);
    // The target already has a link named like ours: only a rename done as
    // part of the move avoids the clash.
    ip(b.name(), &["link", "add", "lkv0", "type", "veth", "peer", "name", "other"]);
    let mut sa = RouteSocket::open_in(&a.open().unwrap()).unwrap();
    let mut sb = RouteSocket::open_in(&b.open().unwrap()).unwrap();
    let l = sa.link_by_name("lkv0").unwrap().unwrap();
    let (bns, ans) = (b.open().unwrap(), a.open().unwrap());
    let there = LinkChange {
        netns_fd: Some(bns.raw_fd()),
        name: Some("net1".into()),
        mac: Some(vec![2, 0, 0, 0, 0x11, 0x22]),
        mtu: Some(1400),
        up: Some(true),
    };
    sa.set_link(l.index, &there).unwrap();
    assert_eq!(sa.link_by_name("lkv0").unwrap(), None);
    let moved = sb.link_by_name("net1").unwrap().expect("moved and renamed");
    assert_eq!(moved.mac.as_deref(), Some(&[2, 0, 0, 0, 0x11, 0x22][..]));
    assert_eq!((moved.mtu, moved.up), (Some(1400), true));
    assert!(sb.link_by_name("lkv0").unwrap().is_some(), "the target's own link is untouched");
    assert_eq!(moved.parent, None, "a veth has no bus device");
    let back = LinkChange {
        netns_fd: Some(ans.raw_fd()),
        name: Some("lkv0".into()),
        up: Some(false),
        ..LinkChange::default()
    };
    sb.set_link(moved.index, &back).unwrap();
    let home = sa.link_by_name("lkv0").unwrap().expect("home");
    assert!(!home.up);
    assert!(sa.links().unwrap().iter().any(|l| l.name == "lkv0p"));
}

#[test]
fn refusals_carry_the_errno_and_the_kernels_explanation() {
    let a = netns("a2");
    ip(a.name(), &["link", "add", "lkv1", "type", "veth", "peer", "name", "lkv1p"]);
    let mut s = RouteSocket::open_in(&a.open().unwrap()).unwrap();
    assert_eq!(s.link_by_name("nosuch0").unwrap(), None, "ENODEV is no link, not an error");
    let l = s.link_by_name("lkv1").unwrap().unwrap();
    let e = s.set_link(l.index, &LinkChange { mtu: Some(10), ..LinkChange::default() }).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL));
    let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(chain.contains("configure link ifindex"), "{chain}");
    // The kernel's extended ACK (net/core/dev.c, dev_validate_mtu).
    assert!(chain.contains("mtu"), "no extended ACK text: {chain}");
    let e =
        s.set_link(l.index, &LinkChange { name: Some("lkv1p".into()), ..LinkChange::default() }).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST));
}

#[test]
fn addresses_and_routes_are_added_and_read_back() {
    let a = netns("a3");
    ip(a.name(), &["link", "add", "lkv2", "type", "veth", "peer", "name", "lkv2p"]);
    ip(a.name(), &["link", "set", "lkv2", "up"]);
    let mut s = RouteSocket::open_in(&a.open().unwrap()).unwrap();
    let l = s.link_by_name("lkv2").unwrap().unwrap();
    s.add_address(l.index, "10.66.0.2".parse().unwrap(), 24).unwrap();
    s.add_address(l.index, "fd66::2".parse().unwrap(), 64).unwrap();
    let have = s.addresses(l.index).unwrap();
    assert!(have.contains(&("10.66.0.2".parse().unwrap(), 24)), "{have:?}");
    assert!(have.contains(&("fd66::2".parse().unwrap(), 64)), "{have:?}");
    let e = s.add_address(l.index, "10.66.0.2".parse().unwrap(), 24).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST));
    let r = Route { dst: "10.67.0.0".parse().unwrap(), prefix: 16, gw: Some("10.66.0.1".parse().unwrap()) };
    s.add_route(l.index, &r).unwrap();
    let default =
        Route { dst: "0.0.0.0".parse().unwrap(), prefix: 0, gw: Some("10.66.0.1".parse().unwrap()) };
    s.add_route(l.index, &default).unwrap();
    let routes = s.routes(Some(l.index)).unwrap();
    assert!(routes.contains(&r) && routes.contains(&default), "{routes:?}");
    assert!(ip(a.name(), &["route", "show"]).contains("10.67.0.0/16 via 10.66.0.1 dev lkv2"));
    assert_eq!(s.add_route(l.index, &r).unwrap_err().errno(), Some(libc::EEXIST));
}

/// Regression (issue 22, defect 1): `ip route add` semantics (NLM_F_EXCL)
/// refused a second VF's route to the same destination, and a default route
/// while eth0 had one. Routes go in as the reference plugins' `RouteAddEcmp`
/// does: beside an existing route out of another link, in both families.
#[test]
fn a_route_to_a_destination_another_link_already_reaches_is_added_beside_it() {
    let a = netns("a4");
    let mut idx = Vec::new();
    for (n, v4, v6) in [("lkv3", "10.68.0.2/24", "fd68::2/64"), ("lkv4", "10.68.0.3/24", "fd68::3/64")] {
        ip(a.name(), &["link", "add", n, "type", "veth", "peer", "name", &format!("{n}p")]);
        ip(a.name(), &["link", "set", n, "up"]);
        ip(a.name(), &["addr", "add", v4, "dev", n]);
        ip(a.name(), &["addr", "add", v6, "dev", n, "nodad"]);
    }
    let mut s = RouteSocket::open_in(&a.open().unwrap()).unwrap();
    for n in ["lkv3", "lkv4"] {
        idx.push(s.link_by_name(n).unwrap().unwrap().index);
    }
    let routes = [
        Route { dst: "0.0.0.0".parse().unwrap(), prefix: 0, gw: Some("10.68.0.1".parse().unwrap()) },
        Route { dst: "10.69.0.0".parse().unwrap(), prefix: 16, gw: None },
        Route { dst: "::".parse().unwrap(), prefix: 0, gw: Some("fd68::1".parse().unwrap()) },
    ];
    for i in &idx {
        for r in &routes {
            s.add_route(*i, r).unwrap_or_else(|e| panic!("{r:?} via ifindex {i}: {e}"));
        }
    }
    let v4 = ip(a.name(), &["route", "show"]);
    for n in ["lkv3", "lkv4"] {
        assert!(v4.contains(&format!("default via 10.68.0.1 dev {n}")), "{v4}");
        assert!(v4.contains(&format!("10.69.0.0/16 dev {n}")), "{v4}");
    }
    let v6 = ip(a.name(), &["-6", "route", "show", "default"]);
    assert!(v6.contains("dev lkv3") && v6.contains("dev lkv4"), "ECMP siblings: {v6}");
    // Only an identical route is refused.
    assert_eq!(s.add_route(idx[1], &routes[0]).unwrap_err().errno(), Some(libc::EEXIST));
}
