//! What the agent says to and reads from Slurm, as plain functions: the batch script and the
//! `sbatch` arguments of a job, and the nodes (`sinfo`), from which a Slurm landing zone
//! advertises its capacity, and the jobs (`squeue`, `sacct`), with their states, exit statuses
//! and pending reasons, and what the jobs used (`sacct`). The output formats are the ones these
//! functions are written for ([`SINFO_FORMAT`], [`SQUEUE_FORMAT`], [`SACCT_FORMAT`],
//! [`SACCT_USAGE_FORMAT`]); the tests read output captured from a real Slurm
//! (`fixtures/slurm-22.05`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mission_api::JobBatch;
use mission_api::batch::{OutputNames, fill_output_pattern};
use mission_api::lz::Assignment;
use mission_api::{EnergyPart, EnergyParts, EnergySource, JobStatus, JobUsage, Resources};
use uuid::Uuid;

/// `sinfo -h -N -o` with this: node, CPUs, memory (MB), generic resources, state.
pub const SINFO_FORMAT: &str = "%N|%c|%m|%G|%T";

/// `squeue --me -h -t all -O` with this: Slurm's job id, state, exit status (as `wait` gives
/// it), reason, job name (last: only names may hold the separator).
pub const SQUEUE_FORMAT: &str = "JobID:|,State:|,exit_code:|,Reason:|,Name:|";

/// `sacct -n -P -X -o` with this (for jobs `squeue` no longer lists): Slurm's job id, state
/// (`CANCELLED by 0`), exit code (`code:signal`).
pub const SACCT_FORMAT: &str = "JobID,State,ExitCode";

/// `sacct -n -P --noconvert -o` with this, steps included (no `-X`): the id of the job or of one
/// of its steps (`41`, `41.batch`, `41.0`), its state, elapsed seconds, CPU time
/// (`[DD-[HH:]]MM:SS[.mmm]`) and peak memory in bytes (steps only).
pub const SACCT_USAGE_FORMAT: &str = "JobID,State,ElapsedRaw,TotalCPU,MaxRSS,ConsumedEnergyRaw";

/// The prefix of the Slurm job name of each mission job (`mission-{job id}`), by which a
/// restarted agent finds its jobs again.
pub const JOB_NAME_PREFIX: &str = "mission-";

/// A line Slurm printed that does not have the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read Slurm's line {line:?}: {why}")]
pub struct ParseError {
    /// The line.
    pub line: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory in megabytes.
    pub memory_mb: u64,
    /// GPUs among its generic resources.
    pub gpus: u32,
    /// Slurm's state (`idle`, `mixed`, `allocated`, `down`, `drained`, …).
    pub state: String,
}

/// The nodes in `sinfo -h -N -o "%N|%c|%m|%G|%T"` output (a node in several partitions is listed
/// once).
pub fn parse_nodes(output: &str) -> Result<Vec<Node>, ParseError> {
    let mut nodes: Vec<Node> = Vec::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let fail = |why| ParseError { line: line.to_owned(), why };
        let fields: Vec<&str> = line.trim().split('|').collect();
        let [name, cpus, memory, gres, state] = fields[..] else { return Err(fail("expected 5 fields")) };
        let node = Node {
            name: name.to_owned(),
            cpus: cpus.parse().map_err(|_| fail("CPUs are not a number"))?,
            memory_mb: memory.parse().map_err(|_| fail("memory is not a number"))?,
            gpus: gpus_in(gres).ok_or_else(|| fail("unreadable generic resources"))?,
            state: state.to_owned(),
        };
        if !nodes.iter().any(|n| n.name == node.name) {
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// The GPUs in a `%G` field: `(null)`, `gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8`, ….
fn gpus_in(gres: &str) -> Option<u32> {
    if gres == "(null)" || gres.is_empty() {
        return Some(0);
    }
    let mut gpus = 0;
    for item in gres.split(',') {
        let item = item.split('(').next()?;
        let mut parts = item.split(':');
        if parts.next()? != "gpu" {
            continue;
        }
        gpus += parts.next_back()?.parse::<u32>().ok()?;
    }
    Some(gpus)
}

/// What a Slurm landing zone offers: its largest node that takes jobs (a job never spans nodes).
pub fn capacity(nodes: &[Node]) -> Option<Resources> {
    nodes
        .iter()
        .filter(|n| !["down", "drained", "draining", "fail", "inval"].iter().any(|s| n.state.starts_with(s)))
        .map(|n| Resources { cpu_count: n.cpus, memory_amount: n.memory_mb, gpu_count: n.gpus })
        .max_by_key(|r| (r.gpu_count, r.cpu_count, r.memory_amount))
}

/// A job's state in Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmState {
    /// Waiting in the queue.
    Pending,
    /// Running.
    Running,
    /// Ending (its processes being cleaned up).
    Completing,
    /// Ended with exit code 0.
    Completed,
    /// Ended with another exit code.
    Failed,
    /// Cancelled (`scancel`).
    Cancelled,
    /// Ran past its time limit.
    Timeout,
    /// Ran out of memory.
    OutOfMemory,
    /// Its node failed.
    NodeFail,
    /// Ended otherwise (`BOOT_FAIL`, `DEADLINE`, `PREEMPTED`, …).
    EndedOtherwise(String),
    /// A state this agent does not act on (`SUSPENDED`, `REQUEUED`, …).
    Other(String),
}

impl SlurmState {
    fn parse(state: &str) -> Self {
        // sacct writes `CANCELLED by 0`.
        match state.split(' ').next().unwrap_or(state) {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "COMPLETING" => Self::Completing,
            "COMPLETED" => Self::Completed,
            "FAILED" => Self::Failed,
            "CANCELLED" => Self::Cancelled,
            "TIMEOUT" => Self::Timeout,
            "OUT_OF_MEMORY" => Self::OutOfMemory,
            "NODE_FAIL" => Self::NodeFail,
            ended @ ("BOOT_FAIL" | "DEADLINE" | "PREEMPTED" | "REVOKED" | "SPECIAL_EXIT") => {
                Self::EndedOtherwise(ended.to_owned())
            }
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the job has ended.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::Cancelled
                | Self::Timeout
                | Self::OutOfMemory
                | Self::NodeFail
                | Self::EndedOtherwise(_)
        )
    }
}

/// How a job's program ended, as Slurm records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// Its exit code.
    pub code: i32,
    /// The signal that killed it (0: none).
    pub signal: i32,
}

impl ExitStatus {
    /// From a `wait` status (squeue's `exit_code`).
    fn from_wait_status(status: i32) -> Self {
        if status & 0x7f == 0 {
            Self { code: (status >> 8) & 0xff, signal: 0 }
        } else {
            Self { code: 0, signal: status & 0x7f }
        }
    }

    /// From sacct's `code:signal`.
    fn from_sacct(field: &str) -> Option<Self> {
        let (code, signal) = field.split_once(':')?;
        Some(Self { code: code.parse().ok()?, signal: signal.parse().ok()? })
    }
}

/// A job as `squeue` or `sacct` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm's id.
    pub slurm_id: String,
    /// The mission job it runs, when its name is ours.
    pub job_id: Option<Uuid>,
    /// The pilot's landing zone, when it is a pilot of the agent's (`mission-pilot-{lz id}`).
    pub pilot: Option<Uuid>,
    /// Its state.
    pub state: SlurmState,
    /// How its program ended (meaningful once it ended).
    pub exit: ExitStatus,
    /// Why it waits (`Resources`, `Priority`, `QOSMaxJobsPerUserLimit`, …), or why it ended
    /// (`NonZeroExitCode`); `None` for Slurm's `None`.
    pub reason: Option<String>,
}

