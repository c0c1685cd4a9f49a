//! Test and benchmark helpers (feature `test-fixtures`, never in release builds): simulated nodes built from the bundled examples,
//! with fields changed in code.

use std::path::PathBuf;

use nic::roce::{DcbSource, NodeRoce, ObserveOpts};
use nic::sim::Sim;
use nic::simdesc::{NodeDesc, RoceDesc};

use crate::source::NodeSource;

/// `examples/nodes/<name>.yaml` of this workspace.
pub fn example_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(format!("{name}.yaml"))
}

/// The bundled example description `name` (`cx6dx-dual`, `e810-xxv`, `mixed`).
pub fn example(name: &str) -> NodeDesc {
    let p = example_path(name);
    nic::sim::load_desc(&p).unwrap_or_else(|e| panic!("example {}: {e}", p.display()))
}

/// Applies `f` to the RoCE settings of every PF of `desc`.
pub fn with_roce(mut desc: NodeDesc, f: impl Fn(&mut RoceDesc)) -> NodeDesc {
    for a in &mut desc.adapters {
        for pf in &mut a.pfs {
            f(&mut pf.roce);
        }
    }
    desc
}

/// A materialised simulated node and the source reading it.
pub struct SimNode {
    /// The tree (removed on drop).
    pub sim: Sim,
    /// Reads it.
    pub source: NodeSource,
}

impl SimNode {
    /// Materialises `desc`.
    pub fn new(desc: &NodeDesc) -> Self {
        let sim = Sim::materialise(desc).unwrap_or_else(|e| panic!("materialise {}: {e}", desc.node));
        let source = NodeSource {
            roots: sim.roots(),
            dcb: DcbSource::Recorded(sim.recording()),
            opts: ObserveOpts { node_name: Some(desc.node.clone()), ..ObserveOpts::default() },
        };
        Self { sim, source }
    }

    /// Reads the node.
    pub fn read(&self) -> NodeRoce {
        self.source.read()
    }
}
