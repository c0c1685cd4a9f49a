//! How one pool's serving stands, as its server and its registration task
//! publish it and [`crate::metrics`] reads it for `/healthz`: the
//! ListAndWatch streams of its socket ([`crate::server`]) and its
//! registration with the kubelet ([`crate::registration`]). Held apart so
//! that the writers and the reader depend on it, not on each other.

use std::fmt;
use std::time::Duration;

/// The ListAndWatch streams of one pool's server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streams {
    /// Open now.
    pub open: usize,
    /// Opened since the server started (never decreases).
    pub opened: u64,
}

/// Where one pool's registration stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No `kubelet.sock`: waiting for a kubelet.
    NoKubelet,
    /// A Register call is on its way.
    Registering,
    /// The kubelet accepted; waiting for its ListAndWatch.
    Verifying,
    /// Registered with the kubelet now running, which watches the pool.
    Registered,
    /// The last tries with this kubelet failed; the next one is due.
    Retrying {
        /// Failures in a row.
        failures: u32,
        /// Wait before the next try.
        retry_in: Duration,
        /// The last failure.
        error: String,
    },
}

impl State {
    /// A short name (in `/healthz`).
    pub fn label(&self) -> &'static str {
        match self {
            State::NoKubelet => "no-kubelet",
            State::Registering => "registering",
            State::Verifying => "verifying",
            State::Registered => "registered",
            State::Retrying { .. } => "retrying",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Retrying { failures, retry_in, error } => {
                write!(f, "retrying failures={failures} retry_in={retry_in:?} error={error:?}")
            }
            other => f.write_str(other.label()),
        }
    }
}
