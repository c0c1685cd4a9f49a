//! Issue 36: the CNI's configuration reader never panics, whatever stdin and
//! environment it is given, and every refusal carries a CNI spec error code
//! (proptest, a bounded number of cases so that `cargo test` runs it in
//! seconds). What it reads: the bytes on stdin ([`conf::decode`]), the
//! environment ([`conf::read_env`]), the configuration for each command
//! ([`conf::parse`]) and the logging settings ([`logging::Settings`]).

use kube_rdma_cni::conf::{self, Command};
use kube_rdma_cni::logging::Settings;
use proptest::prelude::*;
use serde_json::{Map, Value};

const COMMANDS: [Command; 6] =
    [Command::Add, Command::Del, Command::Check, Command::Status, Command::Gc, Command::Version];

/// The codes our errors may carry: the spec's (1-7, 11, 50, 51) and ours (100+).
fn valid_code(c: u32) -> bool {
    matches!(c, 1..=7 | 11 | 50 | 51) || (100..1000).contains(&c)
}

/// Keys the parser looks at (in several spellings), and some it does not.
fn key() -> impl Strategy<Value = String> {
    let known: Vec<&str> = conf::OURS
        .iter()
        .copied()
        .chain([
            "cniVersion",
            "name",
            "type",
            "ipam",
            "runtimeConfig",
            "prevResult",
            "deviceID",
            "pciBusID",
            "CNIDeviceInfoFile",
            "cni.dev/valid-attachments",
            "cni.dev/attachments",
            "containerID",
            "ifname",
            "interfaces",
            "pciID",
            "vlan_trunk",
            "DEVICEID",
            "Mac",
        ])
        .collect();
    prop_oneof![
        4 => proptest::sample::select(known).prop_map(String::from),
        1 => "[a-zA-Z/._\\n-]{0,12}",
    ]
}

/// Values the parser meets: strings that look like what it wants (PCI
/// addresses, MACs, versions, paths) and any other JSON, nested.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        proptest::sample::select(vec![
            "1.1.0",
            "1.0.0",
            "0.4.0",
            "0.3.1",
            "0000:01:00.1",
            "0000:01:00.2",
            "02:00:00:00:00:01",
            "on",
            "off",
            "auto",
            "required",
            "802.1ad",
            "host-local",
            "json",
            "debug",
            "/tmp/x",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/n-c_net1",
            "../x",
            "",
            "n\nx",
        ])
        .prop_map(Value::from),
        ".{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn config() -> impl Strategy<Value = Value> {
    proptest::collection::vec((key(), value()), 0..10)
        .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

fn env_var() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        Just("c1".to_string()),
        Just("net1".to_string()),
        Just("/proc/self/ns/net".to_string()),
        Just("K8S_POD_UID=p;MAC=02:00:00:00:00:01".to_string()),
        ".{0,20}",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_configuration_and_environment_make_the_parser_panic_and_every_refusal_has_a_spec_code(
        conf in config(),
        vars in proptest::collection::vec(env_var(), 7),
    ) {
        let names = ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_ARGS", "CNI_PATH",
                     conf::NODE_DIR_ENV, conf::DEVINFO_DIR_ENV];
        let get = |k: &str| names.iter().position(|n| *n == k).and_then(|i| vars[i].clone());
        for cmd in COMMANDS {
            let env = match conf::read_env(cmd, &get) {
                Ok(e) => e,
                Err(e) => {
                    prop_assert!(valid_code(e.code()), "{cmd:?} env: {e} has code {}", e.code());
                    conf::read_env(cmd, &|k| match k {
                        "CNI_CONTAINERID" => Some("c1".into()),
                        "CNI_IFNAME" => Some("net1".into()),
                        "CNI_NETNS" => Some("/proc/self/ns/net".into()),
                        _ => None,
                    }).unwrap()
                }
            };
            if let Err(e) = conf::parse(conf.clone(), &env, cmd) {
                prop_assert!(valid_code(e.code()), "{cmd:?}: {e} has code {}", e.code());
            }
        }
        let _ = Settings::from_config(Some(&conf), vars[0].as_deref());
    }

    #[test]
    fn no_bytes_on_stdin_make_the_decoder_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = conf::decode(&bytes) {
            prop_assert_eq!(e.code(), 6, "{}", e);
        }
    }

    #[test]
    fn no_json_text_makes_the_decoder_and_parser_panic(conf in config()) {
        let text = serde_json::to_vec(&conf).unwrap();
        let v = conf::decode(&text).unwrap();
        let env = conf::Env { container_id: "c1".into(), ifname: "net1".into(), netns: "/x".into(),
                              node_dir: "/n".into(), devinfo_dir: "/d".into(), ..conf::Env::default() };
        for cmd in COMMANDS {
            if let Err(e) = conf::parse(v.clone(), &env, cmd) {
                prop_assert!(valid_code(e.code()), "{cmd:?}: {e} has code {}", e.code());
            }
        }
    }
}
