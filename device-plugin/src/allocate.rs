//! Pure allocation logic: what one container gets for a list of device IDs
//! ([`container_response`]), and which devices to prefer ([`preferred`]).
//! No I/O: discovery already resolved every VF's RDMA devices, so Allocate is
//! a lookup (`server.rs` → here), not a sysfs walk.
//!
//! Environment handed to the container, for pool `kuberdma.io/rdma_vfs`:
//! - `PCIDEVICE_KUBERDMA_IO_RDMA_VFS=0000:3d:00.2,0000:3d:00.3` and
//!   `PCIDEVICE_KUBERDMA_IO_RDMA_VFS_INFO={"0000:3d:00.2":{"generic":{"deviceID":…},"rdma":{…}}}`,
//!   as sriov-network-device-plugin writes them (prefix and name upper-cased,
//!   every other character `_`);
//! - `KUBERDMA_RDMA_VFS_RDMA_DEVICES=mlx5_2,mlx5_3`, `KUBERDMA_RDMA_VFS_GID_INDEXES=mlx5_2:3,mlx5_3:3`
//!   per pool, and the ready-to-use `NCCL_IB_HCA`, `NCCL_IB_GID_INDEX` (when all
//!   devices agree on one index) and `UCX_NET_DEVICES` (`mlx5_2:1,mlx5_3:1`).
//!   With two pools in one container the per-pool variables stay distinct; the
//!   NCCL/UCX ones are those of the last pool the kubelet merges.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::api::{CdiDevice, ContainerAllocateResponse, DeviceSpec};
use crate::config::{Mode, Policy};
use crate::pools::{Device, Pool};
use crate::RDMA_CM;

/// Why an allocation was refused. Every variant names the devices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// IDs this plugin never advertised (or that belong to another pool).
    #[error("pool {pool}: unknown device IDs: {}", ids.join(", "))]
    Unknown {
        /// Resource name.
        pool: String,
        /// The IDs.
        ids: Vec<String>,
    },
    /// IDs that are advertised but currently Unhealthy.
    #[error("pool {pool}: unhealthy devices: {}", ids.join("; "))]
    Unhealthy {
        /// Resource name.
        pool: String,
        /// `id (reason)` entries.
        ids: Vec<String>,
    },
    /// The request listed no devices.
    #[error("pool {pool}: empty device list")]
    Empty {
        /// Resource name.
        pool: String,
    },
}

/// `PCIDEVICE_<PREFIX>_<NAME>` as sriov-network-device-plugin spells it.
pub fn pcidevice_env(prefix: &str, name: &str) -> String {
    format!("PCIDEVICE_{}_{}", env_part(prefix), env_part(name))
}

fn env_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// CDI kind of a pool (`kuberdma.io/rdma_vfs`).
pub fn cdi_kind(pool: &Pool) -> String {
    pool.resource_name()
}

/// Fully qualified CDI device name (`kuberdma.io/rdma_vfs=0000:3d:00.2`).
pub fn cdi_name(pool: &Pool, id: &str) -> String {
    format!("{}={}", cdi_kind(pool), id)
}

/// Resolves `ids` in `pool`: every ID must be advertised and Healthy.
pub fn resolve<'p>(pool: &'p Pool, ids: &[String]) -> Result<Vec<&'p Device>, AllocError> {
    if ids.is_empty() {
        return Err(AllocError::Empty { pool: pool.resource_name() });
    }
    let mut unknown = Vec::new();
    let mut sick = Vec::new();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match pool.device(id) {
            None => unknown.push(id.clone()),
            Some(d) => match &d.health {
                crate::health::Health::Unhealthy(why) => sick.push(format!("{id} ({why})")),
                crate::health::Health::Healthy => out.push(d),
            },
        }
    }
    if !unknown.is_empty() {
        return Err(AllocError::Unknown { pool: pool.resource_name(), ids: unknown });
    }
    if !sick.is_empty() {
        return Err(AllocError::Unhealthy { pool: pool.resource_name(), ids: sick });
    }
    Ok(out)
}

