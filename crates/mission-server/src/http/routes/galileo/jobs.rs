//! Jobs, the signed-in user, stations and landing zones ("machines") for the `galileo-sdk`
//! client.
//!
//! Its quirks, served as it expects:
//! - jobs carry both `mission_id` and `project_id` (its two mappers read one each), times in
//!   epoch seconds, and states by galileo's names ([`galileo_status`]);
//! - it has no "get one job": it lists with `jobids=`, and `list_jobs()` asks `/users/self` for
//!   the `userids` filter first;
//! - a job's results are one zip archive (its results helper unzips every file it gets), listed
//!   by `GET /jobs/{id}/results` and fetched by the same path with `?filename=`; the `filename`
//!   header that request carries (the client's local path) is ignored.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::Response;
use mission_api::{Job, JobStatus, LandingZone, RunJob, Station};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::super::archives;
use super::super::extract::{ApiJson, QueryPairs, page_number, page_size, parse_id};
use super::{epoch, flag, ok};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::{DomainError, jobs, stations};
use crate::http::error::{ApiError, ApiResult};
use mission_store::JobFilter;

/// This service's job states and galileo's names for them.
const STATUS_NAMES: [(JobStatus, &str); 9] = [
    (JobStatus::Queued, "uploaded"),
    (JobStatus::Assigned, "submitted"),
    (JobStatus::Staging, "downloaded"),
    (JobStatus::Running, "running"),
    (JobStatus::Uploading, "posting_results"),
    (JobStatus::Completed, "completed"),
    (JobStatus::Failed, "error"),
    (JobStatus::Stopped, "stopped"),
    (JobStatus::Lost, "removed_by_host"),
];

/// Galileo's name of a job state (one of its `EJobStatus` names).
pub fn galileo_status(status: JobStatus) -> &'static str {
    STATUS_NAMES.iter().find(|(s, _)| *s == status).map(|(_, name)| *name).expect("every state has a name")
}

/// A job as both of the client's job mappers read it; `name` is its mission's.
fn galileo_job(job: &Job, name: &str) -> Value {
    let last = job.history.last().map_or(job.created_at, |t| t.at);
    let runtime =
        job.started_at.map_or(0, |start| (job.finished_at.unwrap_or_else(chrono::Utc::now) - start).num_seconds());
    let history: Vec<Value> = job
        .history
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"jobstatusid": i, "jobid": job.job_id, "timestamp": epoch(t.at),
                               "status": galileo_status(t.status)})
        })
        .collect();
    serde_json::json!({
        "jobid": job.job_id,
        "receiverid": job.lz_id,
        "mission_id": job.mission_id,
        "project_id": job.mission_id,
        "stationid": job.station_id,
        "userid": job.user_id,
        "name": name,
        "time_created": epoch(job.created_at),
        "last_updated": epoch(last),
        "status": galileo_status(job.status),
        "state": job.status.as_str(),
        "cpu_count": job.cpu_count,
        "gpu_count": job.gpu_count,
        "memory_amount": job.memory_amount,
        "enable_tunnel": false,
        "tunnel_url": null,
        "tunnel_port": null,
        "pay_status": "free",
        "pay_interval": null,
        "total_runtime": runtime.max(0),
        "archived": false,
        "exit_code": job.exit_code,
        "reason": job.reason,
        "status_history": history,
    })
}

