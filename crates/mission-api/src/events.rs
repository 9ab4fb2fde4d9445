//! Events: what happened to a user's missions and jobs, as `GET /api/v1/events` streams them
//! and webhooks deliver them.
//!
//! Each event has a number, `seq`, that orders it among every event of the service (across
//! replicas too); a client that reconnects with the last number it saw (`Last-Event-ID`) gets
//! every later event still inside the server's retention window.
//!
//! Kinds:
//! - `job.{status}` (`job.queued`, `job.running`, `job.completed`, …): a job moved; `data` has
//!   `status`, `detail`, `station_id`, `lz_id`, and for a final status `exit_code` and `reason`;
//! - `mission.created`, `mission.updated` (`data`: the mission), `mission.deleted`;
//! - `files.changed`: `data` has `path` and `change` (`uploaded` or `deleted`);
//! - `session.ending`: a session nears its time limit (10 minutes before, or at once when its
//!   limit is shorter): `data` has `minutes_left`, `time_limit` and `detail` in words;
//! - `shell.opened`: its owner opened a shell in a running job (`mission jobs shell`): `data`
//!   has `command` (absent for an interactive shell), `tty` and `detail` in words;
//! - `project.budget_warning`, to each member of a project that has spent 80% of its budget this
//!   period: `data` has `project_id`, `project`, `period`, `period_start`, `cpu_hours`,
//!   `gpu_hours`, `spent_cpu_hours`, `spent_gpu_hours` and `detail` in words.
//!
//! A kind filter matches a kind exactly or as its prefix before a dot (`job` matches every
//! `job.*`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One server-sent event of a `text/event-stream` answer, as the standard's fields carry it: the
/// `event` name (absent: `message`), its `data` as text (JSON text where the operation says so),
/// and its `id` where the stream is resumable. Only the API's description uses it: clients read
/// streams line by line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerSentEvent {
    /// The event's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Its data.
    pub data: String,
    /// Its id (`Last-Event-ID` resumes after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Its number: later events have larger ones. It is also the stream's event id.
    pub seq: u64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What happened: see the module's list.
    pub kind: String,
    /// The user whose mission or job it tells of.
    pub user_id: Uuid,
    /// The mission it concerns.
    pub mission_id: Option<Uuid>,
    /// The job it concerns, for `job.*`.
    pub job_id: Option<Uuid>,
    /// What the kind carries.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: serde_json::Value,
}

impl Event {
    /// The job status a `job.*` event moved to.
    pub fn job_status(&self) -> Option<crate::JobStatus> {
        self.kind.strip_prefix("job.")?.parse().ok()
    }
}

/// Whether `kind` is matched by the filter `wanted`: the same kind, or a prefix of it that ends
/// before a dot.
pub fn kind_matches(wanted: &str, kind: &str) -> bool {
    kind.strip_prefix(wanted).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_match_exactly_or_by_prefix() {
        assert!(kind_matches("job", "job.running"));
        assert!(kind_matches("job.running", "job.running"));
        assert!(!kind_matches("job.run", "job.running"));
        assert!(!kind_matches("jo", "job.running"));
        assert!(!kind_matches("mission", "job.running"));
    }
}
