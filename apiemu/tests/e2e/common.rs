//! Helpers: clients built from the emulator's kubeconfig, as `main` builds them.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_rdma_apiemu::Emulator;
use serde_json::{json, Value};

/// A client for `context` (None: the current context), from the kubeconfig file.
pub async fn client_for(emu: &Emulator, context: Option<&str>) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(emu.kubeconfig_path()).expect("kubeconfig reads");
    let options = KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("kubeconfig is usable");
    kube::Client::try_from(config).expect("client builds")
}

pub async fn client(emu: &Emulator) -> kube::Client {
    client_for(emu, None).await
}

/// A TLS emulator.
pub async fn tls() -> Emulator {
    Emulator::builder().start().await.expect("emulator starts")
}

/// The `RdmaNodeState` resource, as a dynamic type.
pub fn rns_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kuberdma.io", "v1alpha1", "RdmaNodeState"),
        "rdmanodestates",
    )
}

pub fn rns_api(client: kube::Client) -> kube::Api<DynamicObject> {
    kube::Api::all_with(client, &rns_resource())
}

/// An `RdmaNodeState` apply configuration.
pub fn rns(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": name}, "spec": spec})
}

/// A Node.
pub fn node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
}

/// The `kube::Error::Api` status of a failed call.
pub fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}
