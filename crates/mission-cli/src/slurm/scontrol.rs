//! `scontrol`: `show job ID` in Slurm's `Key=Value` lines, `show hostnames LIST` (a node list
//! expanded, one name a line), `show partition`, `show config`, and `hold`, `release` and
//! `requeue` of jobs.

use mission_client::Job;

use super::squeue::{reason, seconds_run};
use super::values::{self, JobSpec};
use super::{Failure, Site, job_name, report};

pub async fn run(args: &[String]) -> u8 {
    report("scontrol", control(args).await)
}

async fn control(args: &[String]) -> Result<(), Failure> {
    let words: Vec<&str> =
        args.iter().map(String::as_str).filter(|a| !matches!(*a, "-d" | "--details" | "-o" | "--oneliner")).collect();
    let oneliner = args.iter().any(|a| a == "-o" || a == "--oneliner");
    match words.as_slice() {
        ["show", "hostnames", list] | ["show", "hostname", list] => {
            for name in expand_hostlist(list).map_err(|why| Failure::new(1, why))? {
                println!("{name}");
            }
            Ok(())
        }
        ["show", "hostnames"] => match std::env::var("SLURM_JOB_NODELIST") {
            Ok(list) => {
                for name in expand_hostlist(&list).map_err(|why| Failure::new(1, why))? {
                    println!("{name}");
                }
                Ok(())
            }
            Err(_) => Err(Failure::new(1, "Host list is empty")),
        },
        ["show", "config"] => {
            // What tools read to tune themselves: jobs stay listed long after they end here.
            println!("Configuration data as of {}", chrono::Local::now().format("%Y-%m-%dT%H:%M:%S"));
            println!("{:<24}= mission", "ClusterName");
            println!("{:<24}= 86400 sec", "MinJobAge");
            println!("{:<24}= 1000000", "MaxArraySize");
            println!("{:<24}= 22.05.8", "SLURM_VERSION");
            Ok(())
        }
        ["show", "partition" | "partitions", rest @ ..] => show_partitions(rest.first().copied()).await,
        ["show", "job" | "jobs", id] => show_job(id, oneliner).await,
        ["show", "job" | "jobs"] => show_job("", oneliner).await,
        ["hold" | "release" | "requeue", ids @ ..] if !ids.is_empty() => change_jobs(words[0], ids).await,
        ["--version"] | ["-V"] | ["version"] => {
            super::print_version();
            Ok(())
        }
        _ => Err(Failure::new(
            1,
            format!(
                "invalid or unsupported command: {}; this service answers `scontrol show job|partition|config \
                 [ID]`, `scontrol show hostnames LIST` and `scontrol hold|release|requeue JOB_LIST`",
                args.join(" ")
            ),
        )),
    }
}

/// `scontrol hold|release|requeue JOB_LIST`: ids (`4711`, `4700_3`, `4700` for every element of
/// an array) separated by commas or spaces. As Slurm does, holding or releasing a job that has
/// started changes nothing, and requeueing a pending one is an error.
async fn change_jobs(verb: &str, ids: &[&str]) -> Result<(), Failure> {
    let site = Site::open().await?;
    let jobs = site.jobs(&super::UNFINISHED).await?;
    let mut failed = false;
    for id in ids.iter().flat_map(|ids| ids.split(',')).filter(|id| !id.is_empty()) {
        let spec = JobSpec::parse(id).ok_or_else(|| Failure::new(1, format!("Invalid job id specified: {id}")))?;
        let matching: Vec<&Job> = jobs.iter().filter(|job| spec.matches(job)).collect();
        if matching.is_empty() {
            // An ended job is no longer pending, running or held: Slurm says so for requeue;
            // hold and release leave it be.
            let known = site.client.get_job(mission_api::JobRef::Number(spec.number())).await.is_ok();
            match (known, verb) {
                (false, "requeue") => eprintln!("Invalid job id specified for job {id}"),
                (false, _) => {
                    eprintln!("Invalid job id specified for job {id}");
                    eprintln!("slurm_suspend error: Invalid job id specified");
                }
                (true, _) => continue,
            }
            failed = true;
            continue;
        }
        for job in matching {
            let queued = job.status == mission_client::JobStatus::Queued;
            let done = match verb {
                "hold" if queued => site.client.hold_job(job.job_id).await,
                "release" if queued => site.client.release_job(job.job_id).await,
                "requeue" if queued => {
                    eprintln!("Job is pending execution for job {}", values::job_id(job));
                    failed = true;
                    continue;
                }
                "requeue" => site.client.requeue_job(job.job_id).await,
                _ => continue,
            };
            done?;
        }
    }
    if failed { Err(Failure::new(1, "")) } else { Ok(()) }
}

