//! The process runner: jobs as child processes of the agent on its own host.
//!
//! - Starting: one blocking step takes the job's user, copies the staged inputs from the content
//!   cache into a work dir of that user, takes the job's cgroup and starts the program in its
//!   sandbox (few thread hand-offs: a trivial job's whole life is a few milliseconds).
//! - Running: the command runs in the work dir in its own process group, sandbox (see
//!   `sandbox`) and cgroup (where the host has them), with nothing of the agent's environment
//!   but `PATH` and the locale: `HOME` (the work dir), `MISSION_ID`, `JOB_ID`,
//!   `OMP_NUM_THREADS` and `CUDA_VISIBLE_DEVICES`; its stdout and stderr are pipes.
//! - Signals: `Term` goes to the process group; `Kill` kills the whole process tree (group and
//!   cgroup). The job's time limit kills at once (the job fails with the reason "time limit",
//!   its results uploaded).
//! - Finishing: what the program left running is killed, its cgroup measured and handed back, and
//!   the work dir searched for new or changed files, in one blocking step.
//! - Releasing: the work dir is emptied of all but its input copies, for the user's next job
//!   (see `workdirs`), and the job's user is handed back.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use mission_api::lz::{Assignment, GangNode, Gpu};
use mission_api::{
    ContainerNetwork, JobStatus, JobUsage, KILLED_BY_SIGNAL_REASON, OUT_OF_MEMORY_REASON, Resources, TIME_LIMIT_REASON,
};

use super::{Finished, JobError, JobEvents, JobHandle, JobOutput, Offer, OutputSource, Runner, Signal, task};
use crate::cgroups::{Cgroups, JobCgroup};
use crate::config::AgentConfig;
use crate::detect::detect;
use crate::dirs::{default_work_root, private_dir};
use crate::error::AgentError;
use crate::output::changed_files;
use crate::podman::{ContainerRun, Podman};
use crate::sandbox::spawner::Plan;
use crate::sandbox::{JobProcess, JobUser, Launcher, Sandbox, SandboxError};
use crate::shell::{ShellProcess, ShellStarter};
use crate::workdirs::{WorkDir, WorkDirs};

/// The process runner of one agent.
pub(crate) struct ProcessRunner {
    cgroups: Cgroups,
    work_dirs: WorkDirs,
    sandbox: Sandbox,
    launcher: Launcher,
    /// What every job's environment starts from (see [`base_env`]).
    job_env: Vec<(&'static str, std::ffi::OsString)>,
    resources: Resources,
    gpus: Vec<Gpu>,
    /// What measures jobs' energy.
    meters: crate::energy::Meters,
    /// What runs jobs in container images, or why nothing does.
    podman: Option<Podman>,
    no_images: String,
    /// Where batch jobs may run (see [`crate::AgentConfig::shared_paths`]).
    shared_paths: Vec<String>,
}

/// The exit status `podman run` answers for a container that was killed (`SIGKILL`).
const CONTAINER_KILLED: i32 = 137;

impl ProcessRunner {
    /// Makes the work root, finds how jobs can be confined and what the host offers, and sweeps
    /// away what an earlier run of the agent left.
    pub async fn start(config: &AgentConfig) -> Result<Arc<Self>, AgentError> {
        // Work dirs of agents before version 0.2 lay in the data dir.
        let _ = std::fs::remove_dir_all(config.data_dir.join("jobs"));
        let mut isolation = config.sandbox.clone();
        if isolation.work_root.as_os_str().is_empty() {
            isolation.work_root = default_work_root(&config.data_dir);
        }
        let work_root = isolation.work_root.clone();
        // Job users must pass through the work root (0711: they cannot list it) to their own dirs.
        let root = rustix::process::geteuid().is_root();
        for dir in work_root.ancestors().take(2).collect::<Vec<_>>().into_iter().rev() {
            private_dir(dir, if root { 0o711 } else { 0o700 })
                .map_err(|e| AgentError::DataDir(dir.to_path_buf(), e))?;
        }
        // Work dirs of a previous run of this agent hold nothing anyone will collect.
        if let Ok(entries) = std::fs::read_dir(&work_root) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let job_env = match own_binary_dir(&work_root) {
            Some(dir) => with_path_dir(base_env(), &dir),
            None => base_env(),
        };
        isolation.private_dirs.insert(0, config.data_dir.clone());
        let launcher = Launcher::start().map_err(|e| AgentError::DataDir(work_root.clone(), e))?;
        let (sandbox, launcher) = tokio::task::spawn_blocking(move || {
            let sandbox = Sandbox::detect(&isolation, &launcher)?;
            // Before anything runs: what jobs of agents that died left running goes.
            sandbox.sweep();
            Ok::<_, SandboxError>((sandbox, launcher))
        })
        .await
        .expect("sandbox detection does not panic")?;
        let (resources, gpus) = detect(config.overrides).await;
        let agent_label = work_root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (podman, no_images) = match Podman::detect(&config.data_dir, config.containers.clone(), &agent_label).await
        {
            Ok(podman) => (Some(podman), String::new()),
            Err(why) => {
                tracing::info!("this landing zone runs no jobs in container images: {why}");
                (None, why.to_string())
            }
        };
        let cgroups = if config.no_limits {
            Cgroups::unavailable("switched off on this landing zone (--lz-no-limits)")
        } else {
            tokio::task::spawn_blocking(Cgroups::detect).await.unwrap_or_else(|e| Cgroups::unavailable(e.to_string()))
        };
        // GPUs only declared (`--gpus` past those found) have no UUID and nothing to read.
        let meters = crate::energy::Meters::detect(gpus.iter().any(|gpu| !gpu.uuid.is_empty()));
        tracing::info!(
            cpus = resources.cpu_count,
            memory_mb = resources.memory_amount,
            gpus = resources.gpu_count,
            limits = %cgroups.describe(),
            jobs = %sandbox.describe(),
            work_root = %work_root.display(),
            energy = %meters.describe(),
            "landing zone agent starting"
        );
        Ok(Arc::new(Self {
            cgroups,
            work_dirs: WorkDirs::new(work_root),
            sandbox,
            launcher,
            job_env,
            resources,
            gpus,
            meters,
            podman,
            no_images,
            shared_paths: config.shared_paths.clone(),
        }))
    }
}

impl Runner for ProcessRunner {
    type Job = ProcessJob;

