//! Where and how much the plugin logs, from the network configuration
//! (`logLevel`, `logFile`, `logFormat`; sriov-cni's first two with their
//! meaning). Logs never go to stdout, which carries only the CNI JSON, and
//! never carry terminal colour codes. `main` installs the subscriber
//! ([`plumbing::logging::init`] with these settings).

use std::path::{Path, PathBuf};

use plumbing::logging::{Format, Sink};
use serde_json::Value;
use tracing::level_filters::LevelFilter;

use crate::conf::Keys;

/// The one directory `logFile` may name a file in, unless
/// [`LOG_DIR_ENV`] says another. A network configuration is written by
/// whoever may write a NetworkAttachmentDefinition, not by the node's admin,
/// so it never picks where root appends on the node: only a file name in a
/// directory of our own (`/var/log` itself would let it append to the
/// system's logs; docs/security.md).
pub const DEFAULT_LOG_DIR: &str = "/var/log/kube-rdma-cni";

/// The node admin's choice of that directory (the runtime's environment,
/// which no network configuration sets), and the tests'.
pub const LOG_DIR_ENV: &str = "KUBE_RDMA_CNI_LOG_DIR";

/// The directory `logFile` names files in ([`LOG_DIR_ENV`], else
/// [`DEFAULT_LOG_DIR`]; a relative one is not taken).
pub fn log_dir(get: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    get(LOG_DIR_ENV)
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_LOG_DIR))
}

/// The file name `logFile` stands for in `dir`: a plain name, or an absolute
/// path directly inside `dir`; else why not.
pub fn confined_log_name(dir: &Path, file: &Path) -> std::result::Result<String, String> {
    let plain = file.components().count() == 1
        && matches!(file.components().next(), Some(std::path::Component::Normal(_)));
    if plain {
        return nic::devinfo::confined_name(dir, &dir.join(file));
    }
    nic::devinfo::confined_name(dir, file)
}

/// Opens `name` in `dir` for appending, created if absent (and `dir` with
/// it): reached from the open directory with `O_NOFOLLOW`, non-blocking, and
/// only a regular file is kept (a symlink, FIFO or device is refused, never
/// followed or waited on).
fn open_log(dir: &Path, name: &str) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::DirBuilderExt as _;

    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::Mode;
    std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir)?;
    let d = open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_APPEND
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC;
    let f = match openat(&d, name, flags, Mode::from_bits_truncate(0o640)) {
        Err(nix::errno::Errno::ELOOP) => return Err(std::io::Error::other("is a symlink")),
        // O_NONBLOCK on a FIFO without a reader.
        Err(nix::errno::Errno::ENXIO) => return Err(std::io::Error::other("is a FIFO")),
        r => std::fs::File::from(r?),
    };
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("is not a regular file"));
    }
    Ok(f)
}

/// The logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Most verbose level logged.
    pub level: LevelFilter,
    /// Append to this file (else stderr).
    pub file: Option<PathBuf>,
    /// Line format.
    pub format: Format,
    /// Values we could not use, to log once the subscriber is up.
    pub problems: Vec<String>,
}

/// sriov-cni's levels (k8snetworkplumbingwg/cni-log: `panic`, `error`,
/// `warning`, `info`, `debug`, `verbose`), plus `warn` and `trace`. `panic`
/// logs only what precedes a crash, which this plugin never chooses to do:
/// nothing. Case does not matter.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    Some(match s.to_ascii_lowercase().as_str() {
        "panic" => LevelFilter::OFF,
        "error" => LevelFilter::ERROR,
        "warning" | "warn" => LevelFilter::WARN,
        "info" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "verbose" | "trace" => LevelFilter::TRACE,
        _ => return None,
    })
}

impl Settings {
    /// From the decoded configuration (if any) and `KUBE_RDMA_CNI_LOG`.
    /// Never fails: a bad value is noted and the default used (sriov-cni
    /// also falls back to `info`).
    pub fn from_config(conf: Option<&Value>, env_level: Option<&str>) -> Self {
        let mut s =
            Settings { level: LevelFilter::INFO, file: None, format: Format::Text, problems: Vec::new() };
        let keys = conf.map(|c| Keys::of(c, "")).unwrap_or_else(|| Keys::empty(""));
        let level = match keys.str("logLevel") {
            Ok(Some((k, v))) => Some((k, v.to_string())),
            Ok(None) => env_level.map(|v| ("KUBE_RDMA_CNI_LOG".to_string(), v.to_string())),
            Err(e) => {
                s.problems.push(e.to_string());
                None
            }
        };
        if let Some((k, v)) = level {
            match parse_level(&v) {
                Some(l) => s.level = l,
                None => s.problems.push(format!(
                    "{k}: {v:?} is not panic, error, warning, info, debug or verbose; logging at info"
                )),
            }
        }
        match keys.str("logFile") {
            Ok(Some((_, f))) if !f.is_empty() => s.file = Some(PathBuf::from(f)),
            Ok(_) => {}
            Err(e) => s.problems.push(e.to_string()),
        }
        match keys.str("logFormat") {
            Ok(Some((_, f))) if f.eq_ignore_ascii_case("json") => s.format = Format::Json,
            Ok(Some((_, f))) if f.eq_ignore_ascii_case("text") => {}
            Ok(Some((k, f))) => s.problems.push(format!("{k}: {f:?} is not json or text; using text")),
            Ok(None) => {}
            Err(e) => s.problems.push(e.to_string()),
        }
        s
    }

