//! `mission run` and `mission jobs`: start missions as jobs, watch them, stop them, fetch their
//! logs and results.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use mission_client::{
    Client, Job, JobArray, JobRef, JobStatus, ListJobs, LogStream, RunJob, RunJobArray, UsageQuery, Uuid,
};

use super::files::{TransferArgs, report_download};
use super::labels::{apply_label_changes, labels_text, parse_label_arg};
use super::projects::{project_names, resolve_optional_project, resolve_project};
use super::retries::{RetryArgs, retry_text};
use super::sizes::{Size, log_cap};
use super::stations::{resolve_lz, resolve_station};
use crate::output::Output;
use crate::session;

/// Run a mission as a job on a station (or one of its landing zones).
///
/// Resources left out come from the mission type's defaults. A job no landing zone of the
/// station could ever hold is refused at once; one that only has to wait is queued.
///
///   mission run 3f2a… --cpus 4 --memory 8000 --follow
///   mission run 3f2a… --after-ok 9c1e…     (starts once job 9c1e… has completed)
///   mission run 3f2a… --retry 3 --retry-on out_of_memory --max-memory 16000
///   mission run 3f2a… --array 1-100 -- --seed {}   (100 jobs; `mission jobs array ID` says how far)
///   mission run 3f2a… --session jupyter --gpus 1 --open   (Jupyter Lab, opened in your browser)
///   mission run --again 9c1e…   (the same job, or session, once more)
///
/// While it waits, `mission jobs get JOB` says why (its pending reason).
#[derive(Debug, Args)]
pub struct RunCommand {
    /// Mission id.
    #[arg(required_unless_present = "again")]
    mission: Option<Uuid>,
    /// Start an ended job (a session, say) again with the same settings, instead of a mission.
    #[arg(long, value_name = "JOB", conflicts_with_all = ["mission", "array", "session"])]
    again: Option<Uuid>,
    /// Make the job an interactive session: `web` runs the mission's command, which serves HTTP
    /// on $MISSION_SESSION_PORT; `jupyter` runs Jupyter Lab, `vscode` code-server (from the
    /// job's PATH). Waits until it answers and prints the URL only you can open it at.
    #[arg(long, value_name = "KIND", conflicts_with = "array")]
    session: Option<mission_client::SessionKind>,
    /// With --session: end it after this long without a request (90m, 2h, 1d).
    #[arg(long, value_name = "DURATION", value_parser = parse_time_limit, requires = "session")]
    idle_timeout: Option<u32>,
    /// With --session: the managers of the project the job is charged to (--project) may open
    /// it too.
    #[arg(long, requires = "session")]
    share_with_managers: bool,
    /// Open the session in a browser once it answers (with --session or --again).
    #[arg(long)]
    open: bool,
    /// Station name or id.
    #[arg(long, default_value = mission_client::DEFAULT_STATION_NAME)]
    station: String,
    /// Landing zone (name or id) of the station the job must run on.
    #[arg(long)]
    lz: Option<String>,
    /// CPUs.
    #[arg(long)]
    cpus: Option<u32>,
    /// Memory in MB.
    #[arg(long)]
    memory: Option<u64>,
    /// GPUs.
    #[arg(long)]
    gpus: Option<u32>,
    /// Landing zones to run on at once (a gang for MPI or distributed training), each holding
    /// --cpus, --memory and --gpus: placed on all together or not at all. Each node's process
    /// finds its rank in MISSION_NODE_RANK, the others in MISSION_HOSTS and MISSION_HOSTFILE.
    #[arg(long, short = 'N', value_name = "N", conflicts_with_all = ["lz", "session"])]
    nodes: Option<u32>,
    /// How a gang starts the command: on every node (each, as srun and torchrun expect), or on
    /// the first only (first, as a batch script: it starts ranks on the others itself, e.g.
    /// `mpirun --mca plm_rsh_agent "mission lz-exec"`).
    #[arg(long, value_enum, requires = "nodes")]
    launch: Option<LaunchArg>,
    /// Time limit: minutes (90), or a number of minutes, hours or days (90m, 2h, 1d). The job
    /// is ended when it runs longer, and fails with the reason "time limit". Default: the
    /// mission type's, if it has one.
    #[arg(long, value_name = "DURATION", value_parser = parse_time_limit)]
    time: Option<u32>,
    /// A signal sent that long before the time limit (and before a reclaim of borrowed room
    /// ends the job), to write a checkpoint: Slurm's `[B:]SIG@SECONDS`, e.g. USR1@60; B: sends it
    /// to the job's main process only.
    #[arg(long, value_name = "[B:]SIG@SECONDS", value_parser = parse_signal)]
    signal: Option<String>,
    /// Put the job back in line when its time limit, a reclaim or a node's failure ends it: the
    /// next attempt gets what it left among its results as inputs (a checkpoint to resume from)
    /// and MISSION_RESTART_COUNT (0 first).
    #[arg(long)]
    requeue: bool,
    /// A label to find the job by later (`jobs list --label`), as key=value; repeat for several.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label_arg)]
    labels: Vec<(String, String)>,
    /// The most bytes of each output stream to keep (K/M/G suffixes), up to the server's cap
    /// (the default). Past it, output is dropped except its last quarter-cap bytes, which
    /// follow a marker line once the job ends.
    #[arg(long, value_name = "SIZE", value_parser = log_cap)]
    log_cap: Option<Size>,
    /// A job of yours that must complete before this one starts; repeat for several. Should it
    /// end any other way, this job fails without running, saying which.
    #[arg(long, value_name = "JOB")]
    after_ok: Vec<Uuid>,
    /// A job of yours that must end, however it ends, before this one starts; repeat for
    /// several.
    #[arg(long, value_name = "JOB")]
    after_any: Vec<Uuid>,
    /// A job of yours that must end without completing (fail, be stopped or lost) before this
    /// one starts; repeat for several. Should it complete, this job fails without running.
    #[arg(long, value_name = "JOB")]
    after_not_ok: Vec<Uuid>,
    #[command(flatten)]
    retry: RetryArgs,
    /// The project (name or id) to charge the job to; default: the mission's.
    #[arg(long)]
    project: Option<String>,
    /// The container image to run in (a name or `sha256:` digest, see `mission images`);
    /// default: the mission's, if it names one.
    #[arg(long)]
    image: Option<String>,
    /// Wait until the job ends, showing its status; exit non-zero unless it completed.
    #[arg(long)]
    wait: bool,
    /// Print the job's output as it runs (implies --wait).
    #[arg(long, short, conflicts_with = "array")]
    follow: bool,
    /// Run a job array: one job per index of FIRST-LAST (or one index), each with its index in
    /// MISSION_ARRAY_INDEX and the arguments after `--`, `{}` replaced by the index.
    #[arg(long, value_name = "FIRST-LAST")]
    array: Option<String>,
    /// With --array: each element's arguments, after the mission's (`{}` is its index).
    #[arg(last = true, requires = "array", value_name = "ARGS")]
    arguments: Vec<String>,
}

