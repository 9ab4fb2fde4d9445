//! The SDK's error type.

use std::path::PathBuf;

use mission_api::Problem;

/// What can go wrong calling the service.
///
/// ```no_run
/// # async fn demo(client: mission_client::Client, id: uuid::Uuid) -> Result<(), mission_client::Error> {
/// use mission_client::Error;
/// match client.get_mission_by_id(id).await {
///     Ok(mission) => println!("{}", mission.name),
///     Err(Error::NotFound(_)) => println!("no such mission"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource does not exist, or is not visible to the caller (404).
    #[error("not found: {0}")]
    NotFound(Problem),
    /// The access token was missing, expired or refused (401) and could not be renewed.
    #[error("not signed in: {0}")]
    Unauthorized(Problem),
    /// The caller may see the resource but not do this (403).
    #[error("forbidden: {0}")]
    Forbidden(Problem),
    /// Any other error answer of the service, with its problem document.
    #[error("{0}")]
    Api(Problem),
    /// There is no session to use: no server named or remembered, or no saved token.
    #[error("not signed in: {0}")]
    NotSignedIn(String),
    /// Signing in failed.
    #[error("sign-in failed: {0}")]
    SignIn(#[from] SignInError),
    /// The service could not be reached or the connection broke.
    #[error("cannot reach the service: {0}")]
    Http(#[from] reqwest::Error),
    /// The token file could not be read or written.
    #[error("token file {path}: {source}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A path cannot name a mission file (absolute, `..`, not UTF-8, …).
    #[error("invalid file path {0}")]
    InvalidPath(String),
    /// A URL given to the SDK is not valid.
    #[error("invalid URL {0:?}")]
    InvalidUrl(String),
    /// The service answered something the SDK does not understand.
    #[error("unexpected response: {0}")]
    Protocol(String),
    /// An event stream resumed after event `after`, but the events from there to `oldest` are
    /// gone (past the server's retention window).
    #[error("events {} to {} are no longer kept by the service", after + 1, oldest.saturating_sub(1))]
    EventsMissed {
        /// The last event seen.
        after: u64,
        /// The oldest event the service still keeps.
        oldest: u64,
    },
}

impl Error {
    /// The problem document of an error answer of the service.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::NotFound(p) | Error::Unauthorized(p) | Error::Forbidden(p) | Error::Api(p) => Some(p),
            _ => None,
        }
    }

    /// The HTTP status of an error answer of the service.
    pub fn status(&self) -> Option<u16> {
        self.problem().map(|p| p.status)
    }
}

/// Why the OAuth device flow or a refresh failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignInError {
    /// The user pressed Deny (`access_denied`).
    #[error("the sign-in request was denied")]
    Denied,
    /// The device code expired before the user approved it (`expired_token`, or its lifetime
    /// passed while polling).
    #[error("the sign-in code expired before it was approved; run the sign-in again")]
    Expired,
    /// The provider refused with an error that polling again cannot fix.
    #[error("the identity provider answered {status}: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// HTTP status.
        status: u16,
        /// OAuth error code, e.g. `invalid_grant`.
        error: String,
        /// The provider's explanation.
        description: Option<String>,
    },
    /// The provider answered something that is not an OAuth response.
    #[error("unexpected answer from the identity provider: {0}")]
    Protocol(String),
}
