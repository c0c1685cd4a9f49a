//! Reading functions on worker threads.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `f` over `items` on up to `threads` scoped threads, results in input order.
/// Falls back to the calling thread if a thread cannot be spawned.
pub(super) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if threads <= 1 || items.len() < 64 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            out.push((i, f(item)));
        }
        out
    };
    let mut all: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .spawn_scoped(s, || {
                        private_fd_table();
                        work()
                    })
                    .ok()
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            // Our readers do not panic; if one did, its items are redone below.
            if let Ok(part) = h.join() {
                all.extend(part);
            }
        }
        all
    });
    if all.len() != items.len() {
        let done: BTreeSet<usize> = all.iter().map(|(i, _)| *i).collect();
        for (i, item) in items.iter().enumerate().filter(|(i, _)| !done.contains(i)) {
            all.push((i, f(item)));
        }
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// Gives the calling thread its own copy of the descriptor table. Every
/// open, read and close then skips the table lock and the per-file reference
/// count that a table shared between threads costs (with two workers on one
/// table, a third of discovery's CPU time went there). The copy keeps every
/// descriptor number valid; what the thread opens stays its own, and it closes
/// all of it before it ends. The cost: a descriptor another thread closes
/// meanwhile stays open until the worker ends (a walk lasts milliseconds).
/// Failure only costs the speed.
fn private_fd_table() {
    // SAFETY: unshare(CLONE_FILES) takes no pointers and only affects this thread.
    let _ = unsafe { libc::unshare(libc::CLONE_FILES) };
}
