//! `sbatch`: a batch script (a file, standard input, or `--wrap "cmd"`) submitted as a batch job
//! of the service, its `#SBATCH` lines read before the command line's options, which win.

use std::collections::BTreeMap;
use std::io::Read;

use mission_api::{JobBatch, JobRef, RunJob, SubmitBatchJob};
use mission_client::{JobStatus, Uuid};

use super::options::{self, Parsed, Spec, Takes, flag, ignored, value};
use super::values::{parse_megabytes, parse_time_limit};
use super::{Failure, Site, report};

/// An option table of `name`: the options that describe a job, which `sbatch` and `srun` share
/// (and [`request`] reads), then `extra`.
macro_rules! job_options {
    ($vis:vis $name:ident, $($extra:expr),* $(,)?) => {
        $vis const $name: &[Spec] = &[
            value("account", Some('A')),
            value("chdir", Some('D')),
            value("comment", None),
            value("cpus-per-task", Some('c')),
            value("error", Some('e')),
            value("export", None),
            value("gpus", Some('G')),
            // One node: per node is per job.
            value("gpus-per-node", None),
            value("gres", None),
            flag("help", Some('h')),
            value("job-name", Some('J')),
            value("mem", None),
            value("mem-per-cpu", None),
            value("nodelist", Some('w')),
            value("nodes", Some('N')),
            value("ntasks", Some('n')),
            value("ntasks-per-node", None),
            value("open-mode", None),
            value("output", Some('o')),
            value("partition", Some('p')),
            flag("quiet", Some('Q')),
            value("time", Some('t')),
            flag("usage", None),
            flag("verbose", Some('v')),
            flag("version", Some('V')),
            $($extra),*
        ];
    };
}
pub(super) use job_options;

// Every option of Slurm 22.05's `sbatch`, and which this service honours.
job_options!(
    pub(super) OPTIONS,
    value("array", Some('a')),
    value("dependency", Some('d')),
    flag("parsable", None),
    flag("wait", Some('W')),
    value("wrap", None),
    flag("hold", Some('H')),
    ignored("acctg-freq", None, Takes::Value),
    ignored("batch", None, Takes::Value),
    ignored("bb", None, Takes::Value),
    ignored("bbf", None, Takes::Value),
    ignored("begin", Some('b'), Takes::Value),
    ignored("cluster-constraint", None, Takes::Value),
    ignored("clusters", Some('M'), Takes::Value),
    ignored("constraint", Some('C'), Takes::Value),
    ignored("container", None, Takes::Value),
    ignored("contiguous", None, Takes::Nothing),
    ignored("core-spec", Some('S'), Takes::Value),
    ignored("cores-per-socket", None, Takes::Value),
    ignored("cpu-freq", None, Takes::Value),
    ignored("cpus-per-gpu", None, Takes::Value),
    ignored("deadline", None, Takes::Value),
    ignored("delay-boot", None, Takes::Value),
    ignored("distribution", Some('m'), Takes::Value),
    ignored("exclude", Some('x'), Takes::Value),
    ignored("exclusive", None, Takes::Optional),
    ignored("export-file", None, Takes::Value),
    ignored("extra-node-info", Some('B'), Takes::Value),
    ignored("get-user-env", None, Takes::Optional),
    ignored("gid", None, Takes::Value),
    ignored("gpu-bind", None, Takes::Value),
    ignored("gpu-freq", None, Takes::Value),
    ignored("gpus-per-socket", None, Takes::Value),
    ignored("gpus-per-task", None, Takes::Value),
    ignored("gres-flags", None, Takes::Value),
    ignored("hint", None, Takes::Value),
    ignored("ignore-pbs", None, Takes::Nothing),
    ignored("input", Some('i'), Takes::Value),
    ignored("kill-on-invalid-dep", None, Takes::Value),
    ignored("licenses", Some('L'), Takes::Value),
    ignored("mail-type", None, Takes::Value),
    ignored("mail-user", None, Takes::Value),
    ignored("mcs-label", None, Takes::Value),
    ignored("mem-bind", None, Takes::Value),
    ignored("mem-per-gpu", None, Takes::Value),
    ignored("mincpus", None, Takes::Value),
    ignored("network", None, Takes::Value),
    ignored("nice", None, Takes::Optional),
    ignored("no-kill", Some('k'), Takes::Optional),
    flag("no-requeue", None),
    ignored("nodefile", Some('F'), Takes::Value),
    ignored("ntasks-per-core", None, Takes::Value),
    ignored("ntasks-per-gpu", None, Takes::Value),
    ignored("ntasks-per-socket", None, Takes::Value),
    ignored("overcommit", Some('O'), Takes::Nothing),
    ignored("oversubscribe", Some('s'), Takes::Nothing),
    ignored("power", None, Takes::Value),
    ignored("prefer", None, Takes::Value),
    ignored("priority", None, Takes::Value),
    ignored("profile", None, Takes::Value),
    ignored("propagate", None, Takes::Optional),
    ignored("qos", Some('q'), Takes::Value),
    ignored("reboot", None, Takes::Nothing),
    flag("requeue", None),
    ignored("reservation", None, Takes::Value),
    value("signal", None),
    ignored("sockets-per-node", None, Takes::Value),
    ignored("spread-job", None, Takes::Nothing),
    ignored("switches", None, Takes::Value),
    ignored("test-only", None, Takes::Nothing),
    ignored("thread-spec", None, Takes::Value),
    ignored("threads-per-core", None, Takes::Value),
    ignored("time-min", None, Takes::Value),
    ignored("tmp", None, Takes::Value),
    ignored("uid", None, Takes::Value),
    ignored("use-min-nodes", None, Takes::Nothing),
    ignored("wait-all-nodes", None, Takes::Value),
    ignored("wckey", None, Takes::Value),
);

