//! Projects end to end: personal projects, admin-made shared projects, who sees and manages
//! them, members and roles, missions and jobs charged to a project and moved between them.

use std::collections::BTreeMap;

use mission_api::lz::{Order, Report};
use mission_api::{JobStatus, PendingKind, ProjectLimits, Resources, RunJob, UpdateProject};
use mission_client::{CreateMission, CreateProject, Error, ListJobs, ListMissions, ProjectRole, UpdateMission, Uuid};
use mission_server::DEFAULT_STATION_ID as LOCAL_STATION;
use mission_server::catalogue::SHELL;
use mission_testkit::{FakeAgent, TestServer};

use crate::status;

fn shell_mission(name: &str, project_id: Option<Uuid>) -> CreateMission {
    CreateMission {
        name: name.into(),
        mission_type_id: Some(SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        project_id,
        ..Default::default()
    }
}

fn run(project_id: Option<Uuid>) -> RunJob {
    RunJob { station_id: LOCAL_STATION, cpu_count: Some(1), project_id, ..Default::default() }
}

#[tokio::test]
async fn projects_members_and_what_they_are_charged() {
    let server = TestServer::spawn().await;
    for (name, admin) in [("root", true), ("mia", false), ("vic", false)] {
        server.add_user(name, admin).await;
    }
    let alice = &server.client;
    let root = server.sign_in("root").await;
    let mia = server.sign_in("mia").await;
    let vic = server.sign_in("vic").await;
    let alice_id = alice.whoami().await.unwrap().user_id;
    // An LZ that never connects: the jobs stay queued.
    let worker = mission_client::RegisterLandingZone { name: "worker".into(), cluster_account: None };
    root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap();

    // Everyone starts with a personal project, which is where missions and jobs go by default.
    let mine = alice.list_projects(1, 25).await.unwrap();
    assert_eq!(mine.projects.len(), 1);
    let personal = &mine.projects[0];
    assert_eq!(
        (personal.project_id, personal.name.as_str(), personal.personal, personal.role),
        (alice_id, "~alice", Some(alice_id), Some(ProjectRole::Manager))
    );
    let draft = alice.create_mission(&shell_mission("draft", None)).await.unwrap();
    assert_eq!(draft.project_id, alice_id);
    let job = alice.run_job(draft.mission_id, &run(None)).await.unwrap();
    assert_eq!(job.project_id, alice_id, "a job is charged to its mission's project");

    // Only admins create projects; names are unique, checked, and `~` is personal projects' mark.
    let bio = CreateProject { name: "bio".into(), description: Some("biology".into()) };
    assert_eq!(status(alice.create_project(&bio).await).0, 403);
    let bio = root.create_project(&bio).await.unwrap();
    assert_eq!((bio.name.as_str(), bio.personal, bio.role, bio.members), ("bio", None, None, 0));
    assert_eq!(status(root.create_project(&CreateProject { name: "bio".into(), description: None }).await).0, 409);
    let marked = CreateProject { name: "~alice2".into(), description: None };
    assert_eq!(status(root.create_project(&marked).await), (400, Some("name".into())));
    let blank = CreateProject { name: " ".into(), description: None };
    assert_eq!(status(root.create_project(&blank).await), (400, Some("name".into())));

    // A project is a 404 to those outside it, and to a member who is no manager, read-only.
    assert!(matches!(alice.get_project(bio.project_id).await, Err(Error::NotFound(_))));
    assert_eq!(status(alice.set_project_member(bio.project_id, "alice", ProjectRole::Member).await).0, 404);
    let added = root.set_project_member(bio.project_id, "mia", ProjectRole::Manager).await.unwrap();
    assert_eq!((added.username.as_str(), added.role), ("mia", ProjectRole::Manager));
    mia.set_project_member(bio.project_id, &alice_id.to_string(), ProjectRole::Member).await.unwrap();
    mia.set_project_member(bio.project_id, "vic", ProjectRole::Viewer).await.unwrap();
    assert_eq!(status(mia.set_project_member(bio.project_id, "nobody", ProjectRole::Member).await).0, 404);
    let members = alice.project_members(bio.project_id).await.unwrap();
    assert_eq!(
        members.iter().map(|m| (m.username.as_str(), m.role)).collect::<Vec<_>>(),
        [("alice", ProjectRole::Member), ("mia", ProjectRole::Manager), ("vic", ProjectRole::Viewer)]
    );
    assert_eq!(status(alice.set_project_member(bio.project_id, "vic", ProjectRole::Member).await).0, 403);
    let seen = alice.get_project(bio.project_id).await.unwrap();
    assert_eq!((seen.role, seen.members), (Some(ProjectRole::Member), 3));
    let names = |page: mission_api::ProjectPage| page.projects.into_iter().map(|p| p.name).collect::<Vec<_>>();
    assert_eq!(names(alice.list_projects(1, 25).await.unwrap()), ["bio", "~alice"]);
    assert_eq!(names(root.list_projects(1, 25).await.unwrap()), ["bio", "~alice", "~mia", "~root", "~vic"]);
    assert!(root.list_projects(1, 2).await.unwrap().has_more);

    // Managers change the description; only admins rename.
    let described = UpdateProject { description: Some("molecular biology".into()), ..Default::default() };
    assert_eq!(mia.update_project(bio.project_id, &described).await.unwrap().description, "molecular biology");
    assert_eq!(status(alice.update_project(bio.project_id, &described).await).0, 403);
    let renamed = UpdateProject { name: Some("biology".into()), ..Default::default() };
    assert_eq!(status(mia.update_project(bio.project_id, &renamed).await).0, 403);
    assert_eq!(root.update_project(bio.project_id, &renamed).await.unwrap().name, "biology");
    assert_eq!(status(root.update_project(alice_id, &renamed).await).0, 409, "a personal project keeps its name");

    // Members own missions and run jobs in it; viewers and outsiders do not, and nobody charges
    // a project they cannot see.
    let in_bio = alice.create_mission(&shell_mission("in bio", Some(bio.project_id))).await.unwrap();
    assert_eq!(in_bio.project_id, bio.project_id);
    let bio_job = alice.run_job(in_bio.mission_id, &run(None)).await.unwrap();
    assert_eq!(bio_job.project_id, bio.project_id);
    let charged_home = alice.run_job(in_bio.mission_id, &run(Some(alice_id))).await.unwrap();
    assert_eq!(charged_home.project_id, alice_id, "the run request names the project");
    assert_eq!(alice.run_job(draft.mission_id, &run(Some(bio.project_id))).await.unwrap().project_id, bio.project_id);
    assert_eq!(status(vic.create_mission(&shell_mission("x", Some(bio.project_id))).await).0, 403);
    let vics = vic.create_mission(&shell_mission("vic's", None)).await.unwrap();
    assert_eq!(status(vic.run_job(vics.mission_id, &run(Some(bio.project_id))).await).0, 403);
    let ghost = Some(Uuid::new_v4());
    assert_eq!(status(alice.create_mission(&shell_mission("x", ghost)).await), (400, Some("project_id".into())));
    assert_eq!(status(alice.run_job(draft.mission_id, &run(Some(mia_id(&mia).await))).await).0, 400);

    // Every member, viewers too, reads the project's missions and jobs, whoever owns them; only
    // their owners change them. Outsiders see none of it.
    assert_eq!(vic.get_mission_by_id(in_bio.mission_id).await.unwrap().name, "in bio");
    assert_eq!(vic.get_job(bio_job.job_id).await.unwrap().project_id, bio.project_id);
    assert_eq!(status(vic.stop_job(bio_job.job_id).await).0, 403);
    let renamed_by_vic = UpdateMission { name: Some("mine".into()), ..Default::default() };
    assert_eq!(status(vic.update_mission(in_bio.mission_id, &renamed_by_vic).await).0, 403);
    let of_bio = ListMissions { project_ids: vec![bio.project_id], ..Default::default() };
    let listed: Vec<String> = vic.list_missions(&of_bio).await.unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(listed, ["in bio"]);
    let charged = ListJobs { project_ids: vec![bio.project_id], ..Default::default() };
    let charged: Vec<Uuid> = vic.list_jobs(&charged).await.unwrap().into_iter().map(|j| j.job_id).collect();
    assert!(charged.contains(&bio_job.job_id) && charged.len() == 2, "{charged:?}");
    assert!(vic.list_jobs(&Default::default()).await.unwrap().is_empty(), "without the filter, their own");
    let not_theirs = ListJobs { project_ids: vec![alice_id], ..Default::default() };
    assert_eq!(status(vic.list_jobs(&not_theirs).await), (400, Some("project_ids".into())));
    let root_sees = ListMissions { project_ids: vec![bio.project_id], ..Default::default() };
    assert_eq!(root.list_missions(&root_sees).await.unwrap().len(), 1, "admins see every project");
    assert!(matches!(vic.get_mission_by_id(draft.mission_id).await, Err(Error::NotFound(_))));

    // A mission moves to another project of its owner's; its started jobs stay where they were.
    let moved = UpdateMission { project_id: Some(alice_id), ..Default::default() };
    assert!(alice.update_mission(in_bio.mission_id, &moved).await.unwrap());
    assert_eq!(alice.get_mission_by_id(in_bio.mission_id).await.unwrap().project_id, alice_id);
    let into_vic = UpdateMission { project_id: Some(vics.project_id), ..Default::default() };
    assert_eq!(status(alice.update_mission(in_bio.mission_id, &into_vic).await), (400, Some("project_id".into())));

    // A shared project goes when it holds nothing unfinished; a personal one only with its user.
    assert_eq!(status(mia.delete_project(bio.project_id).await).0, 403);
    assert_eq!(status(root.delete_project(bio.project_id).await).0, 409, "jobs charged to it are queued");
    assert_eq!(status(root.delete_project(alice_id).await).0, 409);
    assert_eq!(status(mia.set_project_member(mia_id(&mia).await, "alice", ProjectRole::Member).await).0, 409);
    for job in alice.list_jobs(&Default::default()).await.unwrap() {
        alice.stop_job(job.job_id).await.unwrap();
    }
    assert!(mia.remove_project_member(bio.project_id, "vic").await.unwrap());
    assert!(!mia.remove_project_member(bio.project_id, "vic").await.unwrap());
    assert!(root.delete_project(bio.project_id).await.unwrap());
    assert!(!root.delete_project(bio.project_id).await.unwrap());
    assert!(matches!(mia.get_project(bio.project_id).await, Err(Error::NotFound(_))));
}

async fn mia_id(mia: &mission_client::Client) -> Uuid {
    mia.whoami().await.unwrap().user_id
}

/// The next job the agent is told to run (within 10 s).
async fn next_run(agent: &mut FakeAgent) -> Uuid {
    match agent.next_order().await {
        Order::Run(job) => job.job_id,
        other => panic!("expected a run order, got {other:?}"),
    }
}

/// A server with an admin, root (signed in), the users `others`, and a connected agent of 4
/// CPUs on the local station.
async fn with_a_worker(others: &[&str]) -> (TestServer, mission_client::Client, FakeAgent) {
    with_a_worker_and(others, |_| {}).await
}

/// [`with_a_worker`] with the server's configuration adjusted.
async fn with_a_worker_and(
    others: &[&str],
    adjust: impl FnOnce(&mut mission_server::ServerConfig),
) -> (TestServer, mission_client::Client, FakeAgent) {
    let server = TestServer::spawn_with(adjust).await;
    server.add_user("root", true).await;
    for name in others {
        server.add_user(name, false).await;
    }
    let root = server.sign_in("root").await;
    let worker = mission_client::RegisterLandingZone { name: "worker".into(), cluster_account: None };
    let token = root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap().token;
    let offers = Resources { cpu_count: 4, memory_amount: 4096, gpu_count: 0 };
    let agent = FakeAgent::connect(&server.url, &token, offers).await;
    (server, root, agent)
}

/// The agent runs a job to its end.
async fn complete(agent: &FakeAgent, job_id: Uuid) {
    let now = mission_store::now();
    agent.report(&[Report::new(job_id, JobStatus::Running, now), Report::new(job_id, JobStatus::Completed, now)]).await;
}

#[tokio::test]
async fn a_project_never_holds_more_than_its_limits_on_a_station() {
    let (server, root, mut agent) = with_a_worker(&[]).await;
    let alice = &server.client;
    let bio = root.create_project(&CreateProject { name: "bio".into(), description: None }).await.unwrap();
    root.set_project_member(bio.project_id, "alice", ProjectRole::Member).await.unwrap();

    // Only admins set limits; they are checked, and name a station that exists.
    let one_cpu: ProjectLimits =
        serde_json::from_str(r#"{"nominal": {"cpus": 1}, "borrowing_limit": {"cpus": 0}, "max_queued_jobs": 2}"#)
            .unwrap();
    assert_eq!(status(alice.set_project_limits(bio.project_id, LOCAL_STATION, &one_cpu).await).0, 403);
    let negative = ProjectLimits { share: Some(-1.0), ..one_cpu.clone() };
    assert_eq!(
        status(root.set_project_limits(bio.project_id, LOCAL_STATION, &negative).await),
        (400, Some("share".into()))
    );
    assert_eq!(status(root.set_project_limits(bio.project_id, Uuid::new_v4(), &one_cpu).await).0, 404);
    let set = root.set_project_limits(bio.project_id, LOCAL_STATION, &one_cpu).await.unwrap();
    assert_eq!((set.station_name.as_str(), &set.limits, set.in_use), ("local", &one_cpu, Default::default()));

    // One CPU and no borrowing: with four free, bio's second job waits, saying why; others' run.
    let mission = alice.create_mission(&shell_mission("sweep", Some(bio.project_id))).await.unwrap();
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(alice.run_job(mission.mission_id, &run(None)).await.unwrap().job_id);
    }
    assert_eq!(next_run(&mut agent).await, jobs[0]);
    let refused = alice.run_job(mission.mission_id, &run(None)).await;
    assert!(status(refused).0 == 409, "a fourth passes max_queued_jobs");
    let theirs = alice.create_mission(&shell_mission("own", None)).await.unwrap();
    let own = alice.run_job(theirs.mission_id, &run(None)).await.unwrap();
    assert_eq!(next_run(&mut agent).await, own.job_id, "room bio may not use goes to others");
    let waiting = alice.get_job(jobs[1]).await.unwrap();
    let reason = waiting.pending_reason.unwrap();
    assert_eq!(
        (reason.kind, reason.detail.as_str()),
        (PendingKind::Quota, "project bio has 1 of 1 CPUs on station local and may not borrow")
    );
    let used = &alice.project_limits(bio.project_id).await.unwrap()[0];
    assert_eq!((used.in_use.cpus, used.in_use.running_jobs, used.in_use.queued_jobs), (1, 1, 2));

    // Its job ends: the next of bio's starts, and only it.
    complete(&agent, jobs[0]).await;
    assert_eq!(next_run(&mut agent).await, jobs[1]);
    assert!(agent.next_order_within(std::time::Duration::from_millis(500)).await.is_none(), "still one CPU");

    // Without limits it takes the free room at once.
    assert!(root.delete_project_limits(bio.project_id, LOCAL_STATION).await.unwrap());
    assert!(!root.delete_project_limits(bio.project_id, LOCAL_STATION).await.unwrap());
    assert_eq!(next_run(&mut agent).await, jobs[2]);
    let left = alice.project_limits(bio.project_id).await.unwrap();
    assert_eq!(left.len(), 1, "the station where it runs jobs, without limits");
    assert_eq!((left[0].updated_at, left[0].in_use.running_jobs), (None, 2));
}

/// The agent runs a job to its end, reporting that it ran for `seconds`.
async fn complete_after(agent: &FakeAgent, job_id: Uuid, seconds: f64) {
    let now = mission_store::now();
    let usage = mission_api::JobUsage { wall_time: seconds, ..Default::default() };
    let done = Report { usage: Some(usage), exit_code: Some(0), ..Report::new(job_id, JobStatus::Completed, now) };
    agent.report(&[Report::new(job_id, JobStatus::Running, now), done]).await;
}

#[tokio::test]
async fn a_budget_warns_its_members_at_80_percent_and_stops_its_jobs_at_100() {
    let (server, root, mut agent) = with_a_worker(&[]).await;
    let alice = &server.client;
    let astro = root.create_project(&CreateProject { name: "astro".into(), description: None }).await.unwrap();
    root.set_project_member(astro.project_id, "alice", ProjectRole::Member).await.unwrap();
    let mission = alice.create_mission(&shell_mission("sweep", Some(astro.project_id))).await.unwrap();

    // Only admins set budgets, of some hours, not less than none.
    let hour = mission_api::ProjectBudget {
        cpu_hours: Some(1.0),
        gpu_hours: None,
        kwh: None,
        money: None,
        period: mission_api::BudgetPeriod::Month,
    };
    assert_eq!(status(alice.set_project_budget(astro.project_id, &hour).await).0, 403);
    let negative = mission_api::ProjectBudget { cpu_hours: Some(-1.0), ..hour.clone() };
    assert_eq!(status(root.set_project_budget(astro.project_id, &negative).await), (400, Some("cpu_hours".into())));
    assert_eq!(alice.project_budget(astro.project_id).await.unwrap(), None);
    // The document says what is accepted.
    let document: serde_json::Value =
        crate::http().get(format!("{}/api/v1/openapi.json", server.url)).send().await.unwrap().json().await.unwrap();
    let schemas = &document["components"]["schemas"];
    assert_eq!(schemas["ProjectBudget"]["properties"]["cpu_hours"]["minimum"], 0, "{}", schemas["ProjectBudget"]);
    assert_eq!(schemas["ProjectLimits"]["properties"]["share"]["exclusiveMinimum"], 0);
    // Without amounts a budget only tracks what is spent.
    let tracked = mission_api::ProjectBudget { cpu_hours: None, ..hour.clone() };
    assert_eq!(root.set_project_budget(astro.project_id, &tracked).await.unwrap().budget, tracked);
    let set = root.set_project_budget(astro.project_id, &hour).await.unwrap();
    assert_eq!((set.budget, set.spent_cpu_hours), (hour.clone(), 0.0));
    let month = mission_api::BudgetPeriod::Month.words(set.period_start);

    // A job that ran 50 minutes spends 83% of the hour: alice, a member, hears of it.
    let watch = mission_client::WatchEvents { kinds: vec!["project".into()], ..Default::default() };
    let mut events = alice.watch_events(&watch).await.unwrap();
    let first = alice.run_job(mission.mission_id, &run(None)).await.unwrap().job_id;
    assert_eq!(next_run(&mut agent).await, first);
    complete_after(&agent, first, 3000.0).await;
    let warning = tokio::time::timeout(std::time::Duration::from_secs(10), events.next()).await.unwrap().unwrap();
    assert_eq!(warning.kind, "project.budget_warning");
    assert_eq!(warning.data["detail"], format!("project astro has spent 83% of its budget {month}"));
    assert_eq!(warning.data["project_id"], astro.project_id.to_string());
    let spent = alice.project_budget(astro.project_id).await.unwrap().unwrap();
    assert!((spent.spent_cpu_hours - 3000.0 / 3600.0).abs() < 1e-9, "{spent:?}");

    // A job holds what it may spend while it runs (its time limit, or an hour): two jobs of ten
    // minutes racing for the last ten never both start.
    let ten = RunJob { time_limit: Some(10), ..run(None) };
    let (second, third) =
        tokio::join!(alice.run_job(mission.mission_id, &ten), alice.run_job(mission.mission_id, &ten));
    let (second, third) = (second.unwrap().job_id, third.unwrap().job_id);
    let started = next_run(&mut agent).await;
    assert!(agent.next_order_within(std::time::Duration::from_millis(500)).await.is_none(), "never both");
    let third = if started == second { third } else { second };
    let reason = alice.get_job(third).await.unwrap().pending_reason.unwrap();
    let held = format!(
        "project astro has 0.17 of its 1 CPU-hours left {month}, 0.17 of them held by its running jobs; this job may \
         use 0.17 (its time limit, or an hour without one)"
    );
    assert_eq!((reason.kind, reason.detail), (PendingKind::Quota, held));
    // It ran 700 s: the hour is spent.
    complete_after(&agent, started, 700.0).await;
    let reason = alice.get_job(third).await.unwrap().pending_reason.unwrap();
    assert_eq!(
        (reason.kind, reason.detail),
        (PendingKind::Quota, format!("project astro spent its 1 CPU-hours {month}"))
    );

    // Two hours: it starts. Without a budget, nothing stops it either.
    let two = mission_api::ProjectBudget { cpu_hours: Some(2.0), ..hour };
    root.set_project_budget(astro.project_id, &two).await.unwrap();
    assert_eq!(next_run(&mut agent).await, third);
    // Prometheus sees it per project: what it runs, and what is left of its budget.
    let metrics = crate::http().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    for line in [
        "mission_project_running_jobs{project=\"astro\"} 1",
        "mission_project_cpus_in_use{project=\"astro\"} 1",
        "mission_project_budget_left_cpu_hours{project=\"astro\"} 0.97",
    ] {
        assert!(metrics.lines().any(|l| l.starts_with(line)), "{line} in\n{metrics}");
    }
    assert!(root.delete_project_budget(astro.project_id).await.unwrap());
    assert!(!root.delete_project_budget(astro.project_id).await.unwrap());
    assert_eq!(alice.project_budget(astro.project_id).await.unwrap(), None);
}

#[tokio::test]
async fn usage_per_project_user_and_label_for_whoever_may_see_it() {
    let (server, root, mut agent) = with_a_worker(&["bob", "mia"]).await;
    let (bob, mia) = (server.sign_in("bob").await, server.sign_in("mia").await);
    let alice = &server.client;
    let project = |name: &str| CreateProject { name: name.into(), description: None };
    let bio = root.create_project(&project("bio")).await.unwrap().project_id;
    let astro = root.create_project(&project("astro")).await.unwrap().project_id;
    root.set_project_member(bio, "alice", ProjectRole::Member).await.unwrap();
    root.set_project_member(bio, "mia", ProjectRole::Manager).await.unwrap();
    root.set_project_member(astro, "bob", ProjectRole::Member).await.unwrap();

    // alice runs two one-CPU hours in bio (sweeps a and b), bob half an hour on two CPUs in astro
    // (sweep a).
    let sweep = |value: &str| BTreeMap::from([("sweep".to_owned(), value.to_owned())]);
    let hers = alice.create_mission(&shell_mission("hers", Some(bio))).await.unwrap().mission_id;
    let his = bob.create_mission(&shell_mission("his", Some(astro))).await.unwrap().mission_id;
    for (client, mission, cpus, label, seconds) in
        [(alice, hers, 1, "a", 3600.0), (alice, hers, 1, "b", 3600.0), (&bob, his, 2, "a", 1800.0)]
    {
        let request = RunJob { cpu_count: Some(cpus), labels: sweep(label), ..run(None) };
        let job = client.run_job(mission, &request).await.unwrap().job_id;
        assert_eq!(next_run(&mut agent).await, job);
        complete_after(&agent, job, seconds).await;
    }

    let report = |client: &mission_client::Client, group_by: &str| {
        let query = mission_client::UsageReportQuery { group_by: group_by.into(), ..Default::default() };
        let client = client.clone();
        async move { client.usage_report(&query).await.unwrap() }
    };
    let summary = |report: mission_api::UsageReport| {
        report.groups.into_iter().map(|g| (g.group.unwrap_or_default(), g.jobs, g.cpu_hours_held)).collect::<Vec<_>>()
    };
    // Admins see everything; by project, user or a label's value.
    let by_project = report(&root, "project").await;
    assert_eq!(by_project.groups[0].id, Some(astro));
    assert_eq!(summary(by_project), [("astro".to_owned(), 1, 1.0), ("bio".to_owned(), 2, 2.0)]);
    assert_eq!(summary(report(&root, "user").await), [("alice".to_owned(), 2, 2.0), ("bob".to_owned(), 1, 1.0)]);
    assert_eq!(summary(report(&root, "label:sweep").await), [("a".to_owned(), 2, 2.0), ("b".to_owned(), 1, 1.0)]);
    let csv = root.usage_report_csv(&mission_client::UsageReportQuery::default()).await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("project,project_id,jobs,wall_hours,cpu_hours,cpu_hours_held,gpu_hours"), "{csv}");
    assert!(lines[2].starts_with(&format!("bio,{bio},2,2.0000,0.0000,2.0000,0.0000,")), "{csv}");
    assert_eq!(lines.len(), 3);
    // A manager sees the project's jobs; members their own only.
    assert_eq!(summary(report(&mia, "user").await), [("alice".to_owned(), 2, 2.0)]);
    assert_eq!(summary(report(alice, "project").await), [("bio".to_owned(), 2, 2.0)]);
    assert_eq!(summary(report(&bob, "label:sweep").await), [("a".to_owned(), 1, 1.0)]);
    // Bounds and bad requests.
    let later = mission_client::UsageReportQuery {
        since: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
        ..Default::default()
    };
    assert!(root.usage_report(&later).await.unwrap().groups.is_empty());
    for (group_by, field) in [("team", "group_by"), ("label:a b", "group_by")] {
        let query = mission_client::UsageReportQuery { group_by: group_by.into(), ..Default::default() };
        assert_eq!(status(root.usage_report(&query).await), (400, Some(field.into())));
    }
    let xml = crate::http()
        .get(format!("{}/api/v1/usage?format=xml", server.url))
        .bearer_auth(crate::token_for(&server, "root").await)
        .send()
        .await
        .unwrap();
    assert_eq!(xml.status(), 400);
}

