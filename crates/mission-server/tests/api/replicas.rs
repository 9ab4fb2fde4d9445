//! Two replicas on one PostgreSQL database, sharing their keys and default storage: any replica
//! answers any request, and the scheduler's leader places jobs whichever replica they came to and
//! whichever replica their agent is connected to.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use mission_api::lz::{Order, Report};
use mission_api::{JobStatus, Resources};
use mission_client::{Client, CreateMission, JobResources, RegisterLandingZone, Uuid};
use mission_server::catalogue::SHELL;
use mission_testkit::{FakeAgent, PostgresDatabase, TestServer, lines};

use crate::{http, token_for};

/// What the agents here offer.
const FOUR_CPUS: Resources = Resources { cpu_count: 4, memory_amount: 4096, gpu_count: 0 };

use mission_server::DEFAULT_STATION_ID as LOCAL_STATION;

/// Two replicas of one service on a new database sharing their keys and default storage (a
/// folder, or `storage`), and the folder of what they share. The service's public URL (the
/// issuer of its tokens) is A's, as it would be a load balancer's.
pub(crate) async fn two_replicas_on(
    storage: Option<mission_server::Storage>,
) -> Option<(TestServer, TestServer, tempfile::TempDir)> {
    let database = PostgresDatabase::create().await?;
    let shared = tempfile::tempdir().unwrap();
    let keys = shared.path().join("keys");
    let storage = storage.unwrap_or_else(|| mission_server::Storage::Folder(shared.path().join("storage")));
    let replica = |public_url: Option<url::Url>| {
        let (url, keys, storage) = (database.url.clone(), keys.clone(), storage.clone());
        move |c: &mut mission_server::ServerConfig| {
            c.database_url = Some(url);
            c.key_dir = Some(keys);
            c.storage = Some(storage);
            c.public_url = public_url;
        }
    };
    let a = TestServer::spawn_with(replica(None)).await;
    let b = TestServer::spawn_with(replica(Some(a.url.parse().unwrap()))).await;
    Some((a, b, shared))
}

/// [`two_replicas_on`] a shared folder.
async fn two_replicas() -> Option<(TestServer, TestServer, tempfile::TempDir)> {
    two_replicas_on(None).await
}

/// Polls `check` until it holds (20 s at most).
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn any_replica_answers_any_request() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    any_replica_answers(a, b).await;
}

/// The same on the S3 test server as the default storage (job logs in the database).
#[tokio::test]
async fn any_replica_answers_any_request_with_s3_storage() {
    let Some(s3) = mission_testkit::S3Server::start().await else { return };
    let storage = mission_server::Storage::S3(mission_server::S3Storage {
        bucket: s3.bucket.clone(),
        prefix: "service".into(),
        endpoint: Some(s3.endpoint.clone()),
        region: s3.region.clone(),
        access_key_id: Some(s3.access_key_id.clone()),
        secret_access_key: Some(s3.secret_access_key.clone()),
    });
    let Some((a, b, _shared)) = two_replicas_on(Some(storage)).await else { return };
    any_replica_answers(a, b).await;
}

