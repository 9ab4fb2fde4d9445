//! Which versions of Mission's own clients the server serves, and the version it tells them.
//!
//! Each client names itself in `User-Agent` (`mission-cli/0.1.0 mission-client/0.1.0`,
//! `mission-python/0.1.0 …`). A request from one older than [`OLDEST`] allows is refused with a
//! 400 naming the version to upgrade to, before it does anything; every answer carries the
//! server's version in `Mission-Server-Version`, so a client can tell that the server is newer
//! than it knows. Other clients (curl, scripts, galileo-sdk) are served whatever they send.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mission_api::versions::{SERVER_VERSION_HEADER, parse};

use crate::http::error::ApiError;

/// This server's version.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The oldest version of each of Mission's clients this server serves: raised when the API
/// removes something a client of an older version calls (after its deprecation ran out).
pub const OLDEST: [(&str, &str); 3] =
    [("mission-cli", "0.1.0"), ("mission-python", "0.1.0"), ("mission-client", "0.1.0")];

/// Refuses clients of Mission's own older than [`OLDEST`]; names the server's version in every
/// answer.
pub async fn check(request: Request, next: Next) -> Response {
    let agent = request.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut response = match too_old(agent) {
        Some(refusal) => ApiError::client_too_old(refusal).into_response(),
        None => next.run(request).await,
    };
    response
        .headers_mut()
        .insert(HeaderName::from_static(SERVER_VERSION_HEADER), HeaderValue::from_static(SERVER_VERSION));
    response
}

/// Why `user_agent` names a client too old to serve, if it does.
fn too_old(user_agent: &str) -> Option<String> {
    for token in user_agent.split_whitespace() {
        let Some((product, version)) = token.split_once('/') else { continue };
        let Some((_, oldest)) = OLDEST.iter().find(|(name, _)| *name == product) else { continue };
        let (Some(have), Some(need)) = (parse(version), parse(oldest)) else { continue };
        if have < need {
            return Some(format!(
                "{product} {version} is older than this server (Mission Compute Service {SERVER_VERSION}) \
                 serves: upgrade it to {oldest} or later"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::too_old;

    #[test]
    fn only_missions_own_clients_older_than_served_are_refused() {
        let refusal = too_old("mission-cli/0.0.9 mission-client/0.0.9").unwrap();
        assert!(refusal.starts_with("mission-cli 0.0.9 is older than this server"), "{refusal}");
        assert!(refusal.ends_with("upgrade it to 0.1.0 or later"), "{refusal}");
        for served in
            ["mission-cli/0.1.0 mission-client/0.1.0", "mission-python/3.0.0", "curl/8.1.2", "", "mission-cli/banana"]
        {
            assert_eq!(too_old(served), None, "{served}");
        }
    }
}
