//! Users, and the built-in identity provider's device codes and refresh tokens.

use chrono::{DateTime, Utc};
use sqlx::Connection;
use uuid::Uuid;

use super::audit::audited_write;
use super::projects::PERSONAL_MARK;
use super::row::Columns;
use super::{
    DeviceCodeRecord, DeviceCodeStatus, RefreshTokenRecord, Store, StoreError, UserRecord, conflict_on_duplicate,
    to_micros, with_conn,
};

const USER_COLUMNS: &str = "user_id, username, password_hash, external_sub, admin, created_at";
const DEVICE_CODE_COLUMNS: &str = "device_code_hash, user_code, client_id, scope, status, user_id, interval_secs, \
    last_polled_at, expires_at";

impl Store {
    // ---- users ----

    /// Creates a user with their personal project; a taken username or external `sub` is a
    /// [`StoreError::Conflict`].
    pub async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let (id, at) = (user.user_id.to_string(), to_micros(user.created_at));
        let result = audited_write!(self, |conn| {
            async {
                sqlx::query(&format!("INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"))
                    .bind(&id)
                    .bind(&user.username)
                    .bind(&user.password_hash)
                    .bind(&user.external_sub)
                    .bind(user.admin)
                    .bind(at)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query(
                    "INSERT INTO projects (project_id, name, description, personal_of, created_at, updated_at) \
                     VALUES ($1, $2, '', $1, $3, $3)",
                )
                .bind(&id)
                .bind(format!("{PERSONAL_MARK}{}", user.username))
                .bind(at)
                .execute(&mut *conn)
                .await?;
                sqlx::query(
                    "INSERT INTO project_members (project_id, user_id, role, added_at) VALUES ($1, $1, 'manager', $2)",
                )
                .bind(&id)
                .bind(at)
                .execute(&mut *conn)
                .await
                .map(drop)
            }
            .await
        });
        conflict_on_duplicate(result, || format!("a user named {:?} already exists", user.username))
    }

    /// Replaces a user's password hash and admin flag.
    pub async fn update_user_credentials(
        &self,
        user_id: Uuid,
        password_hash: &str,
        admin: bool,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("UPDATE users SET password_hash = $1, admin = $2 WHERE user_id = $3")
                .bind(password_hash)
                .bind(admin)
                .bind(user_id.to_string())
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Number of users.
    pub async fn count_users(&self) -> Result<i64, StoreError> {
        Ok(with_conn!(self, reader, |conn| sqlx::query_scalar("SELECT COUNT(*) FROM users").fetch_one(conn).await?))
    }

    /// The user with this id.
    pub async fn user_by_id(&self, user_id: Uuid) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("user_id", &user_id.to_string()).await
    }

    /// The built-in user with this login name.
    pub async fn user_by_username(&self, username: &str) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("username", username).await
    }

    /// The user an external provider knows by `sub`.
    pub async fn user_by_external_sub(&self, sub: &str) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("external_sub", sub).await
    }

    /// A page of users by username (page from 1), and whether more follow.
    pub async fn users(&self, page: u32, items: u32) -> Result<(Vec<UserRecord>, bool), StoreError> {
        let offset = i64::from(page.saturating_sub(1)) * i64::from(items);
        let mut users = with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY username LIMIT $1 OFFSET $2"))
                    .bind(i64::from(items) + 1)
                    .bind(offset)
                    .fetch_all(conn)
                    .await?
            };
            rows.iter().map(user_from_row).collect::<Result<Vec<_>, _>>()
        })?;
        let more = users.len() > items as usize;
        users.truncate(items as usize);
        Ok((users, more))
    }

    /// Makes a user an admin or not; false when there is no such user.
    pub async fn set_user_admin(&self, user_id: Uuid, admin: bool) -> Result<bool, StoreError> {
        let changed = audited_write!(self, |conn| {
            sqlx::query("UPDATE users SET admin = $1 WHERE user_id = $2")
                .bind(admin)
                .bind(user_id.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(changed == 1)
    }

    async fn user_where(&self, column: &str, value: &str) -> Result<Option<UserRecord>, StoreError> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {column} = $1");
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&sql).bind(value).fetch_optional(conn).await?;
            row.as_ref().map(user_from_row).transpose()
        })
    }

    // ---- device codes ----

    /// Stores a new device authorization, dropping those expired more than a minute ago on the
    /// way (the minute in which polling them still gets `expired_token`). A clash of user codes
    /// is a [`StoreError::Conflict`] (the caller draws another).
    pub async fn insert_device_code(&self, code: &DeviceCodeRecord, now: DateTime<Utc>) -> Result<(), StoreError> {
        let result = with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM device_codes WHERE expires_at < $1")
                .bind(to_micros(now) - 60_000_000)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "INSERT INTO device_codes (device_code_hash, user_code, client_id, scope, status, user_id, \
                 interval_secs, last_polled_at, expires_at, created_at) \
                 VALUES ($1, $2, $3, $4, $5, NULL, $6, NULL, $7, $8)",
            )
            .bind(&code.device_code_hash)
            .bind(&code.user_code)
            .bind(&code.client_id)
            .bind(&code.scope)
            .bind(code.status.as_str())
            .bind(code.interval_secs)
            .bind(to_micros(code.expires_at))
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        });
        conflict_on_duplicate(result, || "user code already in use".into())
    }

    /// The device authorization with this user code.
    pub async fn device_code_by_user_code(&self, user_code: &str) -> Result<Option<DeviceCodeRecord>, StoreError> {
        let sql = format!("SELECT {DEVICE_CODE_COLUMNS} FROM device_codes WHERE user_code = $1");
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&sql).bind(user_code).fetch_optional(conn).await?;
            row.as_ref().map(device_code_from_row).transpose()
        })
    }

    /// Records a poll of the device code with this hash and returns the record as it was before
    /// the poll (so the caller can compare `last_polled_at` with the interval).
    pub async fn poll_device_code(
        &self,
        device_code_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<DeviceCodeRecord>, StoreError> {
        // The row is locked until the update (`FOR UPDATE`, PostgreSQL; SQLite's one writer
        // serialises anyway), so two polls racing see each other's `last_polled_at`.
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let row = sqlx::query(&format!(
                "SELECT {DEVICE_CODE_COLUMNS} FROM device_codes WHERE device_code_hash = $1{}",
                self.for_update()
            ))
            .bind(device_code_hash)
            .fetch_optional(&mut *tx)
            .await?;
            let record = row.as_ref().map(device_code_from_row).transpose()?;
            if record.is_some() {
                sqlx::query("UPDATE device_codes SET last_polled_at = $1 WHERE device_code_hash = $2")
                    .bind(to_micros(now))
                    .bind(device_code_hash)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(record)
        })
    }

    /// Adds `by` seconds to a device code's polling interval (after a `slow_down`).
    pub async fn slow_down_device_code(&self, device_code_hash: &str, by: i64) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("UPDATE device_codes SET interval_secs = interval_secs + $1 WHERE device_code_hash = $2")
                .bind(by)
                .bind(device_code_hash)
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Approves (`Some(user)`) or denies (`None`) a pending, unexpired device code. Returns whether
    /// a pending code was found and changed.
    pub async fn decide_device_code(
        &self,
        user_code: &str,
        user_id: Option<Uuid>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let status = if user_id.is_some() { DeviceCodeStatus::Approved } else { DeviceCodeStatus::Denied };
        let done = with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE device_codes SET status = $1, user_id = $2 \
                 WHERE user_code = $3 AND status = 'pending' AND expires_at > $4",
            )
            .bind(status.as_str())
            .bind(user_id.map(|u| u.to_string()))
            .bind(user_code)
            .bind(to_micros(now))
            .execute(conn)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }

    /// Marks an approved device code consumed; true when this call did it (exactly one poller
    /// gets tokens for a code).
    pub async fn consume_device_code(&self, device_code_hash: &str) -> Result<bool, StoreError> {
        let done = with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE device_codes SET status = 'consumed' WHERE device_code_hash = $1 AND status = 'approved'",
            )
            .bind(device_code_hash)
            .execute(conn)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }

    // ---- refresh tokens ----

    /// Stores a refresh token by its hash.
    pub async fn insert_refresh_token(
        &self,
        token_hash: &str,
        record: &RefreshTokenRecord,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "INSERT INTO refresh_tokens (token_hash, user_id, client_id, scope, created_at, expires_at, \
                 revoked_at) VALUES ($1, $2, $3, $4, $5, $6, NULL)",
            )
            .bind(token_hash)
            .bind(record.user_id.to_string())
            .bind(&record.client_id)
            .bind(&record.scope)
            .bind(to_micros(now))
            .bind(to_micros(record.expires_at))
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// The refresh token with this hash, revoked or not.
    pub async fn refresh_token(&self, token_hash: &str) -> Result<Option<RefreshTokenRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(
                "SELECT user_id, client_id, scope, expires_at, revoked_at FROM refresh_tokens WHERE token_hash = $1",
            )
            .bind(token_hash)
            .fetch_optional(conn)
            .await?;
            row.map(|r| {
                Ok(RefreshTokenRecord {
                    user_id: r.uuid("user_id")?,
                    client_id: r.text("client_id")?,
                    scope: r.text("scope")?,
                    expires_at: r.time("expires_at")?,
                    revoked_at: r.opt_time("revoked_at")?,
                })
            })
            .transpose()
        })
    }

    /// Revokes a refresh token; true when it existed and was live.
    pub async fn revoke_refresh_token(&self, token_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = with_conn!(self, writer, |conn| {
            sqlx::query("UPDATE refresh_tokens SET revoked_at = $1 WHERE token_hash = $2 AND revoked_at IS NULL")
                .bind(to_micros(now))
                .bind(token_hash)
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(done == 1)
    }
}

fn user_from_row(r: &impl Columns) -> Result<UserRecord, StoreError> {
    Ok(UserRecord {
        user_id: r.uuid("user_id")?,
        username: r.text("username")?,
        password_hash: r.opt_text("password_hash")?,
        external_sub: r.opt_text("external_sub")?,
        admin: r.flag("admin")?,
        created_at: r.time("created_at")?,
    })
}

fn device_code_from_row(r: &impl Columns) -> Result<DeviceCodeRecord, StoreError> {
    Ok(DeviceCodeRecord {
        device_code_hash: r.text("device_code_hash")?,
        user_code: r.text("user_code")?,
        client_id: r.text("client_id")?,
        scope: r.text("scope")?,
        status: DeviceCodeStatus::parse(&r.text("status")?)?,
        user_id: r.opt_uuid("user_id")?,
        interval_secs: r.int("interval_secs")?,
        last_polled_at: r.opt_time("last_polled_at")?,
        expires_at: r.time("expires_at")?,
    })
}