/// Every cross-replica case, through `a` and `b`.
async fn any_replica_answers(a: TestServer, b: TestServer) {
    // A token signed by A works on B.
    let token = token_for(&a, "alice").await;
    let on_b = Client::with_access_token(&b.url, &token).unwrap();
    assert_eq!(on_b.whoami().await.unwrap().username, "alice");

    // A mission created through A is listed by B; a file uploaded to B downloads from A.
    let mission = a
        .client
        .create_mission(&CreateMission {
            name: "across".into(),
            mission_type_id: Some(SHELL),
            settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
            ..Default::default()
        })
        .await
        .unwrap();
    let listed = on_b.list_missions(&Default::default()).await.unwrap();
    assert!(listed.iter().any(|m| m.mission_id == mission.mission_id));
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("run.sh"), "echo hi\n").unwrap();
    assert!(on_b.upload(mission.mission_id, src.path(), None, false).await.unwrap());
    let out = tempfile::tempdir().unwrap();
    a.client.download(mission.mission_id, out.path()).await.unwrap();
    assert_eq!(std::fs::read_to_string(out.path().join("run.sh")).unwrap(), "echo hi\n");

    // An agent connected to A gets the job submitted through B and one connected to B the job
    // submitted through A, whichever replica leads; their heartbeats and reports may go to the
    // other replica.
    a.add_user("root", true).await;
    let root = a.sign_in("root").await;
    for (agent_on, submit_to, report_to, name) in [(&a, &on_b, &b, "node-a"), (&b, &a.client, &a, "node-b")] {
        let lz = root
            .register_landing_zone(LOCAL_STATION, &RegisterLandingZone { name: name.into(), cluster_account: None })
            .await
            .unwrap();
        let mut agent = FakeAgent::connect(&agent_on.url, &lz.token, FOUR_CPUS).await;
        assert_eq!(agent.welcome.name, name);
        let job = submit_to
            .run_job_on_lz(mission.mission_id, LOCAL_STATION, agent.welcome.lz_id, JobResources::default())
            .await
            .unwrap();
        let Order::Run(assignment) = agent.next_order().await else { panic!("expected a run order") };
        assert_eq!((assignment.job_id, assignment.files.len()), (job.job_id, 1));

        // Its log, written through the agent's replica, is followed live through the other.
        let follower_on = if std::ptr::eq(agent_on, &a) { &b } else { &a };
        let following = http()
            .get(format!("{}/api/v1/jobs/{}/logs?follow=true", follower_on.url, job.job_id))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let mut events = lines(following);
        let written = http()
            .post(format!("{}/api/v1/lz/jobs/{}/logs/stdout?offset=0", agent_on.url, job.job_id))
            .bearer_auth(&lz.token)
            .body("hello from the agent\n")
            .send()
            .await
            .unwrap();
        assert_eq!(written.status(), 200);
        let line = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let event = events.next().await.expect("the follow stream stays open");
                if event.starts_with("data:") {
                    return event;
                }
            }
        })
        .await
        .expect("the follower on the other replica sees the output within 5 s");
        assert!(line.contains("hello from the agent"), "{line}");

        let heartbeat =
            http().post(format!("{}/api/v1/lz/heartbeat", report_to.url)).bearer_auth(&lz.token).send().await.unwrap();
        assert_eq!(heartbeat.status(), 204);
        // A result the agent sends through one replica downloads from the other.
        let result = http()
            .put(format!("{}/api/v1/lz/jobs/{}/results/out/answer.txt", report_to.url, job.job_id))
            .bearer_auth(&lz.token)
            .body("42\n")
            .send()
            .await
            .unwrap();
        assert!(result.status().is_success(), "{}", result.status());
        let fetched = tempfile::tempdir().unwrap();
        let other = Client::with_access_token(&follower_on.url, &token).unwrap();
        other.download_job_results(job.job_id, fetched.path()).await.unwrap();
        assert_eq!(std::fs::read_to_string(fetched.path().join("out/answer.txt")).unwrap(), "42\n");

        let now = chrono::Utc::now();
        let report = |status| Report::new(job.job_id, status, now);
        let reports = vec![
            report(JobStatus::Staging),
            report(JobStatus::Running),
            Report { exit_code: Some(0), ..report(JobStatus::Completed) },
        ];
        let sent = http()
            .post(format!("{}/api/v1/lz/reports", report_to.url))
            .bearer_auth(&lz.token)
            .json(&reports)
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 204, "{}", sent.text().await.unwrap());
        for client in [&a.client, &on_b] {
            eventually("the job shows completed", || async {
                client.get_job(job.job_id).await.unwrap().status == JobStatus::Completed
            })
            .await;
        }
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let event = events.next().await.expect("the follow stream ends with an end event");
                if event.starts_with("event: end") {
                    return event;
                }
            }
        });
        end.await.expect("the follower on the other replica sees the job end within 5 s");

        // Its log honours a `Range`, kept in the database or as a file alike.
        let log = format!("{}/api/v1/jobs/{}/results/mission-logs/stdout.log", follower_on.url, job.job_id);
        let part = http().get(&log).bearer_auth(&token).header("range", "bytes=6-9").send().await.unwrap();
        assert_eq!(part.status(), 206);
        assert_eq!(part.headers()["content-range"], "bytes 6-9/21");
        assert_eq!(part.text().await.unwrap(), "from");
        let outside = http().get(&log).bearer_auth(&token).header("range", "bytes=21-").send().await.unwrap();
        assert_eq!(
            (outside.status().as_u16(), &outside.headers()["content-range"]),
            (416, &"bytes */21".parse().unwrap())
        );
        let whole = http().get(&log).bearer_auth(&token).send().await.unwrap();
        assert_eq!((whole.status().as_u16(), whole.text().await.unwrap()), (200, "hello from the agent\n".to_owned()));
    }
}

