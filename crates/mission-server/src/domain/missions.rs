//! Missions: who may read and change them, and the rules of their fields.
//!
//! The owner (or an admin) reads and changes a mission; the members of its project, and anyone
//! signed in for a public mission, read it; a private mission of someone else is not found,
//! never revealing that it exists. The REST handlers (`routes/missions.rs`), the console and the
//! galileo façade all come here.

use std::collections::BTreeMap;

use mission_api::{CreateMission, DEFAULT_CARGO_BAY_ID, Mission, UpdateMission};
use mission_store::{self as store, MissionChanges, MissionFilter};
use uuid::Uuid;

use super::{
    DomainError, DomainResult, check_description, checked_labels, checked_name, checked_retry, images, projects,
};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::domain::bay_storage::storage_segments;
use crate::domain::catalogue;

/// Longest storage path, in bytes.
pub const MAX_STORAGE_PATH_BYTES: usize = 1024;
/// Most arguments a mission may have.
pub const MAX_ARGS: usize = 1000;
/// Longest single argument, in bytes.
pub const MAX_ARG_BYTES: usize = 4096;

/// A mission the caller may read: their own, a public one, one of a project they are a member
/// of (any role), or any for an admin; not found otherwise.
pub async fn readable(app: &AppState, who: Principal, mission_id: Uuid) -> DomainResult<Mission> {
    match app.store.mission(mission_id).await? {
        Some(m) if who.admin || m.public || m.user_id == who.user_id => Ok(m),
        Some(m) if projects::role(app, who, m.project_id).await?.is_some() => Ok(m),
        _ => Err(DomainError::not_found("mission", mission_id)),
    }
}

/// A mission the caller may change: not found if they cannot read it, forbidden if they only
/// may read it.
pub async fn writable(app: &AppState, who: Principal, mission_id: Uuid) -> DomainResult<Mission> {
    let mission = readable(app, who, mission_id).await?;
    if who.admin || mission.user_id == who.user_id {
        Ok(mission)
    } else {
        Err(DomainError::Forbidden(format!(
            "mission {} belongs to another user and is read-only to you",
            mission.mission_id
        )))
    }
}

/// One page of the missions `filter` matches that the caller may read: their own and public
/// ones (every mission, for an admin), or every mission of the projects it names, which the
/// caller must be a member of.
pub async fn list(app: &AppState, who: Principal, mut filter: MissionFilter) -> DomainResult<(Vec<Mission>, bool)> {
    filter.visible_to = (!who.admin).then_some(who.user_id);
    if !filter.project_ids.is_empty() {
        // A member reads every mission of their projects, whoever owns it.
        projects::ensure_member_of_each(app, who, &filter.project_ids, "project_ids").await?;
        filter.visible_to = None;
    }
    Ok(app.store.list_missions(&filter).await?)
}

/// Creates a mission owned by the caller, in the project it names (default: the caller's
/// personal project), which the caller must be allowed to run jobs in.
pub async fn create(app: &AppState, who: Principal, req: CreateMission) -> DomainResult<Mission> {
    let given = serde_json::to_value(&req).unwrap_or_default();
    let name = checked_name(&req.name)?;
    let description = req.description.unwrap_or_default();
    check_description(&description)?;
    check_storage_path("source_path", &req.source_path)?;
    check_storage_path("destination_path", &req.destination_path)?;
    let settings = req.settings.unwrap_or_default();
    check_settings(req.mission_type_id, &settings)?;
    let labels = checked_labels(req.labels)?;
    let retry = checked_retry(req.retry)?;
    check_storage(app, who.user_id, "source_storage_id", req.source_storage_id).await?;
    check_storage(app, who.user_id, "destination_storage_id", req.destination_storage_id).await?;
    let project_id = req.project_id.unwrap_or(who.user_id);
    projects::ensure_may_run(app, who, project_id, "project_id").await?;
    if let Some(image) = &req.image {
        images::resolve(app, who, "image", image).await?;
    }
    let now = store::now();
    let mission = Mission {
        mission_id: Uuid::new_v4(),
        name,
        description,
        mission_type_id: req.mission_type_id,
        source_storage_id: req.source_storage_id,
        destination_storage_id: req.destination_storage_id,
        source_path: req.source_path,
        destination_path: req.destination_path,
        settings,
        public: req.public.unwrap_or(false),
        archived: false,
        args: Vec::new(),
        labels,
        retry,
        image: req.image,
        user_id: who.user_id,
        project_id,
        created_at: now,
        updated_at: now,
    };
    let change = Change::new("mission.create", "mission", mission.mission_id).named(&mission.name);
    audit::note(who, change.in_project(project_id).with(&given));
    app.store.insert_mission(&mission).await?;
    Ok(mission)
}