/// `scontrol show partition [NAME]`: the stations, as Slurm describes partitions.
async fn show_partitions(name: Option<&str>) -> Result<(), Failure> {
    let site = Site::open().await?;
    let mut out = String::new();
    for station in site.partitions.iter().filter(|s| name.is_none_or(|n| n == s.name)) {
        let lzs: Vec<_> = site.landing_zones.iter().filter(|lz| lz.station_id == station.station_id).collect();
        let cpus: u32 = lzs.iter().filter_map(|lz| lz.resources).map(|r| r.cpu_count).sum();
        let nodes: Vec<&str> = lzs.iter().map(|lz| lz.name.as_str()).collect();
        let default = station.name == mission_api::DEFAULT_STATION_NAME;
        out.push_str(&format!(
            "PartitionName={}
",
            station.name
        ));
        out.push_str(
            "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
",
        );
        out.push_str(&format!(
            "   Default={} Hidden=NO MaxNodes=1 MaxTime=UNLIMITED MinNodes=0
",
            if default { "YES" } else { "NO" }
        ));
        out.push_str(&format!(
            "   Nodes={}
",
            if nodes.is_empty() { "(null)".to_owned() } else { nodes.join(",") }
        ));
        out.push_str(&format!(
            "   State=UP TotalCPUs={cpus} TotalNodes={}

",
            nodes.len()
        ));
    }
    if out.is_empty() {
        return Err(Failure::plain(1, "Partition not found"));
    }
    print!("{out}");
    Ok(())
}

async fn show_job(id: &str, oneliner: bool) -> Result<(), Failure> {
    let wanted = if id.is_empty() {
        None
    } else {
        Some(JobSpec::parse(id).ok_or_else(|| Failure::new(1, format!("Invalid job id specified: {id}")))?)
    };
    let site = Site::open().await?;
    let mut jobs = site.jobs(&[]).await?;
    jobs.retain(|job| wanted.is_none_or(|w| w.matches(job)));
    jobs.sort_by_key(|job| job.number);
    if jobs.is_empty() {
        return Err(Failure::plain(1, "slurm_load_jobs error: Invalid job id specified"));
    }
    let mut out = String::new();
    for job in &jobs {
        let lines = record(job, &site);
        if oneliner {
            out.push_str(&lines.iter().map(|l| l.join(" ")).collect::<Vec<_>>().join(" "));
            out.push('\n');
        } else {
            for (i, line) in lines.iter().enumerate() {
                out.push_str(if i == 0 { "" } else { "   " });
                out.push_str(&line.join(" "));
                out.push('\n');
            }
            out.push_str("   \n\n");
        }
    }
    print!("{out}");
    Ok(())
}

