//! Jobs: runs of a mission on a station's landing zone, their states, history and results.
//!
//! A job moves `queued → assigned → staging → running → uploading → completed`, or ends early in
//! `failed`, `stopped` or `lost`. Every transition is kept, timestamped, in [`Job::history`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for a landing zone with room for it.
    Queued,
    /// Placed on a landing zone, which has not taken it up yet.
    Assigned,
    /// The landing zone is fetching the mission's files.
    Staging,
    /// The program runs.
    Running,
    /// The program ended; its results are being uploaded.
    Uploading,
    /// The program exited with status 0 and its results are stored.
    Completed,
    /// The program exited non-zero, was killed for exceeding its limits, or could not start.
    Failed,
    /// A user stopped it.
    Stopped,
    /// Its landing zone went silent while it ran.
    Lost,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 9] = [
        Self::Queued,
        Self::Assigned,
        Self::Staging,
        Self::Running,
        Self::Uploading,
        Self::Completed,
        Self::Failed,
        Self::Stopped,
        Self::Lost,
    ];

    /// The wire name (`"queued"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Assigned => "assigned",
            Self::Staging => "staging",
            Self::Running => "running",
            Self::Uploading => "uploading",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
            Self::Lost => "lost",
        }
    }

    /// Whether the job has ended (nothing changes it any more).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Stopped | Self::Lost)
    }

    /// Whether a landing zone holds the job (it counts against the LZ's resources).
    pub fn is_placed(self) -> bool {
        matches!(self, Self::Assigned | Self::Staging | Self::Running | Self::Uploading)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown job status {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// One transition of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobTransition {
    /// The status entered.
    pub status: JobStatus,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, when there is more to say (the LZ it was placed on, a failure's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A job as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    /// Identifier of the job.
    pub job_id: Uuid,
    /// Its number: unique in the service and given in the order jobs are submitted, so a later
    /// job has a larger one (the Slurm commands show it as the job's id). Accepted wherever a
    /// job's id is. 0 until the scheduler has queued it.
    #[serde(default)]
    pub number: u64,
    /// The mission it runs.
    pub mission_id: Uuid,
    /// The user who started it (the mission's owner).
    pub user_id: Uuid,
    /// The project it is charged to: its mission's, or the one its run request named.
    #[serde(default)]
    pub project_id: Uuid,
    /// The station it runs on.
    pub station_id: Uuid,
    /// The landing zone the request named, if any.
    pub requested_lz_id: Option<Uuid>,
    /// The landing zone it was placed on (absent while queued).
    pub lz_id: Option<Uuid>,
    /// Where it stands.
    pub status: JobStatus,
    /// CPUs it holds (the request, or the mission type's default).
    pub cpu_count: u32,
    /// Memory it holds, in megabytes.
    pub memory_amount: u64,
    /// GPUs it holds.
    pub gpu_count: u32,
    /// Minutes it may run before it is ended (`failed`, reason "time limit"); none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<u32>,
    /// Indices of the GPUs on its landing zone (`CUDA_VISIBLE_DEVICES`); empty without GPUs.
    pub gpu_indices: Vec<u32>,
    /// The program and arguments it runs, in the mission's folder.
    pub command: Vec<String>,
    /// Its labels, as given at run or changed since (`PATCH /jobs/{id}`).
    #[serde(default)]
    pub labels: crate::Labels,
    /// The most bytes of each of its output streams kept, as asked at run; absent: the server's
    /// `--job-log-cap`. See [`RunJob::log_cap`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_cap: Option<u64>,
    /// Its output passed the log cap: the log keeps the head and the tail, with a marker line
    /// where the rest was dropped.
    #[serde(default)]
    pub log_truncated: bool,
    /// Jobs that must complete before it may start ([`RunJob::after_ok`]).
    #[serde(default)]
    pub after_ok: Vec<Uuid>,
    /// Jobs that must end, however, before it may start ([`RunJob::after_any`]).
    #[serde(default)]
    pub after_any: Vec<Uuid>,
    /// Jobs that must end without completing before it may start ([`RunJob::after_not_ok`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_not_ok: Vec<Uuid>,
    /// How it is tried again after it fails: its run request's policy, or its mission's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The container image it runs in, as resolved when it was submitted; none: on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<JobImage>,
    /// Which attempt it is on, from 1; each retry is a move back to `queued` in its history.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The job it was started again from (`POST /jobs/{id}/rerun`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<Uuid>,
    /// The job array it is an element of ([`RunJobArray`]), if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_id: Option<Uuid>,
    /// Its index in that array, which its program finds in `MISSION_ARRAY_INDEX`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_index: Option<u32>,
    /// The number of that array: its first element's [`number`](Self::number) (element `N_I`,
    /// in Slurm's words, is the element of index `I` of the array numbered `N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_number: Option<u64>,
    /// The interactive session it is, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::JobSession>,
    /// The batch script it runs, in the directory it was submitted from, if it is a batch job
    /// ([`crate::batch`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::JobBatch>,
    /// The landing zones it runs on at once, where it asked for more than one ([`RunJob::nodes`]):
    /// absent for a job of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<JobGang>,
    /// The signal it gets before its time limit, or before a reclaim ends it ([`RunJob::signal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<WarningSignal>,
    /// It goes back in line, as its next attempt, when its time limit, a reclaim or a node's
    /// failure ends it ([`RunJob::requeue`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue: bool,
    /// The GA4GH TES task it runs, if it is one ([`crate::tes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub task: Option<Box<crate::tes::JobTask>>,
    /// When a stop was ordered for it on its landing zone, if one was: until it has ended, it
    /// is stopping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_ordered_at: Option<DateTime<Utc>>,
    /// Why it has not started yet, kept current while it waits: in the server's queue, or in a
    /// batch system's queue once placed on a gateway. Absent once it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_reason: Option<PendingReason>,
    /// Where it stands in line while queued: counted when read, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<QueuePosition>,
    /// What it used, once it ended (where its landing zone measured it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<JobUsage>,
    /// The program's exit status, once it exited.
    pub exit_code: Option<i32>,
    /// Why it failed, was stopped or was lost (`"out of memory"`, `"exit status 3"`, …).
    pub reason: Option<String>,
    /// How its resource limits were enforced on the landing zone, or why they could not be.
    pub limits: Option<String>,
    /// Every transition, oldest first.
    pub history: Vec<JobTransition>,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When its program started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A job as its caller names it: by id, or by [number](Job::number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    /// Its UUID.
    Id(Uuid),
    /// Its number (`4711`).
    Number(u64),
}

impl JobRef {
    /// A UUID or a number in decimal digits; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Self> {
        if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
            return raw.parse().ok().map(Self::Number);
        }
        Uuid::try_parse(raw).ok().map(Self::Id)
    }
}

impl std::str::FromStr for JobRef {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        Self::parse(raw).ok_or_else(|| format!("{raw:?} is neither a job's id (a UUID) nor its number"))
    }
}