/// Changes the fields given; the rest stay as they are. A mission moves its source storage only
/// while it holds no files there.
pub async fn update(app: &AppState, who: Principal, mission_id: Uuid, req: UpdateMission) -> DomainResult<Mission> {
    let mission = writable(app, who, mission_id).await?;
    let given = serde_json::to_value(&req).unwrap_or_default();
    let name = req.name.as_deref().map(checked_name).transpose()?;
    if let Some(d) = &req.description {
        check_description(d)?;
    }
    check_storage_path("source_path", &req.source_path)?;
    check_storage_path("destination_path", &req.destination_path)?;
    if let Some(settings) = &req.settings {
        check_settings(mission.mission_type_id, settings)?;
    }
    if let Some(args) = &req.args {
        check_args(args)?;
    }
    let labels = req.labels.map(checked_labels).transpose()?;
    let retry = checked_retry(req.retry)?;
    check_storage(app, mission.user_id, "source_storage_id", req.source_storage_id).await?;
    check_storage(app, mission.user_id, "destination_storage_id", req.destination_storage_id).await?;
    if let Some(project_id) = req.project_id {
        projects::ensure_may_run(app, who, project_id, "project_id").await?;
    }
    // A name or digest the caller sees, or "" for none.
    let image = match req.image {
        Some(image) if image.is_empty() => Some(None),
        Some(image) => {
            images::resolve(app, who, "image", &image).await?;
            Some(Some(image))
        }
        None => None,
    };
    let moves_source =
        req.source_storage_id.is_some_and(|id| id != mission.source_storage_id.unwrap_or(DEFAULT_CARGO_BAY_ID))
            || req.source_path.as_ref().is_some_and(|p| Some(p) != mission.source_path.as_ref());
    if moves_source {
        let files = app.store.mission_file_activity(mission.mission_id).await?;
        if files > 0 {
            return Err(DomainError::Conflict(format!(
                "the mission holds {files} file(s) in its current source storage; delete them before moving \
                 source_storage_id or source_path"
            )));
        }
    }
    let changes = MissionChanges {
        name,
        description: req.description,
        source_storage_id: req.source_storage_id,
        destination_storage_id: req.destination_storage_id,
        source_path: req.source_path,
        destination_path: req.destination_path,
        settings: req.settings,
        archived: req.archived,
        args: req.args,
        labels,
        retry,
        project_id: req.project_id,
        image,
    };
    let change = Change::new("mission.update", "mission", mission.mission_id).named(&mission.name);
    audit::note(who, change.in_project(mission.project_id).with(&given));
    let updated = app.store.update_mission(mission.mission_id, &changes, store::now()).await?;
    updated.ok_or_else(|| DomainError::not_found("mission", mission.mission_id))
}

/// Deletes a mission without unfinished jobs, with its files (those it indexed, in a cargo bay)
/// and its jobs' logs and results index; its jobs stay, with their history and usage, which
/// accounting and budgets count. Its rows go first: objects a failure leaves behind are logged
/// (and, in the default storage, removed by start-up recovery).
pub async fn delete(app: &AppState, who: Principal, mission_id: Uuid) -> DomainResult<()> {
    let mission = writable(app, who, mission_id).await?;
    let running = app.store.mission_unfinished_jobs(mission.mission_id).await?;
    if running > 0 {
        return Err(DomainError::Conflict(format!(
            "the mission has {running} jobs that have not ended; stop them first"
        )));
    }
    let place = app.bays.source(&app.store, &mission).await.ok();
    // In a cargo bay only the files the mission indexed are its own; note them before the rows go.
    let indexed = match &place {
        Some(place) if !place.owned_folder => app.store.mission_files(mission.mission_id).await?,
        _ => Vec::new(),
    };
    let change = Change::new("mission.delete", "mission", mission.mission_id).named(&mission.name);
    audit::note(who, change.in_project(mission.project_id));
    if !app.store.delete_mission(mission.mission_id).await? {
        return Err(DomainError::not_found("mission", mission.mission_id));
    }
    let result = match &place {
        Some(place) if !place.owned_folder => {
            let mut result = Ok(());
            for file in &indexed {
                let path = mission_api::paths::MissionPath::parse(&file.path).expect("stored paths are valid");
                result = result.and(place.delete(&path).await);
            }
            result
        }
        _ => app.bays.default_store().delete_mission(mission.mission_id).await,
    };
    if let Err(e) = result {
        tracing::warn!(mission = %mission.mission_id, error = %e, "could not delete the mission's files");
    }
    if let Err(e) = app.logs.delete_mission(mission.mission_id).await {
        tracing::warn!(mission = %mission.mission_id, error = %e, "could not delete the mission's job logs");
    }
    Ok(())
}

