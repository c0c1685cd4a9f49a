//! `kube-rdma-cni`: moves an SR-IOV VF netdev **and** its RDMA device into a
//! pod's network namespace as one transaction (CNI spec 1.1.0).
//!
//! Data flow: env + stdin → [`conf`] (validated, nothing touched yet) →
//! [`nic::vfdev`] (the VF's sysfs directory under `KUBE_RDMA_SYSFS_ROOT`) →
//! [`txn`] (journaled steps: PF-side attributes, netdev move+rename, link
//! config, RDMA move, IPAM via [`ipam`], addresses; link requests through
//! [`nic::netlink::link`]) → result JSON on stdout.
//! Any failure undoes the steps done; DEL undoes a journal whatever state it
//! is in.
//!
//! ```no_run
//! let env = |k: &str| std::env::var(k).ok();
//! let out = kube_rdma_cni::run(&env, br#"{"cniVersion":"1.1.0"}"#);
//! println!("{}", out.stdout);
//! ```

pub mod conf;
pub mod error;
pub mod ipam;
pub mod journal;
pub mod txn;

use nic::Roots;
use serde_json::json;

use crate::conf::Command;
pub use crate::error::{Error, Result};

/// CNI versions we speak (results are produced in the one asked for).
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest version, used where the input names none.
pub const LATEST: &str = "1.1.0";

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

fn version_of(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v.get("cniVersion").and_then(|s| s.as_str()).map(str::to_string))
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| LATEST.to_string())
}

/// Runs one CNI invocation. `env` reads environment variables.
pub fn run(env: &dyn Fn(&str) -> Option<String>, stdin: &[u8]) -> Outcome {
    let version = version_of(stdin);
    match dispatch(env, stdin) {
        Ok(Some(v)) => Outcome { stdout: v.to_string(), status: 0, error: None },
        Ok(None) => Outcome { stdout: String::new(), status: 0, error: None },
        Err(e) => Outcome { stdout: e.to_json(&version).to_string(), status: 1, error: Some(e) },
    }
}

fn dispatch(env: &dyn Fn(&str) -> Option<String>, stdin: &[u8]) -> Result<Option<serde_json::Value>> {
    let cmd_s = env("CNI_COMMAND").filter(|s| !s.is_empty()).ok_or(Error::Env {
        var: "CNI_COMMAND",
        why: "missing; this is a CNI plugin: run it from a container runtime (or `kube-rdma-cni install --dest DIR`)".into(),
    })?;
    let cmd = Command::parse(&cmd_s).ok_or_else(|| Error::Env {
        var: "CNI_COMMAND",
        why: format!("{cmd_s:?} is not ADD, DEL, CHECK, STATUS, GC or VERSION"),
    })?;
    if cmd == Command::Version {
        return Ok(Some(json!({"cniVersion": version_of(stdin), "supportedVersions": SUPPORTED_VERSIONS})));
    }
    let e = conf::read_env(cmd, env)?;
    let c = conf::parse(stdin, &e, cmd)?;
    let roots = Roots::resolve(
        env(nic::roots::SYSFS_ROOT_ENV).map(Into::into),
        env(nic::roots::DEV_ROOT_ENV).map(Into::into),
    );
    match cmd {
        Command::Add => txn::add(&c, &e, &roots).map(Some),
        Command::Del => txn::del(&c, &e, &roots).map(|_| None),
        Command::Check => {
            if ipam::version_key(&c.cni_version) < (0, 4, 0) {
                return Err(Error::Version {
                    requested: format!("{} (CHECK needs 0.4.0 or later)", c.cni_version),
                });
            }
            txn::check(&c, &e).map(|_| None)
        }
        Command::Status => txn::status(&c, &e, &roots).map(|_| None),
        Command::Gc => txn::gc(&c, &roots, &e).map(|_| None),
        Command::Version => unreachable!("handled above"),
    }
}

/// `kube-rdma-cni install --dest DIR`: copies `exe` to `DIR/kube-rdma-cni`
/// atomically (temp file in DIR, fsync, chmod 755, rename), so a runtime never
/// executes a half-written plugin.
pub fn install(exe: &std::path::Path, dest_dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dest_dir)?;
    let target = dest_dir.join("kube-rdma-cni");
    let tmp = dest_dir.join(format!(".kube-rdma-cni.{}.tmp", std::process::id()));
    let body = std::fs::read(exe)?;
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        if let Ok(d) = std::fs::File::open(dest_dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.map(|_| target)
}