impl std::fmt::Display for JobRef {
    /// As a path of the API takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(id) => id.fmt(f),
            Self::Number(number) => number.fmt(f),
        }
    }
}

impl From<Uuid> for JobRef {
    fn from(id: Uuid) -> Self {
        Self::Id(id)
    }
}

impl Job {
    /// A new job of `mission_id` by `user_id` on `station_id` running `command`, queued `now`
    /// (its history the one move to `queued`), asking for one CPU, 1024 MB and no GPU, charged to
    /// the user's personal project: every field a new job starts with, for callers to change with
    /// struct update syntax.
    pub fn queued(mission_id: Uuid, user_id: Uuid, station_id: Uuid, command: Vec<String>, now: DateTime<Utc>) -> Self {
        Self {
            job_id: Uuid::new_v4(),
            number: 0,
            mission_id,
            user_id,
            project_id: user_id,
            station_id,
            requested_lz_id: None,
            lz_id: None,
            status: JobStatus::Queued,
            cpu_count: 1,
            memory_amount: 1024,
            gpu_count: 0,
            time_limit: None,
            gpu_indices: Vec::new(),
            command,
            labels: crate::Labels::default(),
            log_cap: None,
            log_truncated: false,
            after_ok: Vec::new(),
            after_any: Vec::new(),
            after_not_ok: Vec::new(),
            retry: None,
            image: None,
            attempt: first_attempt(),
            rerun_of: None,
            array_id: None,
            array_index: None,
            array_number: None,
            session: None,
            batch: None,
            gang: None,
            signal: None,
            requeue: false,
            task: None,
            stop_ordered_at: None,
            pending_reason: None,
            position: None,
            usage: None,
            exit_code: None,
            reason: None,
            limits: None,
            history: vec![JobTransition { status: JobStatus::Queued, at: now, detail: None }],
            created_at: now,
            started_at: None,
            finished_at: None,
        }
    }
}

impl Job {
    /// How many landing zones it runs on: a gang's nodes, else 1.
    pub fn nodes(&self) -> u32 {
        self.gang.as_ref().map_or(1, |gang| gang.nodes)
    }

    /// What is wrong with asking for its node `node` (by rank), if anything.
    pub fn node_problem(&self, node: u32) -> Option<String> {
        let nodes = self.nodes();
        (node >= nodes).then(|| match nodes {
            1 => "the job runs on one landing zone: node 0".to_owned(),
            n => format!("the job runs on {n} nodes, 0 to {}", n - 1),
        })
    }
}

/// The container image a job runs in ([`Job::image`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobImage {
    /// The image (see [`crate::images`]).
    pub image_id: Uuid,
    /// Its digest: `sha256:` and the hex SHA-256 of its archive (a registry image's manifest
    /// digest).
    pub digest: String,
    /// For a registry image: the reference to pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// Where a queued job stands in line ([`Job::position`]): 1 is first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueuePosition {
    /// Among the queued jobs of its station, in submission order.
    pub station: u64,
    /// Among its user's queued jobs on the station (its own sub-queue), in submission order.
    pub own: u64,
}

