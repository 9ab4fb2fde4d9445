//! `Idempotency-Key` on creating requests: a client that sends a POST again after a timeout or a
//! replica's failure, with the same key, never creates two of anything.
//!
//! - A POST of the API (`/api/v1/…`) with a JSON body (or none) may carry `Idempotency-Key: KEY` (1 to 255 visible ASCII
//!   characters; a UUID does). Keys are the caller's own.
//! - The first request with a key claims it (in the database, so every replica sees it), runs,
//!   and its answer is kept for [`KEPT_FOR`], sealed with the server's sealing key (an answer may
//!   carry a secret given once, a landing zone's token, which the database never holds in the
//!   clear); a retry with the same key and the same request
//!   (method, path, query and body) gets that answer again, marked `Idempotent-Replayed: true`,
//!   and changes nothing.
//! - The same key with another request is a 422; with the same request while the first still
//!   runs, a 409 (retry later). An answer of a server error is not kept: a retry runs again. A
//!   claim whose request never answered (its server died) is taken over after
//!   [`ABANDONED_AFTER`].
//! - Requests whose body is not JSON (an image archive) are not taken with a key: a 400.

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mission_store::{IdempotencyClaim, KeptAnswer};

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::ApiError;
use crate::http::routes::MAX_JSON_BODY_BYTES;

/// The header a key comes in.
pub static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The header marking a replayed answer.
pub static REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// How long an answer is kept for retries.
pub const KEPT_FOR: Duration = Duration::from_secs(24 * 3600);
/// How long a claim without an answer holds its key.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(300);
/// The longest key.
pub const MAX_KEY_CHARS: usize = 255;
/// The largest answer kept (creating requests answer with one resource).
const MAX_KEPT_ANSWER: usize = 4 << 20;

/// Runs POSTs that carry an `Idempotency-Key` at most once per key (see the module docs).
pub async fn once_per_key(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/v1/");
    if request.method() != Method::POST || !api || !request.headers().contains_key(&IDEMPOTENCY_KEY) {
        return next.run(request).await;
    }
    match run_once(&app, request, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn run_once(app: &AppState, request: Request, next: Next) -> Result<Response, Response> {
    let key = request.headers().get(&IDEMPOTENCY_KEY).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if key.is_empty() || key.len() > MAX_KEY_CHARS || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(format!("expected 1 to {MAX_KEY_CHARS} visible ASCII characters (a UUID does)")));
    }
    let json =
        request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_none_or(|media| {
            media.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json {
        return Err(invalid("not taken on a request whose body is not JSON".into()));
    }
    let (mut parts, body) = request.into_parts();
    let who = Principal::from_request_parts(&mut parts, app).await.map_err(IntoResponse::into_response)?;
    let body = to_bytes(body, MAX_JSON_BODY_BYTES).await.map_err(|_| {
        ApiError::too_large(format!("JSON bodies are limited to {MAX_JSON_BODY_BYTES} bytes")).into_response()
    })?;
    let target = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let mut hashed = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [parts.method.as_str().as_bytes(), b"\n", target.as_bytes(), b"\n", &body] {
        hashed.update(part);
    }
    let fingerprint = crate::services::blobs::hex(hashed.finish().as_ref());
    let now = mission_store::now();
    let before = |age: Duration| now - chrono::Duration::from_std(age).expect("a short duration");
    let claim = app
        .store
        .claim_idempotency_key(who.user_id, &key, &fingerprint, now, before(ABANDONED_AFTER), before(KEPT_FOR))
        .await
        .map_err(|e| ApiError::from(e).into_response())?;
    match claim {
        IdempotencyClaim::Claimed => {}
        IdempotencyClaim::Answered(answer) => {
            let Some(body) = app.sealing.unseal(sealed_for(who.user_id, &key), &answer.body) else {
                return Err(ApiError::conflict(
                    "Idempotency-Key: the answer kept for this key cannot be read (the server's keys changed); \
                     check whether the request took effect before sending it with a new key",
                )
                .with_field("Idempotency-Key")
                .into_response());
            };
            return Ok(replay(KeptAnswer { body, ..answer }));
        }
        IdempotencyClaim::Running => {
            return Err(ApiError::conflict(
                "Idempotency-Key: a request with this key is still running; retry it in a moment",
            )
            .with_field("Idempotency-Key")
            .into_response());
        }
        IdempotencyClaim::OtherRequest => {
            return Err(ApiError::idempotency_key_reused(
                "Idempotency-Key: this key was used for another request (a key names one request: make a new one)",
            )
            .into_response());
        }
    }

    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    if response.status().is_server_error() {
        let _ = app.store.release_idempotency_key(who.user_id, &key).await;
        return Ok(response);
    }
    let (head, body) = response.into_parts();
    let Ok(body) = to_bytes(body, MAX_KEPT_ANSWER).await else {
        let _ = app.store.release_idempotency_key(who.user_id, &key).await;
        return Err(ApiError::internal("the answer of an idempotent request was too large to keep").into_response());
    };
    let answer = KeptAnswer {
        status: head.status.as_u16(),
        content_type: head.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
        body: app.sealing.seal(sealed_for(who.user_id, &key), &body),
    };
    if let Err(e) = app.store.keep_idempotent_answer(who.user_id, &key, &answer).await {
        // The change is made: the client has its answer; only a retry would not find it.
        tracing::warn!("keeping the answer of an idempotent request: {e}");
    }
    Ok(Response::from_parts(head, Body::from(body)))
}

/// What a kept answer is sealed for: the user's key, so a sealed answer cannot be moved to
/// another row.
fn sealed_for(user_id: uuid::Uuid, key: &str) -> uuid::Uuid {
    let digest = ring::digest::digest(&ring::digest::SHA256, &[user_id.as_bytes().as_slice(), key.as_bytes()].concat());
    uuid::Uuid::from_slice(&digest.as_ref()[..16]).expect("16 bytes")
}

/// Removes the keys past [`KEPT_FOR`] every hour until `shutdown`.
pub async fn prune(store: mission_store::Store, shutdown: tokio_util::sync::CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => {
                let before = mission_store::now() - chrono::Duration::from_std(KEPT_FOR).expect("a day");
                if let Err(e) = store.prune_idempotency_keys(before).await {
                    tracing::warn!("pruning the idempotency keys: {e}");
                }
            }
        }
    }
}

/// The kept answer, again.
fn replay(answer: KeptAnswer) -> Response {
    let status = axum::http::StatusCode::from_u16(answer.status).unwrap_or(axum::http::StatusCode::OK);
    let mut response = (status, answer.body).into_response();
    if let Some(media) = answer.content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::CONTENT_TYPE, media);
    }
    response.headers_mut().insert(REPLAYED.clone(), HeaderValue::from_static("true"));
    response
}

fn invalid(detail: String) -> Response {
    ApiError::invalid_field("Idempotency-Key", detail).into_response()
}
