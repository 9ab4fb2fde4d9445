//! `sacct`: the accounting of jobs, ended or not: Slurm's default columns, a `-o` list of named
//! fields, parsable with `-p`/`-P`, or `--json`; a batch job's `.batch` step under it unless
//! `-X`.

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone, Utc};
use mission_client::Job;

use super::options::{Spec, Takes, flag, ignored, value};
use super::squeue::{reason, seconds_run};
use super::values::{self, JobSpec};
use super::{Failure, Selection, Site, job_name, print_version, read_query, report};

const OPTIONS: &[Spec] = &[
    value("jobs", Some('j')),
    flag("allocations", Some('X')),
    flag("noheader", Some('n')),
    flag("parsable2", Some('P')),
    flag("parsable", Some('p')),
    value("format", Some('o')),
    value("starttime", Some('S')),
    value("endtime", Some('E')),
    value("name", None),
    value("user", Some('u')),
    value("state", Some('s')),
    value("partition", Some('r')),
    value("accounts", Some('A')),
    flag("allusers", Some('a')),
    flag("brief", Some('b')),
    flag("long", Some('l')),
    flag("json", None),
    flag("help", Some('h')),
    flag("version", Some('V')),
    flag("verbose", Some('v')),
    flag("duplicates", Some('D')),
    flag("array", None),
    flag("noconvert", None),
    ignored("clusters", Some('M'), Takes::Value),
    ignored("units", None, Takes::Value),
    ignored("delimiter", None, Takes::Value),
    ignored("truncate", Some('T'), Takes::Nothing),
    ignored("qos", Some('q'), Takes::Value),
];

const DEFAULT_FIELDS: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";
const BRIEF_FIELDS: &str = "JobID,State,ExitCode";
const LONG_FIELDS: &str = "JobID,JobIDRaw,JobName,Partition,Account,AllocCPUS,State,ExitCode,Elapsed,Start,End,Submit,NodeList,ReqMem,MaxRSS,CPUTime,TotalCPU,Comment";

pub async fn run(args: &[String]) -> u8 {
    report("sacct", account(args).await)
}

async fn account(args: &[String]) -> Result<(), Failure> {
    let given = read_query("sacct", args, OPTIONS)?;
    if given.has("version") {
        print_version();
        return Ok(());
    }
    let format = given.last("format").unwrap_or(if given.has("brief") {
        BRIEF_FIELDS
    } else if given.has("long") {
        LONG_FIELDS
    } else {
        DEFAULT_FIELDS
    });
    let fields: Vec<(String, usize)> = format
        .split(',')
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (name, width) = f.split_once('%').unwrap_or((f, ""));
            let known = FIELDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
            let (name, default) = known
                .map(|(n, w)| (*n, *w))
                .ok_or_else(|| Failure::new(1, format!("Invalid field requested: \"{name}\"")))?;
            Ok((name.to_owned(), width.parse().unwrap_or(default)))
        })
        .collect::<Result<_, Failure>>()?;
    let wanted: Vec<JobSpec> = given
        .all("jobs")
        .flat_map(|l| l.split(','))
        .map(|id| JobSpec::parse(id).ok_or_else(|| Failure::new(1, format!("Invalid job id: {id}"))))
        .collect::<Result<_, _>>()?;
    let since = match given.last("starttime") {
        Some(text) => Some(moment(text).ok_or_else(|| Failure::new(1, format!("Invalid time specification: {text}")))?),
        // Without jobs named, since midnight, as Slurm's default window.
        None if wanted.is_empty() => Local::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .and_then(|t| Local.from_local_datetime(&t).earliest())
            .map(|t| t.with_timezone(&Utc)),
        None => None,
    };
    let until = match given.last("endtime") {
        Some(text) => Some(moment(text).ok_or_else(|| Failure::new(1, format!("Invalid time specification: {text}")))?),
        None => None,
    };
    let site = Site::open().await?;
    let mut jobs = site.jobs(&[]).await?;
    jobs.retain(|job| wanted.is_empty() || wanted.iter().any(|w| w.matches(job)));
    // A job counts in a window if it was submitted before its end and had not ended before its start.
    jobs.retain(|job| since.is_none_or(|since| job.finished_at.is_none_or(|end| end >= since)));
    jobs.retain(|job| until.is_none_or(|until| job.created_at <= until));
    let selection = Selection::of(&given, "state", "accounts");
    jobs.retain(|job| selection.keeps(job, &site));
    jobs.sort_by_key(|job| job.number);

    if given.has("json") {
        let jobs: Vec<serde_json::Value> = jobs.iter().map(|job| json_of(job, &site)).collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs })).unwrap_or_default());
        return Ok(());
    }
    let (parsable, trailing) = match (given.has("parsable2"), given.has("parsable")) {
        (true, _) => (true, false),
        (false, true) => (true, true),
        _ => (false, false),
    };
    let mut out = String::new();
    let mut line = |values: Vec<String>| {
        if parsable {
            out.push_str(&values.join("|"));
            if trailing {
                out.push('|');
            }
        } else {
            for ((name, width), value) in fields.iter().zip(&values) {
                let value: String = value.chars().take(*width).collect();
                if name == "JobID" || name == "JobIDRaw" {
                    out.push_str(&format!("{value:<width$} "));
                } else {
                    out.push_str(&format!("{value:>width$} "));
                }
            }
        }
        out.push('\n');
    };
    if !given.has("noheader") {
        line(fields.iter().map(|(name, _)| name.clone()).collect());
        if !parsable {
            line(fields.iter().map(|(_, width)| "-".repeat(*width)).collect());
        }
    }
    for job in &jobs {
        let raw = given.has("noconvert");
        line(fields.iter().map(|(name, _)| field(name, job, &site, false, raw)).collect());
        if !given.has("allocations") && job.batch.is_some() && job.started_at.is_some() {
            line(fields.iter().map(|(name, _)| field(name, job, &site, true, raw)).collect());
        }
    }
    print!("{out}");
    Ok(())
}

