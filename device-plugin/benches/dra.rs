//! DRA mode benchmark on a simulated 1024-VF node (8 PF × 128 VF), the real
//! binary against a real kube-apiserver v1.34.4 (HTTPS, the chart's
//! ServiceAccount token and RBAC) and a fake kubelet:
//! - start → first published slice: process spawn to the moment the API holds
//!   the node's complete pool (8 slices of 128 devices), from empty (the
//!   kubelet wiped the node's slices); baseline in the same run: the same
//!   binary's `discover --output json` on the same node (spawn + discovery +
//!   output, no API);
//! - NodePrepareResources latency, one claim per call as the kubelet sends
//!   them per pod (API read, plan, CDI spec and checkpoint writes), p50/p99
//!   over 512 claims; baselines in the same run: a repeated prepare of a
//!   prepared claim (answered from the checkpoint: the gRPC round trip) and a
//!   bare GET of a claim from the same kube-apiserver by an in-process kube
//!   client (with the driver's token).
//!
//! Run: `cargo bench -p kube-rdma-device-plugin --bench dra`.

#[path = "../tests/dra_fixtures/mod.rs"]
mod dra_fixtures;

use std::time::{Duration, Instant};

use dra_fixtures::*;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

const STARTS: usize = 5;
const CLAIMS: usize = 512;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    pct(&v, 0.5)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run());
}

async fn run() {
    let desc = nic::sim::big_node(8, 128);
    let sim = nic::sim::Sim::materialise(&desc).expect("materialise 1024-VF node");
    let env = Env::new(&desc.node, sim.roots()).await;

    // Baseline: discovery alone, same binary, same node.
    let mut discover = Vec::new();
    for _ in 0..STARTS {
        let t = Instant::now();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
            .args(["discover", "--output", "json", "--sysfs-root"])
            .arg(&env.roots.sysfs)
            .arg("--dev-root")
            .arg(&env.roots.dev)
            .output()
            .await
            .unwrap();
        // Exit 1 is a failing node check (the big node is not in exclusive netns mode): the
        // walk and the output are complete all the same; 2 would be an error.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "discover: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        discover.push(t.elapsed());
    }

    let mut first_slice = Vec::new();
    let mut running = None;
    for i in 0..STARTS {
        env.wipe_slices().await;
        let t = Instant::now();
        let driver = env.spawn(&[]);
        env.wait_slices_within("1024 devices published", Duration::from_secs(60), |s| {
            s.iter().map(|o| o["spec"]["devices"].as_array().map_or(0, Vec::len)).sum::<usize>() == 1024
        })
        .await;
        first_slice.push(t.elapsed());
        if i + 1 < STARTS {
            driver.stop().await;
        } else {
            running = Some(driver); // the last one stays for the prepare part
        }
    }
    let (fs, ds) = (median(first_slice.clone()), median(discover.clone()));
    println!(
        "start -> first published pool (1024 VFs, 8 slices): median {} (runs {:?}); baseline discover --output json: {}; ratio {:.2}",
        ms(fs),
        first_slice.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        ms(ds),
        fs.as_secs_f64() / ds.as_secs_f64()
    );

    let mut p = register(&env.reg_socket()).await;
    let devices: Vec<String> = env
        .slices()
        .await
        .iter()
        .flat_map(|s| {
            s["spec"]["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string())
        })
        .collect();
    let mut uids: Vec<String> = Vec::with_capacity(CLAIMS);
    for (i, dev) in devices.iter().enumerate().take(CLAIMS) {
        uids.push(
            env.create_claim(&format!("c{i}"), &[("vf", DRIVER, dev)], json!([]), &format!("pod-{i}")).await,
        );
    }
    let mut prepare = Vec::with_capacity(CLAIMS);
    for (i, uid) in uids.iter().enumerate() {
        let t = Instant::now();
        let r = p.prepare(vec![claim_ref(&format!("c{i}"), uid)]).await;
        prepare.push(t.elapsed());
        assert_eq!(r.claims[uid].error, "", "claim c{i}");
    }
    let mut cached = Vec::with_capacity(CLAIMS);
    for (i, uid) in uids.iter().enumerate() {
        let t = Instant::now();
        p.prepare(vec![claim_ref(&format!("c{i}"), uid)]).await;
        cached.push(t.elapsed());
    }
    let client = client_for(&env.driver_kubeconfig).await;
    let api: kube::Api<ResourceClaim> = kube::Api::namespaced(client, "default");
    let mut get = Vec::with_capacity(CLAIMS);
    for i in 0..CLAIMS {
        let t = Instant::now();
        api.get(&format!("c{i}")).await.unwrap();
        get.push(t.elapsed());
    }
    let mut unprepare = Vec::with_capacity(CLAIMS);
    for (i, uid) in uids.iter().enumerate() {
        let t = Instant::now();
        p.unprepare(vec![claim_ref(&format!("c{i}"), uid)]).await;
        unprepare.push(t.elapsed());
    }
    for v in [&mut prepare, &mut cached, &mut get, &mut unprepare] {
        v.sort();
    }
    println!(
        "NodePrepareResources, 1 claim per call, {CLAIMS} claims: p50 {} p99 {}; baselines: repeat (from checkpoint) p50 {} p99 {}, API GET of a claim p50 {} p99 {}; p99 ratio to GET {:.2}",
        us(pct(&prepare, 0.5)),
        us(pct(&prepare, 0.99)),
        us(pct(&cached, 0.5)),
        us(pct(&cached, 0.99)),
        us(pct(&get, 0.5)),
        us(pct(&get, 0.99)),
        pct(&prepare, 0.99).as_secs_f64() / pct(&get, 0.99).as_secs_f64()
    );
    println!("NodeUnprepareResources: p50 {} p99 {}", us(pct(&unprepare, 0.5)), us(pct(&unprepare, 0.99)));
    if let Some(d) = running {
        d.stop().await;
    }
}
