//! The jobs pages: the list (kept current by the script through `GET /api/v1/jobs/events`) and
//! one job with its timeline, resources, live logs, stop button and results.

use std::collections::HashMap;

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use mission_api::{FileListing, Job, JobPage, JobStatus, Station};
use serde::Deserialize;
use uuid::Uuid;

use super::missions::human_size;
use super::session::Viewer;
use super::sign_in::CsrfForm;
use super::{Frame, PageResult, file_href, page, query_value};
use crate::AppState;
use crate::domain::jobs;
use crate::http::routes::extract::{job_id, parse_id};
use crate::services::job_logs::LogStream;
use mission_store::JobFilter;

/// Jobs per page of the list.
const PAGE_SIZE: u32 = 25;
/// Most bytes of a finished job's log shown on its page (its end); the whole log is a result.
const LOG_TAIL_BYTES: usize = 256 * 1024;

/// A job as a row of the list.
struct Row {
    job: Job,
    mission_name: String,
    station_name: String,
}

#[derive(Template)]
#[template(path = "console/jobs.html")]
struct JobsPage {
    frame: Frame,
    rows: Vec<Row>,
    mission: Option<(Uuid, String)>,
    /// The stations the viewer may use, for the filter; the one chosen.
    stations: Vec<Station>,
    station: Option<Uuid>,
    status: String,
    statuses: Vec<&'static str>,
    page: u32,
    previous: Option<String>,
    next: Option<String>,
    /// What the script watches: `GET /api/v1/jobs/events` with the list's filters.
    events: String,
}

#[derive(Deserialize)]
pub struct ListQuery {
    mission: Option<String>,
    station: Option<String>,
    #[serde(default)]
    status: String,
    page: Option<u32>,
}

/// `GET /jobs`: the viewer's jobs, newest first, optionally of one mission, on one station or
/// in one state.
pub async fn list(State(app): State<AppState>, viewer: Viewer, Query(query): Query<ListQuery>) -> PageResult {
    let page_number = query.page.unwrap_or(1).max(1);
    let mut filter = JobFilter { page: page_number, items: PAGE_SIZE, ..Default::default() };
    // The live feed watches what the list shows: the same mission and station filters.
    let mut watched: Vec<(String, String)> = Vec::new();
    let mut mission = None;
    if let Some(raw) = query.mission.as_deref().filter(|m| !m.is_empty()) {
        let id = parse_id("mission", raw)?;
        let found = crate::domain::missions::readable(&app, viewer.principal(), id).await?;
        watched.push(("mission_ids".into(), found.mission_id.to_string()));
        filter.mission_ids.push(found.mission_id);
        mission = Some((found.mission_id, found.name));
    }
    let stations = crate::domain::stations::list(&app, viewer.principal()).await?;
    // The list holds every station the viewer may see: the chosen one is looked up there.
    let mut station = None;
    if let Some(raw) = query.station.as_deref().filter(|s| !s.is_empty()) {
        let id = parse_id("station_id", raw)?;
        if !stations.iter().any(|s| s.station_id == id) {
            return Err(crate::http::error::ApiError::not_found("station", id).into());
        }
        watched.push(("station_ids".into(), id.to_string()));
        filter.station_ids.push(id);
        station = Some(id);
    }
    let events = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(&watched).finish();
    let events = format!("/api/v1/jobs/events?{events}");
    let statuses: Vec<&'static str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
    let chosen = JobStatus::ALL.iter().find(|s| s.as_str() == query.status);
    let status = chosen.map_or_else(String::new, |s| s.as_str().to_owned());
    filter.statuses.extend(chosen);
    let JobPage { jobs, total, .. } = jobs::list(&app, viewer.principal(), filter).await?;
    let mut names: HashMap<Uuid, String> = HashMap::new();
    let mut rows = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mission_name = match names.get(&job.mission_id) {
            Some(name) => name.clone(),
            None => {
                let name = app.store.mission(job.mission_id).await?.map_or_else(|| "(deleted)".to_owned(), |m| m.name);
                names.insert(job.mission_id, name.clone());
                name
            }
        };
        let station_name = stations
            .iter()
            .find(|s| s.station_id == job.station_id)
            .map_or_else(|| job.station_id.to_string()[..8].to_owned(), |s| s.name.clone());
        rows.push(Row { mission_name, station_name, job });
    }
    let mission_param = mission.as_ref().map_or_else(String::new, |(id, _)| id.to_string());
    let station_param = station.map_or_else(String::new, |id| id.to_string());
    let link = |n: u32| {
        format!("/jobs?mission={mission_param}&station={station_param}&status={}&page={n}", query_value(&status))
    };
    let template = JobsPage {
        frame: Frame::new(&viewer, "jobs"),
        rows,
        previous: (page_number > 1).then(|| link(page_number - 1)),
        next: (u64::from(page_number) * u64::from(PAGE_SIZE) < total).then(|| link(page_number + 1)),
        mission,
        stations,
        station,
        status,
        statuses,
        page: page_number,
        events,
    };
    Ok(page(StatusCode::OK, &template))
}

