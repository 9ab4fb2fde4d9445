//! Service endpoints: health, readiness, metrics, OpenAPI, the auth configuration and `me`.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use mission_api::{AuthConfig, User};

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::{ApiError, ApiResult};

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
    match project_gauges(&app).await {
        Ok(gauges) => body.push_str(&gauges),
        // Metrics answer even when the scheduler's leader cannot be reached for a moment.
        Err(e) => tracing::warn!("project gauges left out of /metrics: {e:?}"),
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The per-project gauges: one series per project with jobs placed or queued, or a budget (so
/// as many as there are projects at most), labelled with the project's name.
async fn project_gauges(app: &AppState) -> Result<String, ApiError> {
    let gauges = app.scheduler.project_gauges().await?;
    if gauges.is_empty() {
        return Ok(String::new());
    }
    let names = app.store.project_names(&gauges.iter().map(|g| g.project_id).collect::<Vec<_>>()).await?;
    type Read = fn(&mission_scheduler::ProjectGauge) -> Option<f64>;
    let series: [(&str, &str, Read); 6] = [
        ("mission_project_running_jobs", "Jobs of the project placed on landing zones.", |g| {
            Some(g.in_use.running_jobs as f64)
        }),
        ("mission_project_queued_jobs", "Jobs of the project waiting in the queue.", |g| {
            Some(g.in_use.queued_jobs as f64)
        }),
        ("mission_project_cpus_in_use", "CPUs the project's placed jobs hold.", |g| Some(g.in_use.cpus as f64)),
        ("mission_project_gpus_in_use", "GPUs the project's placed jobs hold.", |g| Some(g.in_use.gpus as f64)),
        ("mission_project_budget_left_cpu_hours", "CPU-hours left of the project's budget this period.", |g| {
            g.budget_left_cpu_hours
        }),
        ("mission_project_budget_left_gpu_hours", "GPU-hours left of the project's budget this period.", |g| {
            g.budget_left_gpu_hours
        }),
    ];
    let counters: [(&str, &str, Read); 2] = [
        (
            "mission_project_energy_kwh_total",
            "kWh the project's jobs were reckoned as they ended (PUE included).",
            |g| Some(g.energy_kwh),
        ),
        ("mission_project_co2e_grams_total", "Grams of CO2e of the project's jobs, as they ended.", |g| Some(g.co2e_g)),
    ];
    // A label value escapes backslashes, quotes and line breaks.
    let label = |value: &str| value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let project = |gauge: &mission_scheduler::ProjectGauge| {
        label(&names.get(&gauge.project_id).map_or_else(|| gauge.project_id.to_string(), String::clone))
    };
    let mut out = String::new();
    let typed = series.iter().map(|s| (s, "gauge")).chain(counters.iter().map(|s| (s, "counter")));
    for ((name, help, read), kind) in typed {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for gauge in &gauges {
            let Some(value) = read(gauge) else { continue };
            out.push_str(&format!("{name}{{project=\"{}\"}} {value}\n", project(gauge)));
        }
    }
    let name = "mission_project_cost_total";
    out.push_str(&format!("# HELP {name} What the project's jobs were charged as they ended, by currency.\n"));
    out.push_str(&format!("# TYPE {name} counter\n"));
    for gauge in &gauges {
        for (currency, amount) in &gauge.cost {
            out.push_str(&format!(
                "{name}{{project=\"{}\",currency=\"{}\"}} {amount}\n",
                project(gauge),
                label(currency)
            ));
        }
    }
    Ok(out)
}

/// The OpenAPI 3 description of the API.
pub async fn openapi() -> impl IntoResponse {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let document = DOCUMENT.get_or_init(|| super::document().to_string());
    ([(header::CONTENT_TYPE, "application/json")], document.as_str())
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
