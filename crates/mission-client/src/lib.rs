//! Rust SDK of Mission Compute Service.
//!
//! Sign in with the OAuth 2.0 device flow ([`auth`], spec §5), then call the operations of spec §4
//! on a [`Client`]:
//!
//! ```no_run
//! # async fn demo() -> Result<(), mission_client::Error> {
//! use mission_client::{Client, CreateMission, LoginOptions};
//! let client = Client::login("http://127.0.0.1:8080", LoginOptions::default()).await?;
//! let mission = client.create_mission(&CreateMission { name: "first".into(), ..Default::default() }).await?;
//! println!("created {}", mission.mission_id);
//! # Ok(()) }
//! ```
//!
//! Layout: [`client`] (the session, token renewal, request plumbing), [`auth`] (device flow,
//! refresh, token file), [`saved`] (the session `mission login` leaves), `missions`,
//! `mission_types`, `files`, `jobs`, `events`, `webhooks`, `stations`, `projects` and `cargo_bays` (the operations, as methods of
//! [`Client`]), [`error`].

mod audit;
pub mod auth;
mod cargo_bays;
pub mod client;
pub mod error;
mod events;
mod files;
mod images;
mod jobs;
mod mission_types;
mod missions;
mod projects;
pub mod saved;
mod shell;
mod stations;
pub mod version;
mod webhooks;

pub use audit::AuditQuery;
pub use auth::{DeviceAuth, Prompt, Tokens};
pub use client::{Client, LoginOptions};
pub use error::{Error, SignInError};
pub use events::{EventStream, WatchEvents};
pub use files::{DEFAULT_CONCURRENCY, TransferObserver, TransferOptions, TransferSummary, file_line};
pub use jobs::{JobResources, ListJobs, LogEvent, LogFollow, LogStream, UsageQuery, UsageReportQuery};
pub use missions::ListMissions;
pub use shell::{ShellEvent, ShellInput, ShellOutput, ShellRun, ShellTransport, shell_over};
pub use webhooks::ListDeliveries;

/// Event kinds and how a kind filter matches.
pub use mission_api::events as event_kinds;
/// The one rule for job labels, to check them before sending.
pub use mission_api::labels;
/// What a webhook receiver gets: the headers and the signed content.
pub use mission_api::webhooks as webhook_signing;
pub use mission_api::{
    AuditEntry, AuditPage, AuthConfig, BudgetPeriod, BudgetStatus, CargoBay, CargoBayKind, ContainerNetwork, Cost,
    CreateCargoBay, CreateMission, CreateProject, CreateStation, CreateWebhook, DEFAULT_CARGO_BAY_ID,
    DEFAULT_STATION_NAME, DeliveryStatus, DeviceAuthorization, Event, FileListing, Image, ImageFormat, ImageVisibility,
    ImportImage, Job, JobArray, JobGang, JobImage, JobPage, JobRef, JobSession, JobStatus, JobTransition, JobUsage,
    Labels, LandingZone, Launch, Mission, MissionPage, MissionType, MissionTypeSummary, PendingKind, PendingReason,
    Problem, Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectPage, ProjectRole, RegisterImageReference,
    RegisterLandingZone, RegisteredLandingZone, ResourceAmounts, Resources, ResourcesInUse, RetryOn, RetryPolicy,
    RunJob, RunJobArray, SessionKind, SessionRequest, Station, StationLimits, StationMember, UpdateJob, UpdateMission,
    UpdateProject, UpdateStation, UsageDay, UsageGroup, UsageReport, UsageSummary, User, Webhook, WebhookDelivery,
};
pub use uuid::Uuid;