/// `sbatch ARGS`: its exit code.
pub async fn run(args: &[String]) -> u8 {
    report("sbatch", submit(args).await)
}

async fn submit(args: &[String]) -> Result<(), Failure> {
    let given = options::parse(args, OPTIONS, true)
        .map_err(|e| Failure::new(255, format!("{e}\nTry \"sbatch --help\" for more information")))?;
    if given.has("help") || given.has("usage") {
        print!("{USAGE}");
        return Ok(());
    }
    if given.has("version") {
        super::print_version();
        return Ok(());
    }
    let (script, name, arguments) = script_of(&given)?;
    let directives = directives(&script)?;
    // #SBATCH lines first, the command line after: the last value given wins.
    let mut all = directives;
    all.options.extend(given.options);
    warn_of_ignored(&all);
    let needs = needs(&all);
    let site = Site::open_for(needs).await?;
    let station = partition(&all).unwrap_or_else(|| mission_api::DEFAULT_STATION_NAME.to_owned());
    let site = site.knowing_station(&station, needs).await?;
    let request = request(&all, &site, script, name, arguments).await?;
    let job = site.client.submit_batch_job(&request).await.map_err(|e| {
        site.forget_cached();
        submission_failure(e)
    })?;
    // An array is known by its number, its first element's.
    let number = job.array_number.unwrap_or(job.number);
    if all.has("parsable") {
        println!("{number}");
    } else if !all.has("quiet") {
        println!("Submitted batch job {number}");
    }
    if all.has("wait") && job.array_id.is_some() {
        // Every element, as Slurm waits for: the exit code is the highest of theirs.
        let mut code = 0;
        for element in array_elements(&site, &job).await? {
            let ended = site.client.wait_for_job(element).await?;
            if ended.status != JobStatus::Completed {
                code = code.max(ended.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8);
            }
        }
        return if code == 0 { Ok(()) } else { Err(Failure::new(code, "")) };
    }
    if all.has("wait") {
        let ended = site.client.wait_for_job(job.job_id).await?;
        let code = match ended.status {
            JobStatus::Completed => 0,
            _ => ended.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8,
        };
        return Err(Failure::new(code, ""));
    }
    Ok(())
}

