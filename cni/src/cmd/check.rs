//! CHECK (spec 1.1.0): the attachment is as the ADD result (`prevResult`)
//! says, our own records agree, and the IPAM plugin's CHECK passes.

use std::net::IpAddr;

use nic::netlink::link::RouteSocket;
use nic::netlink::vf as vfnl;
use nic::netns::Netns;
use serde_json::{json, Value};

use crate::conf::{fmt_mac, Env, NetConf};
use crate::error::{Error, Result};
use crate::ipam::{self, parse_cidr};
use crate::journal;
use crate::rdma;
use crate::step::Step;

pub fn check(conf: &NetConf, env: &Env) -> Result<()> {
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        Error::config("prevResult", "missing: CHECK compares against the ADD result the runtime passes")
    })?;
    let ours = crate::result::ours_in(prev, env).ok_or_else(|| {
        Error::Check(format!("prevResult lists no interface {} in this sandbox", env.ifname))
    })?;
    let index = prev["interfaces"].as_array().and_then(|a| a.iter().position(|i| std::ptr::eq(i, ours)));
    let pod = Netns::open(&env.netns).map_err(Error::Netns)?;
    let found = journal::find(&conf.state_dir, &env.container_id, &env.ifname)?;
    let netdev =
        found.as_ref().is_none_or(|f| f.journal.steps.iter().any(|s| matches!(s, Step::MoveNetdev(_))));
    // The IPAM plugin checks its side while we check ours.
    let ipam_check = match &conf.ipam {
        Some(i) => {
            let (plugin, mut c) = ipam::prepare(&conf.raw, &conf.cni_version, &i.kind, env, &conf.state_dir)?;
            c["prevResult"] = prev.clone();
            Some(ipam::start(&plugin, "CHECK", env, &c, None))
        }
        None => None,
    };
    let mine = || -> Result<()> {
        if netdev {
            check_netdev(conf, env, &pod, prev, ours, index)?;
        }
        if let Some(f) = &found {
            for s in &f.journal.steps {
                match s {
                    Step::MoveRdma(r) => {
                        let have = rdma::devices_in(&pod)?;
                        if let Some(missing) = r.devices.iter().find(|d| !have.contains(d)) {
                            return Err(Error::Check(format!(
                                "RDMA device {missing} is not in the container's netns"
                            )));
                        }
                    }
                    Step::PfAttrs(p) => {
                        let want = &conf.attach.as_ref().map(|a| a.vf.clone()).unwrap_or_default();
                        let mut host = RouteSocket::open_here()?;
                        let pf = host
                            .link_by_name(&p.pf_netdev)?
                            .ok_or_else(|| Error::Check(format!("PF {} not found", p.pf_netdev)))?;
                        let st = vfnl::read(&mut host, pf.index, p.vf)
                            .map_err(|e| Error::link("read VF attributes", e))?
                            .ok_or_else(|| {
                                Error::Check(format!("{} does not report VF {}", p.pf_netdev, p.vf))
                            })?;
                        st.satisfies(want).map_err(Error::Check)?;
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    };
    let r = mine();
    let delegated = ipam_check.map(|p| p.wait().map(|_| ())).unwrap_or(Ok(()));
    r.and(delegated)
}

fn check_netdev(
    conf: &NetConf,
    env: &Env,
    pod: &Netns,
    prev: &Value,
    ours: &Value,
    index: Option<usize>,
) -> Result<()> {
    let mut ps = RouteSocket::open_in(pod)?;
    let l = ps
        .link_by_name(&env.ifname)?
        .ok_or_else(|| Error::Check(format!("{} is missing from the container", env.ifname)))?;
    if let Some(m) = ours.get("mac").and_then(Value::as_str) {
        let have = l.mac.as_deref().map(fmt_mac).unwrap_or_default();
        if !have.eq_ignore_ascii_case(m) {
            return Err(Error::Check(format!("{} has MAC {have}, the ADD result says {m}", env.ifname)));
        }
    }
    let mtu = ours
        .get("mtu")
        .and_then(Value::as_u64)
        .map(|m| m as u32)
        .or(conf.attach.as_ref().and_then(|a| a.mtu));
    if let Some(m) = mtu {
        if l.mtu != Some(m) {
            return Err(Error::Check(format!("{} has MTU {:?}, expected {m}", env.ifname, l.mtu)));
        }
    }
    if !l.up {
        return Err(Error::Check(format!("{} is down", env.ifname)));
    }
    let have = ps.addresses(l.index).map_err(|e| Error::link("list addresses in the pod", e))?;
    for ip in prev.get("ips").and_then(Value::as_array).into_iter().flatten() {
        if ip.get("interface").and_then(Value::as_u64).map(|i| i as usize) != index {
            continue;
        }
        let a = ip.get("address").and_then(Value::as_str).unwrap_or_default();
        let (addr, prefix) =
            parse_cidr(a).ok_or_else(|| Error::Check(format!("prevResult has a bad address {a:?}")))?;
        if !have.contains(&(addr, prefix)) {
            return Err(Error::Check(format!("{} lacks address {a}", env.ifname)));
        }
    }
    let routes = ps.routes(None).map_err(|e| Error::link("list routes in the pod", e))?;
    for r in prev.get("routes").and_then(Value::as_array).into_iter().flatten() {
        let d = r.get("dst").and_then(Value::as_str).unwrap_or_default();
        let (dst, prefix) =
            parse_cidr(d).ok_or_else(|| Error::Check(format!("prevResult has a bad route {d:?}")))?;
        let gw: Option<IpAddr> = r.get("gw").and_then(Value::as_str).and_then(|g| g.parse().ok());
        if !routes.iter().any(|x| x.dst == dst && x.prefix == prefix && (gw.is_none() || x.gw == gw)) {
            return Err(Error::Check(format!("route {d} {} is missing in the container", json!(r))));
        }
    }
    Ok(())
}
