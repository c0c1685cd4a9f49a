//! `kubectl rdma`'s room: what it shows and how it reaches the cluster, in
//! kubectl's habits (the binary, `src/bin/kubectl-rdma.rs`, is its command line).
//!
//! - [`view`]: tables of node states, and the reads behind `status`;
//! - [`output`]: `-o` formats and the exit status of the checking commands;
//! - [`jsonpath`]: `-o jsonpath=TEMPLATE`;
//! - [`client`]: the Kubernetes client configured as kubectl's (`--kubeconfig`,
//!   `--context`, `--as`, `--request-timeout`), with its kubeconfig errors;
//! - [`duration`]: the one duration syntax of every interval flag;
//! - [`errors`]: errors worded as kubectl words them;
//! - [`version`]: `kubectl rdma version`;
//! - [`completion`]: `kubectl rdma <TAB>` inside kubectl's own completion.
//!
//! `kube-rdma-operator` borrows from here what must be the same in both binaries:
//! `agent --once` prints as `kubectl rdma check` does ([`output`], [`view`]), and
//! the agent and controller reach the API server through [`client`] and read
//! their intervals with [`duration`]. Nothing here depends on the agent or the
//! controller.
pub mod client;
pub mod completion;
pub mod duration;
pub mod errors;
pub mod jsonpath;
pub mod output;
pub mod version;
pub mod view;