/// The ids of the elements of the array `first` is the first element of.
async fn array_elements(site: &Site, first: &mission_client::Job) -> Result<Vec<Uuid>, Failure> {
    let mut ids = Vec::new();
    let mut page = 1;
    loop {
        let options = mission_client::ListJobs {
            array_ids: first.array_id.into_iter().collect(),
            page,
            items: mission_api::MAX_ITEMS_PER_PAGE,
            ..Default::default()
        };
        let jobs = site.client.list_jobs(&options).await?;
        let more = jobs.len() as u32 == mission_api::MAX_ITEMS_PER_PAGE;
        ids.extend(jobs.into_iter().map(|job| job.job_id));
        if !more {
            return Ok(ids);
        }
        page += 1;
    }
}

/// What a submission looks up: landing zones only when it names one, projects only when it
/// names one.
pub(super) fn needs(given: &Parsed) -> super::Needs {
    super::Needs {
        nodes: given.last("nodelist").is_some(),
        accounts: given.last("account").is_some() || std::env::var_os("SBATCH_ACCOUNT").is_some(),
    }
}

/// The partition a submission names (`-p`, else `SBATCH_PARTITION`), if it names one.
fn partition(given: &Parsed) -> Option<String> {
    given.last("partition").map(str::to_owned).or_else(|| std::env::var("SBATCH_PARTITION").ok())
}

/// The script, its name and its arguments: `--wrap`'s command, or the file named first (its
/// arguments after it), or standard input.
fn script_of(given: &Parsed) -> Result<(String, String, Vec<String>), Failure> {
    if let Some(command) = given.last("wrap") {
        if !given.operands.is_empty() {
            return Err(Failure::new(1, "cannot submit a script with --wrap"));
        }
        let script = format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n");
        return Ok((script, "wrap".into(), Vec::new()));
    }
    match given.operands.split_first() {
        Some((path, arguments)) => {
            let script = std::fs::read(path).map_err(|_| Failure::new(1, format!("Unable to open file {path}")))?;
            let script = String::from_utf8(script)
                .map_err(|_| Failure::new(1, format!("Batch script {path} is not text (UTF-8)")))?;
            let name = path.rsplit('/').next().unwrap_or(path).to_owned();
            Ok((script, name, arguments.to_vec()))
        }
        None => {
            let mut script = String::new();
            std::io::stdin()
                .read_to_string(&mut script)
                .map_err(|e| Failure::new(1, format!("Unable to read the batch script from standard input: {e}")))?;
            Ok((script, "sbatch".into(), Vec::new()))
        }
    }
    .and_then(|(script, name, arguments)| {
        if script.trim().is_empty() {
            return Err(Failure::new(1, "Batch script is empty!"));
        }
        if !script.starts_with("#!") {
            return Err(Failure::new(
                1,
                "This does not look like a batch script.  The first\nsbatch: error: line must start with #! followed by \
                 the path to an interpreter.\nsbatch: error: For instance: #!/bin/sh",
            ));
        }
        Ok((script, name, arguments))
    })
}

/// The options of the script's `#SBATCH` lines: those before its first command (after the
/// `#!` line, among comments and blank lines), each read like a command line.
fn directives(script: &str) -> Result<Parsed, Failure> {
    let mut words = Vec::new();
    for line in script.lines().skip(1) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            break;
        }
        let Some(rest) = line.strip_prefix("#SBATCH") else { continue };
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        // What follows a second `#` is a comment.
        let rest = rest.split(" #").next().unwrap_or_default();
        let split = shell_words(rest).map_err(|why| Failure::new(1, format!("#SBATCH line {line:?}: {why}")))?;
        words.extend(split);
    }
    options::parse(&words, OPTIONS, false).map_err(|e| Failure::new(255, format!("{e} (in an #SBATCH line)")))
}

