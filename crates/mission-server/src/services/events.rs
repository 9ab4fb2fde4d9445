//! The live side of the event log: one reader per process follows the log (`store/events.rs`)
//! and hands every new event, in order, to the followers here (the streams of
//! `GET /api/v1/events` and `GET /jobs/events`, the webhooks' router), which filter it for
//! themselves. A follower that falls behind, or resumes from an earlier event, reads the log
//! itself until it has caught up.
//!
//! The reader wakes when this process commits events, when another replica's notification says
//! it did, and every two seconds in case a notification was lost; while nobody follows it reads
//! nothing. It also removes events older than the retention window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use mission_api::Event;
use mission_api::events::kind_matches;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use mission_store::{EventFilter, Store, StoreError, now};

/// How often the reader looks at the log without being woken.
const POLL: Duration = Duration::from_secs(2);
/// How often events past the retention window are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Events one read of the log takes at most.
pub const PAGE: u32 = 500;
/// Events a follower may fall behind by before it reads the log itself.
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

/// What a follower is handed next.
#[derive(Debug)]
pub enum Followed {
    /// The next events it wants, in order.
    Events(Vec<Arc<LiveEvent>>),
    /// Nothing came for the follower's idle interval.
    Idle,
}

/// One reader of the events after a point: first those in the log, then the new ones as the
/// hub hands them out ([`EventHub::follow`]). Stops following when dropped.
#[derive(Debug)]
pub struct Follower<'h> {
    hub: &'h EventHub,
    /// Its entry in the hub's index.
    id: u64,
    live: mpsc::Receiver<Arc<LiveEvent>>,
    /// Set by the hub when an event did not fit in `live`.
    lagged: Arc<AtomicBool>,
    watch: Arc<Watch>,
    /// The number of the last event read.
    last: u64,
    /// Whether the log holds events it has not read.
    catching_up: bool,
}

impl Drop for Follower<'_> {
    fn drop(&mut self) {
        self.hub.followers.lock().expect("not poisoned").remove(self.id, &self.watch);
    }
}

impl Follower<'_> {
    /// The next events it wants (a batch of those at hand), or [`Followed::Idle`] after `idle`
    /// without one; `None` once the hub stops or the log cannot be read. Cancel-safe: nothing
    /// is lost when the future is dropped.
    pub async fn next(&mut self, idle: Duration) -> Option<Followed> {
        loop {
            let mut batch = Vec::new();
            // Events that did not fit are read from the log once those that did are read: the
            // hub sends a lagging follower nothing until then.
            if self.live.is_empty() && self.lagged.swap(false, Ordering::AcqRel) {
                self.catching_up = true;
            }
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
                    got = self.live.recv() => got?,
                    () = tokio::time::sleep(idle) => return Some(Followed::Idle),
                };
                let mut got = Some(first);
                // Whatever else is waiting goes in the same batch.
                while let Some(live) = got.take() {
                    if live.event.seq > self.last {
                        self.last = live.event.seq;
                        batch.push(live);
                    }
                    if batch.len() < PAGE as usize {
                        got = self.live.try_recv().ok();
                    }
                }
            }
            if !batch.is_empty() {
                return Some(Followed::Events(batch));
            }
        }
    }
}

/// Where the hub looks a follower up: by the narrowest part of its watch, so that an event is
/// offered only to followers that may want it (a thousand streams each watching their own
/// mission cost an event one lookup, not a thousand wake-ups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Mission(Uuid),
    Job(Uuid),
    User(Uuid),
    Everyone,
}

impl Key {
    /// The keys a follower with `watch` is filed under.
    fn of_watch(watch: &Watch) -> Vec<Key> {
        if !watch.mission_ids.is_empty() {
            watch.mission_ids.iter().copied().map(Key::Mission).collect()
        } else if !watch.job_ids.is_empty() {
            watch.job_ids.iter().copied().map(Key::Job).collect()
        } else {
            vec![watch.user_id.map_or(Key::Everyone, Key::User)]
        }
    }

