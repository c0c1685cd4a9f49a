//! Scenario helpers of the DRA tests that drive the real driver
//! (`dra_kubelet.rs`, `dra_api_faults.rs`, `dra_prepare.rs`, `dra_health.rs`,
//! `dra_network_data.rs`): the example node in either RDMA netns mode, what
//! the published slices say, and waits on the driver's `/metrics` and
//! `/healthz`.

use std::time::Duration;

use serde_json::Value;

use super::stuck::http_get;

pub const NODE: &str = "cx6dx-dual";

/// The example node in shared RDMA netns mode (the example itself is exclusive):
/// a VF's RDMA device stays in the host's `infiniband` class when its netdev moves.
pub fn sim() -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(super::examples().join("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Shared;
    nic::sim::Sim::materialise(&desc).expect("materialise the example node")
}

/// The example node in exclusive RDMA netns mode: a VF's RDMA device leaves
/// the host's `infiniband` class with its netdev.
pub fn exclusive_sim() -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(super::examples().join("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Exclusive;
    nic::sim::Sim::materialise(&desc).unwrap()
}

pub fn pci(s: &str) -> nic::PciAddr {
    s.parse().unwrap()
}

pub fn attrs<'a>(slices: &'a [Value], device: &str) -> &'a Value {
    slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
        .find(|d| d["name"] == device)
        .map(|d| &d["attributes"])
        .unwrap_or_else(|| panic!("device {device} not published"))
}

pub fn device_count(slices: &[Value]) -> usize {
    slices.iter().map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len)).sum()
}

pub fn generation(slices: &[Value]) -> i64 {
    slices[0]["spec"]["pool"]["generation"].as_i64().unwrap()
}

pub fn names(slices: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// `GET /metrics` until it has the line `line`.
pub async fn wait_metric(metrics: &str, line: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let page = http_get(metrics, "/metrics").await.1;
        if page.lines().any(|l| l == line) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no `{line}` in\n{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /healthz` until its body contains `needle`.
pub async fn wait_healthz(metrics: &str, needle: &str) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http_get(metrics, "/healthz").await;
        if body.contains(needle) {
            return (code, body);
        }
        assert!(tokio::time::Instant::now() < deadline, "no {needle:?} in /healthz: {code} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