/// Words of a line as a POSIX shell splits them (quotes and backslashes), with nothing run.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("an unterminated ' quote".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => w.extend(chars.next()),
                        Some(c) => w.push(c),
                        None => return Err("an unterminated \" quote".into()),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// One warning line for each option given that this service does not honour.
fn warn_of_ignored(given: &Parsed) {
    let mut warned: Vec<&str> = Vec::new();
    for option in given.options.iter().filter(|o| !o.honoured) {
        if warned.contains(&option.long.as_str()) {
            continue;
        }
        warned.push(&option.long);
        let shown = if option.long.starts_with('-') { option.long.clone() } else { format!("--{}", option.long) };
        if mission_api::batch::PASSED_ON.contains(&option.long.as_str()) {
            eprintln!(
                "sbatch: warning: {shown} is not supported by this site's scheduler (Mission Compute Service); \
                 ignored unless the job runs on a Slurm gateway, which passes it on"
            );
        } else {
            eprintln!(
                "sbatch: warning: {shown} is not supported by this site's scheduler (Mission Compute Service); ignored"
            );
        }
    }
}

/// The options of `given` a Slurm gateway passes on to the real `sbatch`
/// ([`mission_api::batch::PASSED_ON`]), each as one argument.
fn passed_on(given: &Parsed) -> Vec<String> {
    given
        .options
        .iter()
        .filter(|o| o.known && !o.honoured && mission_api::batch::PASSED_ON.contains(&o.long.as_str()))
        .map(|o| match &o.value {
            Some(value) => format!("--{}={value}", o.long),
            None => format!("--{}", o.long),
        })
        .filter(|directive| mission_api::batch::is_passed_on(directive))
        .take(mission_api::batch::MAX_DIRECTIVES)
        .collect()
}

