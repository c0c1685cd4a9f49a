//! VERSION: the versions we speak.

use serde_json::{json, Value};

use crate::cni_version::SUPPORTED_VERSIONS;

/// The VERSION answer; `requested` is the stdin's `cniVersion` (if any).
pub fn version(requested: &str) -> Value {
    json!({"cniVersion": requested, "supportedVersions": SUPPORTED_VERSIONS})
}
