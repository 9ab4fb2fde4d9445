//! Idempotency keys (see `mission_server::http::idempotency`): who claimed which key for which
//! request, and the answer it got.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::row::Columns;
use super::{Store, StoreError, to_micros, with_conn};

/// An answer kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    /// Its HTTP status.
    pub status: u16,
    /// Its `Content-Type`, if it had one.
    pub content_type: Option<String>,
    /// Its body.
    pub body: Vec<u8>,
}

/// What claiming a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyClaim {
    /// The key is this request's: run it, then [`Store::keep_idempotent_answer`] (or
    /// [`Store::release_idempotency_key`] where it failed on the server's side).
    Claimed,
    /// The same request ran with the key: its answer.
    Answered(KeptAnswer),
    /// The same request runs with the key now.
    Running,
    /// Another request used the key.
    OtherRequest,
}

impl Store {
    /// Claims `key` of `user_id` for the request of `fingerprint`, unless a request holds it:
    /// one that claimed it before `abandoned_before` and has no answer yet is taken to have died
    /// with its server, and one claimed before `expired_before` is forgotten (its row goes with
    /// [`Store::prune_idempotency_keys`]). One statement where the key is new: every POST of
    /// the SDK carries a key.
    pub async fn claim_idempotency_key(
        &self,
        user_id: Uuid,
        key: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
        expired_before: DateTime<Utc>,
    ) -> Result<IdempotencyClaim, StoreError> {
        with_conn!(self, writer, |conn| {
            let claimed = sqlx::query(
                "INSERT INTO idempotency_keys (user_id, idempotency_key, fingerprint, started_at) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (user_id, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint, \
                 started_at = excluded.started_at, status = NULL, content_type = NULL, body = NULL \
                 WHERE (idempotency_keys.status IS NULL AND idempotency_keys.started_at < $5) \
                 OR idempotency_keys.started_at < $6",
            )
            .bind(user_id.to_string())
            .bind(key)
            .bind(fingerprint)
            .bind(to_micros(now))
            .bind(to_micros(abandoned_before))
            .bind(to_micros(expired_before))
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if claimed > 0 {
                return Ok(IdempotencyClaim::Claimed);
            }
            let row = sqlx::query(
                "SELECT fingerprint, status, content_type, body FROM idempotency_keys \
                 WHERE user_id = $1 AND idempotency_key = $2",
            )
            .bind(user_id.to_string())
            .bind(key)
            .fetch_one(conn)
            .await?;
            if row.text("fingerprint")? != fingerprint {
                return Ok(IdempotencyClaim::OtherRequest);
            }
            Ok(match row.opt_int("status")? {
                None => IdempotencyClaim::Running,
                Some(status) => IdempotencyClaim::Answered(KeptAnswer {
                    status: u16::try_from(status).unwrap_or(500),
                    content_type: row.opt_text("content_type")?,
                    body: row.opt_bytes("body")?.unwrap_or_default(),
                }),
            })
        })
    }

    /// Keeps the answer of the request that claimed `key`.
    pub async fn keep_idempotent_answer(
        &self,
        user_id: Uuid,
        key: &str,
        answer: &KeptAnswer,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5 \
                 WHERE user_id = $1 AND idempotency_key = $2",
            )
            .bind(user_id.to_string())
            .bind(key)
            .bind(i64::from(answer.status))
            .bind(answer.content_type.as_deref())
            .bind(&answer.body)
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// Removes the keys claimed before `before`; answers how many.
    pub async fn prune_idempotency_keys(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        with_conn!(self, writer, |conn| {
            Ok(sqlx::query("DELETE FROM idempotency_keys WHERE started_at < $1")
                .bind(to_micros(before))
                .execute(conn)
                .await?
                .rows_affected())
        })
    }

    /// Frees `key` for a retry (its request failed on the server's side).
    pub async fn release_idempotency_key(&self, user_id: Uuid, key: &str) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2")
                .bind(user_id.to_string())
                .bind(key)
                .execute(conn)
                .await?;
        });
        Ok(())
    }
}
