//! The live side of the event log: one reader per process follows the log (`store/events.rs`)
//! and hands every new event, in order, to the streams open here (`GET /api/v1/events`,
//! `GET /jobs/events`), which filter it for their caller. A stream that falls behind, or resumes
//! from an earlier event, reads the log itself until it has caught up.
//!
//! The reader wakes when this process commits events, when another replica's notification says
//! it did, and every two seconds in case a notification was lost. It also removes events older
//! than the retention window.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use mission_api::Event;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::{EventFilter, Store, now};

/// How often the reader looks at the log without being woken.
const POLL: Duration = Duration::from_secs(2);
/// How often events past the retention window are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Events one read of the log takes at most.
pub const PAGE: u32 = 500;
/// Events a stream may fall behind by before it reads the log itself.
const BACKLOG: usize = 4096;

/// A new event, with its server-sent form made once for every stream that sends it whole.
#[derive(Debug)]
pub struct LiveEvent {
    /// The event.
    pub event: Event,
    /// It as a server-sent event ([`sse`]).
    pub sse: Bytes,
}

/// An event as a server-sent event: its number as the id, its kind as the event type.
pub fn sse(event: &Event) -> Bytes {
    let data = serde_json::to_string(event).expect("events serialise");
    Bytes::from(format!("id: {}\nevent: {}\ndata: {data}\n\n", event.seq, event.kind))
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

    /// New events as the reader finds them. Subscribe before reading the log for earlier ones,
    /// and skip what was already read: nothing falls between.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.live.subscribe()
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
                        let _ = self.live.send(Arc::new(LiveEvent { sse: sse(&event), event }));
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
