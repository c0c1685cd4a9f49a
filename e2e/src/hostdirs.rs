//! The host's mount-point directories, shared by every local cluster instance.
//!
//! `up` creates an empty directory on the host where a path of a real node
//! (`/var/lib/kubelet`, `/run/cdi`, ...) does not exist, and bind-mounts the
//! instance's own directory on it inside the node's mount namespace. A second
//! instance finds the directory there and uses it as it is. If the first
//! instance's `down` then removed it, the kernel would detach the second
//! instance's bind mount with it (since Linux 3.18 an rmdir of a directory that
//! is a mount point in another mount namespace unmounts it there), so the
//! registry `<cache>/host-dirs.json` lists the instances that are up and the
//! directories handed over by those that went down: the last instance down
//! removes them all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plumbing::atomic_file;
use serde::{Deserialize, Serialize};

use crate::{locks, node, peers};

/// `<cache>/host-dirs.json`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    /// Instances that are up (or on their way up), with their `state.json`: an entry whose
    /// state is gone belongs to an instance that died without `down`.
    pub users: BTreeMap<u8, PathBuf>,
    /// Directories created by instances that went down while others still used them.
    pub handed_over: Vec<PathBuf>,
}

/// What `down` does with the host directories.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Release {
    /// Remove these now (innermost last in creation order, so remove in reverse).
    pub remove: Vec<PathBuf>,
    /// Left on the host for the instances still up.
    pub kept: Vec<PathBuf>,
    /// Of `remove`, those another instance created (they were on the host before this one's `up`).
    pub others: Vec<PathBuf>,
}

/// Instance `me` goes down having created `mine`; `alive` says whether another user's
/// state file still exists. Updates the registry and says what to remove.
pub fn release(reg: &mut Registry, me: u8, mine: &[PathBuf], alive: impl Fn(&Path) -> bool) -> Release {
    reg.users.remove(&me);
    reg.users.retain(|_, state| alive(state));
    if reg.users.is_empty() {
        let others = std::mem::take(&mut reg.handed_over);
        let mut remove = others.clone();
        remove.extend(mine.iter().filter(|d| !others.contains(d)).cloned());
        return Release { remove, kept: vec![], others };
    }
    for d in mine {
        if !reg.handed_over.contains(d) {
            reg.handed_over.push(d.clone());
        }
    }
    Release { remove: vec![], kept: mine.to_vec(), others: vec![] }
}

impl Release {
    /// The `down` diff without the lines about directories this release explains: those
    /// kept for other instances, and those another instance made before this one's `up`.
    pub fn explain(&self, diff: Vec<String>) -> Vec<String> {
        let explained = |line: &str| {
            let Some((_, p)) = line.split_once(": ") else { return false };
            self.kept.iter().chain(&self.others).any(|d| Path::new(p).starts_with(d))
        };
        diff.into_iter().filter(|l| !explained(l)).collect()
    }
}

fn path() -> PathBuf {
    peers::cache_dir().join("host-dirs.json")
}

fn load() -> Result<Registry> {
    match std::fs::read_to_string(path()) {
        Ok(s) => serde_json::from_str(&s).with_context(|| format!("parsing {}", path().display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path().display())),
    }
}

fn save(reg: &Registry) -> Result<()> {
    if reg == &Registry::default() {
        return match std::fs::remove_file(path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        };
    }
    // Durable: after a crash, a cut-off registry would fail every later `up` and `down`.
    Ok(atomic_file::write_durable(&path(), &serde_json::to_vec_pretty(reg)?, None)?)
}

/// Registers this instance as a user before `up` makes or uses any mount point.
pub fn join(state: &Path) -> Result<()> {
    let _lock = locks::exclusive(".host-dirs.lock")?;
    let mut reg = load()?;
    reg.users.insert(node::instance(), state.to_path_buf());
    save(&reg)
}

/// Unregisters this instance at `down` and removes what no instance uses any more.
pub fn leave(mine: &[PathBuf]) -> Result<Release> {
    let _lock = locks::exclusive(".host-dirs.lock")?;
    let mut reg = load()?;
    let r = release(&mut reg, node::instance(), mine, |state| state.exists());
    for d in r.remove.iter().rev() {
        let _ = remove_empty_tree(d);
    }
    save(&reg)?;
    Ok(r)
}

/// Removes a directory tree we created as mount points, only if it holds no files.
fn remove_empty_tree(d: &Path) -> std::io::Result<()> {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type()?.is_dir() {
                remove_empty_tree(&e.path())?;
            }
        }
    }
    std::fs::remove_dir(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn the_first_of_two_instances_down_keeps_its_mount_points_for_the_other() {
        let mut reg = Registry::default();
        reg.users.insert(0, p("/var/lib/kube-rdma-e2e/state.json"));
        reg.users.insert(1, p("/var/lib/kube-rdma-e2e-1/state.json"));
        let r = release(&mut reg, 0, &[p("/run/cdi"), p("/var/lib/kubelet")], |_| true);
        assert!(r.remove.is_empty());
        assert_eq!(r.kept, vec![p("/run/cdi"), p("/var/lib/kubelet")]);
        assert_eq!(reg.handed_over, vec![p("/run/cdi"), p("/var/lib/kubelet")]);
        assert_eq!(reg.users.keys().collect::<Vec<_>>(), vec![&1]);

        let r = release(&mut reg, 1, &[], |_| true);
        assert_eq!(r.remove, vec![p("/run/cdi"), p("/var/lib/kubelet")]);
        assert_eq!(r.others, r.remove);
        assert_eq!(reg, Registry::default());
    }

    #[test]
    fn an_instance_that_died_without_down_does_not_keep_directories_forever() {
        let mut reg = Registry::default();
        reg.users.insert(3, p("/gone/state.json"));
        reg.users.insert(0, p("/var/lib/kube-rdma-e2e/state.json"));
        let r = release(&mut reg, 0, &[p("/run/cdi")], |state| state != Path::new("/gone/state.json"));
        assert_eq!(r.remove, vec![p("/run/cdi")]);
        assert!(r.others.is_empty());
        assert_eq!(reg, Registry::default());
    }

    #[test]
    fn the_down_diff_leaves_out_only_the_directories_the_release_explains() {
        let r = Release { remove: vec![], kept: vec![p("/run/cdi")], others: vec![p("/var/lib/kubelet")] };
        let diff = vec![
            "path added: /run/cdi".to_string(),
            "path removed: /var/lib/kubelet".to_string(),
            "path added: /etc/cdi".to_string(),
            "link added: kre2e-host".to_string(),
        ];
        assert_eq!(r.explain(diff), vec!["path added: /etc/cdi", "link added: kre2e-host"]);
    }
}
