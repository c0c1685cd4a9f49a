//! One watch stream: initial events (snapshot or history replay), then the
//! resource's broadcast filtered for this watch, bookmarks, the timeout, and
//! the faults that break streams. The stream is the HTTP body itself (no
//! task per watch): the connection's task polls it.
//!
//! Filtering follows `cacheWatcher.convertToWatchEvent` (k8s.io/apiserver):
//! an object that starts matching arrives as `ADDED`, one that stops
//! matching as `DELETED` (its previous content at the new resourceVersion).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::error::ApiError;
use crate::log::OpenWatch;
use crate::object::meta_str;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::Shared;
use crate::store::{Change, ChangeKind, WatchStart};

/// What one watch request asked for.
pub(crate) struct WatchSpec {
    pub(crate) ty: Arc<ResourceType>,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    pub(crate) metadata_only: bool,
    pub(crate) bookmarks: bool,
    /// `sendInitialEvents=true`: end the initial events with a bookmark
    /// annotated `k8s.io/initial-events-end`.
    pub(crate) initial_events_end: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) drop_after: Option<usize>,
    pub(crate) expire_after: Option<usize>,
}

/// The stream ended by aborting the connection (fault or
/// [`crate::Emulator::disconnect_watches`]).
#[derive(Debug, thiserror::Error)]
#[error("watch stream aborted by the emulator")]
pub(crate) struct Aborted;

struct W {
    shared: Arc<Shared>,
    spec: WatchSpec,
    pending: VecDeque<Arc<Change>>,
    rx: tokio::sync::broadcast::Receiver<Arc<Change>>,
    start_rv: u64,
    last_rv: u64,
    sent: usize,
    initial_end_due: bool,
    bookmark: Option<tokio::time::Interval>,
    deadline: Option<tokio::time::Instant>,
    close: tokio::sync::watch::Receiver<u64>,
    done: bool,
    _open: OpenWatch,
}

impl W {
    fn passes(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.spec.namespace {
            if meta_str(obj, "namespace") != Some(ns.as_str()) {
                return false;
            }
        }
        self.spec.labels.matches(obj) && self.spec.fields.matches(obj)
    }

    /// The event line this watch sends for `c`, if any.
    fn convert(&self, c: &Change) -> Option<Bytes> {
        let cur = c.kind != ChangeKind::Deleted && self.passes(&c.object);
        let old = c.prev.as_deref().is_some_and(|p| self.passes(p));
        let md = self.spec.metadata_only;
        let (kind, body) = match (cur, old) {
            (true, false) => ("ADDED", c.object_json(md)),
            (true, true) => ("MODIFIED", c.object_json(md)),
            (false, true) => ("DELETED", c.prev_json(md)),
            (false, false) => return None,
        };
        Some(event_line(kind, &body))
    }

    fn bookmark_line(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, api_version) = if self.spec.metadata_only {
            ("PartialObjectMetadata".to_string(), "meta.k8s.io/v1".to_string())
        } else {
            (self.spec.ty.kind.clone(), self.spec.ty.api_version())
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
        event_line("BOOKMARK", &Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()))
    }

    fn counted_event(&mut self, line: Bytes) -> Frame<Bytes> {
        self.sent += 1;
        self.shared.log.counters.events_sent.fetch_add(1, Ordering::Relaxed);
        Frame::data(line)
    }

    /// The next frame, `None` at a clean end, `Err` to abort the connection.
    async fn next(&mut self) -> Option<Result<Frame<Bytes>, Aborted>> {
        loop {
            if self.done {
                return None;
            }
            if self.spec.drop_after.is_some_and(|k| self.sent >= k) {
                self.done = true;
                // Let hyper flush the head and the events already produced
                // (it flushes when the body is pending), then cut.
                tokio::time::sleep(Duration::from_millis(5)).await;
                return Some(Err(Aborted));
            }
            if self.spec.expire_after.is_some_and(|k| self.sent >= k) {
                self.done = true;
                let status =
                    ApiError::expired(self.last_rv, self.shared.store.resource_version()).to_status();
                let body = Bytes::from(serde_json::to_vec(&status).unwrap_or_default());
                return Some(Ok(Frame::data(event_line("ERROR", &body))));
            }
            if let Some(c) = self.pending.pop_front() {
                self.last_rv = self.last_rv.max(c.rv);
                if let Some(line) = self.convert(&c) {
                    return Some(Ok(self.counted_event(line)));
                }
                continue;
            }
            if self.initial_end_due {
                self.initial_end_due = false;
                self.last_rv = self.last_rv.max(self.start_rv);
                self.shared.log.counters.bookmarks_sent.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(Frame::data(self.bookmark_line(self.start_rv, true))));
            }
            let deadline = self.deadline;
            let sleep_until = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let bookmark = self.bookmark.as_mut();
            let tick = async move {
                match bookmark {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.close.changed() => {
                    self.done = true;
                    return Some(Err(Aborted));
                }
                _ = sleep_until => self.done = true,
                r = self.rx.recv() => match r {
                    Ok(c) => self.pending.push_back(c),
                    Err(RecvError::Lagged(_)) => {
                        // Too slow: end the stream like the real server does; the
                        // client resumes from its last resourceVersion.
                        self.shared.log.counters.watches_lagged.fetch_add(1, Ordering::Relaxed);
                        self.done = true;
                    }
                    Err(RecvError::Closed) => self.done = true,
                },
                _ = tick => {
                    let rv = self.shared.store.bookmark_rv(&self.rx, self.last_rv);
                    self.last_rv = rv;
                    self.shared.log.counters.bookmarks_sent.fetch_add(1, Ordering::Relaxed);
                    return Some(Ok(Frame::data(self.bookmark_line(rv, false))));
                }
            }
        }
    }
}

fn event_line(kind: &str, object: &Bytes) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

/// The body stream of a started watch.
pub(crate) fn stream(
    shared: Arc<Shared>,
    spec: WatchSpec,
    start: WatchStart,
    open: OpenWatch,
) -> impl Stream<Item = Result<Frame<Bytes>, Aborted>> + Send {
    let bookmark = spec.bookmarks.then(|| {
        let period = shared.bookmark_interval;
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut close = shared.close_watches.subscribe();
    close.borrow_and_update();
    let w = W {
        initial_end_due: spec.initial_events_end && spec.bookmarks,
        shared,
        spec,
        pending: start.initial.into(),
        rx: start.rx,
        start_rv: start.rv,
        // Once the initial events are sent, the watch has seen everything
        // up to the resourceVersion it started at.
        last_rv: start.rv,
        sent: 0,
        bookmark,
        deadline,
        close,
        done: false,
        _open: open,
    };
    futures::stream::unfold(w, |mut w| async move {
        let item = w.next().await?;
        Some((item, w))
    })
}
