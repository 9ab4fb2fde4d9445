//! Missions ("projects"), their files and the mission types ("projecttypes") for the
//! `galileo-sdk` client.
//!
//! Its quirks, served as it expects:
//! - `POST /projects` merges the settings into the top level of the body, while `PUT` nests
//!   them under `settings`; top-level keys that are not mission fields are settings.
//! - `PUT` sends `null` for every field it leaves alone (and a redundant `id`); `settings.arg`
//!   is the mission's argument list (`update_mission_args`).
//! - `GET /projects` without `archived` means unarchived missions: the client never sends a
//!   false flag.
//! - An upload is one raw `POST` per file, its path in a `filename` header (latin-1, `\` on
//!   Windows); a deletion names the path in `?filename=`.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use mission_api::{CreateMission, FileListing, Mission, UpdateMission};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::super::extract::{ApiJson, QueryPairs, parse_id};
use super::super::files::{announced, parse_path};
use super::ok;
use crate::AppState;
use crate::domain::Principal;
use crate::domain::catalogue;
use crate::domain::{files, missions};
use crate::http::error::{ApiError, ApiResult};

/// A mission as the client's mapper reads it (`id` is its `mission_id`).
pub(super) fn project(mission: &Mission) -> Value {
    let type_name = mission.mission_type_id.and_then(catalogue::find).map(|t| t.summary().name);
    serde_json::json!({
        "id": mission.mission_id,
        "name": mission.name,
        "description": mission.description,
        "source_storage_id": mission.source_storage_id,
        "source_path": mission.source_path,
        "destination_storage_id": mission.destination_storage_id,
        "destination_path": mission.destination_path,
        "user_id": mission.user_id,
        "organization_id": null,
        "creation_timestamp": mission.created_at,
        "updated_timestamp": mission.updated_at,
        "mission_type_id": mission.mission_type_id,
        "mission_type_name": type_name,
        "settings": mission.settings,
        "public": mission.public,
        "archived": mission.archived,
    })
}

/// `GET /projects`: `ids`, `names`, `user_ids`, `mission_type_ids`, `archived`, `page`, `items`,
/// as `GET /api/v1/missions` takes them, but unarchived missions only unless `archived=true`.
pub async fn list(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(mut query): QueryPairs,
) -> ApiResult<Response> {
    if !query.iter().any(|(key, _)| key == "archived") {
        query.push(("archived".into(), "false".into()));
    }
    let filter = super::super::missions::mission_filter(&query)?;
    let (found, _) = missions::list(&app, who, filter).await?;
    let projects: Vec<Value> = found.iter().map(project).collect();
    Ok(ok(serde_json::json!({ "projects": projects })))
}

/// A setting value as this service keeps it: a string (numbers and booleans as written);
/// `null` for "not set".
fn setting_value(name: &str, value: &Value) -> ApiResult<Option<String>> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        _ => Err(ApiError::invalid_setting(name, "expected a string, number or boolean")),
    }
}

/// A mission's settings and, when given, its arguments.
type SettingsAndArgs = (BTreeMap<String, String>, Option<Vec<String>>);

/// Settings from a galileo object; `arg` (the argument list) apart.
fn settings_of(object: Map<String, Value>) -> ApiResult<SettingsAndArgs> {
    let mut settings = BTreeMap::new();
    let mut args = None;
    for (name, value) in object {
        if name == "arg" {
            let list: Vec<String> = serde_json::from_value(value)
                .map_err(|_| ApiError::invalid_field("settings.arg", "expected a list of strings"))?;
            args = Some(list);
        } else if let Some(value) = setting_value(&name, &value)? {
            settings.insert(name, value);
        }
    }
    Ok((settings, args))
}

/// An optional string field of a galileo body (`null` and absent alike).
fn text(body: &mut Map<String, Value>, field: &str) -> ApiResult<Option<String>> {
    match body.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid_field(field, "expected a string")),
    }
}

/// An optional id field of a galileo body.
fn id(body: &mut Map<String, Value>, field: &str) -> ApiResult<Option<Uuid>> {
    text(body, field)?.map(|raw| parse_id(field, &raw)).transpose()
}

/// `POST /projects`: the mission fields, and every other top-level key a setting.
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(mut body): ApiJson<Map<String, Value>>,
) -> ApiResult<Response> {
    let name = text(&mut body, "name")?.ok_or_else(|| ApiError::invalid_field("name", "is required"))?;
    let public = match body.remove("public") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(b),
        Some(_) => return Err(ApiError::invalid_field("public", "expected true or false")),
    };
    let mut request = CreateMission {
        name,
        description: text(&mut body, "description")?,
        mission_type_id: id(&mut body, "mission_type_id")?,
        source_storage_id: id(&mut body, "source_storage_id")?,
        destination_storage_id: id(&mut body, "destination_storage_id")?,
        source_path: text(&mut body, "source_path")?,
        destination_path: text(&mut body, "destination_path")?,
        settings: None,
        public,
        labels: Default::default(),
        retry: None,
        image: None,
        project_id: None,
    };
    let nested = match body.remove("settings") {
        Some(Value::Object(nested)) => nested,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(ApiError::invalid_field("settings", "expected an object")),
    };
    body.extend(nested);
    let (settings, args) = settings_of(body)?;
    request.settings = Some(settings);
    let mission = missions::create(&app, who, request).await?;
    let mission = match args {
        Some(args) => {
            let update = UpdateMission { args: Some(args), ..Default::default() };
            missions::update(&app, who, mission.mission_id, update).await?
        }
        None => mission,
    };
    Ok(ok(serde_json::json!({ "project": project(&mission) })))
}

