//! The domain layer: what the service does, with its validation and authorization, as typed
//! functions under the edges that call them.
//!
//! A function here takes the [`AppState`](crate::AppState), the [`Principal`]
//! acting and typed arguments (ids already parsed, bodies already decoded), and answers a
//! wire type or a [`DomainError`]. The REST handlers, the console and the galileo façade call
//! the same functions; only the HTTP edge turns a [`DomainError`] into an
//! [`ApiError`](crate::http::error::ApiError) (and logs a store failure's cause there, once).
//!
//! One module per resource: [`projects`], [`missions`] and their [`files`], [`jobs`],
//! [`stations`] (with their landing zones), [`cargo_bays`] and where a mission's files live
//! ([`bay_storage`]), [`images`] (with the check of an archive, `image_archive`),
//! [`webhooks`], [`users`], the built-in mission types ([`catalogue`]), and the [`audit`] trail.
//!
//! This is the middle floor: it uses [`crate::services`] and [`crate::config`], and knows
//! nothing of HTTP ([`crate::http`] is above it).

pub mod audit;
pub mod batch;
pub mod bay_storage;
pub mod cargo_bays;
pub mod catalogue;
pub mod files;
pub(crate) mod image_archive;
pub mod images;
pub mod jobs;
pub mod missions;
pub mod projects;
pub mod stations;
pub mod tes;
pub mod users;
pub mod webhooks;

use mission_store::StoreError;

/// The signed-in user an operation is done for (the HTTP edge says who: `crate::http::auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal {
    /// The user's id.
    pub user_id: uuid::Uuid,
    /// Whether the user is an administrator.
    pub admin: bool,
}

/// Why an operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// A value of the request is wrong: the field, and what is wrong with it.
    #[error("{field}: {detail}")]
    Invalid {
        /// The request field at fault (`labels.KEY` for one label).
        field: String,
        /// What is wrong, in words a user can act on.
        detail: String,
    },
    /// A mission's setting is unknown to its type, has a wrong value, or is missing where a job
    /// needs it.
    #[error("setting {name:?}: {detail}")]
    InvalidSetting {
        /// The setting.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// No such resource, or one the caller may not know about.
    #[error("no {what} {id}")]
    NotFound {
        /// What kind of resource (`project`).
        what: &'static str,
        /// The id or name asked for.
        id: String,
    },
    /// The caller may see the resource but not do this to it.
    #[error("{0}")]
    Forbidden(String),
    /// The request clashes with what is stored (a taken name, a project that holds missions).
    #[error("{0}")]
    Conflict(String),
    /// The request as a whole cannot be done, no one field at fault: S3 settings that open no
    /// client, a bay that cannot be listed, an upload whose body broke off.
    #[error("{0}")]
    Rejected(String),
    /// A file would take a mission or its owner past a limit of the server (which it names).
    #[error("{0}")]
    TooLarge(String),
    /// A cargo bay's storage refused or failed (the bay, and the storage's own words).
    #[error("{0}")]
    Storage(String),
    /// The server failed (a bug, or its own disk): the cause, logged at the HTTP edge.
    #[error("{0}")]
    Internal(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The scheduler refused or failed.
    #[error(transparent)]
    Scheduler(#[from] mission_scheduler::SchedulerError),
}

impl DomainError {
    /// A wrong value of `field`.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), detail: detail.into() }
    }

    /// A wrong (or missing) mission setting `name`.
    pub fn invalid_setting(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::InvalidSetting { name: name.into(), detail: detail.into() }
    }

    /// The server's own failure, with its cause.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::Internal(cause.to_string())
    }

    /// No `what` with this id (or none the caller may see).
    pub fn not_found(what: &'static str, id: impl std::fmt::Display) -> Self {
        Self::NotFound { what, id: id.to_string() }
    }
}

/// Result of a domain operation.
pub type DomainResult<T> = Result<T, DomainError>;

/// Longest name of a mission, project, station, landing zone or cargo bay, in characters.
pub const MAX_NAME_CHARS: usize = 256;
/// Filter values one listing or event stream may name, all its filters together.
pub const MAX_FILTER_VALUES: usize = 500;
/// Longest mission or project description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 10_000;

/// A name as given: at most [`MAX_NAME_CHARS`] characters, no control characters, not only
/// spaces (the OpenAPI document says the same with [`NAME_PATTERN`]); answered trimmed.
pub fn checked_name(name: &str) -> DomainResult<String> {
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(DomainError::invalid("name", format!("at most {MAX_NAME_CHARS} characters")));
    }
    if name.chars().any(char::is_control) {
        return Err(DomainError::invalid("name", "must not contain control characters"));
    }
    let name = name.trim();
    if name.is_empty() {
        return Err(DomainError::invalid("name", "must not be empty"));
    }
    Ok(name.to_owned())
}

/// Labels of a request, refused naming the label at fault (`labels.KEY`) when they break a rule.
pub fn checked_labels(labels: mission_api::Labels) -> DomainResult<mission_api::Labels> {
    mission_api::labels::check_labels(&labels).map_err(|e| {
        let field = if e.key.is_empty() { "labels".to_owned() } else { format!("labels.{}", e.key) };
        DomainError::invalid(field, e.problem)
    })?;
    Ok(labels)
}

/// A retry policy of a request, refused naming the field at fault when it cannot be.
pub fn checked_retry(retry: Option<mission_api::RetryPolicy>) -> DomainResult<Option<mission_api::RetryPolicy>> {
    if let Some((field, problem)) = retry.as_ref().and_then(mission_api::RetryPolicy::problem) {
        return Err(DomainError::invalid(field, problem));
    }
    Ok(retry)
}

/// [`checked_name`]'s rule as a JSON Schema pattern: no control character (Unicode's Cc), and
/// at least one character that is not a space.
pub const NAME_PATTERN: &str =
    r"^[^\u0000-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u001F\u007F-\u009F]*$";

/// A description of at most [`MAX_DESCRIPTION_CHARS`] characters, without NUL.
pub fn check_description(description: &str) -> DomainResult<()> {
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(DomainError::invalid("description", format!("at most {MAX_DESCRIPTION_CHARS} characters")));
    }
    if description.contains('\0') {
        return Err(DomainError::invalid("description", "must not contain NUL"));
    }
    Ok(())
}

/// The user named by id or username, if there is one.
pub async fn user_named(app: &crate::AppState, given: &str) -> DomainResult<Option<uuid::Uuid>> {
    let user = match uuid::Uuid::parse_str(given) {
        Ok(id) => app.store.user_by_id(id).await?,
        Err(_) => app.store.user_by_username(given).await?,
    };
    Ok(user.map(|u| u.user_id))
}

/// The user a path names (by id or username), to add to or take from a station or project:
/// not found when there is no such user.
pub async fn member_named(app: &crate::AppState, given: &str) -> DomainResult<uuid::Uuid> {
    user_named(app, given).await?.ok_or_else(|| DomainError::not_found("user", format!("{given:?}")))
}

/// An http(s) URL with a host and without credentials or a fragment, given as `field`: a place
/// the server itself sends requests to (an S3 endpoint, a webhook).
pub fn outbound_url(field: &str, raw: &str) -> DomainResult<url::Url> {
    let bad = |why: &str| DomainError::invalid(field, format!("{raw:?}: {why}"));
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad("must be an http:// or https:// URL"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(bad("must not carry credentials or a fragment"));
    }
    Ok(url)
}
