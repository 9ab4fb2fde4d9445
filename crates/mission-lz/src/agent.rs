//! The agent's connection to the server, whatever runs its jobs: connect with a hello, read
//! orders, heartbeat, report, and follow each job through its lifecycle (`lifecycle`) on the
//! runner (`runner::Runner`).
//!
//! Jobs outlive connections: when the server goes away (a restart), the agent keeps its jobs
//! running, reconnects with backoff, names them in its next hello, and delivers the reports and
//! output it could not send meanwhile (reports wait in order; output waits in the job's pipes or
//! files). A runner whose jobs outlive the agent itself (Slurm) resumes them when it starts.
//!
//! Leaving (`Agent::leave`) drains: the jobs running then are killed (except where they outlive
//! the agent) and their tasks settle (cgroups and work dirs handed back), and the reports queued
//! before are delivered, each within a bound. The kills are not reported as stops: the next
//! agent's hello does not name those jobs, so the server counts them lost (which a retry policy
//! may retry), as it would after a crash.

use std::sync::Arc;

use mission_api::lz::{Hello, Order};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::cache::InputCache;
use crate::client::{Heartbeat, LzClient, SessionEnd, Timings};
use crate::config::{AgentConfig, RunnerKind};
use crate::dirs::private_dir;
use crate::error::AgentError;
use crate::jobs::{JobBook, JobContext, deliver_reports};
use crate::lifecycle;
use crate::runner::process::ProcessRunner;
use crate::runner::slurm::SlurmRunner;
use crate::runner::{Runner, StopSwitch};

/// The agent: what its jobs are handed ([`JobContext`]), and the tasks they run in.
pub(crate) struct Agent {
    context: JobContext,
    /// The jobs' tasks, which leaving waits for.
    tasks: TaskTracker,
    /// The address the ranks of a job on several landing zones reach this one at.
    node_address: String,
}

/// How long leaving waits for the killed jobs' tasks to settle.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long leaving waits for the server to take the reports queued before.
const DELIVERY_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Agent {
    /// Runs `job` (the future of one run of a job) as a task the agent tracks, entering it in
    /// the book with its stop switch; it leaves the book when the run ends (see
    /// [`JobBook::leave_run`]).
    fn spawn_job<F: Future<Output = ()> + Send + 'static>(
        &self,
        job_id: Uuid,
        attempt: u32,
        job: impl FnOnce(StopSwitch) -> F,
    ) {
        let (stopped, this_run) = self.context.book.enter_run(job_id, attempt);
        let (book, running) = (self.context.book.clone(), job(stopped));
        self.tasks.spawn(async move {
            running.await;
            book.leave_run(job_id, &this_run);
        });
    }

    /// Leaves: kills the jobs running now unless they `outlive` the agent (a batch system's),
    /// waits for their tasks to settle, then for the server to take the reports queued (of jobs
    /// that ended before), each for a bounded time.
    async fn leave(&self, outlive: bool) {
        self.context.book.leave_behind(outlive);
        self.tasks.close();
        if !outlive && tokio::time::timeout(SETTLE_LIMIT, self.tasks.wait()).await.is_err() {
            tracing::warn!("leaving before every killed job settled (waited {SETTLE_LIMIT:?})");
        }
        let delivered = async {
            while !self.context.book.ends_delivered() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(DELIVERY_LIMIT, delivered).await.is_err() {
            tracing::warn!("leaving with job ends the server has not taken (waited {DELIVERY_LIMIT:?})");
        }
    }
}

/// Runs the agent until `shutdown` completes (jobs still running are killed then, except where
/// they run in a batch system; see `Agent::leave`) or the server refuses its token.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    for path in [config.data_dir.clone(), config.data_dir.join("cache")] {
        private_dir(&path, 0o700).map_err(|e| AgentError::DataDir(path.clone(), e))?;
    }
    match &config.runner {
        RunnerKind::Process => serve(&config, ProcessRunner::start(&config).await?, shutdown).await,
        RunnerKind::Slurm(slurm) => serve(&config, SlurmRunner::start(&config, slurm).await?, shutdown).await,
    }
}