impl SlurmJob {
    /// Why the job has not started, for its status: Slurm's pending reason.
    pub fn pending_reason(&self) -> Option<String> {
        (self.state == SlurmState::Pending).then(|| match &self.reason {
            Some(reason) => format!("waiting in Slurm's queue: {reason}"),
            None => "waiting in Slurm's queue".to_owned(),
        })
    }

    /// The job's final status, exit code and reason, once it ended; `stop_requested`: whether
    /// the agent cancelled it (a stop), and not someone else.
    pub fn outcome(&self, stop_requested: bool) -> Option<(JobStatus, Option<i32>, Option<String>)> {
        let failed = |why: &str| (JobStatus::Failed, None, Some(why.to_owned()));
        Some(match &self.state {
            SlurmState::Completed => (JobStatus::Completed, Some(0), None),
            SlurmState::Failed if self.exit.signal != 0 => (
                JobStatus::Failed,
                None,
                Some(format!("{} {}", mission_api::KILLED_BY_SIGNAL_REASON, self.exit.signal)),
            ),
            SlurmState::Failed => {
                (JobStatus::Failed, Some(self.exit.code), Some(format!("exit status {}", self.exit.code)))
            }
            SlurmState::Cancelled if stop_requested => (JobStatus::Stopped, None, Some("stopped".to_owned())),
            SlurmState::Cancelled => failed("cancelled in Slurm (by scancel, or by an administrator)"),
            SlurmState::Timeout => failed(mission_api::TIME_LIMIT_REASON),
            SlurmState::OutOfMemory => failed(mission_api::OUT_OF_MEMORY_REASON),
            SlurmState::NodeFail => failed("its Slurm node failed"),
            SlurmState::EndedOtherwise(state) => (JobStatus::Failed, None, Some(format!("Slurm ended it: {state}"))),
            SlurmState::Pending | SlurmState::Running | SlurmState::Completing | SlurmState::Other(_) => return None,
        })
    }
}

fn mission_job(name: &str) -> Option<Uuid> {
    name.strip_prefix(JOB_NAME_PREFIX).and_then(|id| Uuid::parse_str(id).ok())
}

/// The jobs in `squeue -h -O` output with [`SQUEUE_FORMAT`].
pub fn parse_queue(output: &str) -> Result<Vec<SlurmJob>, ParseError> {
    output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fail = |why| ParseError { line: line.to_owned(), why };
            let fields: Vec<&str> = line.trim_end().splitn(5, '|').collect();
            let [slurm_id, state, exit, reason, name] = fields[..] else { return Err(fail("expected 5 fields")) };
            Ok(SlurmJob {
                slurm_id: slurm_id.to_owned(),
                job_id: mission_job(name.strip_suffix('|').unwrap_or(name)),
                pilot: name
                    .strip_suffix('|')
                    .unwrap_or(name)
                    .strip_prefix(PILOT_NAME_PREFIX)
                    .and_then(|id| Uuid::parse_str(id).ok()),
                state: SlurmState::parse(state),
                exit: ExitStatus::from_wait_status(exit.parse().map_err(|_| fail("the exit status is not a number"))?),
                reason: (reason != "None").then(|| reason.to_owned()),
            })
        })
        .collect()
}

/// The jobs in `sacct -n -P -X -o` output with [`SACCT_FORMAT`] (no names, no reasons).
pub fn parse_accounting(output: &str) -> Result<Vec<SlurmJob>, ParseError> {
    output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fail = |why| ParseError { line: line.to_owned(), why };
            let fields: Vec<&str> = line.trim().split('|').collect();
            let [slurm_id, state, exit] = fields[..] else { return Err(fail("expected 3 fields")) };
            Ok(SlurmJob {
                slurm_id: slurm_id.to_owned(),
                job_id: None,
                pilot: None,
                state: SlurmState::parse(state),
                exit: ExitStatus::from_sacct(exit).ok_or_else(|| fail("the exit code is not code:signal"))?,
                reason: None,
            })
        })
        .collect()
}

/// What each job in `sacct -n -P --noconvert -o` output with [`SACCT_USAGE_FORMAT`] used, by
/// Slurm's id: its wall time (elapsed seconds), its CPU time (all its steps'), the peak memory
/// of its largest step, and the energy the cluster's energy plugin recorded (joules: the job's
/// own row, or else its largest step's, which spans the others; empty or 0 where the cluster
/// has no plugin). Only jobs whose batch step has ended are in it: before then the figures are
/// not final (and a job cancelled before it started has none).
pub fn parse_usage(output: &str) -> Result<HashMap<String, JobUsage>, ParseError> {
    /// What a job's rows said so far.
    #[derive(Default)]
    struct Rows {
        /// From the job's own row: its wall and CPU time.
        job: Option<JobUsage>,
        /// The largest `MaxRSS` of its steps, in bytes.
        peak: u64,
        /// Joules, from its own row and the largest of its steps'.
        energy: (u64, u64),
        batch_ended: bool,
    }
    let mut jobs: HashMap<String, Rows> = HashMap::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let fail = |why| ParseError { line: line.to_owned(), why };
        let fields: Vec<&str> = line.trim().split('|').collect();
        let [id, state, elapsed, cpu, rss, joules] = fields[..] else { return Err(fail("expected 6 fields")) };
        let joules: u64 = match joules {
            "" => 0,
            j => j.parse().map_err(|_| fail("ConsumedEnergyRaw is not a number of joules"))?,
        };
        let (slurm_id, step) = id.split_once('.').map_or((id, None), |(job, step)| (job, Some(step)));
        let job = jobs.entry(slurm_id.to_owned()).or_default();
        match step {
            None => {
                job.job = Some(JobUsage {
                    wall_time: elapsed.parse::<u32>().map_err(|_| fail("the elapsed seconds are not a number"))?.into(),
                    cpu_time: Some(cpu_seconds(cpu).ok_or_else(|| fail("the CPU time is not [DD-[HH:]]MM:SS"))?),
                    ..JobUsage::default()
                });
                job.energy.0 = joules;
            }
            Some(step) => {
                job.energy.1 = job.energy.1.max(joules);
                if !rss.is_empty() {
                    job.peak = job.peak.max(rss.parse().map_err(|_| fail("MaxRSS is not a number of bytes"))?);
                }
                job.batch_ended |= step == "batch" && SlurmState::parse(state).is_final();
            }
        }
    }
    Ok(jobs
        .into_iter()
        .filter_map(|(slurm_id, rows)| {
            let usage = rows.job.filter(|_| rows.batch_ended)?;
            let joules = if rows.energy.0 > 0 { rows.energy.0 } else { rows.energy.1 };
            let slurm = |wh| Some(EnergyPart { wh, source: EnergySource::Slurm });
            // The node's figure covers its memory: that part is in the CPU part's.
            let energy_parts =
                (joules > 0).then(|| EnergyParts { cpu: slurm(joules as f64 / 3600.0), memory: slurm(0.0), gpu: None });
            Some((slurm_id, JobUsage { peak_memory: Some(rows.peak.div_ceil(1 << 20)), energy_parts, ..usage }))
        })
        .collect())
}

