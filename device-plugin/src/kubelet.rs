//! Talking to the kubelet: registration over `<kubelet-dir>/kubelet.sock`, a
//! gRPC channel over any unix socket, and an inotify watch of a directory.
//!
//! When the kubelet restarts it deletes every socket in its directory and
//! creates a new `kubelet.sock`; the daemon sees both through [`watch_dir`]
//! (no polling loop) and re-serves and re-registers within the event's latency.
//! Only a removed directory is looked for periodically, until it is back.

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

/// How often to look for a watched directory that was removed. Only while it
/// is gone: a directory cannot be watched before it exists.
const DIR_GONE_POLL: Duration = Duration::from_millis(250);

/// Watches `dir` with inotify and sends its events until the receiver is
/// dropped. Must be called inside a tokio runtime.
///
/// If `dir` itself is removed or moved away (a kubelet reinstall, a host
/// cleanup), the watch waits for it to exist again, watches it anew, and then
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
            wd = loop {
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(DIR_GONE_POLL).await;
                if let Ok(w) = fd.get_ref().0.add_watch(&dir, WATCH_MASK) {
                    break w;
                }
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

const WATCH_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);
