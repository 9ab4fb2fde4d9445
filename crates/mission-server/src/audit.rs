//! The audit trail at the HTTP edge: every request gets a request id and an audit scope, routes
//! note the changes they make, and old entries are pruned.
//!
//! The request id is the client's `X-Request-Id` where it sends a usable one (1 to 64 letters,
//! digits, `-`, `_`, `.`), else a new UUID; the response carries it back. Changes noted in the
//! request's scope ([`note`]) are written by the store in the transaction of the change (see
//! `mission_store::audit`); the changes the scheduler makes carry their notes to it.

use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use mission_store::audit::{self, Actor};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use mission_store::audit::Change;

use crate::auth::Principal;

/// The header a request id comes and goes back in.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// How often entries past the retention window are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Runs the request in an audit scope and a log span under its request id, which the response
/// carries back: every line logged for the request names it. A request that ends in a server
/// error is logged at WARN, every other at DEBUG.
pub async fn request_scope(request: Request, next: Next) -> Response {
    let given = request.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).filter(|id| usable(id));
    let request_id = given.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let header = HeaderValue::from_str(&request_id).expect("request ids are header-safe");
    // The route's template, never the path: ids and file names stay out of the logs.
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let span = tracing::info_span!("request", request_id = %request_id, method = %request.method(), route);
    let started = std::time::Instant::now();
    let mut response = audit::scope(request_id, next.run(request)).instrument(span.clone()).await;
    let (status, elapsed_ms) = (response.status().as_u16(), started.elapsed().as_secs_f64() * 1000.0);
    span.in_scope(|| {
        if response.status().is_server_error() {
            tracing::warn!(status, elapsed_ms, "request failed");
        } else {
            tracing::debug!(status, elapsed_ms, "request answered");
        }
    });
    response.headers_mut().insert(REQUEST_ID.clone(), header);
    response
}

/// Whether a client's request id may be used as it is.
fn usable(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Notes `change`, made by `who`, for the request's next audited write.
pub fn note(who: Principal, change: Change) {
    audit::note(Actor { user_id: who.user_id, admin: who.admin }, change);
}

/// Removes entries older than `retention` every hour until `shutdown`.
pub async fn prune(store: mission_store::Store, retention: Duration, shutdown: CancellationToken) {
    let Ok(retention) = chrono::Duration::from_std(retention) else { return };
    let mut every = tokio::time::interval(PRUNE_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => {
                match store.prune_audit(mission_store::now() - retention).await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "removed audit entries past the retention"),
                    Err(e) => tracing::warn!("pruning the audit trail: {e}"),
                }
            }
        }
    }
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
