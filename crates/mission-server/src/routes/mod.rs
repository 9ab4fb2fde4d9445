//! The HTTP surface: the versioned API under `/api/v1`, service endpoints, and the built-in
//! identity provider at the root when it is enabled.

mod cargo_bays;
mod extract;
mod files;
mod jobs;
mod lz;
mod meta;
mod mission_types;
mod missions;
mod stations;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use utoipa::OpenApi;

use crate::AppState;
use crate::error::ApiError;

pub use extract::MAX_JSON_BODY_BYTES;
pub use files::recover as recover_files;

/// The OpenAPI document, generated from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "Mission Compute Service API", description = "Missions, their files, jobs, cargo bays, stations, mission types and sign-in configuration."),
    paths(
        missions::create, missions::list, missions::get, missions::update, missions::set_args, missions::delete,
        files::list, files::upload, files::download, files::delete,
        jobs::run, jobs::list, jobs::get, jobs::stop, jobs::logs, jobs::results, jobs::result,
        cargo_bays::list, cargo_bays::create, cargo_bays::get, cargo_bays::delete,
        stations::list, stations::create, stations::get, stations::delete, stations::members,
        stations::add_member, stations::remove_member, stations::landing_zones,
        stations::register_landing_zone, stations::remove_landing_zone,
        mission_types::list, mission_types::get, mission_types::settings,
        meta::auth_config, meta::me,
    ),
    components(schemas(mission_api::Problem)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// The whole application router.
pub fn router(app: AppState) -> Router {
    let api = Router::new()
        .route("/missions", get(missions::list).post(missions::create))
        .route("/missions/{id}", get(missions::get).patch(missions::update).delete(missions::delete))
        .route("/missions/{id}/args", put(missions::set_args))
        .route("/missions/{id}/files", get(files::list))
        .route(
            "/missions/{id}/files/{*path}",
            get(files::download).put(files::upload).delete(files::delete).layer(DefaultBodyLimit::disable()),
        )
        .route("/missions/{id}/jobs", post(jobs::run))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(jobs::get))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/logs", get(jobs::logs))
        .route("/jobs/{id}/results", get(jobs::results))
        .route("/jobs/{id}/results/{*path}", get(jobs::result))
        .route("/lz/connect", post(lz::connect))
        .route("/lz/heartbeat", post(lz::heartbeat))
        .route("/lz/reports", post(lz::reports))
        .route("/lz/jobs/{id}/logs/{stream}", post(lz::append_log))
        .route("/lz/jobs/{id}/files/{*path}", get(lz::input_file))
        .route("/lz/jobs/{id}/results/{*path}", put(lz::upload_result).layer(DefaultBodyLimit::disable()))
        .route("/cargo-bays", get(cargo_bays::list).post(cargo_bays::create))
        .route("/cargo-bays/{id}", get(cargo_bays::get).delete(cargo_bays::delete))
        .route("/stations", get(stations::list).post(stations::create))
        .route("/stations/{id}", get(stations::get).delete(stations::delete))
        .route("/stations/{id}/members", get(stations::members))
        .route("/stations/{id}/members/{user}", put(stations::add_member).delete(stations::remove_member))
        .route("/stations/{id}/lzs", get(stations::landing_zones).post(stations::register_landing_zone))
        .route("/stations/{id}/lzs/{lz_id}", axum::routing::delete(stations::remove_landing_zone))
        .route("/mission-types", get(mission_types::list))
        .route("/mission-types/{id}", get(mission_types::get))
        .route("/mission-types/{id}/settings", get(mission_types::settings))
        .route("/auth-config", get(meta::auth_config))
        .route("/me", get(meta::me))
        .route("/openapi.json", get(meta::openapi));
    let mut root = Router::new()
        .nest(mission_api::API_PREFIX, api)
        .route("/healthz", get(meta::healthz))
        .route("/readyz", get(meta::readyz))
        .route("/metrics", get(meta::metrics));
    if app.idp.is_some() {
        root = root.merge(crate::idp::routes::router());
    }
    root.fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_announced_oversize))
        .layer(axum::middleware::from_fn_with_state(
            app.config.connection_limits.body_idle_timeout,
            crate::serve::body_idle_timeout,
        ))
        .layer(axum::middleware::from_fn_with_state(app.clone(), crate::metrics::track))
        .with_state(app)
}

/// A stream fed by a task: `produce` sends items until it returns; dropping the stream stops it
/// at its next send.
fn async_stream<F, Fut>(produce: F) -> impl futures_util::Stream<Item = Bytes> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(produce(tx));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// Answers 413 at once when a request announces (`Content-Length`) a body over the route's
/// limit, instead of reading it first. File uploads (`PUT …/{*path}`) have the file-size limit,
/// which their handlers check the same way; every other body is at most
/// [`MAX_JSON_BODY_BYTES`].
async fn refuse_announced_oversize(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    let upload = request.method() == axum::http::Method::PUT
        && request.extensions().get::<axum::extract::MatchedPath>().is_some_and(|p| p.as_str().ends_with("/{*path}"));
    let announced =
        request.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match announced {
        Some(length) if !upload && length > MAX_JSON_BODY_BYTES as u64 => ApiError::too_large(format!(
            "request bodies are limited to {MAX_JSON_BODY_BYTES} bytes here; this one announces {length}"
        ))
        .into_response(),
        _ => next.run(request).await,
    }
}

async fn no_route(request: Request) -> impl IntoResponse {
    ApiError::no_route(request.uri().path())
}

async fn method_not_allowed(request: Request) -> impl IntoResponse {
    ApiError::method_not_allowed(request.method().as_str(), request.uri().path())
}