    /// Where the lines go: `logFile` in `dir` ([`confined_log_name`],
    /// [`log_dir`]), opened for appending, else stderr. A file that is
    /// refused or cannot be opened is noted in `problems` (and `file`
    /// cleared), and stderr used: the plugin works all the same.
    pub fn sink(&mut self, dir: &Path) -> Sink {
        let Some(p) = self.file.take() else { return Sink::Stderr };
        let opened = confined_log_name(dir, &p)
            .and_then(|name| open_log(dir, &name).map_err(|e| format!("{}: {e}", dir.join(&name).display())));
        match opened {
            Ok(f) => {
                self.file = Some(p);
                Sink::File(f)
            }
            Err(why) => {
                self.problems.push(format!("logFile {:?} refused: {why}; logging to stderr", p.display()));
                Sink::Stderr
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sriov_cni_levels_keep_their_meaning() {
        for (v, want) in [
            ("panic", LevelFilter::OFF),
            ("error", LevelFilter::ERROR),
            ("warning", LevelFilter::WARN),
            ("info", LevelFilter::INFO),
            ("debug", LevelFilter::DEBUG),
            ("Verbose", LevelFilter::TRACE),
        ] {
            let s = Settings::from_config(Some(&json!({"logLevel": v})), None);
            assert_eq!((s.level, s.problems.len()), (want, 0), "{v}");
        }
        let s = Settings::from_config(Some(&json!({"LogLevel": "loud", "logFormat": "xml"})), None);
        assert_eq!(s.level, LevelFilter::INFO);
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        let s = Settings::from_config(None, Some("debug"));
        assert_eq!(s.level, LevelFilter::DEBUG);
        let s = Settings::from_config(Some(&json!({"logFile": "/var/log/x.log", "logFormat": "JSON"})), None);
        assert_eq!(
            (s.file.as_deref(), s.format),
            (Some(std::path::Path::new("/var/log/x.log")), Format::Json)
        );
    }

    #[test]
    fn a_log_file_is_a_name_in_the_log_dir_and_nothing_else() {
        let dir = Path::new(DEFAULT_LOG_DIR);
        for ok in ["cni.log", "/var/log/kube-rdma-cni/cni.log", "/var/log/kube-rdma-cni/./cni.log"] {
            assert_eq!(confined_log_name(dir, Path::new(ok)).unwrap(), "cni.log", "{ok}");
        }
        for bad in [
            "/var/log/sriov-cni.log",
            "/etc/cron.d/x",
            "../x",
            "sub/x.log",
            "/var/log/kube-rdma-cni/../x",
            ".hidden",
            "",
        ] {
            let e = confined_log_name(dir, Path::new(bad)).unwrap_err();
            assert!(e.contains(DEFAULT_LOG_DIR), "{bad}: {e}");
        }
        assert_eq!(log_dir(&|_| None), dir);
        assert_eq!(log_dir(&|_| Some("rel".into())), dir, "a relative override is not taken");
        assert_eq!(log_dir(&|k| (k == LOG_DIR_ENV).then(|| "/tmp/l".into())), Path::new("/tmp/l"));
    }

    #[test]
    fn a_refused_log_file_means_stderr_and_a_noted_problem() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside.log");
        let mut s = Settings::from_config(Some(&json!({"logFile": outside})), None);
        assert!(matches!(s.sink(&d.path().join("logs")), Sink::Stderr));
        assert!(!outside.exists() && s.file.is_none());
        assert!(s.problems[0].contains("refused"), "{:?}", s.problems);
        let dir = d.path().join("logs");
        std::fs::create_dir_all(&dir).unwrap();
        nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        for (name, why) in [("fifo", "FIFO"), ("link", "symlink")] {
            let mut s = Settings::from_config(Some(&json!({"logFile": name})), None);
            assert!(matches!(s.sink(&dir), Sink::Stderr), "{name}");
            assert!(s.problems[0].contains(why), "{:?}", s.problems);
        }
        assert!(!outside.exists(), "the symlink was followed");
        let mut s = Settings::from_config(Some(&json!({"logFile": "cni.log"})), None);
        assert!(matches!(s.sink(&dir), Sink::File(_)) && s.problems.is_empty(), "{:?}", s.problems);
    }
}
