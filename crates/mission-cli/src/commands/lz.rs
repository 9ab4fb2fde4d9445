//! `mission lz`: run a landing-zone agent on this host.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::sizes::Size;

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
///
/// On a Slurm cluster, run the agent on a login node with --runner slurm: every job of the
/// landing zone becomes a Slurm job of the account the agent runs under, staged into its own
/// dir (0700) under --work-root on the cluster's shared filesystem:
///   MISSION_LZ_TOKEN=TOKEN mission lz --server URL --runner slurm --work-root /scratch/$USER/mission \
///       --partition batch --account proj42 --max-jobs 200
/// Every job of that landing zone runs as that account and can read what it can: register it on a
/// station whose members may share the account. The agent offers the largest node of the cluster
/// (sinfo), asks Slurm about all its jobs in one squeue call per turn (every second after a change,
/// backing off to --poll-max while nothing changes), shows Slurm's pending reason while a job
/// waits, and, restarted, finds its jobs again by name.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct LzCommand {
    #[command(subcommand)]
    action: Option<LzAction>,
    /// The landing zone's token (prefer the environment variable or the config file: arguments
    /// are visible to other users of the host).
    #[arg(long, env = "MISSION_LZ_TOKEN", hide_env_values = true, required = true)]
    token: Option<String>,
    /// Read settings from this TOML file: one key per flag, named as the flag with `_` for `-`
    /// (`data_dir = "/var/lib/mission-lz"`, `server = "https://…"`). A flag or its environment
    /// variable overrides the file; `mission lz default-config` prints an example.
    #[arg(long, env = "MISSION_LZ_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the configuration the agent would run with (secrets redacted), each key saying
    /// whether a flag, the environment, the config file or the default set it; then exit.
    #[arg(long)]
    print_config: bool,
    /// Folder for work dirs and the cache of input files.
    #[arg(long, env = "MISSION_LZ_DATA_DIR", default_value = "./mission-lz")]
    data_dir: PathBuf,
    #[command(flatten)]
    resources: ResourceArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
    #[command(flatten)]
    containers: ContainerArgs,
    /// Stop when no job has run for this many seconds (a pilot inside a batch job leaves so).
    #[arg(long, env = "MISSION_LZ_IDLE_EXIT", value_name = "SECONDS")]
    idle_exit: Option<u64>,
    /// A directory this host shares with the hosts users submit batch jobs from (`sbatch`):
    /// batch jobs submitted under it run here, in their directory, as their user's mapped
    /// account (--user-map); a Slurm gateway passes them to the real `sbatch` with their
    /// directives. Repeat for several (`--shared-path /home --shared-path /scratch`).
    #[arg(long = "shared-path", value_name = "DIR", value_parser = absolute_dir)]
    shared_paths: Vec<String>,
    /// The address the ranks of a job on several landing zones (`mission run --nodes N`) reach
    /// this host at: a name or IP the other landing zones' hosts can connect to, as MPI and
    /// torchrun will. Default: this host's name.
    #[arg(long, env = "MISSION_LZ_NODE_ADDRESS", value_name = "ADDR")]
    node_address: Option<String>,
    /// What runs the jobs: child processes on this host, or Slurm.
    #[arg(long, env = "MISSION_LZ_RUNNER", value_enum, default_value_t = RunnerChoice::Process)]
    runner: RunnerChoice,
    #[command(flatten)]
    slurm: SlurmArgs,
}

/// What `mission lz` does instead of running the agent.
#[derive(Debug, clap::Subcommand)]
enum LzAction {
    /// Print an example config file (for --config) documenting every key and its default.
    DefaultConfig,
}

/// What runs a landing zone's jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RunnerChoice {
    /// Child processes of the agent, on this host.
    Process,
    /// Slurm jobs, submitted from this host (a cluster's login node).
    Slurm,
}

