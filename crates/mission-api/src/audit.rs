//! The audit trail: who changed what through the API, the console, the galileo façade or the
//! CLI, as `GET /api/v1/audit` answers it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One change, as recorded in the transaction that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its number: later entries have higher ones.
    pub seq: u64,
    /// When the change was made.
    pub at: DateTime<Utc>,
    /// Who made it (absent for the service itself).
    pub actor_id: Option<Uuid>,
    /// Their username, while the account exists.
    pub actor: Option<String>,
    /// What they were when they made it: `admin` or `user`.
    pub actor_role: String,
    /// The id of the request that made it (its `X-Request-Id`).
    pub request_id: String,
    /// What was done, as `KIND.VERB`: `mission.create`, `job.stop`, `project.member.set`, ….
    pub action: String,
    /// The kind of resource changed: `mission`, `file`, `job`, `station`, `project`, ….
    pub target_kind: String,
    /// Its id (for a file, `MISSION_ID/PATH`).
    pub target_id: String,
    /// Its name, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    /// The project it belongs to, where it does: its managers see the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    /// What changed: the fields given (never a secret: passwords, tokens and keys are left out).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub changes: serde_json::Value,
}

/// The answer of `GET /api/v1/audit`: entries newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    /// The entries, newest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
}
