//! `GET /api/v1/audit`: who changed what (see [`crate::domain::audit`] for who may read it).

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use mission_api::AuditPage;
use mission_store::audit::AuditFilter;

use super::extract::{QueryPairs, parse_id, rfc3339};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit;
use crate::domain::user_named;
use crate::http::error::{ApiError, ApiResult};

/// Entries per page by default, and at most.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;
/// The largest entry number `before` takes (2^53 - 1, exact in every JSON reader).
const MAX_ENTRY_NUMBER: u64 = (1 << 53) - 1;

/// The audit trail, newest first: admins read every entry, a project's managers the entries of
/// its resources. As JSON, a page (`limit`, then `before` = `next_before` for the next); as JSON
/// lines (`format=jsonl`), every matching entry.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit",
    params(
        ("actor" = Option<String>, Query, description = "only changes by this user (id or username)"),
        ("project_id" = Option<uuid::Uuid>, Query, description = "only changes to this project's resources"),
        ("target" = Option<String>, Query, description = "only changes to this resource (its id)"),
        ("since" = Option<String>, Query, description = "only changes at or after this RFC 3339 time"),
        ("until" = Option<String>, Query, description = "only changes before this RFC 3339 time"),
        ("before" = Option<u64>, Query, minimum = 1, maximum = 9007199254740991_u64, description = "only entries numbered below (the next page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "entries per page, 1 to 1000 (default 100)"),
        ("format" = Option<String>, Query, description = "`json` (default) or `jsonl`: every matching entry, one per line"),
    ),
    responses(
        (status = 200, content((AuditPage = "application/json"), (String = "application/x-ndjson"))),
        (status = 400, body = mission_api::Problem), (status = 403, body = mission_api::Problem)))]
pub async fn list(State(app): State<AppState>, who: Principal, QueryPairs(query): QueryPairs) -> ApiResult<Response> {
    let mut filter = AuditFilter { limit: DEFAULT_LIMIT, ..Default::default() };
    let mut lines = false;
    for (key, value) in &query {
        match key.as_str() {
            "actor" => {
                let known = user_named(&app, value).await?;
                filter.actor_id =
                    Some(known.ok_or_else(|| ApiError::invalid_field("actor", format!("no user {value:?}")))?);
            }
            "project_id" => filter.project_id = Some(parse_id(key, value)?),
            "target" => filter.target_id = Some(value.clone()),
            "since" => filter.since = Some(rfc3339(key, value)?),
            "until" => filter.until = Some(rfc3339(key, value)?),
            "before" => {
                let number = value.parse().ok().filter(|n| (1..=MAX_ENTRY_NUMBER).contains(n));
                let number = number.ok_or_else(|| ApiError::invalid_field("before", "an entry number"))?;
                filter.before = Some(number);
            }
            "limit" => {
                filter.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| ApiError::invalid_field("limit", format!("1 to {MAX_LIMIT}")))?;
            }
            "format" => {
                lines = match value.as_str() {
                    "json" => false,
                    "jsonl" => true,
                    _ => return Err(ApiError::invalid_field("format", "json or jsonl")),
                }
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; parameters are actor, project_id, target, since, until, \
                     before, limit, format"
                )));
            }
        }
    }
    if lines {
        return export(app, who, filter).await;
    }
    let entries = audit::entries(&app, who, filter.clone()).await?;
    let next_before = (entries.len() == filter.limit as usize).then(|| entries.last().map(|e| e.seq)).flatten();
    Ok(Json(AuditPage { entries, next_before }).into_response())
}

/// Every entry `filter` matches as JSON lines, newest first, read a page at a time as the
/// client takes them. Who may read what is checked before the first byte.
async fn export(app: AppState, who: Principal, mut filter: AuditFilter) -> ApiResult<Response> {
    filter.limit = MAX_LIMIT;
    let first = audit::entries(&app, who, filter.clone()).await?;
    let body = super::async_stream(move |tx| async move {
        let mut page = first;
        loop {
            let Some(last) = page.last().map(|e| e.seq) else { return };
            let mut text = String::new();
            for entry in &page {
                text.push_str(&serde_json::to_string(entry).expect("entries serialise"));
                text.push('\n');
            }
            if tx.send(Bytes::from(text)).await.is_err() || page.len() < MAX_LIMIT as usize {
                return;
            }
            filter.before = Some(last);
            page = match audit::entries(&app, who, filter.clone()).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!("exporting the audit trail: {e}");
                    return;
                }
            };
        }
    });
    let stream = futures_util::StreamExt::map(body, Ok::<_, std::convert::Infallible>);
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(stream)).into_response())
}
