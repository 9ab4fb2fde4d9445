//! Stations, their members and their landing zones.
//!
//! Admins create and delete stations and name their owner; an owner (or an admin) manages
//! members and landing zones and changes the station. A user sees the stations they may run
//! jobs on — open ones, owned ones and those they are a member of — and any other is not found.
//! Registering a landing zone answers its agent token once; only the token's SHA-256 is stored.

use mission_api::UpdateStation;
use mission_api::{CreateStation, LandingZone, RegisterLandingZone, RegisteredLandingZone, Station, StationMember};
use mission_store::{self as store, LzIdentity};
use serde_json::json;
use uuid::Uuid;

use super::{DomainError, DomainResult, checked_name, member_named, user_named};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::services::idp::{hash_secret, random_secret};

/// Longest station description, in characters.
const MAX_DESCRIPTION_CHARS: usize = 2000;

/// A station the caller may see (and run jobs on); not found otherwise.
pub async fn visible(app: &AppState, who: Principal, station_id: Uuid) -> DomainResult<Station> {
    let station = app.store.station(station_id).await?.ok_or_else(|| DomainError::not_found("station", station_id))?;
    let allowed = who.admin
        || station.open
        || station.owner_id == Some(who.user_id)
        || app.store.is_station_member(station_id, who.user_id).await?;
    if allowed { Ok(station) } else { Err(DomainError::not_found("station", station_id)) }
}

/// A station the caller manages: not found if they cannot see it, forbidden if they may only
/// use it.
async fn managed(app: &AppState, who: Principal, station_id: Uuid) -> DomainResult<Station> {
    let station = visible(app, who, station_id).await?;
    if who.admin || station.owner_id == Some(who.user_id) {
        Ok(station)
    } else {
        Err(DomainError::Forbidden(format!("only the owner of station {} or an admin may manage it", station.name)))
    }
}

/// The stations the caller may run jobs on (every station, for admins).
pub async fn list(app: &AppState, who: Principal) -> DomainResult<Vec<Station>> {
    Ok(app.store.stations((!who.admin).then_some(who.user_id)).await?)
}

/// Creates a station (admins only), owned by the user it names or by the caller.
pub async fn create(app: &AppState, who: Principal, req: CreateStation) -> DomainResult<Station> {
    if !who.admin {
        return Err(DomainError::Forbidden("only admins may create stations".into()));
    }
    let name = checked_name(&req.name)?;
    let description = checked_description(req.description.unwrap_or_default())?;
    let owner_id = match req.owner_id {
        Some(id) => Some(
            user_named(app, &id.to_string())
                .await?
                .ok_or_else(|| DomainError::invalid("owner_id", format!("no user {id}")))?,
        ),
        None => Some(who.user_id),
    };
    let station = Station {
        station_id: Uuid::new_v4(),
        name,
        description,
        owner_id,
        open: req.open.unwrap_or(false),
        reclaim: req.reclaim.unwrap_or(true),
        container_network: req.container_network.unwrap_or_default(),
        energy: mission_api::StationEnergy::default(),
        grid_intensity_problem: None,
        created_at: store::now(),
    };
    audit::note(who, Change::new("station.create", "station", station.station_id).named(&station.name).with(&station));
    app.store.insert_station(&station).await?;
    Ok(station)
}

/// A station's description, if it is one: at most [`MAX_DESCRIPTION_CHARS`], no NUL.
fn checked_description(description: String) -> DomainResult<String> {
    if description.chars().count() > MAX_DESCRIPTION_CHARS || description.contains('\0') {
        return Err(DomainError::invalid("description", format!("at most {MAX_DESCRIPTION_CHARS} characters, no NUL")));
    }
    Ok(description)
}

