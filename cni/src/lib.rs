//! `kube-rdma-cni`: moves an SR-IOV VF netdev **and** its RDMA device into a
//! pod's network namespace as one transaction (CNI spec 1.1.0).
//!
//! Data flow: env + stdin (read once, bounded, decoded once: [`Input`]) →
//! [`conf`] (validated for the command, nothing touched yet) → [`device`]
//! (which VF) → a command of [`cmd`]: ADD plans [`step`]s (PF-side
//! attributes, IPAM via [`ipam`], netdev move+rename+config in one request,
//! RDMA move via [`rdma`], device-info file), journals them once
//! ([`journal`]) and applies them; any failure, DEL and GC undo them, best
//! effort ([`txn`]) → result JSON ([`result`]) on stdout. Link requests go
//! through [`nic::netlink::link`] (rtnetlink). Logging settings: [`logging`]
//! (installed by `main` with [`plumbing::logging`]); journals and the installed
//! executable are written through [`plumbing::atomic_file`], stdout through
//! [`plumbing::cli`].
//!
//! ```no_run
//! let env = |k: &str| std::env::var(k).ok();
//! let out = kube_rdma_cni::run(&env, kube_rdma_cni::Input::from_bytes(br#"{"cniVersion":"1.1.0"}"#));
//! println!("{}", out.stdout);
//! ```

pub mod clock;
pub mod cmd;
pub mod cni_version;
pub mod conf;
pub mod device;
pub mod error;
pub mod ipam;
pub mod journal;
pub mod lock;
pub mod logging;
pub mod private_dir;
pub mod rdma;
pub mod result;
pub mod step;
pub mod txn;
pub mod vf_record;

use nic::Roots;
use serde_json::{json, Value};

pub use crate::cni_version::{LATEST, SUPPORTED_VERSIONS};
use crate::conf::Command;
pub use crate::error::{Error, Result};

/// What the process should print and exit with.
#[derive(Debug)]
pub struct Outcome {
    /// JSON for stdout (empty for a successful DEL/GC/STATUS, as the spec says).
    pub stdout: String,
    /// Exit status.
    pub status: i32,
    /// The error, if any (for logging).
    pub error: Option<Error>,
}

/// Stdin, read once (at most [`conf::STDIN_LIMIT`] bytes) and decoded once,
/// and when the invocation began.
#[derive(Debug)]
pub struct Input {
    decoded: Result<Value>,
    /// [`clock::process_began`], taken before stdin is read.
    began: u64,
}

impl Input {
    /// Reads and decodes stdin: the plugin's `main`, whose process is the
    /// invocation (it began at the fork, [`clock::process_began`]).
    pub fn read(r: impl std::io::Read) -> Self {
        let began = clock::process_began();
        Input { decoded: conf::read_stdin(r).and_then(|b| conf::decode(&b)), began }
    }

    /// Decodes bytes already read, for an invocation that begins now.
    pub fn from_bytes(b: &[u8]) -> Self {
        Input {
            decoded: if b.len() > conf::STDIN_LIMIT {
                Err(Error::TooLarge { limit: conf::STDIN_LIMIT })
            } else {
                conf::decode(b)
            },
            began: clock::monotonic_ns(),
        }
    }

    /// No stdin (VERSION from a terminal).
    pub fn none() -> Self {
        Input {
            decoded: Err(Error::Decode("no network configuration on stdin".into())),
            began: clock::monotonic_ns(),
        }
    }

    /// The decoded configuration, if it decoded.
    pub fn config(&self) -> Option<&Value> {
        self.decoded.as_ref().ok()
    }
}

fn version_of(conf: Option<&Value>) -> String {
    conf.and_then(|v| conf::Keys::of(v, "").str("cniVersion").ok().flatten())
        .map(|(_, s)| s.to_string())
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| LATEST.to_string())
}

