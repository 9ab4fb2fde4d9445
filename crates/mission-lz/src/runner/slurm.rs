//! The Slurm runner: the agent on a cluster's login node makes every job of its landing zone a
//! Slurm job.
//!
//! 1. staging: the inputs come through the content cache into the job's own dir on the shared
//!    filesystem (`WORK_ROOT/{job id}`, 0700; see [`JobDir`]) with a batch script, and a record
//!    of the job goes into the agent's data dir (outside the work root), so that a restarted
//!    agent can follow it;
//! 2. `sbatch --parsable` with the job's CPUs, memory, GPUs, time limit and name
//!    (`mission-{job id}`), the site's partition, account, QoS and extra arguments, from an
//!    environment that holds nothing of the agent's but `PATH`, identity, locale and `SLURM_*`. While Slurm keeps it waiting, the job's reason says why (Slurm's
//!    pending reason); when Slurm starts it, it is `running`, and the output files stream to the
//!    server as they grow;
//! 3. its end, read from Slurm, becomes the job's status and reason (exit status, `time limit`,
//!    `out of memory`, a cancellation, a failed node), and what it used comes from Slurm's
//!    accounting (`sacct`: CPU time, peak memory; the wall time from the script's own clock);
//!    the new or changed files of its work dir are uploaded, and its dir and record removed. A
//!    stop cancels it (`scancel`: Slurm sends `SIGTERM`, and `SIGKILL` after the cluster's
//!    `KillWait`, which stands for the grace period a stop order gives).
//!
//! Once a job runs, its session's app (if it is a session) and shells in it are reached through
//! its own allocation: `srun --jobid … --overlap` running `mission lz-relay` (see
//! [`crate::relay`]) or the shell's command on its node, as the job's account.
//!
//! With pilots (`--pilots`), the gateway takes no job itself: while its station has queued work
//! that no connected landing zone takes, it starts pilot jobs (up to `--max-pilots`), each an agent
//! inside a Slurm allocation that connects as an ephemeral landing zone of the station and runs
//! jobs with the service's own dispatch; a pilot leaves when idle, and when its allocation ends
//! the gateway removes it (its unfinished jobs go back in the queue).
//!
//! One [`Monitor`] asks Slurm about all the agent's jobs (and pilots) at once (`squeue`, and `sacct` for jobs
//! `squeue` has forgotten and for the usage of those that ended), never once per job, and asks
//! less often while nothing changes: sites ban tools whose polling hangs `slurmctld`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use mission_api::JobImage;
use mission_api::lz::Assignment;
use mission_api::{JobStatus, JobUsage, Resources};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use uuid::Uuid;

use super::{Finished, JobError, JobEvents, JobHandle, JobOutput, Offer, Outcome, OutputSource, Runner, Signal};
use crate::client::Backoff;
use crate::client::LzClient;
use crate::config::AgentConfig;
use crate::dirs::private_dir;
use crate::error::AgentError;
use crate::output::changed_files;
use crate::sandbox::{UserMap, read_user_map};
use crate::sessions::{NodeCommand, Reach, SavedSession};
use crate::shell::{ShellProcess, ShellStarter};
use crate::slurm::{
    self, ContainerEngine, JobDir, SACCT_FORMAT, SACCT_USAGE_FORMAT, SINFO_FORMAT, SQUEUE_FORMAT, SiteOptions,
    SlurmJob, StagedImage, batch_script, sbatch_args,
};
use crate::workdirs::{Staged, WorkDir};

/// How a Slurm landing zone submits its jobs.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    /// Partition, account, QoS and extra `sbatch` arguments of every job.
    pub site: SiteOptions,
    /// Where job dirs are made: a directory on the cluster's shared filesystem, outside the
    /// agent's data dir.
    pub work_root: PathBuf,
    /// Most jobs the agent keeps in Slurm at once.
    pub max_jobs: u32,
    /// How often Slurm is asked about the jobs: `first` after a change, backing off to `max`
    /// while nothing changes.
    pub poll: Backoff,
    /// Start pilots instead of one Slurm job per mission job.
    pub pilots: Option<Pilots>,
    /// What runs jobs in container images; none: the gateway takes no image jobs.
    pub containers: Option<ContainerEngine>,
}

/// How a gateway runs pilots.
#[derive(Debug, Clone)]
pub struct Pilots {
    /// Each pilot's size, walltime and idle time.
    pub pilot: slurm::Pilot,
    /// Most pilots at once.
    pub max_pilots: u32,
}

impl SlurmConfig {
    /// The default polling: every second after a change, at most every 20 s.
    pub const DEFAULT_POLL: Backoff = Backoff { first: Duration::from_secs(1), max: Duration::from_secs(20) };
}

/// How long one Slurm command may take before the agent gives up on it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a running job's dir is looked at for its exit code, which tells the monitor to ask
/// Slurm at once instead of at its next turn.
const EXIT_CHECK: Duration = Duration::from_millis(200);
/// How long converting an image for Apptainer may take.
const IMAGE_CONVERSION_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long after a job's end accounting is asked for what it used: slurmctld hands a step's
/// figures to slurmdbd a moment after the step ends.
const USAGE_PATIENCE: Duration = Duration::from_secs(10);

/// How long the agent keeps asking a Slurm that does not answer at start-up (a controller that
/// is restarting, nodes that have not registered yet) before it gives up.
const STARTUP_PATIENCE: Duration = Duration::from_secs(120);
const STARTUP_RETRY: Backoff = Backoff { first: Duration::from_millis(500), max: Duration::from_secs(10) };

/// Why a command on the login node (Slurm's, or Apptainer's) gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    /// It did not answer in time.
    #[error("{program} did not answer within {limit:?}")]
    Timeout {
        /// The program.
        program: String,
        /// How long it had.
        limit: Duration,
    },
    /// It cannot be run.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// It failed, saying this.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// It wrote what is not UTF-8.
    #[error("{program} wrote something that is not UTF-8")]
    NotUtf8 {
        /// The program.
        program: String,
    },
}

