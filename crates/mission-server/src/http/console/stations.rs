//! The stations pages: the stations a viewer may run jobs on, and one station with its landing
//! zones (online, lease, resources offered and in use, GPUs). Its owner and admins also see and
//! change its members, register a landing zone (its token and the `mission lz` command shown
//! once, on the answer to the form, never in an address) and remove one.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use chrono::{DateTime, Utc};
use mission_api::{LandingZone, RegisterLandingZone, RegisteredLandingZone, Station, StationMember};
use serde::Deserialize;

use super::session::Viewer;
use super::sign_in::CsrfForm;
use super::{Frame, PageError, PageResult, page};
use crate::AppState;
use crate::domain::{DomainError, stations};
use crate::http::routes::extract::parse_id;

/// A station as a row of the list.
struct Row {
    station: Station,
    zones: usize,
    online: usize,
    own: bool,
}

#[derive(Template)]
#[template(path = "console/stations.html")]
struct StationsPage {
    frame: Frame,
    rows: Vec<Row>,
}

/// `GET /stations`: the stations the viewer may run jobs on (all of them, for admins).
pub async fn list(State(app): State<AppState>, viewer: Viewer) -> PageResult {
    let list = stations::list(&app, viewer.principal()).await?;
    let all = app.store.landing_zones(None, app.config.lz_lease, mission_store::now()).await?;
    let rows = list
        .into_iter()
        .map(|station| {
            let zones: Vec<&LandingZone> = all.iter().filter(|z| z.station_id == station.station_id).collect();
            Row {
                zones: zones.len(),
                online: zones.iter().filter(|z| z.online).count(),
                own: station.owner_id == Some(viewer.user.user_id),
                station,
            }
        })
        .collect();
    Ok(page(StatusCode::OK, &StationsPage { frame: Frame::new(&viewer, "stations"), rows }))
}

/// A landing zone as the station page shows it.
struct Zone {
    lz: LandingZone,
    /// When its lease ends unless its agent is heard from again.
    lease_until: Option<DateTime<Utc>>,
}

#[derive(Template)]
#[template(path = "console/station.html")]
struct StationPage {
    frame: Frame,
    station: Station,
    zones: Vec<Zone>,
    /// Whether the viewer manages the station (its owner, or an admin).
    manages: bool,
    members: Vec<StationMember>,
    /// A landing zone just registered, with its token: shown on this answer only.
    registered: Option<RegisteredLandingZone>,
    /// The command its agent runs.
    agent_command: String,
    error: String,
}

/// The station page, for any outcome of its forms.
async fn station_page(
    app: &AppState,
    viewer: &Viewer,
    id: &str,
    registered: Option<RegisteredLandingZone>,
    error: String,
) -> Result<StationPage, PageError> {
    let principal = viewer.principal();
    // One visibility check; what follows reads the station's rows directly.
    let station = stations::visible(app, principal, parse_id("station_id", id)?).await?;
    let zones = app.store.landing_zones(Some(station.station_id), app.config.lz_lease, mission_store::now()).await?;
    let manages = viewer.user.admin || station.owner_id == Some(viewer.user.user_id);
    let members = if manages { app.store.station_members(station.station_id).await? } else { Vec::new() };
    let lease = chrono::Duration::from_std(app.config.lz_lease).unwrap_or(chrono::Duration::MAX);
    let agent_command = registered.as_ref().map_or_else(String::new, |r| {
        let runner = if r.landing_zone.cluster_account.is_some() {
            " --runner slurm --work-root DIR-ON-THE-SHARED-FILESYSTEM"
        } else {
            ""
        };
        format!("MISSION_LZ_TOKEN={} mission lz --server {}{runner}", r.token, app.public_url)
    });
    Ok(StationPage {
        frame: Frame::new(viewer, "stations"),
        zones: zones
            .into_iter()
            .map(|lz| Zone { lease_until: lz.last_seen_at.filter(|_| lz.online).map(|seen| seen + lease), lz })
            .collect(),
        station,
        manages,
        members,
        registered,
        agent_command,
        error,
    })
}

/// `GET /stations/{id}`: one station.
pub async fn show(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    Ok(page(StatusCode::OK, &station_page(&app, &viewer, &id, None, String::new()).await?))
}

/// The station page again with a form's refusal above it, when the API refused with a 4xx.
async fn refused(app: &AppState, viewer: &Viewer, id: &str, error: DomainError) -> PageResult {
    let error = super::refusal(error)?;
    let status = error.status();
    Ok(page(status, &station_page(app, viewer, id, None, error.problem().detail).await?))
}

#[derive(Deserialize)]
pub struct RegisterForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    cluster_account: String,
}

/// `POST /stations/{id}/lzs`: registers a landing zone and shows its token, this once.
pub async fn register(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<RegisterForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let cluster_account = Some(form.cluster_account.trim().to_owned()).filter(|a| !a.is_empty());
    let request = RegisterLandingZone { name: form.name, cluster_account };
    match stations::register_landing_zone(&app, viewer.principal(), parse_id("station_id", &id)?, request).await {
        Ok(registered) => {
            Ok(page(StatusCode::CREATED, &station_page(&app, &viewer, &id, Some(registered), String::new()).await?))
        }
        Err(e) => refused(&app, &viewer, &id, e).await,
    }
}

/// `POST /stations/{id}/lzs/{lz}/remove`: removes a landing zone; its token stops working.
pub async fn remove_lz(
    State(app): State<AppState>,
    viewer: Viewer,
    Path((id, lz)): Path<(String, String)>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let (station_id, lz_id) = (parse_id("station_id", &id)?, parse_id("lz_id", &lz)?);
    stations::remove_landing_zone(&app, viewer.principal(), station_id, lz_id).await?;
    Ok(Redirect::to(&format!("/stations/{id}")).into_response())
}

#[derive(Deserialize)]
pub struct MemberForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    user: String,
}

/// `POST /stations/{id}/members`: adds a member by username.
pub async fn add_member(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<MemberForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let user = form.user.trim().to_owned();
    match stations::add_member(&app, viewer.principal(), parse_id("station_id", &id)?, &user).await {
        Ok(()) => Ok(Redirect::to(&format!("/stations/{id}#members")).into_response()),
        Err(e) => refused(&app, &viewer, &id, e).await,
    }
}

/// `POST /stations/{id}/members/remove`: removes a member.
pub async fn remove_member(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<MemberForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    stations::remove_member(&app, viewer.principal(), parse_id("station_id", &id)?, &form.user).await?;
    Ok(Redirect::to(&format!("/stations/{id}#members")).into_response())
}