/// `scontrol show job`'s lines of `job`, as `Key=Value` pairs.
fn record(job: &Job, site: &Site) -> Vec<Vec<String>> {
    let state = values::state(job);
    let batch = job.batch.as_ref();
    let kv = |k: &str, v: String| format!("{k}={v}");
    let null = |v: Option<String>| v.filter(|v| !v.is_empty()).unwrap_or_else(|| "(null)".to_owned());
    let workdir = batch.map(|b| b.workdir.clone()).unwrap_or_default();
    let names = mission_api::batch::OutputNames {
        number: job.number,
        name: batch.map_or("", |b| b.name.as_str()),
        array_number: job.array_number,
        array_index: job.array_index,
        user: &site.username,
        node: site.node(job.lz_id),
    };
    let in_dir = |pattern: &str| {
        let filled = mission_api::batch::fill_output_pattern(pattern, &names);
        if filled.starts_with('/') { filled } else { format!("{workdir}/{filled}") }
    };
    let stdout = batch.map(|b| in_dir(&b.stdout)).unwrap_or_default();
    let stderr = batch.map(|b| b.stderr.as_deref().map_or_else(|| stdout.clone(), in_dir)).unwrap_or_default();
    let mut first = vec![kv("JobId", job.number.to_string())];
    if let (Some(array), Some(index)) = (job.array_number, job.array_index) {
        first.push(kv("ArrayJobId", array.to_string()));
        first.push(kv("ArrayTaskId", index.to_string()));
    }
    first.push(kv("JobName", job_name(job)));
    let user = site.user_of(job);
    let nodes = values::node_count(job);
    vec![
        first,
        vec![
            kv("UserId", format!("{user}({})", job.user_id)),
            kv("GroupId", format!("{user}(0)")),
            kv("MCS_label", "N/A".into()),
        ],
        vec![
            // A held job's priority is 0, which is how tools tell it is held.
            kv("Priority", if reason(job) == "JobHeldUser" { "0" } else { "1" }.into()),
            kv("Nice", "0".into()),
            kv("Account", site.account(job.project_id).to_owned()),
            kv("QOS", "normal".into()),
        ],
        vec![kv("JobState", state.into()), kv("Reason", reason(job).into()), kv("Dependency", "(null)".into())],
        vec![
            kv("Requeue", u8::from(job.requeue).to_string()),
            kv("Restarts", job.attempt.saturating_sub(1).to_string()),
            kv("BatchFlag", u8::from(batch.is_some()).to_string()),
            kv("Reboot", "0".into()),
            kv("ExitCode", values::exit_code(job)),
        ],
        vec![
            kv("RunTime", values::elapsed(seconds_run(job))),
            kv("TimeLimit", values::time_limit(job.time_limit)),
            kv("TimeMin", "N/A".into()),
        ],
        vec![
            kv("SubmitTime", values::timestamp(Some(job.created_at), "Unknown")),
            kv("EligibleTime", values::timestamp(Some(job.created_at), "Unknown")),
        ],
        vec![
            kv("StartTime", values::timestamp(job.started_at, "Unknown")),
            kv("EndTime", values::timestamp(job.finished_at, "Unknown")),
            kv("Deadline", "N/A".into()),
        ],
        vec![kv("Partition", site.partition(job.station_id).to_owned())],
        vec![kv("ReqNodeList", "(null)".into()), kv("ExcNodeList", "(null)".into())],
        vec![kv("NodeList", null(job.lz_id.map(|_| site.nodes_of(job))))],
        vec![
            kv("NumNodes", nodes.to_string()),
            kv("NumCPUs", (job.cpu_count * nodes).to_string()),
            kv("NumTasks", "1".into()),
            kv("CPUs/Task", job.cpu_count.to_string()),
        ],
        vec![kv(
            "TRES",
            format!(
                "cpu={},mem={}M,node={nodes}{}",
                job.cpu_count * nodes,
                job.memory_amount * u64::from(nodes),
                if job.gpu_count > 0 { format!(",gres/gpu={}", job.gpu_count) } else { String::new() }
            ),
        )],
        vec![kv("MinCPUsNode", job.cpu_count.to_string()), kv("MinMemoryNode", values::megabytes(job.memory_amount))],
        vec![kv("Command", null(Some(job.command.join(" "))))],
        vec![kv("WorkDir", workdir.clone())],
        vec![kv("Comment", null(batch.and_then(|b| b.comment.clone())))],
        vec![kv("StdErr", stderr)],
        vec![kv("StdIn", "/dev/null".into())],
        vec![kv("StdOut", stdout)],
    ]
}

/// The names a Slurm host list stands for: `n[1-3,7],m5` is `n1 n2 n3 n7 m5`; ranges keep their
/// zero padding (`n[01-03]`).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let Some(open) = part.find('[') else {
            names.push(part.to_owned());
            continue;
        };
        let close = part.find(']').ok_or_else(|| format!("Invalid hostlist: {list}"))?;
        let (prefix, ranges, suffix) = (&part[..open], &part[open + 1..close], &part[close + 1..]);
        for range in ranges.split(',') {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let width = first.len();
            let (a, b): (u64, u64) = (
                first.parse().map_err(|_| format!("Invalid hostlist: {list}"))?,
                last.parse().map_err(|_| format!("Invalid hostlist: {list}"))?,
            );
            if b < a || b - a > 65_536 {
                return Err(format!("Invalid hostlist: {list}"));
            }
            for n in a..=b {
                names.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_lists_expand_as_slurm_expands_them() {
        let captured = include_str!("../../../../fixtures/slurm/scontrol-hostnames.txt");
        let expected: Vec<&str> = captured.lines().filter(|l| !l.starts_with("exit=")).collect();
        assert_eq!(super::expand_hostlist("n[1-3],m5").unwrap(), expected);
        assert_eq!(super::expand_hostlist("gpu[08-10]").unwrap(), ["gpu08", "gpu09", "gpu10"]);
        assert!(super::expand_hostlist("n[3-1]").is_err());
    }
}