/// Body of `POST /api/v1/missions/{id}/jobs`. Absent resources come from the mission type's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunJob {
    /// The station to run on.
    pub station_id: Uuid,
    /// One landing zone of that station, when the job must run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lz_id: Option<Uuid>,
    /// CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub cpu_count: Option<u32>,
    /// Memory in megabytes.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub memory_amount: Option<u64>,
    /// GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub gpu_count: Option<u32>,
    /// Minutes the job may run before it is ended (`failed`, reason "time limit"), 1 to
    /// 525,600 (a year); absent: the mission type's default, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub time_limit: Option<u32>,
    /// Labels to find the job by (`GET /jobs?label=key=value`): see [`crate::labels`].
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: crate::Labels,
    /// The most bytes of each output stream (stdout, stderr) to keep, from
    /// [`MIN_LOG_CAP`] up to the server's `--job-log-cap` (the default). Past the cap, output is
    /// dropped except its last quarter-cap bytes, which follow one marker line once the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub log_cap: Option<u64>,
    /// Jobs of the same user that must complete first (at most [`MAX_DEPENDENCIES`] with
    /// `after_any`). Should one end any other way, this job ends `failed` without running,
    /// its reason naming that job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_ok: Vec<Uuid>,
    /// Jobs of the same user that must end first, whatever their outcome.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_any: Vec<Uuid>,
    /// Jobs of the same user that must end without completing first (failed, stopped, lost:
    /// Slurm's `afternotok`). Should one complete, this job ends `failed` without running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_not_ok: Vec<Uuid>,
    /// How to try the job again should it fail; absent: the mission's default, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The project to charge the job to: one the caller may run jobs in; the mission's when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
    /// The container image to run in (a name or `sha256:` digest of an image the caller sees);
    /// absent: the mission's, if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Makes the job an interactive session, reached through the server at
    /// `/sessions/{job_id}/` by its owner (see [`crate::sessions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::SessionRequest>,
    /// How many landing zones (nodes) of its station it runs on at once, 1 to [`MAX_NODES`]: a
    /// gang, placed on all of them together or not at all, its CPUs, memory and GPUs asked of
    /// each. Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub nodes: Option<u32>,
    /// How a gang starts its command ([`Launch`]); absent: on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// A signal sent that long before the job's time limit (and before a reclaim of borrowed
    /// room ends it), so that it can write a checkpoint: Slurm's `[B:]SIG@SECONDS` (`USR1@60`),
    /// `B:` sending it to the job's main process alone rather than to all of its processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Put the job back in line, as its next attempt, when its time limit, a reclaim or a
    /// node's failure ends it; the results it left so far are its next attempt's inputs (a
    /// checkpoint to resume from), and `MISSION_RESTART_COUNT` tells each attempt which it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
}

/// A signal a job gets before it is ended ([`RunJob::signal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WarningSignal {
    /// Its name, without `SIG` (`USR1`).
    pub signal: String,
    /// How long before the end it is sent, in seconds.
    pub seconds: u32,
    /// Only the job's main process (a batch script's shell) gets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub main_only: bool,
}

/// The signals a job may ask to be warned with, by name (and number on Linux).
pub const WARNING_SIGNALS: [(&str, i32); 9] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("URG", 23),
];

/// The longest warning, in seconds (Slurm's).
pub const MAX_WARNING_SECONDS: u32 = 65_535;

impl WarningSignal {
    /// Reads Slurm's `[B:]SIG@SECONDS`: `SIG` a name (`USR1`, `SIGUSR1`) or number of
    /// [`WARNING_SIGNALS`], `SECONDS` 1 to [`MAX_WARNING_SECONDS`] (Slurm's default, 60, where
    /// `@SECONDS` is left out).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (main_only, rest) = match text.strip_prefix("B:") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (name, seconds) = match rest.split_once('@') {
            Some((name, seconds)) => {
                let seconds: u32 = seconds
                    .parse()
                    .ok()
                    .filter(|s| (1..=MAX_WARNING_SECONDS).contains(s))
                    .ok_or_else(|| format!("{text:?}: expected seconds, 1 to {MAX_WARNING_SECONDS}, after @"))?;
                (name, seconds)
            }
            None => (rest, 60),
        };
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        let known = WARNING_SIGNALS.iter().find(|(n, number)| *n == bare || number.to_string() == bare);
        let (signal, _) = known.ok_or_else(|| {
            let names: Vec<&str> = WARNING_SIGNALS.iter().map(|(n, _)| *n).collect();
            format!("{text:?}: expected [B:]SIG@SECONDS with SIG one of {}", names.join(", "))
        })?;
        Ok(Self { signal: (*signal).to_owned(), seconds, main_only })
    }

    /// Its number on Linux.
    pub fn number(&self) -> i32 {
        WARNING_SIGNALS.iter().find(|(name, _)| *name == self.signal).map_or(10, |(_, number)| *number)
    }
}