/// Changes a station's description, whether it is open, whether it reclaims borrowed room, and
/// its containers' network (its owner or an admin), and how its jobs' energy, carbon and cost are
/// reckoned (admins: prices are the site's); answers the station as it is now.
pub async fn update(app: &AppState, who: Principal, station_id: Uuid, req: UpdateStation) -> DomainResult<Station> {
    let station = managed(app, who, station_id).await?;
    if let Some(energy) = &req.energy {
        if !who.admin {
            return Err(DomainError::Forbidden("only admins set a station's energy settings and prices".into()));
        }
        if let Some((field, problem)) = energy.problem() {
            return Err(DomainError::invalid(field, problem));
        }
    }
    let given = serde_json::to_value(&req).unwrap_or_default();
    let description = req.description.clone().map(checked_description).transpose()?;
    audit::note(who, Change::new("station.update", "station", station_id).named(&station.name).with(given));
    if !app.store.update_station(station_id, &UpdateStation { description, ..req.clone() }).await? {
        return Err(DomainError::not_found("station", station_id));
    }
    if req.reclaim.is_some_and(|reclaim| reclaim != station.reclaim) || req.energy.is_some() {
        app.scheduler.station_changed(station_id).await?;
    }
    app.store.station(station_id).await?.ok_or_else(|| DomainError::not_found("station", station_id))
}

/// Deletes a station with its members and landing zones (admins only); refused while jobs that
/// have not ended are queued for it or placed on it.
pub async fn delete(app: &AppState, who: Principal, station_id: Uuid) -> DomainResult<()> {
    let station = visible(app, who, station_id).await?;
    if !who.admin {
        return Err(DomainError::Forbidden("only admins may delete stations".into()));
    }
    audit::note(who, Change::new("station.delete", "station", station_id).named(&station.name));
    if app.scheduler.remove(station_id, None).await? {
        Ok(())
    } else {
        Err(DomainError::not_found("station", station_id))
    }
}

/// The members of a station (its owner and admins).
pub async fn members(app: &AppState, who: Principal, station_id: Uuid) -> DomainResult<Vec<StationMember>> {
    let station = managed(app, who, station_id).await?;
    Ok(app.store.station_members(station.station_id).await?)
}

/// Adds a member, named by user id or username.
pub async fn add_member(app: &AppState, who: Principal, station_id: Uuid, user: &str) -> DomainResult<()> {
    let station = managed(app, who, station_id).await?;
    let user_id = member_named(app, user).await?;
    let change = Change::new("station.member.add", "station", station_id).named(&station.name);
    audit::note(who, change.with(json!({ "user_id": user_id })));
    app.store.add_station_member(station_id, user_id, store::now()).await?;
    Ok(())
}

/// Removes a member, named by user id or username.
pub async fn remove_member(app: &AppState, who: Principal, station_id: Uuid, user: &str) -> DomainResult<()> {
    let station = managed(app, who, station_id).await?;
    let user_id = member_named(app, user).await?;
    let change = Change::new("station.member.remove", "station", station_id).named(&station.name);
    audit::note(who, change.with(json!({ "user_id": user_id })));
    if app.store.remove_station_member(station_id, user_id).await? {
        Ok(())
    } else {
        Err(DomainError::not_found("member", format!("{user} of station {}", station.name)))
    }
}

/// The landing zones of a station the caller may see.
pub async fn landing_zones(app: &AppState, who: Principal, station_id: Uuid) -> DomainResult<Vec<LandingZone>> {
    let station = visible(app, who, station_id).await?;
    Ok(app.store.landing_zones(Some(station.station_id), app.config.lz_lease, store::now()).await?)
}

/// Registers a landing zone of a station the caller manages, and answers its agent token (shown
/// this once).
pub async fn register_landing_zone(
    app: &AppState,
    who: Principal,
    station_id: Uuid,
    req: RegisterLandingZone,
) -> DomainResult<RegisteredLandingZone> {
    let station = managed(app, who, station_id).await?;
    let landing_zone = LandingZone {
        lz_id: Uuid::new_v4(),
        station_id: station.station_id,
        name: checked_name(&req.name)?,
        online: false,
        resources: None,
        in_use: Default::default(),
        last_seen_at: None,
        created_at: store::now(),
        cluster_account: req.cluster_account.as_deref().map(check_cluster_account).transpose()?,
        pilot_of: None,
        images: false,
    };
    // Its token is made in `register`, after this.
    let change = Change::new("landing_zone.register", "landing_zone", landing_zone.lz_id).named(&landing_zone.name);
    audit::note(who, change.with(&landing_zone));
    register(app, landing_zone).await
}