/// A job's energy, carbon and money are reckoned as it ends by its station's settings, which
/// only admins change, within bounds (a wrong one is a 400 naming it); whatever an agent says
/// of them is not taken; `GET /usage` and its CSV sum them.
#[tokio::test]
async fn a_job_is_charged_its_energy_carbon_and_money_by_its_stations_settings() {
    use mission_api::{PriceBook, StationEnergy, UpdateStation};
    let (server, root, mut agent) = with_a_worker(&[]).await;
    let alice = &server.client;
    let prices = PriceBook { currency: "EUR".into(), cpu_hour: 0.02, gpu_hour: 0.0, gb_hour: 0.001, kwh: 0.25 };
    let green = StationEnergy { pue: 1.0, grid_gco2e_per_kwh: 100.0, prices: Some(prices), ..Default::default() };
    let set = |energy: &StationEnergy| UpdateStation { energy: Some(energy.clone()), ..Default::default() };
    assert_eq!(status(alice.update_station(LOCAL_STATION, &set(&green)).await).0, 403, "prices are the site's");
    let low_pue = StationEnergy { pue: 0.5, ..green.clone() };
    assert_eq!(status(root.update_station(LOCAL_STATION, &set(&low_pue)).await), (400, Some("energy.pue".into())));
    let mut euro = green.clone();
    euro.prices.as_mut().unwrap().currency = "euro".into();
    let refused = status(root.update_station(LOCAL_STATION, &set(&euro)).await);
    assert_eq!(refused, (400, Some("energy.prices.currency".into())));
    let mut negative = green.clone();
    negative.prices.as_mut().unwrap().kwh = -1.0;
    assert_eq!(
        status(root.update_station(LOCAL_STATION, &set(&negative)).await).1.as_deref(),
        Some("energy.prices.kwh")
    );
    assert_eq!(root.get_station(LOCAL_STATION).await.unwrap().energy, StationEnergy::default(), "nothing half-set");
    assert_eq!(root.update_station(LOCAL_STATION, &set(&green)).await.unwrap().energy, green);

    // A job of 1 CPU and 1000 MB that ran 30 minutes and used 15 of CPU; its agent's own
    // figure for its energy is not taken.
    let mission = alice.create_mission(&shell_mission("sweep", None)).await.unwrap();
    let ask = RunJob { memory_amount: Some(1000), ..run(None) };
    let job_id = alice.run_job(mission.mission_id, &ask).await.unwrap().job_id;
    assert_eq!(next_run(&mut agent).await, job_id);
    let now = mission_store::now();
    let usage = mission_api::JobUsage {
        wall_time: 1800.0,
        cpu_time: Some(900.0),
        energy_kwh: Some(99.0),
        ..Default::default()
    };
    let done = Report { usage: Some(usage), exit_code: Some(0), ..Report::new(job_id, JobStatus::Completed, now) };
    agent.report(&[Report::new(job_id, JobStatus::Running, now), done]).await;
    let job = tokio::time::timeout(std::time::Duration::from_secs(10), alice.wait_for_job(job_id)).await.unwrap();
    let usage = job.unwrap().usage.expect("reported");
    // (0.25 CPU-hours × 12 W + 1 GB × 0.5 h × 0.3725 W) × PUE 1 = 3.18625 Wh; × 100 g/kWh;
    // 0.5 CPU-hours held × 0.02 + 0.5 GB-hours × 0.001 + 0.00318625 kWh × 0.25.
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(usage.energy_kwh.unwrap(), 0.003_186_25), "{usage:?}");
    assert!(close(usage.co2e_g.unwrap(), 0.318_625), "{usage:?}");
    let cost = usage.cost.expect("the station has prices");
    assert!(close(cost.amount, 0.01 + 0.0005 + 0.003_186_25 * 0.25) && cost.currency == "EUR", "{cost:?}");

    // What ended before a change keeps what it was charged.
    assert!(root.update_station(LOCAL_STATION, &set(&StationEnergy::default())).await.is_ok());
    let again = alice.get_job(job_id).await.unwrap().usage.unwrap();
    assert_eq!(again.energy_kwh, usage.energy_kwh);

    let query = mission_client::UsageReportQuery { group_by: "user".into(), ..Default::default() };
    let report = root.usage_report(&query).await.unwrap();
    let group = report.groups.iter().find(|g| g.group.as_deref() == Some("alice")).expect("alice's jobs");
    assert!(close(group.energy_kwh, 0.003_186_25) && close(group.co2e_g, 0.318_625), "{group:?}");
    let csv = root.usage_report_csv(&query).await.unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",mean_cpu_efficiency,energy_kwh,co2e_g,cost_EUR"), "{csv}");
    assert!(csv.lines().any(|line| line.starts_with("alice,") && line.ends_with(",0.003186,0.319,0.0113")), "{csv}");
    // Its cost, per currency; and with `since`, its use on the day it ended.
    assert_eq!(group.cost.len(), 1, "{group:?}");
    assert!(close(group.cost[0].amount, cost.amount) && group.cost[0].currency == "EUR", "{group:?}");
    assert!(group.daily.is_empty(), "days only with since: {group:?}");
    let since = Some(chrono::Utc::now() - chrono::Duration::days(30));
    let query = mission_client::UsageReportQuery { group_by: "user".into(), since, ..Default::default() };
    let report = root.usage_report(&query).await.unwrap();
    let group = report.groups.iter().find(|g| g.group.as_deref() == Some("alice")).expect("alice's jobs");
    let today = mission_store::now().date_naive();
    assert_eq!(group.daily.iter().map(|d| (d.day, d.jobs)).collect::<Vec<_>>(), [(today, 1)], "{group:?}");
    assert!(close(group.daily[0].energy_kwh, 0.003_186_25) && close(group.daily[0].cpu_hours_held, 0.5));

    // What its agent measured takes the model's place where it can be true: the processors' 2 Wh
    // by RAPL, but not GPU energy of a job that held no GPU, nor a "measured" model.
    let job_id = alice.run_job(mission.mission_id, &ask).await.unwrap().job_id;
    assert_eq!(next_run(&mut agent).await, job_id);
    let part = |wh, source| Some(mission_api::EnergyPart { wh, source });
    let measured = mission_api::EnergyParts {
        cpu: part(2.0, mission_api::EnergySource::Rapl),
        memory: part(999.0, mission_api::EnergySource::Model),
        gpu: part(5.0, mission_api::EnergySource::GpuCounter),
    };
    let usage = mission_api::JobUsage {
        wall_time: 1800.0,
        cpu_time: Some(900.0),
        energy_parts: Some(measured),
        ..Default::default()
    };
    let now = mission_store::now();
    let done = Report { usage: Some(usage), exit_code: Some(0), ..Report::new(job_id, JobStatus::Completed, now) };
    agent.report(&[Report::new(job_id, JobStatus::Running, now), done]).await;
    let job = tokio::time::timeout(std::time::Duration::from_secs(10), alice.wait_for_job(job_id)).await.unwrap();
    let usage = job.unwrap().usage.expect("reported");
    let parts = usage.energy_parts.clone().expect("its parts");
    assert_eq!(parts.cpu, part(2.0, mission_api::EnergySource::Rapl), "{parts:?}");
    assert_eq!(parts.memory, part(0.18625, mission_api::EnergySource::Model), "{parts:?}");
    assert_eq!(parts.gpu, part(0.0, mission_api::EnergySource::Model), "{parts:?}");
    // The default settings now: PUE 1.67.
    assert!(close(usage.energy_kwh.unwrap(), 2.18625 * 1.67 / 1000.0), "{usage:?}");
}

