//! Network namespaces: open one by path, run code inside it, create and
//! delete named ones (the `ip netns` layout under `/run/netns`).
//!
//! A netlink socket belongs to the netns of the thread that opened it, so the
//! way to talk to another namespace is: spawn a thread, `setns(2)` it into the
//! target, open the socket (or do the whole job) there; the thread then ends.
//! Nothing here changes the namespace of the calling thread.
//!
//! ```no_run
//! use nic::netns::Netns;
//! let pod = Netns::open("/var/run/netns/cni-1234").unwrap();
//! let links = pod.run(|| std::fs::read_dir("/sys/class/net").map(|d| d.count())).unwrap();
//! ```

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sched::{setns, unshare, CloneFlags};

/// Where `ip netns` keeps named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// What went wrong with a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The path could not be opened.
    #[error("cannot open network namespace {path}")]
    Open {
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The path exists but is not a network namespace.
    #[error("{path} is not a network namespace (expected an nsfs file such as /proc/PID/ns/net or /run/netns/NAME)")]
    NotNetns { path: PathBuf },
    /// `setns(2)` failed.
    #[error("setns into {path} failed")]
    Setns {
        path: PathBuf,
        /// The errno.
        #[source]
        source: nix::Error,
    },
    /// Creating or deleting a named namespace failed.
    #[error("cannot {op} network namespace {name}")]
    Named {
        op: &'static str,
        name: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The worker thread panicked.
    #[error("thread running in network namespace {path} panicked")]
    Panicked { path: PathBuf },
}

/// An open network namespace (holds the nsfs file descriptor, so the
/// namespace stays alive while this value exists).
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

// From include/uapi/linux/magic.h.
const NSFS_MAGIC: i64 = 0x6e73_6673;
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

impl Netns {
    /// Opens a namespace file (`/proc/PID/ns/net`, `/run/netns/NAME`,
    /// `/var/run/netns/...`) and checks that it is one.
    ///
    /// The filesystem type is checked before the open, as libcni's
    /// `ns.GetNS` does (`IsNSorErr`: `statfs`), because `CNI_NETNS` comes from
    /// the caller: opening a FIFO there would wait for a writer forever. The
    /// open is non-blocking all the same (a path swapped between the two calls
    /// cannot hang it either), and the open file is checked again.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, NetnsError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = path.as_ref().to_path_buf();
        let check = |magic: i64| {
            if magic != NSFS_MAGIC && magic != PROC_SUPER_MAGIC {
                return Err(NetnsError::NotNetns { path: path.clone() });
            }
            Ok(())
        };
        let st = nix::sys::statfs::statfs(&path)
            .map_err(|e| NetnsError::Open { path: path.clone(), source: e.into() })?;
        check(st.filesystem_type().0 as i64)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|source| NetnsError::Open { path: path.clone(), source })?;
        let st = nix::sys::statfs::fstatfs(&file)
            .map_err(|e| NetnsError::Open { path: path.clone(), source: e.into() })?;
        check(st.filesystem_type().0 as i64)?;
        Ok(Self { file, path })
    }

    /// The namespace of the calling thread.
    pub fn current() -> Result<Self, NetnsError> {
        Self::open("/proc/thread-self/ns/net")
    }

    /// A fresh, unnamed namespace (lives as long as the returned value).
    /// Used as a private waiting room, e.g. to rename a link where no other
    /// link can clash with it.
    pub fn new_anonymous() -> Result<Self, NetnsError> {
        let path = PathBuf::from("(anonymous)");
        std::thread::spawn(move || -> Result<Self, NetnsError> {
            unshare(CloneFlags::CLONE_NEWNET)
                .map_err(|source| NetnsError::Setns { path: path.clone(), source })?;
            let file = File::open("/proc/thread-self/ns/net")
                .map_err(|source| NetnsError::Open { path: path.clone(), source })?;
            Ok(Self { file, path })
        })
        .join()
        .map_err(|_| NetnsError::Panicked { path: "(anonymous)".into() })?
    }

    /// The path this namespace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw descriptor (for `IFLA_NET_NS_FD` / `RDMA_NLDEV_NET_NS_FD`).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// `(st_dev, st_ino)` of the namespace: equal for two handles of the same netns.
    pub fn id(&self) -> Result<(u64, u64), NetnsError> {
        let st = nix::sys::stat::fstat(&self.file)
            .map_err(|e| NetnsError::Open { path: self.path.clone(), source: e.into() })?;
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// Runs `f` on a dedicated thread that has entered this namespace, and
    /// returns its result. The calling thread's namespace is untouched.
    ///
    /// The thread ends in the namespace rather than switching back: it is
    /// never reused, and switching back needs the thread's own
    /// `/proc/thread-self/ns/net`, whose proc entries the kernel flushes when
    /// the thread exits, ~0.4 ms per thread on our VMs (nic/examples/netns_cost.rs).
    pub fn run<F, T>(&self, f: F) -> Result<T, NetnsError>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        std::thread::scope(|s| {
            let h = s.spawn(|| -> Result<T, NetnsError> {
                setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET)
                    .map_err(|source| NetnsError::Setns { path: self.path.clone(), source })?;
                Ok(f())
            });
            h.join().map_err(|_| NetnsError::Panicked { path: self.path.clone() })?
        })
    }
}

