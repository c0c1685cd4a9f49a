//! Processes of the test peers: started with their output in a log file, in
//! their own session (a terminal's Ctrl-C does not reach them), optionally
//! inside the node's network and mount namespaces (through `nsenter`, which
//! execs the program, so the pid we keep is the daemon's own), and stopped by
//! pid: SIGTERM, then SIGKILL after a grace period.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How to start one daemon.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// Short name (logs, messages).
    pub name: String,
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Where stdout and stderr go (appended).
    pub log: PathBuf,
    /// Run inside the network and mount namespaces of this process.
    pub ns_of: Option<i32>,
}

impl Spec {
    /// A daemon `name` running `program` with `args`, logging to `log`.
    pub fn new(name: &str, program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Spec {
        Spec {
            name: name.into(),
            program: program.into(),
            args: vec![],
            env: vec![],
            log: log.into(),
            ns_of: None,
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Spec
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: impl Into<String>) -> Spec {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Runs it in the namespaces of `pid`.
    pub fn in_ns_of(mut self, pid: Option<i32>) -> Spec {
        self.ns_of = pid;
        self
    }

    fn command(&self) -> Command {
        let mut c = match self.ns_of {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--target={pid}")).args(["--net", "--mount", "--"]).arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        c.args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }
}

/// A running daemon.
#[derive(Debug)]
pub struct Daemon {
    pub name: String,
    pub pid: i32,
    /// Its log file.
    pub log: PathBuf,
    child: Option<Child>,
}

/// Starts `spec`. The returned [`Daemon`] owns the child (reaped by
/// [`Daemon::stop`]); [`Daemon::detach`] lets it outlive this process.
pub fn spawn(spec: &Spec) -> Result<Daemon> {
    if let Some(dir) = spec.log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("opening {}", spec.log.display()))?;
    let err = log.try_clone().context("duplicating the log file")?;
    let mut cmd = spec.command();
    cmd.stdin(Stdio::null()).stdout(log).stderr(err);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let child =
        cmd.spawn().with_context(|| format!("starting {} ({})", spec.name, spec.program.display()))?;
    Ok(Daemon { name: spec.name.clone(), pid: child.id() as i32, log: spec.log.clone(), child: Some(child) })
}

impl Daemon {
    /// A daemon known by pid only (from a state file).
    pub fn from_pid(name: &str, pid: i32, log: &Path) -> Daemon {
        Daemon { name: name.into(), pid, log: log.into(), child: None }
    }

    /// Whether the process still runs (a zombie does not count).
    pub fn alive(&mut self) -> bool {
        if let Some(c) = &mut self.child {
            return matches!(c.try_wait(), Ok(None));
        }
        alive(self.pid)
    }

    /// Lets the process outlive this one; it keeps running when we exit.
    pub fn detach(mut self) -> (String, i32) {
        self.child.take();
        (self.name.clone(), self.pid)
    }

    /// SIGTERM, then SIGKILL after `grace`; waits until it is gone.
    pub fn stop(&mut self, grace: Duration) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.alive() {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
        if let Some(c) = &mut self.child {
            let _ = c.wait();
        } else {
            let until = Instant::now() + Duration::from_secs(10);
            while alive(self.pid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The last `n` lines of its log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }
}

/// Whether `pid` is a live, non-zombie process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3 (after the parenthesised command) is the state; Z = zombie, X = dead.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// The last `n` lines of a file (empty when unreadable).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Polls `ready` every 100 ms until it answers true, failing after `timeout`
/// with `what` and, if the daemon died meanwhile, its log.
pub fn wait_ready(
    d: &mut Daemon,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        if ready() {
            return Ok(t0.elapsed());
        }
        if !d.alive() {
            bail!("{} exited before {what}; last lines of {}:\n{}", d.name, d.log.display(), d.log_tail(30));
        }
        if t0.elapsed() > timeout {
            bail!(
                "{} not {what} after {:?}; last lines of {}:\n{}",
                d.name,
                timeout,
                d.log.display(),
                d.log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `f` until it answers `Some`, failing after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if t0.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `f` in the network namespace of `pid` (on a thread of its own, which
/// alone joins it: a netns belongs to a thread), or here when `None`.
pub fn in_netns_of<T: Send>(pid: Option<i32>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let Some(pid) = pid else { return f() };
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
                .with_context(|| format!("opening the network namespace of {pid}"))?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("joining the network namespace of {pid}"))?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread in the network namespace of {pid} panicked"))?
    })
}

/// Lowest port [`free_port`] hands out (above the registered services most
/// machines run).
const FREE_PORT_FLOOR: u16 = 10_000;

/// A TCP port nothing listens on now, for a server started right after.
///
/// Not a `bind(:0)` port: those come from the kernel's ephemeral range, which
/// every outgoing connection draws from too, so between our release and the
/// server's bind a client (kubectl, the API server dialling etcd) could take it
/// (seen in CI: kube-apiserver "bind: address already in use" on 40617). Ports
/// below that range are never given to clients; each process walks them from
/// its own offset and never hands out one port twice, so parallel tests and
/// test binaries do not pick the same one either.
pub fn free_port() -> Result<u16> {
    static HANDED_OUT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let low = ephemeral_low().unwrap_or(32_768);
    if low <= FREE_PORT_FLOOR + 1_000 {
        // Nearly every port is ephemeral here: nothing better than the kernel's pick.
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
        return Ok(l.local_addr()?.port());
    }
    let span = u32::from(low - FREE_PORT_FLOOR);
    let offset = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let n = HANDED_OUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = FREE_PORT_FLOOR + (offset.wrapping_add(n) % span) as u16;
        // The wildcard address: free there means free on every address.
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free TCP port in {FREE_PORT_FLOOR}..{low}")
}

/// `127.0.0.1:<`[`free_port`]`>`, for a daemon's `--metrics-addr` and the like.
pub fn free_loopback_addr() -> Result<std::net::SocketAddr> {
    Ok(std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_low() -> Option<u16> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Runs a command to completion; an error carries its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_repeat() {
        let low = ephemeral_low().expect("ip_local_port_range");
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port handed out twice: {ports:?}");
        if low > FREE_PORT_FLOOR + 1_000 {
            assert!(ports.iter().all(|p| (FREE_PORT_FLOOR..low).contains(p)), "{ports:?} vs {low}");
        }
    }
}
