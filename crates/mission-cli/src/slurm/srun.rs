//! `srun`: inside a batch job (`SLURM_JOB_ID` set), runs its command as a step of that job: `-n`
//! tasks over its nodes (this landing zone's here, the others' through `mission lz-exec`), each
//! told its rank (`SLURM_PROCID`), their output in `--output`/
//! `--error` where given (as submitit's and snakemake's job scripts call it). Outside one, it
//! queues a batch job of the command (on each of `-N` nodes) and streams its output as it runs,
//! exiting with its code, as `mission run --follow` does.

use std::process::Stdio;

use mission_api::batch::{OutputNames, fill_output_pattern};
use mission_client::JobStatus;

use super::options::{self, Parsed, Spec, Takes, flag, ignored, value};
use super::sbatch::{self, job_options};
use super::{Failure, Site, report};

job_options!(
    OPTIONS,
    flag("unbuffered", Some('u')),
    value("jobid", None),
    ignored("cpu-bind", None, Takes::Value),
    ignored("mpi", None, Takes::Value),
    ignored("label", Some('l'), Takes::Nothing),
    ignored("kill-on-bad-exit", Some('K'), Takes::Optional),
    ignored("overlap", None, Takes::Nothing),
    ignored("exact", None, Takes::Nothing),
    ignored("exclusive", None, Takes::Optional),
    ignored("pty", None, Takes::Nothing),
    ignored("input", Some('i'), Takes::Value),
    ignored("mem-bind", None, Takes::Value),
    ignored("distribution", Some('m'), Takes::Value),
    ignored("constraint", Some('C'), Takes::Value),
    ignored("qos", Some('q'), Takes::Value),
    ignored("signal", None, Takes::Value),
    ignored("wait", Some('W'), Takes::Value),
    ignored("gpu-bind", None, Takes::Value),
    ignored("cpu-freq", None, Takes::Value),
    ignored("hint", None, Takes::Value),
);

pub async fn run(args: &[String]) -> u8 {
    match step_or_job(args).await {
        Ok(code) => code,
        Err(failure) => report("srun", Err(failure)),
    }
}

async fn step_or_job(args: &[String]) -> Result<u8, Failure> {
    let given = options::parse(args, OPTIONS, true)
        .map_err(|e| Failure::new(1, format!("{e}\nTry \"srun --help\" for more information")))?;
    if given.has("version") {
        super::print_version();
        return Ok(0);
    }
    if given.has("help") || given.has("usage") {
        println!("Usage: srun [OPTIONS...] executable [args...]");
        return Ok(0);
    }
    if given.operands.is_empty() {
        return Err(Failure::new(1, "No command given to execute."));
    }
    match std::env::var("SLURM_JOB_ID") {
        Ok(job) if given.last("jobid").is_none_or(|id| id == job) => step(&given, &job).await,
        _ => job(&given).await,
    }
}

