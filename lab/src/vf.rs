//! PF-side VF attributes on a real netdevsim PF through `nic::netlink::vf`: set, read back with our
//! parser, compare, restore. iproute2's `ip -j link show` is read as an independent oracle so that a
//! symmetric bug (encoder and parser wrong the same way) still fails.

use crate::check_eq;
use crate::harness::{Lab, Test};
use crate::util::{ifindex, iproute2, mac_str};
use anyhow::Context;
use nic::netlink::link::RouteSocket;
use nic::netlink::vf::{self, VfLink, VfSettings, VfState, VfVlanSetting};

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "vf-attrs-set-readback-restore", run: set_readback_restore },
        Test { name: "vf-attrs-each-vf-index", run: each_vf_index },
        Test { name: "vf-out-of-range-clean-error", run: out_of_range },
    ]
}

fn client() -> anyhow::Result<RouteSocket> {
    RouteSocket::open_here().context("open NETLINK_ROUTE socket")
}

fn read_vf(c: &mut RouteSocket, pf: u32, n: u32) -> anyhow::Result<VfState> {
    vf::read(c, pf, n)?.with_context(|| format!("PF ifindex {pf} reports no VF {n}"))
}

/// What `want` should leave in the kernel, as our parser would report it.
fn expected(vf_index: u32, want: &VfSettings) -> VfState {
    let (min, max) = want.rate.unwrap_or((0, 0));
    VfState {
        vf: vf_index,
        mac: want.mac.unwrap_or_default(),
        vlan: want.vlan.unwrap_or_default(),
        spoofchk: want.spoofchk,
        trust: want.trust,
        min_tx_rate: min,
        max_tx_rate: max,
        link_state: want.link_state,
    }
}

/// The VF as `ip -j -d link show PF` reports it (iproute2's own parser).
fn oracle(pf: &str, n: u32) -> anyhow::Result<serde_json::Value> {
    let out = iproute2("ip", &["-j", "link", "show", "dev", pf])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("ip -j link show output")?;
    v.get(0)
        .and_then(|l| l.get("vfinfo_list"))
        .and_then(|l| l.as_array())
        .and_then(|l| l.iter().find(|e| e.get("vf").and_then(|x| x.as_u64()) == Some(n as u64)))
        .cloned()
        .with_context(|| format!("ip -j link show {pf}: no vf {n} in {out}"))
}

fn check_oracle(pf: &str, n: u32, want: &VfState) -> anyhow::Result<()> {
    let o = oracle(pf, n)?;
    check_eq!(format!("ip: vf {n} address"), o["address"].as_str().unwrap_or(""), mac_str(&want.mac));
    if want.vlan.id != 0 {
        let list = o["vlan_list"].as_array().cloned().unwrap_or_default();
        let first = list.first().cloned().unwrap_or_default();
        check_eq!(format!("ip: vf {n} vlan"), first["vlan"].as_u64(), Some(want.vlan.id as u64));
        check_eq!(format!("ip: vf {n} qos"), first["qos"].as_u64().unwrap_or(0), want.vlan.qos as u64);
        let proto = if want.vlan.ad { "802.1ad" } else { "802.1Q" };
        check_eq!(format!("ip: vf {n} vlan protocol"), first["protocol"].as_str().unwrap_or("802.1Q"), proto);
    }
    check_eq!(
        format!("ip: vf {n} max_tx_rate"),
        o["rate"]["max_tx"].as_u64().unwrap_or(0),
        want.max_tx_rate as u64
    );
    check_eq!(
        format!("ip: vf {n} min_tx_rate"),
        o["rate"]["min_tx"].as_u64().unwrap_or(0),
        want.min_tx_rate as u64
    );
    if let Some(s) = want.spoofchk {
        check_eq!(format!("ip: vf {n} spoofchk"), o["spoofchk"].as_bool(), Some(s));
    }
    if let Some(t) = want.trust {
        check_eq!(format!("ip: vf {n} trust"), o["trust"].as_bool(), Some(t));
    }
    if let Some(l) = want.link_state {
        let s = match l {
            VfLink::Auto => "auto",
            VfLink::Enable => "enable",
            VfLink::Disable => "disable",
        };
        check_eq!(format!("ip: vf {n} link_state"), o["link_state"].as_str(), Some(s));
    }
    Ok(())
}

