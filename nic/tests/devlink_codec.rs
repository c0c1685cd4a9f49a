//! Byte fixtures of the devlink parameter codec.
//!
//! Source of the bytes: the uapi header include/uapi/linux/devlink.h (Debian
//! linux-libc-dev 6.1.192: DEVLINK_CMD_PARAM_GET 38, PARAM_SET 39,
//! DEVLINK_ATTR_BUS_NAME 1, DEV_NAME 2, PARAM 80, PARAM_NAME 81, PARAM_GENERIC
//! 82, PARAM_TYPE 83, PARAM_VALUES_LIST 84, PARAM_VALUE 85, PARAM_VALUE_DATA 86,
//! PARAM_VALUE_CMODE 87; cmode runtime 0, driverinit 1), the reply layout of
//! `devlink_nl_param_fill` / `devlink_nl_param_value_fill_one` in Linux 6.1
//! (net/devlink/leftover.c: nests without NLA_F_NESTED, CMODE before DATA, a
//! true bool as a zero-length DATA, a false one without DATA), the parameters of
//! ice (`enable_roce`/`enable_iwarp`, generic, bool, runtime only:
//! ice_devlink.c) and netdevsim (`max_macs` generic u32 driverinit = 32,
//! `test1` bool driverinit = true: drivers/net/netdevsim/dev.c), and the SET
//! attribute order of iproute2's devlink (`cmd_dev_param_set`). x86 is
//! little-endian: integers below are written low byte first.
#![cfg(target_endian = "little")]

use netlink_packet_core::NetlinkPayload;
use nic::netlink::devlink::{
    param_get, param_set, recorded, Cmode, DevHandle, Devlink, DevlinkAttr, DevlinkError, DevlinkMessage,
    Param, ParamReply, ParamType, ParamValue,
};
use nic::netlink::transport::{emit, parse_datagram, request_message, Recorded};

/// The devlink family id these fixtures use (the kernel gives one out at boot).
const FAMILY: u16 = 0x14;

fn handle() -> DevHandle {
    DevHandle::pci("0000:17:00.0".parse().unwrap())
}

/// `devlink dev param show pci/0000:17:00.0 name enable_roce`, seq `seq`.
#[rustfmt::skip]
fn get_enable_roce(seq: u8) -> Vec<u8> {
    vec![
        0x40, 0x00, 0x00, 0x00,                         // nlmsg_len 64
        0x14, 0x00,                                     // nlmsg_type: the devlink family
        0x05, 0x00,                                     // NLM_F_REQUEST | NLM_F_ACK
        seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // seq, pid 0
        0x26, 0x01, 0x00, 0x00,                         // genlmsghdr: PARAM_GET (38), version 1
        0x08, 0x00, 0x01, 0x00, b'p', b'c', b'i', 0x00, // BUS_NAME "pci"
        0x11, 0x00, 0x02, 0x00,                         // DEV_NAME, len 17
        b'0', b'0', b'0', b'0', b':', b'1', b'7', b':', b'0', b'0', b'.', b'0', 0x00, 0x00, 0x00, 0x00,
        0x10, 0x00, 0x51, 0x00,                         // PARAM_NAME, len 16
        b'e', b'n', b'a', b'b', b'l', b'e', b'_', b'r', b'o', b'c', b'e', 0x00,
    ]
}

