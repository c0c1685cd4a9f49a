//! The real-cluster test tier: a single-node Kubernetes cluster whose every
//! peer is the real program, built from the Go module proxy (`e2e/peers`,
//! `e2e/build-peers`), running on this machine with a simulated RDMA node,
//! and kube-rdma installed on it by its Helm chart.
//!
//! ```text
//! peers      where the Go binaries are (built once, cached outside the clone)
//! pki        CA, serving and client certificates, kubeconfigs
//! daemon     processes: start with a log, in the node's namespaces, stop by pid
//! apiserver  etcd + kube-apiserver (also a fixture for tests: ApiServer::start)
//! node       what the node changes on the host: netns, mounts, cgroups (and undoes)
//! hostdirs   the host mount-point directories instances share (the last one down removes them)
//! locks      the host-wide locks instances take (images, host dirs, one up/down at a time)
//! images     pause, busybox and kube-rdma images, made offline
//! cluster    up / down / env / status of the local cluster
//! simsync    the simulated tree follows its veth links (netdevs moved into pods)
//! whereabouts the cluster-wide IPAM plugin on the node (binary, CRDs, RBAC, kubeconfig)
//! ```
//!
//! Data flows one way: a node description (`e2e/node.yaml`) → a simulated
//! sysfs tree and real veth links → the cluster's processes → kube-rdma's pods.

pub mod apiserver;
pub mod cluster;
pub mod daemon;
pub mod hostdirs;
pub mod images;
mod locks;
pub mod node;
pub mod peers;
pub mod pki;
pub mod simsync;
pub mod whereabouts;

pub use apiserver::ApiServer;
