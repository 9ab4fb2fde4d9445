//! Missions: a unit of work with input files, settings of its mission type and arguments.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Largest `items` a mission listing accepts.
pub const MAX_ITEMS_PER_PAGE: u32 = 200;

/// A mission as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Mission {
    /// Identifier of the mission.
    pub mission_id: Uuid,
    /// Human-readable name.
    pub name: String,
    /// Free text, empty by default.
    pub description: String,
    /// The mission's type, which decides its settings and how jobs run it.
    pub mission_type_id: Option<Uuid>,
    /// Cargo bay the input files live in; the server's default storage when absent.
    pub source_storage_id: Option<Uuid>,
    /// Cargo bay job results go to; the server's default storage when absent.
    pub destination_storage_id: Option<Uuid>,
    /// Root directory in the source cargo bay.
    pub source_path: Option<String>,
    /// Root directory in the destination cargo bay.
    pub destination_path: Option<String>,
    /// Settings of the mission type, checked against its schema.
    pub settings: BTreeMap<String, String>,
    /// Whether other users may read the mission.
    pub public: bool,
    /// Whether the mission is archived (hidden from `archived=false` listings).
    pub archived: bool,
    /// Arguments passed to the mission's program, set with `PATCH /missions/{id}`.
    pub args: Vec<String>,
    /// Its labels, set at create or with `PATCH /missions/{id}` (see [`crate::labels`]).
    #[serde(default)]
    pub labels: crate::Labels,
    /// How its jobs are tried again after they fail, unless their run request says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::RetryPolicy>,
    /// The container image its jobs run in (a name or a `sha256:` digest, see
    /// [`crate::images`]), unless their run request names another; none: on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Owner of the mission.
    pub user_id: Uuid,
    /// The project it belongs to, which its jobs are charged to (see [`crate::projects`]).
    pub project_id: Uuid,
    /// When the mission was created.
    pub created_at: DateTime<Utc>,
    /// When the mission last changed.
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/missions` (spec "Mission create request").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateMission {
    /// Human-readable name; required, 1 to 256 characters.
    pub name: String,
    /// Free text; empty when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Cargo bay used as data source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_storage_id: Option<Uuid>,
    /// Cargo bay used as data destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_storage_id: Option<Uuid>,
    /// Root directory in the source cargo bay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    /// Root directory in the destination cargo bay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_path: Option<String>,
    /// The mission's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_type_id: Option<Uuid>,
    /// Settings of the mission type; see `GET /mission-types/{id}/settings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<BTreeMap<String, String>>,
    /// List the mission as public; private when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    /// Labels to find the mission by (`GET /missions?label=key=value`): see [`crate::labels`].
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: crate::Labels,
    /// How its jobs are tried again after they fail, unless their run request says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::RetryPolicy>,
    /// The project it belongs to: one the caller may run jobs in (a member or manager of it);
    /// the caller's personal project when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    /// The container image its jobs run in: the name or `sha256:` digest of an image the
    /// caller sees (see [`crate::images`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// Body of `PATCH /api/v1/missions/{id}`: only the fields given change.
///
/// `public` is deliberately absent (the spec's update operation takes no such parameter); sending
/// it is a 400 naming the field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateMission {
    /// New name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// New source cargo bay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_storage_id: Option<Uuid>,
    /// New destination cargo bay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_storage_id: Option<Uuid>,
    /// New source root directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    /// New destination root directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_path: Option<String>,
    /// New settings; replaces the whole map and is checked against the mission's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<BTreeMap<String, String>>,
    /// Archive (`true`) or restore (`false`) the mission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// New labels; replaces the whole map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<crate::Labels>,
    /// A new default retry policy for its jobs (`{"max_attempts": 1}`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::RetryPolicy>,
    /// Move it to another project, one its owner may run jobs in (jobs already started stay
    /// charged where they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    /// A new container image for its jobs (a name or `sha256:` digest); `""`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// New arguments for its program, in order; replaces the whole list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

/// Body of `PUT /api/v1/missions/{id}/args` (deprecated: `PATCH` the mission's `args`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateMissionArgs {
    /// The program's arguments, in order.
    pub args: Vec<String>,
}

/// One page of `GET /api/v1/missions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissionPage {
    /// The missions on this page, newest first.
    pub missions: Vec<Mission>,
    /// Page number, from 1.
    pub page: u32,
    /// Page size asked for.
    pub items: u32,
    /// Whether a further page has missions.
    pub has_more: bool,
}