    async fn offer(&self) -> Offer {
        Offer {
            resources: self.resources,
            gpus: self.gpus.clone(),
            max_jobs: None,
            cluster_account: None,
            images: self.podman.is_some(),
            shared_paths: self.shared_paths.clone(),
            disk_mb: self.work_dirs.free_mb(),
        }
    }

    fn refusal(&self, job: &Assignment) -> Option<String> {
        if job.image.is_some() && self.podman.is_none() {
            return Some(format!("refused by the landing zone: it runs no container images ({})", self.no_images));
        }
        if job.session.is_some() && job.image.is_some() && job.container_network == ContainerNetwork::None {
            return Some(
                "refused: a session in an image needs its station's container network to be host (its port is \
                 reached on the host's loopback)"
                    .into(),
            );
        }
        if let Some(batch) = &job.batch
            && let Some(why) = super::batch::refusal(&self.shared_paths, self.sandbox.maps(&job.username), job, batch)
        {
            return Some(why);
        }
        self.sandbox.refusal(job)
    }

    async fn start(
        self: &Arc<Self>,
        job: &Assignment,
        inputs: Vec<(PathBuf, PathBuf)>,
        events: JobEvents,
    ) -> Result<ProcessJob, JobError> {
        // A task's executors each run in an image of their own.
        let wanted: Vec<&mission_api::JobImage> = match (&job.task, &job.image) {
            (Some(task), _) => task.executors.iter().map(|executor| &executor.image).collect(),
            (None, image) => image.iter().collect(),
        };
        let mut images = Vec::with_capacity(wanted.len());
        if let Some(podman) = &self.podman {
            for image in wanted {
                match podman.take(events.client(), job.job_id, image).await {
                    Ok(taken) => images.push(taken),
                    Err(e) => {
                        let e = JobError::Image(format!("{}: {e}", image.digest));
                        return Err(self.released_images(images, e).await);
                    }
                }
            }
        }
        let launched = {
            let (runner, job, images) = (self.clone(), job.clone(), images.clone());
            let session_env = events.session_env().to_vec();
            tokio::task::spawn_blocking(move || launch(&runner, &job, &inputs, &images, &session_env)).await
        };
        let launched = match launched {
            Ok(Ok(launched)) => launched,
            Ok(Err(e)) => return Err(self.released_images(images, e).await),
            Err(e) => return Err(self.released_images(images, e.into()).await),
        };
        let Launched { mut program, group, limits, dir, user, plan, task, exec } = launched;
        let exec_gate = match exec.map(|exec| crate::gang::serve_exec(exec, events.shared_client(), job.job_id)) {
            Some(Ok(gate)) => Some(gate),
            Some(Err(e)) => {
                tracing::warn!(job_id = %job.job_id, "serving the gang's exec socket: {e}");
                None
            }
            None => None,
        };
        match (plan, &program) {
            (Some(plan), Program::Sandboxed(process)) => {
                events.shells_open(Arc::new(SandboxShell { runner: self.clone(), plan, pid: process.pid }));
            }
            (_, Program::Container { name, .. }) => {
                let user = user
                    .ids()
                    .unwrap_or_else(|| (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()));
                let (name, work_dir) = (name.clone(), dir.path().to_owned());
                events.shells_open(Arc::new(ContainerShell { runner: self.clone(), name, user, work_dir }));
            }
            _ => {}
        }
        events.running(chrono::Utc::now(), limits);
        let meter = self.meters.start(&job.gpu_indices);
        let pipes = program.take_pipes();
        let time_limit = job
            .time_limit
            .map(|minutes| tokio::time::Instant::now() + std::time::Duration::from_secs(u64::from(minutes) * 60));
        Ok(ProcessJob {
            runner: self.clone(),
            pid: program.pid(),
            program,
            images,
            task,
            group,
            pipes: Some(JobOutput { offsets: job.log_offsets, source: OutputSource::Pipes(pipes) }),
            started: std::time::Instant::now(),
            time_limit,
            warning: job.signal.clone(),
            warn_at: time_limit.zip(job.signal.as_ref()).map(|(deadline, warning)| {
                // A warning longer than the time limit goes at once.
                let before = std::time::Duration::from_secs(warning.seconds.into());
                deadline.checked_sub(before).unwrap_or_else(tokio::time::Instant::now)
            }),
            exit: None,
            timed_out: false,
            usage: None,
            meter: Some(meter),
            work: Some((dir, user)),
            batch: job.batch.is_some(),
            uploads_outputs: job.node.as_ref().is_none_or(|node| node.rank == 0),
            _exec_gate: exec_gate,
        })
    }
}

impl ProcessRunner {
    /// Podman, where this landing zone runs images.
    pub(crate) fn podman(&self) -> Option<&Podman> {
        self.podman.as_ref()
    }