/// Runs one CNI invocation. `env` reads environment variables.
pub fn run(env: &dyn Fn(&str) -> Option<String>, input: Input) -> Outcome {
    let version = version_of(input.config());
    match dispatch(env, input) {
        Ok(Some(v)) => Outcome { stdout: v.to_string(), status: 0, error: None },
        Ok(None) => Outcome { stdout: String::new(), status: 0, error: None },
        Err(e) => Outcome { stdout: e.to_json(&version).to_string(), status: 1, error: Some(e) },
    }
}

fn dispatch(env: &dyn Fn(&str) -> Option<String>, input: Input) -> Result<Option<Value>> {
    let cmd_s = env("CNI_COMMAND").filter(|s| !s.is_empty()).ok_or(Error::Env {
        var: "CNI_COMMAND",
        why: "missing; this is a CNI plugin: run it from a container runtime (or `kube-rdma-cni install --dest DIR`)".into(),
    })?;
    let cmd = Command::parse(&cmd_s).ok_or_else(|| Error::Env {
        var: "CNI_COMMAND",
        why: format!("{cmd_s:?} is not ADD, DEL, CHECK, STATUS, GC or VERSION"),
    })?;
    if cmd == Command::Version {
        return Ok(Some(cmd::version::version(&version_of(input.config()))));
    }
    let mut e = conf::read_env(cmd, env)?;
    e.began = input.began;
    let _span =
        tracing::info_span!("cni", command = cmd.name(), container = %e.container_id, ifname = %e.ifname)
            .entered();
    let raw = match input.decoded {
        Ok(v) => v,
        Err(err) if cmd == Command::Del => {
            // DEL tears down from the journal; it must not keep a sandbox
            // alive because its configuration is unreadable.
            tracing::error!(error = %err.chain(), "DEL with an unreadable configuration: using the defaults");
            json!({})
        }
        Err(err) => return Err(err),
    };
    let c = conf::parse(raw, &e, cmd)?;
    tracing::debug!("parsed");
    let roots = Roots::resolve(
        env(nic::roots::SYSFS_ROOT_ENV).map(Into::into),
        env(nic::roots::DEV_ROOT_ENV).map(Into::into),
    );
    // The verbs a configuration's version does not have (libcni's skel refuses
    // them with 1 too; libcni never sends them).
    let since = match cmd {
        Command::Check => Some("0.4.0"),
        Command::Status | Command::Gc => Some("1.1.0"),
        _ => None,
    };
    if let Some(since) = since.filter(|v| cni_version::key(&c.cni_version) < cni_version::key(v)) {
        return Err(Error::VerbVersion { cmd: cmd.name(), since, version: c.cni_version.clone() });
    }
    match cmd {
        Command::Add => cmd::add::add(&c, &e, &roots).map(Some),
        Command::Del => cmd::del::del(&c, &e, &roots).map(|_| None),
        Command::Check => cmd::check::check(&c, &e).map(|_| None),
        Command::Status => cmd::status::status(&c, &e, &roots).map(|_| None),
        Command::Gc => cmd::gc::gc(&c, &roots, &e).map(|_| None),
        Command::Version => unreachable!("handled above"),
    }
}

/// `kube-rdma-cni install --dest DIR`: copies `exe` to `DIR/kube-rdma-cni`
/// durably with mode 755 ([`plumbing::atomic_file::write_durable`]: temp file
/// in DIR, fsync, rename, fsync of DIR), so a runtime never executes a
/// half-written plugin, not even after a power loss.
pub fn install(
    exe: &std::path::Path,
    dest_dir: &std::path::Path,
) -> std::result::Result<std::path::PathBuf, plumbing::atomic_file::FileError> {
    use plumbing::atomic_file::{write_durable, FileError};
    let body = std::fs::read(exe).map_err(|e| FileError::new("read", exe, e))?;
    let target = dest_dir.join("kube-rdma-cni");
    write_durable(&target, &body, Some(0o755))?;
    Ok(target)
}
