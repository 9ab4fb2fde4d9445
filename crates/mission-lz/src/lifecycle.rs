//! A job's life on a landing zone, the same for every runner, which the agent owns:
//!
//! 1. the runner may refuse the job (`Runner::refusal`), before anything is done;
//! 2. staging: its inputs come into the content cache (`Agent::stage_inputs`, reported
//!    `staging`), and the runner starts it (`Runner::start`), which reports it `running`;
//! 3. running: its stdout and stderr stream to the server from when it runs; a stop order
//!    signals it: at once, or, where the order gives a grace period (a job whose borrowed room
//!    is reclaimed), `Signal::Term` first and `Signal::Kill` once the grace runs out (a later
//!    stop may shorten it);
//! 4. uploading: once it ended (unless stopped), its results go to the server;
//! 5. the final report, with what it used, and the hand-back of what it held (in the order its
//!    runner needs: `JobHandle::RELEASE_BEFORE_REPORT`).
//!
//! A job an earlier run of the agent left running (`Runner::recover`) joins at 3.

use std::sync::Arc;

use mission_api::JobStatus;
use mission_api::lz::Assignment;
use mission_api::tes::{TesOutputFileLog, TesTaskLog};
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::cache::Inputs;
use crate::jobs::JobContext;
use crate::output::{forward_file, forward_pipe, upload_results};
use crate::runner::{
    Finished, JobError, JobEvents, JobHandle, JobOutput, Outcome, OutputSource, Runner, Signal, StopSwitch,
    TaskFinished,
};

/// Runs `job` on `runner` to its end, reporting every move; a stop switched on in `stop` ends it.
pub(crate) async fn run<R: Runner>(runner: Arc<R>, ctx: JobContext, mut job: Assignment, mut stop: StopSwitch) {
    let (job_id, session) = (job.job_id, job.session.is_some());
    // A node held for a gang's rank 0 runs a program that waits for the gang's end.
    job.command = crate::gang::command(&job);
    let started = async {
        if let Some(refusal) = runner.refusal(&job) {
            return Err(JobError::Refused(refusal));
        }
        let (job, session_env) =
            ctx.sessions.prepare(job).map_err(|e| JobError::Launch(format!("preparing the session: {e}")))?;
        let (events, runs) = JobEvents::new(ctx.clone(), job_id, session_env);
        match ctx.stage_inputs(&job, &mut stop).await? {
            Inputs::Cached(inputs) => runner.start(&job, inputs, events).await.map(|handle| Some((handle, runs))),
            Inputs::Stopped => Ok(None),
        }
    };
    match started.await {
        Ok(Some((handle, runs))) => {
            if session {
                crate::sessions::watch(ctx.clone(), job_id);
            }
            follow(&ctx, job_id, handle, runs, stop).await
        }
        Ok(None) => ctx.report_end(job_id, stopped_before_start(), None, None),
        Err(e) => ctx.report_end(job_id, failed(&e), None, None),
    }
}

/// Follows `job_id`, which an earlier run of the agent left running, to its end, as [`run`] would
/// have.
pub(crate) async fn resume<R: Runner>(runner: Arc<R>, ctx: JobContext, job_id: Uuid, stop: StopSwitch) {
    let (events, runs) = JobEvents::new(ctx.clone(), job_id, Vec::new());
    match runner.recover(job_id, events).await {
        Ok(handle) => {
            if ctx.sessions.is_session(job_id) {
                crate::sessions::watch(ctx.clone(), job_id);
            }
            follow(&ctx, job_id, handle, runs, stop).await
        }
        Err(e) => ctx.report_end(job_id, failed(&e), None, None),
    }
}

/// How a job that failed with `e` ends.
fn failed(e: &JobError) -> Outcome {
    (JobStatus::Failed, None, Some(e.to_string()))
}

/// How a job stopped while its inputs were staged ends.
fn stopped_before_start() -> Outcome {
    (JobStatus::Stopped, None, Some("stopped before it started".into()))
}