    /// The keys under which followers that may want `event` are filed.
    fn of_event(event: &Event) -> impl Iterator<Item = Key> {
        [
            event.mission_id.map(Key::Mission),
            event.job_id.map(Key::Job),
            Some(Key::User(event.user_id)),
            Some(Key::Everyone),
        ]
        .into_iter()
        .flatten()
    }
}

/// A follower as the hub's index holds it.
#[derive(Debug)]
struct Entry {
    id: u64,
    watch: Arc<Watch>,
    live: mpsc::Sender<Arc<LiveEvent>>,
    lagged: Arc<AtomicBool>,
}

/// The followers of one process, filed by [`Key`].
#[derive(Debug, Default)]
struct Followers {
    next_id: u64,
    by_key: HashMap<Key, Vec<Entry>>,
    /// Set when the hub found nobody following and stopped reading the log.
    idle: bool,
    /// Where the hub, idle, reads from once it reads again: the newest event when the first
    /// follower since came (older ones that follower reads from the log itself).
    resume_after: Option<u64>,
}

impl Followers {
    /// Whether the hub reads the log now, moving `last` to where an idle hub resumes. It reads
    /// nothing while nobody follows, nor while the first follower since has not said where it
    /// starts.
    fn reading(&mut self, last: &mut u64) -> bool {
        if self.by_key.is_empty() {
            (self.idle, self.resume_after) = (true, None);
            return false;
        }
        if self.idle {
            let Some(from) = self.resume_after.take() else { return false };
            (*last, self.idle) = (from, false);
        }
        true
    }

