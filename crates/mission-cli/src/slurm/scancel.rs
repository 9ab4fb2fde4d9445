//! `scancel`: stops jobs, named by id (`4711`, `4700_3`, `4700` for a whole array) or picked by
//! name, user and state.

use super::options::{self, Spec, Takes, flag, ignored, value};
use super::values::{self, JobSpec};
use super::{Failure, Site, UNFINISHED, job_name, report};

const OPTIONS: &[Spec] = &[
    value("name", Some('n')),
    value("user", Some('u')),
    flag("me", None),
    value("state", Some('t')),
    value("signal", Some('s')),
    value("partition", Some('p')),
    value("account", Some('A')),
    flag("quiet", Some('Q')),
    flag("verbose", Some('v')),
    flag("version", Some('V')),
    flag("help", None),
    flag("batch", Some('b')),
    flag("full", Some('f')),
    ignored("interactive", Some('i'), Takes::Nothing),
    ignored("clusters", Some('M'), Takes::Value),
    ignored("qos", Some('q'), Takes::Value),
    ignored("reservation", Some('R'), Takes::Value),
    ignored("nodelist", Some('w'), Takes::Value),
    ignored("wckey", None, Takes::Value),
];

pub async fn run(args: &[String]) -> u8 {
    report("scancel", cancel(args).await)
}

async fn cancel(args: &[String]) -> Result<(), Failure> {
    let given = options::parse(args, OPTIONS, false)
        .map_err(|e| Failure::new(1, format!("{e}\nTry \"scancel --help\" for more information")))?;
    if let Some(unknown) = given.unknown() {
        return Err(Failure::plain(1, format!("scancel: {unknown}\nTry \"scancel --help\" for more information")));
    }
    if given.has("version") {
        println!("slurm 22.05.8 (mission {})", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    if let Some(signal) = given.last("signal") {
        let name = signal.trim_start_matches("SIG").to_ascii_uppercase();
        if !matches!(name.as_str(), "TERM" | "KILL" | "INT" | "15" | "9" | "2") {
            eprintln!(
                "scancel: warning: --signal={signal}: this service delivers no signal but the end of the job; it is \
                 stopped"
            );
        }
    }
    let mut specs = Vec::new();
    for id in given.operands.iter().flat_map(|o| o.split(',')) {
        specs.push((id.to_owned(), JobSpec::parse(id).ok_or_else(|| Failure::new(1, format!("Invalid job id {id}")))?));
    }
    let filters = ["name", "user", "state", "partition", "account", "me"].iter().any(|f| given.has(f));
    if specs.is_empty() && !filters {
        return Err(Failure::new(1, "No job identification provided"));
    }
    let site = Site::open().await?;
    let mut jobs = site.jobs(&UNFINISHED).await?;
    let names: Vec<&str> = given.all("name").flat_map(|n| n.split(',')).collect();
    let users: Vec<&str> = given.all("user").flat_map(|u| u.split(',')).collect();
    let states: Vec<&str> = given.all("state").flat_map(|s| s.split(',')).filter_map(values::state_named).collect();
    let partitions: Vec<&str> = given.all("partition").flat_map(|p| p.split(',')).collect();
    let accounts: Vec<&str> = given.all("account").flat_map(|a| a.split(',')).collect();
    jobs.retain(|job| {
        (names.is_empty() || names.contains(&job_name(job).as_str()))
            && (users.is_empty() || users.contains(&site.user_of(job).as_str()))
            && (!given.has("me") || job.user_id == site.user_id)
            && (states.is_empty() || states.contains(&values::state(job)))
            && (partitions.is_empty() || partitions.contains(&site.partition(job.station_id)))
            && (accounts.is_empty() || accounts.contains(&site.account(job.project_id)))
    });
    let mut failed = false;
    if !specs.is_empty() {
        for (id, spec) in &specs {
            let matching: Vec<_> = jobs.iter().filter(|job| spec.matches(job)).collect();
            if matching.is_empty() && !filters {
                // An ended job is left be silently, as Slurm does; one never seen is an error.
                let known = site.client.get_job(mission_api::JobRef::Number(spec_number(*spec))).await.is_ok();
                if !known {
                    eprintln!("scancel: error: Kill job error on job id {id}: Invalid job id specified");
                    failed = true;
                }
            }
            for job in matching {
                site.client.stop_job(job.job_id).await?;
            }
        }
    } else {
        for job in &jobs {
            site.client.stop_job(job.job_id).await?;
        }
    }
    if failed { Err(Failure::new(1, "")) } else { Ok(()) }
}

fn spec_number(spec: JobSpec) -> u64 {
    match spec {
        JobSpec::Number(n) | JobSpec::Element(n, _) => n,
    }
}
