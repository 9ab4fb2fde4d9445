//! Operations of `/api/v1` on their way out, and how they say so.
//!
//! An operation listed in [`DEPRECATED`] is marked `deprecated: true` in the OpenAPI document,
//! with its dates and successor in its description, and every answer to it carries a
//! `Deprecation` header (RFC 9745: when it was deprecated, `@` and Unix seconds) and a `Sunset`
//! header (RFC 8594: the earliest time it may be removed, an HTTP date). The guide's policy
//! (`docs/src/reference/http-api.md`) sets the sunset: at least six months and two releases
//! after the deprecation. The table is the
//! one place both come from, so the document and the answers cannot disagree.

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

/// One deprecated operation.
pub struct Deprecated {
    /// Its method.
    pub method: Method,
    /// Its route, as the document names it (`/api/v1/missions/{id}/args`).
    pub route: &'static str,
    /// When it was deprecated, in Unix seconds.
    pub since: i64,
    /// The earliest time it may be removed, in Unix seconds.
    pub sunset: i64,
    /// What to call instead, in Markdown.
    pub instead: &'static str,
}

/// The deprecated operations.
pub const DEPRECATED: &[Deprecated] = &[Deprecated {
    method: Method::PUT,
    route: "/api/v1/missions/{id}/args",
    since: 1_795_737_600,  // 2026-11-27
    sunset: 1_811_376_000, // 2027-05-27
    instead: "`PATCH /api/v1/missions/{id}` with `args` (beside any of the mission's other fields)",
}];

/// The deprecated operation a request was routed to, if it was.
fn deprecated(method: &Method, route: &str) -> Option<&'static Deprecated> {
    DEPRECATED.iter().find(|d| d.method == *method && d.route == route)
}

/// Adds `Deprecation` and `Sunset` to every answer of a deprecated operation.
pub async fn announce(request: Request, next: Next) -> Response {
    let found =
        request.extensions().get::<MatchedPath>().and_then(|route| deprecated(request.method(), route.as_str()));
    let mut response = next.run(request).await;
    if let Some(found) = found {
        let headers = response.headers_mut();
        headers.insert(HeaderName::from_static("deprecation"), header_value(format!("@{}", found.since)));
        headers.insert(HeaderName::from_static("sunset"), header_value(http_date(found.sunset)));
    }
    response
}

fn header_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("dates are ASCII")
}

/// `seconds` as an HTTP date (RFC 9110's IMF-fixdate), `Thu, 27 May 2027 00:00:00 GMT`.
pub fn http_date(seconds: i64) -> String {
    let time = chrono::DateTime::from_timestamp(seconds, 0).expect("a date in range");
    time.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// `seconds` as the document says it, `2027-05-27`.
fn day(seconds: i64) -> String {
    chrono::DateTime::from_timestamp(seconds, 0).expect("a date in range").format("%Y-%m-%d").to_string()
}

/// Marks the deprecated operations in the document and says, in each one's description, since
/// when, until when at least, and what to call instead.
pub struct MarkDeprecated;

impl utoipa::Modify for MarkDeprecated {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for found in DEPRECATED {
            let item = openapi.paths.paths.get_mut(found.route).expect("a deprecated route is in the document");
            let operation = match found.method {
                Method::GET => &mut item.get,
                Method::PUT => &mut item.put,
                Method::POST => &mut item.post,
                Method::DELETE => &mut item.delete,
                Method::PATCH => &mut item.patch,
                _ => unreachable!("the API has no other methods"),
            };
            let operation = operation.as_mut().expect("a deprecated operation is in the document");
            operation.deprecated = Some(utoipa::openapi::Deprecated::True);
            let note = format!(
                "**Deprecated** since {}; it may be removed from {} on (its answers say so in `Deprecation` and \
                 `Sunset` headers). Use {} instead.",
                day(found.since),
                day(found.sunset),
                found.instead
            );
            operation.description = Some(match operation.description.take() {
                Some(text) if !text.is_empty() => format!("{text}\n\n{note}"),
                _ => note,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DEPRECATED, http_date};

    #[test]
    fn dates_are_written_as_the_rfcs_say_and_sunsets_keep_the_policy() {
        assert_eq!(http_date(1_811_376_000), "Thu, 27 May 2027 00:00:00 GMT");
        for found in DEPRECATED {
            let since = chrono::DateTime::from_timestamp(found.since, 0).unwrap();
            let earliest = since.checked_add_months(chrono::Months::new(6)).unwrap();
            assert!(found.sunset >= earliest.timestamp(), "{} lives less than six months", found.route);
        }
    }
}
