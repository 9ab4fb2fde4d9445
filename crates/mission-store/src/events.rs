//! The event log: events are appended inside the transactions that make the changes they tell
//! of (so an event is never lost nor told of a change that did not happen), and read back in
//! `seq` order, which is their commit order on both backends (see migration 16).

use chrono::{DateTime, Utc};
use mission_api::{Event, Mission, Webhook};
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::row::Columns;
use super::{Store, StoreError, push_any_of, to_micros, with_conn};

/// An event to append: an [`Event`] without its number.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NewEvent {
    at: i64,
    kind: String,
    /// `None`: the owner of `mission_id`, looked up as the event is written.
    user_id: Option<String>,
    mission_id: Option<String>,
    job_id: Option<String>,
    /// The event's data as JSON text.
    data: String,
}

impl NewEvent {
    /// `mission.created` or `mission.updated`, carrying the mission.
    pub fn mission(kind: &str, mission: &Mission, at: DateTime<Utc>) -> Self {
        Self {
            at: to_micros(at),
            kind: kind.to_owned(),
            user_id: Some(mission.user_id.to_string()),
            mission_id: Some(mission.mission_id.to_string()),
            job_id: None,
            data: serde_json::to_string(mission).expect("missions serialise"),
        }
    }

    /// `mission.deleted`.
    pub fn mission_deleted(mission_id: Uuid, owner: Uuid, at: DateTime<Utc>) -> Self {
        Self {
            at: to_micros(at),
            kind: "mission.deleted".into(),
            user_id: Some(owner.to_string()),
            mission_id: Some(mission_id.to_string()),
            job_id: None,
            data: "{}".into(),
        }
    }

    /// `webhook.created` or `webhook.deleted`, carrying the webhook (never its secret).
    pub fn webhook(kind: &str, webhook: &Webhook, at: DateTime<Utc>) -> Self {
        let webhook = Webhook { secret: None, ..webhook.clone() };
        Self {
            at: to_micros(at),
            kind: kind.to_owned(),
            user_id: Some(webhook.user_id.to_string()),
            mission_id: None,
            job_id: None,
            data: serde_json::to_string(&webhook).expect("webhooks serialise"),
        }
    }

    /// An event about a job of `user_id`'s (of mission `mission_id`), carrying `data`.
    pub fn job(
        kind: &str,
        user_id: Uuid,
        mission_id: Uuid,
        job_id: Uuid,
        data: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            at: to_micros(at),
            kind: kind.to_owned(),
            user_id: Some(user_id.to_string()),
            mission_id: Some(mission_id.to_string()),
            job_id: Some(job_id.to_string()),
            data: data.to_string(),
        }
    }

    /// An event about a project, for `user_id` (one of its members), carrying `data`.
    pub fn project(kind: &str, user_id: Uuid, data: &serde_json::Value, at: DateTime<Utc>) -> Self {
        Self {
            at: to_micros(at),
            kind: kind.to_owned(),
            user_id: Some(user_id.to_string()),
            mission_id: None,
            job_id: None,
            data: data.to_string(),
        }
    }

    /// `files.changed`: `path` of the mission was `change`d (`uploaded`, `deleted`).
    pub fn files_changed(mission_id: Uuid, path: &str, change: &str, at: DateTime<Utc>) -> Self {
        Self {
            at: to_micros(at),
            kind: "files.changed".into(),
            user_id: None,
            mission_id: Some(mission_id.to_string()),
            job_id: None,
            data: serde_json::json!({ "path": path, "change": change }).to_string(),
        }
    }
}

/// The JSON parameter of the statements that append events.
pub(super) fn events_json(events: &[NewEvent]) -> String {
    serde_json::to_string(events).expect("events serialise")
}

/// Taken by every transaction that appends events, right before it does (after its other
/// changes, so that it holds no row lock another writer of events waits for) and until its
/// commit: events commit in the order of their `seq`.
pub(super) const POSTGRES_EVENTS_LOCK: &str = "SELECT pg_advisory_xact_lock(7400)";

/// Appends the events of a JSON array of [`NewEvent`], in its order, from the parameter named
/// (a literal such as `"$1"`), so that scripts of several statements can end with it.
macro_rules! sqlite_append_events {
    ($parameter:literal) => {
        concat!(
            $crate::sqlite::sqlite_rows!("e", $parameter),
            "INSERT INTO events (at, kind, user_id, mission_id, job_id, data) \
SELECT e.value ->> 'at', e.value ->> 'kind', \
    COALESCE(e.value ->> 'user_id', (SELECT user_id FROM missions WHERE mission_id = e.value ->> 'mission_id')), \
    e.value ->> 'mission_id', e.value ->> 'job_id', e.value ->> 'data' \
FROM e ORDER BY e.key"
        )
    };
}
pub(super) use sqlite_append_events;

