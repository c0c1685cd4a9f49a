//! Where and how much the plugin logs, from the network configuration
//! (`logLevel`, `logFile`, `logFormat`; sriov-cni's first two with their
//! meaning). Logs never go to stdout, which carries only the CNI JSON, and
//! never carry terminal colour codes. `main` installs the subscriber
//! ([`plumbing::logging::init`] with these settings).

use std::path::PathBuf;

use plumbing::logging::{Format, Sink};
use serde_json::Value;
use tracing::level_filters::LevelFilter;

use crate::conf::Keys;

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

    /// Where the lines go: `logFile`, opened for appending, else stderr. A
    /// file that cannot be opened is noted in `problems`, and stderr used.
    pub fn sink(&mut self) -> Sink {
        let Some(p) = &self.file else { return Sink::Stderr };
        match std::fs::OpenOptions::new().create(true).append(true).open(p) {
            Ok(f) => Sink::File(f),
            Err(e) => {
                self.problems.push(format!("logFile {}: {e}; logging to stderr", p.display()));
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
}