/// How a Slurm landing zone submits its jobs (with --runner slurm).
#[derive(Debug, Args)]
#[command(next_help_heading = "Slurm (--runner slurm)")]
struct SlurmArgs {
    /// Folder on the cluster's shared filesystem where job dirs are made (required with
    /// --runner slurm); outside the data dir, which keeps the agent's state.
    #[arg(id = "slurm_work_root", long = "work-root", env = "MISSION_LZ_SLURM_WORK_ROOT", value_name = "DIR")]
    work_root: Option<PathBuf>,
    /// Partition jobs go to (default: the cluster's default).
    #[arg(long, env = "MISSION_LZ_PARTITION")]
    partition: Option<String>,
    /// Account jobs are charged to.
    #[arg(long, env = "MISSION_LZ_ACCOUNT")]
    account: Option<String>,
    /// Quality of service of the jobs.
    #[arg(long, env = "MISSION_LZ_QOS")]
    qos: Option<String>,
    /// Most jobs the agent keeps in Slurm at once (queued or running).
    #[arg(long, env = "MISSION_LZ_MAX_JOBS", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    max_jobs: u32,
    /// An extra sbatch argument for every job (repeat it for several), e.g. --sbatch-arg=--constraint=a100.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    sbatch_args: Vec<String>,
    /// Run pilots instead of one Slurm job per mission job: Slurm jobs that each start an agent
    /// inside their allocation, which connects as a landing zone of the station and takes small
    /// jobs with the service's own dispatch (thousands of short jobs, on a cluster that caps a
    /// user at a few hundred Slurm jobs). Pilots start while the station has queued work no
    /// connected landing zone takes, and leave when idle. This program must lie on the shared
    /// filesystem, where the compute nodes find it.
    #[arg(long)]
    pilots: bool,
    /// Most pilots at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_pilots: u32,
    /// CPUs of each pilot.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pilot_cpus: u32,
    /// Memory of each pilot, in MB.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    pilot_memory: u64,
    /// GPUs of each pilot.
    #[arg(long, default_value_t = 0)]
    pilot_gpus: u32,
    /// Walltime of each pilot, in minutes (a job cut off by its pilot's end goes back in the queue).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=525_600))]
    pilot_time: u32,
    /// Seconds a pilot stays without a job before it leaves.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pilot_idle: u64,
    /// Run jobs that name a container image with this engine on the compute nodes: podman (the
    /// image is pulled there from its archive on the shared filesystem) or apptainer (the
    /// gateway converts it once into a SIF file there). Without it the gateway takes no image
    /// jobs.
    #[arg(long, env = "MISSION_LZ_CONTAINER_ENGINE", value_name = "podman|apptainer")]
    container_engine: Option<mission_lz::slurm::ContainerEngine>,
    /// Longest wait, in seconds, between two questions to Slurm while nothing changes.
    #[arg(long, env = "MISSION_LZ_POLL_MAX", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    poll_max: u64,
}

impl SlurmArgs {
    fn config(&self) -> anyhow::Result<mission_lz::SlurmConfig> {
        let work_root = self
            .work_root
            .clone()
            .context("--runner slurm needs --work-root DIR, on the cluster's shared filesystem")?;
        let mut poll = mission_lz::SlurmConfig::DEFAULT_POLL;
        poll.max = std::time::Duration::from_secs(self.poll_max).max(poll.first);
        Ok(mission_lz::SlurmConfig {
            site: mission_lz::SiteOptions {
                partition: self.partition.clone(),
                account: self.account.clone(),
                qos: self.qos.clone(),
                extra: self.sbatch_args.clone(),
            },
            work_root,
            max_jobs: self.max_jobs,
            poll,
            pilots: self.pilots.then_some(mission_lz::Pilots {
                pilot: mission_lz::slurm::Pilot {
                    size: mission_api::Resources {
                        cpu_count: self.pilot_cpus,
                        memory_amount: self.pilot_memory,
                        gpu_count: self.pilot_gpus,
                    },
                    time_limit: self.pilot_time,
                    idle_seconds: self.pilot_idle,
                },
                max_pilots: self.max_pilots,
            }),
            containers: self.container_engine,
        })
    }
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
    /// As root: run each mission user's jobs as an account of their own on this host (or
    /// cluster), named in this file (lines of MISSION_USER ACCOUNT; # starts a comment), so that
    /// the files they write on shared storage belong to the right person. Jobs of users it does
    /// not name run as a uid of their own, unless --refuse-unmapped; a Slurm landing zone
    /// (sbatch --uid/--gid) refuses them always; register it with the account root
    /// (mission stations add-lz STATION NAME --slurm-account root).
    #[arg(long, env = "MISSION_LZ_USER_MAP", value_name = "FILE")]
    user_map: Option<PathBuf>,
    /// With --user-map: refuse the jobs of mission users the map does not name.
    #[arg(long, env = "MISSION_LZ_REFUSE_UNMAPPED", requires = "user_map")]
    refuse_unmapped: bool,
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
            user_map: self.user_map.clone(),
            refuse_unmapped: self.refuse_unmapped,
        }
    }
}

