//! Webhooks and their deliveries (migration 17).
//!
//! A webhook's registration and removal are events themselves (`webhook.created`,
//! `webhook.deleted`), appended in the same transaction, so whoever follows the log learns of a
//! webhook exactly where its events begin: `since_seq` is the number of its `webhook.created`.
//! Routing writes deliveries idempotently (one per webhook and event) and moves the cursor in the
//! same transaction; senders claim due deliveries for a while before they try them, so that two
//! replicas never send one delivery at once.

use chrono::{DateTime, Utc};
use mission_api::{DeliveryStatus, Webhook, WebhookDelivery};
use sqlx::{Connection, QueryBuilder};
use uuid::Uuid;

use super::audit::commit_audited;
use super::events::{NewEvent, append_events, commit_with_events, events_json};
use super::row::Columns;
use super::{Store, StoreError, from_micros, to_json, to_micros, with_conn};

/// A webhook row: the webhook as the API shows it, with its sealed secret and the number of its
/// first event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRecord {
    /// The webhook (`secret` is never set here).
    pub webhook: Webhook,
    /// Its secret, sealed by the server's key (see `sealing`) for its id.
    pub sealed_secret: Vec<u8>,
    /// It gets the events from this number on (its own `webhook.created`).
    pub since_seq: u64,
}

/// An event routed to a webhook, to become a pending delivery.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NewDelivery {
    /// The webhook.
    pub webhook_id: Uuid,
    /// The event's number.
    pub event_seq: u64,
    /// The event's kind.
    pub event_kind: String,
    /// The event as JSON: the body of every attempt.
    pub body: String,
}

/// A delivery claimed for its next attempt, with what the attempt needs.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    /// The delivery.
    pub delivery_id: Uuid,
    /// Its webhook.
    pub webhook_id: Uuid,
    /// The event's kind.
    pub event_kind: String,
    /// The body to POST.
    pub body: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// Where to POST it.
    pub url: String,
    /// The webhook's sealed secret.
    pub sealed_secret: Vec<u8>,
}

/// How an attempt ended, as [`Store::finish_delivery_attempt`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// `Delivered`; `Failed` when no attempt is left; `Pending` to try again at `next_attempt_at`.
    pub status: DeliveryStatus,
    /// The receiver's answer, if it gave one.
    pub response_status: Option<u16>,
    /// Why it failed.
    pub error: Option<String>,
    /// When to try again, for `Pending`.
    pub next_attempt_at: Option<DateTime<Utc>>,
}

const WEBHOOK_COLUMNS: &str = "webhook_id, user_id, url, secret, mission_ids, kinds, all_users, since_seq, created_at";

const DELIVERY_COLUMNS: &str = "delivery_id, webhook_id, event_seq, event_kind, status, attempts, response_status, \
last_error, created_at, next_attempt_at, finished_at";

/// Records a JSON array of [`NewDelivery`] (with `delivery_id`s) as pending deliveries, once per
/// webhook and event, skipping webhooks that no longer exist.
const SQLITE_ADD_DELIVERIES: &str = concat!(
    crate::sqlite::sqlite_rows!("e", "$1"),
    "INSERT INTO webhook_deliveries \
(delivery_id, webhook_id, event_seq, event_kind, body, status, attempts, created_at, next_attempt_at) \
SELECT e.value ->> 'delivery_id', w.webhook_id, e.value ->> 'event_seq', e.value ->> 'event_kind', \
    e.value ->> 'body', 'pending', 0, $2, $2 \
FROM e JOIN webhooks w ON w.webhook_id = e.value ->> 'webhook_id' WHERE true \
ON CONFLICT (webhook_id, event_seq) DO NOTHING"
);

/// [`SQLITE_ADD_DELIVERIES`] on PostgreSQL.
const POSTGRES_ADD_DELIVERIES: &str = "INSERT INTO webhook_deliveries \
(delivery_id, webhook_id, event_seq, event_kind, body, status, attempts, created_at, next_attempt_at) \
SELECT e ->> 'delivery_id', w.webhook_id, (e ->> 'event_seq')::bigint, e ->> 'event_kind', \
    e ->> 'body', 'pending', 0, $2, $2 \
FROM jsonb_array_elements($1::jsonb) AS batch (e) JOIN webhooks w ON w.webhook_id = e ->> 'webhook_id' \
ON CONFLICT (webhook_id, event_seq) DO NOTHING";