/// The response for one container. `ids` must resolve (see [`resolve`]).
pub fn container_response(pool: &Pool, ids: &[String]) -> Result<ContainerAllocateResponse, AllocError> {
    let devs = resolve(pool, ids)?;
    let mut specs: Vec<DeviceSpec> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |path: &str, specs: &mut Vec<DeviceSpec>| {
        if seen.insert(path.to_string()) {
            specs.push(DeviceSpec {
                container_path: path.to_string(),
                host_path: path.to_string(),
                permissions: "rw".into(),
            });
        }
    };
    let mut names = Vec::new();
    let mut gids = Vec::new();
    let mut ucx = Vec::new();
    let mut info = serde_json::Map::new();
    for d in &devs {
        let mut rdma_info = serde_json::Map::new();
        for r in &d.rdma {
            for c in &r.char_devs {
                push(&c.node_path.to_string_lossy(), &mut specs);
            }
            if !names.contains(&r.name) {
                names.push(r.name.clone());
                ucx.push(format!("{}:1", r.name));
                if let Some(g) = r.gid_index {
                    gids.push((r.name.clone(), g));
                }
            }
            rdma_info.insert("rdma_dev".into(), r.name.clone().into());
            if let Some(u) = r.char_devs.iter().find(|c| c.name.starts_with("uverbs")) {
                rdma_info.insert("uverbs".into(), u.node_path.to_string_lossy().into_owned().into());
            }
        }
        if pool.rdma_cm {
            rdma_info.insert("rdma_cm".into(), RDMA_CM.into());
        }
        let mut entry = serde_json::Map::new();
        entry.insert("generic".into(), serde_json::json!({ "deviceID": d.id }));
        if !rdma_info.is_empty() {
            entry.insert("rdma".into(), rdma_info.into());
        }
        info.insert(d.id.clone(), entry.into());
    }
    if pool.rdma_cm {
        push(RDMA_CM, &mut specs);
    }
    let c = &pool.config;
    let base = pcidevice_env(&c.prefix, &c.name);
    let mut envs = HashMap::new();
    if c.mode == Mode::Vf {
        envs.insert(base.clone(), devs.iter().map(|d| d.id.as_str()).collect::<Vec<_>>().join(","));
        envs.insert(format!("{base}_INFO"), serde_json::Value::Object(info).to_string());
    }
    let ours = format!("KUBERDMA_{}", env_part(&c.name));
    envs.insert(format!("{ours}_RDMA_DEVICES"), names.join(","));
    envs.insert("NCCL_IB_HCA".into(), names.join(","));
    envs.insert("UCX_NET_DEVICES".into(), ucx.join(","));
    if !gids.is_empty() {
        let joined: Vec<String> = gids.iter().map(|(n, g)| format!("{n}:{g}")).collect();
        envs.insert(format!("{ours}_GID_INDEXES"), joined.join(","));
        let distinct: BTreeSet<u32> = gids.iter().map(|(_, g)| *g).collect();
        if distinct.len() == 1 && gids.len() == names.len() {
            let g = distinct.into_iter().next().unwrap_or_default().to_string();
            envs.insert("NCCL_IB_GID_INDEX".into(), g.clone());
            envs.insert(format!("{ours}_GID_INDEX"), g);
        }
    }
    let cdi_devices = devs.iter().map(|d| CdiDevice { name: cdi_name(pool, &d.id) }).collect();
    Ok(ContainerAllocateResponse {
        envs,
        mounts: vec![],
        devices: specs,
        annotations: HashMap::new(),
        cdi_devices,
    })
}