/// Seconds in sacct's `[DD-[HH:]]MM:SS[.mmm]`.
fn cpu_seconds(field: &str) -> Option<f64> {
    let (days, clock) = field.split_once('-').map_or(Some((0, field)), |(d, rest)| Some((d.parse().ok()?, rest)))?;
    let parts: Vec<&str> = clock.split(':').collect();
    let (hours, minutes, seconds) = match parts[..] {
        [minutes, seconds] => (0, minutes, seconds),
        [hours, minutes, seconds] => (hours.parse::<u32>().ok()?, minutes, seconds),
        _ => return None,
    };
    let seconds: f64 = seconds.parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0)?;
    Some(f64::from((days * 24 + hours) * 60 + minutes.parse::<u32>().ok()?) * 60.0 + seconds)
}

/// Where a Slurm job of the agent lives on the cluster's shared filesystem: a dir of its own
/// (`WORK_ROOT/{job id}`, 0700) holding the batch script, the program's stdout and stderr, the
/// file its exit code goes to, and `work/`, where it runs (its inputs and results).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDir {
    root: PathBuf,
}

impl JobDir {
    /// The dir of job `job_id` under `work_root`.
    pub fn new(work_root: &Path, job_id: Uuid) -> Self {
        Self { root: work_root.join(job_id.to_string()) }
    }

    /// The job's own dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the program runs: its `HOME`, its inputs and its results.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// The batch script.
    pub fn script(&self) -> PathBuf {
        self.root.join("job.sh")
    }

    /// The program's stdout (`stdout`) or stderr (`stderr`).
    pub fn log(&self, stream: &str) -> PathBuf {
        self.root.join(stream)
    }

    /// Where the script writes the program's exit code when it exits.
    pub fn exit_code(&self) -> PathBuf {
        self.root.join("exit-code")
    }

    /// Where the script writes when it started (seconds since the epoch), before the program.
    pub fn started(&self) -> PathBuf {
        self.root.join("started")
    }

    /// Where the script writes when the program ended, as in [`JobDir::started`].
    pub fn ended(&self) -> PathBuf {
        self.root.join("ended")
    }
}

/// The time the job's script wrote to [`JobDir::started`] or [`JobDir::ended`].
pub fn parse_stamp(written: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let (secs, nanos) = written.trim().split_once('.').unwrap_or((written.trim(), "0"));
    let nanos = format!("{nanos:0<9}");
    chrono::DateTime::from_timestamp(secs.parse().ok()?, nanos.get(..9)?.parse().ok()?)
}

/// Where a pilot of the agent lives on the shared filesystem: `WORK_ROOT/pilot-{lz id}`, holding
/// its batch script, its token until it starts, its log, and its agent's data dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PilotDir {
    root: PathBuf,
}

impl PilotDir {
    /// The dir of the pilot whose landing zone is `lz_id`, under `work_root`.
    pub fn new(work_root: &Path, lz_id: Uuid) -> Self {
        Self { root: work_root.join(format!("pilot-{lz_id}")) }
    }

    /// The pilot's own dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its batch script.
    pub fn script(&self) -> PathBuf {
        self.root.join("pilot.sh")
    }

    /// Its landing zone's token, which the script reads and removes.
    pub fn token(&self) -> PathBuf {
        self.root.join("token")
    }

    /// Its agent's output.
    pub fn log(&self) -> PathBuf {
        self.root.join("pilot.log")
    }

    /// Its agent's data dir.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }
}

/// How the pilots of a gateway are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pilot {
    /// What each pilot's allocation holds (and its agent offers).
    pub size: Resources,
    /// Its walltime, in minutes.
    pub time_limit: u32,
    /// How long its agent stays without a job before it leaves.
    pub idle_seconds: u64,
}

/// The prefix of a pilot's Slurm job name (`mission-pilot-{lz id}`).
pub const PILOT_NAME_PREFIX: &str = "mission-pilot-";

/// The `sbatch` arguments that start the pilot of landing zone `lz_id` in `dir`.
pub fn pilot_sbatch_args(lz_id: Uuid, dir: &PilotDir, pilot: &Pilot, site: &SiteOptions) -> Vec<String> {
    let mut args = one_task(format!("{PILOT_NAME_PREFIX}{lz_id}"), pilot.size.cpu_count, pilot.size.memory_amount);
    args.extend([
        format!("--time={}", pilot.time_limit),
        format!("--chdir={}", dir.root().display()),
        format!("--output={}", dir.log().display()),
        "--export=ALL".to_owned(),
    ]);
    if pilot.size.gpu_count > 0 {
        args.push(format!("--gres=gpu:{}", pilot.size.gpu_count));
    }
    site.finish(args, &dir.script())
}

/// The batch script of a pilot: it reads its landing zone's token (and removes the file), then
/// becomes `program lz` (the agent, with the process runner) connecting to `servers`, offering
/// the pilot's size, running the jobs as the gateway's account (whose members share it), and
/// leaving when idle.
pub fn pilot_script(dir: &PilotDir, pilot: &Pilot, program: &Path, servers: &str, path: &str) -> String {
    let token = quote(&dir.token().to_string_lossy());
    let args = [
        program.to_string_lossy().into_owned(),
        "lz".into(),
        "--server".into(),
        servers.to_owned(),
        "--data-dir".into(),
        dir.data().to_string_lossy().into_owned(),
        "--lz-cpus".into(),
        pilot.size.cpu_count.to_string(),
        "--lz-memory".into(),
        pilot.size.memory_amount.to_string(),
        "--lz-gpus".into(),
        pilot.size.gpu_count.to_string(),
        "--lz-allow-unisolated".into(),
        "--idle-exit".into(),
        pilot.idle_seconds.to_string(),
    ];
    let command: Vec<String> = args.iter().map(|a| quote(a)).collect();
    format!(
        "#!/bin/sh\n# A Mission Compute pilot\numask 077\nexport PATH={}\n\
         MISSION_LZ_TOKEN=$(cat {token}) || exit 1\nrm -f {token}\nexport MISSION_LZ_TOKEN\nexec {}\n",
        quote(path),
        command.join(" ")
    )
}

/// A user map (`--user-map`): which cluster account runs each mission user's jobs, one
/// `MISSION_USER CLUSTER_ACCOUNT` pair per line; `#` starts a comment.
pub fn parse_user_map(text: &str) -> Result<std::collections::HashMap<String, String>, String> {
    let mut map = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [user, account] = fields[..] else {
            return Err(format!("line {}: expected MISSION_USER CLUSTER_ACCOUNT, got {line:?}", n + 1));
        };
        if map.insert(user.to_owned(), account.to_owned()).is_some() {
            return Err(format!("line {}: {user:?} is mapped twice", n + 1));
        }
    }
    Ok(map)
}

/// Site choices of a Slurm landing zone that every job's submission carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// Extra `sbatch` arguments, as given.
    pub extra: Vec<String>,
}

impl SiteOptions {
    /// `args` with the site's options and extra arguments, and the batch script last.
    fn finish(&self, mut args: Vec<String>, script: &Path) -> Vec<String> {
        for (flag, value) in [("partition", &self.partition), ("account", &self.account), ("qos", &self.qos)] {
            if let Some(value) = value {
                args.push(format!("--{flag}={value}"));
            }
        }
        args.extend(self.extra.iter().cloned());
        args.push(script.display().to_string());
        args
    }
}

