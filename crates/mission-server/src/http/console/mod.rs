//! The web console at `/`: pages rendered by the server from templates compiled into the binary
//! (askama, which escapes every value it writes into HTML), one stylesheet and one script served
//! from the binary under names that change with their content (`assets`), and cookie sessions
//! ([`session`]).
//!
//! Pages call the domain layer (`crate::domain`: projects, missions) as the API does, or, for the
//! resources not moved there yet (jobs, stations, cargo bays), the same handlers as `/api/v1`,
//! with the viewer as the caller, so they follow the API's ownership rules and limits; the script calls `/api/v1` itself (uploads, live logs),
//! authenticated by the session cookie and its CSRF token. Every page is sent with a strict
//! Content-Security-Policy (scripts and styles only from this server, no inline script, no
//! framing).

mod assets;
mod cargo_bays;
mod charts;
mod jobs;
mod mission_forms;
mod missions;
mod oauth;
mod projects;
mod run;
pub mod session;
mod sign_in;
mod stations;
mod users;

use askama::Template;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::AppState;
use crate::http::error::ApiError;
use session::Viewer;

/// The console's pages and assets.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/sign-in", get(sign_in::form).post(sign_in::submit))
        .route("/sign-in/start", get(oauth::start))
        .route("/sign-in/callback", get(oauth::callback))
        .route("/sign-out", post(sign_in::sign_out))
        .route("/missions", get(missions::list))
        .route("/missions/new", get(mission_forms::new_form).post(mission_forms::create))
        .route("/missions/{id}", get(missions::show))
        .route("/missions/{id}/edit", get(mission_forms::edit_form).post(mission_forms::update))
        .route("/missions/{id}/archive", post(mission_forms::archive))
        .route("/missions/{id}/delete", post(mission_forms::delete))
        .route("/missions/{id}/files/delete", post(mission_forms::delete_file))
        .route("/missions/{id}/run", get(run::form).post(run::submit))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(jobs::show))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/again", post(jobs::again))
        .route("/jobs/{id}/terminal", get(jobs::terminal))
        .route("/projects", get(projects::list))
        .route("/projects/{id}", get(projects::show))
        .route("/stations", get(stations::list))
        .route("/stations/{id}", get(stations::show))
        .route("/stations/{id}/lzs", post(stations::register))
        .route("/stations/{id}/lzs/{lz}/remove", post(stations::remove_lz))
        .route("/stations/{id}/members", post(stations::add_member))
        .route("/stations/{id}/members/remove", post(stations::remove_member))
        .route("/cargo-bays", get(cargo_bays::list).post(cargo_bays::create))
        .route("/cargo-bays/{id}/delete", post(cargo_bays::delete))
        .route("/admin/users", get(users::list).post(users::add))
        .route("/admin/users/{id}/admin", post(users::set_admin))
        .route("/assets/{name}", get(assets::serve))
        .layer(axum::middleware::from_fn(protect))
}

/// The home page: the viewer's missions.
async fn home(viewer: Result<Viewer, Response>) -> Response {
    match viewer {
        Ok(_) => Redirect::to("/missions").into_response(),
        Err(sign_in_first) => sign_in_first,
    }
}

/// What every console response carries: the Content-Security-Policy (with `frame-ancestors
/// 'none'`, so no other site can frame a page to trick clicks), no MIME sniffing, no referrer
/// beyond this server, and no caching of pages (which hold a user's data).
async fn protect(request: Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // A page may ask for a policy of its own (the terminal's, whose library writes styles).
    headers.entry(header::CONTENT_SECURITY_POLICY).or_insert(HeaderValue::from_static(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// What the base template shows around every signed-in page.
pub struct Frame {
    /// The signed-in user.
    pub user_id: uuid::Uuid,
    /// The signed-in user's name.
    pub username: String,
    /// Whether the nav shows the admin pages.
    pub admin: bool,
    /// The session's CSRF token, for the sign-out form and the script's requests.
    pub csrf: String,
    /// Which nav entry is the current page's.
    pub section: &'static str,
    /// The stylesheet's address.
    pub css: &'static str,
    /// The script's address.
    pub js: &'static str,
}

impl Frame {
    /// The frame of a page of `section` for `viewer`.
    pub fn new(viewer: &Viewer, section: &'static str) -> Self {
        Self {
            user_id: viewer.user.user_id,
            username: viewer.user.username.clone(),
            admin: viewer.user.admin,
            csrf: viewer.csrf.clone(),
            section,
            css: assets::CSS.address(),
            js: assets::JS.address(),
        }
    }
}

/// A rendered page as a response with `status`.
pub fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering a console page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered").into_response()
        }
    }
}

/// An API error shown as a page: the status and the problem's detail, in words.
pub struct PageError(ApiError);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<crate::domain::DomainError> for PageError {
    fn from(e: crate::domain::DomainError) -> Self {
        Self(e.into())
    }
}

impl From<mission_store::StoreError> for PageError {
    fn from(e: mission_store::StoreError) -> Self {
        Self(e.into())
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    detail: &'a str,
    css: &'static str,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let detail = self.0.problem().detail;
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::FORBIDDEN => "Not allowed",
            s if s.is_client_error() => "That did not work",
            _ => "Something went wrong on the server",
        };
        page(status, &ErrorPage { title, detail: &detail, css: assets::CSS.address() })
    }
}

/// An API error a form shows on itself (a 4xx: what was sent was refused), or, for a fault of
/// the server, the error page.
pub fn refusal(error: impl Into<ApiError>) -> Result<ApiError, PageError> {
    let error = error.into();
    if error.status().is_client_error() { Ok(error) } else { Err(error.into()) }
}

/// What console handlers answer.
pub type PageResult = Result<Response, PageError>;

/// The address under `base` (an API path ending in `/files` or `/results`) of the file at
/// `relative_path`, each segment percent-encoded.
pub fn file_href(base: &str, relative_path: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_');
    let segments: Vec<String> =
        relative_path.split('/').map(|s| percent_encoding::utf8_percent_encode(s, KEEP).to_string()).collect();
    format!("{base}/{}", segments.join("/"))
}

/// Every cookie Mission sets: the console's and a session's own on its origin. The sessions'
/// proxy keeps every cookie named like these (`mission…`) from the apps, both ways.
pub const OWN_COOKIES: [&str; 4] =
    [session::COOKIE, oauth::FLOW_COOKIE, sign_in::FORM_COOKIE, crate::http::sessions::APP_COOKIE];

/// `value` encoded for a URL's query.
pub fn query_value(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
