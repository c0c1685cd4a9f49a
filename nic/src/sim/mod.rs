//! The simulated node: a [`NodeDesc`] materialised as a sysfs + `/dev` tree
//! in a temporary directory, laid out the way a real kernel lays it out, so
//! that [`crate::discover`] (and every binary given `--sysfs-root`) reads it
//! exactly as it would read `/sys`.
//!
//! ```text
//! <tmp>/node.yaml                       the description (DCB settings for the operator)
//! <tmp>/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/0000:3c:00.0/0000:3d:00.0/
//!     vendor device class numa_node sriov_totalvfs sriov_numvfs virtfnN -> ../<vf>
//!     driver -> ../../../../../../bus/pci/drivers/mlx5_core
//!     net/ens1f0np0/{ifindex,speed,operstate,mtu,address,type,carrier,ecn/..,qos/trust}
//!     mlx5_core.eth.0/  mlx5_core.rdma.0/infiniband/mlx5_0/{node_guid,ports/1/..}
//!     mlx5_core.rdma.0/infiniband_verbs/uverbs0/{ibdev,dev}
//!     mlx5_core.rdma.0/infiniband_mad/{umad0,issm0}/{ibdev,port,dev}
//! <tmp>/sys/bus/pci/devices/<bdf> -> ../../../devices/pci…/<bdf>
//! <tmp>/sys/class/{net,infiniband,infiniband_verbs,infiniband_mad}/<name> -> ../../devices/…
//! <tmp>/sys/kernel/config/rdma_cm/<rdmadev>/ports/1/{default_roce_mode,default_roce_tos}
//! <tmp>/sys/module/ib_core/parameters/netns_mode      Y (shared) or N (exclusive)
//! <tmp>/sys/kernel/iommu_groups/<N>/devices/<bdf> -> ../../../../devices/…/<bdf>
//! <tmp>/dev/infiniband/{uverbsN,umadN,issmN,rdma_cm}
//! <tmp>/dev/vfio/{vfio,<N>}
//! ```
//!
//! ## Deterministic rules (documented because tests and docs rely on them)
//! - **Bridges.** A device behind a switch sits under `<root port>/<switch upstream>/<downstream>`,
//!   one downstream port `DDDD:<up bus+1>:<k>.0` per distinct device bus behind that switch
//!   (k counts from 0 in order of appearance). A device on bus 00 sits directly under
//!   `pciDDDD:00` (integrated); any other switchless device bus gets its own root port
//!   `DDDD:00:<k>.0` (k from 1).
//! - **VF addresses** (SR-IOV `First VF Offset`/`VF Stride`, PCIe spec 9.3.3.9/10): VF `i` of a PF
//!   has routing id `PF + offset + i` (stride 1, carrying into the next device/bus). For the j-th
//!   PF of a slot (PFs sorted by function): mlx5 `offset = (PFs in slot - j) + Σ_{k<j} totalVfs_k`
//!   (VFs follow the last PF function, as ConnectX firmware does); E810 `offset = (8 - j) +
//!   Σ_{k<j} totalVfs_k` (VFs start on the next device number).
//! - **Numbering** (kernel ida: lowest free number) in PCI order, PFs first then VFs (PF by PF,
//!   VF by index): `mlx5_N` / `irdmaN` RDMA names (naming `mlx5`), `uverbsN`, `umadN`/`issmN`,
//!   aux ids `mlx5_core.{eth,rdma}.N`, `ice.roce.N`, `iavf.rdma.N`. `rocep` naming gives the PF
//!   `rocep<bus>s<dev>f<fn>` (decimal) and VF `i` `<that>v<i>`. Netdev ifindex: 2, 3, … in the same
//!   order. VF netdevs are `<pf netdev>v<i>` unless `vfNetdevPrefix`.
//! - **Addresses.** PF MACs use the vendor OUI, VF MACs are locally administered, both end in the
//!   PCI address. The n-th PF of the node (PCI order, from 0) has IPv4 `192.168.<n+1>.1`, its VF `i`
//!   `192.168.<n+1>.<i+2>` (none past .254); each RDMA port's GID table (8 entries here; 255 on
//!   mlx5 hardware) holds the link-local GID at 0 (RoCE v1) and 1 (RoCE v2) and, while the netdev
//!   is on the host with its IPv4, the IPv4-mapped GID at 2 and 3.
//! - **Char devices**: `uverbsN` 231:(192+N) for N < 32, `umadN` 231:N and `issmN` 231:(64+N) for
//!   N < 64 (`IB_UVERBS_MAJOR`, `IB_UVERBS_BASE_MINOR`, `IB_UMAD_MINOR_BASE`,
//!   `IB_UMAD_NUM_FIXED_MINOR` in drivers/infiniband/core/uverbs_main.c and user_mad.c); past the
//!   fixed ranges the kernel allocates a dynamic major, which the sim fixes at 240 (uverbs) and
//!   241 (umad; issm at minor +960). `rdma_cm` is a misc device (major 10, dynamic minor, 58 here).
//!   Real char devices when running as root, regular files otherwise (which discovery does
//!   not count as present: only a character device is one a container can use).
//! - **IOMMU groups**: every endpoint is its own group (ACS isolates each function), numbered
//!   lowest-free in the same order as above (PFs, then VFs, then GPUs): `<fn>/iommu_group ->
//!   kernel/iommu_groups/N`. A VF bound to vfio-pci gets `/dev/vfio/N` (major 242 stands in for
//!   the dynamic one) and the node `/dev/vfio/vfio` (misc 10:196).
//! - **In a pod** ([`Sim::move_vf_into_pod`]): the `net` and `infiniband` classes are
//!   namespace-tagged, so the VF's netdev and, in exclusive RDMA netns mode, its RDMA device
//!   vanish from the host's sysfs; `infiniband_verbs`, `infiniband_mad` and `/dev` stay.

