//! What an agent keeps of the jobs it runs, and what a job's life may use of the agent.
//!
//! [`JobBook`]: each running job's stop switch and attempt, and the reports for the server,
//! queued in order and delivered by [`deliver_reports`]; the ends it has not taken yet are
//! named in the next hello. [`JobContext`]: what a job's lifecycle, a runner, a session or a
//! shell is handed — the way to the server, the book, the input cache, the sessions and the
//! shells — and nothing else of the agent, whose connection loop owns the rest.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use mission_api::lz::{Assignment, InputFile, Report};
use mission_api::{JobStatus, JobUsage};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::cache::{InputCache, Inputs, Lookup};
use crate::client::LzClient;
use crate::runner::{JobError, Outcome, StopSwitch, stop_ordered};
use crate::sessions::Sessions;
use crate::shell::Shells;

/// A job the agent runs.
struct RunningJob {
    /// Its stop switch: the grace period it has after `SIGTERM`, once stopped.
    stop: watch::Sender<Option<std::time::Duration>>,
    /// Which of its attempts this is; its reports say so.
    attempt: u32,
}

/// The jobs an agent runs and the reports it owes the server of them.
pub(crate) struct JobBook {
    running: Mutex<HashMap<Uuid, RunningJob>>,
    /// Jobs that ended here whose final report the server has not taken yet. A hello names
    /// them as running: a server that came up meanwhile (restarted, or a replica that took the
    /// lead) would otherwise count them lost, since it takes no report before the hello.
    unreported_ends: Mutex<HashSet<Uuid>>,
    reports: mpsc::UnboundedSender<Report>,
    /// The jobs that ran when the agent began to leave: their stops are not reported.
    left_behind: Mutex<HashSet<Uuid>>,
}

impl JobBook {
    /// An empty book, and the queue its reports are delivered from ([`deliver_reports`]).
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Report>) {
        let (reports, queue) = mpsc::unbounded_channel();
        let book = Self {
            running: Mutex::default(),
            unreported_ends: Mutex::default(),
            reports,
            left_behind: Mutex::default(),
        };
        (book, queue)
    }

    /// Enters a run of `job_id` (its `attempt`); answers its stop switch, and the sender that
    /// names this run to [`JobBook::leave_run`].
    pub fn enter_run(&self, job_id: Uuid, attempt: u32) -> (StopSwitch, watch::Sender<Option<std::time::Duration>>) {
        let (stop, stopped) = watch::channel(None);
        let this_run = stop.clone();
        self.running.lock().expect("not poisoned").insert(job_id, RunningJob { stop, attempt });
        (stopped, this_run)
    }

    /// Takes the job off the book as its run `this_run` ends, unless another run of it (a later
    /// attempt, or the same one again after its room was reclaimed) has started meanwhile.
    pub fn leave_run(&self, job_id: Uuid, this_run: &watch::Sender<Option<std::time::Duration>>) {
        let mut running = self.running.lock().expect("not poisoned");
        if running.get(&job_id).is_some_and(|job| job.stop.same_channel(this_run)) {
            running.remove(&job_id);
        }
    }

    /// The attempt of the job that the agent runs (1 where it runs none: an old report).
    fn attempt_of(&self, job_id: Uuid) -> u32 {
        self.running.lock().expect("not poisoned").get(&job_id).map_or(1, |job| job.attempt)
    }

    /// A report of the move of a job this agent runs, to `status` at `at`.
    fn report_of(&self, job_id: Uuid, status: JobStatus, at: chrono::DateTime<chrono::Utc>) -> Report {
        Report { attempt: Some(self.attempt_of(job_id)), ..Report::new(job_id, status, at) }
    }

    /// Queues a report of a job's move; it is delivered in order, retried until the server
    /// takes it.
    pub fn report(
        &self,
        job_id: Uuid,
        status: JobStatus,
        exit_code: Option<i32>,
        reason: Option<String>,
        limits: Option<String>,
    ) {
        let report = Report { exit_code, reason, limits, ..self.report_of(job_id, status, chrono::Utc::now()) };
        self.queue(report);
    }

    /// Queues the report of a job's end: its final status, exit code and reason, and what it
    /// used where that was measured.
    pub fn report_end(
        &self,
        job_id: Uuid,
        (status, exit_code, reason): Outcome,
        usage: Option<JobUsage>,
        task_log: Option<mission_api::tes::TesTaskLog>,
    ) {
        let task_log = task_log.map(Box::new);
        let report =
            Report { exit_code, reason, usage, task_log, ..self.report_of(job_id, status, chrono::Utc::now()) };
        self.queue(report);
    }

    /// Queues the report that a job's program started at `at` (seen after the fact, as in a
    /// batch system), with how its limits are enforced.
    pub fn report_started(&self, job_id: Uuid, at: chrono::DateTime<chrono::Utc>, limits: String) {
        let report = Report { limits: Some(limits), ..self.report_of(job_id, JobStatus::Running, at) };
        self.queue(report);
    }

    /// Queues `report` for [`deliver_reports`], unless it is the stop of a job the agent killed
    /// as it left.
    fn queue(&self, report: Report) {
        if report.status == JobStatus::Stopped
            && self.left_behind.lock().expect("not poisoned").contains(&report.job_id)
        {
            return;
        }
        if report.status.is_final() {
            self.unreported_ends.lock().expect("not poisoned").insert(report.job_id);
        }
        let _ = self.reports.send(report);
    }

    /// The jobs to name in a hello: those running here, and those whose end is not reported yet.
    pub fn running_or_unreported(&self) -> Vec<Uuid> {
        let mut ids: HashSet<Uuid> = self.running.lock().expect("not poisoned").keys().copied().collect();
        ids.extend(self.unreported_ends.lock().expect("not poisoned").iter());
        ids.into_iter().collect()
    }

    /// Whether the agent runs `job_id` now (it may not have started its program yet).
    pub fn runs(&self, job_id: Uuid) -> bool {
        self.running.lock().expect("not poisoned").contains_key(&job_id)
    }

    /// Whether the server took the end of every job that ended here.
    pub fn ends_delivered(&self) -> bool {
        self.unreported_ends.lock().expect("not poisoned").is_empty()
    }

    /// Sets the stop switch of a job this agent runs, giving it `grace` after `SIGTERM`; a
    /// second stop may only shorten the grace (a user's stop of a job being reclaimed kills it).
    pub fn stop_job(&self, job_id: Uuid, grace: std::time::Duration) {
        if let Some(job) = self.running.lock().expect("not poisoned").get(&job_id) {
            job.stop.send_if_modified(|stop| {
                let shorter = stop.is_none_or(|given| grace < given);
                if shorter {
                    *stop = Some(grace);
                }
                shorter
            });
        }
    }

    /// As the agent leaves: the jobs running now are left behind (their stops go unreported),
    /// and killed unless they `outlive` the agent.
    pub fn leave_behind(&self, outlive: bool) {
        let running = self.running.lock().expect("not poisoned");
        self.left_behind.lock().expect("not poisoned").extend(running.keys().copied());
        if !outlive {
            for job in running.values() {
                let _ = job.stop.send(Some(std::time::Duration::ZERO));
            }
        }
    }
}

