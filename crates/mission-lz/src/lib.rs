//! The landing-zone agent of Mission Compute Service (`mission lz`).
//!
//! An agent runs on a compute host, connects *out* to the server with its landing zone's token
//! (the host needs no inbound port), advertises what the host offers, and runs the jobs the
//! server places on it, on the host itself or, from a cluster's login node, in Slurm. Layout:
//! - [`agent`]: the connection — hello, the order stream, heartbeats, reports, reconnects;
//! - `config`: how an agent is run; `dirs`: its own directories; `error`: why it stopped;
//! - `jobs`: the jobs an agent runs, the reports it owes of them, and what a job's life may
//!   use of the agent (its `JobContext`);
//! - [`client`]: the agent's side of the LZ protocol, its paths and its one retry policy;
//! - `lifecycle`: a job's life from staging to its final report, the same on every runner;
//! - [`gang`]: a landing zone's part of a job on several (its ranks' variables and hostfile, and
//!   `mission lz-exec`, how its processes start others on the other nodes);
//! - `runner`: what runs jobs — the seam (start a job, and a handle on it), and its `process`
//!   and `slurm` runners;
//! - `cache`: the content cache of input files; `output`: logs and results, for every runner;
//! - `podman`: jobs in container images, with Podman, and the landing zone's image cache;
//! - [`cgroups`]: memory and CPU limits through cgroup v1 or v2;
//! - [`sandbox`]: who a job runs as, what it sees, and that nothing of it outlives it;
//! - `workdirs`: the dirs jobs run in, reused from job to job;
//! - [`detect`]: CPUs, memory and NVIDIA GPUs of the host; `energy`: what a job's hardware drew
//!   (GPUs by NVML, processors and memory by RAPL), where it tells;
//! - [`slurm`]: what the agent reads from a Slurm cluster (nodes, jobs), for the Slurm runner.

pub mod agent;
mod cache;
pub mod cgroups;
pub mod client;
mod config;
pub mod detect;
mod dirs;
mod energy;
mod error;
pub mod gang;
mod jobs;
mod lifecycle;
mod output;
mod podman;
pub mod relay;
mod runner;
pub mod sandbox;
mod sessions;
mod shell;
pub mod slurm;
mod workdirs;

pub use agent::run;
pub use client::Backoff;
pub use config::{AgentConfig, RunnerKind};
pub use detect::Overrides;
pub use dirs::default_work_root;
pub use error::AgentError;
pub use mission_api::ContainerNetwork;
pub use podman::ContainerConfig;
pub use runner::slurm::{Pilots, SlurmConfig};
pub use sandbox::SandboxConfig;
pub use slurm::SiteOptions;
