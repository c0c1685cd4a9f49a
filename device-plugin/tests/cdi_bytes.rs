//! The bytes of the CDI specs kube-rdma writes, pinned: a spec on a node is
//! rewritten only when a device in it changed, never for a new version's
//! formatting alone (a rewrite of every node's specs at an upgrade would race
//! the runtimes reading them). The golden files under `tests/golden/` were
//! written by the version before the CDI writer moved into one module
//! (`devinfo.rs` and `dra/cdi.rs` at `ad447e9`); a change to them is a change
//! of what is on nodes, to be made on purpose (`KUBE_RDMA_BLESS=1` rewrites
//! them).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kube_rdma_device_plugin::config::Config;
use kube_rdma_device_plugin::pools;

const NODES: [&str; 4] = ["cx6dx-dual.yaml", "e810-xxv.yaml", "e810-c-vf-rdma.yaml", "mixed.yaml"];

/// Every pool kind and config format (those of `allocate_env.rs`).
const CONFIGS: [&str; 4] = [
    "pools: [{name: vfs, selectors: {vendors: [\"15b3\", \"8086\"]}}]",
    "pools: [{name: hca, mode: shared, rdmaHcaMax: 3, selectors: {vendors: [\"15b3\", \"8086\"]}}]",
    r#"{"resourceList": [{"resourceName": "net", "selectors": {"vendors": ["8086", "15b3"]}},
        {"resourceName": "rdma", "selectors": {"isRdma": true}}]}"#,
    r#"{"configList": [{"resourceName": "shared", "rdmaHcaMax": 2, "selectors": {"vendors": ["15b3", "8086"]}}]}"#,
];

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn sim(name: &str) -> nic::sim::Sim {
    nic::sim::Sim::from_file(manifest().join("../examples/nodes").join(name)).expect("example node")
}

fn plan(node: &nic::sim::Sim, cfg: &str) -> (nic::Inventory, pools::Plan) {
    let cfg = Config::parse(cfg, Path::new("test.yaml")).unwrap();
    let inv = nic::discover(&node.roots());
    let plan = pools::plan(&inv, &cfg);
    (inv, plan)
}

/// Compares `got` with the golden file `name`, or writes it when blessing.
fn golden(name: &str, got: &str) {
    let path = manifest().join("tests/golden").join(name);
    if std::env::var_os("KUBE_RDMA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "{}: line {} differs", path.display(), i + 1);
    }
    assert_eq!(got.len(), want.len(), "{}: length differs", path.display());
    assert!(got == want, "{}", path.display());
}

/// What the daemon writes for each pool ([`kube_rdma_device_plugin::cdi::pool::sync`]
/// writes [`CdiSpec::file`] of the devices it computes).
#[test]
fn device_plugin_mode_specs_keep_their_bytes() {
    use kube_rdma_device_plugin::cdi::pool::{cdi_devices, CdiSpec};
    let mut out = String::new();
    for node in NODES {
        let sim = sim(node);
        for (i, cfg) in CONFIGS.iter().enumerate() {
            for pool in plan(&sim, cfg).1.pools {
                let spec = CdiSpec { kind: pool.config.cdi_kind(), devices: cdi_devices(&pool, |_| true) };
                let Some(file) = spec.file() else { continue };
                writeln!(out, "== {node} config {i} {}", pool.resource_name()).unwrap();
                out.push_str(std::str::from_utf8(&file).unwrap());
                out.push('\n');
            }
        }
    }
    golden("cdi-device-plugin.txt", &out);
}

/// What DRA mode writes for a claim: every VF of the node in one request,
/// two in a `firstAvailable` subrequest with extra env and no MAD devices,
/// one without `rdma_cm`.
#[test]
fn dra_mode_specs_keep_their_bytes() {
    use kube_rdma_device_plugin::dra::cdi::{self, ClaimDevice};
    use kube_rdma_device_plugin::dra::claimconfig::DeviceConfig;
    use kube_rdma_device_plugin::dra::devices::{from_plan, History, PreparedDevices, View};
    let plain = DeviceConfig::default();
    let mut tuned = DeviceConfig { umad: false, ..Default::default() };
    tuned.env.insert("NCCL_IB_TC".into(), "106".into());
    let no_cm = DeviceConfig { rdma_cm: false, ..Default::default() };
    let dir = tempfile::tempdir().unwrap();
    let mut out = String::new();
    for node in NODES {
        let sim = sim(node);
        for (i, cfg) in [CONFIGS[0], CONFIGS[2]].into_iter().enumerate() {
            let (inv, plan) = plan(&sim, cfg);
            let view =
                from_plan(&plan, &inv, History { last: &View::default(), prepared: &PreparedDevices::new() });
            let all: Vec<ClaimDevice> = view
                .devices
                .iter()
                .map(|d| ClaimDevice { request: "rail-0", device: d, config: &plain })
                .collect();
            let fast: Vec<ClaimDevice> = view
                .devices
                .iter()
                .take(2)
                .map(|d| ClaimDevice { request: "vf/fast", device: d, config: &tuned })
                .collect();
            let one: Vec<ClaimDevice> = view
                .devices
                .iter()
                .take(1)
                .map(|d| ClaimDevice { request: "vf", device: d, config: &no_cm })
                .collect();
            for (uid, devices) in [("uid-all", all), ("uid-fast", fast), ("uid-one", one)] {
                let Some(spec) = cdi::spec(uid, &devices, view.rdma_cm) else { continue };
                let path = cdi::write(dir.path(), uid, &spec).unwrap();
                writeln!(out, "== {node} config {i} {uid}").unwrap();
                out.push_str(&std::fs::read_to_string(path).unwrap());
                out.push('\n');
            }
        }
    }
    golden("cdi-dra.txt", &out);
}