/// ice's answer: `enable_roce` is generic, a bool, runtime only, true.
#[rustfmt::skip]
fn enable_roce_true(seq: u8) -> Vec<u8> {
    vec![
        0x64, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, // nlmsg_len 100, the family, no flags
        seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x26, 0x01, 0x00, 0x00,                         // PARAM_GET, version 1
        0x08, 0x00, 0x01, 0x00, b'p', b'c', b'i', 0x00, // BUS_NAME
        0x11, 0x00, 0x02, 0x00,                         // DEV_NAME
        b'0', b'0', b'0', b'0', b':', b'1', b'7', b':', b'0', b'0', b'.', b'0', 0x00, 0x00, 0x00, 0x00,
        0x34, 0x00, 0x50, 0x00,                         // PARAM, len 52 (no NLA_F_NESTED)
        0x10, 0x00, 0x51, 0x00,                         //   PARAM_NAME "enable_roce"
        b'e', b'n', b'a', b'b', b'l', b'e', b'_', b'r', b'o', b'c', b'e', 0x00,
        0x04, 0x00, 0x52, 0x00,                         //   PARAM_GENERIC (flag)
        0x05, 0x00, 0x53, 0x00, 0x06, 0x00, 0x00, 0x00, //   PARAM_TYPE NLA_FLAG (6) + 3 pad
        0x14, 0x00, 0x54, 0x00,                         //   PARAM_VALUES_LIST, len 20
        0x10, 0x00, 0x55, 0x00,                         //     PARAM_VALUE, len 16
        0x05, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00, //       PARAM_VALUE_CMODE runtime (0) + pad
        0x04, 0x00, 0x56, 0x00,                         //       PARAM_VALUE_DATA: present = true
    ]
}

/// ice's answer for `enable_iwarp` while RoCE is on: false, so no DATA at all.
#[rustfmt::skip]
fn enable_iwarp_false(seq: u8) -> Vec<u8> {
    vec![
        0x64, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, // nlmsg_len 100
        seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x26, 0x01, 0x00, 0x00,
        0x08, 0x00, 0x01, 0x00, b'p', b'c', b'i', 0x00,
        0x11, 0x00, 0x02, 0x00,
        b'0', b'0', b'0', b'0', b':', b'1', b'7', b':', b'0', b'0', b'.', b'0', 0x00, 0x00, 0x00, 0x00,
        0x34, 0x00, 0x50, 0x00,                         // PARAM, len 52
        0x11, 0x00, 0x51, 0x00,                         //   PARAM_NAME "enable_iwarp", len 17 + 3 pad
        b'e', b'n', b'a', b'b', b'l', b'e', b'_', b'i', b'w', b'a', b'r', b'p', 0x00, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x52, 0x00,                         //   PARAM_GENERIC
        0x05, 0x00, 0x53, 0x00, 0x06, 0x00, 0x00, 0x00, //   PARAM_TYPE NLA_FLAG
        0x10, 0x00, 0x54, 0x00,                         //   PARAM_VALUES_LIST, len 16
        0x0c, 0x00, 0x55, 0x00,                         //     PARAM_VALUE, len 12
        0x05, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00, //       CMODE runtime; no DATA = false
    ]
}

/// netdevsim's `max_macs`: generic u32, driverinit only, 32.
#[rustfmt::skip]
fn nsim_max_macs(seq: u8) -> Vec<u8> {
    vec![
        0x6c, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, // nlmsg_len 108
        seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x26, 0x01, 0x00, 0x00,
        0x0e, 0x00, 0x01, 0x00,                         // BUS_NAME "netdevsim", len 14 + 2 pad
        b'n', b'e', b't', b'd', b'e', b'v', b's', b'i', b'm', 0x00, 0x00, 0x00,
        0x10, 0x00, 0x02, 0x00,                         // DEV_NAME "netdevsim10", len 16
        b'n', b'e', b't', b'd', b'e', b'v', b's', b'i', b'm', b'1', b'0', 0x00,
        0x38, 0x00, 0x50, 0x00,                         // PARAM, len 56
        0x0d, 0x00, 0x51, 0x00,                         //   PARAM_NAME "max_macs", len 13 + 3 pad
        b'm', b'a', b'x', b'_', b'm', b'a', b'c', b's', 0x00, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x52, 0x00,                         //   PARAM_GENERIC
        0x05, 0x00, 0x53, 0x00, 0x03, 0x00, 0x00, 0x00, //   PARAM_TYPE NLA_U32 (3)
        0x18, 0x00, 0x54, 0x00,                         //   PARAM_VALUES_LIST, len 24
        0x14, 0x00, 0x55, 0x00,                         //     PARAM_VALUE, len 20
        0x05, 0x00, 0x57, 0x00, 0x01, 0x00, 0x00, 0x00, //       CMODE driverinit (1)
        0x08, 0x00, 0x56, 0x00, 0x20, 0x00, 0x00, 0x00, //       DATA u32 32
    ]
}

