//! How an agent is run ([`AgentConfig`]): its servers and token, its data dir, what runs its
//! jobs ([`RunnerKind`]), how they are confined and what the host shares.

use std::path::PathBuf;

use crate::detect::Overrides;
use crate::podman::ContainerConfig;
use crate::runner::slurm::SlurmConfig;
use crate::sandbox::SandboxConfig;

/// How the agent is run.
#[derive(Clone)]
pub struct AgentConfig {
    /// Base URLs of the server: one, or several replicas of one service, tried in turn when a
    /// connection breaks.
    pub servers: Vec<String>,
    /// The landing zone's token.
    pub token: String,
    /// Where the input cache (`cache/`) lives; no job ever sees it.
    pub data_dir: PathBuf,
    /// Overrides of detected resources.
    pub overrides: Overrides,
    /// Run jobs without cgroup limits even where the host has cgroups.
    pub no_limits: bool,
    /// Who jobs run as and what they may see. Its `private_dirs` need not name `data_dir`,
    /// which is always private; an empty `work_root` means the default, [`crate::default_work_root`].
    pub sandbox: SandboxConfig,
    /// What runs the jobs.
    pub runner: RunnerKind,
    /// How jobs run in container images (process landing zones).
    pub containers: ContainerConfig,
    /// Stop when no job has run for this long (a pilot inside a batch job leaves so).
    pub idle_exit: Option<std::time::Duration>,
    /// For the landing zone embedded in a server: the in-process tunnel its sessions are
    /// reached through (none: only tunnels the agent opens out).
    pub local_tunnel: Option<mission_tunnel::LocalTunnel>,
    /// The directories this host shares with the hosts users submit batch jobs from (absolute;
    /// `/` for the landing zone embedded in a server, which shares its host's): see
    /// [`mission_api::batch`].
    pub shared_paths: Vec<String>,
    /// The address the ranks of a job on several landing zones (a gang) reach this host at, as
    /// the others' `MISSION_HOSTS` and hostfile name it; none: the host's name.
    pub node_address: Option<String>,
}

/// What runs a landing zone's jobs.
#[derive(Debug, Clone)]
pub enum RunnerKind {
    /// Child processes of the agent on its own host, under cgroup limits in a sandbox.
    Process,
    /// Jobs of a Slurm cluster, submitted from its login node.
    Slurm(Box<SlurmConfig>),
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("servers", &self.servers)
            .field("token", &"[redacted]")
            .field("data_dir", &self.data_dir)
            .field("overrides", &self.overrides)
            .field("no_limits", &self.no_limits)
            .field("sandbox", &self.sandbox)
            .field("runner", &self.runner)
            .field("containers", &self.containers)
            .field("idle_exit", &self.idle_exit)
            .field("local_tunnel", &self.local_tunnel)
            .field("shared_paths", &self.shared_paths)
            .field("node_address", &self.node_address)
            .finish()
    }
}