/// Inspect and control jobs.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List your jobs (everyone's, for admins), newest first.
    List(ListArgs),
    /// Show one job with its history.
    Get {
        /// The job: its id, or its number.
        job: JobRef,
    },
    /// Print a job's output (stdout to stdout, stderr to stderr).
    Logs {
        /// The job: its id, or its number.
        job: JobRef,
        /// Keep printing new output until the job ends.
        #[arg(long, short)]
        follow: bool,
        /// Of a job on several landing zones (`run --nodes`): the node's output, by rank.
        #[arg(long, value_name = "RANK", default_value_t = 0)]
        node: u32,
    },
    /// Set a job's labels: `jobs label JOB sweep=lr-0.1 seed=3`. Each key=value sets that label;
    /// `key-` removes it; other labels stay.
    Label {
        /// The job: its id, or its number.
        job: JobRef,
        /// Labels to set (key=value) or remove (key-).
        #[arg(required = true, value_name = "KEY=VALUE|KEY-")]
        changes: Vec<String>,
    },
    /// Show how far a job array got (`jobs list --array ID` lists its jobs); with --stop, stop
    /// every element that has not ended.
    Array {
        /// Array id.
        array: Uuid,
        /// Stop its elements that have not ended.
        #[arg(long)]
        stop: bool,
    },
    /// Stop a job: dequeue it, or kill its processes.
    Stop {
        /// The job: its id, or its number.
        job: JobRef,
    },
    /// Open a shell inside a running job of yours: as its user, in its work dir, environment
    /// and sandbox, through the service (no SSH, no port on the host). Every opening is audited.
    ///
    ///   mission jobs shell 9c1e…                       an interactive shell
    ///   mission jobs shell 9c1e… -- nvidia-smi         one command; its exit code is ours
    ///   mission jobs shell 9c1e… -- 'ps aux | head'    a command line, run by sh -c
    #[command(verbatim_doc_comment)]
    Shell(super::shell::ShellArgs),
    /// Start an ended job again as a new job (same mission, command, resources, labels, retry
    /// policy), or with `--failed --mission M` every job of the mission that failed or was lost
    /// and was not rerun yet, leaving the completed ones alone.
    ///
    ///   mission jobs rerun 9c1e…
    ///   mission jobs rerun --failed --mission 3f2a…
    #[command(verbatim_doc_comment)]
    Rerun {
        /// The job: its id, or its number.
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        job: Option<JobRef>,
        /// Rerun the failed jobs of `--mission`.
        #[arg(long, requires = "mission")]
        failed: bool,
        /// The mission whose failed jobs to rerun.
        #[arg(long, requires = "failed")]
        mission: Option<Uuid>,
    },
    /// Download a job's results (new or changed files and its logs) into a directory.
    Download {
        /// The job: its id, or its number.
        job: JobRef,
        /// Directory to write into (created if needed; default: the current one), as
        /// `mission files download -o` takes it.
        #[arg(long, short = 'o', value_name = "DIR", conflicts_with = "dest")]
        output: Option<PathBuf>,
        /// The directory, given without `-o` (the older form, still accepted).
        #[arg(value_name = "DIR")]
        dest: Option<PathBuf>,
        #[command(flatten)]
        transfer: TransferArgs,
    },
    /// List a job's result files.
    Results {
        /// The job: its id, or its number.
        job: JobRef,
    },
    /// Sum what your ended jobs used: how many, wall and CPU hours, CPU-hours held (CPUs asked
    /// for × wall time), mean CPU efficiency, and how many asked for more than twice the memory
    /// they used at their peak. One job's own figures are in `jobs get`.
    ///
    ///   mission jobs usage --since 7d --mission 3f2a…
    Usage {
        /// Only this mission's jobs (repeat for several).
        #[arg(long = "mission")]
        missions: Vec<Uuid>,
        /// Only jobs that ended since: a time (2026-11-01, 2026-11-01T09:00:00Z) or an age (90m,
        /// 24h, 7d).
        #[arg(long, value_name = "TIME", value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
    },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this mission's jobs (repeat for several).
    #[arg(long = "mission")]
    missions: Vec<Uuid>,
    /// Only jobs on this station, by name or id (repeat for several).
    #[arg(long = "station")]
    stations: Vec<String>,
    /// Every job charged to this project of yours, whoever started it; by name or id (repeat
    /// for several).
    #[arg(long = "project")]
    projects: Vec<String>,
    /// Only elements of this job array (repeat for several).
    #[arg(long = "array")]
    arrays: Vec<Uuid>,
    /// Only jobs in this state: queued, assigned, staging, running, uploading, completed,
    /// failed, stopped, lost (repeat for several).
    #[arg(long = "status")]
    statuses: Vec<JobStatus>,
    /// Only jobs with this label, as key=value (repeat: jobs with all of them).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label_arg)]
    labels: Vec<(String, String)>,
    /// Page, from 1.
    #[arg(long, default_value_t = 1)]
    page: u32,
    /// Jobs per page.
    #[arg(long, default_value_t = 25)]
    items: u32,
}