/// How a landing zone runs jobs in container images (with Podman, where the host has it).
#[derive(Debug, Args)]
pub struct ContainerArgs {
    /// Run no jobs in container images, even where Podman is installed (the server then sends
    /// this landing zone none).
    #[arg(long = "lz-no-images", env = "MISSION_LZ_NO_IMAGES")]
    no_images: bool,
    /// The most bytes of images kept loaded (K/M/G/T suffixes); past it the least recently used
    /// images no job runs in are removed.
    #[arg(long = "lz-image-cache", env = "MISSION_LZ_IMAGE_CACHE", value_name = "SIZE",
          default_value_t = Size(mission_lz::ContainerConfig::default().cache_bytes))]
    cache: Size,
    /// The network of the containers: the host's, or none (loopback only).
    #[arg(
        long = "lz-container-network",
        env = "MISSION_LZ_CONTAINER_NETWORK",
        value_name = "host|none",
        default_value = "host"
    )]
    network: mission_lz::ContainerNetwork,
    /// A registry, `HOST[:PORT]`, to pull registry images from without TLS verification (plain
    /// http); repeat the flag, or separate with commas.
    #[arg(long = "lz-insecure-registry", env = "MISSION_LZ_INSECURE_REGISTRIES", value_delimiter = ',')]
    insecure_registries: Vec<String>,
}

impl ContainerArgs {
    /// The agent's container settings.
    pub fn config(&self) -> mission_lz::ContainerConfig {
        mission_lz::ContainerConfig {
            disabled: self.no_images,
            cache_bytes: self.cache.0,
            network: self.network,
            insecure_registries: self.insecure_registries.clone(),
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
        if let Some(LzAction::DefaultConfig) = self.action {
            print!("{}", crate::config_file::example_of("lz"));
            return Ok(());
        }
        let token = self.token.context("name the landing zone's token with --token (or MISSION_LZ_TOKEN)")?;
        if let Some(file) = &self.config {
            tracing::info!(file = %file.display(), "settings read from the config file");
        }
        let server = server.context("name the server with --server URL (or MISSION_SERVER)")?;
        let runner = match self.runner {
            RunnerChoice::Process => mission_lz::RunnerKind::Process,
            RunnerChoice::Slurm => mission_lz::RunnerKind::Slurm(Box::new(self.slurm.config()?)),
        };
        let config = mission_lz::AgentConfig {
            // Replicas of one service: --server URL1,URL2,… (tried in turn when a connection breaks).
            servers: server.split(',').map(str::trim).filter(|url| !url.is_empty()).map(str::to_owned).collect(),
            token,
            data_dir: self.data_dir,
            overrides: self.resources.overrides(),
            no_limits: self.resources.no_limits,
            sandbox: self.sandbox.config(Vec::new()),
            containers: self.containers.config(),
            runner,
            idle_exit: self.idle_exit.map(std::time::Duration::from_secs),
            local_tunnel: None,
            shared_paths: self.shared_paths,
            node_address: self.node_address,
        };
        mission_lz::run(config, super::server::shutdown_signal()).await?;
        Ok(())
    }
}

/// A `--shared-path`: an absolute directory, kept as given without a trailing `/`.
fn absolute_dir(value: &str) -> Result<String, String> {
    let path = std::path::Path::new(value);
    if !path.is_absolute() || path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("{value:?}: expected an absolute directory without `..`"));
    }
    let trimmed = value.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() })
}