/// Every attribute on VF 1: set, read back (ours and iproute2's view), restore, read back again.
fn set_readback_restore(lab: &Lab) -> anyhow::Result<String> {
    let pf = ifindex(&lab.pf)?;
    let mut c = client()?;
    let n = 1;
    let before = read_vf(&mut c, pf, n)?;
    let want = VfSettings {
        mac: Some([0x02, 0x5e, 0x10, 0x00, 0x00, 0x01]),
        vlan: Some(VfVlanSetting { id: 1234, qos: 5, ad: true }),
        spoofchk: Some(!before.spoofchk.unwrap_or(true)),
        trust: Some(!before.trust.unwrap_or(false)),
        rate: Some((100, 2500)),
        link_state: Some(VfLink::Disable),
    };
    vf::apply(&mut c, pf, n, &want)?;
    let got = read_vf(&mut c, pf, n)?;
    got.satisfies(&want).map_err(anyhow::Error::msg)?;
    check_eq!("VF state after set", got, expected(n, &want));
    check_oracle(&lab.pf, n, &got)?;

    let undo = want.undo_from(&before);
    vf::apply(&mut c, pf, n, &undo)?;
    let after = read_vf(&mut c, pf, n)?;
    check_eq!("VF state after restore", after, before);
    check_oracle(&lab.pf, n, &after)?;
    Ok(format!(
        "vf {n}: mac {} vlan 1234 qos 5 802.1ad spoofchk/trust flipped rate 100/2500 state disable; restored",
        mac_str(&want.mac.unwrap_or_default())
    ))
}

/// Distinct settings on every VF at once: the VF index is encoded in every struct, and a request for one
/// VF must not touch the others.
fn each_vf_index(lab: &Lab) -> anyhow::Result<String> {
    let pf = ifindex(&lab.pf)?;
    let mut c = client()?;
    let before: Vec<VfState> = (0..lab.vfs).map(|n| read_vf(&mut c, pf, n)).collect::<anyhow::Result<_>>()?;
    let states = [VfLink::Enable, VfLink::Disable, VfLink::Auto];
    let wants: Vec<VfSettings> = (0..lab.vfs)
        .map(|n| VfSettings {
            mac: Some([0x02, 0, 0, 0, 0x10, n as u8 + 1]),
            vlan: Some(VfVlanSetting { id: 10 + n as u16, qos: (n % 8) as u8, ad: n % 2 == 0 }),
            spoofchk: Some(n % 2 == 1),
            trust: Some(n % 2 == 0),
            rate: Some((0, 1000 * (n + 1))),
            link_state: Some(states[n as usize % states.len()]),
        })
        .collect();
    let result = (|| -> anyhow::Result<()> {
        for (n, w) in wants.iter().enumerate() {
            vf::apply(&mut c, pf, n as u32, w)?;
        }
        for (n, w) in wants.iter().enumerate() {
            let got = read_vf(&mut c, pf, n as u32)?;
            check_eq!(format!("VF {n}"), got, expected(n as u32, w));
            check_oracle(&lab.pf, n as u32, &got)?;
        }
        Ok(())
    })();
    // Restore whatever happened above, then report.
    for (n, w) in wants.iter().enumerate() {
        vf::apply(&mut c, pf, n as u32, &w.undo_from(&before[n]))?;
    }
    result?;
    for (n, b) in before.iter().enumerate() {
        check_eq!(format!("VF {n} after restore"), read_vf(&mut c, pf, n as u32)?, *b);
    }
    Ok(format!("{} VFs set to distinct values, read back, restored", lab.vfs))
}

/// VF index == num_vfs: the kernel refuses (netdevsim: EINVAL), our error names the operation, and no VF
/// changed.
fn out_of_range(lab: &Lab) -> anyhow::Result<String> {
    let pf = ifindex(&lab.pf)?;
    let mut c = client()?;
    let before: Vec<VfState> = (0..lab.vfs).map(|n| read_vf(&mut c, pf, n)).collect::<anyhow::Result<_>>()?;
    let bad = lab.vfs;
    let want = VfSettings { mac: Some([0x02, 0, 0, 0, 0xee, 0xee]), ..Default::default() };
    let err = match vf::apply(&mut c, pf, bad, &want) {
        Ok(()) => anyhow::bail!("setting VF {bad} of {} succeeded", lab.vfs),
        Err(e) => e,
    };
    check_eq!("errno", err.errno(), Some(libc::EINVAL));
    let msg = err.to_string();
    anyhow::ensure!(msg.contains(&format!("vf {bad}")), "error does not name the VF: {msg}");
    check_eq!("read of VF past the end", vf::read(&mut c, pf, bad)?, None);
    for (n, b) in before.iter().enumerate() {
        check_eq!(format!("VF {n} unchanged"), read_vf(&mut c, pf, n as u32)?, *b);
    }
    Ok(format!("VF {bad}: {msg}"))
}
