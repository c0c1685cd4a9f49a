//! STATUS: whether ADDs can succeed (50/51 otherwise).

use nic::NetnsMode;
use nic::Roots;

use crate::conf::{Env, NetConf};
use crate::error::{Error, Result};
use crate::{ipam, journal, lock, rdma};

/// STATUS: ready, or 50 with the reason (the IPAM plugin's 50/51 pass through).
pub fn status(conf: &NetConf, env: &Env, roots: &Roots) -> Result<()> {
    journal::ensure_dirs(&conf.state_dir)
        .map_err(|e| Error::Unavailable(format!("state directory unusable: {}", e.chain())))?;
    lock::ensure_node_dir(&env.node_dir)
        .map_err(|e| Error::Unavailable(format!("node directory unusable (VF locks): {}", e.chain())))?;
    let probe = conf.state_dir.join(format!(".status-{}", std::process::id()));
    std::fs::write(&probe, b"").and_then(|_| std::fs::remove_file(&probe)).map_err(|e| {
        Error::Unavailable(format!("state directory {} is not writable: {e}", conf.state_dir.display()))
    })?;
    // STATUS configs carry the ADD keys too; only `rdma: required` matters here.
    let required =
        crate::conf::Keys::of(&conf.raw, "").str("rdma").ok().flatten().is_some_and(|(_, v)| v == "required");
    if required {
        match rdma::netns_mode(roots) {
            Some(NetnsMode::Exclusive) => {}
            Some(NetnsMode::Shared) => {
                return Err(Error::Unavailable(
                    "rdma is \"required\" but the RDMA subsystem is in shared netns mode; boot with ib_core netns_mode=0".into(),
                ))
            }
            None => {
                return Err(Error::Unavailable(
                    "rdma is \"required\" but there is no RDMA subsystem (ib_core not loaded)".into(),
                ))
            }
        }
    }
    if let Some(i) = &conf.ipam {
        match ipam::forward_v11(&conf.raw, &i.kind, "STATUS", env, &conf.state_dir) {
            Ok(_) => {}
            Err(e @ Error::Ipam { code: Some(50 | 51), .. }) => return Err(e),
            Err(e) => return Err(Error::Unavailable(e.chain())),
        }
    }
    Ok(())
}
