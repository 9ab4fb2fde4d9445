//! Wire types of Mission Compute Service, shared by the server, the landing-zone agent and the SDK.
//!
//! Everything here is plain data with `serde` derives and no I/O, so the SDK can depend on it
//! without pulling in the server. The layout follows the resources of the client interface:
//!
//! - [`missions`]: missions, their create/update requests and the listing page;
//! - [`mission_types`]: the mission-type catalogue as the API returns it;
//! - [`auth`]: the OAuth 2.0 device-flow messages and the server's auth configuration;
//! - [`cargo_bays`]: storage locations for input files and results;
//! - [`events`]: what happened to missions and jobs, as the event stream and webhooks send it;
//! - [`files`]: the listing entry of a mission file; [`paths`]: the one rule for file paths;
//! - [`stations`]: stations, their members and landing zones;
//! - [`jobs`]: jobs, their states, history and run requests; [`labels`]: the `key=value` labels
//!   jobs carry; [`lz`]: the landing-zone protocol;
//! - [`problem`]: the `application/problem+json` error body every endpoint returns on failure;
//! - [`tes`]: the GA4GH Task Execution Service's tasks, which run as jobs;
//! - [`projects`]: the teams that own missions and are charged for jobs, and their members;
//! - [`users`]: the signed-in user as `GET /api/v1/me` reports it;
//! - [`webhooks`]: URLs that events are POSTed to, signed, and their deliveries.

pub mod audit;
pub mod auth;
pub mod batch;
pub mod cargo_bays;
pub mod energy;
pub mod events;
pub mod files;
pub mod images;
pub mod jobs;
pub mod labels;
pub mod lz;
pub mod mission_types;
pub mod missions;
pub mod paths;
pub mod problem;
pub mod projects;
pub mod sessions;
pub mod shell;
pub mod stations;
pub mod tar;
pub mod tes;
pub mod users;
pub mod versions;
pub mod webhooks;

pub use audit::{AuditEntry, AuditPage};
pub use auth::{AuthConfig, DeviceAuthorization, OAuthError, TokenResponse};
pub use batch::{JobBatch, SubmitBatchJob};
pub use cargo_bays::{CargoBay, CargoBayKind, CreateCargoBay, DEFAULT_CARGO_BAY_ID};
pub use energy::{Cost, EnergyPart, EnergyParts, EnergySource, PriceBook, StationEnergy};
pub use events::Event;
pub use files::FileListing;
pub use images::{
    ContainerNetwork, Image, ImageFormat, ImageRef, ImageVisibility, ImportImage, RegisterImageReference,
    RegistryReference,
};
pub use jobs::{
    JOB_LOGS_FOLDER, Job, JobArray, JobGang, JobImage, JobPage, JobRef, JobStatus, JobTransition, JobUsage,
    KILLED_BY_SIGNAL_REASON, Launch, MAX_ARRAY_SIZE, MAX_ATTEMPTS, MAX_BACKOFF, MAX_DEPENDENCIES, MAX_NODES,
    MAX_RERUNS, MAX_TIME_LIMIT, MIN_LOG_CAP, OUT_OF_MEMORY_REASON, PendingKind, PendingReason, QueuePosition,
    RerunJobs, RetryOn, RetryPolicy, RunJob, RunJobArray, TIME_LIMIT_REASON, UpdateJob, UsageDay, UsageGroup,
    UsageReport, UsageSummary, WARNING_SIGNALS, WarningSignal,
};
pub use labels::Labels;
pub use mission_types::{MissionType, MissionTypeSummary, ResourceDefaults};
pub use missions::{CreateMission, MAX_ITEMS_PER_PAGE, Mission, MissionPage, UpdateMission, UpdateMissionArgs};
pub use problem::{PROBLEM_CONTENT_TYPE, Problem};
pub use projects::{
    BudgetPeriod, BudgetStatus, CreateProject, Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectPage,
    ProjectRole, ResourceAmounts, ResourcesInUse, SetProjectMember, StationLimits, UpdateProject,
};
pub use sessions::{JobSession, SessionKind, SessionRequest};
pub use stations::{
    CreateStation, DEFAULT_STATION_NAME, LandingZone, RegisterLandingZone, RegisteredLandingZone, Resources, Station,
    StationMember, UpdateStation,
};
pub use users::User;
pub use webhooks::{CreateWebhook, DeliveryStatus, Webhook, WebhookDelivery};

/// Path prefix of the versioned mission API.
pub const API_PREFIX: &str = "/api/v1";

/// Client id used when a caller names none (spec §5, "a default client identifier").
pub const DEFAULT_CLIENT_ID: &str = "mission-cli";

/// Scope requested by the device flow (spec §5, step 1).
pub const DEVICE_FLOW_SCOPE: &str = "email profile openid offline_access";

/// Grant type of the device-flow token poll (RFC 8628 §3.4).
pub const DEVICE_CODE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";