/// A job's number as Slurm's commands write it: `4711`, or `4700_3` for element 3 of the array
/// numbered 4700.
fn job_number(job: &Job) -> String {
    match (job.array_number, job.array_index) {
        (Some(array), Some(index)) => format!("{} ({array}_{index})", job.number),
        _ => job.number.to_string(),
    }
}

fn show(out: Output, job: &Job) {
    let mut fields = vec![
        ("job", job.job_id.to_string()),
        ("number", job_number(job)),
        ("status", job.status.to_string()),
        ("mission", job.mission_id.to_string()),
        ("project", job.project_id.to_string()),
        ("station", job.station_id.to_string()),
        ("landing zone", job.lz_id.map(|id| id.to_string()).unwrap_or_else(|| "-".into())),
        ("resources", format!("{} CPU, {} MB, {} GPU", job.cpu_count, job.memory_amount, job.gpu_count)),
        ("command", job.command.join(" ")),
    ];
    if let Some(gang) = &job.gang {
        let placed: Vec<String> = gang.lz_ids.iter().map(Uuid::to_string).collect();
        let on = if placed.is_empty() { String::new() } else { format!(": {}", placed.join(", ")) };
        fields.push(("nodes", format!("{} (each resources; launch {}){on}", gang.nodes, gang.launch.as_str())));
    }
    if !job.labels.is_empty() {
        fields.push(("labels", labels_text(&job.labels)));
    }
    if !job.gpu_indices.is_empty() {
        let indices: Vec<String> = job.gpu_indices.iter().map(u32::to_string).collect();
        fields.push(("gpus", indices.join(",")));
    }
    if let Some(minutes) = job.time_limit {
        fields.push(("time limit", format!("{minutes} min")));
    }
    if let Some(signal) = &job.signal {
        fields.push(("signal", format!("{} {} s before its end", signal.signal, signal.seconds)));
    }
    if job.requeue {
        fields.push(("requeue", format!("yes (attempt {})", job.attempt)));
    }
    if let Some(image) = &job.image {
        fields.push(("image", format!("{} ({})", image.digest, image.image_id)));
    }
    match (job.log_truncated, job.log_cap) {
        (true, _) => {
            fields.push(("logs", "truncated: past the log cap, only the last quarter-cap bytes were kept".into()))
        }
        (false, Some(cap)) => fields.push(("log cap", Size(cap).to_string())),
        (false, None) => {}
    }
    for (name, jobs) in [("after ok", &job.after_ok), ("after any", &job.after_any)] {
        if !jobs.is_empty() {
            fields.push((name, jobs.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ")));
        }
    }
    if let Some(policy) = &job.retry {
        fields.push(("attempt", format!("{} of {}", job.attempt, policy.max_attempts)));
        fields.push(("retry", retry_text(policy)));
    }
    if let Some(of) = job.rerun_of {
        fields.push(("rerun of", of.to_string()));
    }
    if let Some(pending) = &job.pending_reason {
        fields.push(("waiting", format!("{} ({})", pending.detail, pending.kind.as_str())));
    }
    if let Some(position) = job.position {
        fields.push(("position", format!("{} on its station, {} of yours there", position.station, position.own)));
    }
    if let Some(usage) = &job.usage {
        fields.push(("usage", usage_text(usage, job.memory_amount)));
    }
    if let Some(code) = job.exit_code {
        fields.push(("exit code", code.to_string()));
    }
    if let Some(reason) = &job.reason {
        fields.push(("reason", reason.clone()));
    }
    if let Some(limits) = &job.limits {
        fields.push(("limits", limits.clone()));
    }
    for t in &job.history {
        let detail = t.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
        fields.push(("history", format!("{} {}{detail}", t.at.format("%Y-%m-%d %H:%M:%S%.3f"), t.status)));
    }
    out.record(job, fields);
}

/// Waits for a job to end (on the event stream) with a live status line on a terminal; answers
/// the final job.
/// The id of the job `named`: as given, or looked up by its number.
async fn job_id(client: &Client, named: JobRef) -> anyhow::Result<Uuid> {
    Ok(match named {
        JobRef::Id(id) => id,
        JobRef::Number(_) => client.get_job(named).await?.job_id,
    })
}

async fn wait(client: &Client, job_id: Uuid) -> anyhow::Result<Job> {
    let bar = crate::progress::status_line();
    let job = client
        .wait_for_job_with(job_id, |status| {
            if let Some(bar) = &bar {
                bar.set_message(format!("job {job_id}: {status}"));
            }
        })
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(job)
}

/// Waits until a session's app answers (its URL is known) or the job ends, showing its status.
async fn wait_for_session(client: &Client, job_id: Uuid) -> anyhow::Result<Job> {
    let bar = crate::progress::status_line();
    let job = loop {
        let job = client.get_job(job_id).await?;
        if job.status.is_final() || job.session.as_ref().is_some_and(|session| session.url.is_some()) {
            break job;
        }
        if let Some(bar) = &bar {
            let doing =
                if job.status == JobStatus::Running { "waiting for its app to answer" } else { job.status.as_str() };
            bar.set_message(format!("session {job_id}: {doing}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(job)
}

/// Opens `url` in the desktop's browser, saying so when none could be started.
fn open_in_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    let opened = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = opened {
        eprintln!("could not open a browser ({opener}: {e}); open {url} yourself");
    }
}

/// Prints a job's stdout and stderr to ours as they are written, until it ends.
pub(crate) async fn follow(client: &Client, job_id: Uuid, node: u32) -> anyhow::Result<()> {
    let out = client.follow_node_logs(job_id, node, LogStream::Stdout, |s| {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(s.as_bytes());
        let _ = o.flush();
    });
    let err = client.follow_node_logs(job_id, node, LogStream::Stderr, |s| {
        let _ = std::io::stderr().write_all(s.as_bytes());
    });
    let (out, err) = tokio::join!(out, err);
    out?;
    err?;
    Ok(())
}

/// A job's usage in one line: `wall 12.3 s, CPU 10.1 s (82% efficient), peak memory 230 MB of
/// 1024 MB, 41.2 Wh (measured: GPUs 30.1 Wh by their energy counters), 19.6 g CO2e, EUR 0.0100`.
fn usage_text(usage: &mission_api::JobUsage, memory_mb: u64) -> String {
    let mut text = format!("wall {:.1} s", usage.wall_time);
    if let Some(cpu) = usage.cpu_time {
        text.push_str(&format!(", CPU {cpu:.1} s"));
        if let Some(efficiency) = usage.cpu_efficiency {
            text.push_str(&format!(" ({:.0}% efficient)", efficiency * 100.0));
        }
    }
    if let Some(peak) = usage.peak_memory {
        text.push_str(&format!(", peak memory {peak} MB of {memory_mb} MB"));
    }
    if let (Some(kwh), Some(grams)) = (usage.energy_kwh, usage.co2e_g) {
        text.push_str(&format!(", {:.1} Wh ({}), {grams:.1} g CO2e", kwh * 1000.0, energy_sources(usage)));
    }
    if let Some(cost) = &usage.cost {
        text.push_str(&format!(", {} {:.4}", cost.currency, cost.amount));
    }
    text
}

/// Which parts of a job's energy were measured, and how: `measured: GPUs 30.1 Wh by their
/// energy counters`, or `modelled`.
fn energy_sources(usage: &mission_api::JobUsage) -> String {
    use mission_api::EnergySource;
    let Some(parts) = &usage.energy_parts else { return "modelled".into() };
    let measured: Vec<String> = [("CPUs", &parts.cpu), ("memory", &parts.memory), ("GPUs", &parts.gpu)]
        .into_iter()
        .filter_map(|(name, part)| part.filter(|p| p.source.is_measured()).map(|p| (name, p)))
        .map(|(name, part)| {
            let how = match part.source {
                EnergySource::Rapl => "by RAPL",
                EnergySource::GpuCounter => "by their energy counters",
                EnergySource::GpuPowerSamples => "by power samples",
                EnergySource::Slurm => "by Slurm's accounting",
                EnergySource::Model => "by the model",
            };
            format!("{name} {:.1} Wh {how}", part.wh)
        })
        .collect();
    if measured.is_empty() { "modelled".into() } else { format!("measured: {}", measured.join(", ")) }
}

/// A point in time from an RFC 3339 time, a date (midnight UTC), or an age before now (`90m`,
/// `24h`, `7d`).
pub(super) fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.to_utc());
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(date.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    let age = minutes(text).and_then(|minutes| chrono::Duration::try_minutes(minutes.into())).ok_or_else(|| {
        format!("expected a time (2026-11-01, 2026-11-01T09:00:00Z) or an age (90m, 24h, 7d), got {text:?}")
    })?;
    Ok(chrono::Utc::now() - age)
}

/// Minutes from `90`, `90m`, `2h` or `1d`.
fn minutes(text: &str) -> Option<u32> {
    let text = text.trim();
    let (number, minutes_per) = match text.char_indices().last() {
        Some((i, 'm')) => (&text[..i], 1),
        Some((i, 'h')) => (&text[..i], 60),
        Some((i, 'd')) => (&text[..i], 24 * 60),
        _ => (text, 1),
    };
    number.parse::<u32>().ok()?.checked_mul(minutes_per)
}

/// A time limit in minutes from `90`, `90m`, `2h` or `1d`.
/// `--launch`: how a gang starts its command.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LaunchArg {
    /// On every node.
    Each,
    /// On the first node only.
    First,
}

impl From<LaunchArg> for mission_api::Launch {
    fn from(arg: LaunchArg) -> Self {
        match arg {
            LaunchArg::Each => Self::Each,
            LaunchArg::First => Self::First,
        }
    }
}

/// `--signal`, checked as the server will.
fn parse_signal(text: &str) -> Result<String, String> {
    mission_api::WarningSignal::parse(text).map(|signal| signal.to_string())
}

fn parse_time_limit(text: &str) -> Result<u32, String> {
    let minutes = minutes(text).ok_or_else(|| format!("expected minutes (90), or 90m, 2h, 1d; got {text:?}"))?;
    if !(1..=mission_api::MAX_TIME_LIMIT).contains(&minutes) {
        return Err(format!("a time limit is 1 minute to {} days", mission_api::MAX_TIME_LIMIT / (24 * 60)));
    }
    Ok(minutes)
}

/// Exit with an error unless the job completed.
fn check_completed(job: &Job) -> anyhow::Result<()> {
    match job.status {
        JobStatus::Completed => Ok(()),
        status => {
            bail!("job {} {status}{}", job.job_id, job.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())
        }
    }
}

/// A job array's progress in words.
fn progress_text(array: &JobArray) -> String {
    format!(
        "{} jobs: {} completed, {} failed, {} stopped, {} running, {} queued",
        array.size, array.completed, array.failed, array.stopped, array.running, array.queued
    )
}

/// Waits until every element of a job array has ended, showing its progress on stderr (unless
/// the output is JSON); answers the array as it ended.
async fn wait_for_array(client: &Client, mut array: JobArray, out: Output) -> anyhow::Result<JobArray> {
    while array.queued + array.running > 0 {
        if !out.json {
            eprint!("\r{}", progress_text(&array));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        array = client.get_job_array(array.array_id).await?;
    }
    if !out.json {
        eprintln!();
    }
    Ok(array)
}

impl RunCommand {
    /// Starts the job, and waits or follows if asked.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        let then = Then { open: self.open, wait: self.wait, follow: self.follow };
        if let Some(ended) = self.again {
            let job = client.rerun_job(ended).await?;
            return then.started(&client, job, out).await;
        }
        let mission = self.mission.expect("clap requires a mission without --again");
        let station_id = resolve_station(&client, &self.station).await?;
        let lz_id = match &self.lz {
            Some(lz) => Some(resolve_lz(&client, station_id, lz).await?),
            None => None,
        };
        let request = RunJob {
            station_id,
            lz_id,
            cpu_count: self.cpus,
            memory_amount: self.memory,
            gpu_count: self.gpus,
            time_limit: self.time,
            nodes: self.nodes,
            launch: self.launch.map(LaunchArg::into),
            signal: self.signal.clone(),
            requeue: self.requeue.then_some(true),
            labels: self.labels.into_iter().collect(),
            log_cap: self.log_cap.map(|size| size.0),
            after_ok: self.after_ok,
            after_any: self.after_any,
            after_not_ok: self.after_not_ok,
            retry: self.retry.policy(),
            project_id: resolve_optional_project(&client, self.project.as_deref()).await?,
            image: self.image.clone(),
            session: self.session.map(|kind| mission_client::SessionRequest {
                kind,
                idle_timeout: self.idle_timeout,
                share_with_managers: self.share_with_managers,
            }),
        };
        if let Some(range) = self.array.clone() {
            let array =
                RunJobArray { run: request, range: Some(range), arguments: self.arguments, argument_sets: Vec::new() };
            let array = client.run_job_array(mission, &array).await?;
            if !self.wait {
                out.done(&array, &format!("started job array {} ({} jobs)", array.array_id, array.size));
                return Ok(());
            }
            let array = wait_for_array(&client, array, out).await?;
            out.done(&array, &progress_text(&array));
            if array.completed < array.size {
                bail!(
                    "job array {}: {} of {} jobs did not complete",
                    array.array_id,
                    array.size - array.completed,
                    array.size
                );
            }
            return Ok(());
        }
        let job = client.run_job(mission, &request).await?;
        then.started(&client, job, out).await
    }
}

/// What `mission run` does once the job started.
struct Then {
    open: bool,
    wait: bool,
    follow: bool,
}

impl Then {
    /// Waits, follows, or, for a session, shows where it is.
    async fn started(self, client: &Client, job: Job, out: Output) -> anyhow::Result<()> {
        if job.session.is_some() {
            let job = wait_for_session(client, job.job_id).await?;
            let url = job.session.as_ref().and_then(|session| session.url.clone());
            let Some(url) = url else {
                out.done(&job, &format!("session {} {}", job.job_id, job.status));
                return check_completed(&job);
            };
            if self.open {
                open_in_browser(&url);
            }
            out.done(
                &job,
                &format!("session {} is ready at {url}\n(stop it with `mission jobs stop {}`)", job.job_id, job.job_id),
            );
            return Ok(());
        }
        if !self.wait && !self.follow {
            out.done(&job, &format!("started job {} ({})", job.job_id, job.status));
            return Ok(());
        }
        if !out.json {
            eprintln!("started job {}", job.job_id);
        }
        let job = if self.follow {
            follow(client, job.job_id, 0).await?;
            client.get_job(job.job_id).await?
        } else {
            wait(client, job.job_id).await?
        };
        out.done(&job, &format!("job {} {}", job.job_id, job.status));
        check_completed(&job)
    }
}

impl JobsCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            JobsCommand::List(args) => {
                let mut station_ids = Vec::new();
                for s in &args.stations {
                    station_ids.push(resolve_station(&client, s).await?);
                }
                let mut project_ids = Vec::new();
                for project in &args.projects {
                    project_ids.push(resolve_project(&client, project).await?);
                }
                let options = ListJobs {
                    project_ids,
                    mission_ids: args.missions,
                    station_ids,
                    array_ids: args.arrays,
                    statuses: args.statuses,
                    labels: args.labels,
                    page: args.page,
                    items: args.items,
                };
                let page = client.list_jobs_page(&options).await?;
                let projects = project_names(&client).await?;
                let rows = page
                    .jobs
                    .iter()
                    .map(|j| {
                        vec![
                            j.job_id.to_string(),
                            j.status.to_string(),
                            j.mission_id.to_string(),
                            projects.name(j.project_id),
                            j.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                            labels_text(&j.labels),
                            j.pending_reason
                                .as_ref()
                                .map(|p| p.detail.clone())
                                .or_else(|| j.reason.clone())
                                .unwrap_or_default(),
                        ]
                    })
                    .collect();
                out.table(&page, &["JOB", "STATUS", "MISSION", "PROJECT", "CREATED", "LABELS", "REASON"], rows);
            }
            JobsCommand::Get { job } => show(out, &client.get_job(job).await?),
            JobsCommand::Logs { job, follow: true, node } => follow(&client, job_id(&client, job).await?, node).await?,
            JobsCommand::Logs { job, follow: false, node } => {
                let job = job_id(&client, job).await?;
                print!("{}", client.node_logs(job, node, LogStream::Stdout).await?);
                eprint!("{}", client.node_logs(job, node, LogStream::Stderr).await?);
            }
            JobsCommand::Label { job, changes } => {
                let job = client.get_job(job).await?;
                let mut labels = job.labels;
                apply_label_changes(&mut labels, changes)?;
                let job = client.set_job_labels(job.job_id, &labels).await?;
                out.done(&job, &format!("job {} labels: {}", job.job_id, labels_text(&job.labels)));
            }
            JobsCommand::Stop { job } => {
                let job = client.stop_job(job_id(&client, job).await?).await?;
                let message = match job.status {
                    JobStatus::Stopped => format!("stopped job {}", job.job_id),
                    _ => format!("stopping job {} (its landing zone kills it now)", job.job_id),
                };
                out.done(&job, &message);
            }
            JobsCommand::Shell(args) => {
                let code = super::shell::run(&client, args).await?;
                if code != 0 {
                    std::process::exit(code);
                }
            }
            JobsCommand::Array { array, stop } => {
                let array =
                    if stop { client.stop_job_array(array).await? } else { client.get_job_array(array).await? };
                out.record(
                    &array,
                    vec![
                        ("array", array.array_id.to_string()),
                        ("mission", array.mission_id.to_string()),
                        ("progress", progress_text(&array)),
                    ],
                );
            }
            JobsCommand::Rerun { job: Some(job), .. } => {
                let job = client.rerun_job(job_id(&client, job).await?).await?;
                out.done(
                    &job,
                    &format!("started job {} again as job {}", job.rerun_of.unwrap_or_default(), job.job_id),
                );
            }
            JobsCommand::Rerun { job: None, mission, .. } => {
                let Some(mission) = mission else { bail!("--failed needs --mission M") };
                let jobs = client.rerun_failed_jobs(mission).await?;
                let rows = jobs
                    .iter()
                    .map(|j| {
                        vec![
                            j.rerun_of.map(|id| id.to_string()).unwrap_or_default(),
                            j.job_id.to_string(),
                            j.status.to_string(),
                        ]
                    })
                    .collect();
                if jobs.is_empty() && !out.json {
                    eprintln!("no failed jobs of mission {mission} to rerun");
                }
                out.table(&jobs, &["FAILED JOB", "NEW JOB", "STATUS"], rows);
            }
            JobsCommand::Usage { missions, since } => {
                let summary = client.job_usage(&UsageQuery { mission_ids: missions, since }).await?;
                let efficiency =
                    summary.mean_cpu_efficiency.map_or_else(|| "-".to_owned(), |e| format!("{:.0}%", e * 100.0));
                out.record(
                    &summary,
                    vec![
                        ("jobs", summary.jobs.to_string()),
                        ("wall hours", format!("{:.2}", summary.wall_hours)),
                        ("CPU hours used", format!("{:.2}", summary.cpu_hours)),
                        ("CPU hours held", format!("{:.2}", summary.cpu_hours_held)),
                        ("mean CPU efficiency", efficiency),
                        ("memory over-requested (>2x)", format!("{} jobs", summary.over_requested_memory)),
                        ("energy", format!("{:.3} kWh", summary.energy_kwh)),
                        ("CO2e", format!("{:.1} g", summary.co2e_g)),
                    ],
                );
            }
            JobsCommand::Results { job } => {
                let files = client.list_job_results(job_id(&client, job).await?).await?;
                let rows =
                    files.iter().map(|f| vec![f.relative_path(), f.file_size.to_string(), f.sha256.clone()]).collect();
                out.table(&files, &["PATH", "SIZE", "SHA256"], rows);
            }
            JobsCommand::Download { job, output, dest, transfer } => {
                let dest = output.or(dest).unwrap_or_else(|| PathBuf::from("."));
                let job = job_id(&client, job).await?;
                let summary = client.download_job_results_with(job, &dest, &transfer.options("download")).await?;
                report_download(out, &summary, &dest);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use mission_api::{EnergyPart, EnergyParts, EnergySource, JobUsage};

    use super::{parse_since, parse_time_limit, usage_text};

    #[test]
    fn a_jobs_usage_says_which_parts_of_its_energy_were_measured() {
        let part = |wh, source| Some(EnergyPart { wh, source });
        let usage = |parts| JobUsage {
            wall_time: 60.0,
            energy_kwh: Some(0.0123),
            co2e_g: Some(5.8),
            energy_parts: parts,
            ..Default::default()
        };
        let modelled = EnergyParts { cpu: part(0.2, EnergySource::Model), ..Default::default() };
        assert_eq!(usage_text(&usage(Some(modelled)), 1000), "wall 60.0 s, 12.3 Wh (modelled), 5.8 g CO2e");
        let measured = EnergyParts {
            cpu: part(1.3, EnergySource::Rapl),
            memory: part(0.1, EnergySource::Model),
            gpu: part(10.0, EnergySource::GpuCounter),
        };
        assert_eq!(
            usage_text(&usage(Some(measured)), 1000),
            "wall 60.0 s, 12.3 Wh (measured: CPUs 1.3 Wh by RAPL, GPUs 10.0 Wh by their energy counters), 5.8 g CO2e"
        );
    }

    #[test]
    fn since_is_read_as_a_time_a_date_or_an_age() {
        let at = |text| parse_since(text).unwrap();
        assert_eq!(at("2026-11-01T09:00:00Z").to_rfc3339(), "2026-11-01T09:00:00+00:00");
        assert_eq!(at("2026-11-01").to_rfc3339(), "2026-11-01T00:00:00+00:00");
        let age = chrono::Utc::now() - at("7d");
        assert!((age.num_minutes() - 7 * 24 * 60).abs() <= 1, "{age}");
        assert!((chrono::Utc::now() - at("90m")).num_minutes() >= 89);
        for bad in ["yesterday", "7w", "-", ""] {
            assert!(parse_since(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn time_limits_are_read_in_minutes_hours_or_days() {
        assert_eq!(parse_time_limit("90"), Ok(90));
        assert_eq!(parse_time_limit("90m"), Ok(90));
        assert_eq!(parse_time_limit("2h"), Ok(120));
        assert_eq!(parse_time_limit("1d"), Ok(1440));
        for bad in ["0", "", "h", "1.5h", "-3", "366d", "99999999999d"] {
            assert!(parse_time_limit(bad).is_err(), "{bad:?}");
        }
    }
}
