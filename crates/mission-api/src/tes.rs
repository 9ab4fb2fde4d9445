//! GA4GH Task Execution Service 1.1 (`/ga4gh/tes/v1`): the wire types of its official schema
//! (`tes/ga4gh-tes-1.1.openapi.yaml` in the repository), field for field.
//!
//! A task is a job of its caller: it runs in its user's `tes tasks` mission of the project it is
//! charged to, so it is listed, limited, charged, audited and stopped like every other job. Its
//! task document is kept with it ([`crate::Job::task`]), and what its run left (each executor's
//! times, exit code and output tails, the outputs uploaded, why it failed) in its task log.
//!
//! Every field the schema leaves optional is an `Option` here, so a task reads back as it was
//! given: a client that compares what it sent with what it gets finds no field it did not send.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path prefix of the TES API.
pub const TES_PREFIX: &str = "/ga4gh/tes/v1";

/// A task's state, as the schema names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TesState {
    /// Never ours: the schema's default for a missing state.
    #[default]
    Unknown,
    /// Waiting for a landing zone with room for it (or for its dependencies).
    Queued,
    /// Placed on a landing zone, which fetches its images and inputs.
    Initializing,
    /// Its executors run.
    Running,
    /// Held: it keeps its place in line and does not start until released.
    Paused,
    /// Every executor ended well and the outputs are uploaded.
    Complete,
    /// An executor failed (and did not say `ignore_error`).
    ExecutorError,
    /// Something other than an executor failed: an input, an image, an upload, the host.
    SystemError,
    /// Its user cancelled it.
    Canceled,
    /// Its room was reclaimed (a borrowed slot, or a requeue) while it ran.
    Preempted,
    /// A cancel was ordered and the landing zone is ending it.
    Canceling,
}

impl TesState {
    /// Every state, in the schema's order.
    pub const ALL: [TesState; 11] = [
        Self::Unknown,
        Self::Queued,
        Self::Initializing,
        Self::Running,
        Self::Paused,
        Self::Complete,
        Self::ExecutorError,
        Self::SystemError,
        Self::Canceled,
        Self::Preempted,
        Self::Canceling,
    ];

    /// The wire name (`"QUEUED"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Queued => "QUEUED",
            Self::Initializing => "INITIALIZING",
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
            Self::Complete => "COMPLETE",
            Self::ExecutorError => "EXECUTOR_ERROR",
            Self::SystemError => "SYSTEM_ERROR",
            Self::Canceled => "CANCELED",
            Self::Preempted => "PREEMPTED",
            Self::Canceling => "CANCELING",
        }
    }
}

impl std::str::FromStr for TesState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|state| state.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown task state {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// How much of a task an answer shows (`view=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TesView {
    /// Its id and state.
    #[default]
    Minimal,
    /// All but the executors' output, inline input contents and the system logs.
    Basic,
    /// All of it.
    Full,
}

/// Whether an input or output is a file or a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TesFileType {
    /// One file.
    #[default]
    File,
    /// A directory: every file under a prefix or folder.
    Directory,
}

/// An input of a task: a file or directory put at `path` inside its containers, from `url` or
/// from `content` given inline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesInput {
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it comes from; required unless `content` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where it goes inside the containers, absolute.
    pub path: String,
    /// A file or a directory (an S3 prefix, a folder); a file when absent.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<TesFileType>,
    /// Its content, UTF-8; when given, `url` is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Whether it could be read as a stream; every input is downloaded whole here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamable: Option<bool>,
}

/// An output of a task: what its containers left at `path` (a file, a directory, or a glob
/// whose `path_prefix` is cut from each match), uploaded to `url` once the executors ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesOutput {
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it goes; a directory when `path` is a glob.
    pub url: String,
    /// What it is inside the containers, absolute; may hold POSIX wildcards.
    pub path: String,
    /// What is cut from the front of each match of a glob `path` to name it under `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// A file or a directory; a file when absent.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<TesFileType>,
}

/// One executor: a command run in an image, after the one before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesExecutor {
    /// The image: one the service holds, by name or digest, or a registry reference where the
    /// service allows it.
    pub image: String,
    /// Its program and arguments.
    pub command: Vec<String>,
    /// The directory it runs in; the image's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A file inside the container its standard input reads, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// A file inside the container its standard output goes to as well, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// A file inside the container its standard error goes to as well, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Its environment variables, besides the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Its failure does not end the task: the next executor runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_error: Option<bool>,
}

