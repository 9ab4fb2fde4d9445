//! The forms that change missions: create one from a mission type (its settings drawn from the
//! type, checked by the same domain functions as `POST /api/v1/missions`), edit one, archive,
//! delete, and delete one of its files.
//!
//! A refused form comes back filled in as it was sent, with the API's reason above it and the
//! field it names marked, so nothing typed is lost.

use std::collections::BTreeMap;

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use mission_api::{CreateMission, UpdateMission};
use serde::Deserialize;
use uuid::Uuid;

use super::session::Viewer;
use super::sign_in::CsrfForm;
use super::{Frame, PageResult, page, refusal};
use crate::AppState;
use crate::domain::catalogue::{self, FieldInput, MissionTypeDef};
use crate::domain::{files, missions};
use crate::http::error::{ApiError, ApiResult};
use crate::http::routes::extract::parse_id;
use crate::http::routes::files::parse_path;

/// A mission type offered by the new-mission page.
struct TypeChoice {
    id: Uuid,
    name: String,
    description: String,
}

/// A setting's field and what it holds.
struct FieldView {
    /// The form field's name: `settings.<setting>`, as the API's problems name it.
    key: String,
    name: &'static str,
    label: &'static str,
    default: Option<&'static str>,
    input: FieldInput,
    value: String,
}

#[derive(Template)]
#[template(path = "console/mission_form.html")]
struct MissionFormPage {
    frame: Frame,
    /// The mission being edited; `None` on the new-mission page.
    editing: Option<Uuid>,
    types: Vec<TypeChoice>,
    chosen: Option<TypeChoice>,
    name: String,
    description: String,
    public: bool,
    args: String,
    fields: Vec<FieldView>,
    error: String,
    /// The field the error names (`name`, `settings.threads`, …), marked invalid.
    error_field: String,
}

impl MissionFormPage {
    fn new(viewer: &Viewer, editing: Option<Uuid>, mission_type: Option<&MissionTypeDef>) -> Self {
        Self {
            frame: Frame::new(viewer, "missions"),
            editing,
            types: Vec::new(),
            chosen: mission_type.map(choice),
            name: String::new(),
            description: String::new(),
            public: false,
            args: String::new(),
            fields: mission_type.map(|t| fields(t, &BTreeMap::new())).unwrap_or_default(),
            error: String::new(),
            error_field: String::new(),
        }
    }

    /// The form again, as `sent`, saying why `error` refused it.
    fn refused(mut self, sent: &SentForm, error: &ApiError) -> Response {
        self.name = sent.name.clone();
        self.description = sent.description.clone();
        self.public = sent.public;
        self.args = sent.args_text.clone();
        for field in &mut self.fields {
            field.value = sent.settings.get(field.name).cloned().unwrap_or_default();
        }
        let problem = error.problem();
        self.error = problem.detail;
        self.error_field = problem.field.unwrap_or_default();
        page(error.status(), &self)
    }
}

fn choice(t: &MissionTypeDef) -> TypeChoice {
    let summary = t.summary();
    TypeChoice {
        id: summary.id,
        name: format!("{} {}", summary.name, summary.version),
        description: summary.description,
    }
}

fn fields(t: &MissionTypeDef, values: &BTreeMap<String, String>) -> Vec<FieldView> {
    t.form_fields()
        .into_iter()
        .map(|f| FieldView {
            key: format!("settings.{}", f.name),
            name: f.name,
            label: f.label,
            default: f.default,
            input: f.input,
            value: values.get(f.name).cloned().unwrap_or_default(),
        })
        .collect()
}

/// The mission type a form names, as a 400 when it names none the catalogue has.
fn mission_type(raw: &str) -> ApiResult<&'static MissionTypeDef> {
    let id = crate::http::routes::extract::parse_id("mission_type_id", raw)?;
    catalogue::find(id).ok_or_else(|| ApiError::invalid_field("mission_type_id", format!("no mission type {id}")))
}

/// What a mission form sent.
#[derive(Default)]
struct SentForm {
    csrf: String,
    mission_type: String,
    name: String,
    description: String,
    public: bool,
    args_text: String,
    /// The settings filled in; a field left empty is left out (the type's default applies).
    settings: BTreeMap<String, String>,
}

impl SentForm {
    fn parse(pairs: Vec<(String, String)>) -> Self {
        let mut sent = Self::default();
        for (key, value) in pairs {
            match key.as_str() {
                "csrf" => sent.csrf = value,
                "type" => sent.mission_type = value,
                "name" => sent.name = value,
                "description" => sent.description = value.replace("\r\n", "\n"),
                "public" => sent.public = value == "on",
                "args" => sent.args_text = value,
                _ => {
                    if let Some(setting) = key.strip_prefix("settings.")
                        && !value.trim().is_empty()
                    {
                        sent.settings.insert(setting.to_owned(), value.trim().to_owned());
                    }
                }
            }
        }
        sent
    }

    /// The arguments: one a line, blank lines skipped.
    fn args(&self) -> Vec<String> {
        self.args_text.lines().map(|l| l.trim_end_matches('\r')).filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }
}

#[derive(Deserialize)]
pub struct NewQuery {
    #[serde(rename = "type")]
    mission_type: Option<String>,
}