impl Store {
    /// Adds a webhook unless its owner has `max_per_user` already ([`StoreError::Conflict`]),
    /// with its `webhook.created` event; answers it with the number of that event.
    pub async fn insert_webhook(
        &self,
        webhook: &Webhook,
        sealed_secret: &[u8],
        max_per_user: u32,
    ) -> Result<WebhookRecord, StoreError> {
        let id = webhook.webhook_id.to_string();
        let event = NewEvent::webhook("webhook.created", webhook, webhook.created_at);
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let owned: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhooks WHERE user_id = $1")
                .bind(webhook.user_id.to_string())
                .fetch_one(&mut *tx)
                .await?;
            if owned >= i64::from(max_per_user) {
                return Err(StoreError::Conflict(format!(
                    "you have {owned} webhooks, the most this server allows; delete one first"
                )));
            }
            sqlx::query(&format!(
                "INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8)"
            ))
            .bind(&id)
            .bind(webhook.user_id.to_string())
            .bind(&webhook.url)
            .bind(sealed_secret)
            .bind(to_json(&webhook.mission_ids))
            .bind(to_json(&webhook.kinds))
            .bind(webhook.all)
            .bind(to_micros(webhook.created_at))
            .execute(&mut *tx)
            .await?;
            // Not `commit_with_events!`: the webhook learns its event's number before the commit.
            append_events!(self, tx, events_json(&[event]));
            // The event just appended is the newest: one writer at a time appends events.
            let since_seq: i64 = sqlx::query_scalar(
                "UPDATE webhooks SET since_seq = (SELECT MAX(seq) FROM events) WHERE webhook_id = $1 \
                 RETURNING since_seq",
            )
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            commit_audited!(self, tx);
            self.events_appended();
            Ok(WebhookRecord {
                webhook: webhook.clone(),
                sealed_secret: sealed_secret.to_vec(),
                since_seq: since_seq as u64,
            })
        })
    }

    /// One webhook.
    pub async fn webhook(&self, webhook_id: Uuid) -> Result<Option<WebhookRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE webhook_id = $1"))
                .bind(webhook_id.to_string())
                .fetch_optional(conn)
                .await?;
            row.as_ref().map(webhook_from_row).transpose()
        })
    }

    /// The webhooks of `owner`, or everyone's when `None`, oldest first.
    pub async fn webhooks(&self, owner: Option<Uuid>) -> Result<Vec<WebhookRecord>, StoreError> {
        let only_owner = if owner.is_some() { " WHERE user_id = $1" } else { "" };
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks{only_owner} ORDER BY created_at, webhook_id");
        with_conn!(self, reader, |conn| {
            let rows = {
                let mut query = sqlx::query(&sql);
                if let Some(user) = owner {
                    query = query.bind(user.to_string());
                }
                query.fetch_all(conn).await?
            };
            rows.iter().map(webhook_from_row).collect()
        })
    }

    /// Removes a webhook and its deliveries, with its `webhook.deleted` event; false when there
    /// was no such webhook.
    pub async fn delete_webhook(&self, webhook_id: Uuid) -> Result<bool, StoreError> {
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let deleted =
                sqlx::query(&format!("DELETE FROM webhooks WHERE webhook_id = $1 RETURNING {WEBHOOK_COLUMNS}"))
                    .bind(webhook_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some(row) = deleted else { return Ok(false) };
            let record = webhook_from_row(&row)?;
            commit_with_events!(
                self,
                tx,
                events_json(&[NewEvent::webhook("webhook.deleted", &record.webhook, super::now())])
            );
            Ok(true)
        })
    }

    /// The number of the last event routed into deliveries.
    pub async fn webhook_cursor(&self) -> Result<u64, StoreError> {
        with_conn!(self, reader, |conn| {
            let seq: Option<i64> =
                sqlx::query_scalar("SELECT seq FROM webhook_cursor WHERE id = 1").fetch_optional(conn).await?;
            Ok(seq.unwrap_or(0).max(0) as u64)
        })
    }

    /// Records `deliveries` as pending and due at once (each event once per webhook; none for a
    /// webhook deleted meanwhile), and moves the cursor on to `routed`, in one transaction.
    pub async fn add_deliveries(
        &self,
        deliveries: &[NewDelivery],
        routed: u64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            delivery_id: Uuid,
            #[serde(flatten)]
            delivery: &'a NewDelivery,
        }
        let rows: Vec<Row> = deliveries.iter().map(|delivery| Row { delivery_id: Uuid::new_v4(), delivery }).collect();
        let rows = serde_json::to_string(&rows).expect("deliveries serialise");
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            if !deliveries.is_empty() {
                sqlx::query(self.dialect(SQLITE_ADD_DELIVERIES, POSTGRES_ADD_DELIVERIES))
                    .bind(&rows)
                    .bind(to_micros(now))
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("UPDATE webhook_cursor SET seq = $1 WHERE id = 1 AND seq < $1")
                .bind(routed as i64)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Claims up to `limit` deliveries due at `now` and not claimed by another sender, until
    /// `until`; answers them, oldest due first.
    pub async fn claim_deliveries(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let skip_locked = self.dialect("", " FOR UPDATE SKIP LOCKED");
        let claim = format!(
            "UPDATE webhook_deliveries SET claimed_until = $1 WHERE delivery_id IN (\
             SELECT delivery_id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $2 \
             AND (claimed_until IS NULL OR claimed_until <= $2) ORDER BY next_attempt_at LIMIT $3{skip_locked}) \
             RETURNING delivery_id"
        );
        with_conn!(self, writer, |conn: Db| {
            let mut tx = conn.begin().await?;
            let claimed: Vec<String> = sqlx::query_scalar(&claim)
                .bind(to_micros(until))
                .bind(to_micros(now))
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?;
            let rows = if claimed.is_empty() {
                Vec::new()
            } else {
                let mut q: QueryBuilder<Db> = QueryBuilder::new(
                    "SELECT d.delivery_id, d.webhook_id, d.event_kind, d.body, d.attempts, w.url, w.secret \
                     FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id WHERE true",
                );
                super::push_any_of(&mut q, "d.delivery_id", claimed.into_iter());
                q.push(" ORDER BY d.next_attempt_at");
                q.build().fetch_all(&mut *tx).await?
            };
            tx.commit().await?;
            rows.iter()
                .map(|r| {
                    Ok(DueDelivery {
                        delivery_id: r.uuid("delivery_id")?,
                        webhook_id: r.uuid("webhook_id")?,
                        event_kind: r.text("event_kind")?,
                        body: r.text("body")?,
                        attempts: r.count("attempts")? as u32,
                        url: r.text("url")?,
                        sealed_secret: r.opt_bytes("secret")?.unwrap_or_default(),
                    })
                })
                .collect()
        })
    }

    /// When the next pending delivery may be claimed (its attempt is due and no sender holds
    /// it); `None` when none is pending.
    pub async fn next_delivery_due(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let later = self.dialect("MAX", "GREATEST");
        let sql = format!(
            "SELECT MIN({later}(next_attempt_at, COALESCE(claimed_until, 0))) FROM webhook_deliveries \
             WHERE status = 'pending'"
        );
        with_conn!(self, reader, |conn| {
            let at: Option<i64> = sqlx::query_scalar(&sql).fetch_one(conn).await?;
            at.map(from_micros).transpose()
        })
    }

    /// Records the end of an attempt at `delivery_id` and lets go of its claim.
    pub async fn finish_delivery_attempt(
        &self,
        delivery_id: Uuid,
        outcome: &AttemptOutcome,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let finished_at = (outcome.status != DeliveryStatus::Pending).then_some(to_micros(now));
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = $2, response_status = $3, \
                 last_error = $4, next_attempt_at = $5, finished_at = $6, claimed_until = NULL \
                 WHERE delivery_id = $1",
            )
            .bind(delivery_id.to_string())
            .bind(outcome.status.as_str())
            .bind(outcome.response_status.map(i64::from))
            .bind(&outcome.error)
            .bind(outcome.next_attempt_at.map(to_micros))
            .bind(finished_at)
            .execute(conn)
            .await?;
            Ok(())
        })
    }

    /// The deliveries of a webhook, newest event first: only those with `status` when given,
    /// only events before `before` when given, at most `limit`.
    pub async fn deliveries(
        &self,
        webhook_id: Uuid,
        status: Option<DeliveryStatus>,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> =
                    QueryBuilder::new(format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = "));
                q.push_bind(webhook_id.to_string());
                if let Some(status) = status {
                    q.push(" AND status = ").push_bind(status.as_str());
                }
                if let Some(before) = before {
                    q.push(" AND event_seq < ").push_bind(before as i64);
                }
                q.push(" ORDER BY event_seq DESC LIMIT ").push_bind(i64::from(limit));
                q.build().fetch_all(conn).await?
            };
            rows.iter().map(delivery_from_row).collect()
        })
    }
}

