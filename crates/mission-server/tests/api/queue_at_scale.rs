//! A hundred thousand queued jobs through the real server: an array queued while no landing zone
//! is online, the server restarted on it (or the lead handed over between replicas), then drained
//! by an agent, with the server going away again halfway while the agent holds jobs. The agent is a [`FakeAgent`]: it reports each job
//! done as soon as it is told to run it, so what the test drives is the server's queue, not
//! process start-up (the agent's own tests run real processes).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use mission_api::lz::{Order, Report};
use mission_api::{JobArray, JobStatus, Resources, RunJob, RunJobArray};
use mission_client::{CreateMission, ListJobs, RegisterLandingZone, Uuid};
use mission_server::catalogue::SHELL;
use mission_testkit::{FakeAgent, TestServer};

use mission_server::DEFAULT_STATION_ID as LOCAL_STATION;

/// Elements of the array.
const N: usize = 100_000;

/// The agent runs this many jobs at once (each takes 1 CPU and 64 MB).
const SLOTS: usize = 1_000;

const AGENT: Resources = Resources { cpu_count: SLOTS as u32, memory_amount: 64 * SLOTS as u64, gpu_count: 0 };

/// The whole test may take this long (a debug build drains about 1,000 jobs/s).
const DEADLINE: Duration = Duration::from_secs(600);

/// The service under test, and what "the server goes away" means for it: one server (on
/// SQLite) restarts; of two replicas (on PostgreSQL) the one that leads stops, the other takes
/// the lead, and the stopped one starts again as the stand-by for the next hand-over.
struct Service {
    replicas: Vec<TestServer>,
    leading: usize,
    _shared: Option<tempfile::TempDir>,
}

impl Service {
    fn server(&self) -> &TestServer {
        &self.replicas[self.leading]
    }