#[tokio::test]
async fn concurrent_uploads_of_one_path_through_both_replicas_never_mix() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    let token = token_for(&a, "alice").await;
    let mission = a.client.create_mission(&CreateMission { name: "race".into(), ..Default::default() }).await.unwrap();
    let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 4 << 20]).collect();
    let uploads = bodies.iter().enumerate().map(|(i, body)| {
        let server = if i % 2 == 0 { &a } else { &b };
        let url = format!("{}/api/v1/missions/{}/files/race.bin", server.url, mission.mission_id);
        http().put(url).bearer_auth(&token).body(body.clone()).send()
    });
    for response in futures_util::future::join_all(uploads).await {
        assert!(response.unwrap().status().is_success());
    }
    for server in [&a, &b] {
        let url = format!("{}/api/v1/missions/{}/files/race.bin", server.url, mission.mission_id);
        let got = http().get(url).bearer_auth(&token).send().await.unwrap().bytes().await.unwrap();
        let winner = bodies.iter().position(|body| body.as_slice() == got.as_ref()).expect("the file mixes uploads");
        let listed = server.client.get_mission_files(mission.mission_id).await.unwrap();
        let digest = ring::digest::digest(&ring::digest::SHA256, &bodies[winner]);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(listed[0].sha256, hex, "the row describes the object");
    }
}

#[tokio::test]
async fn the_leader_settles_the_file_changes_of_a_stopped_replica_only() {
    use mission_api::paths::MissionPath;
    use mission_store::{Intent, IntentKind};

    let Some((a, _b, _shared)) = two_replicas().await else { return };
    let mission = a.client.create_mission(&CreateMission { name: "crash".into(), ..Default::default() }).await.unwrap();
    let place = a.app.bays.default_store().default_location(mission.mission_id);
    // A replica killed mid-upload (it is never seen alive again) left its change and a complete
    // object without its row; a replica at work (A) has a change in flight.
    let stopped = a.app.store.for_replica(Uuid::new_v4());
    let left = Intent::new(IntentKind::Upload, mission.mission_id, "left.txt");
    stopped.begin_intent(&left).await.unwrap();
    let body = futures_util::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"complete"))]);
    place.files.write(&place.key(&MissionPath::parse("left.txt").unwrap()), body, 100).await.unwrap();
    let in_flight = Intent::new(IntentKind::Upload, mission.mission_id, "busy.txt");
    a.app.store.begin_intent(&in_flight).await.unwrap();

    eventually("the leader settles the stopped replica's change", || async {
        a.app.store.pending_intents().await.unwrap().iter().all(|i| i.intent_id != left.intent_id)
    })
    .await;
    let files = a.client.get_mission_files(mission.mission_id).await.unwrap();
    assert_eq!(files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["left.txt"], "the complete upload is kept");
    let pending = a.app.store.pending_intents().await.unwrap();
    assert!(pending.iter().any(|i| i.intent_id == in_flight.intent_id), "a live replica's change is left alone");
}

#[tokio::test]
async fn failed_sign_ins_count_on_every_replica() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    // Five failures are free wherever they happen; the sixth makes the account wait, on both.
    for i in 0..6 {
        let replica = if i % 2 == 0 { &a } else { &b };
        let (status, _) = replica.activate("ABCD-EFGH", "alice", "not the password", "approve").await;
        assert_ne!(status, 429, "attempt {i} is not held back yet");
    }
    for replica in [&a, &b] {
        let (status, page) = replica.activate("WXYZ-WXYZ", "alice", "still not it", "approve").await;
        assert_eq!(status, 429, "{page}");
    }
}

