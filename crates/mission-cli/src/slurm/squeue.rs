//! `squeue`: the jobs that have not ended (or those `-t` names), in Slurm's default layout, a
//! `-o` format of `%` fields, an `-O` list of named fields, or `--json`.

use mission_client::Job;

use super::options::{Spec, Takes, flag, ignored, value};
use super::values::{self, JobSpec};
use super::{Failure, Selection, Site, UNFINISHED, job_name, print_version, read_query, report};

const OPTIONS: &[Spec] = &[
    value("account", Some('A')),
    flag("all", Some('a')),
    flag("array", Some('r')),
    value("format", Some('o')),
    value("Format", Some('O')),
    flag("help", None),
    flag("json", None),
    value("jobs", Some('j')),
    flag("long", Some('l')),
    flag("me", None),
    value("name", Some('n')),
    flag("noheader", Some('h')),
    value("partition", Some('p')),
    value("states", Some('t')),
    value("user", Some('u')),
    flag("verbose", Some('v')),
    flag("version", Some('V')),
    ignored("iterate", Some('i'), Takes::Value),
    ignored("clusters", Some('M'), Takes::Value),
    ignored("local", None, Takes::Nothing),
    ignored("sort", Some('S'), Takes::Value),
    ignored("start", None, Takes::Nothing),
    ignored("steps", Some('s'), Takes::Optional),
    ignored("qos", Some('q'), Takes::Value),
    ignored("reservation", Some('R'), Takes::Value),
    ignored("nodelist", Some('w'), Takes::Value),
];

/// Slurm's default format, and `-l`'s.
const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";

pub async fn run(args: &[String]) -> u8 {
    report("squeue", list(args).await)
}

async fn list(args: &[String]) -> Result<(), Failure> {
    let given = read_query("squeue", args, OPTIONS)?;
    if given.has("version") {
        print_version();
        return Ok(());
    }
    if given.has("help") {
        println!(
            "Usage: squeue [-A account] [--me] [-j jobs] [-n names] [-p partitions] [-t states] [-u users] [-h] [-o format | -O fields] [--json]"
        );
        return Ok(());
    }
    let states: Vec<&'static str> = match given.last("states") {
        Some(list) if list.eq_ignore_ascii_case("all") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| values::state_named(s).ok_or_else(|| Failure::new(1, format!("Invalid job state specified: {s}"))))
            .collect::<Result<_, _>>()?,
        None => vec!["PENDING", "CONFIGURING", "RUNNING", "COMPLETING"],
    };
    let wanted: Vec<JobSpec> = match given.last("jobs") {
        Some(list) => list
            .split(',')
            .map(|id| JobSpec::parse(id).ok_or_else(|| Failure::new(1, format!("Invalid job id: {id}"))))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let site = Site::open().await?;
    let final_too =
        states.is_empty() || states.iter().any(|s| !matches!(*s, "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING"));
    let mut jobs = site.jobs(if final_too { &[] } else { &UNFINISHED }).await?;
    jobs.retain(|job| states.is_empty() || states.contains(&values::state(job)));
    if !wanted.is_empty() {
        jobs.retain(|job| wanted.iter().any(|w| w.matches(job)));
        if jobs.is_empty() {
            return Err(Failure::plain(1, "slurm_load_jobs error: Invalid job id specified"));
        }
    }
    // Its states were applied above, with squeue's default of the unfinished ones.
    let selection = Selection::of(&given, "", "account");
    jobs.retain(|job| selection.keeps(job, &site));
    // Oldest first, as squeue sorts pending jobs by priority and then id.
    jobs.sort_by_key(|job| job.number);

    if given.has("json") {
        let jobs: Vec<serde_json::Value> = jobs.iter().map(|job| json_of(job, &site)).collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs })).unwrap_or_default());
        return Ok(());
    }
    let columns = match (given.last("Format"), given.last("format")) {
        (Some(named), _) => named_columns(named)?,
        (None, Some(format)) => percent_columns(format),
        (None, None) if given.has("long") => percent_columns(LONG_FORMAT),
        (None, None) => percent_columns(DEFAULT_FORMAT),
    };
    let mut out = String::new();
    if !given.has("noheader") {
        out.push_str(&render(&columns, |letter| header(letter).to_owned()));
        out.push('\n');
    }
    for job in &jobs {
        out.push_str(&render(&columns, |letter| field(letter, job, &site)));
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// One piece of a format: literal text, or a field with its width and side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Column {
    Text(String),
    Field { letter: char, width: Option<usize>, right: bool },
}