impl std::fmt::Display for WarningSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let main = if self.main_only { "B:" } else { "" };
        write!(f, "{main}{}@{}", self.signal, self.seconds)
    }
}

/// The most landing zones one job may run on at once.
pub const MAX_NODES: u32 = 1024;

/// How a job on several landing zones (a gang) starts its command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Launch {
    /// On every node, as `srun` and `torchrun` expect.
    #[default]
    Each,
    /// On the first node only, the others held for it, as a Slurm batch script is: it starts
    /// ranks there itself (`mpirun` through `mission lz-exec`).
    First,
}

impl Launch {
    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Each => "each",
            Self::First => "first",
        }
    }
}

/// What a job running on several landing zones at once (a gang) asked for and got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobGang {
    /// How many landing zones (nodes) it runs on, each holding its CPUs, memory and GPUs.
    pub nodes: u32,
    /// How it starts its command.
    #[serde(default)]
    pub launch: Launch,
    /// The landing zones it was placed on, in rank order (the first is the job's `lz_id`, and
    /// decides its exit); empty while it is queued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lz_ids: Vec<Uuid>,
}

/// A job's first attempt: the serde default of every `attempt` field, for messages written
/// before there were retries.
#[doc(hidden)]
pub fn first_attempt() -> u32 {
    1
}

/// What is wrong with a request: the field at fault (`retry.max_attempts`) and why.
pub type FieldProblem = (&'static str, String);

/// The most attempts a [`RetryPolicy`] may allow.
pub const MAX_ATTEMPTS: u32 = 20;

/// The longest [`RetryPolicy::backoff`], in seconds (a day).
pub const MAX_BACKOFF: u32 = 86_400;

/// How a job is tried again after it fails ([`RunJob::retry`], a mission's default
/// [`crate::CreateMission::retry`]). A retry puts the job back in the queue, as the same job: its
/// history shows each attempt's end, its final status is that of its last attempt, and its logs
/// go on from where the last attempt's ended. Jobs that wait for it ([`RunJob::after_ok`]) wait
/// for its last attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included: 1 (never again) to [`MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// The failures tried again; absent: all of them. A stopped job is never tried again.
    #[serde(default = "RetryOn::all")]
    pub on: Vec<RetryOn>,
    /// Seconds to wait before the second attempt, doubled before each one after; 0 (the
    /// default) to [`MAX_BACKOFF`].
    #[serde(default)]
    pub backoff: u32,
    /// After an attempt ran out of memory, the next asks for this many times its memory: 1 (the
    /// same) to 16; default 1.5.
    #[serde(default = "default_memory_factor")]
    pub memory_factor: f64,
    /// The most memory, in megabytes, that escalation asks for; it never asks for more than the
    /// largest landing zone the job may run on offers either.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_number")]
    pub max_memory: Option<u64>,
}

fn default_memory_factor() -> f64 {
    1.5
}

/// Its factor is checked finite, so equality is an equivalence.
impl Eq for RetryPolicy {}

impl RetryPolicy {
    /// What is wrong with the policy.
    pub fn problem(&self) -> Option<FieldProblem> {
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Some(("retry.max_attempts", format!("expected 1 to {MAX_ATTEMPTS} attempts")));
        }
        if self.on.is_empty() {
            return Some(("retry.on", "name at least one failure to retry, or leave it out for all".into()));
        }
        if self.backoff > MAX_BACKOFF {
            return Some(("retry.backoff", format!("expected seconds, 0 to {MAX_BACKOFF}")));
        }
        if !(1.0..=16.0).contains(&self.memory_factor) {
            return Some(("retry.memory_factor", "expected a factor from 1 to 16".into()));
        }
        if self.max_memory == Some(0) {
            return Some(("retry.max_memory", "expected megabytes, at least 1".into()));
        }
        None
    }

    /// Whether a job on its `attempt` that failed so is tried again.
    pub fn retries(&self, attempt: u32, failure: RetryOn) -> bool {
        attempt < self.max_attempts && self.on.contains(&failure)
    }

    /// The wait before attempt `next` (from 2): the backoff, doubled for each attempt after the
    /// second.
    pub fn delay_before(&self, next: u32) -> std::time::Duration {
        let doublings = next.saturating_sub(2).min(16);
        std::time::Duration::from_secs(u64::from(self.backoff) << doublings)
    }
}

/// The failures a [`RetryPolicy`] may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// The program exited non-zero or was killed by a signal.
    ExitCode,
    /// The program ran out of its memory.
    OutOfMemory,
    /// Its landing zone went silent or restarted while it ran.
    Lost,
    /// It ran past its time limit.
    TimeLimit,
}

impl RetryOn {
    /// Every failure.
    pub fn all() -> Vec<RetryOn> {
        vec![Self::ExitCode, Self::OutOfMemory, Self::Lost, Self::TimeLimit]
    }

