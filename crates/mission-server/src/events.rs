//! The live side of the event log: one reader per process follows the log (`store/events.rs`)
//! and hands every new event, in order, to the followers here (the streams of
//! `GET /api/v1/events` and `GET /jobs/events`, the webhooks' router), which filter it for
//! themselves. A follower that falls behind, or resumes from an earlier event, reads the log
//! itself until it has caught up.
//!
//! The reader wakes when this process commits events, when another replica's notification says
//! it did, and every two seconds in case a notification was lost. It also removes events older
//! than the retention window.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use mission_api::Event;
use mission_api::events::kind_matches;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::store::{EventFilter, Store, StoreError, now};

/// How often the reader looks at the log without being woken.
const POLL: Duration = Duration::from_secs(2);
/// How often events past the retention window are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Events one read of the log takes at most.
pub const PAGE: u32 = 500;
/// Events a stream may fall behind by before it reads the log itself.
const BACKLOG: usize = 4096;

/// An event as the hub hands it out, with its JSON made once for every stream and webhook.
#[derive(Debug)]
pub struct LiveEvent {
    /// The event.
    pub event: Event,
    /// It as JSON: a webhook delivery's body.
    pub json: String,
    /// It as a server-sent event: its number as the id, its kind as the event type, its JSON as
    /// the data.
    pub sse: Bytes,
}

impl LiveEvent {
    /// `event`, rendered.
    pub fn new(event: Event) -> Self {
        let json = serde_json::to_string(&event).expect("events serialise");
        let sse = Bytes::from(format!("id: {}\nevent: {}\ndata: {json}\n\n", event.seq, event.kind));
        Self { event, json, sse }
    }
}

/// Which events a follower wants.
#[derive(Debug, Default, Clone)]
pub struct Watch {
    /// Only this user's; everyone's when `None` (an admin's `all=true`).
    pub user_id: Option<Uuid>,
    /// Only these missions' (any; all when empty).
    pub mission_ids: Vec<Uuid>,
    /// Only these jobs' (any; all when empty).
    pub job_ids: Vec<Uuid>,
    /// Only these kinds, each exact or a prefix before a dot (any; all when empty).
    pub kinds: Vec<String>,
}

impl Watch {
    /// Whether `e` is wanted.
    pub fn wants(&self, e: &Event) -> bool {
        self.user_id.is_none_or(|user| e.user_id == user)
            && (self.mission_ids.is_empty() || e.mission_id.is_some_and(|m| self.mission_ids.contains(&m)))
            && (self.job_ids.is_empty() || e.job_id.is_some_and(|j| self.job_ids.contains(&j)))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| kind_matches(k, &e.kind)))
    }

    /// The part of the watch the store filters by when a follower reads the log.
    fn log_filter(&self) -> EventFilter {
        EventFilter {
            user_id: self.user_id,
            mission_ids: self.mission_ids.clone(),
            job_ids: self.job_ids.clone(),
            limit: PAGE,
            ..Default::default()
        }
    }
}

/// Longest kind filter, in bytes.
const MAX_KIND_BYTES: usize = 64;

/// Checks a kind filter given as `field`: lowercase letters, dots and underscores.
pub fn check_kind(field: &str, kind: &str) -> ApiResult<String> {
    let valid = !kind.is_empty()
        && kind.len() <= MAX_KIND_BYTES
        && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_');
    if !valid {
        return Err(ApiError::invalid_field(
            field,
            format!(
                "expected a kind such as job, job.completed or mission.created (lowercase letters, dots, \
                 underscores; at most {MAX_KIND_BYTES} bytes), got {kind:?}"
            ),
        ));
    }
    Ok(kind.to_owned())
}

/// What a follower is handed next.
#[derive(Debug)]
pub enum Followed {
    /// The next events it wants, in order.
    Events(Vec<Arc<LiveEvent>>),
    /// Nothing came for the follower's idle interval.
    Idle,
}

/// One reader of the events after a point: first those in the log, then the new ones as the
/// hub hands them out ([`EventHub::follow`]).
#[derive(Debug)]
pub struct Follower<'h> {
    hub: &'h EventHub,
    live: broadcast::Receiver<Arc<LiveEvent>>,
    watch: Watch,
    /// The number of the last event read.
    last: u64,
    /// Whether the log holds events it has not read.
    catching_up: bool,
}

