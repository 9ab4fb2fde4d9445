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
/// Jobs run under cgroup memory and CPU limits where the host has them (as root).
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
            server: server.to_owned(),
            token: self.token,
            data_dir: self.data_dir,
            overrides: self.resources.overrides(),
            no_limits: self.resources.no_limits,
        };
        mission_lz::run(config, super::server::shutdown_signal()).await?;
        Ok(())
    }
}
