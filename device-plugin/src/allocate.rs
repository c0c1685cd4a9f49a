//! Pure allocation logic: what one container gets for a list of device IDs
//! ([`container_response`]), which devices to prefer ([`preferred`]), and
//! whether a request means anything for the pool at all.
//! No I/O: discovery already resolved every VF's RDMA devices, so Allocate is
//! a lookup (`server.rs` → here), not a sysfs walk.
//!
//! What a container gets from pool `kuberdma.io/rail0`:
//! - device nodes ([`device_nodes`], which says why MAD devices are among
//!   them): the RDMA char devices (uverbs, umad, issm) of its devices and
//!   `/dev/infiniband/rdma_cm` — only when the pool hands out RDMA devices
//!   (always in our format; with `isRdma: true` in sriov-network-device-plugin's)
//!   and at least one of the devices has one; `/dev/vfio/vfio` and
//!   `/dev/vfio/<group>` for VFs bound to vfio-pci;
//! - `PCIDEVICE_KUBERDMA_IO_RAIL0=0000:3d:00.2,…` and `…_INFO` as
//!   sriov-network-device-plugin writes them (VF pools);
//! - `KUBERDMA_RAIL0_RDMA_DEVICES=mlx5_2,mlx5_3` and
//!   `KUBERDMA_RAIL0_UCX_NET_DEVICES=mlx5_2:1,mlx5_3:1`: per pool, so that a
//!   container taking one pool per rail sees every rail (the kubelet keeps the
//!   first value of a variable two Allocate answers both set, so a global
//!   `NCCL_IB_HCA` would silently lose rails);
//! - `NCCL_IB_ROCE_VERSION_NUM=2` when every device is RoCE. No
//!   `NCCL_IB_GID_INDEX`: Allocate runs before the CNI gives the VF its address,
//!   so the index of the pod's IPv4 GID cannot be known here; NCCL picks it
//!   itself from the version and the address family (its `NCCL_IB_ADDR_FAMILY`,
//!   `AF_INET` unless the pod says otherwise);
//! - a CDI device name per device the pool's CDI spec defines (one with
//!   container edits, see [`cdi_named`]).
//!
//! No variable is ever set to an empty value. Requests are checked against the
//! pool before anything is computed ([`check_ids`], [`check_preferred`],
//! [`resolve`]): sizes and IDs a kubelet never sends are refused by name.

#[cfg(feature = "daemon")]
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use nic::CharDev;
#[cfg(feature = "daemon")]
use nic::LinkLayer;

#[cfg(feature = "daemon")]
use crate::api::{CdiDevice, ContainerAllocateResponse, DeviceSpec};
#[cfg(feature = "daemon")]
use crate::config::Mode;
use crate::config::Policy;
use crate::pools::{Device, Pool, RdmaInfo};
#[cfg(feature = "daemon")]
use crate::{names, RDMA_CM};

/// `/dev/vfio/vfio`, the VFIO container device.
pub const VFIO_CONTAINER: &str = "/dev/vfio/vfio";