    /// Hands back the images a job that could not start took; answers `e`, why.
    async fn released_images(&self, images: Vec<String>, e: JobError) -> JobError {
        if let Some(podman) = &self.podman {
            for image in images {
                podman.release(&image).await;
            }
        }
        e
    }
}

/// A job's program, running in its work dir, sandbox (or container) and cgroup.
pub(crate) struct ProcessJob {
    runner: Arc<ProcessRunner>,
    program: Program,
    /// The local names of the images it runs in (a task's executors', one each).
    images: Vec<String>,
    /// The task it runs, if it is one, and where its files are.
    task: Option<(mission_api::tes::TaskAssignment, task::Layout)>,
    /// Its process group's id (its own pid).
    pid: Option<rustix::process::Pid>,
    group: Option<JobCgroup>,
    /// Its stdout and stderr, until the agent takes them.
    pipes: Option<JobOutput>,
    started: std::time::Instant,
    /// When its time limit runs out, where it has one.
    time_limit: Option<tokio::time::Instant>,
    /// The signal it gets before it is ended, where it asked for one ([`Assignment::signal`]),
    /// and when before its time limit, until sent.
    warning: Option<mission_api::WarningSignal>,
    warn_at: Option<tokio::time::Instant>,
    /// How it exited, and after how many seconds, once it did.
    exit: Option<(std::io::Result<std::process::ExitStatus>, f64)>,
    /// Whether its time limit killed it.
    timed_out: bool,
    usage: Option<JobUsage>,
    /// What it draws, measured from its start until it is finished.
    meter: Option<crate::energy::JobMeter>,
    /// Where it runs and whom as, until they are handed back.
    work: Option<(WorkDir, JobUser)>,
    /// It is a batch job: its files are in its own directory, and none are collected.
    batch: bool,
    /// A task's outputs are uploaded from here: not from a gang's other nodes, but rank 0's.
    uploads_outputs: bool,
    /// A gang's node: serves `mission lz-exec` until the job's part here ends.
    _exec_gate: Option<crate::gang::ExecGate>,
}

impl ProcessJob {
    fn signal_group(&self, signal: rustix::process::Signal) {
        if let Some(pid) = self.pid {
            let _ = rustix::process::kill_process_group(pid, signal);
        }
    }

    /// Sends the job its warning signal, once: to its process group, or (`B:`) its main process
    /// alone; in a container, to the container's.
    fn warn(&mut self) {
        self.warn_at = None;
        let Some(warning) = &self.warning else { return };
        match (&self.program, &self.runner.podman) {
            (Program::Container { name, .. }, Some(podman)) => podman.signal(name, &warning.signal),
            (Program::Task { running, .. }, Some(podman)) => {
                if let Some(name) = running.container.lock().expect("not poisoned").as_deref() {
                    podman.signal(name, &warning.signal);
                }
            }
            _ => {
                let signal = rustix::process::Signal::from_named_raw(warning.number());
                match (signal, self.pid) {
                    (Some(signal), Some(pid)) if warning.main_only => {
                        let _ = rustix::process::kill_process(pid, signal);
                    }
                    (Some(signal), _) => self.signal_group(signal),
                    (None, _) => {}
                }
            }
        }
    }