#[derive(Template)]
#[template(path = "console/job.html")]
struct JobPageView {
    frame: Frame,
    /// Whether the viewer started it (a shell opens for its owner alone, and a session starts
    /// again for them).
    own: bool,
    /// Whether the viewer may open its session: its owner, or a manager of its project it is
    /// shared with.
    opens: bool,
    /// For a running session near its time limit: when the limit ends it.
    ending: Option<String>,
    job: Job,
    mission_name: String,
    finished: bool,
    stdout: String,
    stderr: String,
    results: Vec<(FileListing, String, String)>,
}

/// `GET /jobs/{id}`: one job.
pub async fn show(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    let job = jobs::get(&app, viewer.principal(), job_id(&app, viewer.principal(), &id).await?).await?;
    let mission_name = app.store.mission(job.mission_id).await?.map_or_else(|| "(deleted)".to_owned(), |m| m.name);
    let finished = job.status.is_final();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut results = Vec::new();
    if finished {
        for (stream, text) in [(LogStream::STDOUT, &mut stdout), (LogStream::STDERR, &mut stderr)] {
            let bytes = app
                .logs
                .read(job.mission_id, job.job_id, stream, 0)
                .await
                .map_err(crate::http::error::ApiError::internal)?;
            let tail = &bytes[bytes.len().saturating_sub(LOG_TAIL_BYTES)..];
            *text = String::from_utf8_lossy(tail).into_owned();
        }
        let listing = jobs::result_listing(&app, &job).await?;
        results = listing
            .into_iter()
            .map(|f| {
                let href = file_href(&format!("/api/v1/jobs/{}/results", job.job_id), &f.relative_path());
                let size = human_size(f.file_size);
                (f, href, size)
            })
            .collect();
    }
    let own = job.user_id == viewer.user.user_id;
    let shared = job.session.as_ref().is_some_and(|s| s.share_with_managers) && job.project_id != job.user_id;
    let opens = own
        || (shared
            && crate::domain::projects::role(&app, viewer.principal(), job.project_id).await?
                == Some(mission_api::ProjectRole::Manager));
    let ending = session_ending(&job, chrono::Utc::now());
    let frame = Frame::new(&viewer, "jobs");
    let template = JobPageView { frame, own, opens, ending, job, mission_name, finished, stdout, stderr, results };
    Ok(page(StatusCode::OK, &template))
}

#[derive(Template)]
#[template(path = "console/terminal.html")]
struct TerminalPage {
    frame: Frame,
    job: Job,
    xterm_js: &'static str,
    xterm_css: &'static str,
}

/// The terminal page's policy: the console's, but styles may also be set by the page's script
/// (xterm.js measures and colours its cells with style elements of its own).
const TERMINAL_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                               img-src 'self' data:; connect-src 'self'; form-action 'self'; \
                               frame-ancestors 'none'; base-uri 'none'";

/// `GET /jobs/{id}/terminal`: a terminal on a shell in a running job of the viewer's (as
/// `mission jobs shell`), over `GET /api/v1/jobs/{id}/shell`.
pub async fn terminal(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    let job = jobs::get(&app, viewer.principal(), job_id(&app, viewer.principal(), &id).await?).await?;
    if job.user_id != viewer.user.user_id {
        return Err(crate::http::error::ApiError::not_found("job", job.job_id).into());
    }
    let frame = Frame::new(&viewer, "jobs");
    let (xterm_js, xterm_css) = (super::assets::XTERM_JS.address(), super::assets::XTERM_CSS.address());
    let mut response = page(StatusCode::OK, &TerminalPage { frame, job, xterm_js, xterm_css });
    let policy = axum::http::HeaderValue::from_static(TERMINAL_POLICY);
    response.headers_mut().insert(axum::http::header::CONTENT_SECURITY_POLICY, policy);
    Ok(response)
}

/// When a running session's time limit ends it, if that is within the warning's minutes of
/// `now`, as the page's banner says it.
fn session_ending(job: &Job, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    use mission_api::sessions::ENDING_WARNING_MINUTES;
    let (_, Some(started), Some(limit)) = (job.session.as_ref()?, job.started_at, job.time_limit) else { return None };
    let ends = started + chrono::Duration::minutes(limit.into());
    let near = job.status == mission_api::JobStatus::Running
        && ends - now <= chrono::Duration::minutes(ENDING_WARNING_MINUTES.into());
    near.then(|| ends.format("%H:%M UTC").to_string())
}

/// `POST /jobs/{id}/again`: starts an ended job (a session, say) again with the same settings,
/// then shows the new job.
pub async fn again(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let job = jobs::rerun(&app, viewer.principal(), job_id(&app, viewer.principal(), &id).await?).await?;
    Ok(Redirect::to(&format!("/jobs/{}", job.job_id)).into_response())
}

/// `POST /jobs/{id}/stop`: stops the job, then shows it.
pub async fn stop(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let job = jobs::stop(&app, viewer.principal(), job_id(&app, viewer.principal(), &id).await?).await?;
    Ok(Redirect::to(&format!("/jobs/{}", job.job_id)).into_response())
}
