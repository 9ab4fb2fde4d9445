//! Stations and landing zones: where jobs run.
//!
//! A station is a shared pool of compute hosts with an access list; each of its landing zones
//! (LZs) is one compute host, or one gateway into a cluster, running the `mission lz` agent. Admins
//! create stations and name their owner; an owner manages the station's members and LZs; members
//! (everyone, for an `open` station) may run jobs there. A first start of the server creates the
//! open station [`DEFAULT_STATION_NAME`] holding the server's embedded LZ.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Name of the station a first start creates.
pub const DEFAULT_STATION_NAME: &str = "local";

/// A station as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Station {
    /// Id jobs name in `station_id`.
    pub station_id: Uuid,
    /// Unique name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// The user who manages members and landing zones; absent when only admins do (the default
    /// station).
    pub owner_id: Option<Uuid>,
    /// Whether every signed-in user may run jobs here (else members only).
    pub open: bool,
    /// Whether jobs running beyond their project's nominal limits here (borrowed room) are
    /// reclaimed when a project below its nominal needs the room: stopped gracefully and put
    /// back in line (default true).
    #[serde(default = "reclaims_by_default")]
    pub reclaim: bool,
    /// The network of the containers its jobs run in (see [`crate::images`]): the host's
    /// (default) or none. A landing zone may allow less (`mission lz --lz-container-network`).
    #[serde(default)]
    pub container_network: crate::ContainerNetwork,
    /// How its jobs' energy, carbon and cost are reckoned (the defaults where never set).
    #[serde(default)]
    pub energy: crate::StationEnergy,
    /// Why its grid intensity file could not be read when it was last read, where it could not:
    /// the last good value stays in `energy.grid_gco2e_per_kwh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid_intensity_problem: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/stations` (admins only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateStation {
    /// Unique name.
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Every signed-in user may run jobs here (default false: members only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<bool>,
    /// The user who will manage it (default: the caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<Uuid>,
    /// Reclaim borrowed room for projects below their nominal (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<bool>,
    /// The network of the containers its jobs run in (default: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_network: Option<crate::ContainerNetwork>,
}

/// Body of `PATCH /api/v1/stations/{id}` (its owner or an admin): what to change; absent
/// fields stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateStation {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Every signed-in user may run jobs here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<bool>,
    /// Reclaim borrowed room for projects below their nominal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<bool>,
    /// The network of the containers its jobs run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_network: Option<crate::ContainerNetwork>,
    /// How its jobs' energy, carbon and cost are reckoned from now on, as a whole (fields left
    /// out take their defaults); jobs that ended keep what they were charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<crate::StationEnergy>,
}

fn reclaims_by_default() -> bool {
    true
}

/// A member of a station.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StationMember {
    /// The user.
    pub user_id: Uuid,
    /// The user's name.
    pub username: String,
    /// When they were added.
    pub added_at: DateTime<Utc>,
}

/// What a landing zone offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resources {
    /// CPUs.
    pub cpu_count: u32,
    /// Memory in MB.
    pub memory_amount: u64,
    /// GPUs.
    pub gpu_count: u32,
}

/// A landing zone as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LandingZone {
    /// Id jobs name in `lz_id`.
    pub lz_id: Uuid,
    /// The station it belongs to.
    pub station_id: Uuid,
    /// Name, unique within the station.
    pub name: String,
    /// Whether its agent holds a live lease.
    pub online: bool,
    /// What its agent last advertised; absent before it first connected.
    pub resources: Option<Resources>,
    /// What the jobs placed on it and not yet ended hold (zero when none).
    #[serde(default)]
    pub in_use: Resources,
    /// When its agent was last heard from.
    pub last_seen_at: Option<DateTime<Utc>>,
    /// The cluster account a batch-system gateway (a Slurm landing zone) submits its jobs as:
    /// every job of this landing zone runs as that account and can read what it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_account: Option<String>,
    /// For a pilot (an ephemeral landing zone a gateway started inside a batch job): the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pilot_of: Option<Uuid>,
    /// Whether it runs jobs in container images (see [`crate::images`]), as its agent last said.
    #[serde(default)]
    pub images: bool,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/stations/{id}/lzs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterLandingZone {
    /// Name, unique within the station.
    pub name: String,
    /// For a gateway into a Slurm cluster: the cluster account its agent runs as (and submits
    /// every job as). Its agent must run as that account, and an agent of a landing zone
    /// registered without one must not be a gateway. Only the station's members' jobs go
    /// there: the station's owner decides who shares the account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_account: Option<String>,
}

/// Answer of `POST /api/v1/stations/{id}/lzs`: the new LZ and the token its agent signs in with.
/// The token is shown this once; the server keeps only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegisteredLandingZone {
    /// The landing zone.
    pub landing_zone: LandingZone,
    /// `mission lz --server URL --token TOKEN`.
    pub token: String,
}