/// Stores a new landing zone with a token of its own, and tells the scheduler jobs may name it.
pub async fn register(app: &AppState, landing_zone: LandingZone) -> DomainResult<RegisteredLandingZone> {
    let token = random_secret();
    app.store.insert_landing_zone(&landing_zone, &hash_secret(&token)).await?;
    app.scheduler.registered(LzIdentity {
        lz_id: landing_zone.lz_id,
        station_id: landing_zone.station_id,
        name: landing_zone.name.clone(),
        cluster_account: landing_zone.cluster_account.clone(),
    });
    Ok(RegisteredLandingZone { landing_zone, token })
}

/// Removes a landing zone of a station the caller manages; its token stops working at once.
pub async fn remove_landing_zone(app: &AppState, who: Principal, station_id: Uuid, lz_id: Uuid) -> DomainResult<()> {
    let station = managed(app, who, station_id).await?;
    let change = Change::new("landing_zone.remove", "landing_zone", lz_id);
    audit::note(who, change.with(json!({ "station_id": station.station_id })));
    if app.scheduler.remove(station.station_id, Some(lz_id)).await? {
        Ok(())
    } else {
        Err(DomainError::not_found("landing zone", lz_id))
    }
}

/// A POSIX account name as a cluster account: 1 to 32 of `a-z`, `A-Z`, `0-9`, `_`, `.` and
/// `-`, not starting with `-`.
fn check_cluster_account(account: &str) -> DomainResult<String> {
    let valid = (1..=32).contains(&account.len())
        && !account.starts_with('-')
        && account.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !valid {
        return Err(DomainError::invalid(
            "cluster_account",
            format!("expected a POSIX account name (1 to 32 of a-z, 0-9, _ . -), got {account:?}"),
        ));
    }
    Ok(account.to_owned())
}

/// The reading of the stations' grid intensity files ([`mission_api::StationEnergy::grid_intensity_file`]).
pub struct GridIntensityFiles {
    store: mission_store::Store,
    scheduler: crate::services::scheduler::Scheduler,
}

/// The most a grid intensity file is read of: a number needs a few bytes.
const MAX_GRID_FILE_BYTES: u64 = 4096;

impl GridIntensityFiles {
    /// What reads the stations' files, telling `scheduler` of new values.
    pub fn new(store: mission_store::Store, scheduler: crate::services::scheduler::Scheduler) -> Self {
        Self { store, scheduler }
    }

    /// Reads every station's file every `every` until `shutdown`: a good value becomes the
    /// station's intensity (and the scheduler's, for the jobs that end from then on); a file
    /// that is missing, unreadable or malformed leaves the last good value, and the station says
    /// why (its `grid_intensity_problem`, and the log once).
    pub async fn every(self, every: std::time::Duration, shutdown: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.read_all().await {
                tracing::warn!("reading the stations' grid intensity files: {e}");
            }
        }
    }

    async fn read_all(&self) -> Result<(), DomainError> {
        for station in self.store.stations(None).await? {
            let Some(file) = station.energy.grid_intensity_file.clone() else { continue };
            let now = station.energy.grid_gco2e_per_kwh;
            let (value, problem) = match read_grid_file(&file).await {
                Ok(value) => (Some(value), None),
                Err(why) => (None, Some(format!("{file} {why}; the last good value, {now} gCO2e/kWh, is kept"))),
            };
            if value.is_none_or(|v| v == now) && problem == station.grid_intensity_problem {
                continue;
            }
            if let Some(problem) = &problem {
                tracing::warn!(station = %station.name, "grid intensity: {problem}");
            }
            let written = self.store.set_grid_intensity(station.station_id, &file, value, problem.as_deref()).await?;
            if written && value.is_some_and(|v| v != now) {
                self.scheduler.station_changed(station.station_id).await?;
            }
        }
        Ok(())
    }
}

/// The intensity a site's file holds, or why it holds none.
async fn read_grid_file(path: &str) -> Result<f64, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "is missing".to_owned(),
        _ => format!("cannot be read ({e})"),
    })?;
    let mut text = Vec::new();
    file.take(MAX_GRID_FILE_BYTES + 1).read_to_end(&mut text).await.map_err(|e| format!("cannot be read ({e})"))?;
    if text.len() as u64 > MAX_GRID_FILE_BYTES {
        return Err(format!("is longer than {MAX_GRID_FILE_BYTES} bytes"));
    }
    mission_api::energy::grid_intensity(&String::from_utf8_lossy(&text))
}
