//! Service endpoints: health, readiness, metrics, OpenAPI, the auth configuration and `me`.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use mission_api::{AuthConfig, User};

use crate::AppState;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};

/// Liveness: the process answers.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the database answers.
pub async fn readyz(State(app): State<AppState>) -> ApiResult<&'static str> {
    app.store.ping().await.map_err(|e| ApiError::unavailable(format!("database: {e}")))?;
    Ok("ready\n")
}

/// Prometheus metrics.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    let mut body = app.metrics.render();
    body.push_str(
        "# HELP mission_scheduler_leader Whether this replica runs the scheduler (1) or sends it its calls (0).\n",
    );
    body.push_str("# TYPE mission_scheduler_leader gauge\n");
    body.push_str(&format!("mission_scheduler_leader {}\n", u8::from(app.scheduler.leads())));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The OpenAPI 3 description of the API.
pub async fn openapi() -> impl IntoResponse {
    use utoipa::OpenApi;
    ([(header::CONTENT_TYPE, "application/json")], super::ApiDoc::openapi().to_json().expect("OpenAPI serialises"))
}

/// Where and how clients sign in (no authentication needed).
#[utoipa::path(get, path = "/api/v1/auth-config", tag = "auth", responses((status = 200, body = AuthConfig)))]
pub async fn auth_config(State(app): State<AppState>) -> Json<AuthConfig> {
    Json(AuthConfig {
        auth_url: app.auth_url.clone(),
        audience: app.config.audience.clone(),
        client_id: app.config.client_id.clone(),
    })
}

/// The signed-in user.
#[utoipa::path(get, path = "/api/v1/me", tag = "auth",
    responses((status = 200, body = User), (status = 401, body = mission_api::Problem)))]
pub async fn me(State(app): State<AppState>, who: Principal) -> ApiResult<Json<User>> {
    let user =
        app.store.user_by_id(who.user_id).await?.ok_or_else(|| ApiError::unauthorized("the user no longer exists"))?;
    Ok(Json(user.into()))
}
