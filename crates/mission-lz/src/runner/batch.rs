//! Batch jobs on a process landing zone ([`mission_api::batch`]): the script the job carries runs
//! in its directory, as its user's mapped account, its output in the files it names there.
//!
//! Nothing is staged and nothing collected: the directory is on a path this host shares with
//! the hosts jobs are submitted from. The script is written to the job's private work dir (its
//! user's), so changing the submitted file later changes nothing, as with Slurm. The output
//! files are opened by a shell running as the job's user, never by the agent: the agent opens
//! nothing in a user's directory.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use mission_api::JobBatch;
use mission_api::batch::{OutputNames, fill_output_pattern};
use mission_api::lz::Assignment;

/// How a batch job's program starts.
pub(super) struct BatchStart {
    /// `sh -c` with the output redirected, then `bash SCRIPT ARGS…`.
    pub command: Vec<String>,
    /// Its environment: the one it was submitted with, then the `SLURM_*` variables of its run.
    pub env: Vec<(String, OsString)>,
    /// Where it runs.
    pub workdir: PathBuf,
}

/// Opens the output files as the job's user (truncated, as Slurm's default open mode does),
/// then runs the rest of the arguments; without an output file, the output stays the job's log.
const REDIRECT: &str = r#"out=$1 err=$2; shift 2
if [ -z "$out" ]; then exec "$@"; fi
if [ -n "$err" ]; then exec "$@" >"$out" 2>"$err"; else exec "$@" >"$out" 2>&1; fi"#;

/// [`REDIRECT`], appending (`--open-mode=append`).
const APPEND: &str = r#"out=$1 err=$2; shift 2
if [ -z "$out" ]; then exec "$@"; fi
if [ -n "$err" ]; then exec "$@" >>"$out" 2>>"$err"; else exec "$@" >>"$out" 2>&1; fi"#;

/// The name of the script's copy in the job's private work dir.
const SCRIPT_FILE: &str = ".mission-batch-script";

/// Why this landing zone does not run `job`, a batch job of `batch`, if it does not.
pub(super) fn refusal(shared: &[String], mapped: bool, job: &Assignment, batch: &JobBatch) -> Option<String> {
    if !mission_api::lz::shares(shared, &batch.workdir) {
        return Some(format!(
            "refused by the landing zone: it does not share {} (its --shared-path names what it does)",
            batch.workdir
        ));
    }
    if !mapped {
        return Some(format!(
            "refused by the landing zone: a batch job runs as its user's own account, and mission user {:?} has \
             none in its user map (--user-map)",
            job.username
        ));
    }
    None
}

/// Writes the script to `private` (the job's work dir, owned by `ids`) and says how the job
/// starts: `base` is what every job's environment starts from (`PATH` and the locale), under
/// the environment the job was submitted with.
pub(super) fn prepare(
    job: &Assignment,
    batch: &JobBatch,
    private: &Path,
    ids: Option<(u32, u32)>,
    base: &[(&'static str, OsString)],
    gang: &[(&'static str, String)],
) -> io::Result<BatchStart> {
    let script = private.join(SCRIPT_FILE);
    std::fs::write(&script, &batch.script)?;
    if let Some((uid, gid)) = ids {
        rustix::fs::chown(&script, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o500))?;

    let host = short_hostname();
    let names = OutputNames {
        number: job.number,
        name: &batch.name,
        array_number: job.array_number,
        array_index: job.array_index,
        user: &job.username,
        node: &host,
    };
    let stdout = fill_output_pattern(&batch.stdout, &names);
    let stderr = batch.stderr.as_deref().map(|pattern| fill_output_pattern(pattern, &names)).unwrap_or_default();
    let redirect = if batch.append { APPEND } else { REDIRECT };
    let mut command = vec!["/bin/sh".to_owned(), "-c".to_owned(), redirect.to_owned(), "sh".to_owned(), stdout, stderr];
    command.extend(["/bin/bash".to_owned(), script.to_string_lossy().into_owned()]);
    command.extend(batch.arguments.iter().cloned());

    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |name: &str, value: OsString| {
        env.retain(|(n, _)| n != name);
        env.push((name.to_owned(), value));
    };
    for (name, value) in base {
        set(name, value.clone());
    }
    for (name, value) in &batch.environment {
        set(name, value.into());
    }
    let number = job.number.to_string();
    // A gang's nodes, by the addresses its ranks reach them at; else this host.
    let (nodelist, nodes) = match &job.node {
        Some(node) => (node.hosts.join(","), node.nodes.to_string()),
        None => (host.clone(), "1".to_owned()),
    };
    let run: Vec<(&str, String)> = vec![
        ("SLURM_JOB_ID", number.clone()),
        ("SLURM_JOBID", number),
        ("SLURM_JOB_NAME", batch.name.clone()),
        ("SLURM_JOB_USER", job.username.clone()),
        ("SLURM_JOB_NODELIST", nodelist.clone()),
        ("SLURM_NODELIST", nodelist),
        ("SLURMD_NODENAME", host.clone()),
        ("SLURM_NODEID", job.node.as_ref().map_or(0, |node| node.rank).to_string()),
        // A batch script is task 0; a job `srun` submitted runs one task on each node.
        ("SLURM_PROCID", job.node.as_ref().map_or(0, |node| node.rank).to_string()),
        ("SLURM_NNODES", nodes.clone()),
        ("SLURM_JOB_NUM_NODES", nodes),
        ("SLURM_CPUS_ON_NODE", job.cpu_count.to_string()),
        ("SLURM_JOB_CPUS_PER_NODE", job.cpu_count.to_string()),
        ("SLURM_MEM_PER_NODE", job.memory_amount.to_string()),
        ("SLURM_TMPDIR", "/tmp".into()),
        ("SLURM_CLUSTER_NAME", "mission".into()),
        ("MISSION_ID", job.mission_id.to_string()),
        ("JOB_ID", job.job_id.to_string()),
        ("CUDA_VISIBLE_DEVICES", job.gpu_indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
    ];
    // Slurm sets it once a job has been requeued.
    let restarts = (job.attempt > 1).then(|| ("SLURM_RESTART_COUNT", (job.attempt - 1).to_string()));
    for (name, value) in run.into_iter().chain(restarts).chain(gang.iter().cloned()) {
        set(name, value.into());
    }
    // Where sbatch ran, which its environment says; else where the job runs.
    if !batch.environment.contains_key("SLURM_SUBMIT_DIR") {
        set("SLURM_SUBMIT_DIR", batch.workdir.clone().into());
    }
    if let (Some(array), Some(index)) = (job.array_number, job.array_index) {
        set("SLURM_ARRAY_JOB_ID", array.to_string().into());
        set("SLURM_ARRAY_TASK_ID", index.to_string().into());
    }
    Ok(BatchStart { command, env, workdir: PathBuf::from(&batch.workdir) })
}

/// This host's name up to its first dot, as Slurm names nodes.
fn short_hostname() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().into_owned();
    name.split('.').next().unwrap_or_default().to_owned()
}
