//! Every request type the pools' servers take, generated (proptest) and sent
//! over the real sockets to the real binary: IDs of the pool, of another
//! pool, made up, empty or huge, repeated; sizes over the whole `int32`
//! range; empty lists. Each answer is what an independent reading of the
//! kubelet's rules says (`pkg/kubelet/cm/devicemanager/manager.go`
//! `devicesToAllocate`: available IDs and must-include IDs are sets, the
//! must-include ones among the available, `|must| ≤ size ≤ |available|`):
//! a valid request gets a valid answer, any other `InvalidArgument` with a
//! short message, and the daemon never dies.
//!
//! Regression (issue 20, defect 4): `allocation_size=2147483647` made the
//! daemon abort ("memory allocation of 51539607528 bytes failed", exit 134),
//! taking every pool down.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use kube_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use kube_rdma_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Empty,
    PreStartContainerRequest, PreferredAllocationRequest,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tonic::transport::Channel;

const T: Duration = Duration::from_secs(10);

/// A VF pool and a shared pool on `cx6dx-dual` (in shared netns mode, which the shared pool needs).
const POOLS: &str = "pools:\n- name: vfs\n  selectors: {rootDevices: [\"0000:3d:00.0\"]}\n- name: hca\n  mode: shared\n  rdmaHcaMax: 3\n  selectors: {ifNames: [ens1f1np1]}\n";

#[derive(Debug, Clone)]
enum Call {
    Preferred(Vec<(Vec<String>, Vec<String>, i32)>),
    Allocate(Vec<Vec<String>>),
    PreStart(Vec<String>),
}

fn ids(known: Vec<String>) -> impl Strategy<Value = Vec<String>> {
    let id = prop_oneof![
        4 => proptest::sample::select(known),
        1 => "[ -~]{0,16}",
        1 => "(?s).{0,12}",
        1 => Just(String::new()),
        1 => "0000:[0-9a-f]{2}:0[0-9]\\.[0-7]",
        1 => "x{200,3000}",
    ];
    proptest::collection::vec(id, 0..10)
}

fn size() -> impl Strategy<Value = i32> {
    prop_oneof![3 => -2..20i32, 1 => any::<i32>(), 1 => Just(i32::MAX), 1 => Just(i32::MIN)]
}

/// Anything: IDs from every pool and made up, any sizes.
fn any_call(known: Vec<String>) -> impl Strategy<Value = Call> {
    let k = known;
    let preferred =
        proptest::collection::vec((ids(k.clone()), ids(k.clone()), size()), 0..3).prop_map(Call::Preferred);
    let allocate = proptest::collection::vec(ids(k.clone()), 0..3).prop_map(Call::Allocate);
    let prestart = ids(k).prop_map(Call::PreStart);
    prop_oneof![preferred, allocate, prestart]
}

/// What a kubelet sends for pool IDs `mine`: a set of available IDs, a
/// prefix of it as must-include, a size between the two.
fn kubelet_call(mine: Vec<String>) -> impl Strategy<Value = Call> {
    let n = mine.len();
    let set = move || proptest::sample::subsequence(mine.clone(), 1..=n);
    let preferred = set()
        .prop_flat_map(|avail| {
            let n = avail.len();
            (Just(avail), 0..=n)
        })
        .prop_flat_map(|(avail, k)| {
            let n = avail.len();
            (Just(avail), Just(k), k.max(1)..=n)
        })
        .prop_map(|(avail, k, size)| {
            let must = avail[..k].to_vec();
            Call::Preferred(vec![(avail, must, size as i32)])
        });
    prop_oneof![preferred, set().prop_map(|ids| Call::Allocate(vec![ids])), set().prop_map(Call::PreStart)]
}

fn calls(pools: Vec<Vec<String>>) -> impl Strategy<Value = (usize, Call)> {
    let all: Vec<String> = pools.iter().flatten().cloned().collect();
    (0..pools.len()).prop_flat_map(move |p| {
        (Just(p), prop_oneof![2 => any_call(all.clone()), 1 => kubelet_call(pools[p].clone())])
    })
}