/// Why a request was refused. Every variant names the pool, the request
/// field and the values at fault; IDs are listed up to [`LISTED`] of them,
/// each cut to [`ID_CHARS`] characters, so a hostile request cannot make the
/// answer (a gRPC trailer) huge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// IDs this plugin never advertised (or that belong to another pool).
    #[error("pool {pool}: {field}: unknown device IDs: {}", id_list(ids))]
    Unknown {
        /// Resource name.
        pool: String,
        /// The request field (`devices_ids`, `available_deviceIDs`, …).
        field: &'static str,
        ids: Vec<String>,
    },
    /// IDs listed more than once (the kubelet sends sets).
    #[error("pool {pool}: {field}: device IDs given more than once: {}", id_list(ids))]
    Duplicate {
        /// Resource name.
        pool: String,
        /// The request field.
        field: &'static str,
        /// The IDs, each once.
        ids: Vec<String>,
    },
    /// IDs that are advertised but currently Unhealthy.
    #[error("pool {pool}: unhealthy devices: {}", id_list(ids))]
    Unhealthy {
        /// Resource name.
        pool: String,
        /// `id (reason)` entries.
        ids: Vec<String>,
    },
    /// A list the request must fill is empty.
    #[error("pool {pool}: {field} is empty")]
    Empty {
        /// Resource name.
        pool: String,
        /// The request field.
        field: &'static str,
    },
    /// Must-include IDs the request does not offer as available (the kubelet
    /// always offers them: devicemanager `devicesToAllocate` passes
    /// `available.Union(allocated)` and `allocated`).
    #[error("pool {pool}: must_include_deviceIDs not in available_deviceIDs: {}", id_list(ids))]
    NotAvailable {
        /// Resource name.
        pool: String,
        ids: Vec<String>,
    },
    /// An allocation size no answer can meet.
    #[error(
        "pool {pool}: allocation_size {size} is outside {min}..={max} \
         (at least 1 and the must-include devices, at most the available ones)"
    )]
    Size {
        /// Resource name.
        pool: String,
        /// The size asked for.
        size: i32,
        /// Smallest acceptable size.
        min: usize,
        /// Largest acceptable size.
        max: usize,
    },
}

/// How many IDs an error message lists.
pub const LISTED: usize = 8;
/// How many characters of one ID an error message shows.
pub const ID_CHARS: usize = 80;

/// `a, b, c` for at most [`LISTED`] entries (each at most [`ID_CHARS`]
/// characters, control characters and quotes escaped so that a log line
/// stays one line), then `and N more`.
fn id_list(ids: &[String]) -> String {
    let mut parts: Vec<String> = ids
        .iter()
        .take(LISTED)
        .map(|id| {
            let shown: String = id.chars().take(ID_CHARS).flat_map(char::escape_debug).collect();
            if id.chars().nth(ID_CHARS).is_some() {
                format!("{shown}… ({} bytes)", id.len())
            } else {
                shown
            }
        })
        .collect();
    if ids.len() > LISTED {
        parts.push(format!("and {} more", ids.len() - LISTED));
    }
    parts.join(", ")
}

/// Fully qualified CDI device name (`kuberdma.io/rdma_vfs=0000:3d:00.2`).
pub fn cdi_name(pool: &Pool, id: &str) -> String {
    format!("{}={}", pool.config.cdi_kind(), id)
}

/// Checks the IDs of request field `field`: every one advertised by `pool`,
/// none twice. Linear in the request (a hash set), whatever its size.
pub fn check_ids(pool: &Pool, field: &'static str, ids: &[String]) -> Result<(), AllocError> {
    let mut seen = HashSet::with_capacity(ids.len().min(pool.devices.len() + 1));
    let mut unknown = Vec::new();
    let mut twice: Vec<String> = Vec::new();
    for id in ids {
        if pool.device(id).is_none() {
            unknown.push(id.clone());
        } else if !seen.insert(id.as_str()) && !twice.contains(id) {
            twice.push(id.clone());
        }
    }
    if !unknown.is_empty() {
        return Err(AllocError::Unknown { pool: pool.resource_name(), field, ids: unknown });
    }
    if !twice.is_empty() {
        return Err(AllocError::Duplicate { pool: pool.resource_name(), field, ids: twice });
    }
    Ok(())
}

/// Checks one GetPreferredAllocation container request against `pool` the
/// way the kubelet builds it (devicemanager `devicesToAllocate`): available
/// and must-include IDs advertised and each given once, must-include IDs among
/// the available ones, and `max(1, |must|) ≤ allocation_size ≤ |available|`.
/// Returns the size.
pub fn check_preferred(
    pool: &Pool,
    available: &[String],
    must: &[String],
    size: i32,
) -> Result<usize, AllocError> {
    check_ids(pool, "available_deviceIDs", available)?;
    check_ids(pool, "must_include_deviceIDs", must)?;
    let offered: HashSet<&str> = available.iter().map(String::as_str).collect();
    let missing: Vec<String> = must.iter().filter(|m| !offered.contains(m.as_str())).cloned().collect();
    if !missing.is_empty() {
        return Err(AllocError::NotAvailable { pool: pool.resource_name(), ids: missing });
    }
    let (min, max) = (must.len().max(1), available.len());
    match usize::try_from(size) {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(AllocError::Size { pool: pool.resource_name(), size, min, max }),
    }
}