/// The batch job `given` asks for.
pub(super) async fn request(
    given: &Parsed,
    site: &Site,
    script: String,
    name: String,
    arguments: Vec<String>,
) -> Result<SubmitBatchJob, Failure> {
    let number = |option: &str| -> Result<Option<u32>, Failure> {
        given
            .last(option)
            .map(|v| v.trim().parse::<u32>().ok().filter(|n| *n > 0))
            .map(|n| {
                n.ok_or_else(|| {
                    Failure::new(
                        1,
                        format!("Invalid numeric value \"{}\" for --{option}.", given.last(option).unwrap_or_default()),
                    )
                })
            })
            .transpose()
    };
    // -N MIN[-MAX]: the job gets MIN nodes (landing zones), its batch script running on the first.
    let nodes = match given.last("nodes") {
        Some(spec) => {
            let min = spec.trim().split('-').next().and_then(|n| n.parse::<u32>().ok());
            match min.filter(|n| (1..=mission_api::MAX_NODES).contains(n)) {
                Some(n) => n,
                None => {
                    return Err(Failure::new(1, "Batch job submission failed: Node count specification invalid"));
                }
            }
        }
        None => 1,
    };
    let ntasks = number("ntasks")?;
    let per_node = number("ntasks-per-node")?;
    // The tasks of each node: as asked, or the job's spread over its nodes.
    let tasks_per_node = per_node.or(ntasks.map(|n| n.div_ceil(nodes))).unwrap_or(1);
    let ntasks = ntasks.unwrap_or(tasks_per_node * nodes);
    let per_task = number("cpus-per-task")?;
    let cpu_count = tasks_per_node * per_task.unwrap_or(1);
    // --signal=[B:]SIG[@SECONDS], as this service takes it; Slurm's R: (reservations) is not.
    let signal = match given.last("signal") {
        Some(spec) => match mission_api::WarningSignal::parse(spec) {
            Ok(_) => Some(spec.to_owned()),
            Err(why) => return Err(Failure::new(1, format!("Invalid --signal specification: {why}"))),
        },
        None => None,
    };
    let memory_amount = match (given.last("mem"), given.last("mem-per-cpu")) {
        (Some(_), Some(_)) => return Err(Failure::new(255, "--mem and --mem-per-cpu are mutually exclusive.")),
        (Some(mem), None) => match parse_megabytes(mem) {
            Ok(0) => None,
            Ok(mb) => Some(mb),
            Err(()) => return Err(Failure::new(255, "Invalid --mem specification")),
        },
        (None, Some(per_cpu)) => match parse_megabytes(per_cpu) {
            Ok(mb) => Some(mb * u64::from(cpu_count)),
            Err(()) => return Err(Failure::new(255, "Invalid --mem-per-cpu specification")),
        },
        (None, None) => None,
    };
    let gpu_count = gpus(given)?;
    let time_limit = match given.last("time") {
        Some(time) => parse_time_limit(time).map_err(|()| Failure::new(255, "Invalid --time specification"))?,
        None => None,
    };
    let array = match given.last("array") {
        Some(spec) => Some((
            spec.to_owned(),
            mission_api::batch::ArraySpec::parse(spec)
                .map_err(|_| Failure::new(1, "Batch job submission failed: Invalid job array specification"))?,
        )),
        None => None,
    };
    let partition = partition(given);
    let station_id = match &partition {
        Some(name) => site.station_named(name).ok_or_else(|| {
            Failure::new(
                1,
                format!("invalid partition specified: {name}\nsbatch: error: Batch job submission failed: Invalid partition name specified"),
            )
        })?,
        None => site
            .station_named(mission_api::DEFAULT_STATION_NAME)
            .ok_or_else(|| Failure::new(1, "Batch job submission failed: No partition specified or system default partition"))?,
    };
    let lz_id = match given.last("nodelist") {
        Some(node) => Some(site.node_named(node).ok_or_else(|| {
            Failure::new(1, "Batch job submission failed: Requested node configuration is not available")
        })?),
        None => None,
    };
    let account = given.last("account").map(str::to_owned).or_else(|| std::env::var("SBATCH_ACCOUNT").ok());
    let project_id = match &account {
        Some(name) => Some(site.account_named(name).ok_or_else(|| {
            Failure::new(1, "Batch job submission failed: Invalid account or account/partition combination specified")
        })?),
        None => None,
    };
    let [after_ok, after_any, after_not_ok] = dependencies(given.last("dependency"), site).await?;

    let cwd = std::env::current_dir().map_err(|e| Failure::new(1, format!("the current directory: {e}")))?;
    let workdir = match given.last("chdir") {
        Some(dir) => cwd.join(dir),
        None => cwd.clone(),
    };
    let workdir = workdir.to_string_lossy().into_owned();
    let stdout = given.last("output").unwrap_or(mission_api::batch::default_output(array.is_some())).to_owned();
    let stderr = given.last("error").map(str::to_owned);
    let append = match given.last("open-mode") {
        None | Some("truncate") => false,
        Some("append") => true,
        Some(_) => return Err(Failure::new(255, "Invalid --open-mode specification")),
    };
    let name =
        given.last("job-name").map(str::to_owned).or_else(|| std::env::var("SBATCH_JOB_NAME").ok()).unwrap_or(name);
    let mut environment = exported(given.last("export"))?;
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    let mut slurm = vec![
        ("SLURM_SUBMIT_DIR", cwd.to_string_lossy().into_owned()),
        ("SLURM_SUBMIT_HOST", host),
        ("SLURM_NTASKS", ntasks.to_string()),
        ("SLURM_NPROCS", ntasks.to_string()),
        ("SLURM_JOB_PARTITION", partition.clone().unwrap_or_else(|| site.partition(station_id).to_owned())),
        ("SLURM_JOB_ACCOUNT", site.account(project_id.unwrap_or(site.user_id)).to_owned()),
    ];
    if let Some(per_task) = per_task {
        slurm.push(("SLURM_CPUS_PER_TASK", per_task.to_string()));
    }
    if let Some(gpus) = gpu_count {
        slurm.push(("SLURM_GPUS", gpus.to_string()));
    }
    if let Some((_, spec)) = &array {
        let (first, last) = (spec.indices[0], spec.indices[spec.indices.len() - 1]);
        slurm.push(("SLURM_ARRAY_TASK_COUNT", spec.indices.len().to_string()));
        slurm.push(("SLURM_ARRAY_TASK_MIN", first.to_string()));
        slurm.push(("SLURM_ARRAY_TASK_MAX", last.to_string()));
        let step = spec.indices.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1);
        slurm.push(("SLURM_ARRAY_TASK_STEP", step.to_string()));
    }
    if given.last("open-mode").is_some() {
        // What srun inside the job opens its output files with.
        slurm.push(("SLURM_OPEN_MODE", if append { "a" } else { "t" }.to_owned()));
    }
    environment.extend(slurm.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Ok(SubmitBatchJob {
        batch: JobBatch {
            name,
            script,
            arguments,
            workdir,
            stdout,
            stderr,
            append,
            environment,
            comment: given.last("comment").map(str::to_owned),
            partition,
            directives: passed_on(given),
        },
        run: RunJob {
            station_id,
            lz_id,
            cpu_count: Some(cpu_count),
            memory_amount,
            gpu_count,
            time_limit,
            after_ok,
            after_any,
            after_not_ok,
            project_id,
            signal,
            requeue: given.has("requeue").then_some(!given.has("no-requeue")),
            // A batch script runs on its first node, as Slurm's does; it starts the others' tasks.
            nodes: (nodes > 1).then_some(nodes),
            launch: (nodes > 1).then_some(mission_api::Launch::First),
            ..Default::default()
        },
        array: array.map(|(spec, _)| spec),
        hold: given.has("hold"),
    })
}