/// A thread started by [`Netns::spawn`].
#[derive(Debug)]
pub struct Spawned<T> {
    thread: std::thread::JoinHandle<Result<T, NetnsError>>,
    path: PathBuf,
}

impl<T> Spawned<T> {
    /// Waits for the thread and returns what it returned.
    pub fn join(self) -> Result<T, NetnsError> {
        self.thread.join().map_err(|_| NetnsError::Panicked { path: self.path })?
    }
}

impl Netns {
    /// Runs `f` on a new thread that enters this namespace, without waiting:
    /// the caller goes on with other work and [`Spawned::join`]s later (e.g.
    /// opens a socket in a pod while doing something else in its own netns).
    pub fn spawn<F, T>(&self, f: F) -> Result<Spawned<T>, NetnsError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = self.path.clone();
        let file = self.file.try_clone().map_err(|source| NetnsError::Open { path: path.clone(), source })?;
        let p = path.clone();
        let thread = std::thread::spawn(move || -> Result<T, NetnsError> {
            // This thread exists only to run `f` there and ends with it.
            setns(file.as_fd(), CloneFlags::CLONE_NEWNET)
                .map_err(|source| NetnsError::Setns { path: p, source })?;
            Ok(f())
        });
        Ok(Spawned { thread, path })
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// A named namespace (`ip netns add NAME`), deleted when dropped unless
/// [`NamedNetns::keep`] is called. Meant for tests and the kernel lab.
#[derive(Debug)]
pub struct NamedNetns {
    name: String,
    path: PathBuf,
    keep: bool,
}

impl NamedNetns {
    /// Creates `/run/netns/NAME` bound to a fresh network namespace, as
    /// `ip netns add NAME` does.
    pub fn create(name: &str) -> Result<Self, NetnsError> {
        let err = |source: std::io::Error| NetnsError::Named { op: "create", name: name.to_string(), source };
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad netns name")));
        }
        std::fs::create_dir_all(NETNS_RUN_DIR).map_err(err)?;
        make_run_dir_shared().map_err(err)?;
        let path = Path::new(NETNS_RUN_DIR).join(name);
        std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(err)?;
        let target = path.clone();
        let res = std::thread::spawn(move || -> std::io::Result<()> {
            unshare(CloneFlags::CLONE_NEWNET)?;
            nix::mount::mount(
                Some("/proc/thread-self/ns/net"),
                &target,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND,
                None::<&str>,
            )?;
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("netns creation thread panicked")));
        if let Err(e) = res {
            let _ = std::fs::remove_file(&path);
            return Err(err(e));
        }
        Ok(Self { name: name.to_string(), path, keep: false })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the namespace.
    pub fn open(&self) -> Result<Netns, NetnsError> {
        Netns::open(&self.path)
    }