/// Resolves `ids` in `pool`: a non-empty list of advertised IDs, each once,
/// every one Healthy.
pub fn resolve<'p>(pool: &'p Pool, ids: &[String]) -> Result<Vec<&'p Device>, AllocError> {
    if ids.is_empty() {
        return Err(AllocError::Empty { pool: pool.resource_name(), field: "devices_ids" });
    }
    check_ids(pool, "devices_ids", ids)?;
    let mut sick = Vec::new();
    let mut out = Vec::with_capacity(ids.len());
    for d in ids.iter().filter_map(|id| pool.device(id)) {
        match &d.health {
            crate::health::Health::Unhealthy(why) => sick.push(format!("{} ({why})", d.id)),
            crate::health::Health::Healthy => out.push(d),
        }
    }
    if !sick.is_empty() {
        return Err(AllocError::Unhealthy { pool: pool.resource_name(), ids: sick });
    }
    Ok(out)
}

/// Whether `pool` gives `d`'s RDMA char devices to containers.
pub fn hands_out_rdma(pool: &Pool, d: &Device) -> bool {
    pool.config.rdma_devices && !d.rdma.is_empty()
}

/// The node paths a container gets for `d` in device plugin mode (without
/// `rdma_cm`): [`device_nodes`] of the RDMA devices the pool hands out, MAD
/// devices included. Allocate's DeviceSpecs and the pool's CDI spec list the same.
pub fn node_paths(pool: &Pool, d: &Device) -> Vec<String> {
    let rdma = if hands_out_rdma(pool, d) { d.rdma.as_slice() } else { &[] };
    device_nodes(rdma, d.vfio.as_ref(), true)
}

/// The device nodes a container gets for one device, in both modes (without
/// `rdma_cm`, which goes once per container or claim), in order: the char
/// devices of `rdma`, the RDMA devices it is handed (`uverbsN`, then the MAD
/// devices `umadN` and `issmN` unless `mad` is false); then the VFIO
/// container and group devices of a VF bound to vfio-pci.
///
/// MAD devices are handed out by default in both modes. Device plugin mode
/// always gives them, as sriov-network-device-plugin and
/// k8s-rdma-shared-dev-plugin do (both list every char device of the RDMA
/// device: rdmamap `GetRdmaCharDevices`), so that their config means the same
/// container here; its requests carry no config to say otherwise. DRA mode
/// gives the same unless the claim's config says `umad: false`, so switching
/// modes changes no container. The default is safe on a RoCE VF: its `umadN`
/// reaches only the VF's own port (MADs on QP1, such as CM and the port
/// counters `perfquery` reads) from the VF's own GIDs, and a RoCE port has no
/// QP0 or subnet manager, so `issmN` changes nothing there; unlike the
/// configfs of issue 36, nothing beyond the device handed out becomes reachable.
pub fn device_nodes(rdma: &[RdmaInfo], vfio: Option<&CharDev>, mad: bool) -> Vec<String> {
    let is_mad = |c: &&CharDev| c.name.starts_with("umad") || c.name.starts_with("issm");
    let mut out: Vec<String> = (rdma.iter().flat_map(|r| &r.char_devs))
        .filter(|c| mad || !is_mad(c))
        .map(|c| c.node_path.to_string_lossy().into_owned())
        .collect();
    if let Some(g) = vfio {
        out.push(VFIO_CONTAINER.to_string());
        out.push(g.node_path.to_string_lossy().into_owned());
    }
    out
}