/// Sends the `book`'s queued reports in batches, in order, retrying each batch until the server
/// takes it.
pub(crate) async fn deliver_reports(
    client: Arc<LzClient>,
    book: Arc<JobBook>,
    mut queue: mpsc::UnboundedReceiver<Report>,
) {
    let mut batch = Vec::new();
    let gather = client.timings().report_gather;
    loop {
        if batch.is_empty() {
            match queue.recv().await {
                Some(report) => batch.push(report),
                None => return,
            }
        }
        let deadline = tokio::time::Instant::now() + gather;
        loop {
            while let Ok(report) = queue.try_recv() {
                batch.push(report);
            }
            if batch.iter().any(|r| r.status.is_final()) {
                break;
            }
            match tokio::time::timeout_at(deadline, queue.recv()).await {
                Ok(Some(report)) => batch.push(report),
                Ok(None) | Err(_) => break,
            }
        }
        if let Err(e) = client.delivered(|| client.reports(&batch)).await {
            // The server will never take these (its answer says why): do not block the rest.
            tracing::error!("reports refused: {e}");
        }
        let mut unreported = book.unreported_ends.lock().expect("not poisoned");
        for report in batch.drain(..).filter(|r| r.status.is_final()) {
            unreported.remove(&report.job_id);
        }
    }
}

/// What a job's life may use of its agent, whatever runs it.
#[derive(Clone)]
pub(crate) struct JobContext {
    /// The way to the server.
    pub client: Arc<LzClient>,
    /// The jobs running here and the reports owed of them.
    pub book: Arc<JobBook>,
    /// Inputs, by content.
    pub cache: Arc<InputCache>,
    /// The sessions among the jobs, and the tunnels they are reached through.
    pub sessions: Arc<Sessions>,
    /// The running jobs a shell can be opened in.
    pub shells: Arc<Shells>,
}

impl JobContext {
    /// Queues the report of a job's end ([`JobBook::report_end`]); a session of it is forgotten.
    pub fn report_end(
        &self,
        job_id: Uuid,
        outcome: Outcome,
        usage: Option<JobUsage>,
        task_log: Option<mission_api::tes::TesTaskLog>,
    ) {
        self.sessions.forget(job_id);
        self.book.report_end(job_id, outcome, usage, task_log);
    }

    /// Reports the job `staging` and brings its inputs into the content cache: each missing one
    /// downloaded once and checked, unless a stop comes first. The one staging loop of every
    /// runner; a failure is the job's reason.
    pub async fn stage_inputs(&self, job: &Assignment, stop: &mut StopSwitch) -> Result<Inputs, JobError> {
        self.book.report(job.job_id, JobStatus::Staging, None, None, None);
        if let Some(task) = &job.task {
            return tokio::select! {
                staged = self.cache.stage_task(&self.client, job.job_id, task) => {
                    staged.map(Inputs::Cached).map_err(|e| JobError::Staging(format!("an input could not be fetched: {e}")))
                }
                _ = stop_ordered(stop) => Ok(Inputs::Stopped),
            };
        }
        let mut downloaded = false;
        loop {
            match self.cache.lookup(&job.files) {
                Ok(inputs) => return Ok(Inputs::Cached(inputs)),
                Err(Lookup::Invalid(why)) => return Err(JobError::Staging(why)),
                Err(Lookup::Missing(_)) if downloaded => {
                    return Err(JobError::Staging("the input cache changed meanwhile".into()));
                }
                Err(Lookup::Missing(missing)) => {
                    let missing: Vec<&InputFile> = missing.into_iter().map(|i| &job.files[i]).collect();
                    tokio::select! {
                        fetched = self.cache.download(&self.client, job.job_id, &missing) => {
                            fetched.map_err(|e| JobError::Staging(e.to_string()))?;
                        }
                        _ = stop_ordered(stop) => return Ok(Inputs::Stopped),
                    }
                    downloaded = true;
                }
            }
        }
    }
}
