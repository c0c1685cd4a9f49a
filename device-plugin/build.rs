//! Generates the kubelet's device plugin API (`proto/api.proto`, v1beta1) and
//! PodResources API (`proto/podresources.proto`, v1), client and server, with
//! protox, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for p in ["proto/api.proto", "proto/podresources.proto"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(["proto/api.proto", "proto/podresources.proto"], ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    Ok(())
}