async fn serve<R: Runner>(
    config: &AgentConfig,
    runner: Arc<R>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let (book, queue) = JobBook::new();
    let context = JobContext {
        client: Arc::new(LzClient::new(&config.servers, &config.token, Timings::default())?),
        book: Arc::new(book),
        cache: Arc::new(InputCache::new(config.data_dir.join("cache"))),
        sessions: Default::default(),
        shells: Default::default(),
    };
    let node_address = config
        .node_address
        .clone()
        .unwrap_or_else(|| rustix::system::uname().nodename().to_string_lossy().into_owned());
    let agent = Agent { context: context.clone(), tasks: TaskTracker::new(), node_address };
    for (job_id, attempt) in runner.recovered() {
        let (runner, context) = (runner.clone(), context.clone());
        agent.spawn_job(job_id, attempt, move |stop| lifecycle::resume(runner, context, job_id, stop));
    }
    let reporter = tokio::spawn(deliver_reports(context.client.clone(), context.book.clone(), queue));
    if let Some(local) = &config.local_tunnel {
        local.serve(crate::sessions::local_service(context.clone()));
    }
    runner.attach(&context.client);
    let result = tokio::select! {
        result = connect_loop(&agent, &runner) => result,
        () = shutdown => Ok(()),
        () = idle(&agent, config.idle_exit) => {
            tracing::info!("no job ran for {:?}: leaving", config.idle_exit.unwrap_or_default());
            Ok(())
        }
    };

    agent.leave(R::JOBS_OUTLIVE_AGENT).await;
    reporter.abort();
    result
}

/// Resolves once no job has run, and no job's end has waited for the server to take its report,
/// for `limit` (never, without one): an agent that leaves then takes no report with it.
async fn idle(agent: &Agent, limit: Option<std::time::Duration>) {
    let Some(limit) = limit else { return std::future::pending().await };
    let mut idle_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250).min(limit)).await;
        if !agent.context.book.running_or_unreported().is_empty() {
            idle_since = tokio::time::Instant::now();
        } else if idle_since.elapsed() >= limit {
            return;
        }
    }
}

