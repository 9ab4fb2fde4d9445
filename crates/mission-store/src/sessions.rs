//! The web console's sign-in sessions (see `mission_server::http::console::session`).

use chrono::{DateTime, Utc};

use super::row::Columns;
use super::{ConsoleSessionRecord, Store, StoreError, to_micros, with_conn};

impl Store {
    /// Stores a new console session, dropping expired ones on the way.
    pub async fn insert_console_session(
        &self,
        session: &ConsoleSessionRecord,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
                .bind(to_micros(now))
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "INSERT INTO console_sessions (session_hash, user_id, csrf_token, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&session.session_hash)
            .bind(session.user_id.to_string())
            .bind(&session.csrf_token)
            .bind(to_micros(session.created_at))
            .bind(to_micros(session.expires_at))
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// The session whose secret hashes to `session_hash`, unless it expired by `now`.
    pub async fn console_session(
        &self,
        session_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ConsoleSessionRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(
                "SELECT session_hash, user_id, csrf_token, created_at, expires_at FROM console_sessions \
                 WHERE session_hash = $1 AND expires_at > $2",
            )
            .bind(session_hash)
            .bind(to_micros(now))
            .fetch_optional(conn)
            .await?;
            row.map(|r| {
                Ok(ConsoleSessionRecord {
                    session_hash: r.text("session_hash")?,
                    user_id: r.uuid("user_id")?,
                    csrf_token: r.text("csrf_token")?,
                    created_at: r.time("created_at")?,
                    expires_at: r.time("expires_at")?,
                })
            })
            .transpose()
        })
    }

    /// Ends a session (signing out); answers whether there was one.
    pub async fn delete_console_session(&self, session_hash: &str) -> Result<bool, StoreError> {
        let deleted = with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM console_sessions WHERE session_hash = $1")
                .bind(session_hash)
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(deleted > 0)
    }
}
