//! Fuzzing the config reader (a bounded number of proptest cases per
//! `cargo test`): arbitrary text, valid configs of all three formats with
//! their text mutated, and their values replaced, keys renamed or dropped.
//! The reader never panics, and every refusal names the file and where in it
//! (a line and column, or a field).

use std::path::{Path, PathBuf};

use kube_rdma_device_plugin::config::{Config, ConfigError};
use proptest::prelude::*;
use serde_json::Value;

const FILE: &str = "/etc/kube-rdma/fuzzed.yaml";

/// Every valid config the tests carry: ours, sriov-network-device-plugin's
/// and k8s-rdma-shared-dev-plugin's (upstream examples included).
fn corpus() -> &'static [String] {
    static CORPUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(load_corpus)
}

fn load_corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = vec![root.join("../examples/pools.yaml")];
    for dir in ["tests/configs", "tests/conformance/sndp", "tests/conformance/rsdp"] {
        let mut more: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        more.sort();
        files.extend(more);
    }
    let texts: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .filter(|t| Config::parse(t, Path::new(FILE)).is_ok())
        .collect();
    assert!(texts.len() >= 8, "the corpus lost its valid configs: {}", texts.len());
    texts
}

/// Parses `text` and checks the outcome: no panic (proptest reports one as
/// a failure with the input), and an error that says where.
fn read(text: &str) -> Result<(), TestCaseError> {
    let Err(e) = Config::parse(text, Path::new(FILE)) else { return Ok(()) };
    let msg = e.to_string();
    prop_assert!(msg.starts_with(FILE), "error does not name the file: {msg}");
    match &e {
        ConfigError::Syntax { source, .. } => {
            let at = source.location();
            prop_assert!(at.is_some(), "syntax error without a line and column: {msg}: {source}");
        }
        ConfigError::Field { field, .. } => prop_assert!(!field.is_empty(), "no field named: {msg}"),
        ConfigError::TooDeep { line, column, .. } => prop_assert!(*line > 0 && *column > 0, "{msg}"),
        ConfigError::Documents { line, .. } => prop_assert!(*line > 0, "{msg}"),
        _ => prop_assert!(false, "a parse error that is about the file, not its text: {msg}"),
    }
    Ok(())
}

/// Text edits: cut a range, repeat it, or put a YAML-significant token in.
#[derive(Debug, Clone)]
enum Edit {
    Cut(usize, usize),
    Repeat(usize, usize),
    Insert(usize, &'static str),
}

fn edit() -> impl Strategy<Value = Edit> {
    let token = prop::sample::select(vec![
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        ": ",
        "- ",
        "\n",
        "\n  ",
        "\t",
        "\"",
        "'",
        "#",
        "&a ",
        "*a",
        "!!binary ",
        "|\n",
        ">-\n",
        "? ",
        "0x",
        "-1",
        "99999999999",
        "1e400",
        "null",
        "~",
        "#0-",
        "#3-1",
        "\u{feff}",
        "é",
        "\\u0000",
        "---\n",
        "...\n",
        "%YAML 1.2\n",
    ]);
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| Edit::Cut(a, n)),
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| Edit::Repeat(a, n)),
        (any::<usize>(), token).prop_map(|(a, t)| Edit::Insert(a, t)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut b: Vec<char> = text.chars().collect();
    for e in edits {
        let at = |a: usize, len: usize| if len == 0 { 0 } else { a % (len + 1) };
        match *e {
            Edit::Cut(a, n) => {
                let s = at(a, b.len());
                b.drain(s..(s + n).min(b.len()));
            }
            Edit::Repeat(a, n) => {
                let s = at(a, b.len());
                let part: Vec<char> = b[s..(s + n).min(b.len())].to_vec();
                b.splice(s..s, part);
            }
            Edit::Insert(a, t) => {
                let s = at(a, b.len());
                b.splice(s..s, t.chars());
            }
        }
    }
    b.into_iter().collect()
}

