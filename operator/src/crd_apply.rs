//! `kube-rdma-operator crds --apply`: server-side apply of both CRDs, exactly as
//! [`crd::crds_yaml`] prints them.
//!
//! Helm installs a chart's `crds/` on the first install only and never upgrades them, so the
//! chart runs this from a pre-upgrade hook Job (the image has no shell or kubectl). A user can
//! run it by hand with a kubeconfig too.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;

use crate::api::describe;
use crate::crd;

/// Field manager of the CRDs (the chart's hook and anyone running `crds --apply`).
pub const CRD_MANAGER: &str = "kube-rdma";

/// Why the CRDs could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum CrdApplyError {
    /// The generated YAML did not serialise or parse back (a bug, never input).
    #[error("generating the CRDs")]
    Generate(#[source] serde_yaml::Error),
    /// A generated CRD did not encode as JSON (a bug, never input).
    #[error("encoding CustomResourceDefinition {name}")]
    Encode {
        /// CRD name.
        name: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused or failed one apply. Displayed on one line with
    /// [`describe`] of the client error (as kubectl prints it), never kube's own
    /// `Display`, which appends the Rust `Debug` form of the server's `Status`;
    /// so the client error is in the message and not reported again as a source.
    #[error("server-side apply of CustomResourceDefinition {name}: {}", describe(.error))]
    Apply {
        /// CRD name, e.g. `roceprofiles.kuberdma.io`.
        name: String,
        /// What the client or server said.
        error: kube::Error,
    },
}

/// One CRD as the API server stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// CRD name.
    pub name: String,
    /// `metadata.resourceVersion` after the apply.
    pub resource_version: String,
}

/// The CRDs [`crd::crds_yaml`] prints, as objects (the same bytes that are committed and
/// shipped in the chart, so the hook applies what `crds/` would have installed).
pub fn generated() -> Result<Vec<CustomResourceDefinition>, CrdApplyError> {
    let yaml = crd::crds_yaml().map_err(CrdApplyError::Generate)?;
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|doc| CustomResourceDefinition::deserialize(doc).map_err(CrdApplyError::Generate))
        .collect()
}

/// Applies every CRD with field manager [`CRD_MANAGER`], forcing conflicts: fields
/// set by Helm's original create (manager `helm`) pass to us, so an upgrade never stops
/// on a conflict with our own earlier version.
pub async fn apply(client: kube::Client) -> Result<Vec<Applied>, CrdApplyError> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let pp = PatchParams::apply(CRD_MANAGER).force();
    let mut out = Vec::new();
    for mut crd in generated()? {
        let name = crd.metadata.name.clone().unwrap_or_default();
        // Status belongs to the API server; apply only what we declare.
        crd.status = None;
        let body = serde_json::to_value(&crd)
            .map_err(|e| CrdApplyError::Encode { name: name.clone(), source: e })?;
        let stored = api
            .patch(&name, &pp, &Patch::Apply(body))
            .await
            .map_err(|error| CrdApplyError::Apply { name: name.clone(), error })?;
        out.push(Applied { name, resource_version: stored.metadata.resource_version.unwrap_or_default() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_exactly_what_crds_prints() {
        let crds = generated().unwrap();
        let names: Vec<_> = crds.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["rdmanodestates.kuberdma.io", "roceprofiles.kuberdma.io"]);
        let mut again = String::new();
        for c in &crds {
            again.push_str("---\n");
            again.push_str(&serde_yaml::to_string(c).unwrap());
        }
        assert_eq!(again, crd::crds_yaml().unwrap());
    }

    #[test]
    fn a_refused_apply_reads_as_one_kubectl_line_without_a_source_repeating_it() {
        let e = CrdApplyError::Apply {
            name: "roceprofiles.kuberdma.io".into(),
            error: kube::Error::Api(
                kube::core::Status::failure("customresourcedefinitions.apiextensions.k8s.io \"roceprofiles.kuberdma.io\" is forbidden", "Forbidden")
                    .with_code(403)
                    .boxed(),
            ),
        };
        assert_eq!(
            format!("{:#}", anyhow::Error::from(e)),
            "server-side apply of CustomResourceDefinition roceprofiles.kuberdma.io: Error from server (Forbidden): \
             customresourcedefinitions.apiextensions.k8s.io \"roceprofiles.kuberdma.io\" is forbidden"
        );
    }
}