/// The first `sbatch` arguments of every submission: one task on one node, with `cpus` CPUs and
/// `memory_mb` megabytes, named `name`, its id answered alone (`--parsable`).
fn one_task(name: String, cpus: u32, memory_mb: u64) -> Vec<String> {
    vec![
        "--parsable".to_owned(),
        format!("--job-name={name}"),
        "--nodes=1".to_owned(),
        "--ntasks=1".to_owned(),
        format!("--cpus-per-task={cpus}"),
        format!("--mem={memory_mb}M"),
    ]
}

/// [`one_task`] for `job`, named after it; a gang's nodes ([`Assignment::node`]) one task on
/// each, the CPUs and memory each node's.
fn allocation(job: &Assignment) -> Vec<String> {
    let mut args = one_task(format!("{JOB_NAME_PREFIX}{}", job.job_id), job.cpu_count, job.memory_amount);
    if let Some(node) = job.node.as_ref().filter(|node| node.nodes > 1) {
        args[2] = format!("--nodes={}", node.nodes);
        args[3] = "--ntasks-per-node=1".to_owned();
    }
    args
}

/// The POSIX account (uid, gid) a job is submitted to run as (`sbatch --uid --gid`, as root),
/// where not the agent's own.
pub type RunAs = Option<(u32, u32)>;

/// The `sbatch` arguments that submit `job`, staged in `dir`: its resources, time limit, name
/// and output files, and the site's options. The script's path goes last. The job gets the
/// environment `sbatch` runs with (`--export=ALL`), which the agent keeps to `PATH`, the user's
/// identity, the locale and `SLURM_*` (the script sets the rest): `--export=NONE` would make
/// Slurm 22.05 build each job a login environment (`--get-user-env`), which more than doubled
/// the time a stream of short jobs took on the test cluster.
pub fn sbatch_args(job: &Assignment, dir: &JobDir, site: &SiteOptions, run_as: RunAs) -> Vec<String> {
    let mut args = allocation(job);
    args.extend([
        format!("--chdir={}", dir.work().display()),
        format!("--output={}", dir.log("stdout").display()),
        format!("--error={}", dir.log("stderr").display()),
        "--export=ALL".to_owned(),
    ]);
    push_gpus_and_time(&mut args, job);
    push_run_as(&mut args, run_as);
    site.finish(args, &dir.script())
}

/// `--gres` for the GPUs `job` was placed with, `--time` for its limit, and Slurm's own
/// `--signal` before it and `--requeue` where the job asks for them (their syntax is Slurm's).
fn push_gpus_and_time(args: &mut Vec<String>, job: &Assignment) {
    if job.gpu_count > 0 {
        args.push(format!("--gres=gpu:{}", job.gpu_count));
    }
    if let Some(minutes) = job.time_limit {
        args.push(format!("--time={minutes}"));
    }
    if let Some(signal) = &job.signal {
        args.push(format!("--signal={signal}"));
    }
    if job.requeue {
        args.push("--requeue".to_owned());
    }
}

/// `--uid` and `--gid` where the job runs as a mapped account.
fn push_run_as(args: &mut Vec<String>, run_as: RunAs) {
    if let Some((uid, gid)) = run_as {
        args.push(format!("--uid={uid}"));
        args.push(format!("--gid={gid}"));
    }
}

/// The container engine a Slurm gateway's batch jobs run images with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerEngine {
    /// Podman on the compute node: the image is pulled there from its archive on the shared
    /// filesystem (kept in the node's storage for later jobs) and run as the job's account.
    Podman,
    /// Apptainer: the gateway converts the archive once into a SIF file on the shared
    /// filesystem, which `apptainer exec` runs in the job's own allocation.
    Apptainer,
}

impl std::str::FromStr for ContainerEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "podman" => Ok(Self::Podman),
            "apptainer" => Ok(Self::Apptainer),
            other => Err(format!("{other:?} is not a container engine (podman, apptainer)")),
        }
    }
}

/// An image staged for a batch job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedImage {
    /// Its digest's hex digits.
    pub hex: String,
    /// Where the node (or the conversion) takes it from.
    pub source: ImageSource,
    /// The SIF file made from it, for Apptainer.
    pub sif: PathBuf,
}

/// Where a batch job's image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// Its archive on the shared filesystem.
    Archive(PathBuf),
    /// A registry.
    Registry {
        /// The image's pinned reference.
        reference: String,
        /// Pulled without TLS verification.
        insecure: bool,
    },
}

/// `apptainer build` of `sif` from `source` (`oci-archive://` or `docker-archive://` for an
/// archive, `docker://` for a registry, as Apptainer's build specs name them; `--nohttps` for an
/// insecure registry): the conversion a gateway makes once per image.
pub fn apptainer_build_args(sif: &Path, source: &ImageSource, oci: bool) -> Vec<String> {
    let mut args = vec!["build".to_owned()];
    let spec = match source {
        ImageSource::Archive(archive) => {
            let transport = if oci { "oci-archive" } else { "docker-archive" };
            format!("{transport}://{}", archive.display())
        }
        ImageSource::Registry { reference, insecure } => {
            if *insecure {
                args.push("--nohttps".into());
            }
            format!("docker://{reference}")
        }
    };
    args.extend([sif.display().to_string(), spec]);
    args
}

/// `apptainer exec` of `command` in `sif`: file systems, PIDs, IPC and environment contained
/// (`--containall`, `--cleanenv`), no home dir but the work dir bound at its own path and made
/// the working directory, the job's variables passed by name (`--env NAME=$NAME`, expanded by
/// the batch script), and the NVIDIA driver (`--nv`) where the job has GPUs.
pub fn apptainer_exec_args(sif: &Path, work: &Path, vars: &[&str], gpus: bool, command: &[String]) -> Vec<String> {
    let work = work.display().to_string();
    let mut args: Vec<String> = ["exec", "--containall", "--cleanenv", "--no-home", "--bind"].map(String::from).into();
    args.extend([format!("{work}:{work}"), "--pwd".into(), work]);
    for var in vars {
        args.extend(["--env".into(), format!("{var}=${var}")]);
    }
    if gpus {
        args.push("--nv".into());
    }
    args.push(sif.display().to_string());
    args.extend(command.iter().cloned());
    args
}