/// [`sqlite_append_events`] from the first parameter.
pub(super) const SQLITE_APPEND_EVENTS: &str = sqlite_append_events!("$1");

/// [`SQLITE_APPEND_EVENTS`] on PostgreSQL.
pub(super) const POSTGRES_APPEND_EVENTS: &str = "INSERT INTO events (at, kind, user_id, mission_id, job_id, data) \
SELECT (e ->> 'at')::bigint, e ->> 'kind', \
    COALESCE(e ->> 'user_id', (SELECT user_id FROM missions WHERE mission_id = e ->> 'mission_id')), \
    e ->> 'mission_id', e ->> 'job_id', e ->> 'data' \
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS batch (e, k) ORDER BY k";

/// Sent with the events of a transaction, so that every replica hears of them as it commits
/// (on the channel of `cluster.rs`'s broadcasts, which hands the word `events_appended` to
/// [`Store::events_appended`]).
pub(super) const POSTGRES_EVENTS_NOTIFY: &str = "SELECT pg_notify('mission_broadcast', 'events_appended')";

/// Appends the JSON array `$events` of [`NewEvent`]s on `$tx`, a transaction of `$store` that
/// has made its other changes and commits next; the caller calls [`Store::events_appended`]
/// once it has. [`commit_with_events`] does all three.
macro_rules! append_events {
    ($store:expr, $tx:expr, $events:expr) => {{
        use $crate::events as e;
        if $store.on_postgres() {
            sqlx::query(e::POSTGRES_EVENTS_LOCK).execute(&mut *$tx).await?;
            sqlx::query(e::POSTGRES_EVENTS_NOTIFY).execute(&mut *$tx).await?;
        }
        sqlx::query($store.dialect(e::SQLITE_APPEND_EVENTS, e::POSTGRES_APPEND_EVENTS))
            .bind($events)
            .execute(&mut *$tx)
            .await?;
    }};
}
pub(super) use append_events;

/// Appends `$events` ([`append_events`]) and the audit entries noted
/// ([`append_audit`](crate::audit::append_audit)), commits `$tx` and wakes the event readers
/// ([`Store::events_appended`]): how a change and the events that tell of it are written.
macro_rules! commit_with_events {
    ($store:expr, $tx:expr, $events:expr) => {{
        $crate::events::append_events!($store, $tx, $events);
        $crate::audit::append_audit!($store, $tx);
        $tx.commit().await?;
        $store.events_appended();
    }};
}
pub(super) use commit_with_events;

/// How a store tells the event hub of appended events: a wake-up, and the events themselves
/// where the commit that appended them read them back (the busiest writer, the scheduler's batch
/// on SQLite, does), so that the hub need not read them from the log again.
#[derive(Debug, Default)]
pub(super) struct Appended {
    notify: tokio::sync::Notify,
    handed: std::sync::Mutex<Handed>,
}

/// The events handed over since the hub last took them.
#[derive(Debug, Default)]
struct Handed {
    events: Vec<Event>,
    /// Events were appended that are not in `events`: the hub reads the log.
    unread: bool,
}

/// The most events held for the hub: past this (nobody takes them), the hub is told to read the log.
const MAX_HANDED_EVENTS: usize = 10_000;

/// Which events to read.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only events after this number.
    pub after: u64,
    /// Only this user's events; everyone's when `None`.
    pub user_id: Option<Uuid>,
    /// Only these missions' events (any of them; all when empty).
    pub mission_ids: Vec<Uuid>,
    /// Only these jobs' events (any of them; all when empty).
    pub job_ids: Vec<Uuid>,
    /// At most this many.
    pub limit: u32,
}

/// The columns of an [`Event`], as a literal (for `concat!`).
macro_rules! event_columns {
    () => {
        "seq, at, kind, user_id, mission_id, job_id, data"
    };
}
pub(super) use event_columns;

const EVENT_COLUMNS: &str = event_columns!();

impl Store {
    /// Wakes who waits in [`Store::appended_events`]: events were committed (by this process,
    /// or by another replica, as its notification says).
    pub fn events_appended(&self) {
        self.appended.handed.lock().expect("not poisoned").unread = true;
        self.appended.notify.notify_one();
    }