/// Columns of a `-o` format: `%[.]WIDTHletter` fields among literal text.
pub(super) fn percent_columns(format: &str) -> Vec<Column> {
    let mut columns = Vec::new();
    let mut text = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let right = chars.next_if_eq(&'.').is_some();
        let mut width = String::new();
        while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
            width.push(d);
        }
        match chars.next() {
            Some('%') => text.push('%'),
            Some(letter) => {
                if !text.is_empty() {
                    columns.push(Column::Text(std::mem::take(&mut text)));
                }
                columns.push(Column::Field { letter, width: width.parse().ok(), right });
            }
            None => text.push('%'),
        }
    }
    if !text.is_empty() {
        columns.push(Column::Text(text));
    }
    columns
}

/// Columns of an `-O` list: `name[:[.]width]`, comma-separated, each 20 wide by default and
/// followed by a space.
fn named_columns(list: &str) -> Result<Vec<Column>, Failure> {
    let mut columns = Vec::new();
    for item in list.split(',').filter(|i| !i.is_empty()) {
        let (name, size) = item.split_once(':').unwrap_or((item, ""));
        let right = size.starts_with('.');
        let width = size.trim_start_matches('.').parse().unwrap_or(20);
        let letter = NAMED
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, letter)| *letter)
            .ok_or_else(|| Failure::new(1, format!("Invalid job format specification: {name}")))?;
        columns.push(Column::Field { letter, width: Some(width), right });
        columns.push(Column::Text(" ".into()));
    }
    Ok(columns)
}

/// `-O` names and the `%` letters they are.
const NAMED: &[(&str, char)] = &[
    ("JobID", 'i'),
    ("JobArrayID", 'i'),
    ("Name", 'j'),
    ("State", 'T'),
    ("StateCompact", 't'),
    ("UserName", 'u'),
    ("TimeUsed", 'M'),
    ("TimeLimit", 'l'),
    ("NumNodes", 'D'),
    ("ReasonList", 'R'),
    ("NodeList", 'N'),
    ("NumCPUs", 'C'),
    ("MinMemory", 'm'),
    ("ArrayJobID", 'F'),
    ("ArrayTaskID", 'K'),
    ("Account", 'a'),
    ("Comment", 'k'),
    ("SubmitTime", 'V'),
    ("StartTime", 'S'),
    ("EndTime", 'e'),
    ("Reason", 'r'),
    ("Partition", 'P'),
    ("WorkDir", 'Z'),
    ("Command", 'o'),
    ("STDOUT", 'O'),
];

/// A line of `columns`, each field's value from `value`.
pub(super) fn render(columns: &[Column], value: impl Fn(char) -> String) -> String {
    let mut line = String::new();
    for column in columns {
        match column {
            Column::Text(text) => line.push_str(text),
            Column::Field { letter, width, right } => {
                let mut v = value(*letter);
                if let Some(width) = width {
                    if v.chars().count() > *width {
                        v = v.chars().take(*width).collect();
                    }
                    if *right {
                        line.push_str(&format!("{v:>width$}"));
                    } else {
                        line.push_str(&format!("{v:<width$}"));
                    }
                } else {
                    line.push_str(&v);
                }
            }
        }
    }
    line.trim_end().to_owned()
}

/// A field's header.
fn header(letter: char) -> &'static str {
    match letter {
        'i' | 'A' => "JOBID",
        'j' => "NAME",
        'T' => "STATE",
        't' => "ST",
        'u' => "USER",
        'M' => "TIME",
        'l' => "TIME_LIMIT",
        'D' => "NODES",
        'R' => "NODELIST(REASON)",
        'N' => "NODELIST",
        'C' => "CPUS",
        'm' => "MIN_MEMORY",
        'a' => "ACCOUNT",
        'F' => "ARRAY_JOB_ID",
        'K' => "ARRAY_TASK_ID",
        'k' => "COMMENT",
        'V' => "SUBMIT_TIME",
        'S' => "START_TIME",
        'e' => "END_TIME",
        'r' => "REASON",
        'P' => "PARTITION",
        'Z' => "WORK_DIR",
        'o' => "COMMAND",
        'O' => "STDOUT",
        _ => "",
    }
}

