//! VERSION: the versions we speak.

use serde_json::{json, Value};

/// The VERSION answer; `requested` is the stdin's `cniVersion` (if any).
pub fn version(requested: &str) -> Value {
    json!({"cniVersion": requested, "supportedVersions": crate::SUPPORTED_VERSIONS})
}