fn unique_and_known(ids: &[String], pool: &BTreeSet<String>) -> bool {
    let set: BTreeSet<&String> = ids.iter().collect();
    set.len() == ids.len() && ids.iter().all(|i| pool.contains(i))
}

/// Whether the kubelet could have sent this, read from its rules.
fn valid(call: &Call, pool: &BTreeSet<String>) -> bool {
    match call {
        Call::Preferred(cs) => {
            !cs.is_empty()
                && cs.iter().all(|(avail, must, size)| {
                    unique_and_known(avail, pool)
                        && unique_and_known(must, pool)
                        && must.iter().all(|m| avail.contains(m))
                        && i64::from(*size) >= must.len().max(1) as i64
                        && i64::from(*size) <= avail.len() as i64
                })
        }
        Call::Allocate(cs) => {
            let all: Vec<String> = cs.iter().flatten().cloned().collect();
            !cs.is_empty() && cs.iter().all(|c| !c.is_empty()) && unique_and_known(&all, pool)
        }
        Call::PreStart(c) => !c.is_empty() && unique_and_known(c, pool),
    }
}

fn check_refusal(call: &Call, e: &tonic::Status) -> Result<(), TestCaseError> {
    prop_assert_eq!(e.code(), tonic::Code::InvalidArgument, "{:?}: {}", call, e.message());
    prop_assert!(
        !e.message().is_empty() && e.message().len() < 2048,
        "{} bytes: {}",
        e.message().len(),
        e.message()
    );
    Ok(())
}

