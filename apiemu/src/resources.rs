//! The resource table: which `group/version/plural`s the emulator serves,
//! their scope and subresources, and the discovery documents derived from it.

use serde_json::{json, Value};

/// One served resource (a row of the API server's discovery). Build it with
/// [`ResourceType::new`] and the chained setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceType {
    /// API group (`""` for the core group).
    pub group: String,
    /// Version (`v1`, `v1alpha1`).
    pub version: String,
    /// Kind (`Node`).
    pub kind: String,
    /// Plural, the path segment (`nodes`).
    pub plural: String,
    /// Singular name (`node`).
    pub singular: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource: writes to the main resource ignore
    /// `status`, writes to `/status` change only `status`.
    pub status_subresource: bool,
    /// Short names (`no`).
    pub short_names: Vec<String>,
    /// Field paths `fieldSelector` accepts besides `metadata.name` and
    /// `metadata.namespace` (e.g. `spec.nodeName` for pods); others get 400.
    pub field_selectors: Vec<String>,
    /// A PUT without `metadata.resourceVersion` is accepted (built-in
    /// types); custom resources refuse it with 422, as
    /// `customResourceStrategy.AllowUnconditionalUpdate` is false.
    pub unconditional_update: bool,
}

impl ResourceType {
    /// A cluster-scoped resource without subresources; chain
    /// [`namespaced`](Self::namespaced) and [`with_status`](Self::with_status).
    ///
    /// ```
    /// use kube_rdma_apiemu::ResourceType;
    /// let widgets = ResourceType::new("example.com", "v1", "Widget", "widgets").namespaced().with_status();
    /// assert_eq!(widgets.api_version(), "example.com/v1");
    /// ```
    pub fn new(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            namespaced: false,
            status_subresource: false,
            short_names: Vec::new(),
            field_selectors: Vec::new(),
            unconditional_update: true,
        }
    }

    /// Makes the resource namespaced.
    pub fn namespaced(mut self) -> Self {
        self.namespaced = true;
        self
    }

    /// Gives the resource a `/status` subresource.
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Marks it a custom resource (served from a CRD): updates must carry
    /// `metadata.resourceVersion`.
    pub fn custom_resource(mut self) -> Self {
        self.unconditional_update = false;
        self
    }

    /// Adds short names (shown in discovery).
    pub fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds field paths that `fieldSelector` accepts (dotted JSON paths).
    pub fn field_selectors(mut self, paths: &[&str]) -> Self {
        self.field_selectors = paths.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `apiVersion` of its objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as error messages name it.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The collection path, with a namespace for namespaced resources.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{base}/namespaces/{ns}/{}", self.plural),
            _ => format!("{base}/{}", self.plural),
        }
    }

    /// Whether `spec` (`plural`, `plural.group`, `version/plural` or
    /// `group/version/plural`, case-insensitive kind also accepted) names it.
    pub(crate) fn matches_spec(&self, spec: &str) -> bool {
        let parts: Vec<&str> = spec.split('/').collect();
        match parts.as_slice() {
            [one] => match one.split_once('.') {
                Some((plural, group)) => plural == self.plural && group == self.group,
                None => {
                    *one == self.plural
                        || *one == self.singular
                        || one.eq_ignore_ascii_case(&self.kind)
                        || self.short_names.iter().any(|s| s == one)
                }
            },
            [version, plural] => self.group.is_empty() && *version == self.version && *plural == self.plural,
            [group, version, plural] => {
                *group == self.group && *version == self.version && *plural == self.plural
            }
            _ => false,
        }
    }

    /// Verbs listed in discovery.
    fn verbs(&self) -> Value {
        json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"])
    }

    /// Discovery entries (`APIResource`) for the resource and its status.
    pub(crate) fn api_resources(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs(),
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        let mut out = vec![main];
        if self.status_subresource {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// The resources every emulator serves from the start (issue 10 and the
/// DRA plan); tests add more with [`crate::Builder::resource`] or by creating
/// a CustomResourceDefinition.
pub fn default_resources() -> Vec<ResourceType> {
    // Field selectors: the fields the real server registers for these types
    // (pkg/registry/*/strategy.go `...ToSelectableFields`), the ones clients use.
    let event_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
    ];
    vec![
        ResourceType::new("", "v1", "Namespace", "namespaces")
            .with_status()
            .short_names(&["ns"])
            .field_selectors(&["status.phase"]),
        ResourceType::new("", "v1", "Node", "nodes")
            .with_status()
            .short_names(&["no"])
            .field_selectors(&["spec.unschedulable"]),
        ResourceType::new("", "v1", "Pod", "pods")
            .namespaced()
            .with_status()
            .short_names(&["po"])
            .field_selectors(&[
                "spec.nodeName",
                "status.phase",
                "spec.schedulerName",
                "spec.serviceAccountName",
            ]),
        ResourceType::new("", "v1", "Event", "events")
            .namespaced()
            .short_names(&["ev"])
            .field_selectors(&event_fields),
        ResourceType::new("", "v1", "ConfigMap", "configmaps").namespaced().short_names(&["cm"]),
        ResourceType::new("events.k8s.io", "v1", "Event", "events")
            .namespaced()
            .short_names(&["ev"])
            .field_selectors(&[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "reason",
                "type",
            ]),
        ResourceType::new("coordination.k8s.io", "v1", "Lease", "leases").namespaced(),
        ResourceType::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        )
        .with_status()
        .short_names(&["crd", "crds"]),
        ResourceType::new("kuberdma.io", "v1alpha1", "RdmaNodeState", "rdmanodestates")
            .custom_resource()
            .with_status()
            .short_names(&["rns"]),
        ResourceType::new("kuberdma.io", "v1alpha1", "RoceProfile", "roceprofiles")
            .custom_resource()
            .with_status()
            .short_names(&["rocep"]),
        ResourceType::new("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
            .field_selectors(&["spec.nodeName", "spec.driver"]),
        ResourceType::new("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
            .namespaced()
            .with_status(),
        ResourceType::new("resource.k8s.io", "v1", "DeviceClass", "deviceclasses"),
    ]
}

/// The resources a CustomResourceDefinition object declares (one per served
/// version), or `None` when it is not a usable CRD.
pub(crate) fn from_crd(crd: &Value) -> Option<Vec<ResourceType>> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?;
    let names = spec.get("names")?;
    let plural = names.get("plural")?.as_str()?;
    let kind = names.get("kind")?.as_str()?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let short: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let namespaced = spec.get("scope").and_then(Value::as_str) == Some("Namespaced");
    let versions = spec.get("versions")?.as_array()?;
    let out: Vec<ResourceType> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            let version = v.get("name")?.as_str()?;
            Some(ResourceType {
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                singular: singular.clone(),
                namespaced,
                status_subresource: v.pointer("/subresources/status").is_some(),
                short_names: short.clone(),
                field_selectors: Vec::new(),
                unconditional_update: false,
            })
        })
        .collect();
    Some(out)
}

