//! Signing in to the console through an external OpenID provider: the OAuth 2.0 authorization
//! code flow with PKCE (RFC 7636, `S256`), as a public client (the server's `client_id`, no
//! secret). The provider must allow `{public URL}/sign-in/callback` as a redirect address.
//!
//! `/sign-in/start` draws a `state` and a code verifier, keeps them (with where to go afterwards)
//! in a short-lived HttpOnly cookie scoped to `/sign-in`, and sends the browser to the provider's
//! authorization endpoint with the verifier's challenge. `/sign-in/callback` takes the code only
//! with the cookie's `state`, trades it for an access token with the verifier, checks that token
//! exactly as the API checks every bearer token (which provisions the user on first sight), and
//! starts a console session. The endpoints come from the provider's OIDC discovery document,
//! else Auth0's `/authorize` and `/oauth/token`.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use super::session;
use super::sign_in::{Next, form_page, local_path};
use crate::AppState;
use crate::http::error::ApiError;
use crate::services::idp::random_secret;

/// The cookie that carries a sign-in in flight: `state`, verifier and the page to go back to.
pub(crate) const FLOW_COOKIE: &str = "mission_oauth";
/// How long a person may spend at the provider.
const FLOW_LIFETIME_SECS: i64 = 600;

/// Where the provider signs people in and hands out tokens.
struct Endpoints {
    authorization: String,
    token: String,
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("the HTTP client builds")
}

/// The provider's endpoints, from its discovery document or Auth0's fixed paths.
async fn endpoints(app: &AppState, http: &reqwest::Client) -> Endpoints {
    let base = app.auth_url.trim_end_matches('/');
    let doc = crate::http::auth::discovery_document(http, base).await;
    let field = |name: &str| doc.as_ref()?.get(name)?.as_str().map(str::to_owned);
    let discovered = field("authorization_endpoint").zip(field("token_endpoint"));
    discovered.map_or_else(
        || Endpoints { authorization: format!("{base}/authorize"), token: format!("{base}/oauth/token") },
        |(authorization, token)| Endpoints { authorization, token },
    )
}

/// The address the provider sends the browser back to.
fn redirect_uri(app: &AppState) -> String {
    format!("{}/sign-in/callback", app.public_url.trim_end_matches('/'))
}

/// The PKCE challenge of `verifier`: base64url of its SHA-256, unpadded.
fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()))
}

/// `GET /sign-in/start?next=…`: off to the provider.
pub async fn start(State(app): State<AppState>, Query(query): Query<Next>) -> Response {
    if app.idp.is_some() {
        return Redirect::to("/sign-in").into_response();
    }
    let next = local_path(query.next.as_deref());
    let (state, verifier) = (random_secret(), random_secret());
    let endpoints = endpoints(&app, &http()).await;
    let mut target = match url::Url::parse(&endpoints.authorization) {
        Ok(url) => url,
        Err(e) => {
            let error = format!("The identity provider's sign-in address is not a URL: {e}");
            return form_page(&app, StatusCode::BAD_GATEWAY, "", next, &error);
        }
    };
    target
        .query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &app.config.client_id)
        .append_pair("redirect_uri", &redirect_uri(&app))
        .append_pair("scope", "openid profile email")
        .append_pair("audience", &app.config.audience)
        .append_pair("state", &state)
        .append_pair("code_challenge", &challenge(&verifier))
        .append_pair("code_challenge_method", "S256");
    let flow = format!("{state}.{verifier}.{}", URL_SAFE_NO_PAD.encode(next));
    let mut response = Redirect::to(target.as_str()).into_response();
    let cookie = session::set_cookie(&app, FLOW_COOKIE, &flow, "/sign-in", FLOW_LIFETIME_SECS);
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /sign-in/callback?code=…&state=…`: back from the provider.
pub async fn callback(State(app): State<AppState>, headers: HeaderMap, Query(answer): Query<Callback>) -> Response {
    let flow = session::cookie(&headers, FLOW_COOKIE).unwrap_or("");
    let mut parts = flow.splitn(3, '.');
    let (expected_state, verifier, next) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
    let next = next.and_then(|n| URL_SAFE_NO_PAD.decode(n).ok()).and_then(|n| String::from_utf8(n).ok());
    let next = local_path(next.as_deref()).to_owned();
    let refuse = |status: StatusCode, error: &str| {
        let mut response = form_page(&app, status, "", &next, error);
        response.headers_mut().append(header::SET_COOKIE, session::set_cookie(&app, FLOW_COOKIE, "", "/sign-in", 0));
        response
    };
    if !session::same_secret(answer.state.as_deref().unwrap_or(""), expected_state) {
        return refuse(StatusCode::FORBIDDEN, "That sign-in expired or was not started here. Please sign in again.");
    }
    if let Some(error) = &answer.error {
        let why = answer.error_description.as_deref().unwrap_or(error);
        return refuse(StatusCode::UNAUTHORIZED, &format!("The identity provider did not sign you in: {why}"));
    }
    let Some(code) = answer.code.filter(|c| !c.is_empty()) else {
        return refuse(StatusCode::BAD_REQUEST, "The identity provider sent no authorization code.");
    };
    let user = match signed_in_user(&app, &code, verifier).await {
        Ok(user) => user,
        Err(e) if e.status().is_server_error() => {
            return refuse(e.status(), &format!("Signing in failed: {}", e.problem().detail));
        }
        Err(e) => return refuse(StatusCode::UNAUTHORIZED, &format!("Signing in failed: {}", e.problem().detail)),
    };
    let cookie = match session::start(&app, &user).await {
        Ok(cookie) => cookie,
        Err(e) => return super::PageError::from(e).into_response(),
    };
    let mut response = Redirect::to(&next).into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response.headers_mut().append(header::SET_COOKIE, session::set_cookie(&app, FLOW_COOKIE, "", "/sign-in", 0));
    response
}

/// Trades `code` for an access token and answers the user it names, checked like any API token.
async fn signed_in_user(app: &AppState, code: &str, verifier: &str) -> Result<mission_store::UserRecord, ApiError> {
    let http = http();
    let endpoints = endpoints(app, &http).await;
    let redirect = redirect_uri(app);
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect.as_str()),
        ("client_id", app.config.client_id.as_str()),
        ("code_verifier", verifier),
    ];
    let response =
        http.post(&endpoints.token).form(&form).send().await.map_err(|e| {
            ApiError::unavailable(format!("the identity provider's token endpoint did not answer: {e}"))
        })?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if !status.is_success() {
        let why = body.get("error_description").or(body.get("error")).and_then(|v| v.as_str()).unwrap_or("no reason");
        return Err(ApiError::unauthorized(format!("the identity provider refused the code ({status}): {why}")));
    }
    let token = body
        .get("access_token")
        .and_then(|t| t.as_str())
        .ok_or_else(|| ApiError::unauthorized("the identity provider's answer has no access_token"))?;
    let principal = app.auth.authenticate(token).await?;
    app.store.user_by_id(principal.user_id).await?.ok_or_else(|| ApiError::unauthorized("the user is gone"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            super::challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
