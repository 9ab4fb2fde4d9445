//! Batch jobs (`POST /api/v1/jobs`, what `sbatch` sends): a script run in the directory it was
//! submitted from, as its user's own account, with its output in files there (see
//! [`mission_api::batch`]).
//!
//! A batch job needs no mission made first: it belongs to its user's `batch jobs` mission in the
//! project it is charged to, made on first use (a `command` mission with no files), so it is
//! listed, charged, audited and stopped like every other job. Its command reads `bash SCRIPT
//! ARGS…` for people; the landing zone runs the script it carries.

use mission_api::batch::ArraySpec;
use mission_api::{Job, JobBatch, PendingKind, PendingReason, SubmitBatchJob, batch};
use serde_json::json;
use uuid::Uuid;

use super::audit::{self, Change};
use super::{DomainError, DomainResult, Principal, jobs, missions, projects};
use crate::AppState;

/// The name of a user's mission of batch jobs in a project.
pub const BATCH_MISSION: &str = "batch jobs";

/// Queues a batch job: checked, in its user's batch mission of its project.
pub async fn submit(app: &AppState, who: Principal, req: SubmitBatchJob) -> DomainResult<Job> {
    let SubmitBatchJob { batch, run, array, hold } = req;
    check(&batch)?;
    let array = array.map(|spec| ArraySpec::parse(&spec).map_err(|e| DomainError::invalid("array", e))).transpose()?;
    if run.session.is_some() {
        return Err(DomainError::invalid("run.session", "a batch job is not an interactive session"));
    }
    if run.image.is_some() {
        return Err(DomainError::invalid("run.image", "a batch job runs on its host as its user, not in an image"));
    }
    let project_id = run.project_id.unwrap_or(who.user_id);
    projects::ensure_may_run(app, who, project_id, "run.project_id").await?;
    let mission_id = batch_mission(app, who, project_id).await?;
    let mut job = jobs::new_job(app, who, mission_id, run).await?;
    job.command = std::iter::once("bash".to_owned())
        .chain(std::iter::once(batch.name.clone()))
        .chain(batch.arguments.iter().cloned())
        .collect();
    let given = json!({
        "mission_id": mission_id,
        "name": batch.name,
        "workdir": batch.workdir,
        "station_id": job.station_id,
        "cpu_count": job.cpu_count,
        "memory_amount": job.memory_amount,
        "gpu_count": job.gpu_count,
    });
    job.batch = Some(batch);
    if hold {
        job.pending_reason =
            Some(PendingReason { kind: PendingKind::Held, detail: "held at submission until released".into() });
    }
    let Some(array) = array else {
        audit::note(who, Change::new("job.submit", "job", job.job_id).in_project(job.project_id).with(given));
        return Ok(app.scheduler.submit(job).await?);
    };
    let array_id = Uuid::new_v4();
    let size = array.indices.len() as u32;
    let given = json!({ "size": size, "max_running": array.max_running, "batch": given });
    audit::note(who, Change::new("job_array.submit", "job_array", array_id).in_project(job.project_id).with(given));
    // `%N`: element k waits for element k-N to end, so at most N run at once (N chains, each
    // one element at a time).
    let ids: Vec<Uuid> = (0..size).map(|_| Uuid::new_v4()).collect();
    let max = array.max_running.map(|m| m as usize);
    let elements = array.indices.iter().enumerate().map(|(k, &index)| {
        let mut element = job.clone();
        element.job_id = ids[k];
        element.array_id = Some(array_id);
        element.array_index = Some(index);
        if let Some(max) = max.filter(|max| k >= *max) {
            element.after_any.push(ids[k - max]);
        }
        element
    });
    jobs::queue_elements(app, array_id, size, elements).await?;
    let first = app.store.job_row(ids[0]).await?;
    first.ok_or_else(|| DomainError::internal(format!("job array {array_id} was queued but is not stored")))
}

/// What is wrong with a batch job's description, if anything.
fn check(batch: &JobBatch) -> DomainResult<()> {
    if batch.script.len() > batch::MAX_SCRIPT_BYTES {
        return Err(DomainError::invalid(
            "batch.script",
            format!("the script is larger than {} bytes", batch::MAX_SCRIPT_BYTES),
        ));
    }
    if batch.script.contains('\0') {
        return Err(DomainError::invalid("batch.script", "the script holds a NUL byte"));
    }
    let name = batch.name.trim();
    if name.is_empty() || name.len() > batch::MAX_JOB_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(DomainError::invalid(
            "batch.name",
            format!("expected 1 to {} bytes without control characters", batch::MAX_JOB_NAME_BYTES),
        ));
    }
    check_path("batch.workdir", &batch.workdir, true)?;
    if !batch.stdout.is_empty() {
        check_path("batch.stdout", &batch.stdout, false)?;
    }
    if let Some(stderr) = &batch.stderr {
        check_path("batch.stderr", stderr, false)?;
    }
    let mut bytes = 0;
    for (name, value) in &batch.environment {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(DomainError::invalid(
                "batch.environment",
                format!("{name:?} is not a variable name (letters, digits and _, not starting with a digit)"),
            ));
        }
        if value.contains('\0') {
            return Err(DomainError::invalid("batch.environment", format!("{name}: the value holds a NUL byte")));
        }
        bytes += name.len() + value.len() + 2;
    }
    if bytes > batch::MAX_ENVIRONMENT_BYTES {
        return Err(DomainError::invalid(
            "batch.environment",
            format!("larger than {} bytes", batch::MAX_ENVIRONMENT_BYTES),
        ));
    }
    if batch.directives.len() > batch::MAX_DIRECTIVES {
        return Err(DomainError::invalid("batch.directives", format!("more than {}", batch::MAX_DIRECTIVES)));
    }
    if let Some(bad) = batch.directives.iter().find(|d| !batch::is_passed_on(d)) {
        return Err(DomainError::invalid(
            "batch.directives",
            format!(
                "{bad:?} is not an sbatch option a Slurm gateway passes on (--name or --name=value of {})",
                batch::PASSED_ON.join(", ")
            ),
        ));
    }
    for (field, text) in
        [("batch.arguments", batch.arguments.join("")), ("batch.comment", batch.comment.clone().unwrap_or_default())]
    {
        if text.contains('\0') {
            return Err(DomainError::invalid(field, "holds a NUL byte"));
        }
    }
    Ok(())
}

/// A directory or file a batch job names: no NUL, no `..`; the directory absolute.
fn check_path(field: &str, path: &str, absolute: bool) -> DomainResult<()> {
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(DomainError::invalid(field, "expected a path of 1 to 4096 bytes without NUL"));
    }
    if absolute && !path.starts_with('/') {
        return Err(DomainError::invalid(field, format!("{path:?} is not absolute")));
    }
    if path.split('/').any(|segment| segment == "..") {
        return Err(DomainError::invalid(field, format!("{path:?} goes up a directory (..)")));
    }
    Ok(())
}

/// The user's batch mission in `project_id`, made on first use.
async fn batch_mission(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Uuid> {
    let description = "Batch jobs submitted with sbatch: each runs the script it was submitted with.";
    missions::own_mission(app, who, project_id, BATCH_MISSION, description).await
}
