//! [`ApiError`]: every failure of an API handler, rendered as RFC 9457 problem+json.
//!
//! Handlers return `Result<_, ApiError>` and build errors with the constructors here, so each kind
//! of failure has one stable `type` URN and one status code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mission_api::{PROBLEM_CONTENT_TYPE, Problem};

use mission_store::StoreError;

/// An API failure.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    field: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self { status, kind, title, detail: detail.into(), field: None }
    }

    /// Names the request field at fault.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// 400: the request is malformed or a value is out of bounds.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "urn:mission:problem:invalid-request", "Invalid request", detail)
    }

    /// 400 naming a field and what is wrong with it.
    pub fn invalid_field(field: &str, detail: impl Into<String>) -> Self {
        Self::invalid(format!("{field}: {}", detail.into())).with_field(field)
    }

    /// 400: an id in the path or query is not a UUID.
    pub fn invalid_id(field: &str, value: &str) -> Self {
        Self::malformed_id(field, value, "is not a UUID")
    }

    /// 400: a job's id in the path is neither a UUID nor a job number.
    pub fn invalid_job_id(field: &str, value: &str) -> Self {
        Self::malformed_id(field, value, "is neither a job's id (a UUID) nor its number")
    }

    fn malformed_id(field: &str, value: &str, problem: &str) -> Self {
        let shown: String = value.chars().take(64).collect();
        Self::new(
            StatusCode::BAD_REQUEST,
            "urn:mission:problem:invalid-id",
            "Invalid id",
            format!("{field}: {shown:?} {problem}"),
        )
        .with_field(field)
    }

    /// 400: a mission setting is unknown to the mission type or has a wrong value.
    pub fn invalid_setting(name: &str, detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "urn:mission:problem:invalid-setting",
            "Invalid mission setting",
            format!("setting {name:?}: {}", detail.into()),
        )
        .with_field(format!("settings.{name}"))
    }

    /// 401: no valid access token.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "urn:mission:problem:unauthorized", "Unauthorized", detail)
    }

    /// 403: the caller may see the resource but not do this to it.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "urn:mission:problem:forbidden", "Forbidden", detail)
    }

    /// 404: no such resource, or one the caller may not know about.
    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, "urn:mission:problem:not-found", "Not found", format!("no {what} {id}"))
    }

    /// 404 for a path that matches no route.
    pub fn no_route(path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "urn:mission:problem:not-found", "Not found", format!("no endpoint at {path}"))
    }

    /// 405 for a known path with a method it does not take.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "urn:mission:problem:method-not-allowed",
            "Method not allowed",
            format!("{method} is not allowed on {path}"),
        )
    }

    /// 400: a client of Mission's own older than the server serves, naming the version to
    /// upgrade to.
    pub fn client_too_old(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "urn:mission:problem:client-too-old", "Client too old", detail)
    }

    /// 422: an `Idempotency-Key` that another request used.
    pub fn idempotency_key_reused(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:mission:problem:idempotency-key-reused",
            "Idempotency key reused",
            detail,
        )
        .with_field("Idempotency-Key")
    }

    /// 409: the request clashes with existing state.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "urn:mission:problem:conflict", "Conflict", detail)
    }

    /// 413: the body exceeds a size limit.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "urn:mission:problem:too-large", "Payload too large", detail)
    }

    /// 416: a `Range` outside the file.
    pub fn range_not_satisfiable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "urn:mission:problem:range-not-satisfiable",
            "Range not satisfiable",
            detail,
        )
    }

    /// 415: the body is not JSON.
    pub fn unsupported_media_type(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "urn:mission:problem:unsupported-media-type",
            "Unsupported media type",
            detail,
        )
    }

    /// 503: a dependency (the database, the identity provider) is not answering.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "urn:mission:problem:unavailable", "Service unavailable", detail)
    }

    /// 502: storage outside the server (a cargo bay) refused or failed.
    pub fn bad_gateway(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "urn:mission:problem:cargo-bay", "Cargo bay failed", detail)
    }

    /// 502: a session's landing zone or app could not be reached.
    pub fn session_unreachable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "urn:mission:problem:session-unreachable", "Session unreachable", detail)
    }

    /// 410: the session ended.
    pub fn session_ended(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "urn:mission:problem:session-ended", "Session ended", detail)
    }

    /// 503: the server holds as many connections as it may.
    pub fn too_many_connections() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "urn:mission:problem:busy",
            "Too many connections",
            "the server holds as many connections as it may; close idle ones or try again shortly",
        )
    }

    /// 500: a bug or an unexpected failure; the detail stays in the server log.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "urn:mission:problem:internal",
            "Internal server error",
            "the server failed to handle the request; its log has the cause",
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body this error renders.
    pub fn problem(&self) -> Problem {
        Problem {
            kind: self.kind.to_owned(),
            title: self.title.to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            field: self.field.clone(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(detail) => ApiError::conflict(detail),
            StoreError::Database(sqlx::Error::PoolTimedOut) => ApiError::unavailable("the database is busy"),
            other => ApiError::internal(other),
        }
    }
}

/// The HTTP edge of the domain layer: each refusal as its status, a store failure as
/// [`From<StoreError>`] makes it (logged here, once).
impl From<crate::domain::DomainError> for ApiError {
    fn from(e: crate::domain::DomainError) -> Self {
        use crate::domain::DomainError;
        match e {
            DomainError::Invalid { field, detail } => ApiError::invalid_field(&field, detail),
            DomainError::InvalidSetting { name, detail } => ApiError::invalid_setting(&name, detail),
            DomainError::NotFound { what, id } => ApiError::not_found(what, id),
            DomainError::Forbidden(detail) => ApiError::forbidden(detail),
            DomainError::Conflict(detail) => ApiError::conflict(detail),
            DomainError::Rejected(detail) => ApiError::invalid(detail),
            DomainError::TooLarge(detail) => ApiError::too_large(detail),
            DomainError::Storage(detail) => ApiError::bad_gateway(detail),
            DomainError::Internal(cause) => ApiError::internal(cause),
            DomainError::Store(e) => e.into(),
            DomainError::Scheduler(e) => e.into(),
        }
    }
}

/// The scheduler's refusals as their statuses.
impl From<mission_scheduler::SchedulerError> for ApiError {
    fn from(e: mission_scheduler::SchedulerError) -> Self {
        match e {
            mission_scheduler::SchedulerError::Invalid { field: Some(field), detail } => {
                ApiError::invalid(detail).with_field(field)
            }
            mission_scheduler::SchedulerError::Invalid { field: None, detail } => ApiError::invalid(detail),
            mission_scheduler::SchedulerError::Conflict(detail) => ApiError::conflict(detail),
            mission_scheduler::SchedulerError::Refused(detail) => ApiError::forbidden(detail),
            mission_scheduler::SchedulerError::Unavailable(detail) => ApiError::unavailable(detail),
            mission_scheduler::SchedulerError::Store(cause) => ApiError::internal(cause),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.problem()).expect("problem serialises");
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Result of an API handler.
pub type ApiResult<T> = Result<T, ApiError>;