async fn send(
    c: &mut DevicePluginClient<Channel>,
    call: &Call,
    pool: &BTreeSet<String>,
) -> Result<(), TestCaseError> {
    let ok = valid(call, pool);
    match call {
        Call::Preferred(cs) => {
            let req = PreferredAllocationRequest {
                container_requests: cs
                    .iter()
                    .map(|(a, m, s)| ContainerPreferredAllocationRequest {
                        available_device_i_ds: a.clone(),
                        must_include_device_i_ds: m.clone(),
                        allocation_size: *s,
                    })
                    .collect(),
            };
            match c.get_preferred_allocation(req).await {
                Ok(r) => {
                    prop_assert!(ok, "accepted {:?}", call);
                    let r = r.into_inner();
                    prop_assert_eq!(r.container_responses.len(), cs.len());
                    for ((avail, must, size), got) in cs.iter().zip(&r.container_responses) {
                        let got = &got.device_i_ds;
                        let set: BTreeSet<&String> = got.iter().collect();
                        // Every device of the sim is Healthy: the answer is full.
                        prop_assert_eq!(got.len(), *size as usize, "{:?} -> {:?}", call, got);
                        prop_assert_eq!(set.len(), got.len());
                        prop_assert!(must.iter().all(|m| got.contains(m)));
                        prop_assert!(got.iter().all(|g| avail.contains(g)));
                    }
                }
                Err(e) => {
                    prop_assert!(!ok, "refused {:?}: {}", call, e.message());
                    check_refusal(call, &e)?;
                }
            }
        }
        Call::Allocate(cs) => {
            let req = AllocateRequest {
                container_requests: cs
                    .iter()
                    .map(|ids| ContainerAllocateRequest { devices_ids: ids.clone() })
                    .collect(),
            };
            match c.allocate(req).await {
                Ok(r) => {
                    prop_assert!(ok, "accepted {:?}", call);
                    prop_assert_eq!(r.into_inner().container_responses.len(), cs.len());
                }
                Err(e) => {
                    prop_assert!(!ok, "refused {:?}: {}", call, e.message());
                    check_refusal(call, &e)?;
                }
            }
        }
        Call::PreStart(ids) => {
            match c.pre_start_container(PreStartContainerRequest { devices_ids: ids.clone() }).await {
                Ok(_) => prop_assert!(ok, "accepted {:?}", call),
                Err(e) => {
                    prop_assert!(!ok, "refused {:?}: {}", call, e.message());
                    check_refusal(call, &e)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn generated_requests_get_valid_answers_or_invalid_argument_and_the_daemon_lives() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dirs = Dirs::new();
    let cfg = dirs.write_config(POOLS);
    let nodes = tempfile::tempdir().unwrap();
    let node = example_in_mode(nodes.path(), "cx6dx-dual.yaml", nic::NetnsMode::Shared);
    let (k, mut child, mut clients, pools) = rt.block_on(async {
        let k = FakeKubelet::start(&dirs.kubelet);
        let child = dirs
            .daemon_command()
            .arg("--sim")
            .arg(&node)
            .arg("--config")
            .arg(&cfg)
            .arg("--no-link-events")
            // Hundreds of refusals, each logged as a warning: only errors here.
            .env("RUST_LOG", "error")
            .spawn()
            .unwrap();
        let mut clients = vec![];
        let mut pools = vec![];
        for (resource, sock) in [
            ("kuberdma.io/vfs", "kuberdma-kuberdma.io-vfs.sock"),
            ("kuberdma.io/hca", "kuberdma-kuberdma.io-hca.sock"),
        ] {
            k.wait_allocatable(resource, if resource.ends_with("vfs") { 8 } else { 3 }, T).await;
            let ids: BTreeSet<String> =
                k.endpoint(resource).unwrap().devices.iter().map(|d| d.id.clone()).collect();
            clients.push(plugin(&dirs.kubelet, sock).await);
            pools.push(ids);
        }
        (k, child, clients, pools)
    });

    // The request that used to abort the daemon, first.
    let vfs: Vec<String> = pools[0].iter().cloned().collect();
    let fatal = Call::Preferred(vec![(vfs.clone(), vec![], i32::MAX)]);
    rt.block_on(send(&mut clients[0], &fatal, &pools[0])).unwrap();
    // Huge requests (under the 4 MiB a gRPC message may have): 150 000 IDs
    // cost a refusal, not the daemon.
    let many: Vec<String> = (0..150_000).map(|i| format!("0000:00:{:02x}.{}", i % 256, i % 8)).collect();
    for call in [
        Call::Allocate(vec![many.clone()]),
        Call::Preferred(vec![(many.clone(), vec![], i32::MAX)]),
        Call::Preferred(vec![(vfs.iter().cycle().take(100_000).cloned().collect(), vec![], 3)]),
        Call::PreStart(many),
    ] {
        rt.block_on(send(&mut clients[0], &call, &pools[0])).unwrap();
    }

    let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
    let sent = std::sync::Mutex::new(std::collections::BTreeMap::<(&str, bool), usize>::new());
    let lists: Vec<Vec<String>> = pools.iter().map(|p| p.iter().cloned().collect()).collect();
    runner
        .run(&calls(lists), |(p, call)| {
            let kind = match &call {
                Call::Preferred(_) => "GetPreferredAllocation",
                Call::Allocate(_) => "Allocate",
                Call::PreStart(_) => "PreStartContainer",
            };
            *sent.lock().unwrap().entry((kind, valid(&call, &pools[p]))).or_default() += 1;
            // A client is a handle on one connection: cloning it reuses that.
            let mut c = clients[p].clone();
            rt.block_on(send(&mut c, &call, &pools[p]))
        })
        .unwrap();
    // Both sides of every request type were exercised.
    let sent = sent.into_inner().unwrap();
    for kind in ["GetPreferredAllocation", "Allocate", "PreStartContainer"] {
        for ok in [true, false] {
            assert!(sent.get(&(kind, ok)).copied().unwrap_or(0) >= 10, "{kind} valid={ok}: {sent:?}");
        }
    }

    rt.block_on(async {
        assert!(child.try_wait().unwrap().is_none(), "the daemon died");
        for c in &mut clients {
            c.get_device_plugin_options(Empty {}).await.expect("still serving");
        }
        // A valid Allocate still works after all that.
        let first = pools[0].iter().next().unwrap().clone();
        clients[0]
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest { devices_ids: vec![first] }],
            })
            .await
            .expect("Allocate");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let st = tokio::time::timeout(T, child.wait()).await.unwrap().unwrap();
        assert_eq!(st.code(), Some(0));
        drop(k);
    });
}