/// `/api`: `APIVersions`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// `/apis/<group>/<version>` or `/api/v1`: `APIResourceList`.
pub(crate) fn resource_list<'a>(group_version: &str, types: impl Iterator<Item = &'a ResourceType>) -> Value {
    let resources: Vec<Value> = types.flat_map(ResourceType::api_resources).collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// One `APIGroup` with its versions (first = preferred).
pub(crate) fn api_group(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`: `APIGroupList` from `(group, versions)` in table order.
pub(crate) fn group_list(groups: &[(String, Vec<String>)]) -> Value {
    let groups: Vec<Value> = groups
        .iter()
        .map(|(g, vs)| {
            let mut group = api_group(g, vs);
            if let Some(obj) = group.as_object_mut() {
                obj.remove("kind");
                obj.remove("apiVersion");
            }
            group
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_resources_like_kubectl() {
        let t = ResourceType::new("kuberdma.io", "v1alpha1", "RdmaNodeState", "rdmanodestates")
            .short_names(&["rns"]);
        for spec in [
            "rdmanodestates",
            "rdmanodestate",
            "RdmaNodeState",
            "rns",
            "rdmanodestates.kuberdma.io",
            "kuberdma.io/v1alpha1/rdmanodestates",
        ] {
            assert!(t.matches_spec(spec), "{spec}");
        }
        for spec in ["nodes", "rdmanodestates.other.io", "v1/rdmanodestates", "a/b/c/d"] {
            assert!(!t.matches_spec(spec), "{spec}");
        }
        let nodes = ResourceType::new("", "v1", "Node", "nodes");
        assert!(nodes.matches_spec("v1/nodes"));
        assert_eq!(nodes.collection_path(None), "/api/v1/nodes");
    }

    #[test]
    fn a_crd_declares_one_resource_per_served_version() {
        let crd = json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "subresources": {"status": {}}},
                         {"name": "v0", "served": false}]}});
        let types = from_crd(&crd).unwrap();
        assert_eq!(types.len(), 1);
        assert!(types[0].namespaced && types[0].status_subresource);
        assert_eq!(types[0].singular, "widget");
        assert!(from_crd(&json!({"spec": {}})).is_none());
    }
}
