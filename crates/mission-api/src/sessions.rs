//! Interactive sessions: jobs whose program serves HTTP on a loopback port of its landing zone,
//! reached through the server at `{public_url}/sessions/{job_id}/` by their owner alone.
//!
//! The landing zone's agent picks the port and tells the program in
//! [`PORT_VARIABLE`]; the server's proxy reaches it over a tunnel the agent opens out to the
//! server, so the compute host needs no inbound port and no SSH.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The variable a session's program finds its loopback port in.
pub const PORT_VARIABLE: &str = "MISSION_SESSION_PORT";

/// The variable a session's program finds the path it is served under in
/// (`/sessions/{job_id}/`), for apps that write absolute links.
pub const BASE_PATH_VARIABLE: &str = "MISSION_SESSION_BASE_PATH";

/// The variable a session's program finds its secret in: every request the proxy forwards
/// carries it in [`TOKEN_HEADER`], so an app on a shared host can refuse other local users.
pub const TOKEN_VARIABLE: &str = "MISSION_SESSION_TOKEN";

/// The header forwarded requests carry the session's secret in.
pub const TOKEN_HEADER: &str = "x-mission-session-token";

/// Longest idle timeout, in minutes (a week).
pub const MAX_IDLE_TIMEOUT: u32 = 10_080;

/// How long before its time limit a session's owner is warned (`session.ending`).
pub const ENDING_WARNING_MINUTES: u32 = 10;

/// Body of the agent's `POST /api/v1/lz/jobs/{id}/session/ending`: the session reaches its time
/// limit in `minutes_left` minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnding {
    /// Minutes until its time limit ends it.
    pub minutes_left: u32,
}

/// What serves a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// The mission's own command, serving HTTP on `MISSION_SESSION_PORT`; it is reached with
    /// the `/sessions/{job_id}` prefix taken off the path.
    Web,
    /// Jupyter Lab (`jupyter lab`, from the job's `PATH`), served under the session's base path,
    /// with the proxy's secret as its token.
    Jupyter,
    /// VS Code in the browser (`code-server`, or `openvscode-server`, from the job's `PATH`).
    Vscode,
}

impl SessionKind {
    /// The name the API and the command line use.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Web => "web",
            SessionKind::Jupyter => "jupyter",
            SessionKind::Vscode => "vscode",
        }
    }
}

impl std::str::FromStr for SessionKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "web" => Ok(SessionKind::Web),
            "jupyter" => Ok(SessionKind::Jupyter),
            "vscode" => Ok(SessionKind::Vscode),
            other => Err(format!("expected web, jupyter or vscode, got {other:?}")),
        }
    }
}

/// A run request's `session`: the job is an interactive session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    /// What serves it.
    pub kind: SessionKind,
    /// Minutes without a request through the proxy after which the session ends (1 to 10,080);
    /// absent: it runs until its time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10080))]
    pub idle_timeout: Option<u32>,
    /// Whether the managers of the project its job is charged to may open it too (its owner's
    /// choice; nobody else ever may).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share_with_managers: bool,
}

/// A job's `session`, when it is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobSession {
    /// What serves it.
    pub kind: SessionKind,
    /// Its idle timeout in minutes, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<u32>,
    /// Whether its project's managers may open it too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub share_with_managers: bool,
    /// Where its owner opens it, once its port answers, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When its port first answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<DateTime<Utc>>,
}

impl JobSession {
    /// A session as requested, not ready yet.
    pub fn requested(request: SessionRequest) -> Self {
        let SessionRequest { kind, idle_timeout, share_with_managers } = request;
        JobSession { kind, idle_timeout, share_with_managers, url: None, ready_at: None }
    }

    /// The request it was started with (to start it again, say).
    pub fn request(&self) -> SessionRequest {
        SessionRequest {
            kind: self.kind,
            idle_timeout: self.idle_timeout,
            share_with_managers: self.share_with_managers,
        }
    }
}

/// The path a session is served under.
pub fn base_path(job_id: uuid::Uuid) -> String {
    format!("/sessions/{job_id}/")
}
