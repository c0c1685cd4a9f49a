//! Completion of `kubectl rdma <TAB>` inside kubectl's own completion. kubectl
//! (>= 1.26; k8s.io/kubectl v0.34.4 `pkg/cmd/plugin/plugin_completion.go`) runs
//! an executable `kubectl_complete-rdma` found on PATH with the words after
//! `kubectl rdma` and the word being completed, and reads cobra's `__complete`
//! answer: one candidate per line (`word<TAB>description`), then `:DIRECTIVE`.
//! `kubectl-rdma` gives that answer when it is run under that name (a symlink).
//! The scripts of `kubectl rdma completion SHELL` (clap_complete) serve the
//! `kubectl-rdma` command itself.

use std::fmt::Write as _;

/// The name kubectl looks for.
pub const EXECUTABLE: &str = "kubectl_complete-rdma";

/// cobra's `ShellCompDirectiveDefault`: the shell may also complete file names.
const FILES: u8 = 0;
/// cobra's `ShellCompDirectiveNoFileComp`.
const NO_FILES: u8 = 4;

/// The candidates for the last of `words` (the word being completed, maybe
/// empty) after the others, and cobra's directive: subcommands, flags, a flag's
/// possible values; file names for a flag's value that has no list (a path).
pub fn candidates(root: &clap::Command, words: &[String]) -> (Vec<(String, String)>, u8) {
    let (current, before) = match words.split_last() {
        Some((c, b)) => (c.as_str(), b),
        None => ("", &[][..]),
    };
    let mut cmd = root;
    for w in before {
        if let Some(sub) = cmd.find_subcommand(w) {
            cmd = sub;
        }
    }
    // The value of the flag just before, if it takes one.
    let flags: Vec<&clap::Arg> =
        cmd.get_arguments().chain(root.get_arguments().filter(|a| a.is_global_set())).collect();
    if let Some(prev) = before.last() {
        let takes_value = |a: &&&clap::Arg| {
            a.get_action().takes_values()
                && (a.get_long().is_some_and(|l| *prev == format!("--{l}"))
                    || a.get_short().is_some_and(|s| *prev == format!("-{s}")))
        };
        if let Some(arg) = flags.iter().find(takes_value) {
            let values: Vec<_> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set() && v.get_name().starts_with(current))
                .map(|v| (v.get_name().to_string(), v.get_help().map(|h| h.to_string()).unwrap_or_default()))
                .collect();
            // As cobra: a value without a list to pick from (a path, a name) is left to the shell's files.
            let listed = !arg.get_possible_values().is_empty();
            return (values, if listed { NO_FILES } else { FILES });
        }
    }
    let mut out = Vec::new();
    if current.starts_with('-') {
        for a in flags.iter().filter(|a| !a.is_hide_set() && !a.is_positional()) {
            if let Some(l) = a.get_long().map(|l| format!("--{l}")).filter(|l| l.starts_with(current)) {
                out.push((l, a.get_help().map(|h| h.to_string()).unwrap_or_default()));
            }
        }
    } else {
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name().starts_with(current)) {
            out.push((s.get_name().to_string(), s.get_about().map(|h| h.to_string()).unwrap_or_default()));
        }
        for a in cmd.get_arguments().filter(|a| a.is_positional()) {
            for v in a.get_possible_values().iter().filter(|v| v.get_name().starts_with(current)) {
                out.push((v.get_name().to_string(), String::new()));
            }
        }
    }
    (out, NO_FILES)
}

/// cobra's `__complete` answer for `candidates`.
pub fn cobra_answer(candidates: &[(String, String)], directive: u8) -> String {
    let mut out = String::new();
    for (word, help) in candidates {
        // One line each: a description ends at its first line.
        match help.lines().next().filter(|h| !h.is_empty()) {
            Some(h) => {
                let _ = writeln!(out, "{word}\t{h}");
            }
            None => {
                let _ = writeln!(out, "{word}");
            }
        }
    }
    let _ = writeln!(out, ":{directive}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> clap::Command {
        clap::Command::new("kubectl-rdma")
            .arg(clap::Arg::new("kubeconfig").long("kubeconfig"))
            .subcommand(
                clap::Command::new("status")
                    .about("Show nodes")
                    .arg(clap::Arg::new("output").short('o').long("output").value_parser(["json", "yaml"]))
                    .arg(clap::Arg::new("all").long("all").action(clap::ArgAction::SetTrue)),
            )
            .subcommand(clap::Command::new("version").about("Print versions"))
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn subcommands_flags_and_values_complete_as_cobra_answers() {
        let (c, d) = candidates(&cli(), &words(&["st"]));
        assert_eq!(cobra_answer(&c, d), "status\tShow nodes\n:4\n");
        let (c, _) = candidates(&cli(), &words(&[""]));
        assert_eq!(c.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["status", "version"]);
        let (c, d) = candidates(&cli(), &words(&["status", "--a"]));
        assert_eq!((c[0].0.as_str(), d), ("--all", 4));
        let (c, _) = candidates(&cli(), &words(&["status", "-o", "y"]));
        assert_eq!(cobra_answer(&c, 4), "yaml\n:4\n");
        // A path: the shell completes file names.
        assert_eq!(candidates(&cli(), &words(&["--kubeconfig", ""])), (vec![], 0));
    }
}
