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

/// The agent runs a job to its end.
async fn complete(agent: &FakeAgent, job_id: Uuid) {
    let now = mission_store::now();
    agent.report(&[Report::new(job_id, JobStatus::Running, now), Report::new(job_id, JobStatus::Completed, now)]).await;
}

#[tokio::test]
async fn a_project_never_holds_more_than_its_limits_on_a_station() {
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let root = server.sign_in("root").await;
    let alice = &server.client;
    let worker = mission_client::RegisterLandingZone { name: "worker".into(), cluster_account: None };
    let token = root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap().token;
    let offers = Resources { cpu_count: 4, memory_amount: 4096, gpu_count: 0 };
    let mut agent = FakeAgent::connect(&server.url, &token, offers).await;
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