/// Fields `-o` may name, with their default widths.
const FIELDS: &[(&str, usize)] = &[
    ("JobID", 12),
    ("JobIDRaw", 12),
    ("JobName", 10),
    ("State", 10),
    ("ExitCode", 8),
    ("Elapsed", 10),
    ("ElapsedRaw", 10),
    ("Start", 19),
    ("End", 19),
    ("Submit", 19),
    ("NodeList", 15),
    ("AllocCPUS", 10),
    ("NCPUS", 10),
    ("ReqCPUS", 8),
    ("AllocNodes", 10),
    ("NNodes", 8),
    ("ReqMem", 10),
    ("MaxRSS", 10),
    ("CPUTime", 10),
    ("CPUTimeRAW", 10),
    ("TotalCPU", 10),
    ("Account", 10),
    ("Partition", 10),
    ("Comment", 15),
    ("User", 9),
    ("Timelimit", 10),
    ("WorkDir", 20),
    ("Reason", 20),
    ("DerivedExitCode", 15),
    ("ConsumedEnergy", 14),
    ("ConsumedEnergyRaw", 17),
];

/// A field of `job` (of its `.batch` step, with `step`); `raw`: sizes and energy in bytes and
/// joules (`--noconvert`).
fn field(name: &str, job: &Job, site: &Site, step: bool, raw: bool) -> String {
    let elapsed = seconds_run(job);
    let usage = job.usage.as_ref();
    match name {
        "JobID" if step => format!("{}.batch", values::job_id(job)),
        "JobID" => values::job_id(job),
        "JobIDRaw" if step => format!("{}.batch", job.number),
        "JobIDRaw" => job.number.to_string(),
        "JobName" if step => "batch".to_owned(),
        "JobName" => job_name(job),
        "State" => values::state(job).to_owned(),
        "ExitCode" => values::exit_code(job),
        "DerivedExitCode" => "0:0".to_owned(),
        "Elapsed" => values::elapsed(elapsed),
        "ElapsedRaw" => elapsed.to_string(),
        "Start" => values::timestamp(job.started_at, "Unknown"),
        "End" => values::timestamp(job.finished_at, "Unknown"),
        "Submit" => values::timestamp(Some(job.created_at), "Unknown"),
        "NodeList" if job.lz_id.is_none() => "None assigned".to_owned(),
        "NodeList" => site.nodes_of(job),
        "AllocCPUS" | "NCPUS" | "ReqCPUS" => job.cpu_count.to_string(),
        "AllocNodes" | "NNodes" => values::node_count(job).to_string(),
        "ReqMem" => values::megabytes(job.memory_amount),
        "MaxRSS" if raw => usage.and_then(|u| u.peak_memory).map(|mb| (mb << 20).to_string()).unwrap_or_default(),
        "MaxRSS" => usage.and_then(|u| u.peak_memory).map(|mb| format!("{}K", mb * 1024)).unwrap_or_default(),
        "ConsumedEnergyRaw" => joules(job).to_string(),
        "ConsumedEnergy" if raw => joules(job).to_string(),
        "ConsumedEnergy" => values::thousands(joules(job)),
        "CPUTime" => values::elapsed(elapsed * u64::from(job.cpu_count)),
        "CPUTimeRAW" => (elapsed * u64::from(job.cpu_count)).to_string(),
        "TotalCPU" => usage.and_then(|u| u.cpu_time).map(total_cpu).unwrap_or_else(|| "00:00:00".to_owned()),
        "Account" => site.account(job.project_id).to_owned(),
        "Partition" if step => String::new(),
        "Partition" => site.partition(job.station_id).to_owned(),
        "Comment" => job.batch.as_ref().and_then(|b| b.comment.clone()).unwrap_or_default(),
        "User" if step => String::new(),
        "User" => site.user_of(job),
        "Timelimit" => job.time_limit.map_or_else(|| "UNLIMITED".to_owned(), |m| values::elapsed(u64::from(m) * 60)),
        "WorkDir" => job.batch.as_ref().map(|b| b.workdir.clone()).unwrap_or_default(),
        "Reason" => reason(job).to_owned(),
        _ => String::new(),
    }
}