impl Follower<'_> {
    /// The next events it wants (a batch of those at hand), or [`Followed::Idle`] after `idle`
    /// without one; `None` once the hub stops or the log cannot be read. Cancel-safe: nothing
    /// is lost when the future is dropped.
    pub async fn next(&mut self, idle: Duration) -> Option<Followed> {
        loop {
            let mut batch = Vec::new();
            if self.catching_up {
                let filter = EventFilter { after: self.last, ..self.watch.log_filter() };
                let page = self.hub.store.events(&filter).await.ok()?;
                self.catching_up = page.len() == PAGE as usize;
                if let Some(newest) = page.last() {
                    self.last = newest.seq;
                }
                batch.extend(page.into_iter().filter(|e| self.watch.wants(e)).map(|e| Arc::new(LiveEvent::new(e))));
            } else {
                let first = tokio::select! {
                    got = self.live.recv() => got,
                    () = tokio::time::sleep(idle) => return Some(Followed::Idle),
                };
                let mut got = Some(first);
                // Whatever else is waiting goes in the same batch.
                while let Some(next) = got.take() {
                    match next {
                        Ok(live) if live.event.seq <= self.last => {}
                        Ok(live) => {
                            self.last = live.event.seq;
                            if self.watch.wants(&live.event) {
                                batch.push(live);
                            }
                        }
                        // Fell behind the hub: read the log from the last event seen.
                        Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                    if batch.len() < PAGE as usize && !self.catching_up {
                        got = match self.live.try_recv() {
                            Ok(live) => Some(Ok(live)),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                Some(Err(broadcast::error::RecvError::Lagged(n)))
                            }
                            Err(_) => None,
                        };
                    }
                }
            }
            if !batch.is_empty() {
                return Some(Followed::Events(batch));
            }
        }
    }
}

/// The feed of new events in this process.
#[derive(Debug)]
pub struct EventHub {
    store: Store,
    live: broadcast::Sender<Arc<LiveEvent>>,
}

impl EventHub {
    /// A hub over `store`'s log; [`EventHub::run`] feeds it.
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Self { store, live: broadcast::channel(BACKLOG).0 })
    }

    /// Follows the events `watch` wants after `after` (reading the log from there first), or
    /// from now when `None`. Also answers, when events after `after` are gone (past the
    /// retention window), the number of the oldest one kept.
    pub async fn follow(&self, watch: Watch, after: Option<u64>) -> Result<(Follower<'_>, Option<u64>), StoreError> {
        // Subscribed before the log is read, and skipping what was read: nothing falls between.
        let live = self.live.subscribe();
        let (oldest, newest) = self.store.event_bounds().await?;
        let gap = after.filter(|after| oldest > after.saturating_add(1)).map(|_| oldest);
        let follower = Follower { hub: self, live, watch, last: after.unwrap_or(newest), catching_up: after.is_some() };
        Ok((follower, gap))
    }

    /// Reads new events into the feed until `shutdown`, and prunes those older than
    /// `retention`.
    pub async fn run(self: Arc<Self>, retention: Duration, shutdown: CancellationToken) {
        let mut last = loop {
            match self.store.event_bounds().await {
                Ok((_, newest)) => break newest,
                Err(e) => {
                    tracing::warn!("reading the event log: {e}");
                    tokio::select! {
                        () = tokio::time::sleep(POLL) => continue,
                        () = shutdown.cancelled() => return,
                    }
                }
            }
        };
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        loop {
            tokio::select! {
                () = self.store.appended_events() => {}
                () = tokio::time::sleep(POLL) => {}
                _ = prune.tick() => self.prune(retention).await,
                () = shutdown.cancelled() => return,
            }
            loop {
                let page =
                    match self.store.events(&EventFilter { after: last, limit: PAGE, ..Default::default() }).await {
                        Ok(page) => page,
                        Err(e) => {
                            tracing::warn!("reading the event log: {e}");
                            break;
                        }
                    };
                let full = page.len() == PAGE as usize;
                for event in page {
                    last = event.seq;
                    if self.live.receiver_count() > 0 {
                        let _ = self.live.send(Arc::new(LiveEvent::new(event)));
                    }
                }
                if !full {
                    break;
                }
            }
        }
    }

    async fn prune(&self, retention: Duration) {
        let Ok(retention) = chrono::Duration::from_std(retention) else { return };
        match self.store.prune_events(now() - retention).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} events older than the retention window"),
            Err(e) => tracing::warn!("removing old events: {e}"),
        }
    }
}