/// `GET /missions/new?type=…`: the mission types to choose from, and the chosen type's form.
pub async fn new_form(viewer: Viewer, Query(query): Query<NewQuery>) -> PageResult {
    let chosen = query.mission_type.as_deref().filter(|t| !t.is_empty()).map(mission_type).transpose()?;
    let mut form = MissionFormPage::new(&viewer, None, chosen);
    form.types = catalogue::all().iter().map(choice).collect();
    Ok(page(StatusCode::OK, &form))
}

/// `POST /missions/new`: creates the mission (and sets its arguments), then shows it.
pub async fn create(
    State(app): State<AppState>,
    viewer: Viewer,
    Form(pairs): Form<Vec<(String, String)>>,
) -> PageResult {
    let sent = SentForm::parse(pairs);
    viewer.check_csrf(&sent.csrf)?;
    let chosen = mission_type(&sent.mission_type)?;
    let mut form = MissionFormPage::new(&viewer, None, Some(chosen));
    form.types = catalogue::all().iter().map(choice).collect();
    let args = sent.args();
    if let Err(e) = missions::check_args(&args) {
        return Ok(form.refused(&sent, &e.into()));
    }
    let request = CreateMission {
        name: sent.name.clone(),
        description: Some(sent.description.clone()),
        mission_type_id: Some(chosen.id()),
        settings: Some(sent.settings.clone()),
        public: Some(sent.public),
        ..Default::default()
    };
    let mission = match missions::create(&app, viewer.principal(), request).await {
        Ok(mission) => mission,
        Err(e) => return Ok(form.refused(&sent, &refusal(e)?)),
    };
    if !args.is_empty() {
        let update = UpdateMission { args: Some(args), ..Default::default() };
        missions::update(&app, viewer.principal(), mission.mission_id, update).await?;
    }
    Ok(Redirect::to(&format!("/missions/{}", mission.mission_id)).into_response())
}

/// `GET /missions/{id}/edit`: the mission's name, description, settings and arguments as a form.
pub async fn edit_form(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    let mission = missions::writable(&app, viewer.principal(), parse_id("mission_id", &id)?).await?;
    let mission_type = mission.mission_type_id.and_then(catalogue::find);
    let mut form = MissionFormPage::new(&viewer, Some(mission.mission_id), mission_type);
    form.fields = mission_type.map(|t| fields(t, &mission.settings)).unwrap_or_default();
    form.name = mission.name;
    form.description = mission.description;
    form.public = mission.public;
    form.args = mission.args.join("\n");
    Ok(page(StatusCode::OK, &form))
}

/// `POST /missions/{id}/edit`: saves the form, then shows the mission.
pub async fn update(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> PageResult {
    let sent = SentForm::parse(pairs);
    viewer.check_csrf(&sent.csrf)?;
    let mission = missions::writable(&app, viewer.principal(), parse_id("mission_id", &id)?).await?;
    let mission_type = mission.mission_type_id.and_then(catalogue::find);
    let form = MissionFormPage::new(&viewer, Some(mission.mission_id), mission_type);
    let sent = SentForm { public: mission.public, ..sent };
    let args = sent.args();
    let request = UpdateMission {
        name: Some(sent.name.clone()),
        description: Some(sent.description.clone()),
        settings: mission_type.is_some().then(|| sent.settings.clone()),
        args: (args != mission.args).then_some(args),
        ..Default::default()
    };
    if let Err(e) = missions::update(&app, viewer.principal(), mission.mission_id, request).await {
        return Ok(form.refused(&sent, &refusal(e)?));
    }
    Ok(Redirect::to(&format!("/missions/{}", mission.mission_id)).into_response())
}

#[derive(Deserialize)]
pub struct ArchiveForm {
    #[serde(default)]
    csrf: String,
    /// `true` to archive, `false` to bring back.
    archived: bool,
}

/// `POST /missions/{id}/archive`: archives the mission or brings it back.
pub async fn archive(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<ArchiveForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let request = UpdateMission { archived: Some(form.archived), ..Default::default() };
    let mission = missions::update(&app, viewer.principal(), parse_id("mission_id", &id)?, request).await?;
    Ok(Redirect::to(&format!("/missions/{}", mission.mission_id)).into_response())
}

/// `POST /missions/{id}/delete`: deletes the mission and its files, then lists the missions.
pub async fn delete(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    missions::delete(&app, viewer.principal(), parse_id("mission_id", &id)?).await?;
    Ok(Redirect::to("/missions").into_response())
}

#[derive(Deserialize)]
pub struct FileForm {
    #[serde(default)]
    csrf: String,
    path: String,
}

/// `POST /missions/{id}/files/delete`: deletes one file of the mission, then shows the mission.
pub async fn delete_file(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<FileForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let (mission_id, path) = (parse_id("mission_id", &id)?, parse_path(&form.path)?);
    files::delete(&app, viewer.principal(), mission_id, &path).await?;
    Ok(Redirect::to(&format!("/missions/{id}#files-heading")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_sent_form_keeps_filled_settings_and_one_argument_a_line() {
        let sent = SentForm::parse(pairs(&[
            ("name", "Run"),
            ("settings.filename", " run.sh "),
            ("settings.shell", ""),
            ("public", "on"),
            ("args", "--fast\r\n\r\n two words\n"),
        ]));
        assert_eq!(sent.settings, BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())]));
        assert!(sent.public);
        assert_eq!(sent.args(), ["--fast", " two words"]);
    }
}
