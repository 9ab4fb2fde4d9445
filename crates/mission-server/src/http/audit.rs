//! The audit trail at the HTTP edge: every request gets a request id and an audit scope in which
//! the domain notes the changes it makes ([`crate::domain::audit::note`]).
//!
//! The request id is the client's `X-Request-Id` where it sends a usable one (1 to 64 letters,
//! digits, `-`, `_`, `.`), else a new UUID; the response carries it back. Changes noted in the
//! request's scope ([`crate::domain::audit::note`]) are written by the store in the transaction of the change (see
//! `mission_store::audit`); the changes the scheduler makes carry their notes to it.

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use mission_store::audit;
use tracing::Instrument;

/// The log target of the request lines: `MISSION_LOG=info,mission_server::audit=debug` logs one
/// per request. Users set it, so it stays put wherever this module lives.
const LOG_TARGET: &str = "mission_server::audit";

/// The header a request id comes and goes back in.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Runs the request in an audit scope and a log span under its request id, which the response
/// carries back: every line logged for the request names it. A request that ends in a server
/// error is logged at WARN, every other at DEBUG.
pub async fn request_scope(request: Request, next: Next) -> Response {
    let given = request.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).filter(|id| usable(id));
    let request_id = given.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let header = HeaderValue::from_str(&request_id).expect("request ids are header-safe");
    // The route's template, never the path: ids and file names stay out of the logs.
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let span =
        tracing::info_span!(target: LOG_TARGET, "request", request_id = %request_id, method = %request.method(), route);
    let started = std::time::Instant::now();
    let mut response = audit::scope(request_id, next.run(request)).instrument(span.clone()).await;
    let (status, elapsed_ms) = (response.status().as_u16(), started.elapsed().as_secs_f64() * 1000.0);
    span.in_scope(|| {
        if response.status().is_server_error() {
            tracing::warn!(target: LOG_TARGET, status, elapsed_ms, "request failed");
        } else {
            tracing::debug!(target: LOG_TARGET, status, elapsed_ms, "request answered");
        }
    });
    response.headers_mut().insert(REQUEST_ID.clone(), header);
    response
}

/// Whether a client's request id may be used as it is.
fn usable(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_plain_short_request_ids_are_taken_from_clients() {
        for id in ["abc", "7f1e-22.x_y", &"a".repeat(64)] {
            assert!(super::usable(id), "{id}");
        }
        for id in ["", "a b", "a\nb", "é", &"a".repeat(65), "<script>"] {
            assert!(!super::usable(id), "{id:?}");
        }
    }
}
