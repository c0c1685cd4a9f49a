//! Writing the Prometheus text exposition format 0.0.4: a family's `# HELP` /
//! `# TYPE` head, sample lines, label values escaped as the format demands.
//! Every registry of kube-rdma (the device plugin's, DRA mode's, the operator
//! agent's and controller's) renders through these.
//!
//! Ref: <https://prometheus.io/docs/instrumenting/exposition_formats/#text-format-details>
//! ("label_value can be any sequence of UTF-8 characters, but the backslash
//! (`\`), double-quote (`"`), and line feed (`\n`) characters have to be escaped
//! as `\\`, `\"`, and `\n`").

use std::borrow::Cow;
use std::fmt::{Display, Write as _};

/// A label value escaped for the text format (backslash, double quote, line
/// feed); borrowed when there is nothing to escape, as for every pool and
/// interface name.
pub fn escape(v: &str) -> Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(v);
    }
    let mut o = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    Cow::Owned(o)
}

/// `# HELP name help` and `# TYPE name kind` (`gauge`, `counter`, `histogram`).
pub fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One sample line: `name{k="v",…} value`, or `name value` without labels.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl Display) {
    out.push_str(name);
    push_labels(out, labels, None);
    let _ = writeln!(out, " {value}");
}

/// `kuberdma_build_info{version,git_commit} 1`: which build a target runs, to join
/// onto its other series (`* on (instance) group_left(version) kuberdma_build_info`).
/// Every daemon's `/metrics` ends with it (`http::Routes::daemon`).
pub fn build_info(out: &mut String) {
    head(
        out,
        "kuberdma_build_info",
        "gauge",
        "Always 1; labels: the release version and git commit of this binary.",
    );
    sample(out, "kuberdma_build_info", &[("version", crate::VERSION), ("git_commit", crate::GIT_COMMIT)], 1);
}

/// `{k="v",…}` (escaped), with `extra` (already a valid value, as a histogram's
/// `le`) last; nothing when there are no labels at all.
pub(crate) fn push_labels(out: &mut String, labels: &[(&str, &str)], extra: Option<(&str, &str)>) {
    if labels.is_empty() && extra.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().map(|(k, v)| (*k, escape(v))).chain(extra.map(|(k, v)| (k, v.into()))) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"{v}\"");
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslash_quote_and_line_feed_are_escaped_and_nothing_else() {
        assert_eq!(escape(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape("two\nlines"), "two\\nlines");
        assert_eq!(escape("kuberdma.io/rdma_vfs"), "kuberdma.io/rdma_vfs");
        assert!(matches!(escape("ens1f0np0"), Cow::Borrowed(_)), "no copy when nothing is escaped");
        assert_eq!(escape("tab\tand ünïcode"), "tab\tand ünïcode");
    }

    #[test]
    fn a_family_renders_its_head_and_samples_with_and_without_labels() {
        let mut o = String::new();
        head(&mut o, "kuberdma_x", "gauge", "An example.");
        sample(&mut o, "kuberdma_x", &[], 1);
        sample(&mut o, "kuberdma_x", &[("interface", "eth\"0"), ("check", "pfc")], 0.5);
        assert_eq!(
            o,
            "# HELP kuberdma_x An example.\n# TYPE kuberdma_x gauge\nkuberdma_x 1\n\
             kuberdma_x{interface=\"eth\\\"0\",check=\"pfc\"} 0.5\n"
        );
    }

    #[test]
    fn build_info_names_the_version_and_commit_with_value_one() {
        let mut o = String::new();
        build_info(&mut o);
        let want = format!(
            "kuberdma_build_info{{version=\"{}\",git_commit=\"{}\"}} 1",
            crate::VERSION,
            crate::GIT_COMMIT
        );
        assert!(o.lines().any(|l| l == want), "{o}");
        assert!(o.contains("# TYPE kuberdma_build_info gauge\n"), "{o}");
    }
}
