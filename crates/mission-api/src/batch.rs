//! Batch jobs: a script submitted as it is, run in the directory it was submitted from, as the
//! user's own account on the host, writing its output to files there: Slurm's model, which the
//! `sbatch` of `mission` speaks (`POST /api/v1/jobs`).
//!
//! Such a job runs only on a landing zone that shares its directory with the host it was
//! submitted from (the paths a landing zone shares are in its [`Hello`](crate::lz::Hello)), and
//! only as the account its user is mapped to there: another uid could not write the user's files.
//! Its mission is its user's `batch jobs` mission in its project, made on first use; it stages no
//! files and returns no results (they are in the directory already).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::jobs::RunJob;

/// The largest batch script, in bytes. Slurm's default is 4 MiB, but a request body of the API
/// is at most 1 MiB, with the environment beside the script; scripts are a few kB.
pub const MAX_SCRIPT_BYTES: usize = 512 << 10;

/// The most bytes of a batch job's environment, names and values together.
pub const MAX_ENVIRONMENT_BYTES: usize = 256 << 10;

/// The longest job name, in bytes.
pub const MAX_JOB_NAME_BYTES: usize = 256;

/// What a batch job runs and where: [`Job::batch`](crate::Job::batch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobBatch {
    /// Its name (`sbatch -J`); the script's file name, or `wrap`, by default.
    pub name: String,
    /// The script's text, as it was when submitted.
    pub script: String,
    /// The script's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// The directory it runs in, absolute: where it was submitted from, or `sbatch -D`.
    pub workdir: String,
    /// Where its standard output goes, relative to `workdir` or absolute, with `sbatch -o`'s
    /// patterns (`%j`, `%x`, `%A`, `%a`, `%u`, `%N`, `%%`) filled in as it starts. Empty: into
    /// the job's logs, as any job's (what `srun` outside an allocation follows).
    pub stdout: String,
    /// Where its standard error goes, likewise; absent: with its standard output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Its environment (`sbatch --export`), to which the `SLURM_*` variables are added.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// The output files are appended to (`--open-mode=append`), not truncated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// A comment (`sbatch --comment`), shown back by `squeue` and `sacct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The name of the station it asked for, as `sbatch -p` named it (its partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// `sbatch` options the service does not honour itself but a Slurm gateway passes on to
    /// the real `sbatch` (`--mail-type=END`, `--constraint=avx512`, `--exclusive`): each one
    /// option as one argument, of those [`PASSED_ON`] names. Another landing zone ignores them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directives: Vec<String>,
}

/// The `sbatch` options a Slurm gateway passes on to the real `sbatch` as the user gave them:
/// requests of the cluster's scheduler that change neither who the job runs as, nor where its
/// files are, nor what the service placed it for (its resources, time, dependencies and array
/// are the service's own; `--uid`, `--gid`, `--chdir`, `--output` and `--export` are the
/// gateway's). The gateway's site options come after them, so a site's `--qos` wins.
pub const PASSED_ON: &[&str] = &[
    "acctg-freq",
    "begin",
    "constraint",
    "contiguous",
    "cores-per-socket",
    "cpu-freq",
    "deadline",
    "distribution",
    "exclude",
    "exclusive",
    "gpu-bind",
    "gpu-freq",
    "gres-flags",
    "hint",
    "licenses",
    "mail-type",
    "mail-user",
    "mem-bind",
    "mincpus",
    "nice",
    "no-requeue",
    "ntasks-per-core",
    "ntasks-per-socket",
    "overcommit",
    "oversubscribe",
    "prefer",
    "profile",
    "qos",
    "requeue",
    "reservation",
    "signal",
    "sockets-per-node",
    "spread-job",
    "switches",
    "thread-spec",
    "threads-per-core",
    "time-min",
    "tmp",
    "wckey",
];

/// The most directives one batch job passes on.
pub const MAX_DIRECTIVES: usize = 64;

/// Whether `directive` is one option of [`PASSED_ON`] (`--name` or `--name=value`), in one
/// argument without control characters.
pub fn is_passed_on(directive: &str) -> bool {
    let Some(option) = directive.strip_prefix("--") else { return false };
    let name = option.split_once('=').map_or(option, |(name, _)| name);
    PASSED_ON.contains(&name) && directive.len() <= 1024 && !directive.chars().any(char::is_control)
}

/// `POST /api/v1/jobs`: a batch job, with the resources, place and dependencies of a run request
/// ([`RunJob`]; its `session` and `image` are refused: a batch job runs on the host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitBatchJob {
    /// What it runs and where.
    pub batch: JobBatch,
    /// Its resources, station, project and dependencies.
    pub run: RunJob,
    /// Makes it a job array, as `sbatch --array` writes one ([`ArraySpec`]): `0-15`, `1,3,7-9`,
    /// `0-99:10`, with `%N` for at most N elements running at once. The answer is its first
    /// element, whose number is the array's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// Queues it held (`sbatch --hold`): it does not start until released
    /// (`POST /api/v1/jobs/{id}/release`, `scontrol release`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
}