/// `devlink dev param set pci/0000:17:00.0 name enable_iwarp value false cmode runtime`, seq 3.
#[rustfmt::skip]
const SET_IWARP_FALSE: [u8; 84] = [
    0x54, 0x00, 0x00, 0x00, 0x14, 0x00, 0x05, 0x00, // nlmsg_len 84, the family, REQUEST | ACK
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 3
    0x27, 0x01, 0x00, 0x00,                         // PARAM_SET (39), version 1
    0x08, 0x00, 0x01, 0x00, b'p', b'c', b'i', 0x00,
    0x11, 0x00, 0x02, 0x00,
    b'0', b'0', b'0', b'0', b':', b'1', b'7', b':', b'0', b'0', b'.', b'0', 0x00, 0x00, 0x00, 0x00,
    0x11, 0x00, 0x51, 0x00,                         // PARAM_NAME "enable_iwarp"
    b'e', b'n', b'a', b'b', b'l', b'e', b'_', b'i', b'w', b'a', b'r', b'p', 0x00, 0x00, 0x00, 0x00,
    0x05, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00, // PARAM_VALUE_CMODE runtime
    0x05, 0x00, 0x53, 0x00, 0x06, 0x00, 0x00, 0x00, // PARAM_TYPE NLA_FLAG; false: no DATA
];

/// `devlink dev param set pci/0000:17:00.0 name enable_roce value true cmode runtime`, seq 4.
#[rustfmt::skip]
const SET_ROCE_TRUE: [u8; 84] = [
    0x54, 0x00, 0x00, 0x00, 0x14, 0x00, 0x05, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 4
    0x27, 0x01, 0x00, 0x00,
    0x08, 0x00, 0x01, 0x00, b'p', b'c', b'i', 0x00,
    0x11, 0x00, 0x02, 0x00,
    b'0', b'0', b'0', b'0', b':', b'1', b'7', b':', b'0', b'0', b'.', b'0', 0x00, 0x00, 0x00, 0x00,
    0x10, 0x00, 0x51, 0x00,                         // PARAM_NAME "enable_roce"
    b'e', b'n', b'a', b'b', b'l', b'e', b'_', b'r', b'o', b'c', b'e', 0x00,
    0x05, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00, // CMODE runtime
    0x05, 0x00, 0x53, 0x00, 0x06, 0x00, 0x00, 0x00, // TYPE NLA_FLAG
    0x04, 0x00, 0x56, 0x00,                         // DATA: present = true
];

fn bool_param(name: &str, v: bool) -> Param {
    Param {
        name: name.into(),
        generic: true,
        kind: ParamType::Bool,
        values: vec![(Cmode::Runtime, ParamValue::Bool(v))],
    }
}

/// The recorded family lookup, answered to a request with seq 1.
fn family_replies() -> Vec<Vec<u8>> {
    recorded::family(FAMILY)
        .replies
        .into_iter()
        .map(|mut r| {
            r[8..12].copy_from_slice(&1u32.to_ne_bytes());
            r
        })
        .collect()
}

fn parse_one(raw: &[u8]) -> DevlinkMessage {
    let mut m = parse_datagram::<DevlinkMessage>(raw).expect("parses");
    assert_eq!(m.len(), 1);
    match m.remove(0).payload {
        NetlinkPayload::InnerMessage(d) => d,
        other => panic!("not a devlink message: {other:?}"),
    }
}

/// parse(raw) == expected and emit(expected) == raw, for a reply with `seq`.
fn both_ways(raw: &[u8], seq: u8, expected: &ParamReply) {
    let m = parse_one(raw);
    assert_eq!(ParamReply::from_message(&m).unwrap(), *expected);
    assert_eq!(m, expected.to_message(FAMILY));
    assert_eq!(emit(&mut request_message(0, seq.into(), expected.to_message(FAMILY))), raw);
}

