//! Devlink parameters against the real kernel: netdevsim registers a devlink instance
//! (`netdevsim/netdevsimN`) with two parameters (drivers/net/netdevsim/dev.c in Debian's 6.1):
//! the generic `max_macs` (u32, driverinit, 32) and its own `test1` (bool, driverinit, true).
//! Our codec reads them, writes `test1` both ways (a false boolean is an absent NLA_FLAG), and
//! the kernel's reply bytes are compared with what our emitter makes of the decoded reply;
//! iproute2's `devlink` is the independent oracle.

use anyhow::Context;
use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use nic::netlink::devlink::{
    param_get, Cmode, DevHandle, Devlink, DevlinkError, DevlinkMessage, ParamReply, ParamType, ParamValue,
};
use nic::netlink::transport::{
    emit, parse_datagram, request_message, SocketTransport, Transport, NETLINK_GENERIC,
};

use crate::check_eq;
use crate::harness::{Lab, Test};
use crate::util::iproute2;

pub fn tests() -> Vec<Test> {
    vec![
        Test { name: "devlink-param-get-netdevsim", run: param_get_round_trip },
        Test { name: "devlink-param-bytes-match-the-kernel", run: reply_bytes },
        Test { name: "devlink-param-set-bool-both-ways", run: set_bool_both_ways },
        Test { name: "devlink-refusals-are-named", run: refusals },
    ]
}

fn nsim(lab: &Lab) -> DevHandle {
    DevHandle { bus: "netdevsim".into(), dev: lab.nsim_dev.clone() }
}

/// `devlink -j dev param show H name N` → (cmode, value) pairs as iproute2 prints them.
fn devlink_cli(h: &DevHandle, name: &str) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let out = iproute2("devlink", &["-j", "dev", "param", "show", &h.to_string(), "name", name])?;
    let v: serde_json::Value = serde_json::from_str(&out).with_context(|| format!("devlink -j: {out}"))?;
    let params = v["param"][h.to_string()].as_array().with_context(|| format!("devlink -j: {out}"))?;
    let p = params.iter().find(|p| p["name"] == name).with_context(|| format!("{name} not in {out}"))?;
    let values = p["values"].as_array().with_context(|| format!("no values in {out}"))?;
    Ok(values
        .iter()
        .map(|v| (v["cmode"].as_str().unwrap_or_default().to_string(), v["value"].clone()))
        .collect())
}

fn json_of(v: &ParamValue) -> serde_json::Value {
    match v {
        ParamValue::U8(x) => (*x).into(),
        ParamValue::U16(x) => (*x).into(),
        ParamValue::U32(x) => (*x).into(),
        ParamValue::String(s) => s.clone().into(),
        ParamValue::Bool(b) => (*b).into(),
    }
}

/// Our decode of a parameter equals iproute2's.
fn same_as_cli(d: &mut Devlink<SocketTransport>, h: &DevHandle, name: &str) -> anyhow::Result<String> {
    let p = d.param_get(h, name)?;
    let ours: Vec<(String, serde_json::Value)> =
        p.values.iter().map(|(c, v)| (c.as_str().to_string(), json_of(v))).collect();
    check_eq!(format!("{h} {name} (ours vs devlink -j)"), ours, devlink_cli(h, name)?);
    Ok(format!("{name}={}", p.values.iter().map(|(c, v)| format!("{v}@{}", c.as_str())).collect::<String>()))
}

fn param_get_round_trip(lab: &Lab) -> anyhow::Result<String> {
    let h = nsim(lab);
    let mut d = Devlink::open()?;
    let max_macs = d.param_get(&h, "max_macs")?;
    check_eq!("max_macs generic", max_macs.generic, true);
    check_eq!("max_macs type", max_macs.kind, ParamType::U32);
    check_eq!("max_macs values", max_macs.values, vec![(Cmode::Driverinit, ParamValue::U32(32))]);
    let test1 = d.param_get(&h, "test1")?;
    check_eq!("test1 generic", test1.generic, false);
    check_eq!("test1 type", test1.kind, ParamType::Bool);
    let a = same_as_cli(&mut d, &h, "max_macs")?;
    let b = same_as_cli(&mut d, &h, "test1")?;
    // The dump has both, under this instance.
    let all = d.params()?;
    let mine: Vec<&str> = all.iter().filter(|r| r.handle == h).map(|r| r.param.name.as_str()).collect();
    anyhow::ensure!(mine.contains(&"max_macs") && mine.contains(&"test1"), "dump of {h}: {mine:?}");
    Ok(format!("family {:#x}; {a} {b}; dump {} params", d.family(), all.len()))
}

