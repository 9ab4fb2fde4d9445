//! The console's sign-in sessions: a cookie holding a random secret, whose sha256 names a row in
//! the store (`console_sessions`), so every replica knows the session and signing out ends it
//! everywhere at once.
//!
//! The cookie is `HttpOnly` (scripts cannot read it), `SameSite=Lax` (other sites' pages cannot
//! send it with their forms or scripts) and `Secure` when the server is served over HTTPS. On
//! top of that every state-changing request of a session carries the session's CSRF token: the
//! console's forms in a hidden `csrf` field, its scripts in the `X-CSRF-Token` header, which
//! `/api/v1` checks for every request a session cookie authenticates ([`api_principal`]).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::ApiError;
use crate::services::idp::{hash_secret, random_secret};
use mission_store::{ConsoleSessionRecord, StoreError, UserRecord};

/// The session cookie.
pub const COOKIE: &str = "mission_session";
/// The header that carries a session's CSRF token on the console's own API requests.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts; then the user signs in again.
pub const LIFETIME: chrono::Duration = chrono::Duration::hours(12);

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// Who it is.
    pub user: UserRecord,
    /// The token its forms carry.
    pub csrf: String,
    /// The store's key of the session.
    session_hash: String,
}

impl Viewer {
    /// The caller as the API handlers know callers.
    pub fn principal(&self) -> Principal {
        Principal { user_id: self.user.user_id, admin: self.user.admin }
    }

    /// Checks a form's `csrf` field against the session's token.
    pub fn check_csrf(&self, given: &str) -> Result<(), ApiError> {
        if same_secret(given, &self.csrf) {
            Ok(())
        } else {
            Err(ApiError::forbidden("the form's CSRF token is missing or stale: reload the page and try again"))
        }
    }
}

/// The value of cookie `name` in a request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// The session the request's cookie names, if it is live.
async fn find(app: &AppState, headers: &HeaderMap) -> Result<Option<Viewer>, StoreError> {
    let Some(secret) = cookie(headers, COOKIE) else { return Ok(None) };
    let hash = hash_secret(secret);
    let Some(session) = app.store.console_session(&hash, Utc::now()).await? else { return Ok(None) };
    let Some(user) = app.store.user_by_id(session.user_id).await? else { return Ok(None) };
    Ok(Some(Viewer { user, csrf: session.csrf_token, session_hash: hash }))
}

/// Starts a session for `user`: answers the `Set-Cookie` value that hands it to the browser.
pub async fn start(app: &AppState, user: &UserRecord) -> Result<HeaderValue, StoreError> {
    let secret = random_secret();
    let now = Utc::now();
    let record = ConsoleSessionRecord {
        session_hash: hash_secret(&secret),
        user_id: user.user_id,
        csrf_token: random_secret(),
        created_at: now,
        expires_at: now + LIFETIME,
    };
    app.store.insert_console_session(&record, now).await?;
    Ok(set_cookie(app, COOKIE, &secret, "/", LIFETIME.num_seconds()))
}

/// Ends the viewer's session: answers the `Set-Cookie` value that clears the cookie.
pub async fn end(app: &AppState, viewer: &Viewer) -> Result<HeaderValue, StoreError> {
    app.store.delete_console_session(&viewer.session_hash).await?;
    Ok(set_cookie(app, COOKIE, "", "/", 0))
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Lax`, `Secure` on an HTTPS server.
pub fn set_cookie(app: &AppState, name: &str, value: &str, path: &str, max_age: i64) -> HeaderValue {
    cookie_header(name, value, path, max_age, app.public_url.starts_with("https://"))
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Lax`, and `Secure` where the origin it is set on
/// is `https` (`secure`).
pub fn cookie_header(name: &str, value: &str, path: &str, max_age: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"))
        .expect("cookie values are URL-safe base64")
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && !expected.is_empty()
        && given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The caller of an `/api/v1` request that carries no bearer token but a session cookie (the
/// console's scripts): `None` without a live session. A request that changes anything must
/// carry the session's CSRF token in [`CSRF_HEADER`], or it is refused with a 403.
pub async fn api_principal(parts: &Parts, app: &AppState) -> Result<Option<Principal>, ApiError> {
    let Some(viewer) = find(app, &parts.headers).await? else { return Ok(None) };
    let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let token = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !safe && !same_secret(token, &viewer.csrf) {
        return Err(ApiError::forbidden(format!(
            "a request signed in by the console's session cookie must carry the session's {CSRF_HEADER} header"
        )));
    }
    Ok(Some(viewer.principal()))
}

/// The signed-in user of a browser's request, by its session cookie alone: for the sessions'
/// proxy, whose apps send their own requests (their own CSRF defences, and `SameSite=Lax`
/// keeps other sites' forms from carrying the cookie).
pub async fn cookie_principal(app: &AppState, headers: &HeaderMap) -> Result<Option<Principal>, StoreError> {
    Ok(find(app, headers).await?.map(|viewer| viewer.principal()))
}

/// Where a page that needs a signed-in viewer sends a browser without one.
pub struct SignInFirst(String);

impl IntoResponse for SignInFirst {
    fn into_response(self) -> Response {
        Redirect::to(&format!("/sign-in?next={}", super::query_value(&self.0))).into_response()
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        match find(app, &parts.headers).await {
            Ok(Some(viewer)) => Ok(viewer),
            Ok(None) => {
                let back = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
                Err(SignInFirst(back).into_response())
            }
            Err(e) => Err(super::PageError::from(ApiError::from(e)).into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; mission_session=s3cr3t"));
        headers.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, COOKIE), Some("s3cr3t"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, "mission"), None);
    }

    #[test]
    fn secrets_match_only_when_equal_and_present() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
        assert!(!same_secret("", ""));
    }
}