/// A job array's indices and its throttle, as `sbatch --array` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// The indices, ascending, each once.
    pub indices: Vec<u32>,
    /// At most this many elements run at once (`%N`).
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// Reads `0-15`, `1,3,7-9`, `0-99:10` and any of them with `%N` after.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let invalid = || format!("invalid job array specification {spec:?}");
        let (ranges, max_running) = match spec.split_once('%') {
            Some((ranges, max)) => (ranges, Some(max.parse::<u32>().ok().filter(|m| *m > 0).ok_or_else(invalid)?)),
            None => (spec, None),
        };
        let mut indices = Vec::new();
        for range in ranges.split(',') {
            let (span, step) = match range.split_once(':') {
                Some((span, step)) => (span, step.parse::<u32>().ok().filter(|s| *s > 0).ok_or_else(invalid)?),
                None => (range, 1),
            };
            let (first, last) = span.split_once('-').unwrap_or((span, span));
            let first: u32 = first.parse().map_err(|_| invalid())?;
            let last: u32 = last.parse().map_err(|_| invalid())?;
            if last < first || last >= MAX_ARRAY_INDEX {
                return Err(invalid());
            }
            let count = (last - first) / step + 1;
            if indices.len() as u64 + u64::from(count) > u64::from(crate::jobs::MAX_ARRAY_SIZE) {
                return Err(format!("a job array has at most {} elements", crate::jobs::MAX_ARRAY_SIZE));
            }
            indices.extend((first..=last).step_by(step as usize));
        }
        indices.sort_unstable();
        indices.dedup();
        if indices.is_empty() {
            return Err(invalid());
        }
        Ok(Self { indices, max_running })
    }
}

/// One past the largest array index.
pub const MAX_ARRAY_INDEX: u32 = 1 << 31;

/// What `sbatch -o`'s patterns stand for in one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputNames<'a> {
    /// `%j`: the job's number.
    pub number: u64,
    /// `%x`: its name.
    pub name: &'a str,
    /// `%A`: its array's number (its own where it is none).
    pub array_number: Option<u64>,
    /// `%a`: its index in its array.
    pub array_index: Option<u32>,
    /// `%u`: its user's name.
    pub user: &'a str,
    /// `%N`: the short name of the host it runs on.
    pub node: &'a str,
}

/// The default `sbatch -o`: `slurm-%j.out`, or `slurm-%A_%a.out` for an array's element.
pub fn default_output(array: bool) -> &'static str {
    if array { "slurm-%A_%a.out" } else { "slurm-%j.out" }
}

/// `pattern` with Slurm's file-name patterns filled in: `%j` (and `%J`), `%x`, `%A`, `%a`, `%u`,
/// `%N`, `%%`; a number may pad a numeric one with zeros (`%4a`). Others stay as written.
pub fn fill_output_pattern(pattern: &str, names: &OutputNames<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let width: usize = width.parse().unwrap_or(0).min(10);
        let number = |n: u64| format!("{n:0width$}");
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j' | 'J') => out.push_str(&number(names.number)),
            Some('A') => out.push_str(&number(names.array_number.unwrap_or(names.number))),
            Some('a') => out.push_str(&names.array_index.map_or_else(|| "4294967294".to_owned(), |i| number(i.into()))),
            Some('x') => out.push_str(names.name),
            Some('u') => out.push_str(names.user),
            Some('N') => out.push_str(names.node),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_specifications_are_read_as_sbatch_reads_them() {
        let spec = |s: &str| ArraySpec::parse(s).map(|a| (a.indices, a.max_running));
        assert_eq!(spec("0-3"), Ok((vec![0, 1, 2, 3], None)));
        assert_eq!(spec("1,3,7-9"), Ok((vec![1, 3, 7, 8, 9], None)));
        assert_eq!(spec("0-9:4%2"), Ok((vec![0, 4, 8], Some(2))));
        assert_eq!(spec("5,5,1"), Ok((vec![1, 5], None)));
        for bad in ["", "x", "3-1", "1-5:0", "0-3%0", "0-3%", "-1", "1-"] {
            assert!(ArraySpec::parse(bad).is_err(), "{bad}");
        }
        assert!(ArraySpec::parse("0-2000000").is_err(), "too many");
    }

    #[test]
    fn output_patterns_are_filled_as_slurm_fills_them() {
        let names = OutputNames {
            number: 4711,
            name: "fit",
            array_number: Some(4700),
            array_index: Some(3),
            user: "ada",
            node: "n1",
        };
        assert_eq!(fill_output_pattern("slurm-%j.out", &names), "slurm-4711.out");
        assert_eq!(fill_output_pattern("%x-%A_%a.%u.%N.log", &names), "fit-4700_3.ada.n1.log");
        assert_eq!(fill_output_pattern("100%%-%4a-%q", &names), "100%-0003-%q");
        let single = OutputNames { array_number: None, array_index: None, ..names };
        assert_eq!(fill_output_pattern("%A", &single), "4711");
        assert_eq!(fill_output_pattern("trailing%", &single), "trailing%");
    }
}