#[test]
fn ice_rdma_protocol_replies_parse_and_emit_byte_exact() {
    both_ways(
        &enable_roce_true(1),
        1,
        &ParamReply { handle: handle(), param: bool_param("enable_roce", true) },
    );
    both_ways(
        &enable_iwarp_false(9),
        9,
        &ParamReply { handle: handle(), param: bool_param("enable_iwarp", false) },
    );
}

#[test]
fn netdevsim_u32_driverinit_reply_parses_and_emits_byte_exact() {
    let p = Param {
        name: "max_macs".into(),
        generic: true,
        kind: ParamType::U32,
        values: vec![(Cmode::Driverinit, ParamValue::U32(32))],
    };
    let h = DevHandle { bus: "netdevsim".into(), dev: "netdevsim10".into() };
    both_ways(&nsim_max_macs(2), 2, &ParamReply { handle: h, param: p.clone() });
    assert_eq!(p.value(Cmode::Driverinit), Some(&ParamValue::U32(32)));
    assert_eq!(p.value(Cmode::Runtime), None);
}

#[test]
fn requests_are_byte_exact_and_false_is_an_absent_flag() {
    assert_eq!(
        emit(&mut request_message(0x05, 1, param_get(FAMILY, &handle(), "enable_roce"))),
        get_enable_roce(1)
    );
    let off = param_set(FAMILY, &handle(), "enable_iwarp", &ParamValue::Bool(false), Cmode::Runtime);
    assert_eq!(emit(&mut request_message(0x05, 3, off.clone())), SET_IWARP_FALSE);
    let on = param_set(FAMILY, &handle(), "enable_roce", &ParamValue::Bool(true), Cmode::Runtime);
    assert_eq!(emit(&mut request_message(0x05, 4, on.clone())), SET_ROCE_TRUE);
    // And back: the request bytes decode to the same attributes.
    assert_eq!(parse_one(&SET_IWARP_FALSE), off);
    assert_eq!(parse_one(&SET_ROCE_TRUE), on);
    assert!(!off.attrs.iter().any(|a| matches!(a, DevlinkAttr::ParamValueData(_))));
}

/// The whole exchange through the crate's transport: family lookup, GET, SET.
#[test]
fn client_resolves_the_family_reads_and_sets_in_the_order_ice_needs() {
    let fam = recorded::family(FAMILY);
    let mut replies = family_replies();
    // seq 1: family; seq 2: GET; seq 3, 4: the two SETs.
    replies.push(enable_roce_true(2));
    replies.push(recorded::ack(&get_enable_roce(2), 0));
    replies.push(recorded::ack(&SET_IWARP_FALSE, 0));
    replies.push(recorded::ack(&SET_ROCE_TRUE, 0));
    let mut d = Devlink::new(Recorded::new(replies)).unwrap();
    assert_eq!(d.family(), FAMILY);
    assert_eq!(d.param_get(&handle(), "enable_roce").unwrap(), bool_param("enable_roce", true));
    d.param_set(&handle(), "enable_iwarp", &ParamValue::Bool(false), Cmode::Runtime).unwrap();
    d.param_set(&handle(), "enable_roce", &ParamValue::Bool(true), Cmode::Runtime).unwrap();
    let sent = &d.transport().sent;
    assert_eq!(
        sent[0],
        fam.request.iter().enumerate().map(|(i, b)| if i == 8 { 1 } else { *b }).collect::<Vec<_>>()
    );
    assert_eq!(sent[1], get_enable_roce(2));
    assert_eq!(sent[2], SET_IWARP_FALSE);
    assert_eq!(sent[3], SET_ROCE_TRUE);
}

