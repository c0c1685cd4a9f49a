//! What the emulator saw: a bounded request log and counters, for tests'
//! assertions and benchmarks' request rates.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// One request as the emulator handled it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// Sequence number (0-based, never reused).
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Raw query string (`""` when none).
    pub query: String,
    /// Whether it was a watch.
    pub watch: bool,
    /// HTTP status answered (0 when the connection was dropped instead).
    pub status: u16,
    /// `User-Agent` header.
    pub user_agent: String,
    /// The authenticated user (`admin`, `other`) or `system:anonymous`.
    pub user: String,
    /// When the request arrived (monotonic).
    pub at: Instant,
    /// When the request arrived (wall clock).
    pub wall: SystemTime,
    /// When a watch stream ended (`None` while still open, and for
    /// non-watch requests).
    pub ended: Option<Instant>,
}

impl RequestRecord {
    /// A watch whose stream is still open.
    pub fn is_open_watch(&self) -> bool {
        self.watch && self.status == 200 && self.ended.is_none()
    }
}

/// Counter values at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests received (all kinds).
    pub requests: u64,
    /// Watch requests that got a stream.
    pub watches_started: u64,
    /// Watch streams open now.
    pub watches_open: u64,
    /// ADDED/MODIFIED/DELETED events written to watch streams.
    pub events_sent: u64,
    /// BOOKMARK events written.
    pub bookmarks_sent: u64,
    /// Watches ended because the client fell too far behind.
    pub watches_lagged: u64,
    /// Requests a fault rule affected.
    pub faults_fired: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) watches_started: AtomicU64,
    pub(crate) watches_open: AtomicU64,
    pub(crate) events_sent: AtomicU64,
    pub(crate) bookmarks_sent: AtomicU64,
    pub(crate) watches_lagged: AtomicU64,
    pub(crate) faults_fired: AtomicU64,
}

#[derive(Debug)]
struct Records {
    first_seq: u64,
    items: VecDeque<RequestRecord>,
}

/// The request log (reach it with [`crate::Emulator::log`]). It keeps the
/// most recent records (a bound set at build time); counters are never
/// trimmed.
#[derive(Debug)]
pub struct RequestLog {
    records: Mutex<Records>,
    limit: usize,
    pub(crate) counters: Counters,
}

impl RequestLog {
    pub(crate) fn new(limit: usize) -> Self {
        RequestLog {
            records: Mutex::new(Records { first_seq: 0, items: VecDeque::new() }),
            limit: limit.max(1),
            counters: Counters::default(),
        }
    }

    pub(crate) fn push(&self, mut rec: RequestRecord) -> u64 {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let seq = r.first_seq + r.items.len() as u64;
        rec.seq = seq;
        r.items.push_back(rec);
        while r.items.len() > self.limit {
            r.items.pop_front();
            r.first_seq += 1;
        }
        seq
    }

    fn with_record(&self, seq: u64, f: impl FnOnce(&mut RequestRecord)) {
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = seq.checked_sub(r.first_seq) {
            if let Some(rec) = r.items.get_mut(i as usize) {
                f(rec);
            }
        }
    }

    pub(crate) fn set_status(&self, seq: u64, status: u16) {
        self.with_record(seq, |r| r.status = status);
    }

    pub(crate) fn watch_ended(&self, seq: u64) {
        self.with_record(seq, |r| r.ended = Some(Instant::now()));
    }

    /// A copy of the retained records, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).items.iter().cloned().collect()
    }

    /// Records that arrived at or after `since`.
    pub fn since(&self, since: Instant) -> Vec<RequestRecord> {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.items.iter().filter(|x| x.at >= since).cloned().collect()
    }

    /// Requests that arrived at or after `since`, not counting watch streams
    /// that are still open (the "requests beyond open watches" of an idle
    /// cluster; a watch that ended and was re-opened counts).
    pub fn requests_since(&self, since: Instant) -> usize {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.items.iter().filter(|x| x.at >= since && !x.is_open_watch()).count()
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> u64 {
        self.counters.watches_open.load(Ordering::Relaxed)
    }

    /// ADDED/MODIFIED/DELETED events sent so far.
    pub fn events_sent(&self) -> u64 {
        self.counters.events_sent.load(Ordering::Relaxed)
    }

    /// All counters.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            requests: c.requests.load(Ordering::Relaxed),
            watches_started: c.watches_started.load(Ordering::Relaxed),
            watches_open: c.watches_open.load(Ordering::Relaxed),
            events_sent: c.events_sent.load(Ordering::Relaxed),
            bookmarks_sent: c.bookmarks_sent.load(Ordering::Relaxed),
            watches_lagged: c.watches_lagged.load(Ordering::Relaxed),
            faults_fired: c.faults_fired.load(Ordering::Relaxed),
        }
    }

    /// Forgets the retained records (counters stay).
    pub fn clear(&self) {
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let n = r.items.len() as u64;
        r.items.clear();
        r.first_seq += n;
    }
}

/// Marks a watch closed in the log and the gauge when the stream is dropped
/// (ended, timed out, aborted or the client went away).
#[derive(Debug)]
pub(crate) struct OpenWatch {
    pub(crate) log: Arc<RequestLog>,
    pub(crate) seq: u64,
}

impl OpenWatch {
    pub(crate) fn new(log: Arc<RequestLog>, seq: u64) -> Self {
        log.counters.watches_started.fetch_add(1, Ordering::Relaxed);
        log.counters.watches_open.fetch_add(1, Ordering::Relaxed);
        OpenWatch { log, seq }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.log.counters.watches_open.fetch_sub(1, Ordering::Relaxed);
        self.log.watch_ended(self.seq);
    }
}