/// Follows a started job to its end: streams its output once it runs, signals it on a stop,
/// uploads its results, and reports its end with what it used.
async fn follow<H: JobHandle>(
    ctx: &JobContext,
    job_id: Uuid,
    mut handle: H,
    mut runs: watch::Receiver<bool>,
    mut stop: StopSwitch,
) {
    let mut forwarders = Vec::new();
    let mut stopping = Stopping::default();
    let (mut stop_gone, mut runs_gone) = (false, false);
    loop {
        let switch = *stop.borrow_and_update();
        if let Some(signal) = stopping.ordered(switch) {
            handle.signal(signal).await;
        }
        let running = *runs.borrow_and_update();
        if forwarders.is_empty() && running {
            forwarders = forward_output(ctx, job_id, handle.output());
        }
        tokio::select! {
            () = handle.wait() => break,
            changed = stop.changed(), if !stop_gone => stop_gone = changed.is_err(),
            changed = runs.changed(), if forwarders.is_empty() && !runs_gone => runs_gone = changed.is_err(),
            () = sleep_until(stopping.kill_at), if stopping.kill_at.is_some() => {
                stopping.kill_at = None;
                handle.signal(Signal::Kill).await;
            }
        }
    }
    ctx.shells.forget(job_id);
    // A session ended for being idle ends as sessions do, with its results.
    let idle = ctx.sessions.idle_end(job_id);
    let finished = handle.finish(stopping.ordered.is_some() && idle.is_none()).await;
    // A job given a grace (its room reclaimed, a requeue) had time to leave a checkpoint: its
    // results go to the server as a finished job's do.
    let graceful = stopping.ordered.is_some_and(|grace| !grace.is_zero());
    if forwarders.is_empty() {
        // What it wrote is sent now, in one read.
        forwarders = forward_output(ctx, job_id, handle.output());
    }
    for forwarder in forwarders {
        let _ = forwarder.await;
    }
    let mut task_log = None;
    let outcome = match finished {
        Ok(Finished { outcome, task: Some(task), .. }) => {
            let (outcome, log) = finish_task(ctx, job_id, outcome, task).await;
            task_log = Some(log);
            Ok(outcome)
        }
        Ok(Finished { outcome, .. }) if outcome.0 == JobStatus::Stopped && !graceful => Ok(outcome),
        Ok(Finished { outcome, results, .. }) => {
            ctx.book.report(job_id, JobStatus::Uploading, None, None, None);
            let outcome = match idle {
                Some(reason) => (JobStatus::Completed, None, Some(reason)),
                None => outcome,
            };
            upload_results(&ctx.client, job_id, results).await.map(|()| outcome)
        }
        Err(e) => Err(e),
    };
    let usage = handle.usage().await;
    let outcome = outcome.unwrap_or_else(|e| failed(&e));
    if H::RELEASE_BEFORE_REPORT {
        handle.release().await;
        ctx.report_end(job_id, outcome, usage, task_log);
    } else {
        // The report goes first: the next job waits for it, not for the clean-up.
        ctx.report_end(job_id, outcome, usage, task_log);
        handle.release().await;
    }
}

/// Ends a TES task's run: a completed one's outputs are uploaded (the first that cannot be
/// fails it, naming it); answers how it ended and its log.
async fn finish_task(ctx: &JobContext, job_id: Uuid, outcome: Outcome, task: TaskFinished) -> (Outcome, TesTaskLog) {
    let start_time = task.logs.first().and_then(|log| log.start_time.clone());
    let mut outcome = outcome;
    let mut uploaded = Vec::new();
    if outcome.0 == JobStatus::Completed {
        ctx.book.report(job_id, JobStatus::Uploading, None, None, None);
        match task.outputs {
            Ok(files) => {
                for file in files {
                    let opened = crate::runner::task::open_beneath(&file.place, rustix::fs::OFlags::RDONLY)
                        .map_err(|e| crate::client::Failure::Local(format!("{}: {e}", file.inside)));
                    let stored = match opened {
                        Ok(opened) => ctx.client.put_task_output(job_id, file.n, &file.under, opened).await,
                        Err(e) => Err(e),
                    };
                    match stored {
                        Ok(stored) => uploaded.push(TesOutputFileLog {
                            url: stored.url,
                            path: file.inside,
                            size_bytes: stored.size.to_string(),
                        }),
                        Err(e) => {
                            outcome = (JobStatus::Failed, None, Some(format!("uploading output {}: {e}", file.inside)));
                            break;
                        }
                    }
                }
            }
            Err(why) => outcome = (JobStatus::Failed, None, Some(why)),
        }
    }
    let log = TesTaskLog {
        logs: task.logs,
        metadata: Some([("job_id".to_owned(), job_id.to_string())].into()),
        start_time,
        end_time: Some(chrono::Utc::now().to_rfc3339()),
        outputs: uploaded,
        system_logs: outcome.2.clone().filter(|_| outcome.0 != JobStatus::Completed).map(|reason| vec![reason]),
    };
    (outcome, log)
}

