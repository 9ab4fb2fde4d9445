//! `GET /api/v1/events`: the caller's events as server-sent events, resumable with
//! `Last-Event-ID`; and the following of the log that the jobs feed (`GET /jobs/events`) shares.
//!
//! A stream first reads the log from where the client left off (its catch-up), then takes new
//! events from the process's [`crate::services::events::EventHub`]; it subscribes to the hub before it
//! reads, and skips what it has already seen, so no event falls between.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::async_stream;
use super::extract::{QueryPairs, parse_id};
use super::jobs::{KEEP_ALIVE, event_stream};
use crate::AppState;
use crate::domain::MAX_FILTER_VALUES;
use crate::domain::Principal;
use crate::domain::webhooks::check_kind;
use crate::http::error::{ApiError, ApiResult};
use crate::services::events::{Followed, LiveEvent, Watch};

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
    /// The bytes to send for `live`; `None` to send nothing.
    async fn render(&self, app: &AppState, live: &LiveEvent) -> Option<Bytes> {
        let event = &live.event;
        match self {
            Render::Events => Some(live.sse.clone()),
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
    let Ok((mut follower, gap)) = app.events.follow(watch, after).await else { return };
    if let Some(oldest) = gap {
        // Events the client has not seen are gone (past the retention window).
        let after = after.unwrap_or_default();
        let gap = format!("event: gap\ndata: {{\"after\":{after},\"oldest\":{oldest}}}\n\n");
        if tx.send(Bytes::from(gap)).await.is_err() {
            return;
        }
    }
    // The stream's first bytes, so the client sees it open before any event.
    if tx.send(Bytes::from_static(b": watching\n\n")).await.is_err() {
        return;
    }
    let mut closing = app.closing.subscribe();
    loop {
        let next = tokio::select! {
            next = follower.next(KEEP_ALIVE) => next,
            _ = closing.changed() => return,
        };
        match next {
            Some(Followed::Events(batch)) => {
                for live in &batch {
                    if let Some(bytes) = render.render(&app, live).await
                        && tx.send(bytes).await.is_err()
                    {
                        return;
                    }
                }
            }
            Some(Followed::Idle) => {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
            }
            None => return,
        }
    }
}

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
    responses((status = 200, description = "server-sent events, each with an `id` (its number), an `event` (its kind) and `data`: JSON text holding one `Event` (components/schemas/Event)", content_type = "text/event-stream", body = mission_api::events::ServerSentEvent),
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
            "kinds" => watch.kinds.push(check_kind(key, value)?),
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
    if watch.mission_ids.len() + watch.job_ids.len() + watch.kinds.len() > MAX_FILTER_VALUES {
        return Err(ApiError::invalid(format!("at most {MAX_FILTER_VALUES} filter values per request")));
    }
    if let Some(resume) = headers.get("last-event-id") {
        let resume =
            resume.to_str().map_err(|_| ApiError::invalid_field("Last-Event-ID", "expected an event number"))?;
        after = Some(number("Last-Event-ID", resume)?);
    }
    let events = async_stream(move |tx| follow_log(app, watch, after, tx, Render::Events));
    Ok(event_stream(events))
}