/// What a task asks for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TesResources {
    /// CPUs; the station's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<i32>,
    /// Whether it may run in room borrowed from another project (and be reclaimed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptible: Option<bool>,
    /// Memory in GB (10^9 bytes); the station's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_gb: Option<f64>,
    /// Scratch disk in GB: a task is refused where no landing zone has as much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_gb: Option<f64>,
    /// Stations it may run on, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// What only this service has ([`BACKEND_PARAMETERS`]), keys in any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_parameters: Option<BTreeMap<String, String>>,
    /// Refuse the task for a backend parameter this service does not take, instead of warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_parameters_strict: Option<bool>,
}

// Its numbers come from JSON, which has no NaN: equality is an equivalence.
impl Eq for TesResources {}

/// The backend parameters a task may give (their keys in any case): GPUs, the time limit in
/// minutes, the project it is charged to (also a tag, [`PROJECT_TAG`]), and the landing zones it
/// runs on at once (a gang: its executors run on each, its outputs are rank 0's).
pub const BACKEND_PARAMETERS: [&str; 4] = ["gpus", "time_limit_minutes", "project", "nodes"];

/// The tag that names the project a task is charged to (by name or id); the caller's own
/// personal project without it.
pub const PROJECT_TAG: &str = "project";

/// What one executor's run left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesExecutorLog {
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The tail of its standard output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// The tail of its standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Its exit code (128 + the signal's number for one ended by a signal).
    pub exit_code: i32,
}

/// One file a task uploaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesOutputFileLog {
    /// Where it went.
    pub url: String,
    /// Where it was inside the container.
    pub path: String,
    /// Its size in bytes, in a string (JSON numbers stop short of 64 bits).
    pub size_bytes: String,
}

/// What one run of a task left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesTaskLog {
    /// Each executor's, in order, as far as they ran.
    pub logs: Vec<TesExecutorLog>,
    /// What the service adds: the landing zone, the job's id and number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Every file uploaded, a directory's one by one.
    pub outputs: Vec<TesOutputFileLog>,
    /// What the service has to say about the run in words: where it ran, why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_logs: Option<Vec<String>>,
}

/// A task: what `POST /tasks` takes and `GET /tasks/{id}` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesTask {
    /// Given by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Given by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TesState>,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What is put in place before the first executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<TesInput>>,
    /// What is uploaded after the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<TesOutput>>,
    /// What it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<TesResources>,
    /// What it runs, one after another; at least one. A MINIMAL view shows none: the schema
    /// says that view is only the id and state, and that a task always has `executors`, so it
    /// is an empty list there.
    #[serde(default)]
    pub executors: Vec<TesExecutor>,
    /// Empty directories every executor sees at these paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<String>>,
    /// Its tags: they are the job's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// One per run (a retried or requeued task has several), given by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<TesTaskLog>>,
    /// RFC 3339, given by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
}

/// `POST /tasks`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesCreateTaskResponse {
    /// The new task's id.
    pub id: String,
}

/// `GET /tasks`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesListTasksResponse {
    /// The page's tasks, newest first.
    pub tasks: Vec<TesTask>,
    /// Where the next page starts; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// `POST /tasks/{id}:cancel`'s answer: an empty object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TesCancelTaskResponse {}

/// The most tasks one page lists (the schema: "less than 2048").
pub const MAX_PAGE_SIZE: u32 = 2047;

/// Tasks a page lists when the request does not say (the schema's default).
pub const DEFAULT_PAGE_SIZE: u32 = 256;

/// A task as its job keeps it ([`crate::Job::task`]): as it was given (without what the service
/// adds: its id, state, logs and creation time), with each executor's image as resolved when it
/// was submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTask {
    /// The task as given.
    pub task: TesTask,
    /// Its executors' images, in order.
    pub images: Vec<crate::JobImage>,
    /// Megabytes its landing zone must have free for its files (`resources.disk_gb`), 0 where
    /// it asks for none: it is placed only where that much is free.
    #[serde(default)]
    pub disk_mb: u64,
}

impl JobTask {
    /// Megabytes free on a landing zone a job needs ([`JobTask::disk_mb`]), 0 for none.
    pub fn disk_mb_of(job: &crate::Job) -> u64 {
        job.task.as_ref().map_or(0, |task| task.disk_mb)
    }