pub mod desc;
mod kernel;
mod layout;
mod mutate;
mod render;
mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::pci::PciAddr;
use crate::roots::Roots;
use desc::{AdapterDesc, DescError, Model, NodeDesc, PfDesc};

use layout::{plan, yaml_err, Func, Role, RDMA_CM_DEV};
use tree::{io_err, Writer};

pub use kernel::sim_vf_stats;
pub use layout::{validate, GID_TBL_LEN};
pub use render::describe;

/// Why a simulated node could not be built or changed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The description is unusable.
    #[error(transparent)]
    Desc(#[from] DescError),
    /// Writing the tree failed.
    #[error("simulated node: cannot write {path:?}")]
    Io {
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A mutator named something the node does not have.
    #[error("simulated node has no {0}")]
    NotFound(String),
    /// A mutator asked for something the kernel would refuse.
    #[error("simulated node: {0}")]
    Refused(String),
}

/// Reads and validates a node description. Parse errors name the file, the
/// line and the field (`adapters[0].pfs[1].vfs: invalid type … at line 9 column 15`).
pub fn load_desc(path: impl AsRef<Path>) -> Result<NodeDesc, DescError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| DescError::Io { path: shown.clone(), source })?;
    let desc: NodeDesc =
        serde_yaml::from_str(&text).map_err(|source| DescError::Parse { path: shown.clone(), source })?;
    validate(&desc).map_err(|what| DescError::Invalid { path: shown, what })?;
    Ok(desc)
}