fn webhook_from_row(r: &impl Columns) -> Result<WebhookRecord, StoreError> {
    Ok(WebhookRecord {
        webhook: Webhook {
            webhook_id: r.uuid("webhook_id")?,
            user_id: r.uuid("user_id")?,
            url: r.text("url")?,
            mission_ids: r.json("mission_ids")?,
            kinds: r.json("kinds")?,
            all: r.flag("all_users")?,
            created_at: r.time("created_at")?,
            secret: None,
        },
        sealed_secret: r.opt_bytes("secret")?.unwrap_or_default(),
        since_seq: r.count("since_seq")?,
    })
}

fn delivery_from_row(r: &impl Columns) -> Result<WebhookDelivery, StoreError> {
    let status = r.text("status")?;
    Ok(WebhookDelivery {
        delivery_id: r.uuid("delivery_id")?,
        webhook_id: r.uuid("webhook_id")?,
        event_seq: r.count("event_seq")?,
        event_kind: r.text("event_kind")?,
        status: status.parse().map_err(StoreError::Corrupt)?,
        attempts: r.count("attempts")? as u32,
        response_status: r.opt_int("response_status")?.map(|s| s as u16),
        last_error: r.opt_text("last_error")?,
        created_at: r.time("created_at")?,
        next_attempt_at: r.opt_time("next_attempt_at")?,
        finished_at: r.opt_time("finished_at")?,
    })
}
