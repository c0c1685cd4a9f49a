//! The kubeconfig an emulator writes: one cluster (with the CA inline as
//! `certificate-authority-data`), two token users and two contexts, so
//! `--context` and per-context namespaces can be tested.

use base64::Engine;
use serde_json::json;

/// Name of the current context (user `admin`, namespace `default`).
pub const CONTEXT: &str = "emu";
/// Name of the second context (user `other`, namespace `other`).
pub const OTHER_CONTEXT: &str = "emu-other";
/// Namespace of the second context (created at start).
pub const OTHER_NAMESPACE: &str = "other";

/// Who the kubeconfig's users are, for [`render`].
pub(crate) struct Users<'a> {
    pub(crate) admin_token: &'a str,
    pub(crate) other_token: &'a str,
}

/// Renders the kubeconfig YAML for `server` (`https://…` or `http://…`).
pub(crate) fn render(server: &str, ca_pem: Option<&str>, users: &Users<'_>) -> String {
    let mut cluster = json!({"server": server});
    if let Some(pem) = ca_pem {
        cluster["certificate-authority-data"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emu", "cluster": cluster}],
        "users": [
            {"name": "admin", "user": {"token": users.admin_token}},
            {"name": "other", "user": {"token": users.other_token}},
        ],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": "emu", "user": "admin", "namespace": "default"}},
            {"name": OTHER_CONTEXT, "context": {"cluster": "emu", "user": "other", "namespace": OTHER_NAMESPACE}},
        ],
        "current-context": CONTEXT,
        "preferences": {},
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_names_both_contexts_and_embeds_the_ca() {
        let y = render("https://127.0.0.1:1", Some("PEM"), &Users { admin_token: "a", other_token: "b" });
        let v: serde_json::Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(v["current-context"], "emu");
        assert_eq!(v["clusters"][0]["cluster"]["certificate-authority-data"], "UEVN");
        assert_eq!(v["contexts"][1]["context"]["namespace"], "other");
        let plain = render("http://127.0.0.1:1", None, &Users { admin_token: "a", other_token: "b" });
        assert!(!plain.contains("certificate-authority-data"));
    }
}
