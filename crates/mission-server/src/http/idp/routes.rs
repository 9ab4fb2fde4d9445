//! HTTP endpoints of the built-in identity provider (RFC 8628 device flow, RFC 7009 revocation,
//! OIDC discovery) and the `/activate` page where people approve device codes.

use axum::Router;
use axum::body::Bytes;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{Duration as ChronoDuration, Utc};
use mission_api::{DEVICE_CODE_GRANT, DEVICE_FLOW_SCOPE, DeviceAuthorization, OAuthError, TokenResponse};
use serde::Deserialize;

use super::page::{ActivatePage, Outcome};
use crate::AppState;
use crate::services::idp::{hash_secret, new_user_code, normalise_user_code, password, random_secret, throttle};
use mission_store::{DeviceCodeRecord, DeviceCodeStatus, RefreshTokenRecord, StoreError, UserRecord};

/// Routes of the built-in provider, mounted at the server root.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/oauth/device/code", post(device_code))
        .route("/oauth/token", post(token))
        .route("/oauth/revoke", post(revoke))
        .route("/.well-known/openid-configuration", get(openid_configuration))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/activate", get(activate_form).post(activate_submit))
        .route("/galileo/landing_zone/v1/oauth/token", post(galileo_password_grant))
}

/// An OAuth error response (RFC 6749 §5.2).
struct OAuthFailure {
    status: StatusCode,
    body: OAuthError,
    retry_after: Option<u64>,
}

impl OAuthFailure {
    fn new(error: &str, description: impl Into<String>) -> Self {
        let status = if error == "invalid_client" { StatusCode::UNAUTHORIZED } else { StatusCode::BAD_REQUEST };
        let body = OAuthError { error: error.into(), error_description: Some(description.into()) };
        Self { status, body, retry_after: None }
    }
}

impl OAuthFailure {
    /// 429 with `Retry-After`: the client asked too often.
    fn too_many(retry_after: u64) -> Self {
        let mut failure =
            Self::new("slow_down", format!("too many requests from this address; retry in {retry_after} s"));
        failure.status = StatusCode::TOO_MANY_REQUESTS;
        failure.retry_after = Some(retry_after);
        failure
    }
}

impl IntoResponse for OAuthFailure {
    fn into_response(self) -> Response {
        let mut response = (self.status, [(header::CACHE_CONTROL, "no-store")], axum::Json(self.body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<StoreError> for OAuthFailure {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "identity provider store failure");
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: OAuthError { error: "server_error".into(), error_description: None },
            retry_after: None,
        }
    }
}

/// Parses a form body into `T`, answering `invalid_request` naming the problem.
fn parse_form<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, OAuthFailure> {
    serde_urlencoded::from_bytes(body).map_err(|e| OAuthFailure::new("invalid_request", format!("bad form body: {e}")))
}

fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, OAuthFailure> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| OAuthFailure::new("invalid_request", format!("missing form field {name}")))
}

#[derive(Deserialize)]
struct DeviceCodeForm {
    client_id: Option<String>,
    audience: Option<String>,
    scope: Option<String>,
}

/// Longest `scope` a device code may ask for.
const MAX_SCOPE_BYTES: usize = 512;

/// Client ids the built-in provider serves: the one it advertises (the `mission` CLI's by
/// default) and the `galileo-sdk` client's.
fn known_client(app: &AppState, client_id: &str) -> bool {
    client_id == app.config.client_id || client_id == mission_api::DEFAULT_CLIENT_ID || client_id == GALILEO_CLIENT_ID
}

/// The client id `galileo-sdk` 1.0.1 signs in with (its `AuthSdk` default).
const GALILEO_CLIENT_ID: &str = "oDmH6Nf4DN3oILcNk7cQqBchXUfv7fpD";