/// The batch script's lines that run `job`'s command in its image with `engine` (instead of on
/// the node), its variables `vars` passed in. The container runs in the background and the
/// script waits for it, so that a cancel (`SIGTERM`) removes it at once.
pub fn container_lines(
    engine: ContainerEngine,
    image: &StagedImage,
    job: &Assignment,
    work: &Path,
    vars: &[&str],
) -> String {
    // `--env NAME=$NAME` is expanded by the shell; every other word is quoted as it is.
    let words = |args: Vec<String>| {
        let quoted: Vec<String> =
            args.iter().map(|a| if a.contains("=$") { format!("\"{a}\"") } else { quote(a) }).collect();
        quoted.join(" ")
    };
    match engine {
        ContainerEngine::Apptainer => {
            let args = apptainer_exec_args(&image.sif, work, vars, job.gpu_count > 0, &job.command);
            format!("apptainer {} &\nwait $!", words(args))
        }
        ContainerEngine::Podman => {
            let name = format!("mission-{}", job.job_id);
            let reference = format!("{}:{}", mission_api::images::AGENTS_REPOSITORY, image.hex);
            let pull = match &image.source {
                ImageSource::Archive(archive) => {
                    let archive = archive.display();
                    format!(
                        "$engine pull -q {} 2>/dev/null || $engine pull -q {}",
                        quote(&format!("oci-archive:{archive}")),
                        quote(&format!("docker-archive:{archive}"))
                    )
                }
                ImageSource::Registry { reference, insecure } => {
                    format!("$engine pull -q --tls-verify={} {}", !insecure, quote(reference))
                }
            };
            let mut lines = String::new();
            // Where cgroup v1 mixes with v2, Podman needs runc and its own cgroup manager; its
            // runtime takes at most 32768 processes and the node's open-file limits.
            lines.push_str("engine=\"podman --cgroup-manager cgroupfs\"\n");
            lines.push_str("[ -e /sys/fs/cgroup/cgroup.controllers ] || engine=\"$engine --runtime runc\"\n");
            lines.push_str(
                "procs=$(awk '/^Max processes/ {print $4}' /proc/self/limits)\n\
                 case $procs in ''|unlimited) procs=32768;; esac; [ \"$procs\" -gt 32768 ] && procs=32768\n",
            );
            lines.push_str(&format!(
                "$engine image exists {image} || $engine tag \"$({pull})\" {image} || exit 125\n",
                image = quote(&reference),
            ));
            // The container's group lies under the job's (its memory group's path), which
            // Slurm limits and counts.
            lines.push_str(
                "parent=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ || $2 == \"\" {print $3; exit}' /proc/self/cgroup)\n",
            );
            lines.push_str(&format!("trap '$engine rm -f -t 0 {name} >/dev/null 2>&1' TERM INT\n"));
            let mut args: Vec<String> = ["--rm", "--replace", "--pull=never", "--name", &name].map(String::from).into();
            args.extend(
                [
                    "--security-opt",
                    "no-new-privileges",
                    "--cap-drop",
                    "all",
                    "--network",
                    job.container_network.as_str(),
                ]
                .map(String::from),
            );
            args.extend([
                "--memory".into(),
                format!("{}m", job.memory_amount),
                "--cpus".into(),
                job.cpu_count.to_string(),
            ]);
            let work = work.display().to_string();
            args.extend(["-v".into(), format!("{work}:{work}"), "-w".into(), work]);
            for var in vars {
                args.extend(["-e".into(), (*var).to_owned()]);
            }
            args.push(reference);
            args.extend(job.command.iter().cloned());
            // The job's own identity and limits, as the node gives them.
            let node = "--user \"$(id -u):$(id -g)\" --cgroup-parent \"${parent:-/}\" \
                        --ulimit \"nofile=$(ulimit -Sn):$(ulimit -Hn)\" --ulimit \"nproc=$procs:$procs\"";
            lines.push_str(&format!("$engine run {node} {} &\nwait $!", words(args)));
            lines
        }
    }
}

