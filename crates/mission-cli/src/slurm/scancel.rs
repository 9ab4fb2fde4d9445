//! `scancel`: stops jobs, named by id (`4711`, `4700_3`, `4700` for a whole array) or picked by
//! name, user and state.

use super::options::{Spec, Takes, flag, ignored, value};
use super::values::JobSpec;
use super::{Failure, Selection, Site, UNFINISHED, print_version, read_query, report};

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
    let given = read_query("scancel", args, OPTIONS)?;
    if given.has("version") {
        print_version();
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
    let selection = Selection::of(&given, "state", "account");
    let filters = selection.selects();
    if specs.is_empty() && !filters {
        return Err(Failure::new(1, "No job identification provided"));
    }
    let site = Site::open().await?;
    let mut jobs = site.jobs(&UNFINISHED).await?;
    jobs.retain(|job| selection.keeps(job, &site));
    let mut failed = false;
    if !specs.is_empty() {
        for (id, spec) in &specs {
            let matching: Vec<_> = jobs.iter().filter(|job| spec.matches(job)).collect();
            if matching.is_empty() && !filters {
                // An ended job is left be silently, as Slurm does; one never seen is an error.
                let known = site.client.get_job(mission_api::JobRef::Number(spec.number())).await.is_ok();
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
