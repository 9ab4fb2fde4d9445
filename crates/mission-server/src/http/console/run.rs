//! The run dialog: start a job of a mission on a station, optionally on one of its landing zones,
//! with the resources it asks for. The page lists every landing zone the viewer may use with what
//! it offers and what is in use; the script keeps the number fields' limits at what the chosen
//! station or landing zone can ever hold, so the browser refuses an impossible request before it
//! is sent, and the server refuses it again (the scheduler's own check) for anyone without script.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use mission_api::{LandingZone, Mission, ResourceDefaults, RunJob, Station};
use serde::Deserialize;
use uuid::Uuid;

use super::session::Viewer;
use super::{Frame, PageError, PageResult, page, refusal};
use crate::AppState;
use crate::domain::catalogue;
use crate::domain::{jobs, missions, stations};
use crate::http::error::ApiError;
use crate::http::routes::extract::parse_id;

/// A station and its landing zones, as the dialog offers them.
struct StationChoice {
    station: Station,
    zones: Vec<LandingZone>,
}

#[derive(Template)]
#[template(path = "console/run.html")]
struct RunPage {
    frame: Frame,
    mission: Mission,
    stations: Vec<StationChoice>,
    /// What the form holds: as sent, or the mission type's defaults.
    sent: RunForm,
    error: String,
    error_field: String,
}

/// The run form, as text (a number that does not parse is named in the error, not lost).
#[derive(Deserialize, Default)]
pub struct RunForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    station: String,
    #[serde(default)]
    lz: String,
    #[serde(default)]
    cpu_count: String,
    #[serde(default)]
    memory_amount: String,
    #[serde(default)]
    gpu_count: String,
    #[serde(default)]
    time_limit: String,
}

impl RunForm {
    fn from_defaults(defaults: ResourceDefaults) -> Self {
        Self {
            cpu_count: defaults.cpu_count.to_string(),
            memory_amount: defaults.memory_amount.to_string(),
            gpu_count: defaults.gpu_count.to_string(),
            time_limit: defaults.time_limit.map(|m| m.to_string()).unwrap_or_default(),
            ..Self::default()
        }
    }

    /// The API request this form makes: a number field that is not a whole number is a 400
    /// naming it.
    fn request(&self) -> Result<RunJob, ApiError> {
        fn number<T: std::str::FromStr>(field: &str, text: &str) -> Result<Option<T>, ApiError> {
            let text = text.trim();
            if text.is_empty() {
                return Ok(None);
            }
            text.parse()
                .map(Some)
                .map_err(|_| ApiError::invalid_field(field, format!("expected a whole number, got {text:?}")))
        }
        Ok(RunJob {
            station_id: parse_id("station_id", &self.station)?,
            lz_id: Some(self.lz.trim()).filter(|l| !l.is_empty()).map(|l| parse_id("lz_id", l)).transpose()?,
            cpu_count: number("cpu_count", &self.cpu_count)?,
            memory_amount: number("memory_amount", &self.memory_amount)?,
            gpu_count: number("gpu_count", &self.gpu_count)?,
            time_limit: number("time_limit", &self.time_limit)?,
            ..Default::default()
        })
    }
}

/// The mission to run (the viewer must be able to change it, as the API asks) and the page.
async fn dialog(app: &AppState, viewer: &Viewer, id: &str, sent: Option<RunForm>) -> Result<RunPage, PageError> {
    let principal = viewer.principal();
    let mission = missions::writable(app, principal, parse_id("mission_id", id)?).await?;
    let Some(mission_type) = mission.mission_type_id.and_then(catalogue::find) else {
        return Err(
            ApiError::invalid_field("mission_type_id", "the mission has no mission type to say how to run it").into()
        );
    };
    let list = stations::list(app, principal).await?;
    // Every landing zone in one read; the list above holds only stations the viewer may use.
    let mut zones = app.store.landing_zones(None, app.config.lz_lease, mission_store::now()).await?;
    let choices = list
        .into_iter()
        .map(|station| {
            let (own, others) = zones.drain(..).partition(|z| z.station_id == station.station_id);
            zones = others;
            StationChoice { station, zones: own }
        })
        .collect();
    Ok(RunPage {
        frame: Frame::new(viewer, "missions"),
        sent: sent.unwrap_or_else(|| RunForm::from_defaults(mission_type.resources())),
        mission,
        stations: choices,
        error: String::new(),
        error_field: String::new(),
    })
}

/// `GET /missions/{id}/run`: the dialog.
pub async fn form(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    Ok(page(StatusCode::OK, &dialog(&app, &viewer, &id, None).await?))
}

/// `POST /missions/{id}/run`: starts the job and shows it; a refused request comes back as the
/// dialog with the reason.
pub async fn submit(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(sent): Form<RunForm>,
) -> PageResult {
    viewer.check_csrf(&sent.csrf)?;
    let started = match sent.request() {
        Ok(request) => match parse_id("mission_id", &id) {
            Ok(mission_id) => jobs::submit(&app, viewer.principal(), mission_id, request).await.map_err(ApiError::from),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match started {
        Ok(job) => Ok(Redirect::to(&format!("/jobs/{}", job.job_id)).into_response()),
        Err(e) => {
            let e = refusal(e)?;
            Ok(refused(dialog(&app, &viewer, &id, Some(sent)).await?, &e))
        }
    }
}

fn refused(mut dialog: RunPage, error: &ApiError) -> Response {
    let problem = error.problem();
    dialog.error = problem.detail;
    dialog.error_field = problem.field.unwrap_or_default();
    page(error.status(), &dialog)
}

impl RunPage {
    /// Whether `id` is the station or landing zone the form names.
    fn chosen(&self, sent: &str, id: &Uuid) -> bool {
        sent.trim() == id.to_string()
    }

    /// Whether no station offered has a landing zone.
    fn no_zones(&self) -> bool {
        self.stations.iter().all(|choice| choice.zones.is_empty())
    }
}