/// GPUs from `-G/--gpus [type:]N` or `--gres gpu[:type]:N`.
fn gpus(given: &Parsed) -> Result<Option<u32>, Failure> {
    let count = |text: &str| text.rsplit(':').next().and_then(|n| n.parse::<u32>().ok());
    if let Some(gpus) = given.last("gpus").or(given.last("gpus-per-node")) {
        return count(gpus).map(Some).ok_or_else(|| Failure::new(1, "Invalid --gpus specification"));
    }
    let Some(gres) = given.last("gres") else { return Ok(None) };
    let mut total = None;
    for entry in gres.split(',').filter(|e| !e.is_empty() && *e != "none") {
        let kind = entry.split(':').next().unwrap_or_default();
        if kind != "gpu" {
            return Err(Failure::new(1, "Invalid generic resource (gres) specification"));
        }
        let n = if entry == "gpu" { Some(1) } else { count(entry) };
        let n = n.ok_or_else(|| Failure::new(1, "Invalid generic resource (gres) specification"))?;
        total = Some(total.unwrap_or(0) + n);
    }
    Ok(total)
}

/// The jobs a `--dependency` names, by kind: `afterok:ID[:ID…]`, `afterany:…` and `afternotok:…`, joined by
/// commas (all must hold); each number is looked up as the caller may see it.
async fn dependencies(spec: Option<&str>, site: &Site) -> Result<[Vec<Uuid>; 3], Failure> {
    let (mut after_ok, mut after_any, mut after_not_ok) = (Vec::new(), Vec::new(), Vec::new());
    let Some(spec) = spec.filter(|s| !s.is_empty()) else { return Ok([after_ok, after_any, after_not_ok]) };
    let problem = || Failure::new(1, "Batch job submission failed: Job dependency problem");
    if spec.contains('?') {
        return Err(Failure::new(
            1,
            "Batch job submission failed: Job dependency problem (any-of dependencies, `?`, are not taken)",
        ));
    }
    for part in spec.split(',') {
        let mut pieces = part.split(':');
        let list = match pieces.next().unwrap_or_default() {
            "afterok" => &mut after_ok,
            "afterany" => &mut after_any,
            "afternotok" => &mut after_not_ok,
            _ => return Err(problem()),
        };
        let before = list.len();
        for id in pieces {
            let number: u64 = id.split('+').next().unwrap_or_default().parse().map_err(|_| problem())?;
            let job = site.client.get_job(JobRef::Number(number)).await.map_err(|_| problem())?;
            list.push(job.job_id);
        }
        if list.len() == before {
            return Err(problem());
        }
    }
    Ok([after_ok, after_any, after_not_ok])
}

