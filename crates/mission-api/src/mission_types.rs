//! Mission types: the catalogue of frameworks a mission can be run with.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A mission type as `GET /api/v1/mission-types` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissionTypeSummary {
    /// Stable identifier.
    pub id: Uuid,
    /// Name of the framework type, e.g. `python`.
    pub name: String,
    /// Version label.
    pub version: String,
    /// One line on what the type runs.
    pub description: String,
}

/// Resources a job of this type gets when its request leaves them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceDefaults {
    /// CPUs.
    pub cpu_count: u32,
    /// Memory in megabytes.
    pub memory_amount: u64,
    /// GPUs.
    pub gpu_count: u32,
    /// Minutes a job may run; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<u32>,
}

/// A mission type in detail, as `GET /api/v1/mission-types/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissionType {
    /// Stable identifier.
    pub id: Uuid,
    /// Name of the framework type.
    pub name: String,
    /// Version label.
    pub version: String,
    /// What the type runs.
    pub description: String,
    /// Setting name to the expected type or options (the same map as `/settings`).
    pub settings: BTreeMap<String, String>,
    /// Command line a job runs; `{name}` is replaced by the setting `name`, `{args}` by the
    /// mission's arguments.
    pub command: Vec<String>,
    /// Resources a job gets when it asks for none.
    pub resources: ResourceDefaults,
}