async fn device_code(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let form: DeviceCodeForm = parse_form(&body)?;
    let client_id = required(&form.client_id, "client_id")?;
    if !known_client(&app, client_id) {
        return Err(OAuthFailure::new("invalid_client", "unknown client_id"));
    }
    if form.scope.as_ref().is_some_and(|s| s.len() > MAX_SCOPE_BYTES) {
        return Err(OAuthFailure::new("invalid_scope", format!("the scope is longer than {MAX_SCOPE_BYTES} bytes")));
    }
    let idp = app.idp.as_ref().expect("these routes exist only with the built-in provider");
    if let Err(wait) = idp.brakes.new_code(&peer.ip().to_string()).await {
        return Err(OAuthFailure::too_many(throttle::seconds(wait)));
    }
    if let Some(audience) = form.audience.as_deref().filter(|a| !a.is_empty())
        && audience != app.config.audience
    {
        return Err(OAuthFailure::new(
            "invalid_request",
            format!("unknown audience {audience:?}; this server's API audience is {:?}", app.config.audience),
        ));
    }
    let now = Utc::now();
    let ttl = app.config.device_code_ttl;
    let device_code = random_secret();
    let mut record = DeviceCodeRecord {
        device_code_hash: hash_secret(&device_code),
        user_code: new_user_code(),
        client_id: client_id.to_owned(),
        scope: form.scope.unwrap_or_else(|| "openid".into()),
        status: DeviceCodeStatus::Pending,
        user_id: None,
        interval_secs: app.config.device_poll_interval as i64,
        last_polled_at: None,
        expires_at: now + ChronoDuration::from_std(ttl).expect("device code ttl fits"),
    };
    // User codes are short; on the rare clash draw again.
    let mut attempts = 0;
    loop {
        match app.store.insert_device_code(&record, now).await {
            Ok(()) => break,
            Err(StoreError::Conflict(_)) if attempts < 5 => {
                attempts += 1;
                record.user_code = new_user_code();
            }
            Err(e) => return Err(e.into()),
        }
    }
    let verification_uri = format!("{}/activate", app.public_url);
    let body = DeviceAuthorization {
        device_code,
        verification_uri_complete: Some(format!("{verification_uri}?user_code={}", record.user_code)),
        user_code: record.user_code,
        verification_uri,
        expires_in: Some(ttl.as_secs()),
        interval: app.config.device_poll_interval,
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response())
}

#[derive(Deserialize)]
struct TokenForm {
    grant_type: Option<String>,
    client_id: Option<String>,
    device_code: Option<String>,
    refresh_token: Option<String>,
}

async fn token(State(app): State<AppState>, body: Bytes) -> Result<Response, OAuthFailure> {
    let form: TokenForm = parse_form(&body)?;
    let client_id = required(&form.client_id, "client_id")?;
    let response = match required(&form.grant_type, "grant_type")? {
        DEVICE_CODE_GRANT => device_code_grant(&app, client_id, required(&form.device_code, "device_code")?).await?,
        "refresh_token" => refresh_grant(&app, client_id, required(&form.refresh_token, "refresh_token")?).await?,
        other => {
            return Err(OAuthFailure::new(
                "unsupported_grant_type",
                format!("grant_type {other:?} is not supported; use {DEVICE_CODE_GRANT} or refresh_token"),
            ));
        }
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(response)).into_response())
}

async fn device_code_grant(app: &AppState, client_id: &str, device_code: &str) -> Result<TokenResponse, OAuthFailure> {
    let now = Utc::now();
    let hash = hash_secret(device_code);
    let Some(code) = app.store.poll_device_code(&hash, now).await? else {
        return Err(OAuthFailure::new("invalid_grant", "unknown device code"));
    };
    if code.client_id != client_id {
        return Err(OAuthFailure::new("invalid_grant", "the device code was issued to another client"));
    }
    if code.status == DeviceCodeStatus::Consumed {
        return Err(OAuthFailure::new("invalid_grant", "the device code was already exchanged for tokens"));
    }
    if now >= code.expires_at {
        return Err(OAuthFailure::new("expired_token", "the device code expired; start the sign-in again"));
    }
    match code.status {
        DeviceCodeStatus::Denied => Err(OAuthFailure::new("access_denied", "the user denied the sign-in request")),
        DeviceCodeStatus::Pending => {
            let too_soon =
                code.last_polled_at.is_some_and(|last| (now - last).num_milliseconds() < code.interval_secs * 1000);
            if too_soon {
                app.store.slow_down_device_code(&hash, 5).await?;
                Err(OAuthFailure::new("slow_down", format!("poll at most every {} seconds", code.interval_secs + 5)))
            } else {
                Err(OAuthFailure::new("authorization_pending", "the user has not approved the request yet"))
            }
        }
        DeviceCodeStatus::Approved => {
            let user_id = code.user_id.ok_or_else(|| StoreError::Corrupt("approved code without a user".into()))?;
            if !app.store.consume_device_code(&hash).await? {
                return Err(OAuthFailure::new("invalid_grant", "the device code was already exchanged for tokens"));
            }
            Ok(issue_tokens(app, user_id, &code.scope, client_id, now).await?)
        }
        DeviceCodeStatus::Consumed => unreachable!("handled above"),
    }
}