    /// The wire name (`"exit_code"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExitCode => "exit_code",
            Self::OutOfMemory => "out_of_memory",
            Self::Lost => "lost",
            Self::TimeLimit => "time_limit",
        }
    }

    /// The failure a job's end was, if it is one a policy may retry: staging or uploading
    /// failures, stops and completions are not.
    pub fn of(status: JobStatus, exit_code: Option<i32>, reason: Option<&str>) -> Option<RetryOn> {
        match status {
            JobStatus::Lost => Some(Self::Lost),
            JobStatus::Failed => match reason {
                Some(OUT_OF_MEMORY_REASON) => Some(Self::OutOfMemory),
                Some(TIME_LIMIT_REASON) => Some(Self::TimeLimit),
                Some(reason) if exit_code.is_some_and(|c| c != 0) || reason.starts_with(KILLED_BY_SIGNAL_REASON) => {
                    Some(Self::ExitCode)
                }
                _ => None,
            },
            _ => None,
        }
    }
}

impl std::str::FromStr for RetryOn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::all()
            .into_iter()
            .find(|on| on.as_str() == s)
            .ok_or_else(|| format!("unknown failure {s:?}; expected exit_code, out_of_memory, lost or time_limit"))
    }
}

/// The reason a job whose program ran out of memory fails with, whatever ran it.
pub const OUT_OF_MEMORY_REASON: &str = "out of memory";

/// How the reason of a job whose program a signal killed starts (`killed by signal 9`),
/// whatever ran it.
pub const KILLED_BY_SIGNAL_REASON: &str = "killed by signal";

/// The reason a job that ran past its time limit fails with, whatever ran it.
pub const TIME_LIMIT_REASON: &str = "time limit";

/// The most jobs one job may wait for, `after_ok`, `after_any` and `after_not_ok` together.
pub const MAX_DEPENDENCIES: usize = 1000;

/// Why a job has not started yet ([`Job::pending_reason`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingReason {
    /// The cause, for scripts.
    pub kind: PendingKind,
    /// The cause in words: which landing zone, which resources, which job, how many ahead.
    pub detail: String,
}

/// The causes of [`PendingReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PendingKind {
    /// No landing zone that could run it is online.
    NoLandingZone,
    /// It waits for room on a landing zone (held for it: nothing later starts there first).
    Resources,
    /// Earlier jobs of its station are first in line for the room it needs.
    Priority,
    /// A job it waits for ([`RunJob::after_ok`], [`RunJob::after_any`]) has not ended yet.
    Dependency,
    /// Its user already runs as many jobs as the server allows one user at once.
    Quota,
    /// Placed on a gateway, it waits in the batch system's own queue, for the reason given.
    BatchSystem,
    /// An attempt failed, and its retry policy has the next wait a while first.
    Backoff,
    /// Its user holds it (`POST /api/v1/jobs/{id}/hold`, `sbatch --hold`) until they release it.
    Held,
}

impl PendingKind {
    /// Every kind.
    pub const ALL: [Self; 8] = [
        Self::NoLandingZone,
        Self::Resources,
        Self::Priority,
        Self::Dependency,
        Self::Quota,
        Self::BatchSystem,
        Self::Backoff,
        Self::Held,
    ];

    /// The wire name (`"no_landing_zone"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoLandingZone => "no_landing_zone",
            Self::Resources => "resources",
            Self::Priority => "priority",
            Self::Dependency => "dependency",
            Self::Quota => "quota",
            Self::BatchSystem => "batch_system",
            Self::Backoff => "backoff",
            Self::Held => "held",
        }
    }
}

impl std::str::FromStr for PendingKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == s).ok_or_else(|| format!("unknown pending reason {s:?}"))
    }
}

/// What a job used, as its landing zone measured it: from the job's cgroup on a host, from
/// `sacct` on a Slurm cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobUsage {
    /// Seconds its program ran.
    pub wall_time: f64,
    /// CPU seconds its processes used (user and system), where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<f64>,
    /// CPU time over the CPUs it held times its wall time: 1 when it kept every CPU it asked
    /// for busy. Computed by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_efficiency: Option<f64>,
    /// The most memory it held at once, in megabytes (rounded up), where measured; compare with
    /// `memory_amount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory: Option<u64>,
    /// The energy it drew in kWh, its data centre's overhead (the station's PUE) included: its
    /// parts' sum (`energy_parts`), each measured or modelled. Computed by the server as the job
    /// ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_kwh: Option<f64>,
    /// Grams of CO₂-equivalent: its energy times the station's grid intensity when it ended.
    /// Computed by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_g: Option<f64>,
    /// What it was charged by the station's prices, where the station has any. Computed by the
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::Cost>,
    /// Its energy's parts (processors, memory, GPUs) before the PUE, each saying whether it was
    /// measured (and how) or modelled. A landing zone reports the parts it measured; the server
    /// models the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_parts: Option<crate::EnergyParts>,
}

/// Its figures are never NaN (none is a quotient by zero), so equality is an equivalence.
impl Eq for JobUsage {}