/// The command as `-n` tasks of the batch job this runs in, spread over `-N` of its nodes (all
/// of them by default; one task per node unless `-n` or `--ntasks-per-node` say otherwise), in
/// blocks as Slurm's default distribution does: this node's tasks start here, the other nodes'
/// through `mission lz-exec` (inside their part of the job, as their user), in the same working
/// directory.
async fn step(given: &Parsed, job: &str) -> Result<u8, Failure> {
    let count = |option: &str| -> Result<Option<u32>, Failure> {
        given
            .last(option)
            .map(|n| {
                let min = n.split('-').next().unwrap_or(n);
                min.parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| Failure::new(1, format!("Invalid numeric value \"{n}\" for --{option}.")))
            })
            .transpose()
    };
    // The job's nodes, by the addresses its ranks reach them at (rank order).
    let hosts: Vec<String> = match std::env::var("MISSION_HOSTS") {
        Ok(hosts) if std::env::var_os("MISSION_EXEC_SOCKET").is_some() => hosts.split(',').map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let allocated = hosts.len().max(1) as u32;
    let (asked_tasks, per_node) = (count("ntasks")?, count("ntasks-per-node")?);
    let nodes = match count("nodes")? {
        Some(n) if n > allocated => {
            return Err(Failure::new(
                1,
                format!(
                    "Unable to create step for job {job}: Requested node configuration is not available ({n} nodes asked, the job has {allocated})"
                ),
            ));
        }
        Some(n) => n,
        None => asked_tasks.map_or(allocated, |n| n.min(allocated)),
    };
    let tasks = asked_tasks.or(per_node.map(|n| n * nodes)).unwrap_or(nodes);
    // Block distribution: node n's tasks follow node n-1's, the first `tasks % nodes` nodes
    // taking one more.
    let (base, extra) = (tasks / nodes, tasks % nodes);
    let first_task = |n: u32| n * base + n.min(extra);
    let node_of = |task: u32| (0..nodes).rev().find(|n| first_task(*n) <= task).unwrap_or(0);
    let append = match given.last("open-mode") {
        Some("append") => true,
        Some("truncate") => false,
        Some(_) => return Err(Failure::new(1, "Invalid --open-mode specification")),
        None => std::env::var("SLURM_OPEN_MODE").is_ok_and(|mode| mode.starts_with('a')),
    };
    let var = |name: &str| std::env::var(name).ok();
    let (name, user, node) = (
        var("SLURM_JOB_NAME").unwrap_or_default(),
        var("USER").unwrap_or_default(),
        var("SLURMD_NODENAME").unwrap_or_default(),
    );
    let names = OutputNames {
        number: job.parse().unwrap_or(0),
        name: &name,
        array_number: var("SLURM_ARRAY_JOB_ID").and_then(|n| n.parse().ok()),
        array_index: var("SLURM_ARRAY_TASK_ID").and_then(|n| n.parse().ok()),
        user: &user,
        node: &node,
    };
    let open = |pattern: &str, task: u32| -> Result<std::fs::File, Failure> {
        let path = fill_output_pattern(&pattern.replace("%t", &task.to_string()).replace("%s", "0"), &names);
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| Failure::new(1, format!("Could not open stdout file {path}: {e}")))
    };
    let here = match given.last("chdir") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::current_dir().map_err(|e| Failure::new(1, format!("getcwd: {e}")))?,
    };
    let mut children = Vec::new();
    for task in 0..tasks {
        let node_id = node_of(task);
        let step_env = [
            ("SLURM_STEP_ID", "0".to_owned()),
            ("SLURM_STEPID", "0".to_owned()),
            ("SLURM_PROCID", task.to_string()),
            ("SLURM_LOCALID", (task - first_task(node_id)).to_string()),
            ("SLURM_NODEID", node_id.to_string()),
            ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
            ("SLURM_STEP_NUM_NODES", nodes.to_string()),
            ("SLURM_NTASKS", tasks.to_string()),
        ];
        let mut command = match hosts.get(node_id as usize).filter(|_| node_id > 0) {
            // Another node's task: started there, in the same directory, with what a task
            // of this job knows.
            Some(host) => {
                let mut words = vec!["cd".to_owned(), shell_quote(&here.to_string_lossy()), "&&".into()];
                words.extend(["exec".into(), "env".into()]);
                let passed = ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"]
                    .into_iter()
                    .chain(["SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_SUBMIT_DIR"])
                    .filter_map(|name| Some((name, std::env::var(name).ok()?)));
                let vars = step_env.iter().cloned().chain(passed).chain([("SLURMD_NODENAME", host.clone())]);
                words.extend(vars.map(|(name, value)| shell_quote(&format!("{name}={value}"))));
                words.extend(given.operands.iter().map(|word| shell_quote(word)));
                let own = std::env::current_exe().map_err(|e| Failure::new(1, format!("finding mission: {e}")))?;
                let mut command = tokio::process::Command::new(own);
                command.arg("lz-exec").arg(host).arg(words.join(" "));
                command
            }
            None => {
                let mut command = tokio::process::Command::new(&given.operands[0]);
                command.args(&given.operands[1..]).current_dir(&here).envs(step_env);
                command
            }
        };
        let stdout = given.last("output").map(|p| open(p, task)).transpose()?;
        let stderr = match (given.last("error"), &stdout) {
            (Some(pattern), _) => Some(open(pattern, task)?),
            (None, Some(out)) => Some(out.try_clone().map_err(|e| Failure::new(1, e.to_string()))?),
            (None, None) => None,
        };
        command.stdout(stdout.map_or_else(Stdio::inherit, Stdio::from));
        command.stderr(stderr.map_or_else(Stdio::inherit, Stdio::from));
        let child = command.spawn().map_err(|e| Failure::new(2, format!("execve(): {}: {e}", given.operands[0])))?;
        let node = hosts.get(node_id as usize).cloned().unwrap_or_else(|| node.clone());
        children.push((node, child));
    }
    let mut code = 0u8;
    for (task, (node, mut child)) in children.into_iter().enumerate() {
        let status = child.wait().await.map_err(|e| Failure::new(1, e.to_string()))?;
        use std::os::unix::process::ExitStatusExt;
        let this = match (status.code(), status.signal()) {
            (Some(c), _) => c as u8,
            (None, Some(signal)) => 128 + signal as u8,
            _ => 1,
        };
        if this != 0 {
            eprintln!("srun: error: {node}: task {task}: Exited with exit code {this}");
            if code == 0 {
                code = this;
            }
        }
    }
    Ok(code)
}

/// The command as a batch job of its own, its output followed; the job's exit code.
async fn job(given: &Parsed) -> Result<u8, Failure> {
    let quoted: Vec<String> = given.operands.iter().map(|word| shell_quote(word)).collect();
    let script = format!("#!/bin/sh\nexec {}\n", quoted.join(" "));
    let name = given.operands[0].rsplit('/').next().unwrap_or(&given.operands[0]).to_owned();
    // The nodes' names too: a failure names the node it ran on.
    let site = Site::open_for(super::Needs { nodes: true, ..sbatch::needs(given) }).await?;
    let mut request = sbatch::request(given, &site, script, name, Vec::new()).await?;
    if given.last("output").is_none() {
        // Into the job's log, which this follows.
        request.batch.stdout.clear();
    }
    // On several nodes the command runs on each, as Slurm's srun runs a task on every node.
    let nodes = request.run.nodes.unwrap_or(1);
    if nodes > 1 {
        request.run.launch = Some(mission_api::Launch::Each);
    }
    let job = site.client.submit_batch_job(&request).await.map_err(|e| {
        Failure::new(
            1,
            format!(
                "Unable to allocate resources: {}",
                e.problem().map_or_else(|| e.to_string(), |p| p.detail.clone())
            ),
        )
    })?;
    if !given.has("quiet") {
        eprintln!("srun: job {} queued and waiting for resources", job.number);
    }
    let follows = (0..nodes).map(|node| crate::commands::jobs::follow(&site.client, job.job_id, node));
    for followed in futures_util::future::join_all(follows).await {
        followed?;
    }
    let ended = site.client.wait_for_job(job.job_id).await?;
    Ok(match ended.status {
        JobStatus::Completed => 0,
        _ => {
            let code = ended.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8;
            eprintln!("srun: error: {}: task 0: Exited with exit code {code}", site.node(ended.lz_id));
            code
        }
    })
}

/// `word` quoted for a POSIX shell.
fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}