    /// Kills its process group and whatever else runs in its cgroup; a container is removed
    /// (its `podman run` then ends, as after the container's own end).
    fn kill_all(&self) {
        match (&self.program, &self.runner.podman) {
            (Program::Container { name, .. }, Some(podman)) => podman.remove(name),
            (Program::Task { running, .. }, Some(podman)) => {
                running.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
                if let Some(name) = running.container.lock().expect("not poisoned").as_deref() {
                    podman.remove(name);
                }
            }
            _ => self.signal_group(rustix::process::Signal::KILL),
        }
        if let Some(g) = &self.group {
            g.kill_all();
        }
    }
}

impl JobHandle for ProcessJob {
    fn output(&mut self) -> JobOutput {
        self.pipes
            .take()
            .unwrap_or(JobOutput { offsets: Default::default(), source: OutputSource::Pipes([None, None]) })
    }

    async fn wait(&mut self) {
        while self.exit.is_none() {
            let (deadline, warn_at) = (self.time_limit, self.warn_at);
            tokio::select! {
                exit = self.program.wait() => self.exit = Some((exit, self.started.elapsed().as_secs_f64())),
                () = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() => {
                    self.kill_all();
                    self.timed_out = true;
                    self.time_limit = None;
                }
                () = async { tokio::time::sleep_until(warn_at.expect("guarded")).await }, if warn_at.is_some() => {
                    self.warn();
                }
            }
        }
    }

    async fn signal(&mut self, signal: Signal) {
        match signal {
            // A task's executor running now is asked to end; no later one starts.
            Signal::Term if matches!(self.program, Program::Task { .. }) => {
                if let (Program::Task { running, .. }, Some(podman)) = (&self.program, &self.runner.podman) {
                    running.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
                    if let Some(name) = running.container.lock().expect("not poisoned").as_deref() {
                        podman.signal(name, "TERM");
                    }
                }
            }
            // A job that asked for a warning gets it instead, once, and the rest of the grace.
            Signal::Term if self.warning.is_some() => {
                if self.warn_at.is_some() {
                    self.warn();
                }
            }
            // The program may end in its own time (the init of its namespace ignores the signal).
            Signal::Term => self.signal_group(rustix::process::Signal::TERM),
            Signal::Kill => self.kill_all(),
        }
    }

    async fn finish(&mut self, stopped: bool) -> Result<Finished, JobError> {
        // Whatever the program left running in the background ends with it (and lets go of the
        // output pipes, so the forwarders finish); then the group is measured and handed back
        // (which kills what is left in it) and the work dir is searched for results, in one
        // blocking step.
        self.signal_group(rustix::process::Signal::KILL);
        let (exit, wall_time) = self.exit.take().expect("finished after it ended");
        let (runner, group) = (self.runner.clone(), self.group.take());
        let (dir, user) = self.work.as_ref().expect("held until released");
        let (root, staged, uid) = (dir.path().to_path_buf(), dir.inputs().clone(), user.own_uid());
        let container = matches!(self.program, Program::Container { .. } | Program::Task { .. });
        let cpu_measured = !matches!(self.program, Program::Container { cpu_measured: false, .. });
        let (batch, uploads_outputs) = (self.batch, self.uploads_outputs);
        let killed = exit.as_ref().is_ok_and(|exit| exit.code() == Some(CONTAINER_KILLED));
        let task = self.task.clone();
        let (oom, measured, results, outputs) = tokio::task::spawn_blocking(move || {
            let (oom, measured) = group.map_or((false, None), |g| {
                let oom = g.oom_killed() || (container && killed && g.limit_hit());
                let measured = g.measure();
                runner.cgroups.give_back(g);
                (oom, Some(measured))
            });
            runner.sandbox.end(uid);
            match &task {
                Some((task, layout)) if uploads_outputs => {
                    (oom, measured, Vec::new(), Some(task::outputs(task, layout, &root)))
                }
                Some(_) => (oom, measured, Vec::new(), Some(Ok(Vec::new()))),
                None if batch => (oom, measured, Vec::new(), None),
                None => (oom, measured, changed_files(&root, &staged), None),
            }
        })
        .await?;
        let cpu_time = measured.and_then(|m| m.cpu_seconds).filter(|_| cpu_measured);
        let energy_parts = match self.meter.take() {
            Some(meter) => meter.finish(cpu_time).await,
            None => None,
        };
        self.usage = Some(JobUsage {
            wall_time,
            cpu_time,
            cpu_efficiency: None,
            peak_memory: measured.and_then(|m| m.peak_memory).map(|bytes| bytes.div_ceil(1 << 20)),
            energy_parts,
            ..JobUsage::default()
        });
        let exit = exit.map_err(JobError::Wait)?;
        use std::os::unix::process::ExitStatusExt;
        let ended = match &mut self.program {
            Program::Task { end, .. } => end.take(),
            _ => None,
        };
        let failed_executor = ended.as_ref().and_then(|end| end.failed);
        let outcome = match (exit.code(), exit.signal()) {
            _ if stopped => (JobStatus::Stopped, exit.code(), Some("stopped".into())),
            _ if self.timed_out => (JobStatus::Failed, None, Some(TIME_LIMIT_REASON.into())),
            _ if oom => (JobStatus::Failed, exit.code(), Some(OUT_OF_MEMORY_REASON.into())),
            (Some(code), _) if failed_executor.is_some() => {
                let i = failed_executor.expect("guarded");
                (JobStatus::Failed, Some(code), Some(format!("executor {i} exited with status {code}")))
            }
            (Some(0), _) => (JobStatus::Completed, Some(0), None),
            (Some(code), _) => (JobStatus::Failed, Some(code), Some(format!("exit status {code}"))),
            (None, Some(signal)) => (JobStatus::Failed, None, Some(format!("{KILLED_BY_SIGNAL_REASON} {signal}"))),
            (None, None) => (JobStatus::Failed, None, Some("ended without an exit status".into())),
        };
        let task =
            outputs.map(|outputs| super::TaskFinished { logs: ended.map(|end| end.logs).unwrap_or_default(), outputs });
        Ok(Finished { outcome, results, task })
    }

