//! The one logging setup of every kube-rdma binary: `tracing` events, one line
//! each, text or JSON, never on stdout (which carries results, and for the CNI
//! only its JSON). Libraries only emit events; `main` calls [`init`] once.
//!
//! What differs between binaries is data, not code: the daemons and the
//! operator's binaries log to stderr ([`Sink::Terminal`]: colour only when
//! stderr is a terminal and `NO_COLOR` is unset) under `RUST_LOG`
//! ([`Filter::Env`], `--log-format` / `KUBE_RDMA_LOG_FORMAT`); the CNI plugin
//! logs to its `logFile` or stderr, never in colour (the lines end up in files
//! and runtime logs), at the level its network configuration names
//! ([`Filter::Max`]).

use tracing::level_filters::LevelFilter;

/// Line format (`--log-format`, the CNI's `logFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Plain text, colour only on a terminal.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Which events are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `RUST_LOG` when set and valid, else these directives (e.g. `info`).
    Env(&'static str),
    /// Everything up to this level, whatever the environment says.
    Max(LevelFilter),
}

/// Where the lines go.
#[derive(Debug)]
pub enum Sink {
    /// stderr, in colour when it is a terminal and `NO_COLOR` is unset.
    Terminal,
    /// stderr, never in colour.
    Stderr,
    /// This file (opened for appending by the caller), never in colour.
    File(std::fs::File),
}

/// Installs the process's subscriber. A subscriber already installed (by a
/// test harness, or an earlier call) stays: logging is set up once per
/// process and a second setup has nothing better to do.
#[cfg(feature = "logging")]
pub fn init(format: Format, filter: Filter, sink: Sink) {
    use std::io::IsTerminal as _;

    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    // Colour codes only help a person at a terminal; in pod logs they are noise.
    let ansi = matches!(sink, Sink::Terminal)
        && format == Format::Text
        && std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none();
    let writer = match sink {
        Sink::Terminal | Sink::Stderr => BoxMakeWriter::new(std::io::stderr),
        Sink::File(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
    };
    macro_rules! install {
        ($builder:expr) => {{
            let b = $builder.with_ansi(ansi).with_writer(writer);
            match format {
                Format::Json => b.json().try_init(),
                // Every field (the message, event and span fields, `%` and `?`
                // alike) through one escaping formatter: see [`escaped_field`].
                Format::Text => {
                    use tracing_subscriber::field::MakeExt as _;
                    b.fmt_fields(tracing_subscriber::fmt::format::debug_fn(escaped_field).delimited(" "))
                        .try_init()
                }
            }
        }};
    }
    let _already_installed = match filter {
        Filter::Env(default) => {
            let f = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
            install!(tracing_subscriber::fmt().with_env_filter(f))
        }
        // A plain level, not an EnvFilter: the CNI runs once per ADD and pays
        // for every filter decision on its path.
        Filter::Max(level) => install!(tracing_subscriber::fmt().with_max_level(level)),
    };
}

/// One field of a text line, escaped ([`Escaped`]): `name=value`, or the
/// bare value for the message, as tracing-subscriber's default text format
/// writes them. Its default writes `%` fields and the message unescaped, so a
/// value from the input (a CNI configuration key, a pod name) holding a
/// newline would start a line of its own in the log: a forged entry.
#[cfg(feature = "logging")]
fn escaped_field(
    w: &mut tracing_subscriber::fmt::format::Writer<'_>,
    field: &tracing::field::Field,
    value: &dyn std::fmt::Debug,
) -> std::fmt::Result {
    use std::fmt::Write as _;
    if field.name() != "message" {
        write!(w, "{}=", field.name().strip_prefix("r#").unwrap_or(field.name()))?;
    }
    write!(Escaped(w), "{value:?}")
}

/// Writes through to `W` with every control character (and the Unicode line
/// and paragraph separators) escaped the way Rust's `escape_debug` writes
/// them (`\n`, `\u{1b}`), so one event stays one line and carries no
/// terminal escape codes of its own.
pub struct Escaped<W>(pub W);

impl<W: std::fmt::Write> std::fmt::Write for Escaped<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let special = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
        let mut rest = s;
        while let Some(i) = rest.find(special) {
            self.0.write_str(&rest[..i])?;
            let c = rest[i..].chars().next().expect("found at i");
            write!(self.0, "{}", c.escape_debug())?;
            rest = &rest[i + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(all(test, feature = "logging"))]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_text_and_escapes_every_control_character() {
        use std::fmt::Write as _;
        let mut out = String::new();
        write!(Escaped(&mut out), "a=\"x\"\nforged line\r\t\u{1b}[31m é\u{2028}").unwrap();
        assert_eq!(out, "a=\"x\"\\nforged line\\r\\t\\u{1b}[31m é\\u{2028}");
        assert!(!out.chars().any(char::is_control), "{out}");
    }

    /// The one test that installs the process's subscriber (there can be only one).
    #[test]
    fn a_file_sink_gets_json_lines_at_the_level_asked_without_colour() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.log");
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&p).unwrap();
        init(Format::Json, Filter::Max(LevelFilter::INFO), Sink::File(f));
        tracing::info!(pool = "kuberdma.io/a", "served");
        tracing::debug!("not at info");
        // A second setup keeps the first.
        init(Format::Text, Filter::Max(LevelFilter::TRACE), Sink::Stderr);
        tracing::debug!("still not at info");
        let text = std::fs::read_to_string(&p).unwrap();
        // Other tests of this binary may log meanwhile (the HTTP accept loop).
        let ours: Vec<&str> = text.lines().filter(|l| l.contains("plumbing::logging::tests")).collect();
        assert_eq!(ours.len(), 1, "{text}");
        assert!(ours[0].contains("\"served\"") && ours[0].contains("\"pool\":\"kuberdma.io/a\""), "{text}");
        assert!(text.lines().all(|l| l.starts_with('{')), "not JSON lines: {text}");
        assert!(!text.contains('\u{1b}'), "ANSI escapes in the log file");
    }
}
