//! Request extractors that fail with problem+json instead of axum's plain-text rejections.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use mission_api::MAX_ITEMS_PER_PAGE;
use uuid::Uuid;

use crate::error::ApiError;

/// Largest JSON body the API accepts.
pub const MAX_JSON_BODY_BYTES: usize = 1024 * 1024;

/// A JSON body; a malformed one is a 400 saying where, a missing content type a 415, an oversized
/// one a 413.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => {
                Err(ApiError::unsupported_media_type("send the body as Content-Type: application/json"))
            }
            Err(JsonRejection::BytesRejection(e)) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(format!("JSON bodies are limited to {MAX_JSON_BODY_BYTES} bytes")))
            }
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

/// Parses an id from the path or query, naming `field` when it is not a UUID.
pub fn parse_id(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| ApiError::invalid_id(field, raw))
}

/// The `page` of a listing: from 1.
pub fn page_number(value: &str) -> Result<u32, ApiError> {
    value
        .parse()
        .ok()
        .filter(|p| (1..=1_000_000).contains(p))
        .ok_or_else(|| ApiError::invalid_field("page", format!("expected an integer from 1, got {value:?}")))
}

/// The `items` of a listing: 1 to [`MAX_ITEMS_PER_PAGE`].
pub fn page_size(value: &str) -> Result<u32, ApiError> {
    value.parse().ok().filter(|n| (1..=MAX_ITEMS_PER_PAGE).contains(n)).ok_or_else(|| {
        ApiError::invalid_field("items", format!("expected an integer from 1 to {MAX_ITEMS_PER_PAGE}, got {value:?}"))
    })
}