    /// Do not delete the namespace on drop.
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }

    /// Deletes the namespace now (`ip netns delete NAME`).
    pub fn delete(mut self) -> Result<(), NetnsError> {
        self.keep = true;
        delete_named(&self.name)
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        if !self.keep {
            let _ = delete_named(&self.name);
        }
    }
}

/// Makes `/run/netns` a shared bind mount of itself, as `ip netns add` does
/// (iproute2 ip/ipnetns.c). Without it, the first tool that does so later
/// (ip, podman) stacks a mount over the directory and hides the namespaces
/// created before, which then can never be unmounted by path.
fn make_run_dir_shared() -> std::io::Result<()> {
    use nix::mount::{mount, MsFlags};
    let shared = || {
        mount(None::<&str>, NETNS_RUN_DIR, None::<&str>, MsFlags::MS_SHARED | MsFlags::MS_REC, None::<&str>)
    };
    match shared() {
        Ok(()) => Ok(()),
        Err(nix::Error::EINVAL) => {
            mount(
                Some(NETNS_RUN_DIR),
                NETNS_RUN_DIR,
                Some("none"),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            shared().map_err(Into::into)
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletes `/run/netns/NAME`: detaches the bind mount and removes the file.
/// The namespace itself goes away once nothing else holds it.
pub fn delete_named(name: &str) -> Result<(), NetnsError> {
    let path = Path::new(NETNS_RUN_DIR).join(name);
    let err = |source: std::io::Error| NetnsError::Named { op: "delete", name: name.to_string(), source };
    match nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
        Err(e) => return Err(err(e.into())),
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_netns_is_a_distinct_namespace_and_is_removed_on_drop() {
        let name = format!("nic-ut-{}", std::process::id());
        let ns = NamedNetns::create(&name).unwrap();
        let here = Netns::current().unwrap().id().unwrap();
        let there = ns.open().unwrap();
        assert_ne!(there.id().unwrap(), here);
        let inside = there.run(|| Netns::current().unwrap().id().unwrap()).unwrap();
        assert_eq!(inside, there.id().unwrap());
        assert_eq!(Netns::current().unwrap().id().unwrap(), here, "caller's netns changed");
        let p = ns.path().to_path_buf();
        drop(there);
        drop(ns);
        assert!(!p.exists());
    }

    #[test]
    fn spawn_runs_in_the_namespace_while_the_caller_goes_on() {
        let name = format!("nic-ut-sp-{}", std::process::id());
        let ns = NamedNetns::create(&name).unwrap();
        let there = ns.open().unwrap();
        let h = there.spawn(|| Netns::current().unwrap().id().unwrap()).unwrap();
        assert_ne!(Netns::current().unwrap().id().unwrap(), there.id().unwrap(), "caller stays home");
        assert_eq!(h.join().unwrap(), there.id().unwrap());
    }

    #[test]
    fn anonymous_netns_is_new_and_dies_with_its_handle() {
        let a = Netns::new_anonymous().unwrap();
        assert_ne!(a.id().unwrap(), Netns::current().unwrap().id().unwrap());
        // /proc/thread-self/net/dev: two header lines, then only `lo`.
        let dev = a.run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap()).unwrap();
        assert_eq!(
            dev.lines().skip(2).map(|l| l.split(':').next().unwrap().trim().to_string()).collect::<Vec<_>>(),
            ["lo"]
        );
    }

    #[test]
    fn open_rejects_regular_files() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(matches!(Netns::open(f.path()), Err(NetnsError::NotNetns { .. })));
        assert!(matches!(Netns::open("/nonexistent/ns"), Err(NetnsError::Open { .. })));
    }
}
