//! Cargo bays: the storage locations users add, with their sealed credentials.

use sqlx::Connection;
use uuid::Uuid;

use super::audit::audited_write;
use super::row::Columns;
use super::{CargoBayRecord, Store, StoreError, to_micros, with_conn};

/// Columns of `cargo_bays`, as [`bay_from_row`] reads them.
const BAY_COLUMNS: &str =
    "storage_id, user_id, name, kind, bucket, prefix, endpoint, region, path, credentials, created_at";

impl Store {
    /// Adds a cargo bay.
    pub async fn insert_cargo_bay(&self, record: &CargoBayRecord) -> Result<(), StoreError> {
        let bay = &record.bay;
        let owner = bay.user_id.ok_or_else(|| StoreError::Corrupt("a stored cargo bay needs an owner".into()))?;
        let created_at =
            bay.created_at.ok_or_else(|| StoreError::Corrupt("a stored cargo bay needs created_at".into()))?;
        audited_write!(self, |conn| {
            sqlx::query(&format!(
                "INSERT INTO cargo_bays ({BAY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ))
            .bind(bay.storage_id.to_string())
            .bind(owner.to_string())
            .bind(&bay.name)
            .bind(bay.kind.as_str())
            .bind(&bay.bucket)
            .bind(&bay.prefix)
            .bind(&bay.endpoint)
            .bind(&bay.region)
            .bind(&bay.path)
            .bind(&record.sealed_credentials)
            .bind(to_micros(created_at))
            .execute(conn)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// One cargo bay.
    pub async fn cargo_bay(&self, storage_id: Uuid) -> Result<Option<CargoBayRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!("SELECT {BAY_COLUMNS} FROM cargo_bays WHERE storage_id = $1"))
                    .bind(storage_id.to_string())
                    .fetch_optional(conn)
                    .await?
            };
            row.as_ref().map(bay_from_row).transpose()
        })
    }

    /// The cargo bays of `owner`, or of everyone when `None`, oldest first.
    pub async fn cargo_bays(&self, owner: Option<Uuid>) -> Result<Vec<CargoBayRecord>, StoreError> {
        let only_owner = if owner.is_some() { " WHERE user_id = $1" } else { "" };
        let sql = format!("SELECT {BAY_COLUMNS} FROM cargo_bays{only_owner} ORDER BY created_at, storage_id");
        with_conn!(self, reader, |conn| {
            let rows = {
                let mut query = sqlx::query(&sql);
                if let Some(user) = owner {
                    query = query.bind(user.to_string());
                }
                query.fetch_all(conn).await?
            };
            rows.iter().map(bay_from_row).collect()
        })
    }

    /// Deletes a cargo bay unless a mission still names it; `Ok(false)` when there is no such
    /// bay, [`StoreError::Conflict`] saying how many missions use it otherwise.
    pub async fn delete_cargo_bay(&self, storage_id: Uuid) -> Result<bool, StoreError> {
        let id = storage_id.to_string();
        audited_write!(self, |conn| {
            let mut tx = conn.begin().await?;
            let users: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM missions WHERE source_storage_id = $1 OR destination_storage_id = $1",
            )
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            if users > 0 {
                return Err(StoreError::Conflict(format!(
                    "cargo bay {storage_id} is named by {users} mission(s); point them elsewhere or delete them first"
                )));
            }
            let done = sqlx::query("DELETE FROM cargo_bays WHERE storage_id = $1").bind(&id).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(done.rows_affected() == 1)
        })
    }
}

fn bay_from_row(r: &impl Columns) -> Result<CargoBayRecord, StoreError> {
    let kind = match r.text("kind")?.as_str() {
        "s3" => mission_api::CargoBayKind::S3,
        "local" => mission_api::CargoBayKind::Local,
        other => return Err(StoreError::Corrupt(format!("cargo bay kind {other:?}"))),
    };
    let sealed_credentials = r.opt_bytes("credentials")?;
    Ok(CargoBayRecord {
        bay: mission_api::CargoBay {
            storage_id: r.uuid("storage_id")?,
            user_id: Some(r.uuid("user_id")?),
            name: r.text("name")?,
            kind,
            bucket: r.opt_text("bucket")?,
            prefix: r.opt_text("prefix")?,
            endpoint: r.opt_text("endpoint")?,
            region: r.opt_text("region")?,
            path: r.opt_text("path")?,
            has_credentials: sealed_credentials.is_some(),
            created_at: Some(r.time("created_at")?),
        },
        sealed_credentials,
    })
}
