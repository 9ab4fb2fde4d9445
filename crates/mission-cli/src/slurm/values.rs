//! Slurm's ways of writing values: time limits and durations, memory sizes, job states, exit
//! codes, timestamps and job ids.

use chrono::{DateTime, Local, Utc};
use mission_client::{Job, JobStatus};

/// A time limit as `sbatch -t` takes it, in whole minutes (seconds round up); `None` for
/// `INFINITE`/`UNLIMITED`. Formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`.
pub fn parse_time_limit(text: &str) -> Result<Option<u32>, ()> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("infinite") || text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let number = |s: &str| -> Result<u64, ()> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        s.parse().map_err(|_| ())
    };
    let (days, rest) = match text.split_once('-') {
        Some((days, rest)) => (number(days)?, rest),
        None => (0, text),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let seconds = match (text.contains('-'), parts.as_slice()) {
        (false, [m]) => number(m)? * 60,
        (false, [m, s]) => number(m)? * 60 + number(s)?,
        (false, [h, m, s]) => number(h)? * 3600 + number(m)? * 60 + number(s)?,
        (true, [h]) => number(h)? * 3600,
        (true, [h, m]) => number(h)? * 3600 + number(m)? * 60,
        (true, [h, m, s]) => number(h)? * 3600 + number(m)? * 60 + number(s)?,
        _ => return Err(()),
    } + days * 86_400;
    let minutes = seconds.div_ceil(60);
    if minutes == 0 {
        // Slurm takes 0 as no limit.
        return Ok(None);
    }
    u32::try_from(minutes).map(Some).map_err(|_| ())
}

/// Megabytes as `sbatch --mem` takes them: a number with an optional unit `K`, `M`, `G` or `T`
/// (megabytes without one).
pub fn parse_megabytes(text: &str) -> Result<u64, ()> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| ())?;
    let mb = match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" => Some(n),
        "K" | "KB" => Some(n.div_ceil(1024)),
        "G" | "GB" => n.checked_mul(1024),
        "T" | "TB" => n.checked_mul(1024 * 1024),
        _ => None,
    };
    mb.ok_or(())
}

/// A duration as Slurm prints one: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn duration(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    match (days, h) {
        (0, 0) => format!("{m}:{s:02}"),
        (0, h) => format!("{h}:{m:02}:{s:02}"),
        (d, h) => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// A duration as `sacct` prints one: `HH:MM:SS`, or `D-HH:MM:SS`.
pub fn elapsed(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    if days > 0 { format!("{days}-{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}:{s:02}") }
}

/// A time limit as `squeue` prints it.
pub fn time_limit(minutes: Option<u32>) -> String {
    minutes.map_or_else(|| "UNLIMITED".to_owned(), |m| duration(u64::from(m) * 60))
}

/// A moment as Slurm prints one: local time, `YYYY-MM-DDTHH:MM:SS`.
pub fn timestamp(at: Option<DateTime<Utc>>, missing: &str) -> String {
    at.map_or_else(|| missing.to_owned(), |at| at.with_timezone(&Local).format("%Y-%m-%dT%H:%M:%S").to_string())
}

/// Megabytes as `squeue %m` and `sacct ReqMem` print them: `4G` when whole gigabytes.
pub fn megabytes(mb: u64) -> String {
    if mb > 0 && mb.is_multiple_of(1024) { format!("{}G", mb / 1024) } else { format!("{mb}M") }
}

/// A count as Slurm prints one in thousands (its `convert_num_unit2` with divisor 1000, as sacct
/// prints ConsumedEnergy): `0`, `950`, `3K`, `3.60K`, `1.23M`.
pub fn thousands(n: u64) -> String {
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < 5 {
        value /= 1000.0;
        unit += 1;
    }
    let suffix = ["", "K", "M", "G", "T", "P"][unit];
    if value.fract() == 0.0 { format!("{}{suffix}", value as u64) } else { format!("{value:.2}{suffix}") }
}

/// A job's state in Slurm's words.
pub fn state(job: &Job) -> &'static str {
    let reason = job.reason.as_deref().unwrap_or_default();
    match job.status {
        JobStatus::Queued => "PENDING",
        JobStatus::Assigned | JobStatus::Staging => "CONFIGURING",
        JobStatus::Running => "RUNNING",
        JobStatus::Uploading => "COMPLETING",
        JobStatus::Completed => "COMPLETED",
        JobStatus::Failed if reason == mission_api::TIME_LIMIT_REASON => "TIMEOUT",
        JobStatus::Failed if reason == mission_api::OUT_OF_MEMORY_REASON => "OUT_OF_MEMORY",
        JobStatus::Failed => "FAILED",
        JobStatus::Stopped => "CANCELLED",
        JobStatus::Lost => "NODE_FAIL",
    }
}

/// A state's short form, as `squeue %t` prints it.
pub fn short_state(state: &str) -> &'static str {
    match state {
        "PENDING" => "PD",
        "CONFIGURING" => "CF",
        "RUNNING" => "R",
        "COMPLETING" => "CG",
        "COMPLETED" => "CD",
        "TIMEOUT" => "TO",
        "OUT_OF_MEMORY" => "OOM",
        "FAILED" => "F",
        "CANCELLED" => "CA",
        "NODE_FAIL" => "NF",
        _ => "??",
    }
}

