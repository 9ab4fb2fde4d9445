//! Container images (migration 32): the rows of archives stored in the service's storage.

use mission_api::{Image, ImageVisibility};
use uuid::Uuid;

use super::audit::audited_write;
use super::jobs::FINAL_STATUSES;
use super::row::Columns;
use super::{Store, StoreError, conflict_on_duplicate, to_micros, with_conn};

/// Columns of `images`, as [`image_from_row`] reads them.
const IMAGE_COLUMNS: &str =
    "image_id, owner_id, project_id, name, digest, size, format, visibility, created_at, reference";

/// An SQL expression: the bytes the image archives of the user bound as `user` (`$N`) hold. A
/// registry image holds none of the service's.
pub(super) fn archive_bytes_of(user: &str) -> String {
    format!("(SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM images WHERE owner_id = {user} AND reference IS NULL)")
}

/// The bytes the user bound as `$1` holds in files, uploads in flight and image archives (what
/// `max_user_bytes` bounds).
fn owner_bytes_sql() -> String {
    format!(
        "SELECT COALESCE((SELECT bytes FROM user_file_usage WHERE user_id = $1), 0) \
         + (SELECT CAST(COALESCE(SUM(reserved_bytes), 0) AS BIGINT) FROM file_intents WHERE user_id = $1) + {}",
        archive_bytes_of("$1")
    )
}

impl Store {
    /// The bytes `user_id`'s files, uploads in flight and image archives hold.
    pub async fn owner_bytes(&self, user_id: Uuid) -> Result<u64, StoreError> {
        let sql = owner_bytes_sql();
        let bytes: i64 = with_conn!(self, reader, |conn| {
            sqlx::query_scalar(&sql).bind(user_id.to_string()).fetch_one(conn).await?
        });
        Ok(bytes.max(0) as u64)
    }

    /// Adds an image where its owner's bytes ([`Store::owner_bytes`]) stay within `owner_room`
    /// with it; else answers them (`Ok(Err(bytes))`) and adds nothing (a registry image, whose
    /// archive the service does not hold, passes `u64::MAX`). The check and the insert are one
    /// transaction that holds the owner's row, as uploads' reservations do, so parallel imports
    /// and uploads cannot all pass. [`StoreError::Conflict`] when its owner has an image of that
    /// name.
    pub async fn insert_image(&self, image: &Image, owner_room: u64) -> Result<Result<(), u64>, StoreError> {
        let lock_owner = format!("SELECT user_id FROM users WHERE user_id = $1{}", self.for_update());
        let insert = format!("INSERT INTO images ({IMAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)");
        let owner_bytes = owner_bytes_sql();
        let mut used = 0u64;
        let result = audited_write!(self, |conn| {
            let inserted: Result<bool, sqlx::Error> = async {
                sqlx::query(&lock_owner).bind(image.owner_id.to_string()).execute(&mut *conn).await?;
                let bytes: i64 =
                    sqlx::query_scalar(&owner_bytes).bind(image.owner_id.to_string()).fetch_one(&mut *conn).await?;
                used = bytes.max(0) as u64;
                if used.saturating_add(image.size) > owner_room {
                    return Ok(false);
                }
                sqlx::query(&insert)
                    .bind(image.image_id.to_string())
                    .bind(image.owner_id.to_string())
                    .bind(image.project_id.to_string())
                    .bind(&image.name)
                    .bind(&image.digest)
                    .bind(i64::try_from(image.size).unwrap_or(i64::MAX))
                    .bind(image.format.as_str())
                    .bind(image.visibility.as_str())
                    .bind(to_micros(image.created_at))
                    .bind(&image.reference)
                    .execute(&mut *conn)
                    .await?;
                Ok(true)
            }
            .await;
            inserted
        });
        match result {
            Ok(true) => Ok(Ok(())),
            Ok(false) => Ok(Err(used)),
            Err(e) => {
                let named = || format!("you have an image named {:?} already", image.name);
                conflict_on_duplicate(Err::<(), _>(e), named).map(|()| Ok(()))
            }
        }
    }

    /// One image, by id.
    pub async fn image(&self, image_id: Uuid) -> Result<Option<Image>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!("SELECT {IMAGE_COLUMNS} FROM images WHERE image_id = $1"))
                    .bind(image_id.to_string())
                    .fetch_optional(conn)
                    .await?
            };
            row.as_ref().map(image_from_row).transpose()
        })
    }

    /// The images named `name`, or whose digest is `digest`, of every owner, oldest first (the
    /// caller picks those it may see).
    pub async fn images_named(&self, name: Option<&str>, digest: Option<&str>) -> Result<Vec<Image>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!(
                    "SELECT {IMAGE_COLUMNS} FROM images WHERE name = $1 OR digest = $2 ORDER BY created_at, image_id"
                ))
                .bind(name)
                .bind(digest)
                .fetch_all(conn)
                .await?
            };
            rows.iter().map(image_from_row).collect()
        })
    }

    /// The images `user_id` sees (every image, with `all`: an admin's listing): their own, the
    /// `project` images of their projects, and the `public` ones; by name.
    pub async fn images(&self, user_id: Uuid, all: bool) -> Result<Vec<Image>, StoreError> {
        let sql = format!(
            "SELECT {IMAGE_COLUMNS} FROM images WHERE $1 OR owner_id = $2 OR visibility = 'public' \
             OR (visibility = 'project' AND project_id IN (SELECT project_id FROM project_members WHERE user_id = $2)) \
             ORDER BY name, created_at"
        );
        with_conn!(self, reader, |conn| {
            let rows = { sqlx::query(&sql).bind(all).bind(user_id.to_string()).fetch_all(conn).await? };
            rows.iter().map(image_from_row).collect()
        })
    }

    /// Every image's id (start-up removes the archives that have no row).
    pub async fn image_ids(&self) -> Result<Vec<Uuid>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = { sqlx::query("SELECT image_id FROM images").fetch_all(conn).await? };
            rows.iter().map(|r| r.uuid("image_id")).collect()
        })
    }

    /// Removes an image's row unless a job that has not ended runs in it ([`StoreError::Conflict`]
    /// saying how many); `Ok(false)` when there is no such image.
    pub async fn delete_image(&self, image_id: Uuid) -> Result<bool, StoreError> {
        let id = image_id.to_string();
        audited_write!(self, |conn| {
            let mut tx = sqlx::Connection::begin(conn).await?;
            let users: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM jobs WHERE image_id = $1 AND status NOT IN {FINAL_STATUSES}"
            ))
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            if users > 0 {
                return Err(StoreError::Conflict(format!(
                    "image {image_id} is the image of {users} job(s) that have not ended; stop them or let them end first"
                )));
            }
            let done = sqlx::query("DELETE FROM images WHERE image_id = $1").bind(&id).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(done.rows_affected() == 1)
        })
    }
}

fn image_from_row(r: &impl Columns) -> Result<Image, StoreError> {
    let corrupt = |what: &str, e: String| StoreError::Corrupt(format!("image {what}: {e}"));
    Ok(Image {
        image_id: r.uuid("image_id")?,
        owner_id: r.uuid("owner_id")?,
        project_id: r.uuid("project_id")?,
        name: r.text("name")?,
        digest: r.text("digest")?,
        size: r.count("size")?,
        format: r.text("format")?.parse().map_err(|e| corrupt("format", e))?,
        visibility: r.text("visibility")?.parse::<ImageVisibility>().map_err(|e| corrupt("visibility", e))?,
        created_at: r.time("created_at")?,
        reference: r.opt_text("reference")?,
    })
}
