//! `GET /api/v1/events`: the caller's events as server-sent events, resumable with
//! `Last-Event-ID`; and the following of the log that the jobs feed (`GET /jobs/events`) shares.
//!
//! A stream first reads the log from where the client left off (its catch-up), then takes new
//! events from the process's [`crate::events::EventHub`]; it subscribes to the hub before it
//! reads, and skips what it has already seen, so no event falls between.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use mission_api::Event;
use mission_api::events::kind_matches;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::async_stream;
use super::extract::{QueryPairs, parse_id};
use super::jobs::{KEEP_ALIVE, event_stream};
use crate::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::events::{LiveEvent, PAGE, sse};
use crate::store::EventFilter;

/// Which events a stream wants.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Only this user's; everyone's when `None` (an admin's `all=true`).
    pub user_id: Option<Uuid>,
    /// Only these missions' (any; all when empty).
    pub mission_ids: Vec<Uuid>,
    /// Only these jobs' (any; all when empty).
    pub job_ids: Vec<Uuid>,
    /// Only these kinds, each exact or a prefix before a dot (any; all when empty).
    pub kinds: Vec<String>,
}

impl Watch {
    fn wants(&self, e: &Event) -> bool {
        self.user_id.is_none_or(|user| e.user_id == user)
            && (self.mission_ids.is_empty() || e.mission_id.is_some_and(|m| self.mission_ids.contains(&m)))
            && (self.job_ids.is_empty() || e.job_id.is_some_and(|j| self.job_ids.contains(&j)))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| kind_matches(k, &e.kind)))
    }

    fn log_filter(&self, after: u64) -> EventFilter {
        EventFilter {
            after,
            user_id: self.user_id,
            mission_ids: self.mission_ids.clone(),
            job_ids: self.job_ids.clone(),
            limit: PAGE,
        }
    }
}

/// How a stream sends the events it wants.
#[derive(Debug)]
pub(super) enum Render {
    /// As themselves ([`sse`]).
    Events,
    /// As the jobs they tell of, read afresh (`GET /jobs/events`), only those on these stations
    /// (any when empty).
    Jobs {
        /// The stations.
        station_ids: Vec<Uuid>,
    },
}

impl Render {
    /// The bytes to send for `event`; `None` to send nothing. `live` has its server-sent form
    /// made already.
    async fn render(&self, app: &AppState, event: &Event, live: Option<&LiveEvent>) -> Option<Bytes> {
        match self {
            Render::Events => Some(live.map_or_else(|| sse(event), |live| live.sse.clone())),
            Render::Jobs { station_ids } => {
                let station = event.data["station_id"].as_str().and_then(|id| Uuid::parse_str(id).ok());
                if !station_ids.is_empty() && !station.is_some_and(|id| station_ids.contains(&id)) {
                    return None;
                }
                let job = app.store.job_row(event.job_id?).await.ok()??;
                let data = serde_json::to_string(&job).expect("jobs serialise");
                Some(Bytes::from(format!("event: job\ndata: {data}\n\n")))
            }
        }
    }
}

/// Sends the events `watch` wants, in order, as `render` says, from after `after` (from now when
/// `None`) until the client goes or the server stops.
pub(super) async fn follow_log(
    app: AppState,
    watch: Watch,
    after: Option<u64>,
    tx: mpsc::Sender<Bytes>,
    render: Render,
) {
    let mut live = app.events.subscribe();
    let mut closing = app.closing.subscribe();
    let Ok((oldest, newest)) = app.store.event_bounds().await else { return };
    let mut last = match after {
        Some(after) => {
            if oldest > after.saturating_add(1) {
                // Events the client has not seen are gone (past the retention window).
                let gap = format!("event: gap\ndata: {{\"after\":{after},\"oldest\":{oldest}}}\n\n");
                if tx.send(Bytes::from(gap)).await.is_err() {
                    return;
                }
            }
            after
        }
        None => newest,
    };
    // The stream's first bytes, so the client sees it open before any event.
    if tx.send(Bytes::from_static(b": watching\n\n")).await.is_err() {
        return;
    }
    let mut catching_up = after.is_some();
    loop {
        if catching_up {
            let Ok(page) = app.store.events(&watch.log_filter(last)).await else { return };
            catching_up = page.len() == PAGE as usize;
            for event in &page {
                last = event.seq;
                if watch.wants(event)
                    && let Some(bytes) = render.render(&app, event, None).await
                    && tx.send(bytes).await.is_err()
                {
                    return;
                }
            }
            continue;
        }
        tokio::select! {
            got = live.recv() => match got {
                Ok(live) if live.event.seq <= last => {}
                Ok(live) => {
                    last = live.event.seq;
                    if watch.wants(&live.event)
                        && let Some(bytes) = render.render(&app, &live.event, Some(&live)).await
                        && tx.send(bytes).await.is_err()
                    {
                        return;
                    }
                }
                // Fell behind the hub: read the log from the last event seen.
                Err(RecvError::Lagged(_)) => catching_up = true,
                Err(RecvError::Closed) => return,
            },
            () = tokio::time::sleep(KEEP_ALIVE) => {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
            }
            _ = closing.changed() => return,
        }
    }
}

