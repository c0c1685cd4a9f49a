//! GetPreferredAllocation policy on simulated nodes: must_include, NUMA,
//! pack vs spread, GPU affinity, health and determinism.

mod common;

use std::collections::BTreeMap;

use kube_rdma_device_plugin::allocate::preferred;
use kube_rdma_device_plugin::config::{Config, Policy};
use kube_rdma_device_plugin::pools::{self, Pool};
use nic::sim::Sim;

fn pool_of(sim: &Sim, policy: Policy, gpu: bool) -> Pool {
    let inv = nic::discover(&sim.roots());
    let mut cfg = Config::default_pools();
    cfg.pools[0].policy = policy;
    cfg.pools[0].gpu_affinity = gpu;
    pools::plan(&inv, &cfg).pools.remove(0)
}

fn all_ids(p: &Pool) -> Vec<String> {
    p.devices.iter().map(|d| d.id.clone()).collect()
}

fn per_group(p: &Pool, ids: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for id in ids {
        *m.entry(p.device(id).unwrap().group.clone()).or_default() += 1;
    }
    m
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn pack_fills_one_pf_and_spread_goes_across_pfs_on_the_same_numa_node() {
    let sim = Sim::materialise(&nic::sim::big_node(4, 8)).unwrap();
    let pack = pool_of(&sim, Policy::Pack, false);
    let got = preferred(&pack, &all_ids(&pack), &[], 4);
    assert_eq!(got.len(), 4);
    assert_eq!(per_group(&pack, &got).len(), 1, "pack uses one PF: {got:?}");

    let spread = pool_of(&sim, Policy::Spread, false);
    let got = preferred(&spread, &all_ids(&spread), &[], 4);
    let groups = per_group(&spread, &got);
    assert_eq!(
        groups.values().copied().collect::<Vec<_>>(),
        vec![2, 2],
        "spread over the 2 PFs of one NUMA node: {groups:?}"
    );
    let numas: std::collections::BTreeSet<_> = got.iter().map(|i| spread.device(i).unwrap().numa).collect();
    assert_eq!(numas.len(), 1, "one NUMA node: {got:?}");
}

#[test]
fn must_include_comes_first_and_pulls_the_rest_to_its_numa_node() {
    let sim = common::sim("cx6dx-dual.yaml");
    let p = pool_of(&sim, Policy::Pack, false);
    let got = preferred(&p, &all_ids(&p), &s(&["0000:af:00.5"]), 3);
    assert_eq!(got, s(&["0000:af:00.5", "0000:af:00.1", "0000:af:00.2"]));
    // A request bigger than one NUMA node spills over, packing PF by PF.
    let got = preferred(&p, &all_ids(&p), &[], 10);
    assert_eq!(got.len(), 10);
    let g = per_group(&p, &got);
    assert_eq!(g.values().copied().collect::<Vec<_>>(), vec![8, 2], "{g:?}");
    // Only `available` devices are chosen.
    let avail = s(&["0000:3d:00.4", "0000:af:00.2", "0000:3d:00.7"]);
    let got = preferred(&p, &avail, &[], 2);
    assert_eq!(got, s(&["0000:3d:00.4", "0000:3d:00.7"]));
}

const GPU_NODE: &str = r#"
node: gpu-affinity
switches:
  - name: sw0
    rootPort: "0000:58:00.0"
    upstream: "0000:59:00.0"
adapters:
  - model: connectx-6dx
    pfs:
      - bdf: "0000:3d:00.0"
        netdev: ens1f0np0
        vfs: 4
        numa: 0
        rdma: mlx5_0
      - bdf: "0000:5b:00.0"
        netdev: ens2f0np0
        vfs: 4
        numa: 0
        rdma: mlx5_1
        switch: sw0
gpus:
  - bdf: "0000:5c:00.0"
    numa: 0
    switch: sw0
"#;

#[test]
fn gpu_affinity_prefers_vfs_behind_the_gpus_switch() {
    let desc: nic::simdesc::NodeDesc = serde_yaml::from_str(GPU_NODE).unwrap();
    let sim = Sim::materialise(&desc).unwrap();
    let plain = pool_of(&sim, Policy::Pack, false);
    let got = preferred(&plain, &all_ids(&plain), &[], 2);
    assert!(got.iter().all(|i| i.starts_with("0000:3d")), "without affinity: lowest PF first: {got:?}");
    let gpu = pool_of(&sim, Policy::Pack, true);
    assert!(gpu.devices.iter().filter(|d| d.near_gpu).all(|d| d.id.starts_with("0000:5b")));
    let got = preferred(&gpu, &all_ids(&gpu), &[], 2);
    assert!(
        got.iter().all(|i| gpu.device(i).unwrap().near_gpu),
        "with affinity: behind the GPU's switch: {got:?}"
    );
    let got = preferred(&pool_of(&sim, Policy::Spread, true), &all_ids(&gpu), &[], 2);
    assert!(got.iter().any(|i| i.starts_with("0000:5b")), "{got:?}");
}

#[test]
fn same_input_in_any_order_gives_the_same_answer() {
    let sim = common::sim("cx6dx-dual.yaml");
    for policy in [Policy::Pack, Policy::Spread] {
        let p = pool_of(&sim, policy, true);
        let ids = all_ids(&p);
        let mut rev = ids.clone();
        rev.reverse();
        let a = preferred(&p, &ids, &[], 5);
        assert_eq!(a, preferred(&p, &rev, &[], 5));
        assert_eq!(a, preferred(&p, &ids, &[], 5));
    }
}

#[test]
fn unhealthy_and_unknown_ids_are_never_preferred() {
    let mut sim = common::sim("cx6dx-dual.yaml");
    sim.set_operstate("ens1f1np1", "down").unwrap();
    let p = pool_of(&sim, Policy::Pack, false);
    let mut avail = s(&["0000:af:00.1", "0000:af:00.2", "0000:af:00.3", "0000:3d:00.2", "bogus"]);
    avail.sort();
    let got = preferred(&p, &avail, &[], 2);
    assert_eq!(got, s(&["0000:3d:00.2"]), "only one usable device: return what exists");
}