/// An access token for `user_id`, and a refresh token when `scope` has `offline_access`.
async fn issue_tokens(
    app: &AppState,
    user_id: uuid::Uuid,
    scope: &str,
    client_id: &str,
    now: chrono::DateTime<Utc>,
) -> Result<TokenResponse, StoreError> {
    let idp = app.idp.as_ref().expect("routes are mounted only with the built-in provider");
    let (access_token, expires_in) = idp.issue_access_token(user_id, scope, client_id, now);
    let refresh_token = if scope.split(' ').any(|s| s == "offline_access") {
        let secret = random_secret();
        let record = RefreshTokenRecord {
            user_id,
            client_id: client_id.to_owned(),
            scope: scope.to_owned(),
            expires_at: now + ChronoDuration::from_std(app.config.refresh_token_ttl).expect("ttl fits"),
            revoked_at: None,
        };
        app.store.insert_refresh_token(&hash_secret(&secret), &record, now).await?;
        Some(secret)
    } else {
        None
    };
    Ok(TokenResponse {
        access_token,
        refresh_token,
        expires_in,
        token_type: "Bearer".into(),
        scope: Some(scope.to_owned()),
    })
}

/// Why a password was not accepted.
pub(crate) enum PasswordRefused {
    /// Too many failures from this address or for this account: try again in so many seconds.
    TooMany(u64),
    /// No such account, or the wrong password (the two look the same, in time too).
    Wrong,
    /// The store failed.
    Store(StoreError),
}

/// The brakes' key of an account.
fn account_key(username: &str) -> String {
    format!("user:{username}")
}

/// Checks `username`'s `password`, for a caller that has checked the brakes on `keys` (which
/// hold the account's [`account_key`]): a wrong password counts against all of them, a right one
/// clears the account's count.
async fn check_password(
    app: &AppState,
    keys: &[String],
    username: &str,
    password: String,
) -> Result<UserRecord, PasswordRefused> {
    let idp = app.idp.as_ref().expect("routes are mounted only with the built-in provider");
    let user = app.store.user_by_username(username).await.map_err(PasswordRefused::Store)?;
    // PBKDF2 takes a good fraction of a second by design: keep it off the async workers.
    let hash = user.as_ref().and_then(|u| u.password_hash.clone());
    let verified = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => password::verify(&password, &hash),
        None => {
            password::burn_verification_time(&password);
            false
        }
    })
    .await
    .unwrap_or(false);
    match user.filter(|_| verified) {
        Some(user) => {
            idp.brakes.guess_succeeded(&account_key(username)).await;
            Ok(user)
        }
        None => {
            idp.brakes.guess_failed(keys).await;
            Err(PasswordRefused::Wrong)
        }
    }
}

/// Signs `username` in with `password` (the galileo client's password grant, the console's
/// sign-in form): failures count against the caller's address and the account, as on /activate.
pub(crate) async fn password_sign_in(
    app: &AppState,
    peer: std::net::IpAddr,
    username: &str,
    password: String,
) -> Result<UserRecord, PasswordRefused> {
    let idp = app.idp.as_ref().expect("password sign-in is served only with the built-in provider");
    let keys = [format!("addr:{peer}"), account_key(username)];
    if let Err(wait) = idp.brakes.check_guesses(&keys).await {
        return Err(PasswordRefused::TooMany(throttle::seconds(wait)));
    }
    check_password(app, &keys, username, password).await
}