/// A budget in money or kWh: a job holds its station's model's figure for its time limit as it
/// starts and is charged what it was reckoned as it ends; at 80% the members are warned, spent
/// it stops every job of the project. `/metrics` counts what each project's jobs drew and cost.
#[tokio::test]
async fn a_budget_in_money_or_kwh_warns_and_stops_and_metrics_count_the_cost() {
    use mission_api::{BudgetPeriod, Cost, PriceBook, ProjectBudget, StationEnergy, UpdateStation};
    let (server, root, mut agent) = with_a_worker(&[]).await;
    let alice = &server.client;
    // PUE 1 and EUR 0.10 a CPU-hour held: a job of 1 CPU for 30 minutes costs EUR 0.05.
    let prices = PriceBook { currency: "EUR".into(), cpu_hour: 0.1, gpu_hour: 0.0, gb_hour: 0.0, kwh: 0.0 };
    let energy = StationEnergy { pue: 1.0, prices: Some(prices), ..Default::default() };
    root.update_station(LOCAL_STATION, &UpdateStation { energy: Some(energy), ..Default::default() }).await.unwrap();
    let astro = root.create_project(&CreateProject { name: "astro".into(), description: None }).await.unwrap();
    root.set_project_member(astro.project_id, "alice", ProjectRole::Member).await.unwrap();
    let budget =
        |kwh, money| ProjectBudget { cpu_hours: None, gpu_hours: None, kwh, money, period: BudgetPeriod::Month };
    let eur = |amount| Some(Cost { amount, currency: "EUR".into() });
    // Amounts out of bounds, and a currency that is not a code, are refused naming the field.
    let refused = status(root.set_project_budget(astro.project_id, &budget(Some(-1.0), None)).await);
    assert_eq!(refused, (400, Some("kwh".into())));
    let lira = Some(Cost { amount: 1.0, currency: "lira".into() });
    let refused = status(root.set_project_budget(astro.project_id, &budget(None, lira)).await);
    assert_eq!(refused, (400, Some("money.currency".into())));
    let set = root.set_project_budget(astro.project_id, &budget(None, eur(0.06))).await.unwrap();
    assert_eq!(set.spent_money, eur(0.0));
    let month = BudgetPeriod::Month.words(set.period_start);

    // The first job, of 30 minutes, costs EUR 0.05: 83% of the budget.
    let watch = mission_client::WatchEvents { kinds: vec!["project".into()], ..Default::default() };
    let mut events = alice.watch_events(&watch).await.unwrap();
    let mission = alice.create_mission(&shell_mission("sweep", Some(astro.project_id))).await.unwrap();
    let half_hour = RunJob { time_limit: Some(30), ..run(None) };
    let first = alice.run_job(mission.mission_id, &half_hour).await.unwrap().job_id;
    assert_eq!(next_run(&mut agent).await, first);
    complete_after(&agent, first, 1800.0).await;
    let warning = tokio::time::timeout(std::time::Duration::from_secs(10), events.next()).await.unwrap().unwrap();
    assert_eq!(warning.data["detail"], format!("project astro has spent 83% of its budget {month}"));
    assert_eq!(warning.data["spent_money"], 0.05);
    let spent = alice.project_budget(astro.project_id).await.unwrap().unwrap();
    assert!((spent.spent_money.as_ref().unwrap().amount - 0.05).abs() < 1e-12, "{spent:?}");
    // 1 CPU busy (no CPU time measured) at 12 W and 1,024 MB at 0.3725 W a GB, for half an hour.
    let kwh = (12.0 + 1.024 * 0.3725) * 0.5 / 1000.0;
    assert!((spent.spent_kwh - kwh).abs() < 1e-12, "{spent:?}");

    // The next would hold EUR 0.05 more: it waits.
    let second = alice.run_job(mission.mission_id, &half_hour).await.unwrap().job_id;
    let wait = |detail: String| async move {
        for _ in 0..200 {
            let reason = alice.get_job(second).await.unwrap().pending_reason;
            if reason.as_ref().is_some_and(|r| r.kind == PendingKind::Quota && r.detail == detail) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("never waited for: {detail}");
    };
    wait(format!(
        "project astro has 0.01 of its 0.06 EUR left {month}, 0.00 of them held by its running jobs; this job may use \
         0.05 (its time limit, or an hour without one)"
    ))
    .await;
    // In kWh instead: 6.2 Wh of 5 spent, no job of the project starts.
    root.set_project_budget(astro.project_id, &budget(Some(0.005), None)).await.unwrap();
    wait(format!("project astro spent its 0.005 kWh {month}")).await;
    assert!(agent.next_order_within(std::time::Duration::from_millis(300)).await.is_none());

    // Prometheus counts what the project's jobs drew and cost.
    let metrics = crate::http().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    let value = |series: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series} in\n{metrics}"));
        line[series.len()..].trim().parse().unwrap()
    };
    assert!(metrics.contains("# TYPE mission_project_energy_kwh_total counter\n"), "{metrics}");
    assert!((value("mission_project_energy_kwh_total{project=\"astro\"}") - kwh).abs() < 1e-12);
    assert!((value("mission_project_co2e_grams_total{project=\"astro\"}") - kwh * 475.0).abs() < 1e-9);
    assert!((value("mission_project_cost_total{project=\"astro\",currency=\"EUR\"}") - 0.05).abs() < 1e-12);
    // Without the budget it starts.
    root.delete_project_budget(astro.project_id).await.unwrap();
    assert_eq!(next_run(&mut agent).await, second);
}

