//! The admins' users page: every account, paged; adding a built-in account under the same rules
//! as `mission server add-user` (its generated password shown once, on the answer); and making a
//! user an admin or not. Admins only: anyone else gets a 403 page.

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;

use super::session::Viewer;
use super::{Frame, PageError, PageResult, page};
use crate::AppState;
use crate::domain::users::{AccountError, add_user};
use crate::http::error::ApiError;
use crate::http::routes::extract::parse_id;
use mission_store::UserRecord;

/// Users per page.
const PAGE_SIZE: u32 = 50;

#[derive(Template)]
#[template(path = "console/users.html")]
struct UsersPage {
    frame: Frame,
    users: Vec<UserRecord>,
    /// Whether the server has built-in accounts to add (not with an external provider).
    built_in: bool,
    /// The account just added and its generated password, shown this once.
    added: Option<(String, Option<String>)>,
    error: String,
    username: String,
    page: u32,
    previous: Option<String>,
    next: Option<String>,
}

fn admin_only(viewer: &Viewer) -> Result<(), PageError> {
    if viewer.user.admin { Ok(()) } else { Err(ApiError::forbidden("only admins may manage users").into()) }
}

async fn users_page(app: &AppState, viewer: &Viewer, page_number: u32) -> Result<UsersPage, PageError> {
    let page_number = page_number.max(1);
    let (users, more) = app.store.users(page_number, PAGE_SIZE).await?;
    let link = |n: u32| format!("/admin/users?page={n}");
    Ok(UsersPage {
        frame: Frame::new(viewer, "users"),
        users,
        built_in: app.idp.is_some(),
        added: None,
        error: String::new(),
        username: String::new(),
        page: page_number,
        previous: (page_number > 1).then(|| link(page_number - 1)),
        next: more.then(|| link(page_number + 1)),
    })
}

#[derive(Deserialize)]
pub struct PageQuery {
    page: Option<u32>,
}

/// `GET /admin/users`: the accounts, by username.
pub async fn list(State(app): State<AppState>, viewer: Viewer, Query(query): Query<PageQuery>) -> PageResult {
    admin_only(&viewer)?;
    Ok(page(StatusCode::OK, &users_page(&app, &viewer, query.page.unwrap_or(1)).await?))
}

#[derive(Deserialize)]
pub struct AddForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    username: String,
    /// Empty: one is generated and shown once.
    #[serde(default)]
    password: String,
    #[serde(default)]
    admin: Option<String>,
}

/// `POST /admin/users`: adds a built-in account.
pub async fn add(State(app): State<AppState>, viewer: Viewer, Form(form): Form<AddForm>) -> PageResult {
    admin_only(&viewer)?;
    viewer.check_csrf(&form.csrf)?;
    if app.idp.is_none() {
        let mut answer = users_page(&app, &viewer, 1).await?;
        answer.error =
            "This server signs people in through an external provider: its users appear when they first sign in."
                .into();
        return Ok(page(StatusCode::CONFLICT, &answer));
    }
    let username = form.username.trim();
    let password = Some(form.password.as_str()).filter(|p| !p.is_empty());
    let (status, added) =
        match add_user(&app.store, username, password, form.admin.as_deref() == Some("on"), Some(viewer.principal()))
            .await
        {
            Ok(account) => (StatusCode::CREATED, Ok(account)),
            Err(AccountError::Store(mission_store::StoreError::Conflict(detail))) => {
                (StatusCode::CONFLICT, Err(detail))
            }
            Err(e @ (AccountError::InvalidUsername(_) | AccountError::WeakPassword)) => {
                (StatusCode::BAD_REQUEST, Err(e.to_string()))
            }
            Err(AccountError::Store(e)) => return Err(e.into()),
            Err(e @ AccountError::Io(..)) => return Err(ApiError::internal(e).into()),
        };
    let mut answer = users_page(&app, &viewer, 1).await?;
    match added {
        Ok(account) => answer.added = Some((account.user.username, account.generated_password)),
        Err(error) => {
            answer.error = error;
            answer.username = username.to_owned();
        }
    }
    Ok(page(status, &answer))
}

#[derive(Deserialize)]
pub struct AdminForm {
    #[serde(default)]
    csrf: String,
    admin: bool,
}

/// `POST /admin/users/{id}/admin`: makes a user an admin, or not. Admins cannot change their
/// own flag, so the console never leaves a server without the admin who was using it.
pub async fn set_admin(
    State(app): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<AdminForm>,
) -> PageResult {
    admin_only(&viewer)?;
    viewer.check_csrf(&form.csrf)?;
    let user_id = parse_id("user_id", &id)?;
    if user_id == viewer.user.user_id {
        return Err(ApiError::conflict("you cannot change whether you yourself are an admin; ask another admin").into());
    }
    let change = crate::domain::audit::Change::new("user.admin.set", "user", user_id);
    crate::domain::audit::note(viewer.principal(), change.with(serde_json::json!({ "admin": form.admin })));
    if !app.store.set_user_admin(user_id, form.admin).await? {
        return Err(ApiError::not_found("user", user_id).into());
    }
    Ok(Redirect::to("/admin/users").into_response())
}