/// `PUT /projects/{id}`: the fields given (not `null`) change; `settings` replaces the
/// settings, its `arg` the arguments; `public` cannot change.
pub async fn update(
    State(app): State<AppState>,
    who: Principal,
    Path(raw_id): Path<String>,
    ApiJson(mut body): ApiJson<Map<String, Value>>,
) -> ApiResult<Response> {
    let mission_id = parse_id("mission_id", &raw_id)?;
    if let Some(sent) = id(&mut body, "id")?
        && sent != mission_id
    {
        return Err(ApiError::invalid_field("id", format!("is {sent}, but the path names mission {mission_id}")));
    }
    let (settings, args) = match body.remove("settings") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(object)) => {
            let (settings, args) = settings_of(object)?;
            (Some(settings), args)
        }
        Some(_) => return Err(ApiError::invalid_field("settings", "expected an object")),
    };
    let changes = UpdateMission {
        name: text(&mut body, "name")?,
        description: text(&mut body, "description")?,
        source_storage_id: id(&mut body, "source_storage_id")?,
        destination_storage_id: id(&mut body, "destination_storage_id")?,
        source_path: text(&mut body, "source_path")?,
        destination_path: text(&mut body, "destination_path")?,
        settings,
        archived: None,
        labels: None,
        retry: None,
        project_id: None,
        image: None,
        args,
    };
    let mission = missions::update(&app, who, mission_id, changes).await?;
    Ok(ok(serde_json::json!({ "project": project(&mission) })))
}

/// `DELETE /projects/{id}`.
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    missions::delete(&app, who, parse_id("mission_id", &id)?).await?;
    Ok(ok(serde_json::json!({ "deleted": id })))
}

/// A file as the client reads it: `filename` and `path` (its folder) as in `/api/v1`.
pub(super) fn file(listing: &FileListing) -> Value {
    serde_json::json!({
        "filename": listing.filename,
        "path": listing.path,
        "file_size": listing.file_size,
        "modification_date": listing.modified_at,
        "creation_date": listing.modified_at,
        "nonce": null,
    })
}

/// `GET /projects/{id}/files`.
pub async fn files(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let listing = files::list(&app, who, parse_id("mission_id", &id)?).await?;
    Ok(ok(serde_json::json!({ "files": listing.iter().map(file).collect::<Vec<_>>() })))
}

/// `POST /projects/{id}/files`: the body is the file, the `filename` header its path (latin-1,
/// as the client's HTTP library encodes it; `\` separators become `/`).
pub async fn upload(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let raw =
        headers.get("filename").ok_or_else(|| ApiError::invalid("the file's path is missing (header filename)"))?;
    let path: String = raw.as_bytes().iter().map(|&b| char::from(b)).collect();
    let path = path.replace('\\', "/");
    let (mission_id, parsed) = (parse_id("mission_id", &id)?, parse_path(&path)?);
    files::upload(&app, who, mission_id, &parsed, announced(&headers), body.into_data_stream()).await?;
    Ok(ok(serde_json::json!({ "uploaded": path })))
}

/// `DELETE /projects/{id}/files?filename=PATH`.
pub async fn delete_file(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Response> {
    let path = query
        .into_iter()
        .find_map(|(key, value)| (key == "filename").then_some(value))
        .ok_or_else(|| ApiError::invalid_field("filename", "is required: the path of the file to delete"))?;
    files::delete(&app, who, parse_id("mission_id", &id)?, &parse_path(&path)?).await?;
    Ok(ok(serde_json::json!({ "deleted": path })))
}

/// `GET /projecttypes/summaries`.
pub async fn type_summaries(_: Principal) -> Response {
    let summaries: Vec<_> = catalogue::all().iter().map(catalogue::MissionTypeDef::summary).collect();
    ok(serde_json::json!({ "project_types": summaries }))
}

/// `GET /projecttypes?ids=…`: the types named, each with the `wizard_spec` the client reads its
/// settings info from.
pub async fn types(_: Principal, QueryPairs(query): QueryPairs) -> ApiResult<Response> {
    let mut found = Vec::new();
    for (key, value) in &query {
        match key.as_str() {
            "ids" => {
                let id = parse_id(key, value)?;
                let Some(def) = catalogue::find(id) else { continue };
                let mut detail = serde_json::to_value(def.detail()).expect("mission types serialise");
                detail["wizard_spec"] = def.wizard_spec();
                found.push(detail);
            }
            "page" | "items" => {}
            other => return Err(ApiError::invalid(format!("unknown query parameter {other:?}; use ids"))),
        }
    }
    Ok(ok(serde_json::json!({ "projecttypes": found })))
}
