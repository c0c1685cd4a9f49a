//! The daemon serves its first ListAndWatch from a walk without GID tables;
//! Allocate, the only call that hands out GID indexes, waits for the full walk,
//! and the kubelet sees no list update for it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube_rdma_device_plugin::api::{AllocateRequest, ContainerAllocateRequest};
use kube_rdma_device_plugin::config::Config;
use kube_rdma_device_plugin::metrics::Metrics;
use kube_rdma_device_plugin::pools::{self, Pool};
use kube_rdma_device_plugin::server::{self, PoolService};
use nic::discover::{discover_scoped, Scope};

fn pool(roots: &nic::Roots, gid_tables: bool) -> Pool {
    let inv = discover_scoped(roots, Scope { gid_tables, ..Scope::default() });
    pools::plan(&inv, &Config::default_pools()).pools.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_waits_for_gid_tables_and_the_list_does_not_change() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let (lean, full) = (pool(&sim.roots(), false), pool(&sim.roots(), true));
    assert!(!lean.gid_tables && full.gid_tables);
    assert!(lean.devices.iter().all(|d| d.rdma.iter().all(|r| r.gid_index.is_none())));
    assert_eq!(server::list_response(&lean), server::list_response(&full));

    let (tx, rx) = tokio::sync::watch::channel(Arc::new(lean));
    let listener = server::bind(&dirs.kubelet.join(SOCK)).unwrap();
    let svc = PoolService::new(rx, dirs.devinfo.clone(), Arc::new(Metrics::default()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, svc, async {
        let _ = stopped.await;
    }));

    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 16);
    let req = AllocateRequest {
        container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:3d:00.2".into()] }],
    };
    let mut c2 = c.clone();
    let alloc = tokio::spawn(async move { c2.allocate(req).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!alloc.is_finished(), "Allocate must wait for the GID tables");

    tx.send_replace(Arc::new(full));
    let r = tokio::time::timeout(Duration::from_secs(5), alloc).await.unwrap().unwrap().unwrap().into_inner();
    assert_eq!(r.container_responses[0].envs["NCCL_IB_GID_INDEX"], "3");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.message()).await.is_err(),
        "a pool change the kubelet cannot see sends no list"
    );
    // Graceful shutdown waits for open streams.
    drop((s, c));
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("server stops").unwrap().unwrap();
}