#[derive(Deserialize)]
struct PasswordGrant {
    username: Option<String>,
    password: Option<String>,
    grant_type: Option<String>,
}

/// `POST /galileo/landing_zone/v1/oauth/token`: the password sign-in of the `galileo-sdk` client
/// (`GalileoSdk(username=, password=)`), for built-in accounts. A JSON body `{username, password,
/// grant_type: "password"}`; exactly 200 with an access and a refresh token, or an OAuth error.
/// Failures count against the address and the account, as on `/activate`.
async fn galileo_password_grant(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Result<Response, OAuthFailure> {
    let grant: PasswordGrant = serde_json::from_slice(&body)
        .map_err(|e| OAuthFailure::new("invalid_request", format!("expected a JSON object: {e}")))?;
    if grant.grant_type.as_deref().is_some_and(|g| g != "password") {
        return Err(OAuthFailure::new("unsupported_grant_type", "only grant_type \"password\" is served here"));
    }
    let username = required(&grant.username, "username")?.trim().to_owned();
    let password = required(&grant.password, "password")?.to_owned();
    let user = match password_sign_in(&app, peer.ip(), &username, password).await {
        Ok(user) => user,
        Err(PasswordRefused::TooMany(seconds)) => return Err(OAuthFailure::too_many(seconds)),
        Err(PasswordRefused::Wrong) => return Err(OAuthFailure::new("invalid_grant", "wrong username or password")),
        Err(PasswordRefused::Store(e)) => return Err(e.into()),
    };
    let tokens = issue_tokens(&app, user.user_id, DEVICE_FLOW_SCOPE, GALILEO_CLIENT_ID, Utc::now()).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(tokens)).into_response())
}

async fn refresh_grant(app: &AppState, client_id: &str, refresh_token: &str) -> Result<TokenResponse, OAuthFailure> {
    let now = Utc::now();
    let record = app.store.refresh_token(&hash_secret(refresh_token)).await?;
    let record = match record {
        Some(r) if r.revoked_at.is_some() => {
            return Err(OAuthFailure::new("invalid_grant", "the refresh token was revoked; sign in again"));
        }
        Some(r) if r.expires_at <= now => {
            return Err(OAuthFailure::new("invalid_grant", "the refresh token expired; sign in again"));
        }
        Some(r) if r.client_id != client_id => {
            return Err(OAuthFailure::new("invalid_grant", "the refresh token was issued to another client"));
        }
        Some(r) => r,
        None => return Err(OAuthFailure::new("invalid_grant", "unknown refresh token")),
    };
    if app.store.user_by_id(record.user_id).await?.is_none() {
        return Err(OAuthFailure::new("invalid_grant", "the account no longer exists"));
    }
    let idp = app.idp.as_ref().expect("routes are mounted only with the built-in provider");
    let (access_token, expires_in) = idp.issue_access_token(record.user_id, &record.scope, client_id, now);
    // The refresh token is not rotated, so (like Auth0) the response leaves it out.
    Ok(TokenResponse {
        access_token,
        refresh_token: None,
        expires_in,
        token_type: "Bearer".into(),
        scope: Some(record.scope),
    })
}

#[derive(Deserialize)]
struct RevokeForm {
    token: Option<String>,
}

/// RFC 7009: always 200, whether or not the token was known.
async fn revoke(State(app): State<AppState>, body: Bytes) -> Result<StatusCode, OAuthFailure> {
    let form: RevokeForm = parse_form(&body)?;
    let token = required(&form.token, "token")?;
    app.store.revoke_refresh_token(&hash_secret(token), Utc::now()).await?;
    Ok(StatusCode::OK)
}