/// Whether the pool's CDI spec defines a CDI device for `d`, and so whether
/// Allocate names it: only when the device has container edits (its node
/// paths, or the RDMA device variable), since the CDI library refuses a
/// device without any ("invalid device, empty device edits",
/// container-device-interface `pkg/cdi/device.go`) and with it the whole spec.
pub fn cdi_named(pool: &Pool, d: &Device) -> bool {
    hands_out_rdma(pool, d) || !node_paths(pool, d).is_empty()
}

/// `PCIDEVICE_<RES>_INFO` entry of one device, as sriov-network-device-plugin
/// builds it: one object per info provider, by provider name
/// (`pkg/devices/api.go` `GetEnvVal`), each a string map:
/// - `generic`: `deviceID` (always; `pkg/infoprovider/genericInfoProvider.go`);
/// - `rdma`, when the pool hands out the device's RDMA devices: the container
///   paths of `uverbs`, `umad`, `issm` and `rdma_cm`, and `rdma_dev`, the
///   first RDMA device of the function (`rdmaInfoProvider.go` `GetEnvVal`);
/// - `vfio` for a VF bound to vfio-pci: `mount` (the container device) and
///   `dev-mount` (the group; `vfioInfoProvider.go`);
/// - `extra` whenever the pool's config has `additionalInfo`, possibly `{}`
///   (`pkg/netdevice/pciNetDevice.go` adds the provider when
///   `rc.AdditionalInfo != nil`; `extraInfoProvider.go`).
#[cfg(feature = "daemon")]
fn info_entry(pool: &Pool, d: &Device, rdma_cm: bool) -> serde_json::Value {
    let mut entry = serde_json::Map::new();
    entry.insert("generic".into(), serde_json::json!({ "deviceID": d.id }));
    if hands_out_rdma(pool, d) {
        let mut rdma = serde_json::Map::new();
        for c in d.rdma.iter().flat_map(|r| &r.char_devs) {
            let key = ["uverbs", "umad", "issm"].into_iter().find(|k| c.name.starts_with(k));
            if let Some(k) = key {
                rdma.insert(k.into(), c.node_path.to_string_lossy().into_owned().into());
            }
        }
        if rdma_cm {
            rdma.insert("rdma_cm".into(), RDMA_CM.into());
        }
        if let Some(r) = d.rdma.first() {
            rdma.insert("rdma_dev".into(), r.name.clone().into());
        }
        entry.insert("rdma".into(), rdma.into());
    }
    if let Some(g) = &d.vfio {
        entry.insert(
            "vfio".into(),
            serde_json::json!({ "mount": VFIO_CONTAINER, "dev-mount": g.node_path.to_string_lossy() }),
        );
    }
    if pool.config.additional_info.is_some() {
        let extra = pool.config.extra_info(&d.id);
        entry.insert("extra".into(), serde_json::to_value(extra).unwrap_or_default());
    }
    entry.into()
}