/// Preferred allocation of `size` devices out of `available`, always
/// including `must` (deterministic for the same input):
/// 1. `must_include` first;
/// 2. stay on one NUMA node when the request fits there (the NUMA node of the
///    `must` devices, else the one that fits best for `pack`, most room for `spread`);
/// 3. with `gpuAffinity`, prefer devices behind a PCIe switch that hosts a GPU;
/// 4. `pack`: fill one PF (group) before the next, best fit first; `spread`:
///    round-robin across PFs.
///
/// Unknown and Unhealthy IDs in `available` are never chosen. If fewer than
/// `size` usable devices exist, all of them are returned.
pub fn preferred(pool: &Pool, available: &[String], must: &[String], size: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(size);
    for m in must {
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    if out.len() >= size {
        return out;
    }
    let mut cands: Vec<&Device> = available
        .iter()
        .filter(|id| !out.contains(id))
        .filter_map(|id| pool.device(id))
        .filter(|d| d.health.is_healthy())
        .collect();
    cands.sort_by(|a, b| a.id.cmp(&b.id));
    cands.dedup_by(|a, b| a.id == b.id);
    let need = size - out.len();
    let must_devs: Vec<&Device> = must.iter().filter_map(|m| pool.device(m)).collect();

    // NUMA: pick one node that can hold the rest of the request.
    let mut by_numa: BTreeMap<Option<u32>, usize> = BTreeMap::new();
    for d in &cands {
        *by_numa.entry(d.numa).or_default() += 1;
    }
    let must_numa: BTreeSet<Option<u32>> = must_devs.iter().map(|d| d.numa).collect();
    let fitting: Vec<(Option<u32>, usize)> =
        by_numa.iter().filter(|(_, n)| **n >= need).map(|(k, n)| (*k, *n)).collect();
    let chosen_numa = if must_numa.len() == 1 && fitting.iter().any(|(k, _)| must_numa.contains(k)) {
        must_numa.iter().next().copied()
    } else if must_numa.len() > 1 {
        None
    } else {
        let gpu_count = |k: Option<u32>| cands.iter().filter(|d| d.numa == k && d.near_gpu).count();
        fitting
            .iter()
            .min_by_key(|(k, n)| {
                let gpu = if pool.config.gpu_affinity { usize::MAX - gpu_count(*k).min(need) } else { 0 };
                let room = match pool.config.policy {
                    Policy::Pack => *n,
                    Policy::Spread => usize::MAX - *n,
                };
                (gpu, room, *k)
            })
            .map(|(k, _)| *k)
    };
    if let Some(k) = chosen_numa {
        if by_numa.get(&k).is_some_and(|n| *n >= need) {
            cands.retain(|d| d.numa == k);
        }
    }

    // Group by PF (or HCA), in a deterministic, preference-ordered way.
    let mut groups: BTreeMap<&str, Vec<&Device>> = BTreeMap::new();
    for d in &cands {
        groups.entry(d.group.as_str()).or_default().push(d);
    }
    for g in groups.values_mut() {
        g.sort_by_key(|d| (d.vf_index.unwrap_or(u32::MAX), d.id.clone()));
    }
    let used_by_must: BTreeMap<&str, usize> = must_devs.iter().fold(BTreeMap::new(), |mut m, d| {
        *m.entry(d.group.as_str()).or_default() += 1;
        m
    });
    let gpu_first = pool.config.gpu_affinity;
    let mut order: Vec<(&str, Vec<&Device>)> = groups.into_iter().collect();
    match pool.config.policy {
        Policy::Pack => {
            // Groups already holding `must` devices first, then near-GPU ones, then
            // the smallest group that fits the rest whole (best fit), then bigger first.
            order.sort_by_key(|(g, devs)| {
                let near = gpu_first && devs.iter().any(|d| d.near_gpu);
                let fits = devs.len() >= need;
                (
                    std::cmp::Reverse(used_by_must.get(g).copied().unwrap_or(0)),
                    !near,
                    !fits,
                    if fits { devs.len() } else { usize::MAX - devs.len() },
                    g.to_string(),
                )
            });
            for (_, devs) in &order {
                for d in devs {
                    if out.len() >= size {
                        return out;
                    }
                    out.push(d.id.clone());
                }
            }
        }
        Policy::Spread => {
            // Fewest `must` devices first, near-GPU first, then most room.
            order.sort_by_key(|(g, devs)| {
                let near = gpu_first && devs.iter().any(|d| d.near_gpu);
                (
                    used_by_must.get(g).copied().unwrap_or(0),
                    !near,
                    std::cmp::Reverse(devs.len()),
                    g.to_string(),
                )
            });
            let mut round = 0;
            loop {
                let mut took = false;
                for (_, devs) in &order {
                    if let Some(d) = devs.get(round) {
                        if out.len() >= size {
                            return out;
                        }
                        out.push(d.id.clone());
                        took = true;
                    }
                }
                if !took {
                    break;
                }
                round += 1;
            }
        }
    }
    out
}