/// Reads job events of a server-sent event stream until one shows job `job_id` in `status`
/// (20 s at most).
async fn until_job_event(lines: &mut (impl futures_util::Stream<Item = String> + Unpin), job_id: Uuid, status: &str) {
    let wait = async {
        let mut job_event = false;
        loop {
            let line = lines.next().await.expect("the event stream stays open");
            if let Some(data) = line.strip_prefix("data: ").filter(|_| job_event) {
                let job: serde_json::Value = serde_json::from_str(data).unwrap();
                if job["job_id"] == job_id.to_string() && job["status"] == status {
                    return;
                }
            }
            job_event = line == "event: job";
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| panic!("no event of the job {status}"));
}

#[tokio::test]
async fn a_watcher_on_one_replica_sees_job_changes_made_through_the_other() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    let token = token_for(&a, "alice").await;
    a.add_user("root", true).await;
    let root = a.sign_in("root").await;
    let lz = root
        .register_landing_zone(LOCAL_STATION, &RegisterLandingZone { name: "node".into(), cluster_account: None })
        .await
        .unwrap();
    let mut agent = FakeAgent::connect(&a.url, &lz.token, FOUR_CPUS).await;
    let on_a = Client::with_access_token(&a.url, &token).unwrap();
    let shell = CreateMission {
        name: "watched".into(),
        mission_type_id: Some(SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        ..Default::default()
    };
    let mission = on_a.create_mission(&shell).await.unwrap();
    let watching = http()
        .get(format!("{}/api/v1/jobs/events?mission_ids={}", b.url, mission.mission_id))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(watching.headers()["content-type"], "text/event-stream");
    let mut events = lines(watching);
    assert_eq!(events.next().await.unwrap(), ": watching", "the stream is open before anything happens");

    let job = on_a
        .run_job_on_lz(mission.mission_id, LOCAL_STATION, agent.welcome.lz_id, JobResources::default())
        .await
        .unwrap();
    assert!(matches!(agent.next_order().await, Order::Run(_)));
    until_job_event(&mut events, job.job_id, "assigned").await;
    let now = chrono::Utc::now();
    let report = |status| Report::new(job.job_id, status, now);
    let reports = [report(JobStatus::Running), Report { exit_code: Some(0), ..report(JobStatus::Completed) }];
    agent.report(&reports).await;
    until_job_event(&mut events, job.job_id, "completed").await;
}

/// A shell mission charged to `project`, for the races below.
fn race_mission(project: Uuid) -> CreateMission {
    CreateMission {
        name: "race".into(),
        mission_type_id: Some(SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        project_id: Some(project),
        ..Default::default()
    }
}

#[tokio::test]
async fn submissions_racing_through_both_replicas_for_a_projects_last_queue_places_never_both_win() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    a.add_user("root", true).await;
    let root = a.sign_in("root").await;
    let worker = RegisterLandingZone { name: "worker".into(), cluster_account: None };
    root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap();
    let bio = root.create_project(&mission_client::CreateProject { name: "bio".into(), description: None }).await;
    let bio = bio.unwrap().project_id;
    root.set_project_member(bio, "alice", mission_client::ProjectRole::Member).await.unwrap();
    let limits = mission_client::ProjectLimits { max_queued_jobs: Some(5), ..Default::default() };
    root.set_project_limits(bio, LOCAL_STATION, &limits).await.unwrap();
    let mission = a.client.create_mission(&race_mission(bio)).await.unwrap();
    // No agent is connected: every job accepted stays queued, and counts against the cap.
    let run = mission_api::RunJob { station_id: LOCAL_STATION, cpu_count: Some(1), ..Default::default() };
    let tries = (0..12).map(|i| {
        let replica = if i % 2 == 0 { &a } else { &b };
        replica.client.run_job(mission.mission_id, &run)
    });
    let results = futures_util::future::join_all(tries).await;
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 5, "exactly the cap is accepted: {results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(refused.problem().map(|p| p.status), Some(409), "{refused}");
    }
    let used = &b.client.project_limits(bio).await.unwrap()[0];
    assert_eq!(used.in_use.queued_jobs, 5);
}

#[tokio::test]
async fn jobs_racing_through_both_replicas_for_the_last_of_a_budget_never_all_start() {
    let Some((a, b, _shared)) = two_replicas().await else { return };
    a.add_user("root", true).await;
    let root = a.sign_in("root").await;
    let worker = RegisterLandingZone { name: "worker".into(), cluster_account: None };
    let token = root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap().token;
    let mut agent = FakeAgent::connect(&b.url, &token, FOUR_CPUS).await;
    let astro = root.create_project(&mission_client::CreateProject { name: "astro".into(), description: None }).await;
    let astro = astro.unwrap().project_id;
    root.set_project_member(astro, "alice", mission_client::ProjectRole::Member).await.unwrap();
    let hour = mission_api::ProjectBudget {
        cpu_hours: Some(1.0),
        gpu_hours: None,
        kwh: None,
        money: None,
        period: mission_api::BudgetPeriod::Total,
    };
    root.set_project_budget(astro, &hour).await.unwrap();
    let mission = a.client.create_mission(&race_mission(astro)).await.unwrap();
    // Six jobs of half an hour, through either replica, with four CPUs free: two fit the hour.
    let run = mission_api::RunJob {
        station_id: LOCAL_STATION,
        cpu_count: Some(1),
        time_limit: Some(30),
        ..Default::default()
    };
    let tries = (0..6).map(|i| {
        let replica = if i % 2 == 0 { &a } else { &b };
        replica.client.run_job(mission.mission_id, &run)
    });
    let jobs: Vec<Uuid> = futures_util::future::join_all(tries).await.into_iter().map(|r| r.unwrap().job_id).collect();
    let mut started = Vec::new();
    while let Some(order) = agent.next_order_within(Duration::from_millis(1500)).await {
        if let Order::Run(job) = order {
            started.push(job.job_id);
        }
    }
    assert_eq!(started.len(), 2, "half an hour each, an hour in all: {started:?}");
    for job in jobs.iter().filter(|j| !started.contains(j)) {
        let reason = a.client.get_job(*job).await.unwrap().pending_reason.unwrap();
        assert!(reason.detail.starts_with("project astro has 1.00 of its 1 CPU-hours left in total"), "{reason:?}");
    }
}