/// What stop orders asked of a job so far.
#[derive(Debug, Default)]
struct Stopping {
    /// The shortest grace an order gave, once one came.
    ordered: Option<std::time::Duration>,
    /// When the job is killed, if it has not ended by then.
    kill_at: Option<Instant>,
}

impl Stopping {
    /// Takes the stop switch's state; answers the signal the job gets now, if any. The first stop
    /// signals `Term` and kills when its grace runs out; a stop without grace kills at once; a
    /// later stop may only shorten the grace.
    fn ordered(&mut self, switch: Option<std::time::Duration>) -> Option<Signal> {
        let grace = switch?;
        if self.ordered.is_some_and(|given| given <= grace) {
            return None;
        }
        let first = self.ordered.is_none();
        self.ordered = Some(grace);
        if grace.is_zero() {
            self.kill_at = None;
            return Some(Signal::Kill);
        }
        self.kill_at = Some(Instant::now() + grace);
        first.then_some(Signal::Term)
    }
}

/// Resolves at `at` (never, without one).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Starts sending a job's stdout and stderr to the server.
fn forward_output(ctx: &JobContext, job_id: Uuid, output: JobOutput) -> Vec<tokio::task::JoinHandle<()>> {
    let JobOutput { offsets, source } = output;
    let streams = ["stdout", "stderr"];
    match source {
        OutputSource::Pipes(pipes) => streams
            .into_iter()
            .zip(pipes)
            .map(|(stream, fd)| {
                let ctx = ctx.clone();
                let pipe = fd.and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok());
                tokio::spawn(async move { forward_pipe(&ctx.client, job_id, stream, offsets.of(stream), pipe).await })
            })
            .collect(),
        OutputSource::Files { paths, ended } => streams
            .into_iter()
            .zip(paths)
            .map(|(stream, path)| {
                let (ctx, ended) = (ctx.clone(), ended.clone());
                tokio::spawn(async move {
                    forward_file(&ctx.client, job_id, stream, offsets.of(stream), path, ended).await;
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The first stop with a grace asks the job to end and kills it when the grace runs out; a
    /// longer grace changes nothing; a stop without grace kills at once.
    #[tokio::test(start_paused = true)]
    async fn a_stop_signals_term_then_kill_and_a_later_stop_only_shortens_the_grace() {
        let mut stopping = Stopping::default();
        assert_eq!(stopping.ordered(None), None, "no stop yet");
        assert_eq!(stopping.ordered(Some(Duration::from_secs(30))), Some(Signal::Term));
        let kill_at = stopping.kill_at.expect("killed when the grace runs out");
        assert_eq!(kill_at, Instant::now() + Duration::from_secs(30));
        assert_eq!(stopping.ordered(Some(Duration::from_secs(30))), None, "the same order again");
        assert_eq!(stopping.ordered(Some(Duration::from_secs(60))), None, "a longer grace is not given");
        assert_eq!(stopping.kill_at, Some(kill_at));
        assert_eq!(stopping.ordered(Some(Duration::from_secs(5))), None, "a shorter grace: no new TERM");
        assert_eq!(stopping.kill_at, Some(Instant::now() + Duration::from_secs(5)));
        assert_eq!(stopping.ordered(Some(Duration::ZERO)), Some(Signal::Kill), "a stop without grace kills");
        assert_eq!(stopping.kill_at, None);
        assert_eq!(stopping.ordered(Some(Duration::ZERO)), None, "killed once");

        let mut at_once = Stopping::default();
        assert_eq!(at_once.ordered(Some(Duration::ZERO)), Some(Signal::Kill));
        assert_eq!(at_once.ordered, Some(Duration::ZERO));
    }
}
