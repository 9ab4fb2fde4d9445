//! Signing in to the console with a built-in account (a form: username and password, behind the
//! same brakes as `/activate`) and signing out.
//!
//! The sign-in form has its own CSRF guard, before any session exists: the page sets a random
//! value in a short-lived cookie and in the form, and a sign-in is taken only when the two match,
//! so another site cannot sign a browser in to an account of its choosing.

use std::net::SocketAddr;

use askama::Template;
use axum::Form;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{self, Viewer};
use super::{PageResult, assets, page};
use crate::AppState;
use crate::http::idp::routes::{PasswordRefused, password_sign_in};
use crate::services::idp::random_secret;

/// The cookie that carries the sign-in form's CSRF value.
pub(crate) const FORM_COOKIE: &str = "mission_sign_in";
/// How long a sign-in form may be left open.
const FORM_LIFETIME_SECS: i64 = 3600;

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignInPage<'a> {
    css: &'static str,
    /// The form's CSRF value; empty where the server has no built-in accounts.
    csrf: &'a str,
    username: &'a str,
    next: &'a str,
    error: &'a str,
    /// The external provider users sign in with, where there is one.
    external: Option<&'a str>,
}

#[derive(Deserialize)]
pub struct Next {
    pub next: Option<String>,
}

/// Where to go after signing in: a path on this server, or the missions page.
pub(super) fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(path) if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') => path,
        _ => "/missions",
    }
}

/// The sign-in page, with a fresh form.
pub(super) fn form_page(app: &AppState, status: StatusCode, username: &str, next: &str, error: &str) -> Response {
    if app.idp.is_none() {
        let external = Some(app.auth_url.as_str());
        let page = SignInPage { css: assets::CSS.address(), csrf: "", username, next, error, external };
        return super::page(status, &page);
    }
    let csrf = random_secret();
    let mut response =
        page(status, &SignInPage { css: assets::CSS.address(), csrf: &csrf, username, next, error, external: None });
    let cookie = session::set_cookie(app, FORM_COOKIE, &csrf, "/sign-in", FORM_LIFETIME_SECS);
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

/// `GET /sign-in?next=…`: the form (or, signed in already, straight on).
pub async fn form(
    State(app): State<AppState>,
    viewer: Result<Viewer, Response>,
    Query(query): Query<Next>,
) -> Response {
    let next = local_path(query.next.as_deref());
    if viewer.is_ok() {
        return Redirect::to(next).into_response();
    }
    form_page(&app, StatusCode::OK, "", next, "")
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
    next: Option<String>,
}

/// `POST /sign-in`: checks the password and starts a session.
pub async fn submit(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> PageResult {
    let next = local_path(form.next.as_deref());
    let username = form.username.trim();
    if app.idp.is_none() {
        return Ok(form_page(&app, StatusCode::NOT_FOUND, username, next, "This server has no built-in accounts."));
    }
    let expected = session::cookie(&headers, FORM_COOKIE).unwrap_or("");
    if !session::same_secret(&form.csrf, expected) {
        let error = "The sign-in form expired. Please sign in again.";
        return Ok(form_page(&app, StatusCode::FORBIDDEN, username, next, error));
    }
    if username.is_empty() || form.password.is_empty() {
        return Ok(form_page(&app, StatusCode::BAD_REQUEST, username, next, "Enter your username and password."));
    }
    let user = match password_sign_in(&app, peer.ip(), username, form.password).await {
        Ok(user) => user,
        Err(PasswordRefused::Wrong) => {
            return Ok(form_page(&app, StatusCode::UNAUTHORIZED, username, next, "Wrong username or password."));
        }
        Err(PasswordRefused::TooMany(seconds)) => {
            let error = format!("Too many failed attempts. Wait {seconds} seconds, then try again.");
            let mut response = form_page(&app, StatusCode::TOO_MANY_REQUESTS, username, next, &error);
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
            return Ok(response);
        }
        Err(PasswordRefused::Store(e)) => return Err(e.into()),
    };
    let cookie = session::start(&app, &user).await?;
    let mut response = Redirect::to(next).into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response.headers_mut().append(header::SET_COOKIE, session::set_cookie(&app, FORM_COOKIE, "", "/sign-in", 0));
    Ok(response)
}

/// A form that carries nothing but the session's CSRF token (sign out, stop a job).
#[derive(Deserialize)]
pub struct CsrfForm {
    /// The session's token.
    #[serde(default)]
    pub csrf: String,
}

/// `POST /sign-out`: ends the session on the server, then clears the cookie.
pub async fn sign_out(State(app): State<AppState>, viewer: Viewer, Form(form): Form<CsrfForm>) -> PageResult {
    viewer.check_csrf(&form.csrf)?;
    let cookie = session::end(&app, &viewer).await?;
    let mut response = Redirect::to("/sign-in").into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(local_path(Some("/missions/42?page=2")), "/missions/42?page=2");
        assert_eq!(local_path(Some("//evil.example/")), "/missions");
        assert_eq!(local_path(Some("/\\evil.example/")), "/missions");
        assert_eq!(local_path(Some("https://evil.example/")), "/missions");
        assert_eq!(local_path(None), "/missions");
    }
}
