//! Stations, their members and their landing zones.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mission_api::{LandingZone, Resources, Station, StationMember, UpdateStation};
use uuid::Uuid;

use super::audit::audited_write;
use super::jobs::FINAL_STATUSES;
use super::row::Columns;
use super::{Store, StoreError, conflict_on_duplicate, to_micros, with_conn};

const STATION_COLUMNS: &str =
    "station_id, name, description, owner_id, open, created_at, reclaim, container_network, energy, grid_problem";
const LZ_COLUMNS: &str = "lz_id, station_id, name, cpu_count, memory_amount, gpu_count, last_seen_at, created_at, cluster_account, pilot_of, \
     images";

impl Store {
    /// Adds a station; a taken name is a [`StoreError::Conflict`].
    pub async fn insert_station(&self, station: &Station) -> Result<(), StoreError> {
        let result = audited_write!(self, |conn| {
            sqlx::query(&format!(
                "INSERT INTO stations ({STATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ))
            .bind(station.station_id.to_string())
            .bind(&station.name)
            .bind(&station.description)
            .bind(station.owner_id.map(|u| u.to_string()))
            .bind(station.open)
            .bind(to_micros(station.created_at))
            .bind(station.reclaim)
            .bind(station.container_network.as_str())
            .bind(energy_json(&station.energy))
            .bind(station.grid_intensity_problem.as_deref())
            .execute(conn)
            .await
            .map(drop)
        });
        conflict_on_duplicate(result, || format!("a station named {:?} exists already", station.name))
    }

    /// One station.
    pub async fn station(&self, station_id: Uuid) -> Result<Option<Station>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!("SELECT {STATION_COLUMNS} FROM stations WHERE station_id = $1"))
                    .bind(station_id.to_string())
                    .fetch_optional(conn)
                    .await?
            };
            row.as_ref().map(station_from_row).transpose()
        })
    }

    /// The stations `user` may run jobs on (open ones, owned ones, member of), or all when `None`;
    /// by name.
    pub async fn stations(&self, user: Option<Uuid>) -> Result<Vec<Station>, StoreError> {
        let sql = match user {
            None => format!("SELECT {STATION_COLUMNS} FROM stations ORDER BY name"),
            Some(_) => format!(
                "SELECT {STATION_COLUMNS} FROM stations WHERE open = {} OR owner_id = $1 OR station_id IN \
                 (SELECT station_id FROM station_members WHERE user_id = $1) ORDER BY name",
                self.sql_true()
            ),
        };
        with_conn!(self, reader, |conn| {
            let rows = {
                let mut query = sqlx::query(&sql);
                if let Some(user) = user {
                    query = query.bind(user.to_string());
                }
                query.fetch_all(conn).await?
            };
            rows.iter().map(station_from_row).collect()
        })
    }

    /// Changes what `changes` gives of a station's description and switches (checked by the
    /// caller); false when there is no such station.
    pub async fn update_station(&self, station_id: Uuid, changes: &UpdateStation) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query(
                "UPDATE stations SET description = COALESCE($1, description), open = COALESCE($2, open), \
                 reclaim = COALESCE($3, reclaim), container_network = COALESCE($4, container_network), \
                 energy = CASE WHEN $5 THEN $6 ELSE energy END, \
                 grid_problem = CASE WHEN $5 THEN NULL ELSE grid_problem END WHERE station_id = $7",
            )
            .bind(changes.description.as_deref())
            .bind(changes.open)
            .bind(changes.reclaim)
            .bind(changes.container_network.map(|n| n.as_str()))
            .bind(changes.energy.is_some())
            .bind(changes.energy.as_ref().and_then(energy_json))
            .bind(station_id.to_string())
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// What a station's grid intensity `file` gave when it was read: a good `value` becomes its
    /// intensity, a `problem` is kept beside the last good one. Nothing changes where the station
    /// no longer reads that file (its settings changed meanwhile); true where something did.
    pub async fn set_grid_intensity(
        &self,
        station_id: Uuid,
        file: &str,
        value: Option<f64>,
        problem: Option<&str>,
    ) -> Result<bool, StoreError> {
        let sql = self.dialect(
            "UPDATE stations SET energy = CASE WHEN $1 IS NULL THEN energy \
             ELSE json_set(energy, '$.grid_gco2e_per_kwh', $1) END, grid_problem = $2 \
             WHERE station_id = $3 AND energy ->> '$.grid_intensity_file' = $4",
            "UPDATE stations SET energy = CASE WHEN $1::float8 IS NULL THEN energy \
             ELSE jsonb_set(energy::jsonb, '{grid_gco2e_per_kwh}', to_jsonb($1::float8))::text END, grid_problem = $2 \
             WHERE station_id = $3 AND energy::jsonb ->> 'grid_intensity_file' = $4",
        );
        let done = with_conn!(self, writer, |conn| {
            sqlx::query(sql)
                .bind(value)
                .bind(problem)
                .bind(station_id.to_string())
                .bind(file)
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// Deletes a station with its members and landing zones; true when it existed.
    pub async fn delete_station(&self, station_id: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM stations WHERE station_id = $1")
                .bind(station_id.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// Whether `user` is a member of the station.
    pub async fn is_station_member(&self, station_id: Uuid, user: Uuid) -> Result<bool, StoreError> {
        let n: i64 = with_conn!(self, reader, |conn| {
            sqlx::query_scalar("SELECT COUNT(*) FROM station_members WHERE station_id = $1 AND user_id = $2")
                .bind(station_id.to_string())
                .bind(user.to_string())
                .fetch_one(conn)
                .await?
        });
        Ok(n > 0)
    }

    /// Adds a member (again is fine).
    pub async fn add_station_member(&self, station_id: Uuid, user: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO station_members (station_id, user_id, added_at) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(station_id.to_string())
            .bind(user.to_string())
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Removes a member; true when they were one.
    pub async fn remove_station_member(&self, station_id: Uuid, user: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM station_members WHERE station_id = $1 AND user_id = $2")
                .bind(station_id.to_string())
                .bind(user.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// The members of a station, by username.
    pub async fn station_members(&self, station_id: Uuid) -> Result<Vec<StationMember>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(
                    "SELECT m.user_id, u.username, m.added_at FROM station_members m \
                     JOIN users u ON u.user_id = m.user_id WHERE m.station_id = $1 ORDER BY u.username",
                )
                .bind(station_id.to_string())
                .fetch_all(conn)
                .await?
            };
            rows.iter()
                .map(|r| {
                    Ok(StationMember {
                        user_id: r.uuid("user_id")?,
                        username: r.text("username")?,
                        added_at: r.time("added_at")?,
                    })
                })
                .collect()
        })
    }

    /// Registers a landing zone whose agent will present the token hashed as `token_hash`; a name
    /// taken in the station is a [`StoreError::Conflict`].
    pub async fn insert_landing_zone(&self, lz: &LandingZone, token_hash: &str) -> Result<(), StoreError> {
        let result = audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO landing_zones (lz_id, station_id, name, token_hash, created_at, cluster_account, \
                 pilot_of) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(lz.lz_id.to_string())
            .bind(lz.station_id.to_string())
            .bind(&lz.name)
            .bind(token_hash)
            .bind(to_micros(lz.created_at))
            .bind(&lz.cluster_account)
            .bind(lz.pilot_of.map(|id| id.to_string()))
            .execute(conn)
            .await
            .map(drop)
        });
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
        let zones = with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!(
                    "SELECT {LZ_COLUMNS} FROM landing_zones WHERE CAST($1 AS TEXT) IS NULL OR station_id = $1 \
                     ORDER BY name"
                ))
                .bind(station_id.map(|id| id.to_string()))
                .fetch_all(conn)
                .await?
            };
            rows.iter().map(|r| lz_from_row(r, lease, now)).collect::<Result<Vec<_>, _>>()
        })?;
        let usage = self.landing_zone_usage(station_id).await?;
        Ok(zones
            .into_iter()
            .map(|lz| LandingZone { in_use: usage.get(&lz.lz_id).copied().unwrap_or_default(), ..lz })
            .collect())
    }

    /// What the unfinished jobs placed on each landing zone of a station (of all stations when
    /// `None`) hold; landing zones without such jobs are left out.
    async fn landing_zone_usage(&self, station_id: Option<Uuid>) -> Result<HashMap<Uuid, Resources>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!(
                    "SELECT lz_id, CAST(SUM(cpu_count) AS BIGINT) AS cpu_count, \
                     CAST(SUM(memory_amount) AS BIGINT) AS memory_amount, CAST(SUM(gpu_count) AS BIGINT) AS gpu_count \
                     FROM jobs WHERE lz_id IS NOT NULL AND status NOT IN {FINAL_STATUSES} \
                     AND (CAST($1 AS TEXT) IS NULL OR station_id = $1) GROUP BY lz_id"
                ))
                .bind(station_id.map(|id| id.to_string()))
                .fetch_all(conn)
                .await?
            };
            rows.iter()
                .map(|r| {
                    let held = Resources {
                        cpu_count: u32::try_from(r.count("cpu_count")?).unwrap_or(u32::MAX),
                        memory_amount: r.count("memory_amount")?,
                        gpu_count: u32::try_from(r.count("gpu_count")?).unwrap_or(u32::MAX),
                    };
                    Ok((r.uuid("lz_id")?, held))
                })
                .collect()
        })
    }

    /// Removes a landing zone of a station; true when it existed.
    pub async fn delete_landing_zone(&self, station_id: Uuid, lz_id: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM landing_zones WHERE station_id = $1 AND lz_id = $2")
                .bind(station_id.to_string())
                .bind(lz_id.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }
}