/// The batch script of `job`, staged in `dir`: it sets the job's environment (nothing of the
/// agent's but `path`, the `PATH` jobs get, and a session's `session_env`), runs the command in the work dir (in its `image`
/// where it has one, with the gateway's engine: see [`container_lines`]), and writes its exit
/// code to [`JobDir::exit_code`] (which tells how it ended where Slurm has forgotten the job and
/// keeps no accounting).
pub fn batch_script(
    job: &Assignment,
    dir: &JobDir,
    path: &str,
    image: Option<(ContainerEngine, &StagedImage)>,
    session_env: &[(&'static str, String)],
) -> String {
    let work = dir.work();
    let mut vars = vec![
        ("HOME", work.to_string_lossy().into_owned()),
        ("PATH", path.to_owned()),
        ("MISSION_ID", job.mission_id.to_string()),
        ("JOB_ID", job.job_id.to_string()),
        ("OMP_NUM_THREADS", job.cpu_count.to_string()),
    ];
    vars.extend(job.array_index.map(|index| (mission_api::lz::ARRAY_INDEX_VARIABLE, index.to_string())));
    vars.extend(session_env.iter().cloned());
    let mut script =
        format!("#!/bin/sh\n# Mission Compute job {} of mission {}\numask 077\n", job.job_id, job.mission_id);
    let names: Vec<&str> = vars.iter().map(|(name, _)| *name).collect();
    for (name, value) in &vars {
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    script.push_str("cd \"$HOME\" || exit 1\n");
    script.push_str(&stamp(&dir.started()));
    match image {
        Some((engine, image)) => {
            // The image's own PATH holds inside; Slurm's CUDA_VISIBLE_DEVICES passes in.
            let mut passed: Vec<&str> = names.iter().copied().filter(|name| *name != "PATH").collect();
            passed.push("CUDA_VISIBLE_DEVICES");
            script.push_str(&container_lines(engine, image, job, &work, &passed));
        }
        None => {
            let command: Vec<String> = job.command.iter().map(|arg| quote(arg)).collect();
            script.push_str(&gang_lines(job));
            script.push_str(&command.join(" "));
        }
    }
    script.push_str(&ending(dir));
    script
}

/// For a gang, the batch script's lines before its command: the variables a gang's processes
/// get on other landing zones (`MISSION_NNODES`, `MISSION_HOSTS`, `MASTER_ADDR`, …) from
/// Slurm's allocation, and, launched on every node, `srun` starting the command there, one
/// task per node, told its rank from `SLURM_NODEID`. Nothing for a job of one node.
fn gang_lines(job: &Assignment) -> String {
    let Some(node) = job.node.as_ref().filter(|node| node.nodes > 1) else { return String::new() };
    let mut lines = format!(
        "MISSION_HOSTS=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | paste -sd, -)\n\
         export MISSION_NNODES={n} WORLD_SIZE={n} MISSION_HOSTS MASTER_ADDR=\"${{MISSION_HOSTS%%,*}}\" \
         MASTER_PORT={port}\n",
        n = node.nodes,
        port = crate::gang::master_port(job),
    );
    match node.launch {
        mission_api::Launch::Each => lines.push_str(
            "srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c \
             'MISSION_NODE_RANK=$SLURM_NODEID NODE_RANK=$SLURM_NODEID exec \"$@\"' sh ",
        ),
        mission_api::Launch::First => lines.push_str("MISSION_NODE_RANK=0 NODE_RANK=0 "),
    }
    lines
}

/// The name of a batch job's script as the gateway keeps it, in the job's private dir (the
/// user's): the script runs as submitted, whatever happens to the user's file after.
pub const BATCH_SCRIPT_COPY: &str = "batch-script";

/// `pattern` (a batch job's `-o`/`-e`) for the real `sbatch`: this service's patterns filled in
/// with the job's number and names, `%N` left for Slurm to fill with the node, and any other `%`
/// escaped so Slurm takes it as written.
fn output_for_slurm(pattern: &str, job: &Assignment, name: &str) -> String {
    const NODE: &str = "\u{0}N";
    let names = OutputNames {
        number: job.number,
        name,
        array_number: job.array_number,
        array_index: job.array_index,
        user: &job.username,
        node: NODE,
    };
    fill_output_pattern(pattern, &names).replace('%', "%%").replace(NODE, "%N")
}

/// The `sbatch` arguments that submit `job`, a batch job of `batch` staged in `dir`: its
/// resources and time limit as the service placed it, its directory and output files, its
/// comment, the directives it passes on ([`mission_api::batch::PASSED_ON`]), then the site's
/// options; the script's path goes last. Without output files its output goes to the job's
/// logs, as any job's.
pub fn batch_sbatch_args(
    job: &Assignment,
    batch: &JobBatch,
    dir: &JobDir,
    site: &SiteOptions,
    run_as: RunAs,
) -> Vec<String> {
    let mut args = allocation(job);
    args.push(format!("--chdir={}", batch.workdir));
    if batch.stdout.is_empty() {
        args.push(format!("--output={}", dir.log("stdout").display()));
        args.push(format!("--error={}", dir.log("stderr").display()));
    } else {
        args.push(format!("--output={}", output_for_slurm(&batch.stdout, job, &batch.name)));
        if let Some(stderr) = &batch.stderr {
            args.push(format!("--error={}", output_for_slurm(stderr, job, &batch.name)));
        }
    }
    if batch.append {
        args.push("--open-mode=append".to_owned());
    }
    args.push("--export=ALL".to_owned());
    push_gpus_and_time(&mut args, job);
    if let Some(comment) = &batch.comment {
        args.push(format!("--comment={comment}"));
    }
    args.extend(batch.directives.iter().filter(|d| mission_api::batch::is_passed_on(d)).cloned());
    push_run_as(&mut args, run_as);
    site.finish(args, &dir.script())
}

/// The script the gateway submits for `job`, a batch job of `batch` whose script was copied to
/// `copy`: the environment it was submitted with, but for the `SLURM_*` variables, which are the
/// real Slurm's inside its job (its `srun` and MPI read them), and `SLURM_SUBMIT_DIR`, which is
/// where `sbatch` ran on the login host; the job's number in `MISSION_JOB_NUMBER`; then the copy
/// with its arguments, between the stamps the gateway follows the job by.
pub fn batch_job_script(job: &Assignment, batch: &JobBatch, dir: &JobDir, copy: &Path) -> String {
    let mut script = format!("#!/bin/sh\n# Mission Compute batch job {} ({})\n", job.number, job.job_id);
    let submitted = batch.environment.iter().filter(|(name, _)| !name.starts_with("SLURM_"));
    for (name, value) in submitted {
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    let submit_dir = batch.environment.get("SLURM_SUBMIT_DIR").unwrap_or(&batch.workdir);
    let ours = [
        ("SLURM_SUBMIT_DIR", submit_dir.clone()),
        ("MISSION_JOB_NUMBER", job.number.to_string()),
        ("MISSION_ID", job.mission_id.to_string()),
        ("JOB_ID", job.job_id.to_string()),
    ];
    for (name, value) in ours {
        script.push_str(&format!("export {name}={}\n", quote(&value)));
    }
    script.push_str(&stamp(&dir.started()));
    let mut command = vec![quote("/bin/bash"), quote(&copy.to_string_lossy())];
    command.extend(batch.arguments.iter().map(|arg| quote(arg)));
    script.push_str(&command.join(" "));
    script.push_str(&ending(dir));
    script
}

/// A script's line writing the time now to `path` (whole once there: written aside, then moved).
fn stamp(path: &Path) -> String {
    let path = quote(&path.to_string_lossy());
    format!("date +%s.%N > {path}.partial && mv {path}.partial {path}\n")
}

/// A script's last lines after its program: the end's stamp, the program's exit code written to
/// the job's dir, and the script's exit with it.
fn ending(dir: &JobDir) -> String {
    let exit_code = quote(&dir.exit_code().to_string_lossy());
    format!(
        "\ncode=$?\n{}echo \"$code\" > {exit_code}.partial && mv {exit_code}.partial {exit_code}\nexit \"$code\"\n",
        stamp(&dir.ended())
    )
}

/// `text` as one word of a POSIX shell command line.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mission_api::lz::GangNode;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/slurm-22.05");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
    }

    #[test]
    fn the_captured_node_is_read_and_offered_whole() {
        let nodes = parse_nodes(&fixture("sinfo-nodes.txt")).unwrap();
        assert_eq!(nodes, [Node { name: "vm".into(), cpus: 2, memory_mb: 23593, gpus: 0, state: "idle".into() }]);
        assert_eq!(capacity(&nodes), Some(Resources { cpu_count: 2, memory_amount: 23593, gpu_count: 0 }));
    }

    #[test]
    fn gpus_are_counted_from_generic_resources_and_down_nodes_offer_nothing() {
        let output = "a|64|512000|gpu:a100:4(S:0-1)|mixed\nb|128|1024000|(null)|idle\n\
                      c|32|256000|gpu:2,shard:8|down*\na|64|512000|gpu:a100:4(S:0-1)|mixed\n";
        let nodes = parse_nodes(output).unwrap();
        assert_eq!(nodes.iter().map(|n| (n.name.as_str(), n.gpus)).collect::<Vec<_>>(), [("a", 4), ("b", 0), ("c", 2)]);
        assert_eq!(capacity(&nodes), Some(Resources { cpu_count: 64, memory_amount: 512000, gpu_count: 4 }));
        assert!(parse_nodes("a|x|1|(null)|idle").is_err());
        assert!(parse_nodes("a|1|1|gpu:many|idle").is_err());
    }

    #[test]
    fn pending_reasons_states_and_exit_statuses_are_read_from_squeue() {
        let running = parse_queue(&fixture("squeue-mission-running.txt")).unwrap();
        let ours: Vec<_> = running.iter().filter(|j| j.job_id.is_some()).collect();
        let read: Vec<_> = ours.iter().map(|j| (j.slurm_id.as_str(), j.pending_reason())).collect();
        assert_eq!(
            read[4..],
            [
                ("12", Some("waiting in Slurm's queue: Resources".to_owned())),
                ("13", Some("waiting in Slurm's queue: Priority".to_owned())),
                ("14", Some("waiting in Slurm's queue: Priority".to_owned())),
                ("11", None),
            ]
        );
        assert_eq!(running[0].job_id, None, "a job of another name is not ours");
        let ended = parse_queue(&fixture("squeue-mission-ended.txt")).unwrap();
        let outcome = |slurm_id: &str, stopped| ended.iter().find(|j| j.slurm_id == slurm_id).unwrap().outcome(stopped);
        let failed = |why: &str| Some((JobStatus::Failed, None, Some(why.to_owned())));
        assert_eq!(outcome("8", false), Some((JobStatus::Completed, Some(0), None)));
        assert_eq!(outcome("9", false), Some((JobStatus::Failed, Some(3), Some("exit status 3".into()))));
        assert_eq!(outcome("10", false), failed("out of memory"));
        assert_eq!(outcome("12", true), Some((JobStatus::Stopped, None, Some("stopped".into()))));
        assert_eq!(outcome("12", false), failed("cancelled in Slurm (by scancel, or by an administrator)"));
        assert_eq!(outcome("13", false), None, "pending");
        let timed_out = ended.iter().find(|j| j.state == SlurmState::Timeout).unwrap();
        assert_eq!(timed_out.outcome(false), failed("time limit"));
        assert_eq!(
            ended.iter().find(|j| j.slurm_id == "8").unwrap().job_id,
            Some(Uuid::parse_str("11111111-1111-4111-8111-111111111111").unwrap())
        );
        assert!(parse_queue("17|RUNNING|x|None|name|").is_err());
        assert!(parse_queue("17|RUNNING|0|None").is_err());
    }

    #[test]
    fn accounting_reads_states_with_their_actors_and_exit_codes() {
        let jobs = parse_accounting(&fixture("sacct-ended.txt")).unwrap();
        let outcomes: Vec<_> = jobs.iter().map(|j| (j.slurm_id.as_str(), j.outcome(false).unwrap().0)).collect();
        assert_eq!(
            outcomes,
            [
                ("1", JobStatus::Completed),
                ("2", JobStatus::Completed),
                ("3", JobStatus::Failed),
                ("4", JobStatus::Failed)
            ]
        );
        assert_eq!(jobs[2].outcome(true).unwrap().0, JobStatus::Stopped, "cancelled by the agent");
        assert_eq!(jobs[3].outcome(false).unwrap().1, Some(3));
        // A failed node, in sacct's documented form.
        let node_fail = parse_accounting("44|NODE_FAIL|0:0\n").unwrap();
        assert_eq!(node_fail[0].outcome(false).unwrap().2.as_deref(), Some("its Slurm node failed"));
        assert!(parse_accounting("41|COMPLETED|0").is_err());
    }

    #[test]
    fn usage_sums_the_steps_cpu_and_takes_the_largest_steps_memory_once_the_batch_step_ended() {
        let usage = parse_usage(&fixture("sacct-usage.txt")).unwrap();
        let figures = |id: &str| usage.get(id).map(|u| (u.wall_time, u.cpu_time.unwrap(), u.peak_memory.unwrap()));
        assert_eq!(figures("1"), Some((3.0, 2.313, 115)), "120,004,608 bytes are 114.44 MB, rounded up");
        assert_eq!(figures("2"), Some((10.0, 7.063, 2115)));
        assert_eq!(figures("3"), None, "cancelled before it started");
        assert_eq!(figures("4"), Some((1.0, 0.222, 4)), "the batch step and an srun step");
        assert!(usage.values().all(|u| u.energy_parts.is_none()), "no energy plugin: empty or 0");
        // Until the batch step has ended, the figures are not final.
        let running = "7|RUNNING|12|00:03.000||\n7.batch|RUNNING|12|00:03.000|1048576|0\n";
        assert!(parse_usage(running).unwrap().is_empty());
        assert_eq!(cpu_seconds("1-02:03:04"), Some(93784.0));
        assert_eq!(cpu_seconds("02:03:04.5"), Some(7384.5));
        assert_eq!(cpu_seconds("03:04.250"), Some(184.25));
        for wrong in ["", "12", "a:b", "1:2:3:4", "x-01:02"] {
            assert_eq!(cpu_seconds(wrong), None, "{wrong:?}");
        }
        assert!(parse_usage("7|COMPLETED|x|00:01.000||\n").is_err());
        assert!(parse_usage("7.batch|COMPLETED|1|00:01.000|12K|0\n").is_err(), "--noconvert gives bytes");
        assert!(parse_usage("7.batch|COMPLETED|1|00:01.000|12|1.5K\n").is_err(), "--noconvert gives joules");
    }

    /// Where the cluster has an energy plugin (acct_gather_energy/rapl, ipmi), its figure for the
    /// job is the job's row's, or else its largest step's; it covers the node, memory included.
    #[test]
    fn a_clusters_energy_figure_is_the_jobs_or_its_largest_steps() {
        let with_energy = "8|COMPLETED|60|01:00.000||\n8.batch|COMPLETED|60|01:00.000|1048576|7200\n\
                           8.0|COMPLETED|30|00:30.000|1048576|3600\n\
                           9|COMPLETED|60|01:00.000||36000\n9.batch|COMPLETED|60|01:00.000|1048576|7200\n";
        let usage = parse_usage(with_energy).unwrap();
        let parts = |id: &str| usage[id].energy_parts.clone().unwrap();
        assert_eq!(parts("8").cpu, Some(EnergyPart { wh: 2.0, source: EnergySource::Slurm }));
        assert_eq!(parts("8").memory, Some(EnergyPart { wh: 0.0, source: EnergySource::Slurm }));
        assert_eq!(parts("9").cpu.unwrap().wh, 10.0, "the job's own row");
    }

    fn assignment() -> Assignment {
        Assignment {
            job_id: Uuid::parse_str("0b8e2e1c-6f43-4c1e-9d3f-6a1f0c1d2e3f").unwrap(),
            mission_id: Uuid::nil(),
            user_id: Uuid::nil(),
            username: "ada".into(),
            user_is_operator: false,
            command: vec!["sh".into(), "-c".into(), "echo \"$0 it's $HOME\" > out.txt; exit 4".into(), "x".into()],
            cpu_count: 2,
            memory_amount: 512,
            gpu_count: 1,
            gpu_indices: Vec::new(),
            time_limit: Some(30),
            files: Vec::new(),
            attempt: 1,
            log_offsets: Default::default(),
            array_index: None,
            image: None,
            session: None,
            container_network: Default::default(),
            batch: None,
            task: None,
            number: 0,
            array_number: None,
            node: None,
            signal: None,
            requeue: false,
        }
    }

    /// A gang's submission asks Slurm for its nodes, one task on each with the CPUs and memory
    /// each node's, and for the warning signal and requeue the job asked for; launched on every
    /// node, its script starts the command with `srun`, each told its rank.
    #[test]
    fn a_gang_is_one_slurm_job_of_its_nodes() {
        let mut job = assignment();
        job.node = Some(GangNode { nodes: 4, rank: 0, hosts: Vec::new(), launch: mission_api::Launch::Each });
        job.signal = Some(mission_api::WarningSignal::parse("B:USR1@90").unwrap());
        job.requeue = true;
        let dir = JobDir::new(Path::new("/shared/work"), job.job_id);
        let args = sbatch_args(&job, &dir, &SiteOptions::default(), None);
        assert_eq!(args[2..6], ["--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=2", "--mem=512M"]);
        for expected in ["--signal=B:USR1@90", "--requeue"] {
            assert!(args.contains(&expected.to_owned()), "{expected} in {args:?}");
        }
        let script = batch_script(&job, &dir, "/usr/bin:/bin", None, &[]);
        assert!(script.contains("export MISSION_NNODES=4 WORLD_SIZE=4 MISSION_HOSTS"), "{script}");
        assert!(script.contains("srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c"), "{script}");
        job.node = Some(GangNode { nodes: 4, rank: 0, hosts: Vec::new(), launch: mission_api::Launch::First });
        let script = batch_script(&job, &dir, "/usr/bin:/bin", None, &[]);
        assert!(!script.contains("srun") && script.contains("MISSION_NODE_RANK=0 NODE_RANK=0 "), "{script}");
    }

    #[test]
    fn a_submission_carries_the_jobs_resources_names_and_the_sites_options() {
        let dir = JobDir::new(Path::new("/shared/work"), assignment().job_id);
        let site = SiteOptions {
            partition: Some("gpu".into()),
            account: None,
            qos: Some("short".into()),
            extra: vec!["--constraint=a100".into()],
        };
        let args = sbatch_args(&assignment(), &dir, &site, Some((1000, 100)));
        let root = "/shared/work/0b8e2e1c-6f43-4c1e-9d3f-6a1f0c1d2e3f";
        assert_eq!(
            args,
            [
                "--parsable".to_owned(),
                "--job-name=mission-0b8e2e1c-6f43-4c1e-9d3f-6a1f0c1d2e3f".into(),
                "--nodes=1".into(),
                "--ntasks=1".into(),
                "--cpus-per-task=2".into(),
                "--mem=512M".into(),
                format!("--chdir={root}/work"),
                format!("--output={root}/stdout"),
                format!("--error={root}/stderr"),
                "--export=ALL".into(),
                "--gres=gpu:1".into(),
                "--time=30".into(),
                "--uid=1000".into(),
                "--gid=100".into(),
                "--partition=gpu".into(),
                "--qos=short".into(),
                "--constraint=a100".into(),
                format!("{root}/job.sh"),
            ]
        );
    }

    #[test]
    fn the_batch_script_runs_the_command_in_its_work_dir_and_keeps_its_exit_code() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = JobDir::new(tmp.path(), assignment().job_id);
        std::fs::create_dir_all(dir.work()).unwrap();
        std::fs::write(dir.script(), batch_script(&assignment(), &dir, "/usr/bin:/bin", None, &[])).unwrap();
        let status = std::process::Command::new("sh")
            .arg(dir.script())
            .env_clear()
            .env("SECRET", "agent's")
            .current_dir("/")
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(4));
        let out = std::fs::read_to_string(dir.work().join("out.txt")).unwrap();
        assert_eq!(out, format!("x it's {}\n", dir.work().display()));
        assert_eq!(std::fs::read_to_string(dir.exit_code()).unwrap(), "4\n");
        let started = parse_stamp(&std::fs::read_to_string(dir.started()).unwrap()).unwrap();
        assert!((chrono::Utc::now() - started).num_seconds().abs() < 60, "{started}");
        let ended = parse_stamp(&std::fs::read_to_string(dir.ended()).unwrap()).unwrap();
        assert!(ended >= started && ended - started < chrono::TimeDelta::seconds(60), "{started} {ended}");
        assert_eq!(parse_stamp("1700000000.5").unwrap().timestamp_subsec_millis(), 500);
        assert_eq!(parse_stamp("soon"), None);
    }
    #[test]
    fn a_user_map_pairs_mission_users_with_cluster_accounts() {
        let map = parse_user_map("# who runs as whom\nada  ada.lovelace\n\nalan turing # since 2024\n").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!((map["ada"].as_str(), map["alan"].as_str()), ("ada.lovelace", "turing"));
        assert!(parse_user_map("ada").unwrap_err().starts_with("line 1:"));
        assert!(parse_user_map("ada a\nada b\n").unwrap_err().contains("mapped twice"));
    }

    #[test]
    fn our_jobs_are_known_by_their_names() {
        let id = Uuid::new_v4();
        let output = format!("17|RUNNING|0|None|{JOB_NAME_PREFIX}{id}|\n18|PENDING|0|QOSMaxJobsPerUserLimit|a|b|\n");
        let jobs = parse_queue(&format!("{output}19|RUNNING|0|None|{PILOT_NAME_PREFIX}{id}|\n")).unwrap();
        assert_eq!((jobs[0].job_id, jobs[0].pilot), (Some(id), None));
        assert_eq!((jobs[2].job_id, jobs[2].pilot), (None, Some(id)));
        assert_eq!((jobs[1].job_id, jobs[1].reason.as_deref()), (None, Some("QOSMaxJobsPerUserLimit")));
    }

    /// Apptainer's documented usage: `apptainer build [options] <image path> <build spec>` with
    /// `oci-archive://` and `docker-archive://` build specs, and `apptainer exec [options]
    /// <container> <command>` with `--containall`, `--cleanenv`, `--no-home`, `--bind src:dest`,
    /// `--pwd`, `--env NAME=VALUE` and `--nv`.
    #[test]
    fn apptainer_converts_an_archive_once_and_execs_the_command_contained() {
        let sif = Path::new("/shared/images/ab.sif");
        let tar = ImageSource::Archive(PathBuf::from("/shared/images/ab.tar"));
        assert_eq!(
            apptainer_build_args(sif, &tar, true),
            ["build", "/shared/images/ab.sif", "oci-archive:///shared/images/ab.tar"]
        );
        assert_eq!(apptainer_build_args(sif, &tar, false)[2], "docker-archive:///shared/images/ab.tar");
        let remote = ImageSource::Registry { reference: "127.0.0.1:5000/lab@sha256:ab".into(), insecure: true };
        assert_eq!(
            apptainer_build_args(sif, &remote, true),
            ["build", "--nohttps", "/shared/images/ab.sif", "docker://127.0.0.1:5000/lab@sha256:ab"]
        );
        let command = ["bash".to_owned(), "run.sh".to_owned()];
        let args = apptainer_exec_args(sif, Path::new("/shared/work/j/work"), &["HOME", "JOB_ID"], true, &command);
        assert_eq!(
            args.join(" "),
            "exec --containall --cleanenv --no-home --bind /shared/work/j/work:/shared/work/j/work --pwd \
             /shared/work/j/work --env HOME=$HOME --env JOB_ID=$JOB_ID --nv /shared/images/ab.sif bash run.sh"
        );
        assert!(!apptainer_exec_args(sif, Path::new("/w"), &[], false, &command).contains(&"--nv".to_owned()));
    }

    /// A job in an image runs its command through the gateway's engine, in the background so
    /// that a cancel removes its container, with the job's variables (not PATH) passed in.
    #[test]
    fn a_batch_script_runs_the_command_in_the_image_with_the_gateways_engine() {
        let job = assignment();
        let dir = JobDir::new(Path::new("/shared/work"), job.job_id);
        let hex = "ab".repeat(32);
        let image = StagedImage {
            hex: hex.clone(),
            source: ImageSource::Archive(PathBuf::from(format!("/shared/work/images/{hex}.tar"))),
            sif: PathBuf::from(format!("/shared/work/images/{hex}.sif")),
        };
        let podman = batch_script(&job, &dir, "/usr/bin:/bin", Some((ContainerEngine::Podman, &image)), &[]);
        let name = format!("mission-{}", job.job_id);
        for expected in [
            format!("$engine image exists 'localhost/mission-image:{hex}' || $engine tag"),
            format!("pull -q 'oci-archive:/shared/work/images/{hex}.tar'"),
            format!("trap '$engine rm -f -t 0 {name} >/dev/null 2>&1' TERM INT"),
            "$engine run --user \"$(id -u):$(id -g)\" --cgroup-parent \"${parent:-/}\"".to_owned(),
            "'--security-opt' 'no-new-privileges' '--cap-drop' 'all'".to_owned(),
            "'--memory' '512m' '--cpus' '2'".to_owned(),
            "'-e' 'HOME' '-e' 'MISSION_ID' '-e' 'JOB_ID' '-e' 'OMP_NUM_THREADS' '-e' 'CUDA_VISIBLE_DEVICES'".to_owned(),
            format!("'localhost/mission-image:{hex}' 'sh' '-c'"),
            " &\nwait $!\ncode=$?\n".to_owned(),
        ] {
            assert!(podman.contains(&expected), "{expected:?} in\n{podman}");
        }
        assert!(!podman.contains("'-e' 'PATH'"), "the image keeps its own PATH");
        let apptainer = batch_script(&job, &dir, "/usr/bin:/bin", Some((ContainerEngine::Apptainer, &image)), &[]);
        assert!(apptainer.contains("apptainer 'exec' '--containall'"), "{apptainer}");
        assert!(apptainer.contains("'--env' \"HOME=$HOME\""), "{apptainer}");
        assert!(apptainer.contains(&format!("'/shared/work/images/{hex}.sif' 'sh' '-c'")), "{apptainer}");
    }
}