    fn remove(&mut self, id: u64, watch: &Watch) {
        for key in Key::of_watch(watch) {
            if let Some(entries) = self.by_key.get_mut(&key) {
                entries.retain(|e| e.id != id);
                if entries.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    /// Offers `event` to every follower that wants it (rendering it only then).
    fn offer(&self, event: Event) {
        let mut live: Option<Arc<LiveEvent>> = None;
        for key in Key::of_event(&event) {
            for entry in self.by_key.get(&key).into_iter().flatten() {
                // A lagging follower is sent nothing more until it has read the log: what it
                // gets after that is then all later than what it missed.
                if entry.lagged.load(Ordering::Acquire) || !entry.watch.wants(&event) {
                    continue;
                }
                let live = live.get_or_insert_with(|| Arc::new(LiveEvent::new(event.clone())));
                if let Err(mpsc::error::TrySendError::Full(_)) = entry.live.try_send(live.clone()) {
                    entry.lagged.store(true, Ordering::Release);
                }
            }
        }
    }
}

/// The feed of new events in this process.
#[derive(Debug)]
pub struct EventHub {
    store: Store,
    followers: Mutex<Followers>,
    /// Wakes the reader: an idle hub has a follower again.
    wake: Notify,
    /// Pages of the log the reader has read, counted.
    pages_read: AtomicU64,
}

impl EventHub {
    /// A hub over `store`'s log; [`EventHub::run`] feeds it.
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Self { store, followers: Mutex::default(), wake: Notify::new(), pages_read: AtomicU64::new(0) })
    }

    /// Follows the events `watch` wants after `after` (reading the log from there first), or
    /// from now when `None`. Also answers, when events after `after` are gone (past the
    /// retention window), the number of the oldest one kept.
    pub async fn follow(&self, watch: Watch, after: Option<u64>) -> Result<(Follower<'_>, Option<u64>), StoreError> {
        // Filed before the log is read, and skipping what was read: nothing falls between.
        let (tx, live) = mpsc::channel(BACKLOG);
        let (watch, lagged) = (Arc::new(watch), Arc::new(AtomicBool::new(false)));
        let id = {
            let mut followers = self.followers.lock().expect("not poisoned");
            followers.next_id += 1;
            let id = followers.next_id;
            for key in Key::of_watch(&watch) {
                let entry = Entry { id, watch: watch.clone(), live: tx.clone(), lagged: lagged.clone() };
                followers.by_key.entry(key).or_default().push(entry);
            }
            id
        };
        let mut follower = Follower { hub: self, id, live, lagged, watch, last: 0, catching_up: after.is_some() };
        let (oldest, newest) = self.store.event_bounds().await?;
        let gap = after.filter(|after| oldest > after.saturating_add(1)).map(|_| oldest);
        follower.last = after.unwrap_or(newest);
        let mut followers = self.followers.lock().expect("not poisoned");
        if followers.idle {
            // Later events come from the hub; earlier ones this follower reads from the log.
            followers.resume_after = Some(followers.resume_after.map_or(newest, |from| from.min(newest)));
            self.wake.notify_one();
        }
        drop(followers);
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
            let mut polled = false;
            tokio::select! {
                () = self.store.appended_events() => {}
                () = self.wake.notified() => {}
                // Reads the log even when told of nothing (a replica's notice can be lost).
                () = tokio::time::sleep(POLL) => polled = true,
                _ = prune.tick() => self.prune(retention).await,
                () = shutdown.cancelled() => return,
            }
            // Nobody follows (most servers, most of the time): nothing to read for.
            if !self.followers.lock().expect("not poisoned").reading(&mut last) {
                self.store.forget_appended_events();
                continue;
            }
            // What this process's own commits appended, handed over by them: no read.
            if let Some(handed) = self.store.take_appended_events(last).filter(|_| !polled) {
                let followers = self.followers.lock().expect("not poisoned");
                for event in handed {
                    last = event.seq;
                    followers.offer(event);
                }
                continue;
            }
            loop {
                self.pages_read.fetch_add(1, Ordering::Relaxed);
                let page =
                    match self.store.events(&EventFilter { after: last, limit: PAGE, ..Default::default() }).await {
                        Ok(page) => page,
                        Err(e) => {
                            tracing::warn!("reading the event log: {e}");
                            break;
                        }
                    };
                let full = page.len() == PAGE as usize;
                let followers = self.followers.lock().expect("not poisoned");
                for event in page {
                    last = event.seq;
                    followers.offer(event);
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

#[cfg(test)]
mod tests {
    use super::*;
    use mission_store::test_support::{mission, store_with_user};

    /// A store in `dir` with a user, and a hub reading it until the token is cancelled.
    async fn running_hub(
        dir: &tempfile::TempDir,
    ) -> (Store, mission_store::UserRecord, Arc<EventHub>, CancellationToken, tokio::task::JoinHandle<()>) {
        let (store, user) = store_with_user(dir.path()).await;
        let hub = EventHub::new(store.clone());
        let shutdown = CancellationToken::new();
        let reader = tokio::spawn(hub.clone().run(Duration::from_secs(3600), shutdown.clone()));
        (store, user, hub, shutdown, reader)
    }

    /// More events than a follower's backlog arrive while it reads none: it still gets every
    /// one, in order, the later ones from the log; a follower filed under another mission is
    /// offered none.
    #[tokio::test]
    async fn a_follower_that_falls_behind_misses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (store, user, hub, shutdown, reader) = running_hub(&dir).await;
        let (mut behind, _) = hub.follow(Watch::default(), None).await.unwrap();
        let elsewhere = Watch { mission_ids: vec![Uuid::new_v4()], ..Default::default() };
        let (mut other, _) = hub.follow(elsewhere, None).await.unwrap();
        let total = BACKLOG + 904;
        for chunk in (0..total).collect::<Vec<_>>().chunks(PAGE as usize) {
            let missions: Vec<_> = chunk.iter().map(|i| mission(user.user_id, &format!("m{i}"))).collect();
            store.insert_missions(&missions).await.unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !behind.lagged.load(Ordering::Acquire) {
            assert!(tokio::time::Instant::now() < deadline, "the hub never found the follower behind");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut seen = Vec::new();
        while seen.len() < total {
            match behind.next(Duration::from_secs(10)).await {
                Some(Followed::Events(batch)) => seen.extend(batch.iter().map(|live| live.event.seq)),
                other => panic!("after {} events: {other:?}", seen.len()),
            }
        }
        assert_eq!(seen, (1..=total as u64).collect::<Vec<_>>());
        assert!(matches!(other.next(Duration::from_millis(50)).await, Some(Followed::Idle)));
        drop((behind, other));
        assert!(hub.followers.lock().unwrap().by_key.is_empty(), "dropped followers leave the index");
        shutdown.cancel();
        reader.await.unwrap();
    }

    /// While nobody follows, the hub reads nothing of the log, however many events are
    /// appended; the first follower after that, from now or from an earlier event, misses none.
    #[tokio::test]
    async fn a_hub_nobody_follows_reads_nothing_and_the_next_follower_misses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (store, user, hub, shutdown, reader) = running_hub(&dir).await;
        let add = |names: std::ops::Range<u32>| {
            let missions: Vec<_> = names.map(|i| mission(user.user_id, &format!("m{i}"))).collect();
            let store = store.clone();
            async move { store.insert_missions(&missions).await.unwrap() }
        };
        for i in 0..5 {
            add(i..i + 1).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(hub.pages_read.load(Ordering::Relaxed), 0, "nobody follows");
        let (mut now, _) = hub.follow(Watch::default(), None).await.unwrap();
        let (mut earlier, _) = hub.follow(Watch::default(), Some(2)).await.unwrap();
        add(5..8).await;
        for (follower, first) in [(&mut now, 6), (&mut earlier, 3)] {
            let mut seen = Vec::new();
            while seen.len() < 8 - first + 1 {
                match follower.next(Duration::from_secs(10)).await {
                    Some(Followed::Events(batch)) => seen.extend(batch.iter().map(|live| live.event.seq)),
                    other => panic!("after {seen:?}: {other:?}"),
                }
            }
            assert_eq!(seen, (first as u64..=8).collect::<Vec<_>>());
        }
        assert!(hub.pages_read.load(Ordering::Relaxed) > 0, "the new events came through the hub");
        shutdown.cancel();
        reader.await.unwrap();
    }

    /// Reads from `follower` into `seen` (the events' kinds) until it holds `n`.
    async fn expect(follower: &mut Follower<'_>, seen: &mut Vec<String>, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while seen.len() < n {
            assert!(std::time::Instant::now() < deadline, "only {seen:?}");
            match follower.next(Duration::from_secs(10)).await {
                Some(Followed::Events(batch)) => seen.extend(batch.iter().map(|live| live.event.kind.clone())),
                other => panic!("after {seen:?}: {other:?}"),
            }
        }
    }

    /// The events of the scheduler's job writes come to the followers from the commits that
    /// appended them, with no read of the log; a write that does not hand its events over (a
    /// mission's) between two of them has the hub read the log, and every event arrives once, in
    /// order.
    #[tokio::test]
    async fn a_hub_takes_the_events_of_job_writes_from_their_commits() {
        let dir = tempfile::tempdir().unwrap();
        let (store, user, hub, shutdown, reader) = running_hub(&dir).await;
        let (mut follower, _) = hub.follow(Watch::default(), None).await.unwrap();
        let first = mission(user.user_id, "m");
        store.insert_missions(std::slice::from_ref(&first)).await.unwrap();
        let mut seen = Vec::new();
        expect(&mut follower, &mut seen, 1).await;
        let read_before = hub.pages_read.load(Ordering::Relaxed);
        let job = |at| {
            mission_api::Job::queued(
                first.mission_id,
                user.user_id,
                mission_store::DEFAULT_STATION_ID,
                vec!["true".into()],
                at,
            )
        };
        for round in 0..3 {
            let job = job(now());
            store.save_jobs(&[(store.next_job_seq().await.unwrap(), job.clone())], &[], &[]).await.unwrap();
            let mut running = mission_store::JobUpdate::new(job.job_id, mission_api::JobStatus::Assigned);
            running.at = now();
            store.save_jobs(&[], &[running], &[]).await.unwrap();
            expect(&mut follower, &mut seen, 3 + round * 3).await;
            assert_eq!(
                hub.pages_read.load(Ordering::Relaxed),
                read_before + round as u64,
                "read only after a mission's"
            );
            store.insert_missions(&[mission(user.user_id, &format!("m{round}"))]).await.unwrap();
            expect(&mut follower, &mut seen, 4 + round * 3).await;
        }
        assert_eq!(seen.iter().filter(|kind| *kind == "mission.created").count(), 4, "{seen:?}");
        assert_eq!(seen.iter().filter(|kind| *kind == "job.queued").count(), 3, "{seen:?}");
        drop(follower);
        shutdown.cancel();
        reader.await.unwrap();
    }
}