impl JobUsage {
    /// Fills in [`JobUsage::cpu_efficiency`] for a job that held `cpus`.
    pub fn with_efficiency(mut self, cpus: u32) -> Self {
        self.cpu_efficiency = self
            .cpu_time
            .filter(|_| self.wall_time > 0.0 && cpus > 0)
            .map(|cpu| cpu / (f64::from(cpus) * self.wall_time));
        self
    }
}

/// Answer of `GET /api/v1/jobs/usage`: what the caller's ended jobs used, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageSummary {
    /// Jobs that ended and reported what they used.
    pub jobs: u64,
    /// Hours of wall time they ran, together.
    pub wall_hours: f64,
    /// CPU-hours they used (CPU time).
    pub cpu_hours: f64,
    /// CPU-hours they held: the CPUs each asked for times its wall time.
    pub cpu_hours_held: f64,
    /// The mean of their CPU efficiencies, where measured.
    pub mean_cpu_efficiency: Option<f64>,
    /// Jobs whose peak memory was less than half the memory they asked for.
    pub over_requested_memory: u64,
    /// The energy they drew in kWh ([`JobUsage::energy_kwh`], of the jobs reckoned it).
    #[serde(default)]
    pub energy_kwh: f64,
    /// Grams of CO₂-equivalent, of the same jobs.
    #[serde(default)]
    pub co2e_g: f64,
}

/// Its sums are never NaN, so equality is an equivalence.
impl Eq for UsageSummary {}

/// What the ended jobs of one group used: an entry of [`UsageReport::groups`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageGroup {
    /// The group: a project's or user's name, or a label's value (absent for the jobs without
    /// the label, and for a project or user since deleted).
    pub group: Option<String>,
    /// The project's or user's id (absent when grouped by a label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Uuid>,
    /// Jobs that ended.
    pub jobs: u64,
    /// Hours of wall time they ran, together.
    pub wall_hours: f64,
    /// CPU-hours they used (CPU time, where measured).
    pub cpu_hours: f64,
    /// CPU-hours they held: the CPUs each asked for times its wall time (what budgets charge).
    pub cpu_hours_held: f64,
    /// GPU-hours they held: the GPUs each asked for times its wall time.
    pub gpu_hours: f64,
    /// Gigabyte-hours of memory they held: the memory each asked for times its wall time.
    pub memory_gb_hours: f64,
    /// The mean of their CPU efficiencies, where measured.
    pub mean_cpu_efficiency: Option<f64>,
    /// The energy they drew in kWh (of the jobs that were reckoned: those that ended since
    /// version 41 of the schema, [`JobUsage::energy_kwh`]).
    #[serde(default)]
    pub energy_kwh: f64,
    /// Grams of CO₂-equivalent, of the same jobs.
    #[serde(default)]
    pub co2e_g: f64,
    /// What they were charged, one amount per currency (none where no station charged them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost: Vec<crate::Cost>,
    /// With `since`: their use per day (UTC) that one of them ended, by day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daily: Vec<UsageDay>,
}

/// What the ended jobs of a group used on one day (UTC): an entry of [`UsageGroup::daily`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageDay {
    /// The day their jobs ended on.
    pub day: chrono::NaiveDate,
    /// Jobs that ended that day.
    pub jobs: u64,
    /// CPU-hours they held.
    pub cpu_hours_held: f64,
    /// GPU-hours they held.
    pub gpu_hours: f64,
    /// kWh they drew.
    pub energy_kwh: f64,
    /// Grams of CO₂e.
    pub co2e_g: f64,
}

/// Answer of `GET /api/v1/usage`: what the ended jobs the caller may see used, per group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    /// How the jobs are grouped: `project`, `user` or `label:KEY`.
    pub group_by: String,
    /// Only jobs that ended at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Only jobs that ended before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// One per group, by group.
    pub groups: Vec<UsageGroup>,
}

impl UsageReport {
    /// The report as CSV: a header, then a row per group; the first two columns are the group
    /// and its id, named after what the jobs are grouped by (`project,project_id,…`,
    /// `user,user_id,…`, `label:KEY,…`), the last a `cost_CUR` column per currency charged.
    pub fn to_csv(&self) -> String {
        let (name, id) = match self.group_by.as_str() {
            "project" => ("project".to_owned(), "project_id"),
            "user" => ("user".to_owned(), "user_id"),
            label => (label.to_owned(), "id"),
        };
        let currencies: std::collections::BTreeSet<&str> =
            self.groups.iter().flat_map(|g| g.cost.iter().map(|c| c.currency.as_str())).collect();
        let mut csv = format!(
            "{},{id},jobs,wall_hours,cpu_hours,cpu_hours_held,gpu_hours,memory_gb_hours,mean_cpu_efficiency,\
             energy_kwh,co2e_g",
            csv_field(&name)
        );
        for currency in &currencies {
            csv.push_str(&format!(",cost_{}", csv_field(currency)));
        }
        csv.push('\n');
        for g in &self.groups {
            let optional = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
            csv.push_str(&format!(
                "{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{},{:.6},{:.3}",
                csv_field(g.group.as_deref().unwrap_or("")),
                g.id.map_or(String::new(), |id| id.to_string()),
                g.jobs,
                g.wall_hours,
                g.cpu_hours,
                g.cpu_hours_held,
                g.gpu_hours,
                g.memory_gb_hours,
                optional(g.mean_cpu_efficiency),
                g.energy_kwh,
                g.co2e_g,
            ));
            for currency in &currencies {
                let amount = g.cost.iter().find(|c| c.currency == *currency).map(|c| c.amount);
                csv.push_str(&format!(",{}", amount.map_or(String::new(), |a| format!("{a:.4}"))));
            }
            csv.push('\n');
        }
        csv
    }
}