/// The user's mission named `name` in `project_id` that the jobs submitted without one run in
/// (a `command` mission with no files: batch jobs, TES tasks), made on first use with
/// `description`, one at a time per user and project, so two first submissions make one.
pub(super) async fn own_mission(
    app: &AppState,
    who: Principal,
    project_id: Uuid,
    name: &str,
    description: &str,
) -> DomainResult<Uuid> {
    // The lock table is keyed by a mission's id and a path; a user's id and this path name no
    // mission's file.
    let _one_at_a_time = app.path_locks.lock(who.user_id, &format!("own-mission/{project_id}/{name}")).await?;
    let filter = MissionFilter {
        user_ids: vec![who.user_id],
        project_ids: vec![project_id],
        names: vec![name.to_owned()],
        mission_type_ids: vec![catalogue::COMMAND],
        page: 1,
        items: 1,
        ..Default::default()
    };
    if let Some(mission) = app.store.list_missions(&filter).await?.0.into_iter().next() {
        return Ok(mission.mission_id);
    }
    let created = create(
        app,
        who,
        CreateMission {
            name: name.to_owned(),
            description: Some(description.to_owned()),
            mission_type_id: Some(catalogue::COMMAND),
            settings: Some([("command".to_owned(), "bash".to_owned())].into()),
            project_id: Some(project_id),
            ..Default::default()
        },
    )
    .await?;
    Ok(created.mission_id)
}

/// Arguments within [`MAX_ARGS`] and [`MAX_ARG_BYTES`], without NUL.
pub fn check_args(args: &[String]) -> DomainResult<()> {
    if args.len() > MAX_ARGS {
        return Err(DomainError::invalid("args", format!("at most {MAX_ARGS} arguments")));
    }
    for (i, arg) in args.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return Err(DomainError::invalid("args", format!("argument {i} is longer than {MAX_ARG_BYTES} bytes")));
        }
        if arg.contains('\0') {
            return Err(DomainError::invalid("args", format!("argument {i} contains NUL")));
        }
    }
    Ok(())
}

fn check_storage_path(field: &str, path: &Option<String>) -> DomainResult<()> {
    match path {
        Some(p) if p.len() > MAX_STORAGE_PATH_BYTES => {
            Err(DomainError::invalid(field, format!("at most {MAX_STORAGE_PATH_BYTES} bytes")))
        }
        _ => storage_segments(field, path.as_deref()).map(drop),
    }
}

/// A mission may name the default bay or a bay of its owner's; anything else is invalid, without
/// saying whether the bay exists.
async fn check_storage(app: &AppState, owner: Uuid, field: &str, id: Option<Uuid>) -> DomainResult<()> {
    let Some(id) = id.filter(|id| *id != DEFAULT_CARGO_BAY_ID) else { return Ok(()) };
    match app.store.cargo_bay(id).await? {
        Some(record) if record.bay.user_id == Some(owner) => Ok(()),
        _ => Err(DomainError::invalid(field, format!("the mission's owner has no cargo bay {id}"))),
    }
}

fn check_settings(mission_type_id: Option<Uuid>, settings: &BTreeMap<String, String>) -> DomainResult<()> {
    match mission_type_id {
        Some(id) => catalogue::find(id)
            .ok_or_else(|| DomainError::invalid("mission_type_id", format!("no mission type {id}")))?
            .check_settings(settings),
        None if settings.is_empty() => Ok(()),
        None => Err(DomainError::invalid("settings", "a mission without a mission_type_id takes no settings")),
    }
}