/// A generated node for benchmarks: `pfs` single-port ConnectX-6 Dx adapters,
/// each PF on its own bus with `vfs_per_pf` VFs, alternating NUMA nodes.
pub fn big_node(pfs: u32, vfs_per_pf: u32) -> NodeDesc {
    let adapters = (0..pfs)
        .map(|i| {
            let pf: PfDesc = serde_yaml::from_str(&format!(
                "{{bdf: \"0000:{:02x}:00.0\", netdev: \"ens{}f0np0\", vfs: {vfs_per_pf}, totalVfs: {}, \
                 numa: {}, mtu: 9000, rdma: mlx5_{i}}}",
                0x10 + i * 0x10,
                i + 1,
                vfs_per_pf.max(1),
                i % 2
            ))
            .expect("generated PF description is valid YAML");
            AdapterDesc { model: Model::ConnectX6Dx, pfs: vec![pf] }
        })
        .collect();
    NodeDesc {
        node: format!("big-{pfs}x{vfs_per_pf}"),
        switches: vec![],
        adapters,
        gpus: vec![],
        rdma_cm: true,
        rdma_netns_mode: Default::default(),
        irdma_roce_ena: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated node.

// fsblkcnt_t / c_ulong are u32 on some targets: the casts are not always no-ops.
#[allow(clippy::unnecessary_cast)]
fn default_parent() -> PathBuf {
    if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
        return std::env::temp_dir();
    }
    let shm = Path::new("/dev/shm");
    let roomy = nix::sys::statvfs::statvfs(shm)
        .map(|s| (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64) >= 512 << 20)
        .unwrap_or(false);
    if roomy && nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Where a tree lives: a temporary directory removed with the [`Sim`], or a
/// directory that outlives it ([`Sim::materialise_at`], [`Sim::open`]).
enum SimDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl SimDir {
    fn path(&self) -> &Path {
        match self {
            SimDir::Temp(t) => t.path(),
            SimDir::Kept(p) => p,
        }
    }
}

/// A materialised simulated node. A temporary tree lives as long as this
/// value; one made with [`Sim::materialise_at`] stays until removed.
pub struct Sim {
    dir: SimDir,
    desc: NodeDesc,
    funcs: BTreeMap<PciAddr, Func>,
    removed_char_devs: BTreeSet<String>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("path", &self.dir.path()).field("node", &self.desc.node).finish()
    }
}

impl Sim {
    /// Writes `desc` as a sysfs + `/dev` tree in a new temporary directory.
    ///
    /// The directory goes under `$TMPDIR` when that is set, else under `/dev/shm`
    /// when it is a writable tmpfs with at least 512 MiB free (in memory, like
    /// sysfs, and tens of times faster to fill than a disk), else under `/tmp`.
    pub fn materialise(desc: &NodeDesc) -> Result<Sim, SimError> {
        Sim::materialise_in(desc, &default_parent())
    }

    /// [`Sim::materialise`] in a new temporary directory under `parent`.
    pub fn materialise_in(desc: &NodeDesc, parent: &Path) -> Result<Sim, SimError> {
        let funcs = plan(desc).map_err(yaml_err)?;
        let dir = tempfile::Builder::new()
            .prefix("kube-rdma-sim-")
            .tempdir_in(parent)
            .map_err(|source| SimError::Io { path: parent.to_path_buf(), source })?;
        Sim::write(SimDir::Temp(dir), desc, funcs)
    }

    /// [`Sim::materialise`] at `dir`, which must not exist or be empty; the tree
    /// outlives the returned value (a node other processes read, such as the
    /// e2e cluster's, and later [`Sim::open`]).
    pub fn materialise_at(desc: &NodeDesc, dir: &Path) -> Result<Sim, SimError> {
        let funcs = plan(desc).map_err(yaml_err)?;
        if crate::sysfs::list_dir(dir).is_ok_and(|d| !d.is_empty()) {
            return Err(SimError::Refused(format!("{} is not empty", dir.display())));
        }
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        Sim::write(SimDir::Kept(dir.to_path_buf()), desc, funcs)
    }

    /// A tree [`Sim::materialise_at`] wrote earlier, as it is now: its
    /// `node.yaml` plus what the files say moved meanwhile (netdevs and, in
    /// exclusive mode, RDMA devices in a pod; removed VFs). Mutators then
    /// change it in place.
    pub fn open(dir: &Path) -> Result<Sim, SimError> {
        let desc = load_desc(dir.join("node.yaml"))?;
        let mut funcs = plan(&desc).map_err(yaml_err)?;
        let sys = dir.join("sys");
        funcs.retain(|_, f| matches!(f.role, Role::Bridge) || sys.join(f.dir()).exists());
        for f in funcs.values_mut() {
            let fdir = sys.join(f.dir());
            if let Some(n) = f.net.as_mut() {
                n.present = fdir.join("net").join(&n.name).exists();
            }
            let hidden = f
                .rdma_base()
                .zip(f.rdma.as_ref())
                .map(|(base, r)| !sys.join(base).join("infiniband").join(&r.name).exists());
            if let (Some(r), Some(h)) = (f.rdma.as_mut(), hidden) {
                r.in_other_netns = h;
            }
        }
        let removed_char_devs = BTreeSet::new();
        Ok(Sim { dir: SimDir::Kept(dir.to_path_buf()), desc, funcs, removed_char_devs })
    }

    fn write(dir: SimDir, desc: &NodeDesc, funcs: BTreeMap<PciAddr, Func>) -> Result<Sim, SimError> {
        let sim = Sim { dir, desc: desc.clone(), funcs, removed_char_devs: BTreeSet::new() };
        let w = sim.writer();
        for d in [
            "bus/pci/devices",
            "bus/pci/drivers",
            "bus/auxiliary/devices",
            "class/net",
            "class/infiniband",
            "class/infiniband_mad",
            "devices/virtual/net",
        ] {
            w.mkdir(Path::new(d))?;
        }
        w.file(Path::new("class/infiniband_verbs/abi_version"), "6")?;
        // ib_core's bool module parameter `netns_mode` (drivers/infiniband/core/device.c):
        // Y = shared (the boot default), N = exclusive.
        let shared = desc.rdma_netns_mode == desc::NetnsMode::Shared;
        w.file(Path::new("module/ib_core/parameters/netns_mode"), if shared { "Y" } else { "N" })?;
        if let Some(on) = desc.irdma_roce_ena {
            // Written as a bool module parameter prints; discovery also takes 1/0.
            w.file(Path::new("module/irdma/parameters/roce_ena"), if on { "Y" } else { "N" })?;
        }
        std::fs::create_dir_all(&w.dev).map_err(io_err(&w.dev))?;
        // Bridges first (parents), then functions in PCI order; PF directories exist before VF links.
        let order = |f: &&Func| match f.role {
            Role::Bridge => 0,
            Role::Pf { .. } | Role::Hca | Role::Gpu => 1,
            Role::Vf { .. } => 2,
        };
        let mut all: Vec<&Func> = sim.funcs.values().collect();
        all.sort_by_key(|f| (order(f), f.parent.as_os_str().len(), f.bdf));
        for f in all {
            w.write_func(f)?;
        }
        if desc.rdma_cm {
            w.char_dev("rdma_cm", RDMA_CM_DEV)?;
        }
        sim.save_desc()?;
        Ok(sim)
    }

    /// Loads a description file ([`load_desc`]) and materialises it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Sim, SimError> {
        Sim::materialise(&load_desc(path)?)
    }

    /// The roots to read the node from (`<dir>/sys`, `<dir>/dev`).
    pub fn roots(&self) -> Roots {
        Roots { sysfs: self.dir.path().join("sys"), dev: self.dir.path().join("dev") }
    }

    /// The description (kept in step with [`Sim::set_num_vfs`] and [`Sim::set_operstate`]).
    pub fn desc(&self) -> &NodeDesc {
        &self.desc
    }

    /// The temporary directory holding `sys/`, `dev/` and `node.yaml`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/node.yaml`, the serialized description.
    pub fn desc_path(&self) -> PathBuf {
        self.dir.path().join("node.yaml")
    }

    fn writer(&self) -> Writer {
        Writer {
            sys: self.dir.path().join("sys"),
            dev: self.dir.path().join("dev"),
            mknod: nix::unistd::geteuid().is_root(),
        }
    }

    fn save_desc(&self) -> Result<(), SimError> {
        let p = self.desc_path();
        let yaml =
            serde_yaml::to_string(&self.desc).map_err(|e| SimError::Refused(format!("serialize: {e}")))?;
        std::fs::write(&p, yaml).map_err(io_err(&p))
    }

    fn func_by_netdev(&mut self, netdev: &str) -> Result<&mut Func, SimError> {
        self.funcs
            .values_mut()
            .find(|f| f.net.as_ref().is_some_and(|n| n.name == netdev))
            .ok_or_else(|| SimError::NotFound(format!("netdev {netdev}")))
    }
}
