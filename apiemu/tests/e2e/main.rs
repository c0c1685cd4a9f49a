//! The emulator driven by the real kube client over real sockets, the
//! client built as our binaries build it (kubeconfig file → `Config` →
//! `Client`, or `Client::try_default` with `KUBECONFIG`).

mod common;
mod connect;
mod fanout;
mod faults;
mod serve_binary;
mod verbs;
mod watches;