/// Why what the agent asked of Slurm gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SlurmError {
    /// The command gave no answer.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// Its answer could not be read.
    #[error(transparent)]
    Output(#[from] slurm::ParseError),
    /// `sinfo` lists no node that takes jobs.
    #[error("Slurm lists no node that takes jobs")]
    NoNodes,
    /// The records of the jobs an earlier run submitted cannot be read.
    #[error("reading the job records: {0}")]
    Records(std::io::Error),
    /// The service would not register a pilot.
    #[error("registering a pilot: {0}")]
    Register(#[from] crate::client::Failure),
    /// A pilot's directory could not be written.
    #[error("{}: {source}", path.display())]
    PilotDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs a start-up step until it succeeds, retrying with backoff for [`STARTUP_PATIENCE`]; a
/// cluster that is briefly busy or still coming up must not leave the landing zone offline.
async fn patiently<T, E, F, Fut>(what: &str, mut step: F) -> Result<T, AgentError>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + STARTUP_PATIENCE;
    let mut delays = STARTUP_RETRY.delays();
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(why) => {
                let delay = delays.next().expect("endless");
                if tokio::time::Instant::now() + delay > deadline {
                    return Err(AgentError::BatchSystem(format!("{what}: {why}")));
                }
                tracing::warn!("{what} failed ({why}); trying again in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// What the agent keeps of a job it submitted (`DATA_DIR/slurm-jobs/{job id}.json`), to follow
/// it after a restart.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Record {
    job_id: Uuid,
    /// Slurm's id, once `sbatch` answered.
    slurm_id: Option<String>,
    /// The input copies as staged (path, size, modification time), to tell the results.
    staged: Vec<(PathBuf, u64, SystemTime)>,
    /// Which attempt of the job it is.
    #[serde(default = "mission_api::jobs::first_attempt")]
    attempt: u32,
    /// Where its output starts in the job's logs.
    #[serde(default)]
    log_offsets: mission_api::lz::LogOffsets,
    /// The account `srun` reaches into it as (for its session and shells), once submitted.
    #[serde(default)]
    reach_as: Option<ReachAs>,
    /// Its session, where it is one: a restarted agent reaches it again.
    #[serde(default)]
    session: Option<SavedSession>,
}

/// The account a job's session and shells are reached as: a struct, so that a record tells the
/// gateway's own account (`run_as: null`) from none recorded (no `reach_as`).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct ReachAs {
    run_as: slurm::RunAs,
}

/// The Slurm runner of one agent.
pub(crate) struct SlurmRunner {
    config: SlurmConfig,
    /// Where [`Record`]s are kept.
    records: PathBuf,
    /// The environment of the Slurm commands the agent runs: nothing of its own but `PATH`,
    /// the user's identity, the locale and `SLURM_*` (never its token).
    command_env: Vec<(OsString, OsString)>,
    /// The `PATH` jobs get.
    job_path: String,
    monitor: Arc<Monitor>,
    /// What `sinfo` last said.
    offer: Mutex<Resources>,
    /// Jobs of an earlier run of the agent, until they are resumed.
    recovered: Mutex<HashMap<Uuid, Record>>,
    /// The cluster account the agent runs as, which submits every job.
    account: String,
    /// Mission user → the cluster account (name, uid, gid) their jobs run as, where the agent
    /// maps users.
    user_map: Option<UserMap>,
    /// The server's URLs, for pilots (comma-separated).
    servers: String,
    /// This program, which pilots run (from the shared filesystem).
    program: PathBuf,
    /// Registries pulled from without TLS verification.
    insecure_registries: Vec<String>,
    /// The directories the cluster shares with the hosts batch jobs are submitted from
    /// (`--shared-path`): batch jobs under them go to the real `sbatch` as they are.
    shared_paths: Vec<String>,
    /// One image is staged on the shared filesystem at a time (a second job of it waits, then
    /// finds it there).
    staging_images: tokio::sync::Mutex<()>,
}

impl SlurmRunner {
    /// Checks the work root and Slurm, reads the cluster's nodes, and finds the jobs an earlier
    /// run of the agent left in Slurm (by their names).
    pub async fn start(config: &AgentConfig, slurm: &SlurmConfig) -> Result<Arc<Self>, AgentError> {
        let work_root = absolute(&slurm.work_root);
        let data_dir = absolute(&config.data_dir);
        if work_root.starts_with(&data_dir) || data_dir.starts_with(&work_root) {
            return Err(AgentError::BatchSystem(format!(
                "the work root {} and the data dir {} must lie apart: jobs may read the work root, and the data \
                 dir holds the landing zone's state",
                work_root.display(),
                data_dir.display()
            )));
        }
        let user_map = match &config.sandbox.user_map {
            Some(path) => Some(read_user_map(path).map_err(|e| AgentError::BatchSystem(format!("--user-map: {e}")))?),
            None => None,
        };
        if user_map.is_some() && slurm.pilots.is_some() {
            return Err(AgentError::BatchSystem(
                "pilots run jobs as the gateway's own account: they do not go with --user-map".into(),
            ));
        }
        // Mapped users must pass through the work root (0711: they cannot list it) to their dirs.
        let mode = if user_map.is_some() { 0o711 } else { 0o700 };
        private_dir(&work_root, mode).map_err(|e| AgentError::DataDir(work_root.clone(), e))?;
        let records = data_dir.join("slurm-jobs");
        private_dir(&records, 0o700).map_err(|e| AgentError::DataDir(records.clone(), e))?;
        let command_env = std::env::vars_os()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"].contains(&name.as_ref())
                    || name.starts_with("SLURM_")
            })
            .collect();
        let job_path = super::process::base_env()
            .into_iter()
            .find(|(name, _)| *name == "PATH")
            .map(|(_, path)| path.to_string_lossy().into_owned())
            .unwrap_or_default();
        let servers = config.servers.join(",");
        let insecure_registries = config.containers.insecure_registries.clone();
        let shared_paths = config.shared_paths.clone();
        let mut config = slurm.clone();
        config.work_root = work_root;
        let runner = Arc::new(Self {
            config,
            records,
            command_env,
            job_path,
            monitor: Arc::new(Monitor::default()),
            offer: Mutex::new(Resources { cpu_count: 0, memory_amount: 0, gpu_count: 0 }),
            recovered: Mutex::new(HashMap::new()),
            account: account_name().map_err(AgentError::BatchSystem)?,
            user_map,
            servers,
            program: std::env::current_exe()
                .map_err(|e| AgentError::BatchSystem(format!("this program's path: {e}")))?,
            staging_images: tokio::sync::Mutex::new(()),
            insecure_registries,
            shared_paths,
        });
        let capacity = patiently("reading the cluster's nodes", || runner.capacity()).await?;
        *runner.offer.lock().expect("not poisoned") = capacity;
        patiently("finding the jobs Slurm still runs", || runner.find_earlier_jobs()).await?;
        tokio::spawn(Monitor::run(Arc::downgrade(&runner), runner.config.poll));
        tracing::info!(
            cpus = capacity.cpu_count,
            memory_mb = capacity.memory_amount,
            gpus = capacity.gpu_count,
            max_jobs = runner.config.max_jobs,
            work_root = %runner.config.work_root.display(),
            resumed = runner.recovered.lock().expect("not poisoned").len(),
            "Slurm landing zone agent starting"
        );
        Ok(runner)
    }

    /// Runs a Slurm command; answers its stdout, or why it failed.
    async fn command(&self, program: &str, args: &[String]) -> Result<String, CommandError> {
        self.command_within(COMMAND_TIMEOUT, program, args).await
    }

    /// [`SlurmRunner::command`] that may take `limit`.
    async fn command_within(&self, limit: Duration, program: &str, args: &[String]) -> Result<String, CommandError> {
        let mut command = tokio::process::Command::new(program);
        command.args(args).env_clear().envs(self.command_env.iter().cloned()).kill_on_drop(true);
        command.stdin(std::process::Stdio::null());
        let program = program.to_owned();
        let output = match tokio::time::timeout(limit, command.output()).await {
            Err(_) => return Err(CommandError::Timeout { program, limit }),
            Ok(Err(source)) => return Err(CommandError::Spawn { program, source }),
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(CommandError::Failed { program, status: output.status, stderr });
        }
        String::from_utf8(output.stdout).map_err(|_| CommandError::NotUtf8 { program })
    }

    /// The largest node that takes jobs, from `sinfo`.
    async fn capacity(&self) -> Result<Resources, SlurmError> {
        let mut args = vec!["-h".to_owned(), "-N".to_owned(), "-o".to_owned(), SINFO_FORMAT.to_owned()];
        if let Some(partition) = &self.config.site.partition {
            args.push(format!("--partition={partition}"));
        }
        let nodes = slurm::parse_nodes(&self.command("sinfo", &args).await?)?;
        slurm::capacity(&nodes).ok_or(SlurmError::NoNodes)
    }

    /// All the jobs of the agent's account(s) Slurm still lists (one `squeue`).
    async fn queue(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let mut args = ["-h", "-t", "all", "-O", SQUEUE_FORMAT].map(str::to_owned).to_vec();
        match &self.user_map {
            // The jobs run as the mapped accounts.
            Some(map) => {
                let mut users: Vec<&str> = map.values().map(|(name, _, _)| name.as_str()).collect();
                users.push(&self.account);
                users.sort_unstable();
                users.dedup();
                args.push(format!("--users={}", users.join(",")));
            }
            None => args.push("--me".to_owned()),
        }
        Ok(slurm::parse_queue(&self.command("squeue", &args).await?)?)
    }

    /// What accounting knows of these jobs (one `sacct`); empty where the cluster keeps none.
    async fn accounting(&self, slurm_ids: &[String]) -> Vec<SlurmJob> {
        let args = ["-n", "-P", "-X", "-o", SACCT_FORMAT, "-j", &slurm_ids.join(",")].map(str::to_owned);
        let read = async { Ok::<_, SlurmError>(slurm::parse_accounting(&self.command("sacct", &args).await?)?) };
        match read.await {
            Ok(jobs) => jobs,
            Err(why) => {
                tracing::debug!("no accounting for jobs Slurm no longer lists: {why}");
                Vec::new()
            }
        }
    }

    /// What these ended jobs used, by Slurm's id, as far as accounting has it (one `sacct`).
    async fn usage(&self, slurm_ids: &[String]) -> Result<HashMap<String, JobUsage>, SlurmError> {
        let args = ["-n", "-P", "--noconvert", "-o", SACCT_USAGE_FORMAT, "-j", &slurm_ids.join(",")].map(str::to_owned);
        Ok(slurm::parse_usage(&self.command("sacct", &args).await?)?)
    }

    fn record_path(&self, job_id: Uuid) -> PathBuf {
        self.records.join(format!("{job_id}.json"))
    }

    /// Writes a job's record (whole, or not at all). Blocking.
    fn save(&self, record: &Record) -> std::io::Result<()> {
        let path = self.record_path(record.job_id);
        let partial = path.with_extension("partial");
        std::fs::write(&partial, serde_json::to_vec(record).expect("records serialise"))?;
        std::fs::rename(&partial, &path)
    }

    /// Removes what a job left: its dir and its record. Blocking.
    fn forget(&self, job_id: Uuid) {
        let _ = std::fs::remove_dir_all(JobDir::new(&self.config.work_root, job_id).root());
        let _ = std::fs::remove_file(self.record_path(job_id));
    }

    /// Finds the jobs an earlier run of the agent submitted: each record whose job Slurm still
    /// lists by name, or that has Slurm's id. A record of a job never submitted is dropped (the
    /// server puts the job back in its queue when the agent does not name it).
    async fn find_earlier_jobs(&self) -> Result<(), SlurmError> {
        let mut records = Vec::new();
        for entry in std::fs::read_dir(&self.records).map_err(SlurmError::Records)?.flatten() {
            let path = entry.path();
            let read = std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok());
            match read {
                Some(record) if path.extension().is_some_and(|e| e == "json") => records.push(record),
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        if records.is_empty() {
            return Ok(());
        }
        let listed = self.queue().await?;
        let mut recovered = self.recovered.lock().expect("not poisoned");
        for mut record in records {
            if let Some(listed) = listed.iter().find(|j| j.job_id == Some(record.job_id)) {
                record.slurm_id = Some(listed.slurm_id.clone());
            }
            if record.slurm_id.is_some() {
                recovered.insert(record.job_id, record);
            } else {
                self.forget(record.job_id);
            }
        }
        Ok(())
    }

    /// The cluster account (uid, gid) `job` runs as, where the agent maps users.
    fn run_as(&self, job: &Assignment) -> Result<slurm::RunAs, JobError> {
        let Some(map) = &self.user_map else { return Ok(None) };
        match map.get(&job.username) {
            Some((_, uid, gid)) => Ok(Some((*uid, *gid))),
            None => Err(JobError::Refused(format!(
                "refused by the landing zone: mission user {:?} has no cluster account in its user map",
                job.username
            ))),
        }
    }

    /// Stages the job into its dir and submits it; answers its record, with Slurm's id.
    async fn submit(
        self: &Arc<Self>,
        client: &LzClient,
        job: &Assignment,
        inputs: Vec<(PathBuf, PathBuf)>,
        session_env: &[(&'static str, String)],
        session: Option<SavedSession>,
    ) -> Result<Record, JobError> {
        let run_as = self.run_as(job)?;
        let session_env = session_env.to_vec();
        let image = match (&job.image, self.config.containers) {
            (Some(image), Some(engine)) => Some((engine, self.stage_image(client, job.job_id, image, engine).await?)),
            _ => None,
        };
        let dir = JobDir::new(&self.config.work_root, job.job_id);
        let staging = {
            let (runner, dir, job) = (self.clone(), dir.clone(), job.clone());
            tokio::task::spawn_blocking(move || {
                let image = image.as_ref().map(|(engine, staged)| (*engine, staged));
                runner.stage(&job, &dir, &inputs, run_as, image, &session_env)
            })
        };
        let record = staging.await?.map_err(|e| {
            self.forget(job.job_id);
            JobError::Staging(e.to_string())
        })?;
        let args = match &job.batch {
            Some(batch) => slurm::batch_sbatch_args(job, batch, &dir, &self.config.site, run_as),
            None => sbatch_args(job, &dir, &self.config.site, run_as),
        };
        let answer = self.command("sbatch", &args).await.map_err(|why| {
            self.forget(job.job_id);
            JobError::BatchSystem(why.to_string())
        })?;
        // `--parsable` answers `id` or `id;cluster`.
        let slurm_id = answer.trim().split(';').next().unwrap_or_default().to_owned();
        if slurm_id.is_empty() {
            self.forget(job.job_id);
            return Err(JobError::BatchSystem(format!("sbatch answered no job id: {answer:?}")));
        }
        tracing::info!(job_id = %job.job_id, %slurm_id, "submitted to Slurm");
        let record = Record { slurm_id: Some(slurm_id), reach_as: Some(ReachAs { run_as }), session, ..record };
        if let Err(e) = self.save(&record) {
            tracing::warn!(job_id = %job.job_id, "cannot record Slurm's id of the job: {e}");
        }
        Ok(record)
    }

    /// The job's image on the shared filesystem (`WORK_ROOT/images/`, readable by the accounts
    /// jobs run as): its archive downloaded once per gateway and checked against its digest,
    /// and for Apptainer the SIF file made from it once.
    async fn stage_image(
        &self,
        client: &LzClient,
        job_id: Uuid,
        image: &JobImage,
        engine: ContainerEngine,
    ) -> Result<StagedImage, JobError> {
        let fail = |why: String| JobError::Image(format!("{}: {why}", image.digest));
        let hex = image
            .digest
            .strip_prefix("sha256:")
            .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        let hex = hex.ok_or_else(|| fail("not an image digest".into()))?;
        let dir = self.config.work_root.join("images");
        let archive = dir.join(format!("{hex}.tar"));
        let source = match &image.reference {
            Some(reference) => slurm::ImageSource::Registry {
                reference: reference.clone(),
                insecure: crate::podman::insecure(reference, &self.insecure_registries),
            },
            None => slurm::ImageSource::Archive(archive.clone()),
        };
        let staged = StagedImage { hex: hex.to_owned(), source, sif: dir.join(format!("{hex}.sif")) };
        let _one_at_a_time = self.staging_images.lock().await;
        private_dir(&dir, 0o711).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        let readable = |path: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(|e| fail(e.to_string()))
        };
        if image.reference.is_none() && !archive.exists() {
            let body =
                client.job_image(job_id, &image.digest).await.map_err(|e| fail(format!("downloading it: {e}")))?;
            crate::cache::download_checked(body, &archive, hex)
                .await
                .map_err(|e| fail(format!("downloading it: {e}")))?;
            // A node's Podman loads it by the agent's name alone (see `podman::names`).
            if let Err(why) = crate::podman::names::strip_before_loading(archive.clone()).await {
                let _ = std::fs::remove_file(&archive);
                return Err(fail(format!("the image archive cannot be loaded: {why}")));
            }
            readable(&archive)?;
        }
        if engine == ContainerEngine::Apptainer && !staged.sif.exists() {
            let partial = dir.join(format!("{hex}.{}.sif", Uuid::new_v4().simple()));
            let mut converted = Ok(String::new());
            // An archive may be either kind; a registry's image is one.
            let kinds: &[bool] = if image.reference.is_some() { &[true] } else { &[true, false] };
            for &oci in kinds {
                let args = slurm::apptainer_build_args(&partial, &staged.source, oci);
                converted = self.command_within(IMAGE_CONVERSION_TIMEOUT, "apptainer", &args).await;
                if converted.is_ok() {
                    break;
                }
            }
            if let Err(why) = converted {
                let _ = std::fs::remove_file(&partial);
                return Err(fail(format!("converting it to a SIF file: {why}")));
            }
            readable(&partial)?;
            std::fs::rename(&partial, &staged.sif).map_err(|e| fail(e.to_string()))?;
        }
        Ok(staged)
    }

    /// Makes the job's dir with its inputs and batch script (all the mapped account's, where
    /// the job runs as one), and records the job. Blocking.
    fn stage(
        &self,
        job: &Assignment,
        dir: &JobDir,
        inputs: &[(PathBuf, PathBuf)],
        run_as: slurm::RunAs,
        image: Option<(ContainerEngine, &StagedImage)>,
        session_env: &[(&'static str, String)],
    ) -> std::io::Result<Record> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // A dir left by an earlier attempt of this job holds nothing anyone will collect.
        let _ = std::fs::remove_dir_all(dir.root());
        std::fs::DirBuilder::new().mode(0o700).create(dir.root())?;
        let staged = WorkDir::create_at(dir.work(), inputs)?;
        let script = match &job.batch {
            Some(batch) => {
                let copy = dir.root().join(slurm::BATCH_SCRIPT_COPY);
                let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o500).open(&copy)?;
                std::io::Write::write_all(&mut file, batch.script.as_bytes())?;
                slurm::batch_job_script(job, batch, dir, &copy)
            }
            None => batch_script(job, dir, &self.job_path, image, session_env),
        };
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(dir.script())?;
        std::io::Write::write_all(&mut file, script.as_bytes())?;
        if let Some((uid, gid)) = run_as {
            hand_over(dir.root(), uid, gid)?;
        }
        let record = Record {
            job_id: job.job_id,
            slurm_id: None,
            staged: staged.into_iter().map(|(path, (size, modified))| (path, size, modified)).collect(),
            attempt: job.attempt,
            log_offsets: job.log_offsets,
            reach_as: None,
            session: None,
        };
        self.save(&record)?;
        Ok(record)
    }

    /// A handle on a submitted job, which it follows through Slurm.
    fn follow(self: &Arc<Self>, record: Record, events: JobEvents) -> Result<SubmittedJob, JobError> {
        let slurm_id = record
            .slurm_id
            .clone()
            .ok_or_else(|| JobError::BatchSystem("the job was never submitted to Slurm".into()))?;
        let sightings = self.monitor.watch(record.job_id, &slurm_id);
        Ok(SubmittedJob {
            runner: self.clone(),
            dir: JobDir::new(&self.config.work_root, record.job_id),
            events,
            slurm_id,
            sightings,
            ended: watch::channel(false).0,
            last: None,
            running: false,
            reason: None,
            exited: false,
            cancelled: false,
            usage: None,
            reach_as: record.reach_as.map(|reach| reach.run_as),
            record,
        })
    }

    /// How a job Slurm no longer knows (and keeps no accounting of) ended: by the exit code
    /// its script wrote, if it wrote one.
    fn outcome_without_slurm(&self, dir: &JobDir, stop_requested: bool) -> Outcome {
        let code = std::fs::read_to_string(dir.exit_code()).ok().and_then(|code| code.trim().parse::<i32>().ok());
        match code {
            Some(0) => (JobStatus::Completed, Some(0), None),
            Some(code) => (JobStatus::Failed, Some(code), Some(format!("exit status {code}"))),
            None if stop_requested => (JobStatus::Stopped, None, Some("stopped".into())),
            None => (
                JobStatus::Failed,
                None,
                Some("Slurm no longer knows the job, keeps no accounting of it, and it left no exit status".into()),
            ),
        }
    }
}

impl Runner for SlurmRunner {
    type Job = SubmittedJob;

    async fn offer(&self) -> Offer {
        match self.capacity().await {
            Ok(capacity) => *self.offer.lock().expect("not poisoned") = capacity,
            Err(why) => tracing::warn!("reading the cluster's nodes failed ({why}); offering what sinfo said last"),
        }
        let (resources, max_jobs) = match &self.config.pilots {
            // Jobs go to the pilots: the gateway takes none, but its size tells which jobs a pilot
            // could run (and refuses the others at submission).
            Some(pilots) => (pilots.pilot.size, 0),
            None => (*self.offer.lock().expect("not poisoned"), self.config.max_jobs),
        };
        Offer {
            resources,
            gpus: Vec::new(),
            max_jobs: Some(max_jobs),
            cluster_account: Some(self.account.clone()),
            images: self.config.containers.is_some() && self.config.pilots.is_none(),
            // Pilots take no batch jobs: they run as the gateway's account.
            shared_paths: if self.config.pilots.is_none() { self.shared_paths.clone() } else { Vec::new() },
            // Its jobs' files are on the cluster's nodes, out of its sight.
            disk_mb: None,
        }
    }

    fn attach(self: &Arc<Self>, client: &Arc<LzClient>) {
        if self.config.pilots.is_some() {
            tokio::spawn(fly_pilots(Arc::downgrade(self), client.clone()));
        }
    }

    fn refusal(&self, job: &Assignment) -> Option<String> {
        if let Some(batch) = &job.batch {
            let mapped = self.user_map.as_ref().is_some_and(|map| map.contains_key(&job.username));
            return super::batch::refusal(&self.shared_paths, mapped, job, batch);
        }
        if job.session.is_some() && job.image.is_some() {
            return Some(
                "refused by the landing zone: a session in an image runs on a process landing zone or on this \
                 gateway's pilots, not as a Slurm job"
                    .into(),
            );
        }
        if job.task.is_some() {
            return Some(
                "refused by the landing zone: a GA4GH TES task runs on a process landing zone or on this gateway's \
                 pilots, not as a Slurm job"
                    .into(),
            );
        }
        if job.image.is_some() && self.config.containers.is_none() {
            return Some(
                "refused by the landing zone: its jobs run in no container images (--container-engine)".into(),
            );
        }
        self.run_as(job).err().map(|e| e.to_string())
    }

    async fn start(
        self: &Arc<Self>,
        job: &Assignment,
        inputs: Vec<(PathBuf, PathBuf)>,
        events: JobEvents,
    ) -> Result<SubmittedJob, JobError> {
        if job.session.is_some() {
            events.session_reach(Reach::Waiting);
        }
        let session_env = events.session_env().to_vec();
        let session = events.saved_session();
        let record = self.submit(events.client(), job, inputs, &session_env, session).await?;
        self.follow(record, events)
    }

    fn recovered(&self) -> Vec<(Uuid, u32)> {
        self.recovered.lock().expect("not poisoned").values().map(|r| (r.job_id, r.attempt)).collect()
    }

    async fn recover(self: &Arc<Self>, job_id: Uuid, events: JobEvents) -> Result<SubmittedJob, JobError> {
        let record = self.recovered.lock().expect("not poisoned").remove(&job_id);
        let Some(record) = record else {
            self.forget(job_id);
            return Err(JobError::Agent("the agent lost its record of the job".to_owned()));
        };
        tracing::info!(%job_id, slurm_id = ?record.slurm_id, "resuming a Slurm job");
        if let Some(session) = record.session.clone() {
            events.restore_session(session);
        }
        self.follow(record, events)
    }

    // A restarted agent finds them by name.
    const JOBS_OUTLIVE_AGENT: bool = true;
}

/// A job submitted to Slurm, followed by the monitor's sightings: while Slurm keeps it waiting,
/// its reason says why (Slurm's pending reason); when Slurm starts it, it runs. Its output files
/// are tailed only once it left Slurm's queue: a thousand queued jobs must not cost the shared
/// filesystem a lookup each, several times a second.
pub(crate) struct SubmittedJob {
    runner: Arc<SlurmRunner>,
    record: Record,
    slurm_id: String,
    dir: JobDir,
    events: JobEvents,
    sightings: watch::Receiver<Option<Sighting>>,
    /// Set once it ended: its output files are read to their ends.
    ended: watch::Sender<bool>,
    /// What Slurm last said of it, once that was its end.
    last: Option<SlurmJob>,
    running: bool,
    /// The reason it waits, last reported.
    reason: Option<String>,
    /// Whether its script wrote its exit code.
    exited: bool,
    /// Whether it was cancelled (a stop).
    cancelled: bool,
    /// What accounting answers of its usage, asked as it ends.
    usage: Option<oneshot::Receiver<Option<JobUsage>>>,
    /// The account `srun` reaches into it as, for its session and shells (`Some(None)`: the
    /// gateway's own); `None` for a job an agent before version 0.2 submitted.
    reach_as: Option<slurm::RunAs>,
}

impl SubmittedJob {
    /// Tells that the job runs, from when its script says it started; from then on its session
    /// (if it is one) and shells in it are reached through `srun` into its allocation.
    async fn started(&mut self) {
        let at = started_at(&self.dir).await;
        self.running = true;
        if let Some(run_as) = self.reach_as {
            let relay = [self.runner.program.as_os_str().to_owned(), "lz-relay".into()];
            self.events.session_reach(Reach::Node(self.runner.srun_into(&self.slurm_id, run_as, &relay)));
            let shell = SlurmShell { srun: self.runner.srun_into(&self.slurm_id, run_as, &[]), work: self.dir.work() };
            self.events.shells_open(Arc::new(shell));
        }
        self.events.running(at, format!("Slurm job {}: its limits are Slurm's", self.slurm_id));
    }
}

/// Starts shells in a Slurm job: `srun --overlap` into its allocation (with `--pty` on a
/// terminal, under `setsid --ctty`, so that `srun` has the terminal and sees its resizes).
struct SlurmShell {
    /// `srun` into the job, without its program.
    srun: NodeCommand,
    work: PathBuf,
}

impl ShellStarter for SlurmShell {
    fn start(
        &self,
        program: Vec<OsString>,
        terminal: bool,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
    ) -> std::io::Result<ShellProcess> {
        let mut args: Vec<OsString> = vec![format!("--chdir={}", self.work.display()).into()];
        if terminal {
            args.push("--pty".into());
        }
        args.extend(program);
        let prefix: &[&str] = if terminal { &["setsid", "--ctty"] } else { &[] };
        let mut command = self.srun.wrapped(prefix, &args);
        let [stdin, stdout, stderr] = stdio;
        command.stdin(stdin.try_clone_to_owned()?).stdout(stdout.try_clone_to_owned()?);
        command.stderr(stderr.try_clone_to_owned()?).kill_on_drop(true);
        command.spawn().map(ShellProcess::Child)
    }
}

impl SlurmRunner {
    /// `srun` into the running Slurm job `slurm_id` (one task on its first node, beside its
    /// own), as `run_as`, running `args`; unbuffered (`srun` holds a task's output back until a
    /// line ends otherwise, and a WebSocket's frames have no lines).
    fn srun_into(&self, slurm_id: &str, run_as: slurm::RunAs, args: &[OsString]) -> NodeCommand {
        let mut program: Vec<OsString> =
            ["srun", &format!("--jobid={slurm_id}"), "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--unbuffered"]
                .map(OsString::from)
                .to_vec();
        program.extend(args.iter().cloned());
        NodeCommand { program, env: self.command_env.clone(), ids: run_as }
    }
}

impl JobHandle for SubmittedJob {
    fn output(&mut self) -> JobOutput {
        JobOutput {
            offsets: self.record.log_offsets,
            source: OutputSource::Files {
                paths: [self.dir.log("stdout"), self.dir.log("stderr")],
                ended: self.ended.subscribe(),
            },
        }
    }

    async fn wait(&mut self) {
        loop {
            let sighting = self.sightings.borrow_and_update().clone();
            let queued = match sighting {
                Some(Sighting::Seen(job)) if job.state.is_final() => {
                    self.last = Some(job);
                    return;
                }
                Some(Sighting::Gone) => return,
                Some(Sighting::Seen(job)) => {
                    if let Some(waiting) = job.pending_reason() {
                        if self.reason.as_ref() != Some(&waiting) {
                            self.events.waiting(waiting.clone());
                            self.reason = Some(waiting);
                        }
                    } else if !self.running {
                        self.started().await;
                    }
                    job.state == slurm::SlurmState::Pending
                }
                None => false,
            };
            tokio::select! {
                changed = self.sightings.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(EXIT_CHECK), if !self.exited && !queued => {
                    // The script says when it starts and ends, sooner than Slurm would be asked.
                    if !self.running && tokio::fs::try_exists(self.dir.started()).await.unwrap_or(false) {
                        self.started().await;
                    }
                    if tokio::fs::try_exists(self.dir.exit_code()).await.unwrap_or(false) {
                        self.exited = true;
                        self.runner.monitor.nudge.notify_one();
                    }
                }
            }
        }
    }

    async fn signal(&mut self, _: Signal) {
        // Slurm sends `SIGTERM`, and `SIGKILL` after the cluster's `KillWait`, which stands for
        // the grace a stop gives: one cancel does both.
        if std::mem::replace(&mut self.cancelled, true) {
            return;
        }
        if let Err(why) = self.runner.command("scancel", std::slice::from_ref(&self.slurm_id)).await {
            tracing::warn!(job_id = %self.record.job_id, "cancelling the Slurm job failed: {why}");
        }
        self.runner.monitor.nudge.notify_one();
    }

    async fn finish(&mut self, stopped: bool) -> Result<Finished, JobError> {
        self.runner.monitor.unwatch(self.record.job_id);
        if !self.running && tokio::fs::try_exists(self.dir.started()).await.unwrap_or(false) {
            // It ran between two looks.
            self.started().await;
        }
        // Accounting is asked while the output and results go up.
        self.usage = self.running.then(|| self.runner.monitor.usage(&self.slurm_id));
        self.ended.send_replace(true);
        let outcome = match self.last.as_ref().and_then(|job| job.outcome(stopped)) {
            Some(outcome) => outcome,
            None => self.runner.outcome_without_slurm(&self.dir, stopped),
        };
        let (work, staged): (PathBuf, Staged) = (
            self.dir.work(),
            self.record.staged.iter().map(|(path, size, modified)| (path.clone(), (*size, *modified))).collect(),
        );
        let results = tokio::task::spawn_blocking(move || changed_files(&work, &staged)).await?;
        Ok(Finished { outcome, results, task: None })
    }

    async fn usage(&mut self) -> Option<JobUsage> {
        let usage = match self.usage.take() {
            Some(accounted) => accounted.await.ok().flatten(),
            None => None,
        };
        // The script's clock times the program to the millisecond; Slurm's, to the second.
        match (usage, wall_time(&self.dir).await) {
            (Some(usage), Some(wall_time)) => Some(JobUsage { wall_time, ..usage }),
            (usage, _) => usage,
        }
    }

    async fn release(self) {
        let (runner, job_id) = (self.runner, self.record.job_id);
        let _ = tokio::task::spawn_blocking(move || runner.forget(job_id)).await;
    }

    // A retry of the job, which the report may bring at once, stages into the same dir.
    const RELEASE_BEFORE_REPORT: bool = true;
}

/// The time the job's script wrote to `path`, if it wrote one.
async fn stamp(path: PathBuf) -> Option<chrono::DateTime<chrono::Utc>> {
    slurm::parse_stamp(&tokio::fs::read_to_string(path).await.ok()?)
}

/// When the job's script started, as it wrote; now where it wrote nothing readable.
async fn started_at(dir: &JobDir) -> chrono::DateTime<chrono::Utc> {
    stamp(dir.started()).await.unwrap_or_else(chrono::Utc::now)
}

/// Seconds the program ran, by the script's stamps, where it wrote both.
async fn wall_time(dir: &JobDir) -> Option<f64> {
    let ran = stamp(dir.ended()).await? - stamp(dir.started()).await?;
    (ran >= chrono::TimeDelta::zero()).then(|| ran.as_seconds_f64())
}

/// How often a gateway with pilots asks the server for its station's demand.
const DEMAND_EVERY: Duration = Duration::from_millis(500);
/// How long a pilot counts as starting after Slurm started it (its agent connecting).
const PILOT_WARM_UP: Duration = Duration::from_secs(3);

/// A pilot the gateway started.
struct Flying {
    slurm_id: String,
    sightings: watch::Receiver<Option<Sighting>>,
    /// When Slurm was seen running it.
    running_since: Option<Instant>,
}

/// Starts pilots while the station has work no connected landing zone takes, and removes those
/// whose Slurm job ended, until the runner is gone.
async fn fly_pilots(runner: Weak<SlurmRunner>, client: Arc<LzClient>) {
    let mut flying: HashMap<Uuid, Flying> = HashMap::new();
    // Pilots an earlier run of this gateway started (found by their names, and their dirs in its
    // work root: another gateway of the account has its own) are followed on, so that they are
    // removed when they end.
    if let Some(runner) = runner.upgrade() {
        match runner.queue().await {
            Ok(listed) => {
                for job in listed {
                    let Some(lz_id) = job.pilot else { continue };
                    if !slurm::PilotDir::new(&runner.config.work_root, lz_id).root().is_dir() {
                        continue;
                    }
                    let sightings = runner.monitor.watch(lz_id, &job.slurm_id);
                    tracing::info!(%lz_id, slurm_id = %job.slurm_id, "following a pilot of an earlier run");
                    flying.insert(lz_id, Flying { slurm_id: job.slurm_id, sightings, running_since: None });
                }
            }
            Err(why) => tracing::warn!("looking for pilots of an earlier run failed: {why}"),
        }
    }
    loop {
        tokio::time::sleep(DEMAND_EVERY).await;
        let Some(runner) = runner.upgrade() else { return };
        let Some(pilots) = runner.config.pilots.clone() else { return };
        // Pilots whose Slurm job ended are removed; their unfinished jobs go back in the queue.
        let mut landed = Vec::new();
        for (lz_id, pilot) in &mut flying {
            match pilot.sightings.borrow_and_update().clone() {
                Some(Sighting::Seen(job)) if job.state.is_final() => landed.push(*lz_id),
                Some(Sighting::Gone) => landed.push(*lz_id),
                Some(Sighting::Seen(job)) if job.state == slurm::SlurmState::Running => {
                    pilot.running_since.get_or_insert_with(Instant::now);
                }
                _ => {}
            }
        }
        for lz_id in landed {
            let pilot = flying.remove(&lz_id).expect("listed above");
            runner.monitor.unwatch(lz_id);
            tracing::info!(%lz_id, slurm_id = %pilot.slurm_id, "pilot ended");
            if let Err(e) = client.delivered(|| client.remove_pilot(lz_id)).await {
                tracing::warn!(%lz_id, "removing the pilot failed: {e}");
            }
            let _ = std::fs::remove_dir_all(slurm::PilotDir::new(&runner.config.work_root, lz_id).root());
        }
        let demand = match client.demand().await {
            Ok(demand) => demand,
            Err(e) => {
                tracing::debug!("asking for the station's demand failed: {e}");
                continue;
            }
        };
        let starting =
            flying.values().filter(|p| p.running_since.is_none_or(|since| since.elapsed() < PILOT_WARM_UP)).count();
        let per_pilot = u64::from(pilots.pilot.size.cpu_count.max(1));
        let wanted = demand.queued_cpus.div_ceil(per_pilot) as usize;
        let room = (pilots.max_pilots as usize).saturating_sub(flying.len());
        for _ in 0..wanted.saturating_sub(starting).min(room) {
            match runner.launch_pilot(&client, &pilots.pilot).await {
                Ok((lz_id, slurm_id)) => {
                    let sightings = runner.monitor.watch(lz_id, &slurm_id);
                    flying.insert(lz_id, Flying { slurm_id, sightings, running_since: None });
                }
                Err(why) => {
                    tracing::warn!("starting a pilot failed: {why}");
                    break;
                }
            }
        }
    }
}

impl SlurmRunner {
    /// Registers a pilot and submits its Slurm job; answers its landing zone and Slurm's id.
    async fn launch_pilot(&self, client: &LzClient, pilot: &slurm::Pilot) -> Result<(Uuid, String), SlurmError> {
        let registered = client.register_pilot().await?;
        let lz_id = registered.landing_zone.lz_id;
        let dir = slurm::PilotDir::new(&self.config.work_root, lz_id);
        let script = slurm::pilot_script(&dir, pilot, &self.program, &self.servers, &self.job_path);
        let written = (|| {
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new().mode(0o700).create(dir.root())?;
            let create = |path: PathBuf, mode: u32, content: &str| {
                let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
                std::io::Write::write_all(&mut file, content.as_bytes())
            };
            create(dir.token(), 0o600, &registered.token)?;
            create(dir.script(), 0o700, &script)
        })();
        let submitted = match written {
            Ok(()) => {
                let args = slurm::pilot_sbatch_args(lz_id, &dir, pilot, &self.config.site);
                self.command("sbatch", &args).await.map_err(SlurmError::from)
            }
            Err(source) => Err(SlurmError::PilotDir { path: dir.root().to_owned(), source }),
        };
        match submitted {
            Ok(answer) => {
                let slurm_id = answer.trim().split(';').next().unwrap_or_default().to_owned();
                tracing::info!(%lz_id, %slurm_id, "pilot submitted");
                Ok((lz_id, slurm_id))
            }
            Err(why) => {
                let _ = std::fs::remove_dir_all(dir.root());
                let _ = client.remove_pilot(lz_id).await;
                Err(why)
            }
        }
    }
}

/// What the monitor last learnt of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sighting {
    /// Slurm lists it so.
    Seen(SlurmJob),
    /// Neither `squeue` nor `sacct` knows it.
    Gone,
}

/// A job the monitor follows.
struct Watched {
    slurm_id: String,
    /// When following began: a job submitted after a `squeue` began may be missing from it.
    since: Instant,
    sightings: watch::Sender<Option<Sighting>>,
}

/// A job that ended, whose usage is asked of accounting.
struct Unaccounted {
    slurm_id: String,
    /// When it was first asked for.
    since: Instant,
    answer: oneshot::Sender<Option<JobUsage>>,
}

/// Asks Slurm about all the agent's jobs in one call per turn, and tells each job's task what
/// changed; and asks accounting what the jobs that ended used, in one call per turn too.
#[derive(Default)]
struct Monitor {
    watched: Mutex<HashMap<Uuid, Watched>>,
    /// Jobs whose usage accounting is asked for each turn, until it has it, says it has none, or
    /// [`USAGE_PATIENCE`] passed.
    unaccounted: Mutex<Vec<Unaccounted>>,
    /// Asks for a turn now (a job was submitted, cancelled, or its program exited).
    nudge: Notify,
}

impl Monitor {
    fn watch(&self, job_id: Uuid, slurm_id: &str) -> watch::Receiver<Option<Sighting>> {
        let (sightings, receiver) = watch::channel(None);
        let watched = Watched { slurm_id: slurm_id.to_owned(), since: Instant::now(), sightings };
        self.watched.lock().expect("not poisoned").insert(job_id, watched);
        self.nudge.notify_one();
        receiver
    }

    fn unwatch(&self, job_id: Uuid) {
        self.watched.lock().expect("not poisoned").remove(&job_id);
    }

    /// What the ended job `slurm_id` used, once accounting has it (`None`: it has nothing).
    fn usage(&self, slurm_id: &str) -> oneshot::Receiver<Option<JobUsage>> {
        let (answer, answered) = oneshot::channel();
        let unaccounted = Unaccounted { slurm_id: slurm_id.to_owned(), since: Instant::now(), answer };
        self.unaccounted.lock().expect("not poisoned").push(unaccounted);
        self.nudge.notify_one();
        answered
    }

    fn idle(&self) -> bool {
        self.watched.lock().expect("not poisoned").is_empty()
            && self.unaccounted.lock().expect("not poisoned").is_empty()
    }

    /// Turns until the runner is gone: after `poll.first` when the last turn saw a change,
    /// twice as long as the last wait (up to `poll.max`) when it saw none, and when nudged at
    /// once, but never sooner than half of `poll.first` after the last turn (a stream of jobs
    /// starting and ending nudges all the time).
    async fn run(runner: Weak<SlurmRunner>, poll: Backoff) {
        let mut wait = poll.first;
        loop {
            tokio::time::sleep(poll.first / 2).await;
            let Some(monitor) = runner.upgrade().map(|r| r.monitor.clone()) else { return };
            if monitor.idle() {
                wait = poll.first;
                monitor.nudge.notified().await;
            } else {
                tokio::select! {
                    () = tokio::time::sleep(wait.saturating_sub(poll.first / 2)) => {}
                    () = monitor.nudge.notified() => wait = poll.first,
                }
            }
            let Some(runner) = runner.upgrade() else { return };
            let changed = match monitor.turn(&runner).await {
                Ok(changed) => changed,
                Err(why) => {
                    tracing::warn!("asking Slurm about the jobs failed: {why}");
                    false
                }
            };
            wait = if changed { poll.first } else { (wait * 2).min(poll.max) };
        }
    }

    /// One `squeue` for every job (and one `sacct` for those it no longer lists), and one `sacct`
    /// for the usage of those that ended; answers whether anything changed, or is still awaited.
    async fn turn(&self, runner: &SlurmRunner) -> Result<bool, SlurmError> {
        let awaited = self.account(runner).await;
        Ok(self.look(runner).await? || awaited)
    }

    /// Answers each job whose usage accounting now has, or will not have; answers whether some
    /// are still awaited.
    async fn account(&self, runner: &SlurmRunner) -> bool {
        let asked = std::mem::take(&mut *self.unaccounted.lock().expect("not poisoned"));
        if asked.is_empty() {
            return false;
        }
        let ids: Vec<String> = asked.iter().map(|u| u.slurm_id.clone()).collect();
        let mut accounted = match runner.usage(&ids).await {
            Ok(accounted) => accounted,
            Err(why) => {
                // A cluster without accounting (no slurmdbd) has nothing to wait for.
                tracing::debug!("no usage from accounting: {why}");
                for asked in asked {
                    let _ = asked.answer.send(None);
                }
                return false;
            }
        };
        let mut awaited = Vec::new();
        for asked in asked {
            let answer = match accounted.remove(&asked.slurm_id) {
                Some(usage) => Some(usage),
                None if asked.since.elapsed() >= USAGE_PATIENCE => None,
                None => {
                    awaited.push(asked);
                    continue;
                }
            };
            // The job's task may have gone (the agent shutting down): nobody to answer.
            let _ = asked.answer.send(answer);
        }
        let waiting = !awaited.is_empty();
        self.unaccounted.lock().expect("not poisoned").extend(awaited);
        waiting
    }

    /// One `squeue` for every watched job (and one `sacct` for those it no longer lists);
    /// answers whether anything changed.
    async fn look(&self, runner: &SlurmRunner) -> Result<bool, SlurmError> {
        if self.watched.lock().expect("not poisoned").is_empty() {
            return Ok(false);
        }
        let began = Instant::now();
        let listed = runner.queue().await?;
        let mut changed = false;
        let mut missing = Vec::new();
        {
            let watched = self.watched.lock().expect("not poisoned");
            for (job_id, watch) in watched.iter() {
                match listed.iter().find(|j| j.slurm_id == watch.slurm_id) {
                    Some(job) => changed |= tell(&watch.sightings, Sighting::Seen(job.clone())),
                    None if watch.since < began => missing.push((*job_id, watch.slurm_id.clone())),
                    None => {}
                }
            }
        }
        if !missing.is_empty() {
            let ids: Vec<String> = missing.iter().map(|(_, slurm_id)| slurm_id.clone()).collect();
            let accounted = runner.accounting(&ids).await;
            let watched = self.watched.lock().expect("not poisoned");
            for (job_id, slurm_id) in missing {
                let Some(watch) = watched.get(&job_id) else { continue };
                let sighting = match accounted.iter().find(|j| j.slurm_id == slurm_id) {
                    Some(job) => Sighting::Seen(SlurmJob { job_id: Some(job_id), ..job.clone() }),
                    None => Sighting::Gone,
                };
                changed |= tell(&watch.sightings, sighting);
            }
        }
        Ok(changed)
    }
}

/// Tells a job's task what the monitor saw, if it is news; answers whether it was.
fn tell(sightings: &watch::Sender<Option<Sighting>>, sighting: Sighting) -> bool {
    sightings.send_if_modified(|last| {
        if last.as_ref() == Some(&sighting) {
            return false;
        }
        *last = Some(sighting);
        true
    })
}

/// Makes everything under `root` (and it) belong to `uid`:`gid`, following no link. Blocking.
fn hand_over(root: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let mut paths = vec![root.to_path_buf()];
    while let Some(path) = paths.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        if std::fs::symlink_metadata(&path)?.is_dir() {
            paths.extend(std::fs::read_dir(&path)?.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>()?);
        }
    }
    Ok(())
}