/// The states `-t/--states` may name, long or short, as the long names.
pub fn state_named(name: &str) -> Option<&'static str> {
    const STATES: [&str; 10] = [
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "COMPLETED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "FAILED",
        "CANCELLED",
        "NODE_FAIL",
    ];
    let name = name.to_ascii_uppercase();
    STATES.into_iter().find(|s| *s == name || short_state(s) == name || (name == "CA" && *s == "CANCELLED"))
}

/// How many nodes a job holds: a gang's count, else one.
pub fn node_count(job: &Job) -> u32 {
    job.gang.as_ref().map_or(1, |gang| gang.nodes)
}

/// A job's exit code as Slurm prints it: `code:signal`.
pub fn exit_code(job: &Job) -> String {
    let signal = job
        .reason
        .as_deref()
        .and_then(|r| r.strip_prefix(mission_api::KILLED_BY_SIGNAL_REASON))
        .and_then(|rest| rest.trim().parse::<i32>().ok());
    match (job.exit_code, signal, job.status) {
        (_, Some(signal), _) => format!("0:{signal}"),
        (Some(code), None, _) => format!("{code}:0"),
        (None, None, JobStatus::Stopped) => "0:15".to_owned(),
        (None, None, JobStatus::Failed) if job.reason.as_deref() == Some(mission_api::TIME_LIMIT_REASON) => {
            "0:15".to_owned()
        }
        (None, None, _) => "0:0".to_owned(),
    }
}

/// A job's id as Slurm prints it: `4711`, or `4700_3` for an array's element.
pub fn job_id(job: &Job) -> String {
    match (job.array_number, job.array_index) {
        (Some(array), Some(index)) => format!("{array}_{index}"),
        _ => job.number.to_string(),
    }
}

/// A job id as the commands take one: `4711`, `4700_3`, or `4700` for every element of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSpec {
    /// A job, or every element of the array it numbers.
    Number(u64),
    /// One element of an array.
    Element(u64, u32),
}

impl JobSpec {
    /// Reads `4711`, `4700_3` (and `4711.batch`, as the job).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.split('.').next().unwrap_or_default();
        match text.split_once('_') {
            Some((array, index)) => Some(Self::Element(array.parse().ok()?, index.parse().ok()?)),
            None => text.parse().ok().map(Self::Number),
        }
    }

    /// The job number it names (an array's, for an element).
    pub fn number(self) -> u64 {
        match self {
            Self::Number(n) | Self::Element(n, _) => n,
        }
    }

    /// Whether `job` is the one this names.
    pub fn matches(self, job: &Job) -> bool {
        match self {
            Self::Number(n) => job.number == n || job.array_number == Some(n),
            Self::Element(array, index) => job.array_number == Some(array) && job.array_index == Some(index),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slurm_time_format_is_read() {
        for (text, minutes) in [
            ("10", Some(10)),
            ("10:30", Some(11)),
            ("1:00:00", Some(60)),
            ("2-0", Some(2880)),
            ("1-2:30", Some(1590)),
            ("1-0:0:1", Some(1441)),
            ("UNLIMITED", None),
            ("infinite", None),
            ("0", None),
        ] {
            assert_eq!(parse_time_limit(text), Ok(minutes), "{text}");
        }
        for bad in ["abc", "", "1:2:3:4", "-5", "1-", "1.5", "1-2:3:4:5"] {
            assert_eq!(parse_time_limit(bad), Err(()), "{bad}");
        }
    }

    #[test]
    fn sizes_durations_and_ids() {
        assert_eq!(parse_megabytes("100"), Ok(100));
        assert_eq!(parse_megabytes("4G"), Ok(4096));
        assert_eq!(parse_megabytes("2048K"), Ok(2));
        assert_eq!(parse_megabytes("1t"), Ok(1 << 20));
        assert_eq!(parse_megabytes("lots"), Err(()));
        assert_eq!(parse_megabytes("5X"), Err(()));
        assert_eq!(duration(11), "0:11");
        assert_eq!(duration(3725), "1:02:05");
        assert_eq!(duration(90_061), "1-01:01:01");
        assert_eq!(elapsed(61), "00:01:01");
        assert_eq!(megabytes(4096), "4G");
        assert_eq!(megabytes(1000), "1000M");
        // ConsumedEnergy, as sacct's convert_num_unit2(…, 1000, …) prints joules.
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(950), "950");
        assert_eq!(thousands(3000), "3K");
        assert_eq!(thousands(3600), "3.60K");
        assert_eq!(thousands(1_234_567), "1.23M");
        assert_eq!(JobSpec::parse("4700_3"), Some(JobSpec::Element(4700, 3)));
        assert_eq!(JobSpec::parse("4711.batch"), Some(JobSpec::Number(4711)));
        assert_eq!(JobSpec::parse("x"), None);
        assert_eq!(state_named("pd"), Some("PENDING"));
        assert_eq!(state_named("cancelled"), Some("CANCELLED"));
    }
}