/// A CSV field, quoted where it holds a comma, a quote or a line break (RFC 4180); one that a
/// spreadsheet would take for a formula starts with `'` (CWE-1236).
fn csv_field(value: &str) -> String {
    let value =
        if value.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{value}") } else { value.to_owned() };
    if value.contains([',', '"', '\n', '\r']) { format!("\"{}\"", value.replace('"', "\"\"")) } else { value }
}

/// The smallest log cap a job may ask for, in bytes.
pub const MIN_LOG_CAP: u64 = 1024;

/// Body of `PATCH /api/v1/jobs/{id}`: only the fields given change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateJob {
    /// New labels; replaces the whole map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<crate::Labels>,
}

/// An optional whole number that may be written with a fraction of zero (`4.0`), as JSON
/// Schema's `integer` allows and as clients that keep every number a float (Python's `json`
/// with floats, JavaScript) may send it.
pub(crate) fn whole_number<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64> + num_bounds::Max,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Whole(u64),
        Any(f64),
    }
    let whole = |n: u64| T::try_from(n).ok();
    let out_of_range =
        |shown: String| serde::de::Error::custom(format!("expected a whole number from 0 to {}, got {shown}", T::MAX));
    match Option::<Number>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Number::Whole(n)) => whole(n).map(Some).ok_or_else(|| out_of_range(n.to_string())),
        Some(Number::Any(x)) if x.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&x) => {
            whole(x as u64).map(Some).ok_or_else(|| out_of_range(x.to_string()))
        }
        Some(Number::Any(x)) => Err(out_of_range(x.to_string())),
    }
}

mod num_bounds {
    /// The largest value of an unsigned integer type, for messages.
    pub trait Max {
        const MAX: u64;
    }
    impl Max for u32 {
        const MAX: u64 = u32::MAX as u64;
    }
    impl Max for u64 {
        const MAX: u64 = u64::MAX;
    }
}

/// One page of `GET /api/v1/jobs`, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobPage {
    /// The jobs on this page.
    pub jobs: Vec<Job>,
    /// Page number, from 1.
    pub page: u32,
    /// Jobs per page.
    pub items: u32,
    /// Jobs matching the filters, on all pages.
    pub total: u64,
}

/// Body of `POST /api/v1/missions/{id}/job-arrays`: one job per element, each the run request
/// `run` with the element's index in `MISSION_ARRAY_INDEX` and its arguments after the mission's.
/// Give either `range` (with `arguments`, in which `{}` stands for the index) or
/// `argument_sets` (the indices are their places, from 0); at most [`MAX_ARRAY_SIZE`] elements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunJobArray {
    /// What every element runs with.
    pub run: RunJob,
    /// The indices, `FIRST-LAST` (`1-100`) or one number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// With `range`: the arguments of each element, `{}` replaced by its index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// The arguments of each element, one list per element.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argument_sets: Vec<Vec<String>>,
}

/// The most elements one job array may have.
pub const MAX_ARRAY_SIZE: u32 = 1_000_000;

impl RunJobArray {
    /// How many elements there are, and each element's index and arguments, made as they are
    /// taken (a million-element range is never a million argument lists at once); what is wrong
    /// otherwise.
    pub fn elements(&self) -> Result<(u32, ArrayElements<'_>), FieldProblem> {
        match (&self.range, self.argument_sets.is_empty()) {
            (Some(_), false) => Err(("range", "give range or argument_sets, not both".into())),
            (None, true) => Err(("range", "give the indices (range) or the argument_sets".into())),
            (None, false) => {
                if !self.arguments.is_empty() {
                    return Err(("arguments", "goes with range; argument_sets hold each element's".into()));
                }
                if self.argument_sets.len() > MAX_ARRAY_SIZE as usize {
                    return Err(("argument_sets", format!("at most {MAX_ARRAY_SIZE} elements")));
                }
                let size = self.argument_sets.len() as u32;
                Ok((size, ArrayElements { array: self, next: 0, last: size.checked_sub(1), sets: true }))
            }
            (Some(range), true) => {
                let (first, last) = parse_range(range).ok_or_else(|| {
                    ("range", format!("expected FIRST-LAST or one index, whole numbers, got {range:?}"))
                })?;
                if last - first >= MAX_ARRAY_SIZE {
                    return Err(("range", format!("at most {MAX_ARRAY_SIZE} elements")));
                }
                Ok((last - first + 1, ArrayElements { array: self, next: first, last: Some(last), sets: false }))
            }
        }
    }
}