/// Longest kind filter, in bytes.
const MAX_KIND_BYTES: usize = 64;

/// The caller's events as they happen (server-sent events). Each has `id` (its number, `seq`),
/// `event` (its kind) and `data` (the [`Event`] as JSON). With `Last-Event-ID` (or `after`), the
/// stream starts after that event, sending every later one still kept (the server's retention
/// window; a `gap` event says when some are gone); without, it starts now. Filters repeat:
/// `mission_ids`, `job_ids`, `kinds` (`job` matches every `job.*`); `all=true` lets an admin
/// watch everyone's events.
#[utoipa::path(get, path = "/api/v1/events", tag = "events",
    params(("mission_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only these missions' events"),
        ("job_ids" = Option<Vec<uuid::Uuid>>, Query, description = "only these jobs' events"),
        ("kinds" = Option<Vec<String>>, Query, description = "only these kinds, exactly or as a prefix before a dot (job: every job.*)"),
        ("after" = Option<u64>, Query, description = "start after this event number (as Last-Event-ID)"),
        ("all" = Option<bool>, Query, description = "everyone's events (admins only)"),
        ("Last-Event-ID" = Option<u64>, Header, description = "the last event number seen: the stream resumes after it")),
    responses((status = 200, description = "events (server-sent events)", content_type = "text/event-stream", body = mission_api::Event),
        (status = 400, body = mission_api::Problem)))]
pub async fn stream(
    State(app): State<AppState>,
    who: Principal,
    headers: HeaderMap,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let mut watch = Watch { user_id: Some(who.user_id), ..Default::default() };
    let mut after = None;
    let number = |field: &str, value: &str| {
        value
            .trim()
            .parse::<u64>()
            .map_err(|_| ApiError::invalid_field(field, format!("expected an event number, got {value:?}")))
    };
    for (key, value) in &query {
        match key.as_str() {
            "mission_ids" => watch.mission_ids.push(parse_id(key, value)?),
            "job_ids" => watch.job_ids.push(parse_id(key, value)?),
            "kinds" => {
                let valid = !value.is_empty()
                    && value.len() <= MAX_KIND_BYTES
                    && value.bytes().all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_');
                if !valid {
                    return Err(ApiError::invalid_field(
                        "kinds",
                        format!(
                            "expected a kind such as job, job.completed or mission.created (lowercase letters, dots, \
                         underscores; at most {MAX_KIND_BYTES} bytes), got {value:?}"
                        ),
                    ));
                }
                watch.kinds.push(value.clone());
            }
            "after" => after = Some(number("after", value)?),
            "all" => match value.as_str() {
                "true" if who.admin => watch.user_id = None,
                "true" => return Err(ApiError::forbidden("only admins may watch everyone's events")),
                "false" => {}
                _ => return Err(ApiError::invalid_field("all", format!("expected true or false, got {value:?}"))),
            },
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are mission_ids, job_ids, kinds, after, all"
                )));
            }
        }
    }
    if watch.mission_ids.len() + watch.job_ids.len() + watch.kinds.len() > 500 {
        return Err(ApiError::invalid("at most 500 filter values per request"));
    }
    if let Some(resume) = headers.get("last-event-id") {
        let resume =
            resume.to_str().map_err(|_| ApiError::invalid_field("Last-Event-ID", "expected an event number"))?;
        after = Some(number("Last-Event-ID", resume)?);
    }
    let events = async_stream(move |tx| follow_log(app, watch, after, tx, Render::Events));
    Ok(event_stream(events))
}