/// The kernel's own reply, byte for byte, against our emitter given the decoded reply.
fn reply_bytes(lab: &Lab) -> anyhow::Result<String> {
    let h = nsim(lab);
    let family = Devlink::open()?.family();
    let mut sock = SocketTransport::open(NETLINK_GENERIC)?;
    let mut out = Vec::new();
    for name in ["max_macs", "test1"] {
        sock.send(&emit(&mut request_message(NLM_F_REQUEST | NLM_F_ACK, 7, param_get(family, &h, name))))?;
        let dgram = sock.recv()?;
        let msgs = parse_datagram::<DevlinkMessage>(&dgram).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let first = msgs.first().context("empty datagram")?;
        let NetlinkPayload::InnerMessage(m) = &first.payload else {
            anyhow::bail!("{name}: first message is {:?}", first.payload)
        };
        let decoded = ParamReply::from_message(m).map_err(|e| anyhow::anyhow!(e))?;
        let mut ours = request_message(first.header.flags, 7, decoded.to_message(family));
        ours.header.port_number = first.header.port_number;
        let ours = emit(&mut ours);
        let len = first.header.length as usize;
        check_eq!(
            format!("{name}: kernel reply bytes vs ours"),
            dgram[..len].to_vec(),
            ours[..len.min(ours.len())].to_vec()
        );
        check_eq!(format!("{name}: reply length"), ours.len(), len.next_multiple_of(4));
        // The ACK comes in a datagram of its own.
        let ack = sock.recv()?;
        let ack = parse_datagram::<DevlinkMessage>(&ack).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        anyhow::ensure!(
            matches!(ack.first().map(|m| &m.payload), Some(NetlinkPayload::Error(e)) if e.code.is_none()),
            "{name}: expected the ACK, got {ack:?}"
        );
        out.push(format!("{name} {len} B"));
    }
    Ok(out.join(", "))
}

/// `test1` false then true again (driverinit: the value is stored at once, applied on reload).
fn set_bool_both_ways(lab: &Lab) -> anyhow::Result<String> {
    let h = nsim(lab);
    let mut d = Devlink::open()?;
    let before = d.param_get(&h, "test1")?;
    check_eq!("test1 before", before.value(Cmode::Driverinit), Some(&ParamValue::Bool(true)));
    d.param_set(&h, "test1", &ParamValue::Bool(false), Cmode::Driverinit)?;
    let off = d.param_get(&h, "test1")?;
    check_eq!("test1 after set false", off.value(Cmode::Driverinit), Some(&ParamValue::Bool(false)));
    let cli = devlink_cli(&h, "test1")?;
    check_eq!(
        "devlink shows test1 false",
        cli,
        vec![("driverinit".to_string(), serde_json::Value::Bool(false))]
    );
    d.param_set(&h, "test1", &ParamValue::Bool(true), Cmode::Driverinit)?;
    let on = d.param_get(&h, "test1")?;
    check_eq!("test1 after set true", on.value(Cmode::Driverinit), Some(&ParamValue::Bool(true)));
    // A u32 the other way round.
    d.param_set(&h, "max_macs", &ParamValue::U32(16), Cmode::Driverinit)?;
    let mm = d.param_get(&h, "max_macs")?;
    check_eq!("max_macs after set 16", mm.value(Cmode::Driverinit), Some(&ParamValue::U32(16)));
    d.param_set(&h, "max_macs", &ParamValue::U32(32), Cmode::Driverinit)?;
    Ok("test1 true -> false -> true, max_macs 32 -> 16 -> 32 (devlink agrees)".into())
}

/// What the kernel refuses, and how our errors name it.
fn refusals(lab: &Lab) -> anyhow::Result<String> {
    let h = nsim(lab);
    let mut d = Devlink::open()?;
    let mut out = Vec::new();
    match d.param_get(&h, "enable_roce") {
        Err(e @ DevlinkError::NoParam { .. }) => out.push(format!("no param: {e}")),
        other => anyhow::bail!("enable_roce on netdevsim: expected NoParam, got {other:?}"),
    }
    let gone = DevHandle { bus: "netdevsim".into(), dev: "netdevsim999".into() };
    match d.param_get(&gone, "test1") {
        Err(e @ DevlinkError::NoDevice { .. }) => out.push(format!("no device: {e}")),
        other => anyhow::bail!("{gone}: expected NoDevice, got {other:?}"),
    }
    // test1 has no runtime cmode: EOPNOTSUPP.
    match d.param_set(&h, "test1", &ParamValue::Bool(false), Cmode::Runtime) {
        Err(e @ DevlinkError::Unsupported { .. }) => out.push(format!("runtime: {e}")),
        other => anyhow::bail!("test1 runtime: expected Unsupported, got {other:?}"),
    }
    // The wrong type: EINVAL, and nothing changed.
    match d.param_set(&h, "test1", &ParamValue::U32(0), Cmode::Driverinit) {
        Err(e @ DevlinkError::Kernel { errno: libc::EINVAL, .. }) => out.push(format!("wrong type: {e}")),
        other => anyhow::bail!("test1 as u32: expected EINVAL, got {other:?}"),
    }
    let t = d.param_get(&h, "test1")?;
    check_eq!("test1 unchanged", t.value(Cmode::Driverinit), Some(&ParamValue::Bool(true)));
    Ok(out.join("; "))
}
