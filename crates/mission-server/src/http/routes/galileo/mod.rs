//! The REST surface the `galileo-sdk` 1.0.1 Python client speaks, under
//! `/galileo/user_interface/v1`, so scripts written for the service this interface came from
//! run unchanged against this one (`python/tests/test_galileo.py` drives that client, from PyPI).
//!
//! Every route here translates a galileo request into the `/api/v1` handler that does the work
//! (same ownership rules, same limits, same validation) and the answer into the envelope and
//! keys that client reads: missions are "projects", mission types "projecttypes", landing zones
//! "machines"; every success is a 200 with a JSON body; times are epoch seconds; job states
//! carry galileo's names. The client's quirks served as it expects are listed in `projects` and
//! `jobs`. Its password sign-in lives with the built-in provider (`idp::routes`).
//!
//! A base URL with a trailing slash makes that client ask for `//galileo/...`, which is not
//! served: give it the server's URL without one.

mod jobs;
mod projects;

use axum::Json;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Serialize;

use crate::AppState;

/// Where the routes are mounted.
pub const PREFIX: &str = "/galileo/user_interface/v1";

/// The route of the client's file uploads (whole files in one body, under the file-size limit).
pub const UPLOAD_ROUTE: &str = "/galileo/user_interface/v1/projects/{id}/files";

/// The galileo routes, to be nested at [`PREFIX`].
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/projects", get(projects::list).post(projects::create))
        .route("/projects/{id}", put(projects::update).delete(projects::delete))
        .route(
            "/projects/{id}/files",
            get(projects::files)
                .post(projects::upload)
                .delete(projects::delete_file)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/projects/{id}/jobs", post(jobs::run))
        .route("/projecttypes/summaries", get(projects::type_summaries))
        .route("/projecttypes", get(projects::types))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}/logs", get(jobs::logs))
        .route("/jobs/{id}/stop", put(jobs::stop))
        .route("/jobs/{id}/kill", put(jobs::stop))
        .route("/jobs/{id}/results", get(jobs::results))
        .route("/users/self", get(jobs::user_self))
        .route("/stations", get(jobs::stations))
        .route("/machines", get(jobs::machines))
        .route("/machines/{id}", get(jobs::machine))
}

/// A 200 with `value` as JSON: that client reads a body from every success.
fn ok(value: impl Serialize) -> Response {
    Json(value).into_response()
}

/// Seconds since the epoch, as that client's `datetime.fromtimestamp` reads them.
fn epoch(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp()
}

/// Whether a galileo query flag is on: the client sends booleans lower-cased and never sends a
/// false one.
fn flag(value: &str) -> Result<bool, crate::http::error::ApiError> {
    value.parse().map_err(|_| crate::http::error::ApiError::invalid(format!("expected true or false, got {value:?}")))
}
