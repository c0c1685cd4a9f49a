//! Reads of sysfs that block in the kernel, for the daemon in either mode: a
//! FUSE mount whose server never answers (every access below it waits in the
//! kernel, killable only, as a read from a hung driver does), made in the
//! daemon's own mount namespace so that the host never sees it; and the
//! daemon's `/healthz` and `/metrics` as the tests read them.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// Makes `c` start in a mount namespace of its own, with `/` private, so
/// that what is mounted there later stays there.
pub fn in_own_mount_ns(c: &mut tokio::process::Command) {
    // SAFETY: only async-signal-safe calls (unshare, mount) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The directory of PF0's netdev (`ens1f0np0`) in the simulated tree.
pub fn pf0_netdev_dir(sim: &nic::sim::Sim) -> PathBuf {
    let p = sim.roots().sysfs.join("bus/pci/devices/0000:3d:00.0/net/ens1f0np0");
    std::fs::canonicalize(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Runs `f` in the mount namespace of process `pid`, in a child that then
/// exits (`true`); what it mounts stays in that namespace.
pub fn in_mount_ns_of(pid: u32, f: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) {
    let ns = File::open(format!("/proc/{pid}/ns/mnt")).unwrap();
    let nsfd = ns.as_raw_fd();
    let mut f = f;
    let mut c = std::process::Command::new("true");
    // SAFETY: setns and what `f` does (mount calls on prepared C strings) are
    // async-signal-safe; nothing allocates between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if libc::setns(nsfd, libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f()
        });
    }
    let st = c.status().expect("run a child in the daemon's mount namespace");
    assert!(st.success(), "{st}");
    drop(ns);
}

/// A FUSE mount over `target` in `pid`'s mount namespace whose server never
/// answers: every access below it waits in the kernel. The returned device
/// file keeps the connection (and so the waits) alive; dropping it aborts
/// the connection (the waiting reads fail with ENOTCONN).
pub fn mount_never_answering(pid: u32, target: &Path) -> File {
    let fuse = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .expect("/dev/fuse (this test needs FUSE: modprobe fuse)");
    let dir = CString::new(target.as_os_str().as_bytes()).unwrap();
    let data = CString::new(format!("fd={},rootmode=40000,user_id=0,group_id=0", fuse.as_raw_fd())).unwrap();
    in_mount_ns_of(pid, move || {
        let flags = libc::MS_NOSUID | libc::MS_NODEV;
        // SAFETY: NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(c"kr-stuck".as_ptr(), dir.as_ptr(), c"fuse".as_ptr(), flags, data.as_ptr().cast())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    });
    fuse
}

/// Detaches the mount over `target` in `pid`'s mount namespace.
pub fn unmount(pid: u32, target: &Path) {
    let dir = CString::new(target.as_os_str().as_bytes()).unwrap();
    in_mount_ns_of(pid, move || {
        // SAFETY: a NUL-terminated string that outlives the call.
        if unsafe { libc::umount2(dir.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    });
}

/// `GET path` over plain HTTP/1.1: (status code, body).
pub async fn try_http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

/// [`try_http_get`] of a port that is listening.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    try_http_get(addr, path).await.unwrap_or_else(|e| panic!("GET {path} from the metrics port {addr}: {e}"))
}

/// `GET /healthz` until it answers `code` with every one of `want` in its
/// body; a port not listening yet is one that has not said it yet.
pub async fn healthz_says(metrics: &str, code: u16, want: &[&str]) -> String {
    let deadline = Instant::now() + T;
    loop {
        let (c, body) = match try_http_get(metrics, "/healthz").await {
            Ok(answer) => answer,
            Err(e) => (0, e.to_string()),
        };
        if c == code && want.iter().all(|w| body.contains(w)) {
            return body;
        }
        assert!(Instant::now() < deadline, "/healthz never answered {code} with {want:?}: {c} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the unlabelled series `name` in `/metrics`.
pub async fn metric(metrics: &str, name: &str) -> f64 {
    let page = http_get(metrics, "/metrics").await.1;
    let v = page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
    v.unwrap_or_else(|| panic!("no {name} in\n{page}")).trim().parse().unwrap()
}

/// Sends SIGTERM to `child`, which must exit 0 within a second; `log` is
/// what it logged, for the failure's message.
pub async fn sigterm_ends_within_a_second(child: &mut tokio::process::Child, log: impl Fn() -> String) {
    let pid = nix::unistd::Pid::from_raw(child.id().expect("the process runs") as i32);
    let t0 = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let st = tokio::time::timeout(Duration::from_secs(1), child.wait())
        .await
        .unwrap_or_else(|_| panic!("SIGTERM did not end the process within 1 s:\n{}", log()))
        .unwrap();
    assert!(st.success(), "exit after SIGTERM: {st}\n{}", log());
    eprintln!("SIGTERM to exit: {:?}", t0.elapsed());
}
