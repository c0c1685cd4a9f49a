//! When things happened, on `CLOCK_MONOTONIC`: now, and when this process
//! began (a VF lock's DEL records compare the two).

/// `CLOCK_MONOTONIC`, in ns.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// When this process began, in ns of `CLOCK_MONOTONIC`: now less the time it
/// has run and waited to run (`/proc/self/schedstat`: `sum_exec_runtime` and
/// `run_delay`, both counted from the fork; Documentation/scheduler/sched-stats.rst),
/// that is its fork plus any time it slept, which before `main` is none to
/// speak of. Never before the fork, so a DEL that returned before the fork
/// never counts as after it. Call it first thing: later it would count the
/// time spent waiting for stdin or a lock. Without schedstat (a kernel
/// without `CONFIG_SCHED_INFO`): now.
pub fn process_began() -> u64 {
    let now = monotonic_ns();
    let spent = std::fs::read_to_string("/proc/self/schedstat").ok().and_then(|s| {
        let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(f.next()??.saturating_add(f.next()??))
    });
    now.saturating_sub(spent.unwrap_or(0))
}