/// The elements of a [`RunJobArray`], each its index and arguments ([`RunJobArray::elements`]).
#[derive(Debug)]
pub struct ArrayElements<'a> {
    array: &'a RunJobArray,
    next: u32,
    /// The last index; `None` once past it.
    last: Option<u32>,
    /// Indices are places in `argument_sets` (else a range, `{}` in `arguments` replaced).
    sets: bool,
}

impl Iterator for ArrayElements<'_> {
    type Item = (u32, Vec<String>);

    fn next(&mut self) -> Option<Self::Item> {
        let last = self.last?;
        let index = self.next;
        if index >= last {
            self.last = None;
        } else {
            self.next += 1;
        }
        let arguments = if self.sets {
            self.array.argument_sets[index as usize].clone()
        } else {
            self.array.arguments.iter().map(|a| a.replace("{}", &index.to_string())).collect()
        };
        Some((index, arguments))
    }
}

/// `FIRST-LAST` or `N`, first at most last.
fn parse_range(range: &str) -> Option<(u32, u32)> {
    let (first, last) = range.split_once('-').unwrap_or((range, range));
    let (first, last): (u32, u32) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (first <= last).then_some((first, last))
}

/// A job array and how far its elements got (`GET /api/v1/job-arrays/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobArray {
    /// The array (`GET /jobs?array_id=` lists its elements).
    pub array_id: Uuid,
    /// Its number: its first element's ([`Job::array_number`]).
    #[serde(default)]
    pub number: u64,
    /// The mission its elements run.
    pub mission_id: Uuid,
    /// Elements in all.
    pub size: u64,
    /// Elements waiting in the queue.
    pub queued: u64,
    /// Elements placed on a landing zone and not ended (assigned to uploading).
    pub running: u64,
    /// Elements that completed.
    pub completed: u64,
    /// Elements that failed or were lost.
    pub failed: u64,
    /// Elements that were stopped.
    pub stopped: u64,
}

/// Answer of `POST /api/v1/missions/{id}/jobs/rerun-failed`: the jobs started again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RerunJobs {
    /// The new jobs, in the order of the jobs they were started from (each names its own in
    /// `rerun_of`); empty when nothing had failed.
    pub jobs: Vec<Job>,
}

/// The most failed jobs one `rerun-failed` call starts again; a further call takes the rest.
pub const MAX_RERUNS: u32 = 10_000;

/// The longest time limit a job may have, in minutes (a year).
pub const MAX_TIME_LIMIT: u32 = 525_600;

/// Folder of a job's results holding its two logs (`stdout.log`, `stderr.log`). The landing zone
/// does not upload a top-level folder of this name from the work dir.
pub const JOB_LOGS_FOLDER: &str = "mission-logs";

#[cfg(test)]
mod whole_number_tests {
    use super::RunJob;

    #[test]
    fn resources_may_be_whole_numbers_written_as_floats_and_nothing_else() {
        let parse = |resources: &str| {
            serde_json::from_str::<RunJob>(&format!(
                r#"{{"station_id": "6d697373-696f-4e00-8000-000000000002"{resources}}}"#
            ))
        };
        let job = parse(r#", "cpu_count": 4.0, "memory_amount": 2048, "gpu_count": null"#).unwrap();
        assert_eq!((job.cpu_count, job.memory_amount, job.gpu_count), (Some(4), Some(2048), None));
        assert_eq!(parse("").unwrap().cpu_count, None);
        for bad in
            [r#", "cpu_count": 1.5"#, r#", "cpu_count": -1"#, r#", "gpu_count": 5000000000"#, r#", "cpu_count": "4""#]
        {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let error = parse(r#", "cpu_count": 1.5"#).unwrap_err().to_string();
        assert!(error.contains("expected a whole number from 0 to 4294967295, got 1.5"), "{error}");
    }
}

#[cfg(test)]
mod warning_signal_tests {
    use super::WarningSignal;

    #[test]
    fn slurms_signal_syntax_is_read_and_bad_ones_are_refused() {
        let usr1 = WarningSignal { signal: "USR1".into(), seconds: 10, main_only: false };
        assert_eq!(WarningSignal::parse("USR1@10"), Ok(usr1.clone()));
        assert_eq!(WarningSignal::parse("sigusr1@10"), Ok(usr1.clone()));
        assert_eq!(WarningSignal::parse("10@10"), Ok(usr1));
        let batch = WarningSignal::parse("B:TERM@300").unwrap();
        assert!(batch.main_only);
        assert_eq!((batch.number(), batch.to_string()), (15, "B:TERM@300".to_owned()));
        assert_eq!(WarningSignal::parse("USR2").unwrap().seconds, 60, "Slurm's default");
        for bad in ["KILL@10", "USR1@0", "USR1@65536", "USR1@", "@10", "B:", "USR1@ten", "9@1"] {
            assert!(WarningSignal::parse(bad).is_err(), "{bad}");
        }
    }
}