    async fn go_away(&mut self) {
        if self.replicas.len() == 1 {
            return self.replicas[0].restart().await;
        }
        let stopped = self.leading;
        self.replicas[stopped].stop().await;
        self.leading = 1 - stopped;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !leads(&self.server().url).await {
            assert!(Instant::now() < deadline, "the other replica did not take the lead in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.replicas[stopped].start().await;
    }
}

/// Whether the replica at `url` runs the scheduler, from its metrics.
async fn leads(url: &str) -> bool {
    let metrics = crate::http().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    metrics.contains("mission_scheduler_leader 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_000_element_array_queued_offline_survives_restarts_and_each_element_runs_once() {
    queue_and_drain(Service { replicas: vec![TestServer::spawn().await], leading: 0, _shared: None }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_000_element_array_queued_offline_survives_leader_hand_overs_and_each_element_runs_once() {
    let Some((a, b, shared)) = crate::replicas::two_replicas_on(None).await else { return };
    queue_and_drain(Service { replicas: vec![a, b], leading: 0, _shared: Some(shared) }).await;
}

/// Queues the array with no landing zone online; the service goes away and comes back with
/// them all queued, then again halfway through the drain while the agent holds jobs.
async fn queue_and_drain(mut service: Service) {
    let started = Instant::now();
    let server = service.server();
    server.add_user("root", true).await;
    let worker = RegisterLandingZone { name: "worker".into(), cluster_account: None };
    let token = server.sign_in("root").await.register_landing_zone(LOCAL_STATION, &worker).await.unwrap().token;
    let shell = CreateMission {
        name: "sweep".into(),
        mission_type_id: Some(SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        ..Default::default()
    };
    let mission = server.client.create_mission(&shell).await.unwrap();
    let run = RunJob {
        station_id: LOCAL_STATION,
        cpu_count: Some(1),
        memory_amount: Some(64),
        gpu_count: Some(0),
        ..Default::default()
    };
    let request = RunJobArray { run, range: Some(format!("1-{N}")), ..Default::default() };
    let array = server.client.run_job_array(mission.mission_id, &request).await.unwrap();
    assert_eq!((array.size, array.queued), (N as u64, N as u64));
    check_positions(server, array.array_id, 0).await;

    // Nothing is lost with them all queued.
    service.go_away().await;
    let array = array_now(&service, &array).await;
    assert_eq!(array.queued, N as u64, "every element is still queued");
    check_positions(service.server(), array.array_id, 0).await;

    let mut agent = FakeAgent::connect(&service.server().url, &token, AGENT).await;
    let mut seen = HashSet::with_capacity(N);
    let mut went_away = false;
    while seen.len() < N {
        assert!(started.elapsed() < DEADLINE, "drained {} of {N} in {DEADLINE:?}", seen.len());
        // The pass fills the agent: exactly as many orders as it has slots, or as remain.
        let expected = SLOTS.min(N - seen.len());
        let mut held = Vec::with_capacity(expected);
        while held.len() < expected {
            match agent.next_order().await {
                Order::Run(job) => {
                    assert!(
                        seen.insert(job.job_id),
                        "job {} (element {:?}) was sent twice",
                        job.job_id,
                        job.array_index
                    );
                    held.push(job.job_id);
                }
                Order::Stop { job_id, .. } => panic!("nothing was stopped, yet job {job_id} was"),
                Order::Tunnel { .. } => panic!("no session was asked for, yet a tunnel was"),
                Order::Ping => unreachable!("next_order skips pings"),
            }
        }
        // The agent is full: nothing moves until it reports, so the figures are exact.
        let progress = array_now(&service, &array).await;
        let done = (seen.len() - held.len()) as u64;
        assert_eq!(
            (progress.queued, progress.running, progress.completed),
            ((N - seen.len()) as u64, held.len() as u64, done),
            "progress with {} placed",
            seen.len()
        );
        if seen.len() % 20_000 == 0 && seen.len() < N {
            check_positions(service.server(), array.array_id, seen.len()).await;
            agent.heartbeat().await;
        }
        if !went_away && seen.len() >= N / 2 {
            // While the agent holds jobs: it connects again naming them, and none is placed
            // again.
            went_away = true;
            drop(agent);
            service.go_away().await;
            agent = FakeAgent::reconnect(&service.server().url, &token, AGENT, held.clone()).await;
            assert!(agent.welcome.drop.is_empty(), "the server keeps the jobs the agent runs");
            assert_eq!(array_now(&service, &array).await.running, held.len() as u64);
        }
        let now = chrono::Utc::now();
        let reports: Vec<Report> = held
            .iter()
            .flat_map(|id| {
                [
                    Report::new(*id, JobStatus::Running, now),
                    Report { exit_code: Some(0), ..Report::new(*id, JobStatus::Completed, now) },
                ]
            })
            .collect();
        agent.report(&reports).await;
    }
    let array = array_now(&service, &array).await;
    assert_eq!((array.queued, array.running, array.completed), (0, 0, N as u64), "every element completed once");
    assert!(agent.next_order_within(Duration::from_millis(500)).await.is_none(), "nothing more is sent");
}

async fn array_now(service: &Service, array: &JobArray) -> JobArray {
    service.server().client.get_job_array(array.array_id).await.unwrap()
}

/// With the first `placed` elements placed (they go in index order), the list counts the rest as
/// queued, and a queued element's place in line is its index less those: in its station's queue
/// and in its own sub-queue alike.
async fn check_positions(server: &TestServer, array_id: Uuid, placed: usize) {
    let all_queued = ListJobs { statuses: vec![JobStatus::Queued], items: 1, ..Default::default() };
    let total = server.client.list_jobs_page(&all_queued).await.unwrap().total;
    assert_eq!(total, (N - placed) as u64, "the list's total of queued jobs with {placed} placed");
    // A deep page of them all, newest first, starts where as many newer ones end (the leader
    // finds where in its queue; a replica that does not lead has the database skip them).
    let left = (N - placed) as u32;
    let page = left / 25 / 2 + 1;
    let deep = ListJobs { statuses: vec![JobStatus::Queued], items: 25, page, ..Default::default() };
    let listed = server.client.list_jobs(&deep).await.unwrap();
    let first = N as u32 - (page - 1) * 25;
    assert_eq!(
        listed.iter().map(|j| j.array_index.unwrap()).collect::<Vec<_>>(),
        (first - 24..=first).rev().collect::<Vec<_>>(),
        "page {page} of the queued with {placed} placed"
    );
    let beyond = ListJobs { page: left / 25 + 2, ..deep };
    assert!(server.client.list_jobs(&beyond).await.unwrap().is_empty(), "a page past the last is empty");
    let queued =
        ListJobs { array_ids: vec![array_id], statuses: vec![JobStatus::Queued], items: 50, ..Default::default() };
    let page = server.client.list_jobs(&queued).await.unwrap();
    assert!(!page.is_empty(), "queued elements are listed");
    for job in page.iter().take(5) {
        let listed = job.position.expect("a listed queued job has a position");
        let read = server.client.get_job(job.job_id).await.unwrap().position.expect("a queued job has a position");
        let expected = u64::from(job.array_index.unwrap()) - placed as u64;
        assert_eq!(
            (read.station, read.own),
            (expected, expected),
            "element {:?} with {placed} placed",
            job.array_index
        );
        assert_eq!(listed, read, "the list and the job agree");
    }
}