/// The response for one container. `ids` must resolve (see [`resolve`]).
#[cfg(feature = "daemon")]
pub fn container_response(pool: &Pool, ids: &[String]) -> Result<ContainerAllocateResponse, AllocError> {
    let devs = resolve(pool, ids)?;
    let mut specs: Vec<DeviceSpec> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |path: String, specs: &mut Vec<DeviceSpec>| {
        if seen.insert(path.clone()) {
            specs.push(DeviceSpec {
                container_path: path.clone(),
                host_path: path,
                permissions: "rw".into(),
            });
        }
    };
    for d in &devs {
        for p in node_paths(pool, d) {
            push(p, &mut specs);
        }
    }
    let rdma_cm = pool.rdma_cm && devs.iter().any(|d| hands_out_rdma(pool, d));
    if rdma_cm {
        push(RDMA_CM.to_string(), &mut specs);
    }

    let c = &pool.config;
    let mut envs = HashMap::new();
    if c.mode == Mode::Vf {
        let info: serde_json::Map<String, serde_json::Value> =
            devs.iter().map(|d| (d.id.clone(), info_entry(pool, d, rdma_cm))).collect();
        let base = names::pcidevice_env(&c.prefix, &c.name);
        envs.insert(base.clone(), devs.iter().map(|d| d.id.as_str()).collect::<Vec<_>>().join(","));
        envs.insert(format!("{base}_INFO"), serde_json::Value::Object(info).to_string());
    }
    let mut rdma: Vec<&crate::pools::RdmaInfo> = Vec::new();
    for r in devs.iter().filter(|d| hands_out_rdma(pool, d)).flat_map(|d| &d.rdma) {
        if !rdma.iter().any(|x| x.name == r.name) {
            rdma.push(r);
        }
    }
    if !rdma.is_empty() {
        let stem = names::pool_env_stem(&c.name);
        let list = |f: &dyn Fn(&str) -> String| rdma.iter().map(|r| f(&r.name)).collect::<Vec<_>>().join(",");
        envs.insert(format!("{stem}_RDMA_DEVICES"), list(&|n| n.to_string()));
        envs.insert(format!("{stem}_UCX_NET_DEVICES"), list(&|n| format!("{n}:1")));
        if rdma.iter().all(|r| r.link_layer == Some(LinkLayer::Ethernet)) {
            envs.insert("NCCL_IB_ROCE_VERSION_NUM".into(), "2".into());
        }
    }
    let cdi_devices = devs
        .iter()
        .filter(|d| cdi_named(pool, d))
        .map(|d| CdiDevice { name: cdi_name(pool, &d.id) })
        .collect();
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
/// 2. devices that are really free before ones a pod still holds (the kubelet
///    frees a device when the pod ends, possibly before the CNI has taken the VF
///    back out of the pod's namespace);
/// 3. stay on one NUMA node when the request fits there (the NUMA node of the
///    `must` devices, else the one that fits best for `pack`, most room for `spread`);
/// 4. with `gpuAffinity`, prefer devices behind a PCIe switch that hosts a GPU;
/// 5. `pack`: fill one PF (group) before the next, best fit first; `spread`:
///    round-robin across PFs.
///
/// Unknown and Unhealthy IDs in `available` are never chosen. If fewer than
/// `size` usable devices exist, all of them are returned.
pub fn preferred(pool: &Pool, available: &[String], must: &[String], size: usize) -> Vec<String> {
    // Never sized by the request alone: a size far beyond the pool only costs
    // what the pool can fill (see [`check_preferred`] for what the server accepts).
    let mut out: Vec<String> = Vec::with_capacity(size.min(pool.devices.len() + must.len()));
    for m in must {
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    if out.len() >= size {
        return out;
    }
    let mut usable: Vec<&Device> = available
        .iter()
        .filter(|id| !out.contains(id))
        .filter_map(|id| pool.device(id))
        .filter(|d| d.health.is_healthy())
        .collect();
    usable.sort_by(|a, b| a.id.cmp(&b.id));
    usable.dedup_by(|a, b| a.id == b.id);
    let (free, held): (Vec<&Device>, Vec<&Device>) = usable.into_iter().partition(|d| !d.in_use);
    let must_devs: Vec<&Device> = must.iter().filter_map(|m| pool.device(m)).collect();
    let need = size - out.len();
    if free.len() >= need {
        choose(pool, free, &must_devs, need, &mut out);
    } else {
        let rest = need - free.len();
        out.extend(free.into_iter().map(|d| d.id.clone()));
        choose(pool, held, &must_devs, rest, &mut out);
    }
    out
}

/// Picks `need` of `cands` into `out` by NUMA, GPU affinity and policy.
fn choose(pool: &Pool, mut cands: Vec<&Device>, must_devs: &[&Device], need: usize, out: &mut Vec<String>) {
    let size = out.len() + need;
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
                        return;
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
                            return;
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
}