    /// The task as its landing zone is given it.
    pub fn assignment(&self) -> TaskAssignment {
        let inputs = self.task.inputs.iter().flatten().map(|input| TaskInput {
            path: input.path.clone(),
            kind: input.kind.unwrap_or_default(),
            source: match (&input.content, &input.url) {
                (Some(text), _) => InputSource::Content { text: text.clone() },
                (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                    InputSource::Web { url: url.clone() }
                }
                (None, url) => InputSource::Service { url: url.clone().unwrap_or_default() },
            },
        });
        let executors = self.task.executors.iter().zip(&self.images);
        TaskAssignment {
            inputs: inputs.collect(),
            executors: executors
                .map(|(executor, image)| TaskExecutor { executor: executor.clone(), image: image.clone() })
                .collect(),
            volumes: self.task.volumes.clone().unwrap_or_default(),
            outputs: self.task.outputs.clone().unwrap_or_default(),
        }
    }
}

/// A task as its landing zone is given it ([`crate::lz::Assignment::task`]): its inputs, each
/// with where the agent fetches it, its executors, each with its image resolved, its volumes
/// and outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAssignment {
    /// What is put in place before the first executor, in order.
    pub inputs: Vec<TaskInput>,
    /// What runs, in order.
    pub executors: Vec<TaskExecutor>,
    /// Directories every executor sees, empty at first.
    pub volumes: Vec<String>,
    /// What is uploaded after the executors (through `PUT /api/v1/lz/jobs/{id}/outputs/{n}/{path}`,
    /// `n` its index here).
    pub outputs: Vec<TesOutput>,
}

/// An input as its landing zone fetches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInput {
    /// Where it goes inside the containers, absolute.
    pub path: String,
    /// A file or a directory.
    pub kind: TesFileType,
    /// Where it comes from.
    pub source: InputSource,
}

/// Where a landing zone fetches an input from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum InputSource {
    /// The task gave it inline.
    Content {
        /// The file's text.
        text: String,
    },
    /// An `http://` or `https://` URL the agent fetches itself (a file only).
    Web {
        /// The URL.
        url: String,
    },
    /// Storage only the service reaches (`s3://`, `file://`, `mission://`): the agent lists it
    /// with `GET /api/v1/lz/jobs/{id}/inputs/{n}` ([`InputListing`]) and fetches each file with
    /// `GET /api/v1/lz/jobs/{id}/inputs/{n}/{path}`, `n` the input's index.
    Service {
        /// The URL, for what the agent says about it.
        url: String,
    },
}

/// The files of an input the service fetches for the agent, each with what identifies its
/// content (its store's entity tag, else its size and time), which the agent's cache keys it by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputListing {
    /// A file input's one file (path empty), or a directory's files by their paths under it.
    pub files: Vec<ListedFile>,
}

/// One file of an [`InputListing`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedFile {
    /// Its path under the input, `/`-separated; empty for a file input.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// What names this content of it at its store: an entity tag, or its modification time.
    pub version: String,
}

/// Where an output file a landing zone uploaded went (`PUT /api/v1/lz/jobs/{id}/outputs/…`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOutput {
    /// Its URL.
    pub url: String,
    /// Its size in bytes.
    pub size: u64,
}

/// An executor as its landing zone is given it: as the task gave it, with its image resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskExecutor {
    /// What it runs.
    pub executor: TesExecutor,
    /// The image it runs in, as the service resolved `executor.image` (fetched as a job's image
    /// is, by its digest).
    pub image: crate::JobImage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reads_back_as_it_was_given() {
        let given = serde_json::json!({
            "name": "md5",
            "inputs": [{"url": "s3://bucket/in.txt", "path": "/data/in.txt", "type": "FILE"},
                       {"content": "hello", "path": "/data/hello.txt"}],
            "outputs": [{"url": "s3://bucket/out/", "path": "/data/out/*.txt", "path_prefix": "/data/out/",
                         "type": "DIRECTORY"}],
            "resources": {"cpu_cores": 2, "ram_gb": 1.5, "backend_parameters": {"GPUS": "1"}},
            "executors": [{"image": "alpine", "command": ["md5sum", "/data/in.txt"], "ignore_error": true}],
            "volumes": ["/vol/A"],
            "tags": {"project": "genomics"}
        });
        let task: TesTask = serde_json::from_value(given.clone()).unwrap();
        assert_eq!(task.inputs.as_ref().unwrap()[1].content.as_deref(), Some("hello"));
        assert_eq!(task.outputs.as_ref().unwrap()[0].kind, Some(TesFileType::Directory));
        assert_eq!(serde_json::to_value(&task).unwrap(), given);
    }

    #[test]
    fn states_use_the_schemas_names() {
        for state in TesState::ALL {
            let wire = serde_json::to_value(state).unwrap();
            assert_eq!(wire, state.as_str());
            assert_eq!(state.as_str().parse::<TesState>(), Ok(state));
        }
        assert!("queued".parse::<TesState>().is_err());
    }
}
