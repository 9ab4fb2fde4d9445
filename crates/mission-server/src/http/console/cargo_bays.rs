//! The cargo bays page: the default bay and the viewer's own (every bay, for admins), a form that
//! adds one, and deleting one. Credentials are written, never shown back: a refused form comes
//! back with every field as it was except the secrets, which must be typed again.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use mission_api::{CargoBay, CargoBayKind, CreateCargoBay, DEFAULT_CARGO_BAY_ID};
use serde::Deserialize;

use super::session::Viewer;
use super::sign_in::CsrfForm;
use super::{Frame, PageResult, page, refusal};
use crate::AppState;
use crate::domain::cargo_bays;
use crate::http::routes::extract::parse_id;

#[derive(Template)]
#[template(path = "console/cargo_bays.html")]
struct CargoBaysPage {
    frame: Frame,
    bays: Vec<CargoBay>,
    /// The form as it was sent, secrets left out.
    sent: BayForm,
    error: String,
}

/// The add-a-bay form.
#[derive(Deserialize, Default)]
pub struct BayForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    bucket: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    endpoint: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    access_key_id: String,
    #[serde(default)]
    secret_access_key: String,
    #[serde(default)]
    session_token: String,
    #[serde(default)]
    path: String,
}

impl BayForm {
    /// The API request: the fields of the chosen kind only (the form shows both kinds' fields).
    fn request(&self) -> CreateCargoBay {
        let given = |value: &str| Some(value.trim().to_owned()).filter(|v| !v.is_empty());
        if self.kind == "local" {
            return CreateCargoBay {
                path: given(&self.path),
                ..CreateCargoBay::new(self.name.trim(), CargoBayKind::Local)
            };
        }
        CreateCargoBay {
            bucket: given(&self.bucket),
            prefix: given(&self.prefix),
            endpoint: given(&self.endpoint),
            region: given(&self.region),
            access_key_id: given(&self.access_key_id),
            secret_access_key: given(&self.secret_access_key),
            session_token: given(&self.session_token),
            ..CreateCargoBay::new(self.name.trim(), CargoBayKind::S3)
        }
    }

    /// The form to show again: everything but the secrets.
    fn without_secrets(self) -> Self {
        Self { csrf: String::new(), secret_access_key: String::new(), session_token: String::new(), ..self }
    }
}

async fn bays_page(
    app: &AppState,
    viewer: &Viewer,
    sent: BayForm,
    error: String,
) -> Result<CargoBaysPage, super::PageError> {
    let bays = cargo_bays::list(app, viewer.principal()).await?;
    Ok(CargoBaysPage { frame: Frame::new(viewer, "cargo-bays"), bays, sent, error })
}

/// `GET /cargo-bays`: the bays and the form.
pub async fn list(State(app): State<AppState>, viewer: Viewer) -> PageResult {
    let sent = BayForm { kind: "s3".into(), ..BayForm::default() };
    Ok(page(StatusCode::OK, &bays_page(&app, &viewer, sent, String::new()).await?))
}

/// `POST /cargo-bays`: adds a bay once the server has checked that it answers.
pub async fn create(State(app): State<AppState>, viewer: Viewer, Form(sent): Form<BayForm>) -> PageResult {
    viewer.check_csrf(&sent.csrf)?;
    match cargo_bays::create(&app, viewer.principal(), sent.request()).await {
        Ok(_) => Ok(Redirect::to("/cargo-bays").into_response()),
        Err(e) => {
            let e = refusal(e)?;
            Ok(page(e.status(), &bays_page(&app, &viewer, sent.without_secrets(), e.problem().detail).await?))
        }
    }
}

/// `POST /cargo-bays/{id}/delete`: deletes a bay no mission uses.
pub async fn delete(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    cargo_bays::delete(&app, viewer.principal(), parse_id("storage_id", &id)?).await?;
    Ok(Redirect::to("/cargo-bays").into_response())
}

/// Whether a bay is the server's own (which cannot be deleted).
fn is_default(bay: &CargoBay) -> bool {
    bay.storage_id == DEFAULT_CARGO_BAY_ID
}
