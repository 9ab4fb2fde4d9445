//! `mission lz`: run a landing-zone agent on this host.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Name of the landing zone `mission server` runs on its default station.
pub const EMBEDDED_LZ_NAME: &str = "local";

/// Run a landing-zone agent: take jobs from a server's station and run them on this host.
///
/// Register the landing zone first (an admin or the station's owner):
///   mission stations add-lz STATION NAME      (prints the token once)
/// then run, on the compute host:
///   MISSION_LZ_TOKEN=TOKEN mission lz --server URL
/// The agent connects out to the server (the host needs no inbound port), offers the host's CPUs,
/// memory and GPUs (found with nvidia-smi), and reconnects by itself when the server restarts.
/// Where the service runs as several replicas, name them all (--server URL1,URL2,…): the agent
/// moves to the next when its connection breaks. A load balancer's one URL works as well.
///
/// Jobs are untrusted code. Run the agent as root: then each job runs as a uid of its own (see
/// --lz-job-uids), in PID and mount namespaces of its own, under cgroup memory and CPU limits,
/// and cannot read, write or signal anything but its own work dir and processes. An agent that is
/// not root runs jobs as its own user, and so only the jobs of admins and of the station's owner
/// (see --lz-allow-unisolated).
#[derive(Debug, Args)]
pub struct LzCommand {
    /// The landing zone's token (prefer the environment variable: arguments are visible to
    /// other users of the host).
    #[arg(long, env = "MISSION_LZ_TOKEN", hide_env_values = true)]
    token: String,
    /// Folder for work dirs and the cache of input files.
    #[arg(long, env = "MISSION_LZ_DATA_DIR", default_value = "./mission-lz")]
    data_dir: PathBuf,
    #[command(flatten)]
    resources: ResourceArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Who a landing zone's jobs run as, and where.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Uids handed out to jobs (as root), one of its own per running job, FIRST-LAST. Agents on
    /// one host share the range safely (they claim uids through /run/mission-lz/uids).
    #[arg(long = "lz-job-uids", env = "MISSION_LZ_JOB_UIDS", default_value = "2000000000-2000009999",
          value_parser = mission_lz::sandbox::parse_uid_range)]
    job_uids: (u32, u32),
    /// Run every job as this user instead (a name, a UID, or UID:GID); needs root. Jobs of different
    /// users can then signal each other's processes.
    #[arg(long = "lz-job-user", env = "MISSION_LZ_JOB_USER")]
    job_user: Option<String>,
    /// Where the agent cannot run jobs as users of their own (it is not root), run every user's
    /// jobs anyway, as the agent's own user: they can then read and change whatever the agent can.
    /// Off: only the jobs of admins and of the station's owner run there.
    #[arg(long = "lz-allow-unisolated", env = "MISSION_LZ_ALLOW_UNISOLATED")]
    allow_unisolated: bool,
    /// Folder for the jobs' work dirs, outside every data dir (default:
    /// /var/tmp/mission-lz-UID/HASH-OF-THE-DATA-DIR).
    #[arg(long = "lz-work-root", env = "MISSION_LZ_WORK_ROOT")]
    work_root: Option<PathBuf>,
}

impl SandboxArgs {
    /// The agent's sandbox settings; `private_dirs` are hidden from jobs besides its data dir.
    pub fn config(&self, private_dirs: Vec<PathBuf>) -> mission_lz::SandboxConfig {
        mission_lz::SandboxConfig {
            job_uids: self.job_uids,
            job_user: self.job_user.clone(),
            allow_unisolated: self.allow_unisolated,
            private_dirs,
            work_root: self.work_root.clone().unwrap_or_default(),
        }
    }
}

/// What a landing zone offers, when not what the host has.
#[derive(Debug, Args)]
pub struct ResourceArgs {
    /// CPUs to offer (default: those this process may use).
    #[arg(long = "lz-cpus", env = "MISSION_LZ_CPUS")]
    cpus: Option<u32>,
    /// Memory to offer in MB (default: the host's).
    #[arg(long = "lz-memory", env = "MISSION_LZ_MEMORY")]
    memory: Option<u64>,
    /// GPUs to offer (default: those nvidia-smi lists).
    #[arg(long = "lz-gpus", env = "MISSION_LZ_GPUS")]
    gpus: Option<u32>,
    /// Run jobs without cgroup memory and CPU limits (jobs' status says so).
    #[arg(long = "lz-no-limits", env = "MISSION_LZ_NO_LIMITS")]
    pub no_limits: bool,
}

impl ResourceArgs {
    /// The agent's overrides.
    pub fn overrides(&self) -> mission_lz::Overrides {
        mission_lz::Overrides { cpus: self.cpus, memory_mb: self.memory, gpus: self.gpus }
    }
}

impl LzCommand {
    /// Runs the agent until Ctrl-C or SIGTERM.
    pub async fn run(self, server: Option<&str>) -> anyhow::Result<()> {
        let server = server.context("name the server with --server URL (or MISSION_SERVER)")?;
        let config = mission_lz::AgentConfig {
            // Replicas of one service: --server URL1,URL2,… (tried in turn when a connection breaks).
            servers: server.split(',').map(str::trim).filter(|url| !url.is_empty()).map(str::to_owned).collect(),
            token: self.token,
            data_dir: self.data_dir,
            overrides: self.resources.overrides(),
            no_limits: self.resources.no_limits,
            sandbox: self.sandbox.config(Vec::new()),
            runner: mission_lz::RunnerKind::Process,
        };
        mission_lz::run(config, super::server::shutdown_signal()).await?;
        Ok(())
    }
}