fn station_from_row(r: &impl Columns) -> Result<Station, StoreError> {
    Ok(Station {
        station_id: r.uuid("station_id")?,
        name: r.text("name")?,
        description: r.text("description")?,
        owner_id: r.opt_uuid("owner_id")?,
        open: r.flag("open")?,
        reclaim: r.flag("reclaim")?,
        container_network: r.text("container_network")?.parse().map_err(StoreError::Corrupt)?,
        energy: r.opt_json("energy")?.unwrap_or_default(),
        grid_intensity_problem: r.opt_text("grid_problem")?,
        created_at: r.time("created_at")?,
    })
}

/// A station's energy settings as stored: `NULL` for the defaults, so that they follow the
/// defaults of later versions.
fn energy_json(energy: &mission_api::StationEnergy) -> Option<String> {
    (*energy != mission_api::StationEnergy::default())
        .then(|| serde_json::to_string(energy).expect("plain numbers and strings"))
}

fn lz_from_row(r: &impl Columns, lease: std::time::Duration, now: DateTime<Utc>) -> Result<LandingZone, StoreError> {
    let resources = match r.opt_int("cpu_count")? {
        Some(cpu) => Some(Resources {
            cpu_count: cpu as u32,
            memory_amount: r.count("memory_amount")?,
            gpu_count: r.int("gpu_count")? as u32,
        }),
        None => None,
    };
    let last_seen_at = r.opt_time("last_seen_at")?;
    let lease = chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    Ok(LandingZone {
        lz_id: r.uuid("lz_id")?,
        station_id: r.uuid("station_id")?,
        name: r.text("name")?,
        online: last_seen_at.is_some_and(|seen| now - seen < lease),
        resources,
        in_use: Resources::default(),
        last_seen_at,
        created_at: r.time("created_at")?,
        cluster_account: r.opt_text("cluster_account")?,
        pilot_of: r.opt_uuid("pilot_of")?,
        images: r.flag("images")?,
    })
}
