//! The one command-line convention of the operator binaries (`kube-rdma-operator`,
//! `kubectl-rdma`): output formats, exit status, and stdout that may close.
//!
//! - `-o, --output FORMAT`: `table` (default), `wide` (more columns: `kubectl rdma
//!   status`), `json`, `yaml`, `name` (`rdmanodestate.kuberdma.io/NODE` per line:
//!   `kubectl rdma status`), `jsonpath=TEMPLATE` ([`super::jsonpath`]). A command
//!   that checks one node without a cluster (`kube-rdma-operator agent --once`,
//!   `kubectl rdma check`) offers `table`, `json`, `yaml` and `jsonpath` and prints
//!   the same for the same node.
//! - Exit status ([`EXIT_HELP`]): 0 all is well; 1 a check fails, a node is not
//!   ready, or something asked for was not found; 2 a usage or environment error
//!   (bad flags or files, no cluster access, an API error). `kubectl rdma` exits 1
//!   for errors too, as kubectl does ([`EXIT_HELP_KUBECTL`]).
//! - Results on stdout, errors (one line each) and logs on stderr. A stdout closed
//!   early (`| head`) ends the output quietly ([`plumbing::cli::emit`]); the exit status is still
//!   the verdict. A stdout that cannot be written (`> /dev/full`) is exit 2.
//!
//! This is the convention of every kube-rdma binary: [`plumbing::cli`], docs/cli.md.

use std::process::ExitCode;

use plumbing::cli::{EXIT_FAILED, EXIT_OK};

use super::jsonpath::Template;
use crate::crd::RdmaNodeState;

/// An output format (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    /// Human table.
    Table,
    /// Table with more columns.
    Wide,
    Json,
    Yaml,
    /// `kind.group/name` per object.
    Name,
    /// A JSONPath template.
    JsonPath(Template),
}

fn parse(s: &str, offered: &[&str]) -> Result<Format, String> {
    let (word, template) = match s.split_once('=') {
        Some((w, t)) => (w, Some(t)),
        None => (s, None),
    };
    let f = match (word, template) {
        ("table", None) => Format::Table,
        ("wide", None) => Format::Wide,
        ("json", None) => Format::Json,
        ("yaml", None) => Format::Yaml,
        ("name", None) => Format::Name,
        ("jsonpath", Some(t)) => {
            // kubectl users quote the template for the shell; quotes that reach us are part of it.
            let t = t.trim_matches('\'');
            Format::JsonPath(t.parse().map_err(|e: super::jsonpath::JsonPathError| e.to_string())?)
        }
        ("jsonpath", None) => {
            return Err("jsonpath needs a template: -o jsonpath='{.status.summary.ready}'".into())
        }
        _ => return Err(format!("unknown output format {s:?}: use one of {}", offered.join(", "))),
    };
    if !offered.iter().any(|o| o.split('=').next() == Some(word)) {
        return Err(format!("-o {word} does not apply here: use one of {}", offered.join(", ")));
    }
    Ok(f)
}

/// `-o` of commands that show cluster objects (`kubectl rdma status`).
pub fn parse_objects(s: &str) -> Result<Format, String> {
    parse(s, &["table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE"])
}

/// `-o` of commands that check one node without a cluster (`agent --once`, `check`).
pub fn parse_check(s: &str) -> Result<Format, String> {
    parse(s, &["table", "json", "yaml", "jsonpath=TEMPLATE"])
}

/// The exit status of the checking commands (`kubectl rdma`, `status`, `check`,
/// `agent --once`), for `--help`.
pub const EXIT_HELP: &str = "\
Exit status:
  0  all is well: every check passes, every node shown is ready
  1  a check fails, no RoCE interface was found to check, a node shown is not ready or its agent is stale, or a node asked for has no RdmaNodeState
  2  a usage or environment error: bad flags or files, no cluster access, an API error";

/// The exit status of `kubectl rdma status` and `check`, for `--help`: kubectl's
/// (k8s.io/kubectl `cmdutil.DefaultErrorExitCode`), so an error is 1 too, where
/// `agent --once` says 2 ([`EXIT_HELP`]); the verdicts are the same.
pub const EXIT_HELP_KUBECTL: &str = "\
Exit status:
  0  all is well: every check passes, every node shown is ready
  1  a check fails, no RoCE interface was found to check, a node shown is not ready or its agent is stale, or a node asked for has no RdmaNodeState;
     or an error, as kubectl: bad flags or files, no cluster access, an API error";

/// The exit status of the controller and of `crds`, which check nothing, for `--help`.
pub const EXIT_HELP_NO_CHECKS: &str = "\
Exit status:
  0  done (crds), or stopped by SIGTERM or SIGINT (controller)
  2  a usage or environment error: bad flags, no cluster access, an API error";

/// 0 when `ok`, else 1.
pub fn verdict(ok: bool) -> ExitCode {
    ExitCode::from(if ok { EXIT_OK } else { EXIT_FAILED })
}

/// Why an object could not be printed (never expected: our types serialise).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("encoding JSON")]
    Json(#[from] serde_json::Error),
    #[error("encoding YAML")]
    Yaml(#[from] serde_yaml::Error),
}

/// `v` as JSON, YAML or through a template; `None` for the table formats and `name`.
pub fn data(v: &serde_json::Value, format: &Format) -> Result<Option<String>, RenderError> {
    Ok(match format {
        Format::Json => Some(format!("{}\n", serde_json::to_string_pretty(v)?)),
        Format::Yaml => Some(serde_yaml::to_string(v)?),
        Format::JsonPath(t) => Some(t.render(v)),
        Format::Table | Format::Wide | Format::Name => None,
    })
}

/// One node checked without a cluster (`agent --once`, `kubectl rdma check`), as
/// `format` shows it: the table of every check, or the `RdmaNodeState`.
pub fn checked_node(state: &RdmaNodeState, format: &Format) -> Result<String, RenderError> {
    let v = serde_json::to_value(state)?;
    if let Some(text) = data(&v, format)? {
        return Ok(text);
    }
    Ok(match &state.status {
        Some(s) => super::view::node_table(&state.spec.node_name, s, super::view::Detail::All),
        None => format!("NODE {}  (no status computed)\n", state.spec.node_name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_offers_its_formats_and_names_the_others() {
        assert_eq!(parse_objects("wide").unwrap(), Format::Wide);
        assert_eq!(parse_objects("name").unwrap(), Format::Name);
        assert!(matches!(parse_objects("jsonpath={.kind}").unwrap(), Format::JsonPath(_)));
        assert!(matches!(parse_check("jsonpath='{.kind}'").unwrap(), Format::JsonPath(_)));
        let e = parse_check("wide").unwrap_err();
        assert!(
            e.contains("-o wide does not apply here: use one of table, json, yaml, jsonpath=TEMPLATE"),
            "{e}"
        );
        assert!(parse_check("name").is_err());
        let e = parse_objects("xml").unwrap_err();
        assert!(e.contains("unknown output format \"xml\""), "{e}");
        assert!(parse_objects("jsonpath").unwrap_err().contains("needs a template"));
        assert!(parse_objects("jsonpath={.a").unwrap_err().contains("unclosed {"));
    }
}
