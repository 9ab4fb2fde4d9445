//! The scheduler on its own: its task over a real store (SQLite in a temporary dir), driven by
//! calls, with agents played by order streams, and time moved by hand. A task that keeps
//! yielding holds the runtime busy, so the paused clock moves only when a test advances it (not
//! whenever the runtime waits for the store's thread).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::lz::{Hello, Order, Report, Welcome};
use mission_api::{Job, JobStatus, Mission, PendingKind, Resources};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::queue::Queue;
use super::state::{PassWork, State};
use super::{
    Call, Event, Host, JobControl, Outcome, Policy, QueueOrder, Responder, SchedulerError, SchedulerResult, Sessions,
};
use mission_api::lz::LogOffsets;
use mission_store::{self as store, DEFAULT_STATION_ID, LzIdentity, Store};

const LEASE: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(20);

/// The server around the scheduler, as far as it reaches out to it: what it was told.
#[derive(Default)]
struct FakeHost {
    /// The jobs it heard had ended, in order.
    ended: Mutex<Vec<Uuid>>,
    /// How often it was told to forget agent tokens.
    forgot_tokens: Mutex<u32>,
}

impl Host for FakeHost {
    fn job_ended(&self, job_id: Uuid) {
        self.ended.lock().unwrap().push(job_id);
    }

    fn log_offsets(
        &self,
        _mission_id: Uuid,
        _job_id: Uuid,
        _node: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = LogOffsets> + Send + '_>> {
        Box::pin(async { LogOffsets::default() })
    }

    fn forget_tokens(&self) {
        *self.forgot_tokens.lock().unwrap() += 1;
    }
}

/// The scheduler's task over a fresh store, and what a test needs to drive it.
struct Harness {
    store: Store,
    host: Arc<FakeHost>,
    sessions: Arc<Sessions>,
    policy: Policy,
    events: mpsc::UnboundedSender<Event>,
    task: tokio::task::JoinHandle<()>,
    /// The task's queue, as the routes read positions from it.
    queue: Arc<Mutex<Queue>>,
    /// What the task's placement passes did, counted.
    work: Arc<Mutex<PassWork>>,
    mission: Mission,
    _dir: tempfile::TempDir,
}

/// An agent: its LZ and its order stream.
struct FakeAgent {
    lz: LzIdentity,
    orders: mpsc::UnboundedReceiver<Order>,
}

impl Harness {
    async fn new() -> Self {
        Self::with(Policy {
            lease: LEASE,
            max_running_per_user: None,
            order: QueueOrder::DEFAULT,
            reclaim_grace: GRACE,
        })
        .await
    }