/// The variables `--export` passes: all of this environment (`ALL`, the default), none
/// (`NONE`), or those named, each `NAME` or `NAME=value` (with `ALL` among them: all, and these).
fn exported(spec: Option<&str>) -> Result<BTreeMap<String, String>, Failure> {
    let spec = spec.unwrap_or("ALL");
    let mut environment = BTreeMap::new();
    let items: Vec<&str> = spec.split(',').filter(|i| !i.is_empty()).collect();
    let all = items.iter().any(|i| i.eq_ignore_ascii_case("ALL"));
    if all {
        environment.extend(std::env::vars().filter(|(name, _)| !name.starts_with("SLURM_")));
    }
    for item in items {
        if item.eq_ignore_ascii_case("ALL") || item.eq_ignore_ascii_case("NONE") {
            continue;
        }
        match item.split_once('=') {
            Some((name, value)) => environment.insert(name.to_owned(), value.to_owned()),
            None => environment.insert(item.to_owned(), std::env::var(item).unwrap_or_default()),
        };
    }
    Ok(environment)
}

/// What a refused submission prints, in Slurm's words where it has them.
fn submission_failure(e: mission_client::Error) -> Failure {
    match e.problem() {
        Some(problem) => Failure::new(1, format!("Batch job submission failed: {}", problem.detail)),
        None => Failure::new(1, format!("Batch job submission failed: {e}")),
    }
}

const USAGE: &str = "Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]

Submits a batch script to the Mission Compute Service, as Slurm's sbatch does: it runs in this
directory (or --chdir), as your own account on a landing zone sharing it, its output in
slurm-%j.out (or --output/--error). Options may also be given in #SBATCH lines of the script.

  -J, --job-name=NAME         the job's name
  -n, --ntasks=N              tasks (CPUs are tasks times --cpus-per-task)
  -c, --cpus-per-task=N       CPUs per task
      --mem=SIZE[K|M|G|T]     memory (megabytes without a unit)
      --mem-per-cpu=SIZE      memory per CPU
  -G, --gpus=[TYPE:]N         GPUs (also --gres=gpu[:TYPE]:N)
  -t, --time=LIMIT            time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
  -o, --output=FILE           standard output (%j %x %A %a %u %N %% are filled in)
  -e, --error=FILE            standard error (with the output by default)
  -D, --chdir=DIR             the directory it runs in
  -p, --partition=STATION     the station to run on
  -w, --nodelist=LZ           the landing zone to run on
  -A, --account=PROJECT       the project to charge
      --comment=TEXT          a comment
  -d, --dependency=afterok|afterany|afternotok:ID[:ID],…
      --export=ALL|NONE|VARS  the environment passed
      --wrap=COMMAND          a script of this one command
      --parsable              print only the job id
  -W, --wait                  wait for the job, and exit with its exit code
  -H, --hold                  hold it until `scontrol release ID`
  -Q, --quiet                 print nothing but errors

Options this service does not honour are accepted with a warning; a Slurm gateway passes
those its Slurm can (--mail-type, --constraint, --exclusive, --qos…) on to the real sbatch.
";
