//! The GA4GH TES API (`/ga4gh/tes/v1`) over [`crate::domain::tes`]: the operations of the
//! official schema, with the bearer tokens of the rest of the API. A task the caller may not see
//! is a 404; errors are problem+json, as everywhere (the schema defines no error body).

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use mission_api::tes::{
    TesCancelTaskResponse, TesCreateTaskResponse, TesListTasksResponse, TesState, TesTask, TesView,
};

use super::extract::{ApiJson, QueryPairs};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::tes::{self, TaskQuery};
use crate::http::error::{ApiError, ApiResult};

/// The routes under [`mission_api::tes::TES_PREFIX`].
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/service-info", get(service_info))
        .route("/tasks", get(list).post(create))
        // `POST /tasks/{id}:cancel`: the action is the id's suffix, in the same path segment.
        .route("/tasks/{id}", any(task))
}

/// Who we are, the storage URLs tasks may use and the backend parameters they may give; asks
/// no token, as service-info documents are read before signing in.
async fn service_info(State(app): State<AppState>) -> Json<serde_json::Value> {
    Json(tes::service_info(&app))
}

/// Queues a task; answers its id.
async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(task): ApiJson<TesTask>,
) -> ApiResult<Json<TesCreateTaskResponse>> {
    Ok(Json(tes::create(&app, who, task).await?))
}

/// A page of the caller's tasks, newest first.
async fn list(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Json<TesListTasksResponse>> {
    let mut query = TaskQuery::default();
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (key, value) in pairs {
        match key.as_str() {
            "name_prefix" => query.name_prefix = Some(value),
            "state" => {
                query.state = Some(value.parse::<TesState>().map_err(|e| ApiError::invalid_field("state", e))?);
            }
            "tag_key" => keys.push(value),
            "tag_value" => values.push(value),
            // Any int32 is schema-valid: less than one is the default (see tes::list).
            "page_size" => {
                let size: i32 = value
                    .parse()
                    .map_err(|_| ApiError::invalid_field("page_size", format!("expected an integer, got {value:?}")))?;
                query.page_size = u32::try_from(size).unwrap_or(0);
            }
            "page_token" => query.page_token = Some(value),
            "view" => query.view = view(&value)?,
            // Other parameters are ignored, as the schema's are optional and clients add their own.
            _ => {}
        }
    }
    if values.len() > keys.len() {
        return Err(ApiError::invalid_field("tag_value", "more values than tag_key names"));
    }
    values.resize(keys.len(), String::new());
    query.tags = keys.into_iter().zip(values).collect();
    Ok(Json(tes::list(&app, who, query).await?))
}

/// The `view` a request asks for.
fn view(value: &str) -> Result<TesView, ApiError> {
    match value {
        "MINIMAL" => Ok(TesView::Minimal),
        "BASIC" => Ok(TesView::Basic),
        "FULL" => Ok(TesView::Full),
        other => Err(ApiError::invalid_field("view", format!("expected MINIMAL, BASIC or FULL, got {other:?}"))),
    }
}

/// `/tasks/{id}` (GET: the task, as `view` shows it, MINIMAL by default) and
/// `/tasks/{id}:cancel` (POST: cancels it). The router sees one path segment for both, so the
/// methods each takes are decided here: any other is a 405 whose `Allow` names that path's own.
async fn task(
    State(app): State<AppState>,
    method: Method,
    who: Result<Principal, ApiError>,
    Path(id): Path<String>,
    QueryPairs(pairs): QueryPairs,
) -> ApiResult<Response> {
    let (allowed, cancel) = match id.strip_suffix(":cancel") {
        Some(id) => ("POST", Some(id)),
        None => ("GET, HEAD", None),
    };
    match (&method, cancel) {
        (&Method::POST, Some(id)) => {
            tes::cancel(&app, who?, id).await?;
            Ok(Json(TesCancelTaskResponse {}).into_response())
        }
        (&Method::GET | &Method::HEAD, None) => {
            let mut shown = TesView::Minimal;
            for (key, value) in pairs {
                if key == "view" {
                    shown = view(&value)?;
                }
            }
            Ok(Json(tes::get(&app, who?, &id, shown).await?).into_response())
        }
        _ => {
            let path = format!("{}/tasks/{id}", mission_api::tes::TES_PREFIX);
            let mut refusal = ApiError::method_not_allowed(method.as_str(), &path).into_response();
            refusal.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
            Ok(refusal)
        }
    }
}