    async fn usage(&mut self) -> Option<JobUsage> {
        self.usage.take()
    }

    async fn release(mut self) {
        if let Some(podman) = &self.runner.podman {
            for image in std::mem::take(&mut self.images) {
                podman.release(&image).await;
            }
        }
        if let Some((dir, user)) = self.work.take() {
            // The dir is the agent's again before its user may go to another job.
            let runner = self.runner.clone();
            let _ = tokio::task::spawn_blocking(move || {
                runner.work_dirs.give_back(dir);
                runner.sandbox.release(user);
            })
            .await;
        }
    }
}

/// A job's program, started.
struct Launched {
    program: Program,
    group: Option<JobCgroup>,
    /// How its limits are enforced, or why they are not.
    limits: String,
    /// Where it runs.
    dir: WorkDir,
    /// Whom it runs as.
    user: JobUser,
    /// How its program was started, where it runs sandboxed on the host: shells in it start
    /// the same way.
    plan: Option<Plan>,
    /// The task it runs, if it is one, and where its files are.
    task: Option<(mission_api::tes::TaskAssignment, task::Layout)>,
    /// A gang's node: the socket its program asks `mission lz-exec` at.
    exec: Option<std::os::unix::net::UnixListener>,
}

/// Stages the job and starts its program, in one blocking step: a work dir gets the mission's
/// files from the content cache, the job gets its cgroup, and the program starts in the work dir
/// in its own process group with `MISSION_ID`, `JOB_ID`, `OMP_NUM_THREADS` and
/// `CUDA_VISIBLE_DEVICES`. Nothing is made when an input is not cached yet.
fn launch(
    runner: &Arc<ProcessRunner>,
    job: &Assignment,
    inputs: &[(PathBuf, PathBuf)],
    images: &[String],
    session_env: &[(&'static str, String)],
) -> Result<Launched, JobError> {
    let image = images.first().map(String::as_str);
    let program = job.command.first().ok_or_else(|| JobError::Launch("the job's command is empty".into()))?;
    let user = runner.sandbox.user_of(&job.username).map_err(|e| JobError::Launch(e.to_string()))?;
    // Copies, not links: the job may change its inputs, and the cache must not change.
    let dir = match runner.work_dirs.stage(job.user_id, user.ids(), inputs) {
        Ok(dir) => dir,
        Err(e) => {
            runner.sandbox.release(user);
            return Err(JobError::Staging(e.to_string()));
        }
    };
    let (gang, exec) = match &job.node {
        Some(node) => match crate::gang::prepare(job, node, dir.path()) {
            Ok(prepared) => (prepared.env, Some(prepared.exec)),
            Err(e) => {
                runner.work_dirs.give_back(dir);
                runner.sandbox.release(user);
                return Err(JobError::Staging(format!("preparing the gang's hostfile and exec socket: {e}")));
            }
        },
        None => (Vec::new(), None),
    };

    let group = runner.cgroups.take(job.cpu_count, job.memory_amount);
    let limits = match &group {
        Ok(_) => runner.cgroups.describe(),
        Err(why) => format!("limits not enforced: {why}"),
    };
    let group = group.ok();
    let gpus: Vec<String> = job.gpu_indices.iter().map(u32::to_string).collect();
    let (mission_id, job_id) = (job.mission_id.to_string(), job.job_id.to_string());
    let (threads, gpus) = (job.cpu_count.to_string(), gpus.join(","));
    let index = job.array_index.map(|i| i.to_string());
    let restarts = job.attempt.saturating_sub(1).to_string();
    let mut own: Vec<(&str, &OsStr)> = vec![
        ("MISSION_RESTART_COUNT", restarts.as_ref()),
        ("HOME", dir.path().as_os_str()),
        ("MISSION_ID", mission_id.as_ref()),
        ("JOB_ID", job_id.as_ref()),
        ("OMP_NUM_THREADS", threads.as_ref()),
        ("CUDA_VISIBLE_DEVICES", gpus.as_ref()),
    ];
    own.extend(index.as_deref().map(|i| (mission_api::lz::ARRAY_INDEX_VARIABLE, OsStr::new(i))));
    own.extend(gang.iter().map(|(name, value)| (*name, OsStr::new(value))));
    own.extend(session_env.iter().map(|(name, value)| (*name, OsStr::new(value))));
    let mut task = None;
    let started = match (image, &runner.podman) {
        (Some(_), Some(podman)) if job.task.is_some() => {
            let assigned = job.task.as_deref().expect("guarded");
            let (uid, gid) = user
                .ids()
                .unwrap_or_else(|| (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()));
            let parent = group.as_ref().and_then(JobCgroup::container_parent);
            let cpu_limited = parent.as_ref().is_some_and(|(_, cpu_too)| *cpu_too);
            let layout = task::Layout::of(assigned);
            let limits =
                format!("{limits}; a task of {} executors, each {}, as uid {uid}", assigned.executors.len(), {
                    let run = ContainerRun {
                        name: String::new(),
                        image: "",
                        work_dir: dir.path(),
                        user: (uid, gid),
                        env: Vec::new(),
                        cgroup_parent: None,
                        network: job.container_network,
                        cpus: None,
                        gpus: &[],
                        command: &[],
                        task: None,
                    };
                    podman.describe(&run)
                });
            let started = start_task(runner, job, assigned, &layout, images, dir.path(), (uid, gid), &own, {
                (parent.map(|(path, _)| path), (group.is_some() && !cpu_limited).then_some(job.cpu_count))
            });
            task = Some((assigned.clone(), layout));
            started.map(|program| (program, limits, None))
        }
        (Some(image), Some(podman)) => {
            let (uid, gid) = user
                .ids()
                .unwrap_or_else(|| (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()));
            let parent = group.as_ref().and_then(JobCgroup::container_parent);
            let cpu_limited = parent.as_ref().is_some_and(|(_, cpu_too)| *cpu_too);
            // Taken for this job, so loaded: the id of what was loaded for its digest (never a
            // name, which anyone with the host's image storage may move).
            let runnable = podman.runnable(image);
            let run = ContainerRun {
                name: container_name(job),
                image: runnable.as_deref().unwrap_or(image),
                work_dir: dir.path(),
                user: (uid, gid),
                env: own.iter().map(|(name, value)| (*name, value.to_os_string())).collect(),
                cgroup_parent: parent.map(|(path, _)| path),
                network: job.container_network,
                cpus: (group.is_some() && !cpu_limited).then_some(job.cpu_count),
                gpus: &job.gpu_indices,
                command: &job.command,
                task: None,
            };
            let limits = format!("{limits}; {}, as uid {uid}", podman.describe(&run));
            let started = match runnable {
                Some(_) => start_container(podman, &run),
                None => Err(std::io::Error::other(format!("the image {image} is not loaded on this landing zone"))),
            };
            let started = started.map(|child| Program::Container { child, name: run.name, cpu_measured: cpu_limited });
            started.map(|program| (program, limits, None))
        }
        _ => {
            let procs = group.as_ref().map(JobCgroup::procs_files).unwrap_or_default();
            // A gang's batch script runs on its first node; the others only hold theirs.
            let script = job.batch.as_ref().filter(|_| job.node.as_ref().is_none_or(GangNode::runs_command));
            let plan = match script {
                Some(batch) => {
                    super::batch::prepare(job, batch, dir.path(), user.ids(), &runner.job_env, &gang).map(|start| {
                        let mut plan = runner.sandbox.plan(&start.command, start.env, &start.workdir, &user, &procs);
                        // A batch job sees the host's /tmp, as a Slurm job does: it may have been
                        // submitted from there.
                        if let Some(namespaces) = plan.namespaces.as_mut() {
                            namespaces.private_tmp = false;
                        }
                        plan
                    })
                }
                None => {
                    let env = runner.job_env.iter().map(|(name, value)| (*name, value.as_os_str())).chain(own);
                    let mut plan = runner.sandbox.plan(&job.command, env, dir.path(), &user, &procs);
                    // The other nodes of a batch job see the host's /tmp too: `srun` starts its
                    // tasks there in the directory the script runs in.
                    if let Some(namespaces) = plan.namespaces.as_mut().filter(|_| job.batch.is_some()) {
                        namespaces.private_tmp = false;
                    }
                    Ok(plan)
                }
            };
            let limits = format!("{limits}; {}", runner.sandbox.describe_job(&user));
            plan.and_then(|plan| {
                runner.launcher.start_job(&plan).map(|child| (Program::Sandboxed(child), limits, Some(plan)))
            })
        }
    };
    match started {
        Ok((program, limits, plan)) => Ok(Launched { program, group, limits, dir, user, plan, task, exec }),
        Err(e) => {
            if let Some(g) = group {
                runner.cgroups.give_back(g);
            }
            runner.work_dirs.give_back(dir);
            runner.sandbox.release(user);
            let what = if image.is_some() { "podman" } else { program };
            Err(JobError::Launch(format!("could not start {what}: {e}")))
        }
    }
}

/// Starts a TES task's executors, one after another in the background (see [`task::run`]): the
/// directories its layout needs are made in the work dir `root`, the job's user's, and its
/// output goes into a pair of pipes whose read ends the job's logs take.
#[allow(clippy::too_many_arguments)]
fn start_task(
    runner: &Arc<ProcessRunner>,
    job: &Assignment,
    assigned: &mission_api::tes::TaskAssignment,
    layout: &task::Layout,
    images: &[String],
    root: &std::path::Path,
    user: (u32, u32),
    own: &[(&'static str, &OsStr)],
    (cgroup_parent, cpus): (Option<String>, Option<u32>),
) -> std::io::Result<Program> {
    let podman = runner.podman.as_ref().ok_or_else(|| std::io::Error::other("no Podman here"))?;
    for dir in layout.dirs(root) {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700).create(&dir)?;
        std::os::unix::fs::chown(&dir, Some(user.0), Some(user.1))?;
    }
    let mut runnable = Vec::with_capacity(images.len());
    for image in images {
        runnable.push(
            podman.runnable(image).ok_or_else(|| {
                std::io::Error::other(format!("the image {image} is not loaded on this landing zone"))
            })?,
        );
    }
    let (out_read, out_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (err_read, err_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let running = Arc::new(task::Running::default());
    let run = task::TaskRun {
        runner: runner.clone(),
        container: container_name(job),
        root: root.to_owned(),
        layout: layout.clone(),
        task: assigned.clone(),
        images: runnable,
        user,
        env: runner
            .job_env
            .iter()
            .cloned()
            .chain(own.iter().map(|(name, value)| (*name, value.to_os_string())))
            .collect(),
        cgroup_parent,
        network: job.container_network,
        cpus,
        gpus: job.gpu_indices.clone(),
    };
    let handle = tokio::spawn(task::run(run, [out_write, err_write], running.clone()));
    Ok(Program::Task { handle, running, pipes: [Some(out_read), Some(err_read)], end: None })
}

/// Starts `podman run` for a container job, in a process group of its own (a `SIGTERM` to it
/// reaches the container), with nothing of the agent's environment but `PATH` and `HOME`.
fn start_container(podman: &Podman, run: &ContainerRun) -> std::io::Result<tokio::process::Child> {
    let args = podman.run_command(run);
    let mut command = tokio::process::Command::new("podman");
    command.args(args).env_clear().process_group(0).kill_on_drop(false);
    command.envs(["PATH", "HOME"].into_iter().filter_map(|name| Some((name, std::env::var_os(name)?))));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.spawn()
}

/// Starts shells in a job that runs sandboxed on the host: as its program started, in its
/// namespaces.
struct SandboxShell {
    runner: Arc<ProcessRunner>,
    /// How the job's program started.
    plan: Plan,
    /// The job's process: the init of its namespaces, where it has them.
    pid: u32,
}

impl ShellStarter for SandboxShell {
    fn start(
        &self,
        program: Vec<std::ffi::OsString>,
        terminal: bool,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
    ) -> std::io::Result<ShellProcess> {
        let plan = self.plan.shell(self.pid, program, terminal);
        self.runner.launcher.start_with(&plan, stdio).map(ShellProcess::Spawned)
    }
}

/// Starts shells in a job that runs in a container, with `podman exec` (started by the
/// spawner, which gives it its terminal).
struct ContainerShell {
    runner: Arc<ProcessRunner>,
    /// The container's name.
    name: String,
    /// The uid and gid the job runs as in it.
    user: (u32, u32),
    work_dir: PathBuf,
}

impl ShellStarter for ContainerShell {
    fn start(
        &self,
        program: Vec<std::ffi::OsString>,
        terminal: bool,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
    ) -> std::io::Result<ShellProcess> {
        let podman = self.runner.podman.as_ref().ok_or_else(|| std::io::Error::other("no Podman here"))?;
        let plan = Plan {
            terminal,
            dir: "/".into(),
            env: ["PATH", "HOME"]
                .into_iter()
                .filter_map(|name| {
                    let mut var = std::ffi::OsString::from(format!("{name}="));
                    var.push(std::env::var_os(name)?);
                    Some(var)
                })
                .collect(),
            program: podman.exec_command(&self.name, self.user, &self.work_dir, terminal, &program),
            ..Plan::default()
        };
        self.runner.launcher.start_with(&plan, stdio).map(ShellProcess::Spawned)
    }
}

/// A job's running program: sandboxed on the host, or a container (the `podman run` that
/// attends it).
enum Program {
    Sandboxed(JobProcess),
    Container {
        child: tokio::process::Child,
        name: String,
        /// Whether the job's CPU group holds the container (and so measures its CPU time).
        cpu_measured: bool,
    },
    /// A TES task's executors, run one after another by a task of the agent's.
    Task {
        handle: tokio::task::JoinHandle<task::TaskEnd>,
        running: Arc<task::Running>,
        /// The read ends of the job's stdout and stderr, until taken.
        pipes: [Option<std::os::fd::OwnedFd>; 2],
        /// How it ended, once it did, until `finish` takes it.
        end: Option<task::TaskEnd>,
    },
}

impl Program {
    /// Its process (group) id.
    fn pid(&self) -> Option<rustix::process::Pid> {
        match self {
            Self::Sandboxed(child) => rustix::process::Pid::from_raw(child.pid as i32),
            Self::Container { child, .. } => child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)),
            Self::Task { .. } => None,
        }
    }

    /// The read ends of its stdout and stderr.
    fn take_pipes(&mut self) -> [Option<std::os::fd::OwnedFd>; 2] {
        match self {
            Self::Sandboxed(child) => [child.stdout.take(), child.stderr.take()],
            Self::Container { child, .. } => [
                child.stdout.take().and_then(|out| out.into_owned_fd().ok()),
                child.stderr.take().and_then(|err| err.into_owned_fd().ok()),
            ],
            Self::Task { pipes, .. } => [pipes[0].take(), pipes[1].take()],
        }
    }

    /// Waits for it to end (cancel-safe).
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Self::Sandboxed(child) => child.wait().await,
            Self::Container { child, .. } => child.wait().await,
            Self::Task { handle, end, .. } => {
                if end.is_none() {
                    *end = Some(handle.await.map_err(std::io::Error::other)?);
                }
                let ended = end.as_ref().expect("set");
                // The exit code of the executor that failed the task, else 0, as a wait status.
                let code = ended.failed.and_then(|i| ended.logs.get(i)).map_or(0, |log| log.exit_code);
                use std::os::unix::process::ExitStatusExt;
                Ok(std::process::ExitStatus::from_raw((code & 0xff) << 8))
            }
        }
    }
}

/// The name of the container a job's part runs in (a task's executors add their index): a
/// gang's nodes other than rank 0 add their rank, since landing zones on one host share
/// Podman's containers.
fn container_name(job: &Assignment) -> String {
    match job.node.as_ref().filter(|node| node.rank > 0) {
        Some(node) => format!("mission-{}-node{}", job.job_id, node.rank),
        None => format!("mission-{}", job.job_id),
    }
}

/// The part of every job's environment that comes from the agent's: `PATH` (a standard one if
/// the agent has none) and the locale; nothing else of it (its token, the server's settings)
/// passes. Read once, when the agent starts.
pub(crate) fn base_env() -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env: Vec<_> =
        ["PATH", "LANG", "LC_ALL", "TZ"].into_iter().filter_map(|name| Some((name, std::env::var_os(name)?))).collect();
    if !env.iter().any(|(name, _)| *name == "PATH") {
        env.push(("PATH", "/usr/local/bin:/usr/bin:/bin".into()));
    }
    env
}

/// `env` with `dir` last on its `PATH`.
fn with_path_dir(
    mut env: Vec<(&'static str, std::ffi::OsString)>,
    dir: &Path,
) -> Vec<(&'static str, std::ffi::OsString)> {
    if let Some((_, path)) = env.iter_mut().find(|(name, _)| *name == "PATH") {
        let mut dirs: Vec<PathBuf> = std::env::split_paths(path).collect();
        if !dirs.iter().any(|known| known == dir) {
            dirs.push(dir.to_path_buf());
            if let Ok(joined) = std::env::join_paths(dirs) {
                *path = joined;
            }
        }
    }
    env
}

/// Where jobs find the agent's own `mission` (a gang's processes run `mission lz-exec`): a hard
/// link to it in the work root's `bin/`, which every job can reach (the binary's own directory
/// may be hidden from jobs, under a private `/tmp`); the binary's directory where no link can
/// be made.
fn own_binary_dir(work_root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let exe = std::env::current_exe().ok()?;
    let bin = work_root.join("bin");
    let linked = std::fs::create_dir_all(&bin)
        .and_then(|()| std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o711)))
        .and_then(|()| match std::fs::remove_file(bin.join("mission")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => std::fs::hard_link(&exe, bin.join("mission")),
        });
    match linked {
        Ok(()) => Some(bin),
        Err(_) => exe.parent().map(Path::to_path_buf),
    }
}
