//! The `events.k8s.io/v1` Warnings the agent (drift on its Node) and the controller
//! (a RoceProfile it cannot decode) post, built within what the API server accepts,
//! so that no node or profile name makes a post fail.
//!
//! The limits are those of the API server's Event validation
//! (k8s.io/kubernetes v1.34.4 `pkg/apis/core/validation/events.go`,
//! `legacyValidateEvent`, which the events.k8s.io API runs too):
//! `reportingInstance` at most 128 bytes, `note` at most 1024 bytes, `action` and
//! `reason` at most 128; and an Event about a cluster-scoped object (a Node, a
//! RoceProfile: `regarding.namespace` empty) must live in namespace `default` or
//! `kube-system`, hence [`NAMESPACE`] (and the chart's Role for it there). The
//! events.k8s.io API also validates `metadata.generateName` as a DNS subdomain
//! prefix (k8s.io/apimachinery `pkg/api/validation/objectmeta.go`: only a trailing
//! `-` is allowed), see [`generate_name`].

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use crate::status::fnv1a;

/// Namespace of every Event the operator posts (see the module docs).
pub const NAMESPACE: &str = "default";
/// `reportingInstance` limit, bytes.
pub const REPORTING_INSTANCE_MAX: usize = 128;
/// `note` limit, bytes.
pub const NOTE_MAX: usize = 1024;

/// The server appends 5 random characters to a generateName cut to this length
/// (k8s.io/apiserver `pkg/storage/names/generate.go`, `maxGeneratedNameLength`).
pub const GENERATE_NAME_MAX: usize = 58;

/// `<base>.<topic>-`, at most [`GENERATE_NAME_MAX`] characters: `base` (a DNS
/// subdomain, e.g. a Node name) is shortened when needed, never ending in `.` or
/// `-`, so the prefix is valid and the server does not cut it further.
pub fn generate_name(base: &str, topic: &str) -> String {
    let room = GENERATE_NAME_MAX.saturating_sub(topic.len() + 2);
    let mut cut = room.min(base.len());
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let base = base[..cut].trim_end_matches(['.', '-']);
    if base.is_empty() {
        format!("{topic}-")
    } else {
        format!("{base}.{topic}-")
    }
}

/// `text` cut to [`NOTE_MAX`] bytes at a character boundary, ending in `...` when cut.
pub fn note(mut text: String) -> String {
    if text.len() <= NOTE_MAX {
        return text;
    }
    let mut cut = NOTE_MAX - 3;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("...");
    text
}

/// `prefix-name` (`prefix` alone for an empty `name`) when it fits
/// [`REPORTING_INSTANCE_MAX`]; otherwise its start and a hash of the whole, so two
/// long node names sharing a prefix stay distinct.
pub fn reporting_instance(prefix: &str, name: &str) -> String {
    let full = if name.is_empty() { prefix.to_string() } else { format!("{prefix}-{name}") };
    if full.len() <= REPORTING_INSTANCE_MAX {
        return full;
    }
    let hash = format!("-{:016x}", fnv1a(full.as_bytes()));
    let mut cut = REPORTING_INSTANCE_MAX - hash.len();
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{hash}", &full[..cut])
}

/// What a Warning is about and who reports it.
#[derive(Debug, Clone)]
pub struct Warning<'a> {
    /// The object (cluster-scoped: a Node or a RoceProfile).
    pub regarding: ObjectReference,
    /// `action` (CamelCase, < 128 bytes).
    pub action: &'a str,
    /// `reason` (CamelCase, < 128 bytes).
    pub reason: &'a str,
    /// Middle part of the generated name, e.g. `roce-drift`.
    pub topic: &'a str,
    /// `reportingController`, a qualified name such as `kuberdma.io/agent`.
    pub controller: &'a str,
    /// `reportingInstance` is `<instance>-<instance_name>` as [`reporting_instance`] makes it.
    pub instance: &'a str,
    /// See `instance`: the node name for an agent.
    pub instance_name: &'a str,
    /// The message, cut by [`note`].
    pub note: String,
}

/// The Event of `w` at `now` (RFC 3339; the current time when unreadable), named
/// `<regarding name>.<topic>-<random>` by the API server ([`generate_name`]).
pub fn warning(w: Warning<'_>, now: &str) -> Event {
    let time = now.parse::<Timestamp>().unwrap_or_else(|_| Timestamp::now());
    let base = w.regarding.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            generate_name: Some(generate_name(&base, w.topic)),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(time)),
        action: Some(w.action.into()),
        reason: Some(w.reason.into()),
        note: Some(note(w.note)),
        type_: Some("Warning".into()),
        reporting_controller: Some(w.controller.into()),
        reporting_instance: Some(reporting_instance(w.instance, w.instance_name)),
        regarding: Some(w.regarding),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_to_1024_bytes_at_a_character_boundary() {
        assert_eq!(note("short".into()), "short");
        let exact = "x".repeat(NOTE_MAX);
        assert_eq!(note(exact.clone()), exact, "1024 bytes fit");
        // Three-byte characters: a cut at 1021 would split one.
        let long = "→".repeat(600);
        let n = note(long);
        assert!(n.len() <= NOTE_MAX, "{}", n.len());
        assert!(n.ends_with("..."));
        assert!(n.trim_end_matches("...").chars().all(|c| c == '→'));
    }

    /// A generateName with its trailing `-` masked, as `NameIsDNSSubdomain(name,
    /// prefix=true)` does.
    fn valid_prefix(p: &str) -> bool {
        let p = p.strip_suffix('-').map(|s| format!("{s}a")).unwrap_or_else(|| p.to_string());
        plumbing::is_dns_subdomain(&p)
    }

    #[test]
    fn generate_names_are_valid_prefixes_the_server_does_not_cut() {
        // Regression: `node-a.roce-drift.` (a trailing dot) was refused by every real API server.
        assert_eq!(generate_name("node-a", "roce-drift"), "node-a.roce-drift-");
        let long = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
        for base in [
            long.as_str(),
            "x",
            "a-b.c",
            &format!("{}.tail", "a".repeat(46)),
            &format!("{}-x", "b".repeat(46)),
        ] {
            let g = generate_name(base, "roce-drift");
            assert!(g.len() <= GENERATE_NAME_MAX, "{g}");
            assert!(valid_prefix(&g), "{g}");
            assert!(g.ends_with(".roce-drift-"), "{g}");
        }
        assert!(!valid_prefix("node-a.roce-drift."), "the old form is refused");
    }

    #[test]
    fn a_long_node_name_gives_a_reporting_instance_within_128_bytes_and_distinct() {
        assert_eq!(reporting_instance("kube-rdma-agent", "node-a"), "kube-rdma-agent-node-a");
        // A Node name may have 253 characters (a DNS subdomain).
        let a = format!("{}.a", ["x".repeat(63), "y".repeat(63), "z".repeat(63)].join("."));
        let b = format!("{}.b", ["x".repeat(63), "y".repeat(63), "z".repeat(63)].join("."));
        let (ia, ib) = (reporting_instance("kube-rdma-agent", &a), reporting_instance("kube-rdma-agent", &b));
        assert!(ia.len() <= REPORTING_INSTANCE_MAX && ib.len() <= REPORTING_INSTANCE_MAX, "{ia}");
        assert!(ia.starts_with("kube-rdma-agent-xxxx"), "{ia}");
        assert_ne!(ia, ib, "same prefix, different nodes");
        assert_eq!(ia, reporting_instance("kube-rdma-agent", &a), "stable");
    }
}