/// A station's grid intensity may come from a file the site refreshes: a good value becomes the
/// intensity jobs are reckoned by; a file missing or malformed leaves the last good value, and
/// the station says why.
#[tokio::test]
async fn a_stations_grid_intensity_follows_its_file_and_keeps_the_last_good_value() {
    use mission_api::{StationEnergy, UpdateStation};
    let every = std::time::Duration::from_millis(100);
    let (server, root, mut agent) = with_a_worker_and(&[], |c| c.grid_intensity_refresh = every).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("intensity");
    std::fs::write(&file, "120\n").unwrap();
    let path = file.display().to_string();
    let set = |file: &str| UpdateStation {
        energy: Some(StationEnergy { pue: 1.0, grid_intensity_file: Some(file.into()), ..Default::default() }),
        ..Default::default()
    };
    let refused = status(root.update_station(LOCAL_STATION, &set("intensity")).await);
    assert_eq!(refused, (400, Some("energy.grid_intensity_file".into())), "a relative path");
    root.update_station(LOCAL_STATION, &set(&path)).await.unwrap();
    let settled = |want: f64, problem: Option<&'static str>| {
        let root = &root;
        async move {
            for _ in 0..100 {
                let station = root.get_station(LOCAL_STATION).await.unwrap();
                let says = match (problem, station.grid_intensity_problem.as_deref()) {
                    (None, None) => true,
                    (Some(want), Some(said)) => said.contains(want),
                    _ => false,
                };
                if station.energy.grid_gco2e_per_kwh == want && says {
                    return station;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the station never had {want} g/kWh and problem {problem:?}");
        }
    };
    settled(120.0, None).await;

    // A job that ends now is reckoned at 120 g/kWh.
    let alice = &server.client;
    let mission = alice.create_mission(&shell_mission("sweep", None)).await.unwrap();
    let job_id = alice.run_job(mission.mission_id, &run(None)).await.unwrap().job_id;
    assert_eq!(next_run(&mut agent).await, job_id);
    complete_after(&agent, job_id, 3600.0).await;
    let done = tokio::time::timeout(std::time::Duration::from_secs(10), alice.wait_for_job(job_id)).await.unwrap();
    let usage = done.unwrap().usage.unwrap();
    assert!((usage.co2e_g.unwrap() - usage.energy_kwh.unwrap() * 120.0).abs() < 1e-9, "{usage:?}");

    // Malformed, then missing: 120 stays, and the station says why.
    std::fs::write(&file, "about 90").unwrap();
    let station = settled(120.0, Some("does not hold a number")).await;
    assert!(station.grid_intensity_problem.unwrap().ends_with("the last good value, 120 gCO2e/kWh, is kept"));
    std::fs::write(&file, "9000").unwrap();
    settled(120.0, Some("not a number of gCO2e/kWh from 0 to 2000")).await;
    std::fs::remove_file(&file).unwrap();
    settled(120.0, Some("is missing")).await;
    // A good value again: taken, and the problem is gone.
    std::fs::write(&file, "35.5").unwrap();
    settled(35.5, None).await;
}
