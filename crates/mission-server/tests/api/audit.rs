//! The audit trail end to end: changes of each kind through the API leave an entry with their
//! actor, role and request id, in the change's transaction (a refused change leaves none);
//! admins read every entry, a project's managers its resources', and nobody else those.

use std::collections::{BTreeMap, BTreeSet};

use mission_api::{AuditEntry, AuditPage, BudgetPeriod, ProjectBudget, ProjectLimits, RunJob};
use mission_client::{
    AuditQuery, CargoBayKind, CreateCargoBay, CreateMission, CreateProject, CreateStation, CreateWebhook, ProjectRole,
    UpdateStation, Uuid,
};
use mission_server::DEFAULT_STATION_ID as LOCAL_STATION;
use mission_server::catalogue::SHELL;
use mission_testkit::TestServer;

use crate::{http, status, token_for};

const WEBHOOK_SECRET: &str = "a-webhook-secret-never-audited";

#[tokio::test]
async fn changes_are_audited_with_who_and_which_request_and_only_managers_and_admins_read_them() {
    let server = TestServer::spawn_with(|config| {
        config.webhook_targets = vec!["https://hooks.example.org/".parse().unwrap()];
    })
    .await;
    for (name, admin) in [("root", true), ("bob", false), ("carol", false)] {
        server.add_user(name, admin).await;
    }
    let alice = &server.client;
    let (root, bob, carol) = (server.sign_in("root").await, server.sign_in("bob").await, server.sign_in("carol").await);
    let alice_id = alice.whoami().await.unwrap().user_id;
    // An LZ that never connects: jobs stay queued.
    let worker = mission_client::RegisterLandingZone { name: "worker".into(), cluster_account: None };
    root.register_landing_zone(LOCAL_STATION, &worker).await.unwrap();

    // A project alice manages and bob belongs to; what alice does in it.
    let bio = root.create_project(&CreateProject { name: "bio".into(), description: None }).await.unwrap().project_id;
    root.set_project_member(bio, "alice", ProjectRole::Manager).await.unwrap();
    root.set_project_member(bio, "bob", ProjectRole::Member).await.unwrap();
    root.set_project_limits(bio, LOCAL_STATION, &ProjectLimits { max_running_jobs: Some(4), ..Default::default() })
        .await
        .unwrap();
    let budget =
        ProjectBudget { cpu_hours: Some(100.0), gpu_hours: None, kwh: None, money: None, period: BudgetPeriod::Month };
    root.set_project_budget(bio, &budget).await.unwrap();
    let mission = alice
        .create_mission(&CreateMission {
            name: "sweep".into(),
            mission_type_id: Some(SHELL),
            settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
            project_id: Some(bio),
            ..Default::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("run.sh"), "sleep 60\n").unwrap();
    assert!(alice.upload(mission.mission_id, dir.path().join("run.sh"), None, false).await.unwrap());
    let run = RunJob { station_id: LOCAL_STATION, cpu_count: Some(1), ..Default::default() };
    let job = alice.run_job(mission.mission_id, &run).await.unwrap();
    alice.stop_job(job.job_id).await.unwrap();

    // Elsewhere: a webhook with a secret, a cargo bay, a station (its request id given).
    let hook = CreateWebhook {
        url: "https://hooks.example.org/jobs".into(),
        secret: Some(WEBHOOK_SECRET.into()),
        ..Default::default()
    };
    alice.create_webhook(&hook).await.unwrap();
    let bay = CreateCargoBay {
        path: Some(dir.path().to_str().unwrap().to_owned()),
        ..CreateCargoBay::new("scratch", CargoBayKind::Local)
    };
    root.create_cargo_bay(&bay).await.unwrap();
    let root_token = token_for(&server, "root").await;
    let created = http()
        .post(format!("{}/api/v1/stations", server.url))
        .bearer_auth(&root_token)
        .header("x-request-id", "audit-test-1")
        .json(&CreateStation { name: "lab".into(), ..Default::default() })
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(created.headers()["x-request-id"], "audit-test-1", "the response carries the request id back");
    let lab: mission_api::Station = created.json().await.unwrap();
    root.update_station(lab.station_id, &UpdateStation { reclaim: Some(false), ..Default::default() }).await.unwrap();
    // Refused changes leave no entry: a taken name, a member who may not.
    assert_eq!(status(root.create_station(&CreateStation { name: "lab".into(), ..Default::default() }).await).0, 409);
    assert_eq!(status(bob.set_project_member(bio, "carol", ProjectRole::Member).await).0, 403);

    // An admin reads every entry, each with its actor, role and request.
    let all = root.audit(&AuditQuery { limit: Some(1000), ..Default::default() }).await.unwrap().entries;
    let actions: BTreeSet<&str> = all.iter().map(|e| e.action.as_str()).collect();
    for action in [
        "project.create",
        "project.member.set",
        "project.limits.set",
        "project.budget.set",
        "mission.create",
        "file.upload",
        "job.submit",
        "job.stop",
        "webhook.create",
        "cargo_bay.create",
        "station.create",
        "station.update",
    ] {
        assert!(actions.contains(action), "no {action} in {actions:?}");
    }
    assert!(all.iter().all(|e| !e.request_id.is_empty() && e.actor_id.is_some()), "{all:#?}");
    assert!(all.windows(2).all(|w| w[0].seq > w[1].seq), "newest first");
    let count = |action: &str| all.iter().filter(|e| e.action == action).count();
    assert_eq!(count("station.create"), 1, "the refused station left no entry");
    assert_eq!(count("project.member.set"), 2, "bob's refused change left no entry");
    let station = one(&all, "station.create");
    assert_eq!(
        (station.request_id.as_str(), station.actor.as_deref(), station.actor_role.as_str()),
        ("audit-test-1", Some("root"), "admin")
    );
    assert_eq!(station.target_id, lab.station_id.to_string());
    assert_eq!(one(&all, "station.update").changes, serde_json::json!({ "reclaim": false }));
    let submitted = one(&all, "job.submit");
    assert_eq!((submitted.actor.as_deref(), submitted.actor_role.as_str()), (Some("alice"), "user"));
    assert_eq!((submitted.target_id.clone(), submitted.project_id), (job.job_id.to_string(), Some(bio)));
    let upload = one(&all, "file.upload");
    assert_eq!(upload.target_id, format!("{}/run.sh", mission.mission_id));
    assert_eq!(upload.changes["size"], 9);

    // Filters: by actor, by target.
    let by_alice = root.audit(&AuditQuery { actor: Some("alice".into()), ..Default::default() }).await.unwrap();
    assert!(by_alice.entries.iter().all(|e| e.actor_id == Some(alice_id)) && !by_alice.entries.is_empty());
    let of_job = AuditQuery { target: Some(job.job_id.to_string()), ..Default::default() };
    let of_job: Vec<String> = root.audit(&of_job).await.unwrap().entries.into_iter().map(|e| e.action).collect();
    assert_eq!(of_job, ["job.stop", "job.submit"]);

    // A manager reads the entries of the projects they manage; a member of bio none of them
    // (everyone manages their personal project, where bob and carol changed nothing).
    let managed = alice.audit(&AuditQuery { limit: Some(1000), ..Default::default() }).await.unwrap().entries;
    assert!(!managed.is_empty() && managed.iter().all(|e| e.project_id == Some(bio)), "{managed:#?}");
    assert!(managed.iter().any(|e| e.action == "project.budget.set"), "including what admins did to the project");
    for outsider in [&bob, &carol] {
        assert_eq!(outsider.audit(&AuditQuery::default()).await.unwrap().entries, []);
        let of_bio = AuditQuery { project_id: Some(bio), ..Default::default() };
        assert_eq!(status(outsider.audit(&of_bio).await).0, 403);
    }
    let elsewhere = AuditQuery { project_id: Some(Uuid::new_v4()), ..Default::default() };
    assert_eq!(status(alice.audit(&elsewhere).await).0, 403);

    // Pages: `next_before` leads to the older entries; JSON lines export every entry.
    let first = root.audit(&AuditQuery { limit: Some(3), ..Default::default() }).await.unwrap();
    let next = AuditQuery { limit: Some(3), before: first.next_before, ..Default::default() };
    let second: AuditPage = root.audit(&next).await.unwrap();
    assert_eq!(first.entries[..], all[..3]);
    assert_eq!(second.entries[..], all[3..6]);
    let lines = root.audit_jsonl(&AuditQuery::default()).await.unwrap();
    let exported: Vec<AuditEntry> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(exported, all);
    assert!(!lines.contains(WEBHOOK_SECRET), "secrets are never audited");
    assert_eq!(status(root.audit(&AuditQuery { limit: Some(1001), ..Default::default() }).await).0, 400);
}

/// The one entry of `action`.
fn one<'a>(entries: &'a [AuditEntry], action: &str) -> &'a AuditEntry {
    let found: Vec<_> = entries.iter().filter(|e| e.action == action).collect();
    assert_eq!(found.len(), 1, "{action}: {found:#?}");
    found[0]
}