/// The energy a job's hardware drew, in joules, as a cluster's energy plugin counts it: its
/// parts' sum, before the data centre's overhead (PUE); 0 before it ended.
fn joules(job: &Job) -> u64 {
    let parts = job.usage.as_ref().and_then(|u| u.energy_parts.as_ref());
    parts.map_or(0, |p| (p.watt_hours() * 3600.0).round() as u64)
}

/// CPU time as `TotalCPU` prints it: `MM:SS.mmm`, `HH:MM:SS` past an hour.
fn total_cpu(seconds: f64) -> String {
    if seconds >= 3600.0 {
        return values::elapsed(seconds as u64);
    }
    let whole = seconds as u64;
    format!("{:02}:{:02}.{:03}", whole / 60, whole % 60, ((seconds - whole as f64) * 1000.0) as u64)
}

/// A moment as `-S`/`-E` take one: `YYYY-MM-DD[THH:MM[:SS]]`, `now`, `now-N[minutes|hours|days]`.
fn moment(text: &str) -> Option<DateTime<Utc>> {
    if let Some(rest) = text.strip_prefix("now") {
        let rest = rest.strip_prefix('-').unwrap_or(rest);
        if rest.is_empty() {
            return Some(Utc::now());
        }
        let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: i64 = rest[..split].parse().ok()?;
        let seconds = match &rest[split..] {
            "" | "seconds" => n,
            "minutes" => n * 60,
            "hours" => n * 3600,
            "days" => n * 86_400,
            "weeks" => n * 604_800,
            _ => return None,
        };
        return Some(Utc::now() - chrono::Duration::seconds(seconds));
    }
    let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)))?;
    Local.from_local_datetime(&naive).earliest().map(|t| t.with_timezone(&Utc))
}

/// A job as `sacct --json` writes one (the fields tools read, in Slurm 22.05's shapes).
fn json_of(job: &Job, site: &Site) -> serde_json::Value {
    let (code, signal) = values::exit_code(job)
        .split_once(':')
        .map_or((0, 0), |(c, s)| (c.parse().unwrap_or(0), s.parse().unwrap_or(0)));
    let status = match values::state(job) {
        "COMPLETED" => "SUCCESS",
        "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" => "PENDING",
        _ if signal != 0 => "SIGNALED",
        _ => "FAILED",
    };
    serde_json::json!({
        "job_id": job.number,
        "name": job_name(job),
        "user": site.user_of(job),
        "account": site.account(job.project_id),
        "partition": site.partition(job.station_id),
        "comment": { "job": job.batch.as_ref().and_then(|b| b.comment.clone()).unwrap_or_default() },
        "array": { "job_id": job.array_number.unwrap_or(0), "task_id": job.array_index },
        "state": { "current": values::state(job), "reason": reason(job) },
        "exit_code": { "status": status, "return_code": code, "signal": { "signal_id": signal } },
        "nodes": site.node(job.lz_id),
        "working_directory": job.batch.as_ref().map(|b| b.workdir.clone()).unwrap_or_default(),
        "time": {
            "elapsed": seconds_run(job),
            "submission": job.created_at.timestamp(),
            "start": job.started_at.map_or(0, |t| t.timestamp()),
            "end": job.finished_at.map_or(0, |t| t.timestamp()),
            "limit": job.time_limit,
        },
        "required": { "CPUs": job.cpu_count, "memory": job.memory_amount },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_header_is_slurms() {
        let captured = include_str!("../../../../fixtures/slurm/sacct.txt");
        let mut lines = captured.lines();
        let header: String = super::DEFAULT_FIELDS
            .split(',')
            .map(|name| {
                let width = super::FIELDS.iter().find(|(n, _)| *n == name).unwrap().1;
                if name == "JobID" { format!("{name:<width$} ") } else { format!("{name:>width$} ") }
            })
            .collect();
        assert_eq!(lines.next().unwrap(), header);
        let rule: String = super::DEFAULT_FIELDS
            .split(',')
            .map(|name| format!("{} ", "-".repeat(super::FIELDS.iter().find(|(n, _)| *n == name).unwrap().1)))
            .collect();
        assert_eq!(lines.next().unwrap(), rule);
    }
}