async fn connect_loop<R: Runner>(agent: &Agent, runner: &Arc<R>) -> Result<(), AgentError> {
    let mut delays = agent.context.client.timings().reconnect.delays();
    loop {
        let running = agent.context.book.running_or_unreported();
        let offer = runner.offer().await;
        let hello = Hello {
            resources: offer.resources,
            gpus: offer.gpus,
            running,
            max_jobs: offer.max_jobs,
            cluster_account: offer.cluster_account,
            images: offer.images,
            shared_paths: offer.shared_paths,
            disk_mb: offer.disk_mb,
            node_address: Some(agent.node_address.clone()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        match session(agent, runner, &hello).await {
            Ok(()) => {
                delays = agent.context.client.timings().reconnect.delays();
                tokio::time::sleep(agent.context.client.timings().reconnect.first).await;
            }
            Err(SessionEnd::Refused(why)) => return Err(AgentError::TokenRefused(why)),
            Err(SessionEnd::Broken(why)) => {
                let delay = delays.next().expect("endless");
                let (now, next) = (agent.context.client.server().to_owned(), agent.context.client.next_server());
                if now == next {
                    tracing::warn!("connection to the server lost: {why}; reconnecting in {delay:?}");
                } else {
                    tracing::warn!("connection to the server lost: {why}; trying {next} in {delay:?}");
                }
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// One connection: hello, then orders until the stream ends.
async fn session<R: Runner>(agent: &Agent, runner: &Arc<R>, hello: &Hello) -> Result<(), SessionEnd> {
    let (welcome, mut orders) = agent.context.client.connect(hello).await?;
    tracing::info!(lz = %welcome.name, lz_id = %welcome.lz_id, "connected");
    for job_id in &welcome.drop {
        agent.context.book.stop_job(*job_id, std::time::Duration::ZERO);
    }
    let lease = std::time::Duration::from_secs(welcome.lease_seconds.max(3));
    let (forgotten, mut reconnect) = watch::channel(false);
    let heartbeat = tokio::spawn(heartbeats(agent.context.client.clone(), lease / 3, forgotten));
    // Orders (or pings) come at least every third of the lease; silence for a whole lease means
    // the connection is dead even if TCP has not noticed.
    let result = loop {
        let next = tokio::select! {
            next = orders.next(lease) => next,
            _ = reconnect.wait_for(|r| *r) => {
                break Err(SessionEnd::Broken("the server no longer knows this connection".into()));
            }
        };
        match next {
            Ok(Some(Order::Run(job))) => {
                let (runner, context) = (runner.clone(), agent.context.clone());
                agent.spawn_job(job.job_id, job.attempt, move |stop| lifecycle::run(runner, context, *job, stop));
            }
            Ok(Some(Order::Stop { job_id, grace_seconds })) => {
                agent.context.book.stop_job(job_id, std::time::Duration::from_secs(grace_seconds.into()));
            }
            Ok(Some(Order::Tunnel { url })) => crate::sessions::open_tunnel(agent.context.clone(), url),
            Ok(Some(Order::Ping)) => {}
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    heartbeat.abort();
    result
}

/// Renews the lease every `every`; sets `forgotten` when the server answers that it does not
/// know this connection, so the agent connects again and tells it which jobs it runs.
async fn heartbeats(client: Arc<LzClient>, every: std::time::Duration, forgotten: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(every).await;
        match client.heartbeat().await {
            Ok(Heartbeat::Renewed) => {}
            Ok(Heartbeat::Forgotten) => {
                let _ = forgotten.send(true);
                return;
            }
            Err(e) => tracing::warn!("heartbeat failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mission_api::JobStatus;
    use mission_api::lz::Report;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;

    /// Reads one HTTP request (headers and a `content-length` body), answers 204, and gives back
    /// the request as text.
    async fn take_one_request(connection: &mut tokio::net::TcpStream) -> String {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = connection.read(&mut buf).await.unwrap();
            assert!(n > 0, "the agent hung up mid-request");
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
            let Some(end) = text.find("\r\n\r\n") else { continue };
            let length = text
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |n| n.trim().parse::<usize>().unwrap());
            if request.len() >= end + 4 + length {
                break;
            }
        }
        connection.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await.unwrap();
        String::from_utf8_lossy(&request).into_owned()
    }

    /// A server's listener, and an agent that reports to it (its queue of reports, and its cache
    /// dir, kept while the test runs).
    async fn listener_and_agent()
    -> (tokio::net::TcpListener, Arc<Agent>, mpsc::UnboundedReceiver<Report>, tempfile::TempDir) {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", server.local_addr().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let (book, queue) = JobBook::new();
        let context = JobContext {
            client: Arc::new(LzClient::new(&[url], "token", Timings::default()).unwrap()),
            book: Arc::new(book),
            cache: Arc::new(InputCache::new(dir.path().to_path_buf())),
            sessions: Default::default(),
            shells: Default::default(),
        };
        (server, Arc::new(Agent { context, tasks: TaskTracker::new(), node_address: "127.0.0.1".into() }), queue, dir)
    }

    /// The reports' delivery of `agent`'s book, from `queue`.
    fn deliver(agent: &Agent, queue: mpsc::UnboundedReceiver<Report>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(deliver_reports(agent.context.client.clone(), agent.context.book.clone(), queue))
    }

    /// A job that ended while no server took its report (a restart, a replica taking the lead) is
    /// named in the hello: the server that comes up takes no report before the hello, and would
    /// count a running job the hello does not name as lost. Once the report is taken, it is not.
    #[tokio::test]
    async fn a_hello_names_a_job_until_its_end_is_reported() {
        let (server, agent, queue, _cache) = listener_and_agent().await;
        let (ended, running) = (Uuid::new_v4(), Uuid::new_v4());
        agent.spawn_job(running, 1, |_stop| std::future::pending());
        agent.context.report_end(ended, (JobStatus::Completed, Some(0), None), None, None);
        let mut named = agent.context.book.running_or_unreported();
        named.sort();
        let mut both = vec![ended, running];
        both.sort();
        assert_eq!(named, both, "the ended job's report is not delivered yet");

        let reporter = deliver(&agent, queue);
        let (mut connection, _) = server.accept().await.unwrap();
        take_one_request(&mut connection).await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while agent.context.book.running_or_unreported() != [running] {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", agent.context.book.running_or_unreported());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        reporter.abort();
    }

    /// Leaving kills the jobs running (each task settles: here it reports the stop it sees,
    /// which is not sent), and delivers the end of a job that ended before, with nothing more.
    #[tokio::test]
    async fn leaving_kills_running_jobs_unreported_and_delivers_the_ends_queued_before() {
        let (server, agent, queue, _cache) = listener_and_agent().await;
        let (ended, running) = (Uuid::new_v4(), Uuid::new_v4());
        let settled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (agent2, settled2) = (agent.clone(), settled.clone());
        agent.spawn_job(running, 1, move |mut stop| async move {
            let grace = stop.wait_for(Option::is_some).await.unwrap().expect("stopped");
            assert!(grace.is_zero(), "killed at once");
            agent2.context.report_end(running, (JobStatus::Stopped, None, Some("stopped".into())), None, None);
            settled2.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        agent.context.report_end(ended, (JobStatus::Completed, Some(0), None), None, None);
        let reporter = deliver(&agent, queue);
        let taken = tokio::spawn(async move {
            let (mut connection, _) = server.accept().await.unwrap();
            let request = take_one_request(&mut connection).await;
            // Nothing else comes: a second request would be a report of the killed job.
            let more = tokio::time::timeout(std::time::Duration::from_millis(500), server.accept()).await;
            (request, more.is_ok())
        });
        tokio::time::timeout(std::time::Duration::from_secs(20), agent.leave(false)).await.expect("leaves in time");
        assert!(settled.load(std::sync::atomic::Ordering::SeqCst), "the killed job's task settled first");
        assert!(agent.context.book.ends_delivered(), "the queued end was taken");
        let (request, more) = taken.await.unwrap();
        assert!(request.contains(&ended.to_string()), "{request}");
        assert!(!request.contains(&running.to_string()), "the kill is not reported as a stop: {request}");
        assert!(!more, "one request: the end queued before");
        reporter.abort();
    }
}