/// Any JSON value, a few levels deep, with the strings configs use.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "15b3",
            "0x8086",
            "101e",
            "mlx5_core",
            "ens1f0#0-3,6",
            "ens1f0#",
            "#1",
            "0000:3d:00.0#0-7",
            "0000:3d:00.2",
            "3d:00.2",
            "ether",
            "infiniband",
            "vf",
            "shared",
            "pack",
            "spread",
            "rdma_a",
            "kuberdma.io",
            "a/b",
            "-x-",
            "4294967296",
            "-1",
            "18446744073709551616",
        ])
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys of all three formats, and a stranger.
fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "pools",
        "name",
        "mode",
        "policy",
        "selectors",
        "vendors",
        "devices",
        "drivers",
        "pfNames",
        "rootDevices",
        "pciAddresses",
        "linkTypes",
        "isRdma",
        "linkSpeeds",
        "numaNodes",
        "ifNames",
        "deviceIDs",
        "rdmaHcaMax",
        "resourcePrefix",
        "resourceList",
        "resourceName",
        "configList",
        "additionalInfo",
        "excludeTopology",
        "gpuAffinity",
        "periodicUpdateInterval",
        "kubeletRootDir",
        "deviceType",
        "unknownKey",
    ])
    .prop_map(String::from)
}

/// A structural change at a place chosen by `path` (indices taken modulo
/// what is there): the value replaced, the key renamed, or the entry dropped.
#[derive(Debug, Clone)]
enum Change {
    Replace(Value),
    Rename(String),
    Drop,
}

fn change_at(v: &mut Value, path: &[usize], c: &Change) {
    let (Some(&i), rest) = (path.first(), path.get(1..).unwrap_or_default()) else {
        if let Change::Replace(n) = c {
            *v = n.clone();
        }
        return;
    };
    match v {
        Value::Array(a) if !a.is_empty() => {
            let i = i % a.len();
            if rest.is_empty() && matches!(c, Change::Drop) {
                a.remove(i);
            } else {
                change_at(&mut a[i], rest, c);
            }
        }
        Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(i % m.len()).cloned().unwrap_or_default();
            match (rest.is_empty(), c) {
                (true, Change::Drop) => {
                    m.remove(&k);
                }
                (true, Change::Rename(n)) => {
                    let old = m.remove(&k).unwrap_or(Value::Null);
                    m.insert(n.clone(), old);
                }
                _ => change_at(m.get_mut(&k).unwrap(), rest, c),
            }
        }
        _ => {
            if let Change::Replace(n) = c {
                *v = n.clone();
            }
        }
    }
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![value().prop_map(Change::Replace), key().prop_map(Change::Rename), Just(Change::Drop)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics_and_errors_say_where(text in "\\PC{0,200}") {
        read(&text)?;
    }

    #[test]
    fn yaml_shaped_text_never_panics_and_errors_say_where(
        text in "([\\[\\]{}:,\\-#&*!|>'\" \\n]|[a-z]{1,6}|0x[0-9a-f]{1,5}|[0-9]{1,4}){0,60}"
    ) {
        read(&text)?;
    }

    #[test]
    fn valid_configs_with_their_text_mutated_never_panic(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..5),
    ) {
        let text = apply(pick.get::<String>(corpus()), &edits);
        read(&text)?;
    }

    #[test]
    fn valid_configs_with_values_replaced_renamed_or_dropped_never_panic(
        pick in any::<prop::sample::Index>(),
        changes in prop::collection::vec((prop::collection::vec(any::<usize>(), 0..6), change()), 1..4),
        as_yaml in any::<bool>(),
    ) {
        let mut v: Value = serde_yaml::from_str(pick.get::<String>(corpus())).unwrap();
        for (path, c) in &changes {
            change_at(&mut v, path, c);
        }
        let text = if as_yaml { serde_yaml::to_string(&v).unwrap() } else { serde_json::to_string_pretty(&v).unwrap() };
        read(&text)?;
    }
}
