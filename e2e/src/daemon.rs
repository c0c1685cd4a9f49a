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

/// A free TCP port on loopback (bound, read and released: good enough for
/// tests that start one server right after).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
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