/// The name of the account the agent runs as, from `id -un` (which asks NSS: cluster accounts
/// are often in LDAP, not `/etc/passwd`).
fn account_name() -> Result<String, String> {
    let out = std::process::Command::new("id").arg("-un").output().map_err(|e| format!("cannot run id: {e}"))?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || name.is_empty() {
        return Err(format!(
            "the agent's account has no name (id -un: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(name)
}

/// `path` made absolute (without resolving links), to compare where dirs lie.
fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_start_up_step_is_retried_until_slurm_answers() {
        let tries = AtomicU32::new(0);
        let answer = patiently("asking", || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0..3 => Err("slurmctld is busy".to_owned()),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(answer.expect("answered on the fourth try"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slurm_that_never_answers_fails_the_start_naming_the_step() {
        let started = tokio::time::Instant::now();
        let answer: Result<(), _> =
            patiently("reading the cluster's nodes", || async { Err("no controller".to_owned()) }).await;
        let why = answer.expect_err("gave up").to_string();
        assert!(why.contains("reading the cluster's nodes: no controller"), "{why}");
        assert!(started.elapsed() <= STARTUP_PATIENCE, "gave up within its patience");
        assert!(started.elapsed() >= STARTUP_PATIENCE - STARTUP_RETRY.max, "kept trying for most of it");
    }
}