    /// Wakes who waits in [`Store::appended_events`] with `events`, all that a commit appended,
    /// read back by the commit itself: the reader takes them from here instead of the log.
    pub(super) fn events_handed(&self, mut events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        events.sort_unstable_by_key(|event| event.seq);
        let mut handed = self.appended.handed.lock().expect("not poisoned");
        if handed.events.len() + events.len() > MAX_HANDED_EVENTS {
            // Nobody takes them (nobody follows): the log has them.
            handed.events.clear();
            handed.unread = true;
        } else {
            handed.events.extend(events);
        }
        drop(handed);
        self.appended.notify.notify_one();
    }

    /// Returns once events were appended since the last call (or since the store opened).
    pub async fn appended_events(&self) {
        self.appended.notify.notified().await;
    }

    /// Drops the events handed over (nobody follows); the next [`Store::take_appended_events`]
    /// reads the log.
    pub fn forget_appended_events(&self) {
        let mut handed = self.appended.handed.lock().expect("not poisoned");
        handed.events = Vec::new();
        handed.unread = true;
    }

    /// The events appended after event `after` that commits handed over
    /// (`Store::events_handed`), in order, when they are all there are; `None` when the log
    /// must be read from `after` instead (some were appended by another replica, or by a write
    /// that does not read its events back, or were dropped). Either way what was handed is taken.
    pub fn take_appended_events(&self, after: u64) -> Option<Vec<Event>> {
        let mut handed = self.appended.handed.lock().expect("not poisoned");
        let unread = std::mem::take(&mut handed.unread);
        let events: Vec<Event> = handed.events.drain(..).filter(|event| event.seq > after).collect();
        drop(handed);
        let contiguous = events.iter().zip(after + 1..).all(|(event, seq)| event.seq == seq);
        (!unread && contiguous).then_some(events)
    }

    /// Events matching `filter`, in order.
    pub async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> =
                    QueryBuilder::new(format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq > "));
                q.push_bind(filter.after as i64);
                if let Some(user) = filter.user_id {
                    q.push(" AND user_id = ").push_bind(user.to_string());
                }
                push_any_of(&mut q, "mission_id", filter.mission_ids.iter().map(Uuid::to_string));
                push_any_of(&mut q, "job_id", filter.job_ids.iter().map(Uuid::to_string));
                q.push(" ORDER BY seq LIMIT ").push_bind(i64::from(filter.limit));
                q.build().fetch_all(conn).await?
            };
            rows.iter().map(event_from_row).collect()
        })
    }

    /// The number of the oldest event kept and of the newest (0 and 0 when there are none).
    pub async fn event_bounds(&self) -> Result<(u64, u64), StoreError> {
        with_conn!(self, reader, |conn| {
            let row =
                sqlx::query("SELECT COALESCE(MIN(seq), 0) AS oldest, COALESCE(MAX(seq), 0) AS newest FROM events")
                    .fetch_one(conn)
                    .await?;
            Ok((row.count("oldest")?, row.count("newest")?))
        })
    }

    /// Removes the events that happened before `before` up to the first that did not (in
    /// `seq` order: an event a replica with a slower clock wrote later may stay a little longer),
    /// and the webhook deliveries made before it; answers how many events.
    pub async fn prune_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM webhook_deliveries WHERE created_at < $1")
                .bind(to_micros(before))
                .execute(&mut *conn)
                .await?;
            // Events are in `seq` order and nearly in time order (replicas' clocks differ a
            // little): those before the first that is not old go, and none newer than `before`.
            Ok(sqlx::query(
                "DELETE FROM events WHERE seq < COALESCE(\
                 (SELECT seq FROM events WHERE at >= $1 ORDER BY seq LIMIT 1), \
                 (SELECT MAX(seq) + 1 FROM events))",
            )
            .bind(to_micros(before))
            .execute(conn)
            .await?
            .rows_affected())
        })
    }
}

pub(super) fn event_from_row(r: &impl Columns) -> Result<Event, StoreError> {
    Ok(Event {
        seq: r.count("seq")?,
        at: r.time("at")?,
        kind: r.text("kind")?,
        user_id: r.uuid("user_id")?,
        mission_id: r.opt_uuid("mission_id")?,
        job_id: r.opt_uuid("job_id")?,
        data: r.json("data")?,
    })
}