async fn openid_configuration(State(app): State<AppState>) -> impl IntoResponse {
    let base = &app.public_url;
    axum::Json(serde_json::json!({
        "issuer": base,
        "device_authorization_endpoint": format!("{base}/oauth/device/code"),
        "token_endpoint": format!("{base}/oauth/token"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "jwks_uri": format!("{base}/.well-known/jwks.json"),
        "grant_types_supported": [DEVICE_CODE_GRANT, "refresh_token"],
        "response_types_supported": ["token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "token_endpoint_auth_methods_supported": ["none"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "subject_types_supported": ["public"],
    }))
}

async fn jwks(State(app): State<AppState>) -> impl IntoResponse {
    let idp = app.idp.as_ref().expect("routes are mounted only with the built-in provider");
    ([(header::CACHE_CONTROL, "public, max-age=300")], axum::Json(idp.jwks()))
}

#[derive(Deserialize)]
struct ActivateQuery {
    user_code: Option<String>,
}

async fn activate_form(Query(q): Query<ActivateQuery>) -> Response {
    let code = q.user_code.as_deref().map(normalise_user_code).unwrap_or_default();
    ActivatePage { user_code: &code, username: "", outcome: Outcome::Form }.into_response()
}

#[derive(Deserialize)]
struct ActivateForm {
    user_code: Option<String>,
    username: Option<String>,
    password: Option<String>,
    action: Option<String>,
}

/// The `/activate` page refusing an attempt until the brakes let go.
fn too_many_attempts(user_code: &str, username: &str, wait: std::time::Duration) -> Response {
    let message = format!("Too many failed attempts. Wait {} seconds, then try again.", throttle::seconds(wait));
    let mut page = ActivatePage::error_with(StatusCode::TOO_MANY_REQUESTS, user_code, username, &message);
    page.headers_mut().insert(header::RETRY_AFTER, throttle::seconds(wait).into());
    page
}

async fn activate_submit(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let form: ActivateForm = match serde_urlencoded::from_bytes(&body) {
        Ok(f) => f,
        Err(_) => return ActivatePage::error("", "", "The form could not be read. Please try again."),
    };
    let user_code = normalise_user_code(form.user_code.as_deref().unwrap_or(""));
    let username = form.username.as_deref().unwrap_or("").trim();
    let idp = app.idp.as_ref().expect("these routes exist only with the built-in provider");
    // Every failure (an unknown code, a wrong password) counts against the address, the code
    // and the account; past a few, each makes the next attempt wait longer. A waiting attempt
    // is refused before anything is checked, so a right password does not get through either.
    let keys = [format!("addr:{}", peer.ip()), format!("code:{user_code}"), account_key(username)];
    if let Err(wait) = idp.brakes.check_guesses(&keys).await {
        return too_many_attempts(&user_code, username, wait);
    }
    let now = Utc::now();
    let code = match app.store.device_code_by_user_code(&user_code).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "activate: store failure");
            return ActivatePage::error(&user_code, username, "The server could not check the code. Try again.");
        }
    };
    let live = code.is_some_and(|c| c.status == DeviceCodeStatus::Pending && c.expires_at > now);
    if !live {
        idp.brakes.guess_failed(&keys).await;
        return ActivatePage::error(
            &user_code,
            username,
            "That code is unknown, expired or already used. Start the sign-in again on your device.",
        );
    }
    let approve = match form.action.as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => return ActivatePage::error(&user_code, username, "Choose Approve or Deny."),
    };
    // Approving and denying both need the account's password.
    let user = match check_password(&app, &keys, username, form.password.unwrap_or_default()).await {
        Ok(user) => user,
        Err(PasswordRefused::Wrong) => return ActivatePage::error(&user_code, username, "Wrong username or password."),
        Err(PasswordRefused::TooMany(seconds)) => {
            return too_many_attempts(&user_code, username, std::time::Duration::from_secs(seconds));
        }
        Err(PasswordRefused::Store(e)) => {
            tracing::error!(error = %e, "activate: store failure");
            return ActivatePage::error(&user_code, username, "The server could not check the account.");
        }
    };
    let (decision, outcome) = if approve { (Some(user.user_id), Outcome::Approved) } else { (None, Outcome::Denied) };
    match app.store.decide_device_code(&user_code, decision, now).await {
        Ok(true) => ActivatePage { user_code: &user_code, username, outcome }.into_response(),
        _ => ActivatePage::error(&user_code, username, "That code is no longer waiting for a decision."),
    }
}