/// Why a job has not started, in Slurm's words.
pub(super) fn reason(job: &Job) -> &'static str {
    use mission_client::PendingKind;
    if job.status != mission_client::JobStatus::Queued {
        return "None";
    }
    match job.pending_reason.as_ref().map(|r| r.kind) {
        Some(PendingKind::Resources) => "Resources",
        Some(PendingKind::Priority) => "Priority",
        Some(PendingKind::Dependency) => "Dependency",
        Some(PendingKind::Quota) => "AssocGrpCPULimit",
        Some(PendingKind::NoLandingZone) => "ReqNodeNotAvail",
        Some(PendingKind::BatchSystem) => "Resources",
        Some(PendingKind::Backoff) => "BeginTime",
        Some(PendingKind::Held) => "JobHeldUser",
        None => "None",
    }
}

/// Seconds a job has run so far (or ran).
pub(super) fn seconds_run(job: &Job) -> u64 {
    let Some(started) = job.started_at else { return 0 };
    let ended = job.finished_at.unwrap_or_else(chrono::Utc::now);
    (ended - started).num_seconds().max(0) as u64
}

/// A field's value for `job`.
fn field(letter: char, job: &Job, site: &Site) -> String {
    let state = values::state(job);
    let node = site.nodes_of(job);
    match letter {
        'i' => values::job_id(job),
        'A' => job.number.to_string(),
        'j' => job_name(job),
        'T' => state.to_owned(),
        't' => values::short_state(state).to_owned(),
        'u' => site.user_of(job),
        'M' => values::duration(seconds_run(job)),
        'l' => values::time_limit(job.time_limit),
        'D' => values::node_count(job).to_string(),
        'R' if state == "PENDING" => format!("({})", reason(job)),
        'R' | 'N' => node,
        'C' => job.cpu_count.to_string(),
        'm' => values::megabytes(job.memory_amount),
        'a' => site.account(job.project_id).to_owned(),
        'F' => job.array_number.unwrap_or(job.number).to_string(),
        'K' => job.array_index.map_or_else(|| "N/A".to_owned(), |i| i.to_string()),
        'k' => job.batch.as_ref().and_then(|b| b.comment.clone()).unwrap_or_else(|| "(null)".to_owned()),
        'V' => values::timestamp(Some(job.created_at), "N/A"),
        'S' => values::timestamp(job.started_at, "N/A"),
        'e' => values::timestamp(job.finished_at, "NONE"),
        'r' => reason(job).to_owned(),
        'P' => site.partition(job.station_id).to_owned(),
        'Z' => job.batch.as_ref().map(|b| b.workdir.clone()).unwrap_or_default(),
        'o' => job.command.join(" "),
        'O' => job.batch.as_ref().map(|b| b.stdout.clone()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// A job as `squeue --json` writes one (the fields tools read).
fn json_of(job: &Job, site: &Site) -> serde_json::Value {
    let batch = job.batch.as_ref();
    serde_json::json!({
        "job_id": job.number,
        "array_job_id": job.array_number.unwrap_or(0),
        "array_task_id": job.array_index,
        "name": job_name(job),
        "job_state": values::state(job),
        "state_reason": reason(job),
        "user_name": site.user_of(job),
        "partition": site.partition(job.station_id),
        "account": site.account(job.project_id),
        "comment": batch.and_then(|b| b.comment.clone()).unwrap_or_default(),
        "nodes": site.node(job.lz_id),
        "node_count": 1,
        "cpus": job.cpu_count,
        "memory_per_node": job.memory_amount,
        "time_limit": job.time_limit,
        "submit_time": job.created_at.timestamp(),
        "start_time": job.started_at.map_or(0, |t| t.timestamp()),
        "end_time": job.finished_at.map_or(0, |t| t.timestamp()),
        "current_working_directory": batch.map(|b| b.workdir.clone()).unwrap_or_default(),
        "standard_output": batch.map(|b| b.stdout.clone()).unwrap_or_default(),
        "exit_code": values::exit_code(job),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_header_is_slurms() {
        let captured = include_str!("../../../../fixtures/slurm/squeue.txt");
        let line = render(&percent_columns(DEFAULT_FORMAT), |letter| header(letter).to_owned());
        assert_eq!(captured.lines().next().unwrap().trim_end(), line);
        let captured = include_str!("../../../../fixtures/slurm/squeue-format.txt");
        let format = "%i %j %T %t %u %M %l %D %R %N %C %m %A %a %F %K %k %V %S %e %r";
        let line = render(&percent_columns(format), |letter| header(letter).to_owned());
        assert_eq!(captured.lines().next().unwrap().trim_end(), line);
    }
}
