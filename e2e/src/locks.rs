//! The host-wide locks the local cluster instances take: one file per lock in
//! the shared cache directory, held with `flock(2)`, so the kernel releases it
//! when its holder dies (a killed `up` leaves no stale lock behind).

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};

use crate::peers;

/// An exclusive lock on `<cache>/<name>`, held while the value lives (a second
/// taker waits).
pub fn exclusive(name: &str) -> Result<Flock<std::fs::File>> {
    let dir = peers::cache_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", path.display()))
}
