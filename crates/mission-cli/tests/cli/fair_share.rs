//! Fair-share order end to end: real `mission lz` agents running real jobs for two projects.

use mission_client::{Client, CreateProject, JobStatus, ListJobs, ProjectRole, RunJob, Uuid};

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission, wait_until, wait_until_explained};

/// A server with a 2-CPU landing zone on its local station, and two projects: alice's bio and
/// bob's astro.
pub(super) struct Teams {
    pub server: mission_testkit::TestServer,
    /// An admin.
    pub root: Client,
    pub bob: Client,
    pub bio: Uuid,
    pub astro: Uuid,
    _agent: Agent,
}

impl Teams {
    pub async fn start(adjust: impl FnOnce(&mut mission_server::ServerConfig)) -> Self {
        let (server, root) = cluster(adjust).await;
        server.add_user("bob", false).await;
        let bob = server.sign_in("bob").await;
        let _agent = Agent::start(&server, &root, local_station(), "two-cpus", TWO_CPUS).await;
        let project = |name: &str| CreateProject { name: name.into(), description: None };
        let bio = root.create_project(&project("bio")).await.unwrap().project_id;
        let astro = root.create_project(&project("astro")).await.unwrap().project_id;
        root.set_project_member(bio, "alice", ProjectRole::Member).await.unwrap();
        root.set_project_member(astro, "bob", ProjectRole::Member).await.unwrap();
        Self { server, root, bob, bio, astro, _agent }
    }
}

/// Two projects with equal shares on a 2-CPU station: bio queues 40 jobs, then astro queues 10.
/// First come, first served would run astro's after all of bio's; fair-share gives each project
/// about a CPU, so astro's ten are done while most of bio's still wait.
#[tokio::test]
async fn a_project_that_queues_later_is_not_starved_by_one_that_queued_more() {
    let teams = Teams::start(|_| {}).await;
    let Teams { root, bob, bio, astro, .. } = &teams;
    let (alice, bio, astro) = (&teams.server.client, *bio, *astro);
    let work = "sleep 0.3\n";
    let (theirs, ours) =
        (mission(alice, SHELL, &[("run.sh", work)], &[]).await, mission(bob, SHELL, &[("run.sh", work)], &[]).await);
    let run = |project_id: Uuid| RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        project_id: Some(project_id),
        ..Default::default()
    };
    let mut bios = Vec::new();
    for _ in 0..40 {
        bios.push(alice.run_job(theirs.mission_id, &run(bio)).await.unwrap().job_id);
    }
    let mut astros = Vec::new();
    for _ in 0..10 {
        astros.push(bob.run_job(ours.mission_id, &run(astro)).await.unwrap().job_id);
    }

    // While astro has used less, bio's waiting jobs say they are behind its jobs.
    let last = *bios.last().unwrap();
    let said = std::sync::Mutex::new(String::new());
    wait_until_explained(
        "bio's last job waits behind astro's",
        || async {
            let job = alice.get_job(last).await.unwrap();
            let detail = job.pending_reason.map(|p| p.detail).unwrap_or_default();
            let behind = detail.contains("of projects with less usage");
            *said.lock().unwrap() = detail;
            behind
        },
        || format!("it says {:?}", said.lock().unwrap()),
    )
    .await;

    let root = &root;
    let done = |project_id: Uuid| {
        let filter = ListJobs { project_ids: vec![project_id], items: 100, ..Default::default() };
        async move {
            let jobs = root.list_jobs(&filter).await.unwrap();
            assert!(jobs.iter().all(|j| !j.status.is_final() || j.status == JobStatus::Completed), "{jobs:?}");
            jobs.into_iter().filter(|j| j.status == JobStatus::Completed).collect::<Vec<_>>()
        }
    };
    wait_until("astro's jobs are done", || async { done(astro).await.len() == astros.len() }).await;
    let astro_finished = done(astro).await.iter().filter_map(|j| j.finished_at).max().unwrap();
    let bio_done_by_then =
        done(bio).await.iter().filter(|j| j.finished_at.is_some_and(|at| at <= astro_finished)).count();
    assert!(bio_done_by_then <= 20, "astro's 10 ended after {bio_done_by_then} of bio's 40, not after about 10");
    wait_until("bio's jobs are done", || async { done(bio).await.len() == bios.len() }).await;
}
