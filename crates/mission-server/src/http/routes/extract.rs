//! Request extractors that fail with problem+json instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use mission_api::MAX_ITEMS_PER_PAGE;
use uuid::Uuid;

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::ApiError;
use mission_api::JobRef;

/// Largest JSON body the API accepts.
pub const MAX_JSON_BODY_BYTES: usize = 1024 * 1024;

/// A JSON body; a malformed one is a 400 saying where, a missing content type a 415, an
/// oversized one a 413. It must be an object (serde would take an array for a struct, field by
/// field in order, which the API does not document), unless `OBJECT` is false (a list).
pub struct ApiJson<T, const OBJECT: bool = true>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned, const OBJECT: bool> FromRequest<S> for ApiJson<T, OBJECT> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let media_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let media_type = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if media_type != "application/json"
            && !(media_type.starts_with("application/") && media_type.ends_with("+json"))
        {
            return Err(ApiError::unsupported_media_type("send the body as Content-Type: application/json"));
        }
        let body = match Bytes::from_request(req, state).await {
            Ok(body) => body,
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::too_large(format!("JSON bodies are limited to {MAX_JSON_BODY_BYTES} bytes")));
            }
            Err(e) => return Err(ApiError::invalid(e.body_text())),
        };
        if OBJECT && body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid("the body must be a JSON object"));
        }
        match axum::Json::<T>::from_bytes(&body) {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(e) => Err(ApiError::invalid(e.body_text())),
        }
    }
}

/// The query string as ordered `(key, value)` pairs, so list filters can repeat a key
/// (`?names=a&names=b`).
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query)
            .map(QueryPairs)
            .map_err(|e| ApiError::invalid(format!("malformed query string: {e}")))
    }
}

/// The job a path names by id or by number (`4711`), as its caller may know it.
pub async fn job_id(app: &AppState, who: Principal, raw: &str) -> Result<Uuid, ApiError> {
    let named = JobRef::parse(raw).ok_or_else(|| ApiError::invalid_job_id("job_id", raw))?;
    Ok(crate::domain::jobs::resolve(app, who, named).await?)
}

/// Parses an id from the path or query, naming `field` when it is not a UUID.
pub fn parse_id(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| ApiError::invalid_id(field, raw))
}

/// The last page a listing serves.
pub const MAX_PAGE: u32 = 1_000_000;

/// The `page` of a listing: 1 to [`MAX_PAGE`].
pub fn page_number(value: &str) -> Result<u32, ApiError> {
    value.parse().ok().filter(|p| (1..=MAX_PAGE).contains(p)).ok_or_else(|| {
        ApiError::invalid_field("page", format!("expected an integer from 1 to {MAX_PAGE}, got {value:?}"))
    })
}

/// The `items` of a listing: 1 to [`MAX_ITEMS_PER_PAGE`].
pub fn page_size(value: &str) -> Result<u32, ApiError> {
    value.parse().ok().filter(|n| (1..=MAX_ITEMS_PER_PAGE).contains(n)).ok_or_else(|| {
        ApiError::invalid_field("items", format!("expected an integer from 1 to {MAX_ITEMS_PER_PAGE}, got {value:?}"))
    })
}

/// Adds one `label=key=value` list filter to `filters`, refusing a bad label or too many.
pub fn push_label_filter(filters: &mut Vec<(String, String)>, value: &str) -> Result<(), ApiError> {
    use mission_api::labels::{MAX_LABELS, parse_label};
    if filters.len() == MAX_LABELS {
        return Err(ApiError::invalid_field("label", format!("at most {MAX_LABELS} labels")));
    }
    filters.push(parse_label(value).map_err(|e| ApiError::invalid_field("label", e.problem))?);
    Ok(())
}

/// A query parameter's time, RFC 3339.
pub(crate) fn rfc3339(field: &str, value: &str) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    let time = chrono::DateTime::parse_from_rfc3339(value)
        .map_err(|e| ApiError::invalid_field(field, format!("expected a time like 2026-11-24T09:00:00Z: {e}")))?;
    Ok(time.to_utc())
}
