//! Slurm's commands, spoken by `mission`: invoked as `sbatch`, `squeue`, `sacct`, `scancel`,
//! `scontrol`, `srun`, `sinfo` or `sacctmgr` (links to it, which `mission slurm-commands install DIR`
//! makes, as busybox does), it reads their command lines and prints what they print, talking to
//! the service with the session `mission login` saved. Workflow tools that drive a cluster
//! through these commands drive the service unchanged.
//!
//! The service's words in Slurm's: a station is a partition, a landing zone a node, a project
//! an account, a job's number its job id (`4700_3` for an element of an array).

mod options;
mod sacct;
mod sacctmgr;
mod sbatch;
mod scancel;
mod scontrol;
mod sinfo;
mod site;
mod squeue;
mod srun;
mod values;

use std::path::Path;
use std::process::ExitCode;

use mission_client::{Job, JobStatus};
pub use site::{Needs, Site};

/// The names `mission` answers to as a Slurm command.
pub const COMMANDS: [&str; 8] = ["sbatch", "squeue", "sacct", "scancel", "scontrol", "srun", "sinfo", "sacctmgr"];

/// The Slurm command `mission` was invoked as, if it was invoked as one.
pub fn invoked_as() -> Option<&'static str> {
    let argv0 = std::env::args_os().next()?;
    let name = Path::new(&argv0).file_name()?.to_str()?.to_owned();
    COMMANDS.into_iter().find(|command| *command == name)
}

/// Runs the Slurm command `name` with the rest of the command line; its exit code.
pub fn main(name: &'static str) -> ExitCode {
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let code = runtime.block_on(async {
        match name {
            "sbatch" => sbatch::run(&args).await,
            "squeue" => squeue::run(&args).await,
            "sacct" => sacct::run(&args).await,
            "scancel" => scancel::run(&args).await,
            "scontrol" => scontrol::run(&args).await,
            "srun" => srun::run(&args).await,
            "sinfo" => sinfo::run(&args).await,
            "sacctmgr" => sacctmgr::run(&args).await,
            _ => unreachable!("only the names in COMMANDS"),
        }
    });
    ExitCode::from(code)
}

/// Makes `dir/NAME` a link to this executable (or to `target`, as written: `../mission` in the
/// release archive) for every Slurm command it speaks; answers the links made. An existing file
/// of that name is left alone unless `force`.
pub fn install(dir: &Path, target: Option<&Path>, force: bool) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let exe = match target {
        Some(target) => target.to_owned(),
        None => std::env::current_exe()?,
    };
    std::fs::create_dir_all(dir)?;
    let mut made = Vec::new();
    for name in COMMANDS {
        let link = dir.join(name);
        if link.symlink_metadata().is_ok() {
            if !force {
                anyhow::bail!("{} exists; give --force to replace it", link.display());
            }
            std::fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink(&exe, &link)?;
        made.push(link);
    }
    Ok(made)
}

/// A failure in Slurm's words: what the command prints (`sbatch: error: …`) and its exit code.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
    /// Printed as it is, not after `COMMAND: error: `.
    pub plain: bool,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self { message: message.into(), code, plain: false }
    }

    /// A failure printed in words of its own (`slurm_load_jobs error: …`).
    pub fn plain(code: u8, message: impl Into<String>) -> Self {
        Self { message: message.into(), code, plain: true }
    }
}

impl From<mission_client::Error> for Failure {
    fn from(e: mission_client::Error) -> Self {
        Self::new(1, e.to_string())
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::new(1, e.to_string())
    }
}

/// Prints `failure` as `command` prints its errors; its exit code.
pub fn report(command: &str, result: Result<(), Failure>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(failure) => {
            if failure.plain {
                eprintln!("{}", failure.message);
            } else if !failure.message.is_empty() {
                eprintln!("{command}: error: {}", failure.message);
            }
            failure.code
        }
    }
}

/// Reads a query command's line (`squeue`, `sacct`, …): an option it does not know is refused,
/// as Slurm's query commands refuse one.
pub fn read_query(command: &str, args: &[String], table: &'static [options::Spec]) -> Result<options::Parsed, Failure> {
    let try_help = format!("Try \"{command} --help\" for more information");
    let given = options::parse(args, table, false).map_err(|e| Failure::new(1, format!("{e}\n{try_help}")))?;
    match given.unknown() {
        Some(unknown) => Err(Failure::plain(1, format!("{command}: {unknown}\n{try_help}"))),
        None => Ok(given),
    }
}

/// What `--version` prints: the Slurm release these commands speak, and ours.
pub fn print_version() {
    println!("slurm 22.05.8 (mission {})", env!("CARGO_PKG_VERSION"));
}

/// The jobs the selection options common to the query commands keep: names (`-n`/`--name`),
/// users (`-u`), `--me`, states, partitions (`-p`) and accounts (`-A`), each a comma list that
/// may be repeated.
pub struct Selection<'a> {
    names: Vec<&'a str>,
    users: Vec<&'a str>,
    me: bool,
    states: Vec<&'static str>,
    partitions: Vec<&'a str>,
    accounts: Vec<&'a str>,
}

impl<'a> Selection<'a> {
    /// The selection `given` makes, its states and accounts under the option names `state_option`
    /// and `account_option` (they differ between the commands).
    pub fn of(given: &'a options::Parsed, state_option: &str, account_option: &str) -> Self {
        let list = |option: &str| given.all(option).flat_map(|v| v.split(',')).collect::<Vec<&'a str>>();
        Self {
            names: list("name"),
            users: list("user"),
            me: given.has("me"),
            states: list(state_option).into_iter().filter_map(values::state_named).collect(),
            partitions: list("partition"),
            accounts: list(account_option),
        }
    }

    /// Whether any selection option was given.
    pub fn selects(&self) -> bool {
        self.me
            || !(self.names.is_empty()
                && self.users.is_empty()
                && self.states.is_empty()
                && self.partitions.is_empty()
                && self.accounts.is_empty())
    }

    /// Whether `job` is among those selected.
    pub fn keeps(&self, job: &Job, site: &Site) -> bool {
        let any = |list: &[&str], value: &str| list.is_empty() || list.contains(&value);
        any(&self.names, &job_name(job))
            && any(&self.users, &site.user_of(job))
            && (!self.me || job.user_id == site.user_id)
            && (self.states.is_empty() || self.states.contains(&values::state(job)))
            && any(&self.partitions, site.partition(job.station_id))
            && any(&self.accounts, site.account(job.project_id))
    }
}

/// A job's name: its batch name, or its mission's command.
pub fn job_name(job: &Job) -> String {
    match &job.batch {
        Some(batch) => batch.name.clone(),
        None => job.command.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_owned()).unwrap_or_default(),
    }
}

/// The statuses of jobs that have not ended.
pub const UNFINISHED: [JobStatus; 5] =
    [JobStatus::Queued, JobStatus::Assigned, JobStatus::Staging, JobStatus::Running, JobStatus::Uploading];
