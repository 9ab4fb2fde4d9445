//! Why an agent stopped ([`AgentError`]).

use std::path::PathBuf;

use crate::sandbox::SandboxError;

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The server refused the agent: it does not know the token, or the agent is not what its
    /// landing zone was registered as.
    #[error("the server refused this landing zone's agent: {0}")]
    TokenRefused(String),
    /// The data dir or the work root cannot be used.
    #[error("{0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    /// Jobs cannot be confined as configured.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// The batch system cannot be used.
    #[error("{0}")]
    BatchSystem(String),
}
