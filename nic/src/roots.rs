//! Where to read the node from: a sysfs root and a dev root.
//!
//! Every binary honours `KUBE_RDMA_SYSFS_ROOT` (default `/sys`) and
//! `KUBE_RDMA_DEV_ROOT` (default `/dev`); daemons also take `--sysfs-root` /
//! `--dev-root`. The roots only say where to *read*: paths handed to the
//! kubelet or a container runtime are always the node's real `/dev/...`.

use std::path::{Path, PathBuf};

/// Env var overriding the sysfs root.
pub const SYSFS_ROOT_ENV: &str = "KUBE_RDMA_SYSFS_ROOT";
/// Env var overriding the dev root.
pub const DEV_ROOT_ENV: &str = "KUBE_RDMA_DEV_ROOT";

/// The pair of roots a node is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// Stands for `/sys`.
    pub sysfs: PathBuf,
    /// Stands for `/dev`.
    pub dev: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self { sysfs: "/sys".into(), dev: "/dev".into() }
    }
}

impl Roots {
    /// Roots from explicit values, falling back to the environment, then to `/sys` and `/dev`.
    pub fn resolve(sysfs: Option<PathBuf>, dev: Option<PathBuf>) -> Self {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        Self {
            sysfs: sysfs.or_else(|| env(SYSFS_ROOT_ENV)).unwrap_or_else(|| "/sys".into()),
            dev: dev.or_else(|| env(DEV_ROOT_ENV)).unwrap_or_else(|| "/dev".into()),
        }
    }

    /// Roots from the environment only.
    pub fn from_env() -> Self {
        Self::resolve(None, None)
    }

    /// `<sysfs>/<rel>`; `rel` is written as under `/sys` without the leading slash.
    pub fn sys(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.sysfs.join(rel)
    }

    /// `<dev>/<rel>`; `rel` is written as under `/dev` without the leading slash.
    pub fn dev(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.dev.join(rel)
    }
}