#[test]
fn kernel_refusals_become_errors_that_say_what_is_missing() {
    let go = |errno: i32, ext: Option<&str>| {
        let mut replies = family_replies();
        let mut nack = recorded::ack(&get_enable_roce(2), errno);
        if let Some(text) = ext {
            // NLM_F_ACK_TLVS (0x200) and NLMSGERR_ATTR_MSG (1) after the echoed request.
            nack[6..8].copy_from_slice(&0x200u16.to_ne_bytes());
            let mut tlv = ((4 + text.len() + 1) as u16).to_ne_bytes().to_vec();
            tlv.extend_from_slice(&1u16.to_ne_bytes());
            tlv.extend_from_slice(text.as_bytes());
            tlv.push(0);
            while !tlv.len().is_multiple_of(4) {
                tlv.push(0);
            }
            nack.extend(tlv);
            let len = nack.len() as u32;
            nack[0..4].copy_from_slice(&len.to_ne_bytes());
        }
        replies.push(nack);
        let mut d = Devlink::new(Recorded::new(replies)).unwrap();
        d.param_get(&handle(), "enable_roce").unwrap_err()
    };
    let e = go(libc::ENODEV, None);
    assert!(matches!(e, DevlinkError::NoDevice { .. }) && e.is_unsupported(), "{e}");
    assert!(e.to_string().contains("no devlink instance pci/0000:17:00.0"), "{e}");
    let e = go(libc::EINVAL, None);
    assert!(matches!(e, DevlinkError::NoParam { .. }) && e.is_unsupported(), "{e}");
    assert!(e.to_string().contains("has no parameter enable_roce"), "{e}");
    let e = go(libc::EOPNOTSUPP, Some("iWARP is currently enabled"));
    assert!(matches!(e, DevlinkError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("iWARP is currently enabled"), "{e}");
    let e = go(libc::EPERM, None);
    assert!(matches!(e, DevlinkError::Kernel { errno: libc::EPERM, .. }) && !e.is_unsupported(), "{e}");

    // No devlink family at all: the controller's ENOENT.
    let fam = recorded::family(FAMILY);
    let mut nack = recorded::ack(&fam.request, libc::ENOENT);
    nack[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let e = Devlink::new(Recorded::new([nack])).unwrap_err();
    assert!(matches!(e, DevlinkError::NoFamily { .. }) && e.is_unsupported(), "{e}");
}

#[test]
fn a_reply_about_another_parameter_is_refused() {
    let mut replies = family_replies();
    replies.push(enable_iwarp_false(2));
    replies.push(recorded::ack(&get_enable_roce(2), 0));
    let mut d = Devlink::new(Recorded::new(replies)).unwrap();
    let e = d.param_get(&handle(), "enable_roce").unwrap_err();
    assert!(e.to_string().contains("the reply is about pci/0000:17:00.0 enable_iwarp"), "{e}");
}

#[test]
fn truncated_replies_are_errors_never_panics() {
    let full = enable_roce_true(1);
    for n in 1..full.len() {
        let r = parse_datagram::<DevlinkMessage>(&full[..n]);
        assert!(r.is_err(), "{n} bytes of {} parsed: {r:?}", full.len());
    }
    // Cut inside the PARAM nest but with nlmsg_len fixed up: the nest's own length is wrong.
    let mut cut = full[..80].to_vec();
    cut[0] = 80;
    let e = parse_datagram::<DevlinkMessage>(&cut).unwrap_err().to_string();
    assert!(e.contains("byte 0") || e.contains("byte 16"), "{e}");
}

#[test]
fn bad_lengths_name_the_attribute() {
    // CMODE of 2 bytes: len 6 instead of 5.
    let mut raw = enable_roce_true(1);
    raw[88] = 0x06;
    let e = parse_datagram::<DevlinkMessage>(&raw).unwrap_err();
    let e = format!("{e:#}") + &std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default();
    assert!(e.contains("DEVLINK_ATTR_PARAM_VALUE_CMODE: expected 1 byte, got 2"), "{e}");

    // A bool with a payload: the kernel refuses that (nla_len != 0), so do we.
    let mut p = bool_param("enable_roce", true).to_attrs();
    if let Some(DevlinkAttr::ParamValuesList(l)) = p.last_mut() {
        l[0] = DevlinkAttr::ParamValue(vec![
            DevlinkAttr::ParamValueCmode(0),
            DevlinkAttr::ParamValueData(vec![1]),
        ]);
    }
    let e = Param::from_attrs(&p).unwrap_err();
    assert!(e.contains("enable_roce (runtime)") && e.contains("flag without payload, got 1 bytes"), "{e}");

    // A u32 parameter with 2 bytes of data.
    let mut p = Param {
        name: "max_macs".into(),
        generic: true,
        kind: ParamType::U32,
        values: vec![(Cmode::Driverinit, ParamValue::U32(32))],
    }
    .to_attrs();
    if let Some(DevlinkAttr::ParamValuesList(l)) = p.last_mut() {
        l[0] = DevlinkAttr::ParamValue(vec![
            DevlinkAttr::ParamValueCmode(1),
            DevlinkAttr::ParamValueData(vec![0, 1]),
        ]);
    }
    let e = Param::from_attrs(&p).unwrap_err();
    assert!(e.contains("max_macs (driverinit)") && e.contains("expected 4 bytes, got 2"), "{e}");

    // The generic flag with a payload.
    let mut raw = enable_roce_true(1);
    raw[68] = 0x05; // PARAM_GENERIC len 5: a byte of PARAM_TYPE's header becomes its payload
    let e = parse_datagram::<DevlinkMessage>(&raw).unwrap_err();
    let e = format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
    assert!(e.contains("DEVLINK_ATTR_PARAM_GENERIC: a flag has no payload, got 1 bytes"), "{e}");

    // A type devlink does not use, and a value without a cmode.
    let e = Param::from_attrs(&[DevlinkAttr::ParamName("x".into()), DevlinkAttr::ParamType(4)]).unwrap_err();
    assert!(e.contains("PARAM_TYPE 4 is not a devlink type"), "{e}");
    let e = Param::from_attrs(&[
        DevlinkAttr::ParamName("x".into()),
        DevlinkAttr::ParamType(6),
        DevlinkAttr::ParamValuesList(vec![DevlinkAttr::ParamValue(vec![])]),
    ])
    .unwrap_err();
    assert!(e.contains("without DEVLINK_ATTR_PARAM_VALUE_CMODE"), "{e}");
}

#[test]
fn unknown_attributes_are_kept_and_emitted_back_unchanged() {
    // An attribute 200 (u32 7) appended inside PARAM and at the top level.
    let mut raw = enable_roce_true(1);
    let extra = [0x08, 0x00, 0xc8, 0x00, 0x07, 0x00, 0x00, 0x00];
    raw.extend_from_slice(&extra);
    raw[48..50].copy_from_slice(&(52u16 + 8).to_ne_bytes()); // PARAM grows...
    raw.splice(100..100, extra); // ...by the attribute at its end
    let len = raw.len() as u32;
    raw[0..4].copy_from_slice(&len.to_ne_bytes());
    let m = parse_one(&raw);
    assert!(matches!(m.attrs.last(), Some(DevlinkAttr::Other(_))));
    let r = ParamReply::from_message(&m).unwrap();
    assert_eq!(r.param, bool_param("enable_roce", true));
    assert_eq!(emit(&mut request_message(0, 1, m)), raw);
}

#[test]
fn a_nest_flag_is_accepted_and_nesting_is_bounded() {
    // Newer kernels may set NLA_F_NESTED on PARAM: same meaning.
    let mut raw = enable_roce_true(1);
    raw[51] |= 0x80;
    let r = ParamReply::from_message(&parse_one(&raw)).unwrap();
    assert_eq!(r.param, bool_param("enable_roce", true));

    // PARAM inside VALUE inside VALUES_LIST inside PARAM: deeper than devlink nests.
    let deep = DevlinkAttr::Param(vec![DevlinkAttr::ParamValuesList(vec![DevlinkAttr::ParamValue(vec![
        DevlinkAttr::Param(vec![]),
    ])])]);
    let msg = DevlinkMessage { family: FAMILY, cmd: 38, version: 1, attrs: vec![deep] };
    let raw = emit(&mut request_message(0, 1, msg));
    let e = parse_datagram::<DevlinkMessage>(&raw).unwrap_err();
    let e = format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
    assert!(e.contains("nested deeper"), "{e}");
}

#[test]
fn handles_print_and_parse_like_devlink() {
    assert_eq!(handle().to_string(), "pci/0000:17:00.0");
    assert_eq!("netdevsim/netdevsim10".parse::<DevHandle>().unwrap().dev, "netdevsim10");
    for bad in ["pci", "/x", "pci/", "a/b/c"] {
        assert!(bad.parse::<DevHandle>().is_err(), "{bad}");
    }
    assert_eq!(
        nic::netlink::devlink::param_set_command(
            &handle(),
            "enable_iwarp",
            &ParamValue::Bool(false),
            Cmode::Runtime
        ),
        "devlink dev param set pci/0000:17:00.0 name enable_iwarp value false cmode runtime"
    );
}

#[test]
fn a_dump_lists_every_parameter() {
    let nsim = DevHandle { bus: "netdevsim".into(), dev: "netdevsim10".into() };
    let all = vec![
        ParamReply { handle: handle(), param: bool_param("enable_roce", true) },
        ParamReply { handle: handle(), param: bool_param("enable_iwarp", false) },
        ParamReply {
            handle: nsim,
            param: Param {
                name: "test1".into(),
                generic: false,
                kind: ParamType::Bool,
                values: vec![(Cmode::Driverinit, ParamValue::Bool(true))],
            },
        },
    ];
    let x = [recorded::family(FAMILY), recorded::param_dump(FAMILY, &all)];
    let mut d = Devlink::new(Recorded::replaying(x.to_vec())).unwrap();
    assert_eq!(d.params().unwrap(), all);
}

/// The E810 RoCE switch: GET `enable_iwarp` (to undo), SET it off, SET
/// `enable_roce` on; when ice refuses the second, `enable_iwarp` goes back on.
#[test]
fn enable_roce_turns_iwarp_off_first_and_undoes_it_when_roce_is_refused() {
    let pci = "0000:17:00.0".parse().unwrap();
    let get = recorded::param_get(
        FAMILY,
        &ParamReply { handle: handle(), param: bool_param("enable_iwarp", true) },
    );
    let iwarp =
        |on| recorded::param_set(FAMILY, &handle(), "enable_iwarp", &ParamValue::Bool(on), Cmode::Runtime);
    let roce = recorded::param_set(FAMILY, &handle(), "enable_roce", &ParamValue::Bool(true), Cmode::Runtime);
    let x = vec![recorded::family(FAMILY), get.clone(), iwarp(false), roce];
    let mut d = Devlink::new(Recorded::replaying(x)).unwrap();
    d.enable_roce(pci).unwrap();
    assert_eq!(d.transport().sent.len(), 4);
    // The replaying transport answers only requests equal to the recorded ones (seq aside).
    assert_eq!(d.transport().sent[2][16..], SET_IWARP_FALSE[16..]);

    let refused = recorded::param_set_refused(
        FAMILY,
        &handle(),
        "enable_roce",
        &ParamValue::Bool(true),
        Cmode::Runtime,
        libc::EOPNOTSUPP,
    );
    let x = vec![recorded::family(FAMILY), get, iwarp(false), refused, iwarp(true)];
    let mut d = Devlink::new(Recorded::replaying(x)).unwrap();
    let e = d.enable_roce(pci).unwrap_err();
    assert!(matches!(e, DevlinkError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("name enable_roce value true cmode runtime"), "{e}");
    // The undo went out: GET, SET off, SET roce (refused), SET iwarp back on.
    assert_eq!(d.transport().sent.len(), 5);
}
