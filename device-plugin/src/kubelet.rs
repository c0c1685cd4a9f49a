//! Talking to the kubelet: registration over `<kubelet-dir>/kubelet.sock`, a
//! gRPC channel over any unix socket, and an inotify watch of a directory.
//!
//! When the kubelet restarts it deletes every socket in its directory and
//! creates a new `kubelet.sock`; the daemon sees both through [`watch_dir`]
//! (no polling loop) and re-serves and re-registers within the event's latency.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use crate::api::registration_client::RegistrationClient;
use crate::api::{DevicePluginOptions, RegisterRequest};
use crate::API_VERSION;

/// The kubelet's registration socket name.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// Registration failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// Could not connect to the socket.
    #[error("cannot connect to {path}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The kubelet refused or the call failed.
    #[error("Register of {resource} at {path} failed: {status}")]
    Register {
        /// Socket path.
        path: PathBuf,
        /// Resource name.
        resource: String,
        /// gRPC status.
        status: tonic::Status,
    },
    /// No answer in time.
    #[error("Register of {resource} at {path} timed out")]
    Timeout {
        /// Socket path.
        path: PathBuf,
        /// Resource name.
        resource: String,
    },
}

/// A gRPC channel over the unix socket at `path` (the URI is a placeholder
/// that tonic requires; the connector ignores it).
pub async fn connect_unix(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

/// Registers `resource` served on `<kubelet_dir>/<endpoint>` with the kubelet.
pub async fn register(kubelet_dir: &Path, endpoint: &str, resource: &str) -> Result<(), KubeletError> {
    let path = kubelet_dir.join(KUBELET_SOCKET);
    let call = async {
        let ch = connect_unix(&path)
            .await
            .map_err(|source| KubeletError::Connect { path: path.clone(), source })?;
        RegistrationClient::new(ch)
            .register(RegisterRequest {
                version: API_VERSION.into(),
                endpoint: endpoint.into(),
                resource_name: resource.into(),
                options: Some(DevicePluginOptions {
                    pre_start_required: false,
                    get_preferred_allocation_available: true,
                }),
            })
            .await
            .map_err(|status| KubeletError::Register {
                path: path.clone(),
                resource: resource.into(),
                status,
            })?;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .map_err(|_| KubeletError::Timeout { path: path.clone(), resource: resource.into() })?
}

/// A change in a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEvent {
    /// A file appeared (created, moved in) or was written and closed.
    Created(String),
    /// A file went away (deleted, moved out).
    Deleted(String),
    /// The directory itself was removed or the queue overflowed: re-check everything.
    Rescan,
}

struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Watches `dir` with inotify and sends its events until the receiver is
/// dropped. Must be called inside a tokio runtime.
///
/// If `dir` itself is removed or moved away (a kubelet reinstall, a host
/// cleanup), the watch waits for it to exist again (watching its nearest
/// existing ancestor, still no polling), watches it anew, and then
/// sends [`DirEvent::Rescan`] followed by a [`DirEvent::Created`] for every
/// entry already in it, so a `kubelet.sock` created meanwhile is not missed.
pub fn watch_dir(dir: &Path) -> std::io::Result<mpsc::Receiver<DirEvent>> {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(std::io::Error::from)?;
    let mut wd = ino.add_watch(dir, WATCH_MASK).map_err(std::io::Error::from)?;
    // SAFETY: `InotifyFd` owns the inotify fd; it stays open, and `as_raw_fd`
    // returns the same fd, until the `AsyncFd` (and with it the value) is dropped.
    let fd = unsafe { AsyncFd::register_with_interest(InotifyFd(ino), tokio::io::Interest::READABLE) }?;
    let (tx, rx) = mpsc::channel(256);
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable().await else { return };
            let evs = match guard.get_inner().0.read_events() {
                Ok(evs) => evs,
                Err(nix::errno::Errno::EAGAIN) => {
                    guard.clear_ready();
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "inotify read failed; directory watch stops");
                    return;
                }
            };
            drop(guard);
            let mut gone = false;
            for e in evs {
                let overflow = e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW); // has no watch of its own
                if e.wd != wd && !overflow {
                    continue; // an event of a watch we already replaced
                }
                if e.mask.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF) {
                    gone = true;
                    continue;
                }
                if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                    continue;
                }
                let name = e.name.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let ev = if overflow {
                    DirEvent::Rescan
                } else if e.mask.intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM) {
                    DirEvent::Deleted(name)
                } else {
                    DirEvent::Created(name)
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
            if !gone {
                continue;
            }
            tracing::warn!(dir = %dir.display(), "watched directory removed; waiting for it to come back");
            // A moved directory keeps its watch: drop it (it may already be gone).
            let _ = fd.get_ref().0.rm_watch(wd);
            wd = match wait_for_dir(&fd, &dir, &tx).await {
                Some(w) => w,
                None => return,
            };
            tracing::info!(dir = %dir.display(), "watched directory is back; watching it again");
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            names.sort();
            for ev in std::iter::once(DirEvent::Rescan).chain(names.into_iter().map(DirEvent::Created)) {
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// Waits, on inotify events of the nearest existing ancestor, until `dir`
/// exists again and can be watched; `None` when the receiver is gone.
async fn wait_for_dir(
    fd: &AsyncFd<InotifyFd>,
    dir: &Path,
    tx: &mpsc::Sender<DirEvent>,
) -> Option<nix::sys::inotify::WatchDescriptor> {
    let ino = &fd.get_ref().0;
    loop {
        if tx.is_closed() {
            return None;
        }
        // Watch the ancestor first, then look: a creation in between is not missed.
        let ancestor = dir.ancestors().skip(1).find(|a| a.is_dir()).unwrap_or(Path::new("/"));
        let aw = ino
            .add_watch(
                ancestor,
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE_SELF,
            )
            .ok();
        if let Ok(w) = ino.add_watch(dir, WATCH_MASK) {
            if let Some(aw) = aw {
                let _ = ino.rm_watch(aw);
            }
            return Some(w);
        }
        let Some(aw) = aw else {
            // Cannot watch any ancestor (no permission): look again after a while.
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        // A creation under the ancestor (maybe only an intermediate directory),
        // or the ancestor itself gone: look again. Other events (the IN_IGNORED
        // of a watch we removed) do not count.
        let woken = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE_SELF;
        loop {
            let Ok(mut guard) = fd.readable().await else { return None };
            match guard.get_inner().0.read_events() {
                Ok(evs) if evs.iter().any(|e| e.wd == aw && e.mask.intersects(woken)) => break,
                Ok(_) => {}
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => {
                    tracing::warn!(error = %e, "inotify read failed; directory watch stops");
                    return None;
                }
            }
        }
        let _ = ino.rm_watch(aw);
    }
}

const WATCH_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(rx: &mut mpsc::Receiver<DirEvent>) -> DirEvent {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an event in time")
            .expect("open")
    }

    /// A socket file, as the kubelet and plugins make them (one IN_CREATE).
    fn sock(p: &Path) {
        drop(std::os::unix::net::UnixListener::bind(p).unwrap());
    }

    /// The watched directory and its parent are removed; when they are made
    /// again (the parent first, then the directory, then a socket in it), the
    /// watch follows without polling and reports what is already there.
    /// CPU time of this process so far.
    fn cpu() -> Duration {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a rusage into the pointer it is given.
        let u = unsafe {
            libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
            u.assume_init()
        };
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(u.ru_utime) + tv(u.ru_stime)
    }

    // Two workers: a watch task that spun would not starve the test's timers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_directory_is_watched_again_when_it_comes_back() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("kubelet/device-plugins");
        std::fs::create_dir_all(&dir).unwrap();
        let mut rx = watch_dir(&dir).unwrap();
        sock(&dir.join("a.sock"));
        assert_eq!(next(&mut rx).await, DirEvent::Created("a.sock".into()));
        std::fs::remove_dir_all(t.path().join("kubelet")).unwrap();
        assert_eq!(next(&mut rx).await, DirEvent::Deleted("a.sock".into()));
        // While the directory is gone the watch waits on events: it does not spin.
        let c0 = cpu();
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::create_dir(t.path().join("kubelet")).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let used = cpu() - c0;
        assert!(used < Duration::from_millis(150), "{used:?} of CPU in 600 ms of waiting");
        std::fs::create_dir(&dir).unwrap();
        sock(&dir.join(KUBELET_SOCKET));
        assert_eq!(next(&mut rx).await, DirEvent::Rescan);
        // kubelet.sock is reported as already there, and once more as an event
        // if it was made after the new watch; either way it is seen.
        assert_eq!(next(&mut rx).await, DirEvent::Created(KUBELET_SOCKET.into()));
        sock(&dir.join("b.sock"));
        loop {
            match next(&mut rx).await {
                DirEvent::Created(n) if n == "b.sock" => break,
                DirEvent::Created(n) if n == KUBELET_SOCKET => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
