//! Generates the kubelet's device plugin API (`proto/api.proto`, v1beta1) and
//! PodResources API (`proto/podresources.proto`, v1), client and server, with
//! protox, so no system `protoc` is needed. DRA mode's kubelet APIs (plugin
//! registration, DRAPlugin v1 and v1beta1, DRA health) come from their own files
//! under `proto/`, compiled separately so their packages stay apart from the
//! device plugin's `v1beta1`.

#[cfg(feature = "daemon")]
const DRA_PROTOS: [&str; 4] = [
    "proto/pluginregistration/v1/api.proto",
    "proto/dra/v1/api.proto",
    "proto/dra/v1beta1/api.proto",
    "proto/dra-health/v1alpha1/api.proto",
];

/// Without the `daemon` feature (discovery only) nothing talks gRPC: no code to generate.
#[cfg(not(feature = "daemon"))]
fn main() {}

#[cfg(feature = "daemon")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    for p in ["proto/api.proto", "proto/podresources.proto"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(["proto/api.proto", "proto/podresources.proto"], ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    for p in DRA_PROTOS {
        println!("cargo:rerun-if-changed={p}");
    }
    // The DRA protos only with the `dra` feature: what DRA mode alone needs is not built without it.
    if std::env::var_os("CARGO_FEATURE_DRA").is_some() {
        let fds = protox::compile(DRA_PROTOS, ["proto"])?;
        tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    }
    Ok(())
}
