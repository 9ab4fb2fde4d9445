//! Stations, their members and their landing zones.

use chrono::{DateTime, Utc};
use mission_api::{LandingZone, Resources, Station, StationMember};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use super::{Store, conflict_on_duplicate, parse_uuid};
use crate::store::{StoreError, from_micros, to_micros};

const STATION_COLUMNS: &str = "station_id, name, description, owner_id, open, created_at";
const LZ_COLUMNS: &str = "lz_id, station_id, name, cpu_count, memory_amount, gpu_count, last_seen_at, created_at";

impl Store {
    /// Adds a station; a taken name is a [`StoreError::Conflict`].
    pub async fn insert_station(&self, station: &Station) -> Result<(), StoreError> {
        let result = sqlx::query(&format!("INSERT INTO stations ({STATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"))
            .bind(station.station_id.to_string())
            .bind(&station.name)
            .bind(&station.description)
            .bind(station.owner_id.map(|u| u.to_string()))
            .bind(station.open)
            .bind(to_micros(station.created_at))
            .execute(&mut *self.writer().await)
            .await;
        conflict_on_duplicate(result, || format!("a station named {:?} exists already", station.name))
    }

    /// One station.
    pub async fn station(&self, station_id: Uuid) -> Result<Option<Station>, StoreError> {
        let row = sqlx::query(&format!("SELECT {STATION_COLUMNS} FROM stations WHERE station_id = ?"))
            .bind(station_id.to_string())
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.as_ref().map(station_from_row).transpose()
    }

    /// The stations `user` may run jobs on (open ones, owned ones, member of), or all when `None`;
    /// by name.
    pub async fn stations(&self, user: Option<Uuid>) -> Result<Vec<Station>, StoreError> {
        let rows = match user {
            None => {
                sqlx::query(&format!("SELECT {STATION_COLUMNS} FROM stations ORDER BY name"))
                    .fetch_all(&mut *self.reader().await)
                    .await?
            }
            Some(user) => {
                sqlx::query(&format!(
                    "SELECT {STATION_COLUMNS} FROM stations WHERE open = 1 OR owner_id = ?1 OR station_id IN \
                 (SELECT station_id FROM station_members WHERE user_id = ?1) ORDER BY name"
                ))
                .bind(user.to_string())
                .fetch_all(&mut *self.reader().await)
                .await?
            }
        };
        rows.iter().map(station_from_row).collect()
    }

    /// Deletes a station with its members and landing zones; true when it existed.
    pub async fn delete_station(&self, station_id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM stations WHERE station_id = ?")
            .bind(station_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether `user` is a member of the station.
    pub async fn is_station_member(&self, station_id: Uuid, user: Uuid) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM station_members WHERE station_id = ? AND user_id = ?")
            .bind(station_id.to_string())
            .bind(user.to_string())
            .fetch_one(&mut *self.reader().await)
            .await?;
        Ok(n > 0)
    }

    /// Adds a member (again is fine).
    pub async fn add_station_member(&self, station_id: Uuid, user: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO station_members (station_id, user_id, added_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(station_id.to_string())
        .bind(user.to_string())
        .bind(to_micros(now))
        .execute(&mut *self.writer().await)
        .await?;
        Ok(())
    }

    /// Removes a member; true when they were one.
    pub async fn remove_station_member(&self, station_id: Uuid, user: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM station_members WHERE station_id = ? AND user_id = ?")
            .bind(station_id.to_string())
            .bind(user.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The members of a station, by username.
    pub async fn station_members(&self, station_id: Uuid) -> Result<Vec<StationMember>, StoreError> {
        let rows = sqlx::query(
            "SELECT m.user_id, u.username, m.added_at FROM station_members m JOIN users u ON u.user_id = m.user_id \
             WHERE m.station_id = ? ORDER BY u.username",
        )
        .bind(station_id.to_string())
        .fetch_all(&mut *self.reader().await)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StationMember {
                    user_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
                    username: r.try_get(1)?,
                    added_at: from_micros(r.try_get(2)?)?,
                })
            })
            .collect()
    }

    /// Registers a landing zone whose agent will present the token hashed as `token_hash`; a name
    /// taken in the station is a [`StoreError::Conflict`].
    pub async fn insert_landing_zone(&self, lz: &LandingZone, token_hash: &str) -> Result<(), StoreError> {
        let result = sqlx::query(
            "INSERT INTO landing_zones (lz_id, station_id, name, token_hash, created_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(lz.lz_id.to_string())
        .bind(lz.station_id.to_string())
        .bind(&lz.name)
        .bind(token_hash)
        .bind(to_micros(lz.created_at))
        .execute(&mut *self.writer().await)
        .await;
        conflict_on_duplicate(result, || format!("the station has a landing zone named {:?} already", lz.name))
    }

    /// The landing zones of a station (of all stations when `None`), by name; `lease` decides
    /// which count as online at `now`.
    pub async fn landing_zones(
        &self,
        station_id: Option<Uuid>,
        lease: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<LandingZone>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {LZ_COLUMNS} FROM landing_zones WHERE ?1 IS NULL OR station_id = ?1 ORDER BY name"
        ))
        .bind(station_id.map(|id| id.to_string()))
        .fetch_all(&mut *self.reader().await)
        .await?;
        rows.iter().map(|r| lz_from_row(r, lease, now)).collect()
    }

    /// Removes a landing zone of a station; true when it existed.
    pub async fn delete_landing_zone(&self, station_id: Uuid, lz_id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM landing_zones WHERE station_id = ? AND lz_id = ?")
            .bind(station_id.to_string())
            .bind(lz_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

fn station_from_row(r: &SqliteRow) -> Result<Station, StoreError> {
    Ok(Station {
        station_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
        name: r.try_get(1)?,
        description: r.try_get(2)?,
        owner_id: r.try_get::<Option<String>, _>(3)?.as_deref().map(parse_uuid).transpose()?,
        open: r.try_get(4)?,
        created_at: from_micros(r.try_get(5)?)?,
    })
}

fn lz_from_row(r: &SqliteRow, lease: std::time::Duration, now: DateTime<Utc>) -> Result<LandingZone, StoreError> {
    let cpu: Option<i64> = r.try_get(3)?;
    let resources = match cpu {
        Some(cpu) => Some(Resources {
            cpu_count: cpu as u32,
            memory_amount: r.try_get::<i64, _>(4)? as u64,
            gpu_count: r.try_get::<i64, _>(5)? as u32,
        }),
        None => None,
    };
    let last_seen_at = r.try_get::<Option<i64>, _>(6)?.map(from_micros).transpose()?;
    let lease = chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    Ok(LandingZone {
        lz_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
        station_id: parse_uuid(&r.try_get::<String, _>(1)?)?,
        name: r.try_get(2)?,
        online: last_seen_at.is_some_and(|seen| now - seen < lease),
        resources,
        last_seen_at,
        created_at: from_micros(r.try_get(7)?)?,
    })
}