/// Jobs in galileo's shape, with their histories and their missions' names.
async fn galileo_jobs(app: &AppState, jobs: Vec<Job>) -> ApiResult<Vec<Value>> {
    let mut names: HashMap<Uuid, String> = HashMap::new();
    let mut shaped = Vec::with_capacity(jobs.len());
    for mut job in jobs {
        if job.history.is_empty() {
            job.history = app.store.job_history(job.job_id).await?;
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = names.entry(job.mission_id) {
            slot.insert(app.store.mission(job.mission_id).await?.map(|m| m.name).unwrap_or_default());
        }
        shaped.push(galileo_job(&job, &names[&job.mission_id]));
    }
    Ok(shaped)
}

/// The body of `POST /projects/{id}/jobs`: `null` for what is left to the mission type.
#[derive(Deserialize)]
pub struct GalileoRun {
    station_id: Uuid,
    #[serde(default)]
    machine_id: Option<Uuid>,
    #[serde(default)]
    cpu_count: Option<u32>,
    #[serde(default)]
    memory_amount: Option<u64>,
    #[serde(default)]
    gpu_count: Option<u32>,
}

/// `POST /projects/{id}/jobs`: a job on a station (`machine_id`: on that landing zone).
pub async fn run(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<GalileoRun>,
) -> ApiResult<Response> {
    let run = RunJob {
        station_id: req.station_id,
        lz_id: req.machine_id,
        cpu_count: req.cpu_count,
        memory_amount: req.memory_amount,
        gpu_count: req.gpu_count,
        ..Default::default()
    };
    let job = jobs::submit(&app, who, parse_id("mission_id", &id)?, run).await?;
    Ok(ok(serde_json::json!({ "job": galileo_jobs(&app, vec![job]).await?.remove(0) })))
}

/// `GET /jobs`: galileo's filters onto `GET /api/v1/jobs`'s. `jobids` looks the jobs up one by
/// one; `userids`, `machines` and `receiverids` narrow the page; `archived=true` finds nothing
/// (jobs are never archived here); `partial_names`, `ownerids`, `receiver_archived`, `sort_by`
/// and `sort_order` are accepted and have no effect (jobs come newest first).
pub async fn list(State(app): State<AppState>, who: Principal, QueryPairs(query): QueryPairs) -> ApiResult<Response> {
    let mut ours = JobFilter { page: 1, items: 25, ..Default::default() };
    let mut job_ids = Vec::new();
    let mut user_ids = Vec::new();
    let mut lz_ids = Vec::new();
    let mut none = false;
    for (key, value) in &query {
        match key.as_str() {
            "jobids" => job_ids.push(parse_id(key, value)?),
            "projectids" => ours.mission_ids.push(parse_id(key, value)?),
            "stationids" => ours.station_ids.push(parse_id(key, value)?),
            "statuses" => match STATUS_NAMES.iter().find(|(_, name)| name == value) {
                Some((status, _)) => ours.statuses.push(*status),
                None => none = true, // a galileo state this service never has
            },
            "page" => ours.page = page_number(value)?,
            "items" => ours.items = page_size(value)?,
            "userids" => user_ids.push(parse_id(key, value)?),
            "machines" | "receiverids" => lz_ids.push(parse_id(key, value)?),
            "archived" => none |= flag(value)?,
            "partial_names" | "ownerids" | "receiver_archived" | "sort_by" | "sort_order" => {}
            other => return Err(ApiError::invalid(format!("unknown query parameter {other:?}"))),
        }
    }
    let mut found = if none {
        Vec::new()
    } else if job_ids.is_empty() {
        jobs::list(&app, who, ours).await?.jobs
    } else {
        let mut found = Vec::new();
        for id in job_ids {
            match jobs::get(&app, who, id).await {
                Ok(job) => found.push(job),
                Err(DomainError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        found
    };
    found.retain(|job| {
        (user_ids.is_empty() || user_ids.contains(&job.user_id))
            && (lz_ids.is_empty() || job.lz_id.is_some_and(|lz| lz_ids.contains(&lz)))
    });
    Ok(ok(serde_json::json!({ "jobs": galileo_jobs(&app, found).await? })))
}

/// `GET /jobs/{id}/logs`: what the job wrote so far, its standard output then its standard
/// error.
pub async fn logs(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let job = jobs::readable(&app, who, parse_id("job_id", &id)?).await?;
    let mut text = Vec::new();
    for stream in crate::services::job_logs::LogStream::ALL {
        text.extend(app.logs.read(job.mission_id, job.job_id, stream, 0).await.map_err(ApiError::internal)?);
    }
    Ok(ok(serde_json::json!({ "logs": String::from_utf8_lossy(&text) })))
}

/// `PUT /jobs/{id}/stop` and `/kill`: stops the job (its processes are killed either way).
pub async fn stop(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let job = jobs::stop(&app, who, parse_id("job_id", &id)?).await?;
    Ok(ok(serde_json::json!({ "job": galileo_jobs(&app, vec![job]).await?.remove(0) })))
}

/// `GET /jobs/{id}/results`: lists the job's results as one zip archive; with `?filename=` (and
/// the `path`, `nonce` the client adds) sends that archive, `GET /api/v1/jobs/{id}/archive`.
pub async fn results(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let job = jobs::readable(&app, who, parse_id("job_id", &id)?).await?;
    let listing = jobs::result_listing(&app, &job).await?;
    let name = archives::results_name(job.job_id);
    let wanted = query.iter().find_map(|(key, value)| (key == "filename").then_some(value));
    let Some(wanted) = wanted else {
        let files = if listing.is_empty() {
            Vec::new()
        } else {
            let size = archives::plan(&listing)?.archive_size();
            let modified = listing.iter().map(|f| f.modified_at).max().unwrap_or(job.created_at);
            vec![serde_json::json!({"filename": name, "path": "/", "file_size": size,
                                    "modification_date": modified, "creation_date": modified, "nonce": null})]
        };
        return Ok(ok(serde_json::json!({ "files": files })));
    };
    if *wanted != name || listing.is_empty() {
        return Err(ApiError::not_found("result", format!("{wanted} of job {}", job.job_id)));
    }
    archives::results_archive(app, job, &listing)
}

/// `GET /users/self`: the caller, with the landing zones it owns (`mids`: none, here).
pub async fn user_self(State(app): State<AppState>, who: Principal) -> ApiResult<Response> {
    let me =
        app.store.user_by_id(who.user_id).await?.ok_or_else(|| ApiError::unauthorized("the user no longer exists"))?;
    Ok(ok(serde_json::json!({ "userid": me.user_id, "username": me.username, "mids": [] })))
}

/// A station as the client reads it: its landing zones' ids as `mids`, its owner in `users`.
fn galileo_station(station: &Station, zones: &[LandingZone]) -> Value {
    let users: Vec<Value> = station
        .owner_id
        .iter()
        .map(|owner| serde_json::json!({"stationuserid": owner, "userid": owner, "status": "OWNER"}))
        .collect();
    serde_json::json!({
        "stationid": station.station_id,
        "name": station.name,
        "description": station.description,
        "mids": zones.iter().map(|z| z.lz_id).collect::<Vec<_>>(),
        "volumes": [],
        "users": users,
        "open": station.open,
        "creation_timestamp": station.created_at,
    })
}

/// A landing zone as the client reads it ("machine").
fn galileo_machine(zone: &LandingZone, owner: Option<Uuid>) -> Value {
    let resources = zone.resources.unwrap_or_default();
    serde_json::json!({
        "mid": zone.lz_id,
        "name": zone.name,
        "userid": owner,
        "status": if zone.online { "online" } else { "offline" },
        "cpu_count": resources.cpu_count,
        "gpu_count": resources.gpu_count,
        "memory_amount": resources.memory_amount,
        "memory": resources.memory_amount,
        "operating_system": "linux",
        "arch": null,
        "job_runner": "mission",
        "container_technology": "none",
        "stationid": zone.station_id,
    })
}

/// The stations the caller may use, each with its landing zones.
async fn stations_and_zones(app: &AppState, who: Principal) -> ApiResult<Vec<(Station, Vec<LandingZone>)>> {
    let mut out = Vec::new();
    for station in stations::list(app, who).await? {
        let zones = stations::landing_zones(app, who, station.station_id).await?;
        out.push((station, zones));
    }
    Ok(out)
}

/// Paging of galileo lists served whole: (`page`, `items`).
fn paging(query: &[(String, String)]) -> ApiResult<(usize, usize)> {
    let mut page = 1;
    let mut items = 25;
    for (key, value) in query {
        match key.as_str() {
            "page" => page = page_number(value)? as usize,
            "items" => items = page_size(value)? as usize,
            _ => {}
        }
    }
    Ok((page, items))
}

/// `GET /stations`: the stations the caller may use; filters `stationids`, `names`,
/// `partial_names`, `mids`; the others the client sends (`active`, …) have no effect.
pub async fn stations(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let (page, items) = paging(&query)?;
    let values = |name: &str| query.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
    let (ids, names, partial, mids) = (values("stationids"), values("names"), values("partial_names"), values("mids"));
    let listed: Vec<Value> = stations_and_zones(&app, who)
        .await?
        .iter()
        .filter(|(s, zones)| {
            (ids.is_empty() || ids.contains(&s.station_id.to_string().as_str()))
                && (names.is_empty() || names.contains(&s.name.as_str()))
                && (partial.is_empty() || partial.iter().any(|p| s.name.contains(p)))
                && (mids.is_empty() || zones.iter().any(|z| mids.contains(&z.lz_id.to_string().as_str())))
        })
        .skip((page - 1) * items)
        .take(items)
        .map(|(s, zones)| galileo_station(s, zones))
        .collect();
    Ok(ok(serde_json::json!({ "stations": listed })))
}

/// `GET /machines`: the landing zones of the stations the caller may use; filter `mids`.
pub async fn machines(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let (page, items) = paging(&query)?;
    let mids: Vec<Uuid> =
        query.iter().filter(|(k, _)| k == "mids").map(|(k, v)| parse_id(k, v)).collect::<Result<_, _>>()?;
    let listed: Vec<Value> = stations_and_zones(&app, who)
        .await?
        .iter()
        .flat_map(|(s, zones)| zones.iter().map(move |z| (s.owner_id, z)))
        .filter(|(_, z)| mids.is_empty() || mids.contains(&z.lz_id))
        .skip((page - 1) * items)
        .take(items)
        .map(|(owner, z)| galileo_machine(z, owner))
        .collect();
    Ok(ok(serde_json::json!({ "machines": listed })))
}

/// `GET /machines/{id}`: one landing zone, as a bare object.
pub async fn machine(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let lz_id = parse_id("machine_id", &id)?;
    for (station, zones) in stations_and_zones(&app, who).await? {
        if let Some(zone) = zones.iter().find(|z| z.lz_id == lz_id) {
            return Ok(ok(galileo_machine(zone, station.owner_id)));
        }
    }
    Err(ApiError::not_found("machine", lz_id))
}