    async fn with(policy: Policy) -> Self {
        // Keep the runtime busy: the clock moves only by `tokio::time::advance`.
        tokio::spawn(async {
            loop {
                tokio::task::yield_now().await;
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let (store, user) = store::test_support::store_with_user(dir.path()).await;
        let mission = store::test_support::mission(user.user_id, "m");
        store.insert_mission(&mission).await.unwrap();
        let host = Arc::new(FakeHost::default());
        let sessions = Arc::new(Sessions::new(Uuid::nil(), None));
        let queue = Arc::new(Mutex::new(Queue::default()));
        let (events, task, work) = Self::spawn(&store, &host, &sessions, policy, &queue).await;
        Self { store, host, sessions, policy, events, task, queue, work, mission, _dir: dir }
    }

    async fn spawn(
        store: &Store,
        host: &Arc<FakeHost>,
        sessions: &Arc<Sessions>,
        policy: Policy,
        queue: &Arc<Mutex<Queue>>,
    ) -> (mpsc::UnboundedSender<Event>, tokio::task::JoinHandle<()>, Arc<Mutex<PassWork>>) {
        let state = State::rebuilt(store.clone(), host.clone(), policy, sessions.clone(), queue.clone()).await.unwrap();
        let work = state.work();
        let (events, calls) = mpsc::unbounded_channel();
        (events, tokio::spawn(state.run(calls, tokio_util::sync::CancellationToken::new())), work)
    }

    /// Replaces the task by a new one rebuilt from the store: a restart, or another replica
    /// taking over as leader. The agents' streams end with the old task.
    async fn hand_over(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        let (events, task, work) = Self::spawn(&self.store, &self.host, &self.sessions, self.policy, &self.queue).await;
        (self.events, self.task, self.work) = (events, task, work);
    }

    async fn ask(&self, call: Call) -> SchedulerResult<Outcome> {
        let (reply, answer) = oneshot::channel();
        self.events.send(Event { call, reply: Responder::Local(reply) }).unwrap();
        answer.await.unwrap()
    }

    /// Registers an LZ named `name` on the default station.
    async fn register(&self, name: &str) -> LzIdentity {
        let lz_id = self
            .store
            .rotate_lz_token(DEFAULT_STATION_ID, name, &format!("hash of {name}"), store::now())
            .await
            .unwrap();
        let lz = LzIdentity { lz_id, station_id: DEFAULT_STATION_ID, name: name.into(), cluster_account: None };
        self.ask(Call::Registered { lz: lz.clone() }).await.unwrap();
        lz
    }

    /// Connects an agent offering `cpus` CPUs, saying it still runs `running`.
    async fn connect(&self, lz: &LzIdentity, cpus: u32, running: Vec<Uuid>) -> (FakeAgent, Welcome) {
        self.connect_with(lz, Hello { running, ..hello(cpus) }).await
    }

    async fn connect_with(&self, lz: &LzIdentity, hello: Hello) -> (FakeAgent, Welcome) {
        let (session, orders) = self.sessions.open();
        let outcome = self.ask(Call::Connect { lz: lz.clone(), hello: Box::new(hello), session }).await.unwrap();
        let Outcome::Welcome { welcome } = outcome else { panic!("{outcome:?}") };
        (FakeAgent { lz: lz.clone(), orders }, *welcome)
    }

    /// Sets `project`'s limits on the default station (JSON of [`mission_api::ProjectLimits`]) in
    /// the store and tells the task.
    async fn set_limits(&self, project: Uuid, limits: &str) {
        let limits: mission_api::ProjectLimits = serde_json::from_str(limits).unwrap();
        self.store.set_project_limits(project, DEFAULT_STATION_ID, &limits, store::now()).await.unwrap();
        self.ask(Call::LimitsChanged { project_id: project, station_id: DEFAULT_STATION_ID }).await.unwrap();
    }

    async fn submit(&self, cpus: u32) -> Job {
        self.submit_job(self.new_job(cpus)).await.unwrap()
    }

    /// A job of the harness's mission asking for `cpus`, to submit.
    fn new_job(&self, cpus: u32) -> Job {
        Job {
            cpu_count: cpus,
            memory_amount: 256,
            ..Job::queued(
                self.mission.mission_id,
                self.mission.user_id,
                DEFAULT_STATION_ID,
                vec!["true".into()],
                store::now(),
            )
        }
    }

    async fn submit_job(&self, job: Job) -> SchedulerResult<Job> {
        match self.ask(Call::Submit { job: Box::new(job), audit: Vec::new() }).await? {
            Outcome::Job { job } => Ok(*job),
            other => panic!("{other:?}"),
        }
    }

    /// A job's pending reason as a reader gets it: its kind and words.
    async fn pending(&self, job_id: Uuid) -> Option<(PendingKind, String)> {
        let mut job = self.store.job_row(job_id).await.unwrap().unwrap();
        let queue = self.queue.lock().unwrap();
        if let Some(position) = queue.position(job_id) {
            super::stand_in_line(&mut job, position, queue.lighter_ahead(job_id));
        }
        job.pending_reason.map(|p| (p.kind, p.detail))
    }

    /// Lets `seconds` pass, the agent of `lz` heartbeating every 10.
    async fn pass_time(&self, lz: &LzIdentity, seconds: u64) {
        for step in (0..seconds).step_by(10) {
            tokio::time::advance(Duration::from_secs((seconds - step).min(10))).await;
            self.ask(Call::Heartbeat { lz_id: lz.lz_id }).await.unwrap();
        }
    }

    async fn report(&self, agent: &FakeAgent, job_id: Uuid, status: JobStatus) {
        self.report_why(agent, job_id, status, None).await;
    }

    async fn report_why(&self, agent: &FakeAgent, job_id: Uuid, status: JobStatus, reason: Option<&str>) {
        let reason = reason.map(str::to_owned);
        let report = Report { reason, ..Report::new(job_id, status, store::now()) };
        self.ask(Call::Reports { lz: agent.lz.clone(), reports: vec![report] }).await.unwrap();
    }

    async fn status(&self, job_id: Uuid) -> JobStatus {
        self.store.job_row(job_id).await.unwrap().unwrap().status
    }

    /// Waits until the job is `status` (the scheduler acts on a timer in its own turn), for 5 s
    /// of real time at most.
    async fn until(&self, job_id: Uuid, status: JobStatus) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.status(job_id).await != status {
            assert!(std::time::Instant::now() < deadline, "job {job_id} did not become {status}");
            tokio::task::yield_now().await;
        }
    }
}

impl FakeAgent {
    /// The run orders waiting on the stream, by job (pings and stops skipped).
    fn runs(&mut self) -> Vec<Uuid> {
        self.orders().0
    }

    /// The orders waiting on the stream: runs by job, and stops by job with their grace.
    fn orders(&mut self) -> (Vec<Uuid>, Vec<(Uuid, u32)>) {
        let (mut runs, mut stops) = (Vec::new(), Vec::new());
        while let Ok(order) = self.orders.try_recv() {
            match order {
                Order::Run(assignment) => runs.push(assignment.job_id),
                Order::Stop { job_id, grace_seconds } => stops.push((job_id, grace_seconds)),
                Order::Tunnel { .. } => panic!("no session asked for a tunnel"),
                Order::Ping => {}
            }
        }
        (runs, stops)
    }

    /// Whether the stream was ended by the scheduler.
    fn ended(&mut self) -> bool {
        matches!(self.orders.try_recv(), Err(mpsc::error::TryRecvError::Disconnected))
    }
}

#[tokio::test(start_paused = true)]
async fn jobs_go_to_the_best_fit_and_a_large_job_reserves_its_lz_while_small_ones_backfill() {
    let h = Harness::new().await;
    let (small_lz, big_lz) = (h.register("small").await, h.register("big").await);
    // A registered (or re-keyed) LZ makes the server forget the agent tokens it cached.
    assert_eq!(*h.host.forgot_tokens.lock().unwrap(), 2);
    let (mut small, _) = h.connect(&small_lz, 2, Vec::new()).await;
    let (mut big, _) = h.connect(&big_lz, 4, Vec::new()).await;

    // Best fit: a one-CPU job goes where the fewest CPUs are left after it.
    let first = h.submit(1).await;
    assert_eq!((small.runs(), big.runs()), (vec![first.job_id], vec![]));
    // Four CPUs fit only the big LZ, and it is free.
    let wide = h.submit(4).await;
    assert_eq!(big.runs(), [wide.job_id]);
    // Another four-CPU job waits and reserves the big LZ; a one-CPU job behind it still starts on
    // the small LZ, never on the reserved one.
    let waiting = h.submit(4).await;
    let filler = h.submit(1).await;
    assert_eq!((small.runs(), big.runs()), (vec![filler.job_id], vec![]));
    assert_eq!(h.status(waiting.job_id).await, JobStatus::Queued);
    // The wide job ends: the waiting one takes the big LZ.
    h.report(&big, wide.job_id, JobStatus::Running).await;
    h.report(&big, wide.job_id, JobStatus::Completed).await;
    assert_eq!(big.runs(), [waiting.job_id]);
    assert_eq!(h.status(wide.job_id).await, JobStatus::Completed);
    assert_eq!(*h.host.ended.lock().unwrap(), [wide.job_id], "the server hears of the end (to close its logs)");
}

/// Whether a job could ever run follows the sizes the station's LZs come in: one that never
/// connected may be any size; once each has said its size, a job larger than every one is
/// refused, naming the largest, and a job that fits one of them is queued.
#[tokio::test(start_paused = true)]
async fn a_job_no_lz_of_the_station_could_ever_hold_is_refused_once_their_sizes_are_known() {
    let h = Harness::new().await;
    let (small_lz, big_lz) = (h.register("small").await, h.register("big").await);
    h.submit(8).await;
    let (_small, _) = h.connect(&small_lz, 2, Vec::new()).await;
    h.submit(8).await;
    let (_big, _) = h.connect(&big_lz, 4, Vec::new()).await;
    let refused = h.submit_job(h.new_job(8)).await.unwrap_err();
    let SchedulerError::Invalid { field: None, detail } = refused else { panic!("{refused:?}") };
    assert!(detail.starts_with("no landing zone of the station could ever hold this job (cpu_count 8"), "{detail}");
    assert!(detail.ends_with("big offers cpu_count 4, memory_amount 8192 MB, gpu_count 0"), "{detail}");
    h.submit(4).await;
    let named = Job { requested_lz_id: Some(small_lz.lz_id), ..h.new_job(4) };
    let refused = h.submit_job(named).await.unwrap_err();
    assert!(refused.to_string().starts_with("the landing zone could never hold this job (cpu_count 4"), "{refused}");
}

/// A job in a container image goes only to a landing zone that takes images; while no online
/// one does, it waits saying so, and jobs behind it still start.
#[tokio::test(start_paused = true)]
async fn a_job_in_an_image_goes_only_to_a_landing_zone_that_takes_images() {
    let h = Harness::new().await;
    let (plain_lz, podman_lz) = (h.register("plain").await, h.register("podman").await);
    let (mut plain, _) = h.connect(&plain_lz, 4, Vec::new()).await;
    let digest = format!("sha256:{}", "a".repeat(64));
    let image = mission_api::JobImage { image_id: Uuid::new_v4(), digest, reference: None };
    let boxed = h.submit_job(Job { image: Some(image.clone()), ..h.new_job(1) }).await.unwrap();
    assert_eq!(plain.runs(), Vec::<Uuid>::new(), "the plain LZ has room, but runs no images");
    let (kind, detail) = h.pending(boxed.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::NoLandingZone);
    assert!(detail.ends_with("1 CPUs, 256 MB, 0 GPUs in a container image)"), "{detail}");
    let on_the_host = h.submit(1).await;
    assert_eq!(plain.runs(), [on_the_host.job_id], "a job behind it still starts");
    let (mut podman, _) = h.connect_with(&podman_lz, Hello { images: true, ..hello(2) }).await;
    let Ok(Order::Run(assignment)) = podman.orders.try_recv() else { panic!("the image job is sent") };
    assert_eq!((assignment.job_id, assignment.image), (boxed.job_id, Some(image)));
}

/// A batch job goes only to a landing zone that shares its directory, and is refused at once
/// where none of its station's does: it would never run.
#[tokio::test(start_paused = true)]
async fn a_batch_job_goes_only_to_a_landing_zone_sharing_its_directory() {
    let h = Harness::new().await;
    let (plain_lz, shared_lz) = (h.register("plain").await, h.register("shared").await);
    let (mut plain, _) = h.connect(&plain_lz, 4, Vec::new()).await;
    let batch = |dir: &str| mission_api::JobBatch {
        name: "fit".into(),
        script: "#!/bin/sh\ntrue\n".into(),
        workdir: dir.into(),
        stdout: "slurm-%j.out".into(),
        ..Default::default()
    };
    let refused = h.submit_job(Job { batch: Some(batch("/home/ada/run")), ..h.new_job(1) }).await.unwrap_err();
    assert!(
        refused.to_string().contains("no landing zone of the station runs batch jobs in /home/ada/run"),
        "{refused}"
    );
    let sharing = Hello { shared_paths: vec!["/home".into(), "/scratch/".into()], ..hello(2) };
    let (mut shared, _) = h.connect_with(&shared_lz, sharing).await;
    let elsewhere = h.submit_job(Job { batch: Some(batch("/homework/x")), ..h.new_job(1) }).await.unwrap_err();
    assert!(elsewhere.to_string().contains("runs batch jobs in /homework/x"), "a prefix is not a parent: {elsewhere}");
    let job = h.submit_job(Job { batch: Some(batch("/home/ada/run")), ..h.new_job(1) }).await.unwrap();
    assert_eq!(plain.runs(), Vec::<Uuid>::new(), "the plain LZ has room, but shares nothing");
    let Ok(Order::Run(assignment)) = shared.orders.try_recv() else { panic!("the batch job is sent") };
    assert_eq!(assignment.job_id, job.job_id);
    assert_eq!(assignment.batch.map(|b| b.workdir), Some("/home/ada/run".to_owned()));
    assert_eq!(assignment.number, job.number);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_job_keeps_the_lz_it_holds_while_room_frees_elsewhere() {
    let h = Harness::new().await;
    let (a_lz, b_lz) = (h.register("a").await, h.register("b").await);
    let mut agents = [h.connect(&a_lz, 2, Vec::new()).await.0, h.connect(&b_lz, 2, Vec::new()).await.0];
    for _ in 0..4 {
        h.submit(1).await;
    }
    let mut running = [agents[0].runs(), agents[1].runs()];
    assert_eq!(running.each_ref().map(Vec::len), [2, 2]);
    // Nothing has room for two CPUs: the wide job holds one LZ.
    let wide = h.submit(2).await;
    let (kind, detail) = h.pending(wide.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Resources);
    let held = usize::from(detail.contains("landing zone b,"));
    let other = 1 - held;
    // A CPU frees on the other LZ, which now has more room than the held one: the wide job keeps
    // the LZ it holds (which goes on draining for it), and a small job takes the freed CPU.
    let done = running[other].remove(0);
    h.report(&agents[other], done, JobStatus::Completed).await;
    assert_eq!(h.pending(wide.job_id).await.unwrap().1, detail, "the hold stays where it was");
    let filler = h.submit(1).await;
    assert_eq!(agents[other].runs(), [filler.job_id]);
    assert!(agents[held].runs().is_empty(), "nothing starts on the held LZ");
    // The held LZ drains: the wide job starts there.
    for job_id in std::mem::take(&mut running[held]) {
        h.report(&agents[held], job_id, JobStatus::Completed).await;
    }
    assert_eq!(agents[held].runs(), [wide.job_id]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_gateway_takes_jobs_by_count_and_says_why_they_wait() {
    let h = Harness::new().await;
    let mut lz = h.register("slurm").await;
    lz.cluster_account = Some("alice".into());
    // The largest node has 2 CPUs; the gateway keeps up to 3 jobs in its batch system.
    let gateway = Hello {
        resources: Resources { cpu_count: 2, memory_amount: 8192, gpu_count: 2 },
        max_jobs: Some(3),
        cluster_account: Some("alice".into()),
        ..hello(2)
    };
    let (mut gateway, _) = h.connect_with(&lz, gateway).await;
    let jobs = [h.submit(2).await, h.submit(2).await, h.submit(2).await, h.submit(2).await];
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.job_id).collect();
    assert_eq!(gateway.runs(), ids[..3], "three whole-node jobs at once: the batch system queues them");
    assert_eq!(h.status(ids[3]).await, JobStatus::Queued);
    assert!(h.store.job_row(ids[0]).await.unwrap().unwrap().gpu_indices.is_empty());

    // A job waiting in the batch system's queue says why, each time the reason changes.
    h.report(&gateway, ids[1], JobStatus::Staging).await;
    h.report_why(&gateway, ids[1], JobStatus::Staging, Some("waiting in Slurm's queue: Priority")).await;
    h.report_why(&gateway, ids[1], JobStatus::Staging, Some("waiting in Slurm's queue: Priority")).await;
    h.report_why(&gateway, ids[1], JobStatus::Staging, Some("waiting in Slurm's queue: Resources")).await;
    let waiting = h.store.job(ids[1]).await.unwrap().unwrap();
    let reason = waiting.pending_reason.map(|p| (p.kind, p.detail));
    assert_eq!(reason, Some((PendingKind::BatchSystem, "waiting in Slurm's queue: Resources".into())));
    assert_eq!(waiting.reason, None, "a reason says why a job ended");
    let details: Vec<_> = waiting.history.iter().map(|t| (t.status, t.detail.as_deref())).collect();
    assert_eq!(
        details[details.len() - 3..],
        [
            (JobStatus::Staging, None),
            (JobStatus::Staging, Some("waiting in Slurm's queue: Priority")),
            (JobStatus::Staging, Some("waiting in Slurm's queue: Resources")),
        ]
    );
    // Once it runs, it no longer waits for anything.
    h.report(&gateway, ids[1], JobStatus::Running).await;
    assert_eq!(h.pending(ids[1]).await, None);

    // One ends: the fourth takes its place.
    h.report(&gateway, ids[0], JobStatus::Completed).await;
    assert_eq!(gateway.runs(), [ids[3]]);
}

#[tokio::test(start_paused = true)]
async fn a_silent_lz_loses_its_running_jobs_and_requeues_those_not_started() {
    let h = Harness::new().await;
    let lz = h.register("node").await;
    let (mut agent, welcome) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(welcome.lease_seconds, LEASE.as_secs());
    let running = h.submit(1).await;
    let assigned = h.submit(1).await;
    assert_eq!(agent.runs().len(), 2);
    h.report(&agent, running.job_id, JobStatus::Running).await;

    // Heartbeats keep it: two thirds of a lease, twice, with a heartbeat between.
    tokio::time::advance(LEASE * 2 / 3).await;
    h.ask(Call::Heartbeat { lz_id: lz.lz_id }).await.unwrap();
    tokio::time::advance(LEASE * 2 / 3).await;
    tokio::task::yield_now().await;
    assert_eq!(h.status(running.job_id).await, JobStatus::Running);

    // Silence for a whole lease: the running job is lost, the other goes back to the queue, and
    // the agent's stream ends.
    tokio::time::advance(LEASE).await;
    h.until(running.job_id, JobStatus::Lost).await;
    let heartbeat = h.ask(Call::Heartbeat { lz_id: lz.lz_id }).await;
    assert!(matches!(heartbeat, Err(SchedulerError::Conflict(_))), "a forgotten agent is told to connect again");
    assert_eq!(h.status(running.job_id).await, JobStatus::Lost);
    assert_eq!(h.status(assigned.job_id).await, JobStatus::Queued);
    assert!(agent.ended());
    // It comes back: the queued job is placed again.
    let (mut again, _) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(again.runs(), [assigned.job_id]);
}

#[tokio::test(start_paused = true)]
async fn a_reconnecting_agent_keeps_what_it_runs_and_is_told_to_drop_the_rest() {
    let h = Harness::new().await;
    let lz = h.register("node").await;
    let (mut agent, _) = h.connect(&lz, 4, Vec::new()).await;
    let (kept, vanished, unstarted) = (h.submit(1).await, h.submit(1).await, h.submit(1).await);
    assert_eq!(agent.runs().len(), 3);
    h.report(&agent, kept.job_id, JobStatus::Running).await;
    h.report(&agent, vanished.job_id, JobStatus::Running).await;
    let stopped = h.submit(1).await;
    agent.runs();
    h.report(&agent, stopped.job_id, JobStatus::Running).await;

    // The agent restarted: it runs `kept` and a job the server never gave it.
    let stranger = Uuid::new_v4();
    let (mut back, welcome) = h.connect(&lz, 4, vec![kept.job_id, stranger]).await;
    assert!(agent.ended(), "the old stream ends when the LZ connects again");
    assert_eq!(welcome.drop, [stranger]);
    assert_eq!(h.status(kept.job_id).await, JobStatus::Running);
    assert_eq!(h.status(vanished.job_id).await, JobStatus::Lost);
    assert_eq!(h.status(stopped.job_id).await, JobStatus::Lost);
    // A job assigned but never started is sent again.
    assert_eq!(back.runs(), [unstarted.job_id]);
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_rebuilds_from_the_store_and_waits_a_lease_for_the_agents() {
    let mut h = Harness::new().await;
    let (one, two) = (h.register("one").await, h.register("two").await);
    let (mut a, _) = h.connect(&one, 1, Vec::new()).await;
    let (mut b, _) = h.connect(&two, 1, Vec::new()).await;
    let (_, _, queued) = (h.submit(1).await, h.submit(1).await, h.submit(1).await);
    let (on_a, on_b) = (a.runs()[0], b.runs()[0]);
    h.report(&a, on_a, JobStatus::Running).await;
    h.report(&b, on_b, JobStatus::Running).await;

    // The leader goes; the next one knows the queue and what each LZ runs, but no connection.
    h.hand_over().await;
    assert!(a.ended() && b.ended());
    let heartbeat = h.ask(Call::Heartbeat { lz_id: one.lz_id }).await;
    assert!(matches!(heartbeat, Err(SchedulerError::Conflict(_))));
    // Agent one comes back within the lease, still running its job: it keeps it, and the queued
    // job waits, the LZ being full.
    let (mut a, welcome) = h.connect(&one, 1, vec![on_a]).await;
    assert!(welcome.drop.is_empty());
    assert!(a.runs().is_empty());
    assert_eq!(h.status(queued.job_id).await, JobStatus::Queued);
    // Agent two never comes back: after the lease its job is lost, and nothing was placed twice.
    tokio::time::advance(LEASE * 2 / 3).await;
    h.ask(Call::Heartbeat { lz_id: one.lz_id }).await.unwrap();
    tokio::time::advance(LEASE / 2).await;
    h.until(on_b, JobStatus::Lost).await;
    h.ask(Call::Heartbeat { lz_id: one.lz_id }).await.unwrap();
    assert_eq!(h.status(on_a).await, JobStatus::Running);
    h.report(&a, on_a, JobStatus::Completed).await;
    assert_eq!(a.runs(), [queued.job_id]);
    let history = h.store.job_history(on_a).await.unwrap();
    assert_eq!(history.iter().filter(|t| t.status == JobStatus::Assigned).count(), 1);
}

#[tokio::test(start_paused = true)]
async fn every_queued_job_says_why_it_waits() {
    let h = Harness::with(Policy {
        lease: LEASE,
        max_running_per_user: Some(2),
        order: QueueOrder::DEFAULT,
        reclaim_grace: GRACE,
    })
    .await;
    let (lz, away) = (h.register("box").await, h.register("away").await);
    let first = h.submit(2).await;
    let offline = (PendingKind::NoLandingZone, "no landing zone of its station is online".to_owned());
    assert_eq!(h.pending(first.job_id).await, Some(offline));

    // The LZ connects: the first runs and waits no more; the next waits for room, holding the
    // LZ, and those behind it are behind it.
    let (mut agent, _) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(agent.runs(), [first.job_id]);
    assert_eq!(h.pending(first.job_id).await, None);
    let second = h.submit(2).await;
    let (kind, detail) = h.pending(second.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Resources);
    assert_eq!(detail, "waiting for 2 CPUs, 256 MB to be free on landing zone box, held for it");
    let third = h.submit(1).await;
    let (kind, detail) = h.pending(third.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Priority);
    assert!(detail.starts_with("behind 1 earlier queued job of its station"), "{detail}");
    let fourth = h.submit(1).await;
    assert!(h.pending(fourth.job_id).await.unwrap().1.starts_with("behind 2 earlier queued jobs"));
    let mut pinned = h.new_job(1);
    pinned.requested_lz_id = Some(away.lz_id);
    let pinned = h.submit_job(pinned).await.unwrap();
    let away_offline = (PendingKind::NoLandingZone, "its landing zone away is not online".to_owned());
    assert_eq!(h.pending(pinned.job_id).await, Some(away_offline));
    let mut after = h.new_job(1);
    after.after_ok = vec![second.job_id];
    let after = h.submit_job(after).await.unwrap();
    let waits = (PendingKind::Dependency, format!("waiting for job {} to complete", second.job_id));
    assert_eq!(h.pending(after.job_id).await, Some(waits));

    // The first ends: the second and third run, and the user is at the limit of two, so the
    // fourth waits for the quota (and the others in line stay as they were).
    h.report(&agent, first.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [second.job_id]);
    let (kind, detail) = h.pending(third.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Resources, "first in line now, it holds the LZ second fills: {detail}");
    assert!(h.pending(fourth.job_id).await.unwrap().1.starts_with("behind 1 earlier queued job"));
    let (mut big_agent, _) = h.connect(&away, 8, Vec::new()).await;
    assert_eq!(big_agent.runs(), [third.job_id], "the two the user may run: second and third");
    let (kind, detail) = h.pending(fourth.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Quota);
    assert!(detail.contains("2 jobs on landing zones"), "{detail}");
    h.report(&big_agent, third.job_id, JobStatus::Completed).await;
    assert_eq!(big_agent.runs(), [fourth.job_id]);
}

#[tokio::test(start_paused = true)]
async fn a_job_waits_for_its_dependencies_and_fails_with_one_that_failed() {
    let mut h = Harness::new().await;
    let lz = h.register("box").await;
    let (mut agent, _) = h.connect(&lz, 1, Vec::new()).await;
    let with = |h: &Harness, after_ok: Vec<Uuid>, after_any: Vec<Uuid>| {
        let mut job = h.new_job(1);
        (job.after_ok, job.after_any) = (after_ok, after_any);
        job
    };
    let first = h.submit(1).await;
    assert_eq!(agent.runs(), [first.job_id]);
    // second needs first to complete; third needs second to complete; fourth needs second to
    // end, however; fifth needs nothing but comes last.
    let second = h.submit_job(with(&h, vec![first.job_id], vec![])).await.unwrap();
    let third = h.submit_job(with(&h, vec![second.job_id], vec![])).await.unwrap();
    let fourth = h.submit_job(with(&h, vec![], vec![second.job_id])).await.unwrap();
    // Jobs that wait for others hold nothing: a later job with none starts first.
    h.report(&agent, first.job_id, JobStatus::Running).await;
    let fifth = h.submit(1).await;

    // Across a restart the waits are rebuilt from the store.
    h.hand_over().await;
    let (mut agent, _) = h.connect(&lz, 1, vec![first.job_id]).await;
    assert_eq!(agent.runs(), Vec::<Uuid>::new());
    h.report(&agent, first.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [second.job_id], "second's dependency completed; it is first in line");
    h.report(&agent, second.job_id, JobStatus::Failed).await;
    // third fails with the reason; fourth may start now, and does (before fifth).
    h.until(third.job_id, JobStatus::Failed).await;
    let failed = h.store.job(third.job_id).await.unwrap().unwrap();
    assert_eq!(failed.reason, Some(format!("the job it waited for, {}, ended failed", second.job_id)));
    assert_eq!(failed.history.iter().map(|t| t.status).collect::<Vec<_>>(), [JobStatus::Queued, JobStatus::Failed]);
    assert_eq!(agent.runs(), [fourth.job_id]);
    h.report(&agent, fourth.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [fifth.job_id]);

    // A dependency that already failed fails a new job at once; one that completed is no wait.
    let doomed = h.submit_job(with(&h, vec![second.job_id], vec![])).await.unwrap();
    assert_eq!((doomed.status, h.status(doomed.job_id).await), (JobStatus::Failed, JobStatus::Failed));
    let fine = h.submit_job(with(&h, vec![fourth.job_id], vec![third.job_id])).await.unwrap();
    h.report(&agent, fifth.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [fine.job_id]);

    // A job that is not there, or not the user's, is refused, naming the field.
    let refused = h.submit_job(with(&h, vec![], vec![Uuid::new_v4()])).await.unwrap_err();
    assert!(matches!(&refused, SchedulerError::Invalid { field: Some(f), .. } if f == "after_any"), "{refused:?}");
    let mut theirs = h.new_job(1);
    theirs.user_id = Uuid::new_v4();
    theirs.after_ok = vec![fine.job_id];
    let refused = h.submit_job(theirs).await.unwrap_err();
    assert!(matches!(&refused, SchedulerError::Invalid { field: Some(f), .. } if f == "after_ok"), "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn a_held_job_keeps_its_place_across_a_restart_and_a_requeued_one_runs_again() {
    let mut h = Harness::new().await;
    let lz = h.register("box").await;
    let (_, _) = h.connect(&lz, 1, Vec::new()).await;
    let control =
        |job_id: Uuid, control: JobControl| Call::Control { job_id, control, by: "ann".into(), audit: Vec::new() };
    let running = h.submit(1).await;
    let held = h.submit(1).await;
    let after = h.submit(1).await;
    h.ask(control(held.job_id, JobControl::Hold)).await.unwrap();
    assert_eq!(h.pending(held.job_id).await, Some((PendingKind::Held, "held by ann until released".into())));

    // The hold outlives a restart; the job behind it goes first when room frees.
    h.hand_over().await;
    let (mut agent, _) = h.connect(&lz, 1, vec![running.job_id]).await;
    h.report(&agent, running.job_id, JobStatus::Running).await;
    assert_eq!(h.pending(held.job_id).await.map(|p| p.0), Some(PendingKind::Held));
    h.report(&agent, running.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [after.job_id], "a held job is passed over");
    h.report(&agent, after.job_id, JobStatus::Running).await;

    // Released, it waits its turn; a requeued job is stopped with the grace and goes back in
    // line at its old place, ahead of the released one.
    h.ask(control(held.job_id, JobControl::Release)).await.unwrap();
    assert_eq!(agent.runs(), Vec::<Uuid>::new());
    h.ask(control(after.job_id, JobControl::Requeue)).await.unwrap();
    let (_, stops) = agent.orders();
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].0, after.job_id);
    h.report(&agent, after.job_id, JobStatus::Stopped).await;
    assert_eq!(h.status(after.job_id).await, JobStatus::Queued);
    assert_eq!(agent.runs(), [held.job_id], "the released job was ahead of the requeued one");
    let job = h.store.job(after.job_id).await.unwrap().unwrap();
    assert_eq!(
        job.history.last().and_then(|t| t.detail.as_deref()),
        Some("requeued by ann; back in line at its old place")
    );

    // Only a queued job is held; an ended one is not requeued.
    let refused = h.ask(control(held.job_id, JobControl::Hold)).await.unwrap_err();
    assert!(matches!(refused, SchedulerError::Conflict(_)), "{refused:?}");
    h.report(&agent, held.job_id, JobStatus::Completed).await;
    let refused = h.ask(control(held.job_id, JobControl::Requeue)).await.unwrap_err();
    assert!(matches!(refused, SchedulerError::Conflict(_)), "{refused:?}");
    assert_eq!(agent.runs(), [after.job_id]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_job_with_a_policy_is_tried_again_and_reports_of_its_old_attempt_are_ignored() {
    let h = Harness::new().await;
    let lz = h.register("node").await;
    let (mut agent, _) = h.connect(&lz, 2, Vec::new()).await;
    let mut job = h.new_job(1);
    job.retry = Some(mission_api::RetryPolicy {
        max_attempts: 2,
        on: vec![mission_api::RetryOn::Lost],
        backoff: 0,
        memory_factor: 1.5,
        max_memory: None,
    });
    let job = h.submit_job(job).await.unwrap();
    assert_eq!(agent.runs(), [job.job_id]);
    h.report(&agent, job.job_id, JobStatus::Running).await;

    // The LZ goes silent: instead of lost, the job is queued again as its second attempt, and
    // runs once an agent is back.
    tokio::time::advance(LEASE * 2).await;
    h.until(job.job_id, JobStatus::Queued).await;
    let stored = h.store.job(job.job_id).await.unwrap().unwrap();
    assert_eq!(stored.attempt, 2);
    let retried = stored.history.last().unwrap().detail.clone().unwrap();
    assert_eq!(
        retried,
        "attempt 1 of 2 failed (its landing zone went silent (no heartbeat within the lease)); attempt 2"
    );
    let (mut again, _) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(again.runs(), [job.job_id]);
    // A late report of the first attempt changes nothing; the second's end is the job's.
    let late = Report { attempt: Some(1), ..Report::new(job.job_id, JobStatus::Failed, store::now()) };
    h.ask(Call::Reports { lz: again.lz.clone(), reports: vec![late] }).await.unwrap();
    assert_eq!(h.status(job.job_id).await, JobStatus::Assigned);
    let report = Report { attempt: Some(2), ..Report::new(job.job_id, JobStatus::Lost, store::now()) };
    h.ask(Call::Reports { lz: again.lz.clone(), reports: vec![report] }).await.unwrap();
    assert_eq!(h.status(job.job_id).await, JobStatus::Lost, "the last attempt ends the job");
    assert!(agent.ended());
}

impl Harness {
    /// Queues `n` one-CPU jobs in requests of 5,000, as the array route does; answers their ids
    /// in submission order.
    async fn submit_many(&self, n: usize) -> Vec<Uuid> {
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            let jobs: Vec<Job> = (0..(n - ids.len()).min(5_000)).map(|_| self.new_job(1)).collect();
            ids.extend(jobs.iter().map(|j| j.job_id));
            self.ask(Call::SubmitMany { jobs, audit: Vec::new() }).await.unwrap();
        }
        ids
    }

    fn position(&self, job_id: Uuid) -> Option<(u64, u64)> {
        self.queue.lock().unwrap().position(job_id).map(|p| (p.station, p.own))
    }

    fn work(&self) -> PassWork {
        *self.work.lock().unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn with_100_000_queued_a_pass_looks_at_a_few_jobs_and_positions_stay_right() {
    const N: usize = 100_000;
    // First come, first served, so that positions are the order jobs start in.
    let mut h = Harness::with(Policy {
        lease: LEASE,
        max_running_per_user: None,
        order: QueueOrder::FirstCome,
        reclaim_grace: GRACE,
    })
    .await;
    let lz = h.register("box").await;
    // Queued while no landing zone is online: each request's pass looks at the sub-queue's head
    // only, however long the line.
    let ids = h.submit_many(N).await;
    let work = h.work();
    assert!(work.examined <= work.passes, "{work:?}: no landing zone online, only heads are looked at");
    assert_eq!(h.position(ids[0]), Some((1, 1)));
    assert_eq!(h.position(ids[N - 1]), Some((N as u64, N as u64)));
    // Another user's job comes after all of them on the station, first in its own sub-queue.
    let other = store::test_support::add_user(&h.store, "other").await;
    let theirs = h.submit_job(Job { user_id: other.user_id, ..h.new_job(1) }).await.unwrap();
    assert_eq!(h.position(theirs.job_id), Some((N as u64 + 1, 1)));

    // The LZ connects with two CPUs: the first two run.
    let (mut agent, _) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(agent.runs(), ids[..2]);
    assert_eq!(h.position(ids[2]), Some((1, 1)));
    assert_eq!(h.position(ids[0]), None, "placed jobs have left the line");

    // One ends: the next starts, and the pass that placed it looked at no more than a few jobs.
    let before = h.work();
    h.report(&agent, ids[0], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [ids[2]]);
    let after = h.work();
    assert_eq!(after.placed - before.placed, 1);
    assert!(after.examined - before.examined <= 3, "{before:?} → {after:?}");
    // The next in line holds the LZ; the rest are behind it, counted as read.
    let (kind, _) = h.pending(ids[3]).await.unwrap();
    assert_eq!(kind, PendingKind::Resources);
    let (kind, detail) = h.pending(ids[50_000]).await.unwrap();
    assert_eq!((kind, detail.as_str()), (PendingKind::Priority, "behind 49997 earlier queued jobs of its station"));

    // A stop in the middle moves everyone behind it up by one.
    h.ask(Call::Stop { job_id: ids[50_000], by: "test".into(), audit: Vec::new() }).await.unwrap();
    assert_eq!(h.position(ids[N - 1]), Some((N as u64 - 4, N as u64 - 4)));
    assert_eq!(h.position(theirs.job_id), Some((N as u64 - 3, 1)));

    // A restart (or a new leader) rebuilds the same line from the store: nothing lost, and the
    // agent's jobs are still its own, so nothing runs twice.
    h.hand_over().await;
    assert_eq!(h.position(ids[3]), Some((1, 1)));
    assert_eq!(h.position(ids[N - 1]), Some((N as u64 - 4, N as u64 - 4)));
    assert_eq!(h.position(ids[50_000]), None, "stopped jobs stay stopped");
    let (mut agent, welcome) = h.connect(&lz, 2, vec![ids[1], ids[2]]).await;
    assert!(welcome.drop.is_empty());
    assert!(agent.runs().is_empty(), "the LZ is still full with what it ran before");
    h.report(&agent, ids[1], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [ids[3]]);
    for id in [ids[0], ids[1]] {
        assert_eq!(h.status(id).await, JobStatus::Completed);
    }
    assert_eq!(h.status(ids[50_000]).await, JobStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_project_holds_no_more_than_its_limits_allow_and_says_which_it_reached() {
    let mut h = Harness::new().await;
    let lz = h.register("box").await;
    let (mut agent, _) = h.connect(&lz, 8, Vec::new()).await;
    let bio = Uuid::new_v4();
    h.store.insert_project(bio, "bio", "", store::now()).await.unwrap();
    let of_bio = |h: &Harness, cpus| Job { project_id: bio, ..h.new_job(cpus) };

    // Nominal 2 CPUs and no borrowing: a third CPU is never taken, whatever is free.
    h.set_limits(bio, r#"{"nominal": {"cpus": 2}, "borrowing_limit": {"cpus": 0}, "max_queued_jobs": 3}"#).await;
    let (first, second, third) = (of_bio(&h, 1), of_bio(&h, 1), of_bio(&h, 1));
    for job in [&first, &second, &third] {
        h.submit_job(job.clone()).await.unwrap();
    }
    assert_eq!(agent.runs(), [first.job_id, second.job_id]);
    let why = (PendingKind::Quota, "project bio has 2 of 2 CPUs on station local and may not borrow".to_owned());
    assert_eq!(h.pending(third.job_id).await, Some(why));
    // Other projects' jobs use the room bio may not.
    let personal = h.submit(3).await;
    assert_eq!(agent.runs(), [personal.job_id]);

    // The queued-jobs cap refuses a submission past it, and the whole of an array past it.
    let (fourth, fifth) = (of_bio(&h, 1), of_bio(&h, 1));
    h.submit_job(fourth.clone()).await.unwrap();
    h.submit_job(fifth.clone()).await.unwrap();
    let refused = h.submit_job(of_bio(&h, 1)).await.unwrap_err();
    let SchedulerError::Conflict(detail) = refused else { panic!("{refused:?}") };
    assert!(
        detail.contains("project bio has 3 of its 3 queued jobs on station local; 1 more would pass that"),
        "{detail}"
    );
    let array = vec![of_bio(&h, 1), of_bio(&h, 1)];
    assert!(matches!(
        h.ask(Call::SubmitMany { jobs: array, audit: Vec::new() }).await,
        Err(SchedulerError::Conflict(_))
    ));
    assert_eq!(h.queue.lock().unwrap().count(&[], None), 3, "nothing of the refused array is queued");

    // Borrowing up to 1 more: the third starts, the fourth waits, saying how far bio may go.
    h.set_limits(bio, r#"{"nominal": {"cpus": 2}, "borrowing_limit": {"cpus": 1}, "max_running_jobs": 5}"#).await;
    assert_eq!(agent.runs(), [third.job_id]);
    let Outcome::ProjectUsage { usage } = h.ask(Call::ProjectUsage { project_id: bio }).await.unwrap() else {
        panic!("not a usage")
    };
    let in_use = usage.iter().find(|(station, _)| *station == DEFAULT_STATION_ID).unwrap().1;
    assert_eq!((in_use.cpus, in_use.memory_mb, in_use.running_jobs, in_use.queued_jobs), (3, 768, 3, 2));
    let reason = h.pending(fourth.job_id).await.unwrap().1;
    assert_eq!(
        reason,
        "project bio has 3 of 3 CPUs on station local (2 nominal, 1 borrowed at most); this job asks for 1"
    );

    // At most two running jobs: none more starts until two have ended.
    h.set_limits(bio, r#"{"max_running_jobs": 2}"#).await;
    h.report(&agent, first.job_id, JobStatus::Completed).await;
    assert!(agent.runs().is_empty(), "bio still runs two");
    h.report(&agent, second.job_id, JobStatus::Completed).await;
    assert_eq!(agent.runs(), [fourth.job_id], "one of bio's ended, the next starts");

    // Limits survive a hand-over: the new task reads them from the store.
    h.hand_over().await;
    h.submit_job(of_bio(&h, 1)).await.unwrap();
    let (kind, detail) = h.pending(fifth.job_id).await.unwrap();
    assert_eq!(
        (kind, detail.as_str()),
        (PendingKind::Quota, "project bio has 2 of its 2 running jobs on station local")
    );
}

/// Every refusal crosses between replicas: each kind of error survives mail as it is.
#[test]
fn every_scheduler_error_goes_through_mail() {
    let errors = [
        SchedulerError::Invalid { field: Some("lz_id".into()), detail: "no".into() },
        SchedulerError::Invalid { field: None, detail: "no".into() },
        SchedulerError::Conflict("taken".into()),
        SchedulerError::Refused("not yours".into()),
        SchedulerError::Unavailable("later".into()),
        SchedulerError::Store("broke".into()),
    ];
    for error in errors {
        let mail: SchedulerResult<Outcome> = Err(error.clone());
        let text = serde_json::to_string(&mail).unwrap();
        let back: SchedulerResult<Outcome> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.unwrap_err(), error, "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn fair_share_gives_freed_room_to_the_project_that_used_less() {
    let h = Harness::new().await;
    let lz = h.register("box").await;
    let other = store::test_support::add_user(&h.store, "other").await;
    // One-minute jobs: each is charged a CPU-minute as it starts.
    let minute = |job: Job| Job { time_limit: Some(1), ..job };
    let mut mine = Vec::new();
    for _ in 0..6 {
        mine.push(h.submit_job(minute(h.new_job(1))).await.unwrap().job_id);
    }
    let (mut agent, _) = h.connect(&lz, 2, Vec::new()).await;
    assert_eq!(agent.runs(), mine[..2]);
    // The other user's personal project queues later, behind four of mine.
    let mut theirs = Vec::new();
    for _ in 0..3 {
        let job = Job { user_id: other.user_id, project_id: other.user_id, ..minute(h.new_job(1)) };
        theirs.push(h.submit_job(job).await.unwrap().job_id);
    }
    let (kind, detail) = h.pending(mine[2]).await.unwrap();
    assert_eq!(kind, PendingKind::Priority);
    assert!(detail.starts_with("behind 3 jobs of projects with less usage"), "{detail}");

    // Half a minute on, one of mine ends: my project has used 30 CPU-seconds and is charged 60
    // for the other, against nothing: their job starts, though mine were first in line.
    h.pass_time(&lz, 30).await;
    h.report(&agent, mine[0], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [theirs[0]]);
    // 15 s later the other ends: mine used 75 CPU-seconds against their 60 charged: theirs again.
    h.pass_time(&lz, 15).await;
    h.report(&agent, mine[1], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [theirs[1]]);
    // Their second ends at once, using nothing: 60 charged for their first against my 75, so
    // their last starts.
    h.report(&agent, theirs[1], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [theirs[2]]);
    // 5 s on their first ends, having used 20: with 60 charged for their last, 80 against 75.
    h.pass_time(&lz, 5).await;
    h.report(&agent, theirs[0], JobStatus::Completed).await;
    assert_eq!(agent.runs(), [mine[2]]);
    let (_, detail) = h.pending(mine[3]).await.unwrap();
    assert!(!detail.contains("less usage"), "nobody lighter waits: {detail}");
}

#[tokio::test(start_paused = true)]
async fn borrowed_room_is_reclaimed_for_a_project_below_its_nominal_and_the_borrowed_jobs_queue_again() {
    let h = Harness::new().await;
    let lz = h.register("box").await;
    let (mut agent, _) = h.connect(&lz, 4, Vec::new()).await;
    let (bio, astro) = (Uuid::new_v4(), Uuid::new_v4());
    h.store.insert_project(bio, "bio", "", store::now()).await.unwrap();
    h.store.insert_project(astro, "astro", "", store::now()).await.unwrap();
    h.set_limits(bio, r#"{"nominal": {"cpus": 2}}"#).await;
    h.set_limits(astro, r#"{"nominal": {"cpus": 2}}"#).await;
    let of = |h: &Harness, project_id| Job { project_id, ..h.new_job(1) };

    // Bio borrows the two CPUs astro leaves idle.
    let bios: Vec<Job> = (0..4).map(|_| of(&h, bio)).collect();
    for job in &bios {
        h.submit_job(job.clone()).await.unwrap();
    }
    assert_eq!(agent.runs().len(), 4);

    // Where the station does not reclaim, astro's job waits for room like any other.
    let reclaim = |on| mission_api::UpdateStation { reclaim: Some(on), ..Default::default() };
    h.store.update_station(DEFAULT_STATION_ID, &reclaim(false)).await.unwrap();
    h.ask(Call::StationChanged { station_id: DEFAULT_STATION_ID }).await.unwrap();
    let first = h.submit_job(of(&h, astro)).await.unwrap();
    assert_eq!(agent.orders(), (vec![], vec![]));
    assert_eq!(h.pending(first.job_id).await.unwrap().0, PendingKind::Resources);

    // Once it does, bio's newest job is stopped with the grace period; astro's waits for it.
    h.store.update_station(DEFAULT_STATION_ID, &reclaim(true)).await.unwrap();
    h.ask(Call::StationChanged { station_id: DEFAULT_STATION_ID }).await.unwrap();
    assert_eq!(agent.orders(), (vec![], vec![(bios[3].job_id, 20)]));
    let (kind, detail) = h.pending(first.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Resources);
    assert_eq!(
        detail,
        "waiting for 1 borrowed jobs to stop on landing zone box, reclaimed for project astro, which is below its nominal"
    );
    // Meanwhile, what would borrow (a personal project has no nominal) does not take the room.
    let personal = h.submit(1).await;
    let (kind, detail) = h.pending(personal.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Quota);
    assert!(detail.starts_with("room on station local is being reclaimed for project astro"), "{detail}");

    // Stopped, bio's job goes back in line (not ended, its attempt unchanged) and astro's starts.
    h.report(&agent, bios[3].job_id, JobStatus::Stopped).await;
    assert_eq!(agent.runs(), [first.job_id]);
    let requeued = h.store.job_row(bios[3].job_id).await.unwrap().unwrap();
    assert_eq!((requeued.status, requeued.attempt, requeued.lz_id), (JobStatus::Queued, 1, None));
    let history = h.store.job_history(bios[3].job_id).await.unwrap();
    let told = history.last().and_then(|t| t.detail.clone()).unwrap_or_default();
    assert!(told.starts_with("its room was reclaimed for project astro, below its nominal on station local"), "{told}");
    assert!(!h.host.ended.lock().unwrap().contains(&bios[3].job_id));

    // Astro's second job takes bio's next borrowed CPU. Its user stops that one meanwhile: a
    // user's stop wins over the reclaim (at once, no grace), and the job ends stopped.
    let second = h.submit_job(of(&h, astro)).await.unwrap();
    assert_eq!(agent.orders(), (vec![], vec![(bios[2].job_id, 20)]));
    h.ask(Call::Stop { job_id: bios[2].job_id, by: "alice".into(), audit: Vec::new() }).await.unwrap();
    assert_eq!(agent.orders(), (vec![], vec![(bios[2].job_id, 0)]));
    h.report(&agent, bios[2].job_id, JobStatus::Failed).await;
    assert_eq!(agent.runs(), [second.job_id]);
    assert_eq!(h.status(bios[2].job_id).await, JobStatus::Stopped);

    // Astro's third would borrow: nothing is reclaimed for it, and bio keeps its nominal two.
    let third = h.submit_job(of(&h, astro)).await.unwrap();
    assert_eq!(agent.orders(), (vec![], vec![]));
    assert_eq!(h.status(third.job_id).await, JobStatus::Queued);
}

#[tokio::test(start_paused = true)]
async fn a_task_that_needs_disk_goes_where_that_much_is_free() {
    let h = Harness::new().await;
    let (small, large) = (h.register("small").await, h.register("large").await);
    let (mut small_agent, _) = h.connect_with(&small, Hello { disk_mb: Some(100), ..hello(2) }).await;
    let (mut large_agent, _) = h.connect_with(&large, Hello { disk_mb: Some(5_000), ..hello(2) }).await;
    let needing = |disk_mb| {
        let task = mission_api::tes::JobTask { task: Default::default(), images: Vec::new(), disk_mb };
        Job { task: Some(Box::new(task)), ..h.new_job(1) }
    };
    let refused = h.submit_job(needing(10_000)).await.unwrap_err();
    assert!(refused.to_string().contains("no landing zone of the station has 10000 MB free"), "{refused}");
    assert!(refused.to_string().contains("the most is 5000 MB"), "{refused}");
    // The small LZ has the most free CPUs after the first job, yet not the disk.
    let first = h.submit_job(needing(1_000)).await.unwrap();
    let second = h.submit_job(needing(1_000)).await.unwrap();
    assert_eq!(large_agent.runs(), [first.job_id, second.job_id]);
    assert!(small_agent.runs().is_empty());
    // A job that asks for no disk may go anywhere.
    let plain = h.submit(1).await;
    assert_eq!(small_agent.runs(), [plain.job_id]);
}

/// A gang of `nodes` nodes of `cpus` CPUs each, to submit.
fn gang(h: &Harness, nodes: u32, cpus: u32) -> Job {
    Job {
        gang: Some(mission_api::JobGang { nodes, launch: Default::default(), lz_ids: Vec::new() }),
        ..h.new_job(cpus)
    }
}

#[tokio::test(start_paused = true)]
async fn a_gang_is_placed_all_at_once_or_holds_its_landing_zones_and_never_half() {
    let h = Harness::new().await;
    let lzs = [h.register("a").await, h.register("b").await, h.register("c").await];
    let mut agents = Vec::new();
    for lz in &lzs {
        agents.push(h.connect(lz, 4, Vec::new()).await.0);
    }
    // One job takes 3 CPUs of one LZ: a gang of three nodes of 3 CPUs cannot start, and holds
    // all three landing zones (a small job and a smaller gang behind it wait), saying why.
    let big = h.submit(3).await;
    let holder = agents.iter_mut().position(|agent| agent.runs() == [big.job_id]).unwrap();
    let first = h.submit_job(gang(&h, 3, 3)).await.unwrap();
    let second = h.submit_job(gang(&h, 2, 2)).await.unwrap();
    let small = h.submit(1).await;
    for agent in &mut agents {
        assert!(agent.runs().is_empty(), "nothing starts on the LZs the first gang holds");
    }
    let (kind, why) = h.pending(first.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::Resources);
    assert!(why.contains("needs 3 landing zones with 3 free CPUs, 256 MB on its station; 2 have them now"), "{why}");

    // Room on all three: the first gang starts on all of them at once; the second, which would
    // fit on none now, holds two, and the small job starts on the third.
    h.report(&agents[holder], big.job_id, JobStatus::Completed).await;
    let placed = h.store.job_row(first.job_id).await.unwrap().unwrap();
    let nodes = placed.gang.expect("a gang").lz_ids;
    assert_eq!(nodes.len(), 3);
    assert_eq!(placed.lz_id, Some(nodes[0]));
    let mut smalls = 0;
    for agent in &mut agents {
        let runs = agent.runs();
        assert!(runs.contains(&first.job_id), "every node runs its part: {runs:?}");
        assert!(!runs.contains(&second.job_id), "never half a gang: {runs:?}");
        smalls += runs.iter().filter(|id| **id == small.job_id).count();
    }
    assert_eq!(smalls, 1);

    // Rank 0 completes while the others still run: the gang waits for them.
    let agent_of = |lz_id: Uuid| lzs.iter().position(|lz| lz.lz_id == lz_id).unwrap();
    h.report(&agents[agent_of(nodes[0])], first.job_id, JobStatus::Completed).await;
    assert_eq!(h.status(first.job_id).await, JobStatus::Assigned);
    h.report(&agents[agent_of(nodes[1])], first.job_id, JobStatus::Completed).await;
    assert_eq!(h.status(first.job_id).await, JobStatus::Assigned);
    h.report(&agents[agent_of(nodes[2])], first.job_id, JobStatus::Completed).await;
    assert_eq!(h.status(first.job_id).await, JobStatus::Completed);
    // Its room is free on all three: the second gang starts on two of them. No node is told to
    // stop a part it ended.
    let mut started = 0;
    for agent in &mut agents {
        let (runs, stops) = agent.orders();
        assert!(stops.is_empty(), "no stop for an ended part: {stops:?}");
        started += runs.iter().filter(|id| **id == second.job_id).count();
    }
    assert_eq!(started, 2);
}

#[tokio::test(start_paused = true)]
async fn a_gangs_node_failing_ends_it_naming_the_node_and_stops_the_others() {
    let h = Harness::new().await;
    let lzs = [h.register("a").await, h.register("b").await];
    let mut agents = Vec::new();
    for lz in &lzs {
        agents.push(h.connect(lz, 2, Vec::new()).await.0);
    }
    let too_large = h.submit_job(gang(&h, 3, 1)).await.unwrap_err();
    assert!(
        too_large.to_string().contains("the station has 2 landing zones that could ever hold a node"),
        "{too_large}"
    );
    let job = h.submit_job(gang(&h, 2, 2)).await.unwrap();
    let nodes = h.store.job_row(job.job_id).await.unwrap().unwrap().gang.unwrap().lz_ids;
    let (leader, other) = if nodes[0] == lzs[0].lz_id { (0, 1) } else { (1, 0) };
    for agent in &mut agents {
        assert_eq!(agent.runs(), [job.job_id]);
    }
    h.report(&agents[leader], job.job_id, JobStatus::Running).await;
    h.report_why(&agents[other], job.job_id, JobStatus::Failed, Some("exit status 3")).await;
    let ended = h.store.job_row(job.job_id).await.unwrap().unwrap();
    assert_eq!(ended.status, JobStatus::Failed);
    let reason = ended.reason.unwrap();
    assert!(reason.starts_with(&format!("node 1 (landing zone {})", lzs[other].name)), "{reason}");
    assert!(reason.contains("exit status 3"), "{reason}");
    assert_eq!(agents[leader].orders(), (vec![], vec![(job.job_id, 0)]), "rank 0 is stopped");
    // Rank 0's part holds its room until its agent says it has stopped: a new gang waits.
    let next = h.submit_job(gang(&h, 2, 2)).await.unwrap();
    assert!(agents[leader].runs().is_empty() && agents[other].runs().is_empty());
    // A late report of the ended gang's part moves nothing of the job.
    h.report(&agents[leader], job.job_id, JobStatus::Uploading).await;
    assert_eq!(h.status(job.job_id).await, JobStatus::Failed);
    h.report(&agents[leader], job.job_id, JobStatus::Stopped).await;
    assert_eq!(h.status(job.job_id).await, JobStatus::Failed);
    // Both landing zones have their room back.
    for agent in &mut agents {
        assert_eq!(agent.runs(), [next.job_id]);
    }
    // A user's stop stops every node.
    h.ask(Call::Stop { job_id: next.job_id, by: "alice".into(), audit: Vec::new() }).await.unwrap();
    for agent in &mut agents {
        assert_eq!(agent.orders(), (vec![], vec![(next.job_id, 0)]));
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_that_asked_to_be_requeued_comes_back_as_its_next_attempt() {
    let h = Harness::new().await;
    let lz = h.register("a").await;
    let (mut agent, _) = h.connect(&lz, 2, Vec::new()).await;
    let job = h.submit_job(Job { requeue: true, time_limit: Some(1), ..h.new_job(1) }).await.unwrap();
    assert_eq!(agent.runs(), [job.job_id]);
    h.report(&agent, job.job_id, JobStatus::Running).await;
    h.report_why(&agent, job.job_id, JobStatus::Failed, Some(mission_api::TIME_LIMIT_REASON)).await;
    // Back in line as its next attempt, and placed again at once.
    assert_eq!(agent.runs(), [job.job_id]);
    let row = h.store.job_row(job.job_id).await.unwrap().unwrap();
    assert_eq!((row.status, row.attempt), (JobStatus::Assigned, 2));
    // A failure of its own program ends it as any job's does.
    let failed = Report {
        exit_code: Some(3),
        reason: Some("exit status 3".into()),
        ..Report::new(job.job_id, JobStatus::Failed, store::now())
    };
    h.ask(Call::Reports { lz: agent.lz.clone(), reports: vec![failed] }).await.unwrap();
    assert_eq!(h.status(job.job_id).await, JobStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn a_requeued_gang_whose_node_went_silent_runs_again_once_it_is_back() {
    let h = Harness::new().await;
    let (a, b) = (h.register("a").await, h.register("b").await);
    let (mut agent_a, _) = h.connect(&a, 2, Vec::new()).await;
    let (mut agent_b, _) = h.connect(&b, 2, Vec::new()).await;
    let job = h.submit_job(Job { requeue: true, ..gang(&h, 2, 1) }).await.unwrap();
    assert_eq!((agent_a.runs(), agent_b.runs()), (vec![job.job_id], vec![job.job_id]));
    h.report(&agent_a, job.job_id, JobStatus::Running).await;
    h.report(&agent_b, job.job_id, JobStatus::Running).await;
    // b goes silent: the gang is back in line as attempt 2, and a stops its part.
    h.pass_time(&a, LEASE.as_secs() + 10).await;
    h.until(job.job_id, JobStatus::Queued).await;
    assert_eq!(h.store.job_row(job.job_id).await.unwrap().unwrap().attempt, 2);
    assert_eq!(agent_a.orders(), (vec![], vec![(job.job_id, 0)]));
    let (kind, why) = h.pending(job.job_id).await.unwrap();
    assert_eq!(kind, PendingKind::NoLandingZone, "{why}");
    // b is back, and a's part of the first attempt has stopped: the gang runs again on both.
    let (mut agent_b, _) = h.connect(&b, 2, Vec::new()).await;
    assert!(agent_b.runs().is_empty(), "a's part of attempt 1 still holds its room");
    let stopped = Report { attempt: Some(1), ..Report::new(job.job_id, JobStatus::Stopped, store::now()) };
    h.ask(Call::Reports { lz: a.clone(), reports: vec![stopped] }).await.unwrap();
    assert_eq!((agent_a.runs(), agent_b.runs()), (vec![job.job_id], vec![job.job_id]));
}

/// What a plain agent offering `cpus` CPUs (and 8 GB) says as it connects.
fn hello(cpus: u32) -> Hello {
    Hello::plain(Resources { cpu_count: cpus, memory_amount: 8192, gpu_count: 0 }, "test")
}
