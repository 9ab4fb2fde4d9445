//! What the scheduler reads to send placed jobs to their landing zones: each job's row, its
//! user's name and rights, its station's owner and containers' network, and its mission's files,
//! for a whole batch of run orders in one query (four reads per job before).

use std::sync::LazyLock;

use mission_api::lz::InputFile;
use mission_api::{ContainerNetwork, Job};
use uuid::Uuid;

use super::jobs::{JOB_ROW, job_from_row};
use super::row::Columns;
use super::{Store, StoreError, with_conn};

/// A job to be sent: one stored (its row is read) or one the same batch inserts (its user and
/// mission given), on a landing zone of `station_id`.
#[derive(Debug, Clone, Copy)]
pub enum PlacementAsk {
    /// A job already in the store.
    Stored {
        /// The job.
        job_id: Uuid,
        /// The station of its landing zone.
        station_id: Uuid,
    },
    /// A job written in the same batch as its run order.
    New {
        /// Its user.
        user_id: Uuid,
        /// Its mission.
        mission_id: Uuid,
        /// The station of its landing zone.
        station_id: Uuid,
    },
}

/// What [`Store::placement_facts`] found for one [`PlacementAsk`].
#[derive(Debug, Clone)]
pub struct PlacementFacts {
    /// The job's row, for a [`PlacementAsk::Stored`] job still there.
    pub job: Option<Job>,
    /// The user's name, and whether they are an admin (`None`: the user is gone).
    pub user: Option<(String, bool)>,
    /// The station's owner and its containers' network (`None`: the station is gone).
    pub station: Option<(Option<Uuid>, ContainerNetwork)>,
    /// The mission's files, by path: given with the first ask of each mission in the batch,
    /// `None` with the others (the list can be long).
    pub files: Option<Vec<InputFile>>,
}

/// The asks, `$1` a JSON array of objects with `job_id`, `user_id`, `mission_id`, `station_id`
/// (the first or the next two null), answered in their order; `{jobs}` and `{files}` are filled
/// per backend by [`placement_query`].
const PLACEMENT_QUERY: &str = "WITH w AS ({asks}), \
t AS (SELECT w.k AS facts_key, w.station_id AS facts_station, COALESCE(j.user_id, w.user_id) AS facts_user, \
    COALESCE(j.mission_id, w.mission_id) AS facts_mission, j.* FROM w LEFT JOIN jobs AS j ON j.job_id = w.job_id), \
r AS (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY facts_mission ORDER BY facts_key) AS facts_nth FROM t) \
SELECT {jobs}, u.username AS facts_username, u.admin AS facts_admin, \
    s.station_id AS facts_station_found, s.owner_id AS facts_owner, s.container_network AS facts_network, \
    CASE WHEN facts_nth = 1 THEN ({files}) END AS facts_files \
FROM r LEFT JOIN users AS u ON u.user_id = r.facts_user LEFT JOIN stations AS s ON s.station_id = r.facts_station \
ORDER BY facts_key";

fn placement_query(postgres: bool) -> String {
    let (asks, files) = if postgres {
        (
            "SELECT k AS k, a ->> 'job_id' AS job_id, a ->> 'user_id' AS user_id, a ->> 'mission_id' AS mission_id, \
             a ->> 'station_id' AS station_id FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS asks (a, k)",
            "SELECT COALESCE(json_agg(json_build_object('path', f.path, 'size', f.size, 'sha256', f.sha256) ORDER BY f.path), '[]')::text \
             FROM mission_files AS f WHERE f.mission_id = r.facts_mission",
        )
    } else {
        (
            "SELECT key AS k, value ->> 'job_id' AS job_id, value ->> 'user_id' AS user_id, \
             value ->> 'mission_id' AS mission_id, value ->> 'station_id' AS station_id FROM json_each($1)",
            "SELECT json_group_array(json_object('path', f.path, 'size', f.size, 'sha256', f.sha256)) FROM \
             (SELECT path, size, sha256 FROM mission_files WHERE mission_id = r.facts_mission ORDER BY path) AS f",
        )
    };
    let jobs: Vec<String> = JOB_ROW.iter().map(|(column, _)| format!("r.{column}")).collect();
    PLACEMENT_QUERY.replace("{asks}", asks).replace("{files}", files).replace("{jobs}", &jobs.join(", "))
}

static SQLITE_PLACEMENT: LazyLock<String> = LazyLock::new(|| placement_query(false));
static POSTGRES_PLACEMENT: LazyLock<String> = LazyLock::new(|| placement_query(true));

impl Store {
    /// What sending each of `asks` to its landing zone needs, in their order, in one query.
    pub async fn placement_facts(&self, asks: &[PlacementAsk]) -> Result<Vec<PlacementFacts>, StoreError> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let asks: Vec<serde_json::Value> = asks
            .iter()
            .map(|ask| match ask {
                PlacementAsk::Stored { job_id, station_id } => serde_json::json!({
                    "job_id": job_id.to_string(), "user_id": null, "mission_id": null,
                    "station_id": station_id.to_string(),
                }),
                PlacementAsk::New { user_id, mission_id, station_id } => serde_json::json!({
                    "job_id": null, "user_id": user_id.to_string(), "mission_id": mission_id.to_string(),
                    "station_id": station_id.to_string(),
                }),
            })
            .collect();
        let asks = serde_json::Value::Array(asks).to_string();
        let sql = self.dialect(SQLITE_PLACEMENT.as_str(), POSTGRES_PLACEMENT.as_str());
        with_conn!(self, reader, |conn| {
            let rows = { sqlx::query(sql).bind(asks).fetch_all(conn).await? };
            rows.iter().map(facts_from_row).collect()
        })
    }
}

fn facts_from_row(r: &impl Columns) -> Result<PlacementFacts, StoreError> {
    let job = match r.opt_text("job_id")? {
        Some(_) => Some(job_from_row(r)?),
        None => None,
    };
    let user = match r.opt_text("facts_username")? {
        Some(name) => Some((name, r.flag("facts_admin")?)),
        None => None,
    };
    let station = match r.opt_text("facts_station_found")? {
        Some(_) => Some((r.opt_uuid("facts_owner")?, r.text("facts_network")?.parse().map_err(StoreError::Corrupt)?)),
        None => None,
    };
    let files = r.opt_json("facts_files")?;
    Ok(PlacementFacts { job, user, station, files })
}
