//! Schemathesis (PyPI, in `target/test-venv`) fuzzes the real server from its own OpenAPI
//! document with a valid token, every check on, for a bounded number of examples per
//! operation: any 5xx, response that contradicts the document or undocumented status code
//! fails the test. `GET /jobs/events` and `GET /events` are left out: a stream that ends only
//! when the client goes cannot be answered within a request timeout;
//! `event_streams_refuse_bad_filters`, the console's tests and the CLI's event test cover them.
//! A second run pins the ids in paths to resources of the test's own (an attacker tries ids
//! that exist): the fuzzing that found a file put, deleted and put again as a folder a 500.

use std::path::PathBuf;
use std::time::Duration;

use mission_testkit::TestServer;

use crate::token_for;

/// `target/test-venv/bin/schemathesis`, or `None` (saying why) where it is not installed.
fn schemathesis() -> Option<PathBuf> {
    let schemathesis = root().join("target/test-venv/bin/schemathesis");
    if schemathesis.exists() {
        return Some(schemathesis);
    }
    assert!(
        std::env::var("MISSION_REQUIRE_SCHEMATHESIS").as_deref() != Ok("1"),
        "schemathesis is required (MISSION_REQUIRE_SCHEMATHESIS=1) but {} is missing; run scripts/install-test-deps.sh",
        schemathesis.display()
    );
    eprintln!("skipped: {} is missing; scripts/install-test-deps.sh installs it", schemathesis.display());
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn schemathesis_finds_nothing() {
    let Some(schemathesis) = schemathesis() else { return };
    // As an admin, so that no operation is closed to it (stations' management is admin's).
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let token = token_for(&server, "root").await;
    fuzz(&schemathesis, &server, &token, "schemathesis.toml", &[]).await;
}

/// The same with the ids in paths pinned to resources of the fuzzer's own (see
/// schemathesis-pinned.toml): a mission with a file in a folder, a job of it, a station and a
/// cargo bay.
#[tokio::test]
async fn schemathesis_with_ids_of_real_resources_finds_nothing() {
    let Some(schemathesis) = schemathesis() else { return };
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let token = token_for(&server, "root").await;
    let admin = server.sign_in("root").await;
    let request = mission_client::CreateMission {
        name: "pinned".into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some([("filename".to_owned(), "data/in.txt".to_owned())].into()),
        ..Default::default()
    };
    let mission = admin.create_mission(&request).await.unwrap();
    let inputs = tempfile::tempdir().unwrap();
    std::fs::write(inputs.path().join("in.txt"), "0123456789").unwrap();
    assert!(admin.upload(mission.mission_id, inputs.path().join("in.txt"), Some("data/in.txt"), false).await.unwrap());
    let station = admin
        .create_station(&mission_client::CreateStation { name: "pinned".into(), ..Default::default() })
        .await
        .unwrap();
    // A landing zone that never comes: the job waits in the queue.
    let lz = mission_client::RegisterLandingZone { name: "pinned".into(), cluster_account: None };
    admin.register_landing_zone(station.station_id, &lz).await.unwrap();
    let job = admin.run_job_on_station(mission.mission_id, station.station_id, Default::default()).await.unwrap();
    let bay_dir = tempfile::tempdir().unwrap();
    let bay = mission_client::CreateCargoBay {
        path: Some(bay_dir.path().to_str().unwrap().to_owned()),
        ..mission_client::CreateCargoBay::new("pinned", mission_client::CargoBayKind::Local)
    };
    let bay = admin.create_cargo_bay(&bay).await.unwrap();
    let ids = [
        ("MISSION_ID", mission.mission_id.to_string()),
        ("JOB_ID", job.job_id.to_string()),
        ("STATION_ID", station.station_id.to_string()),
        ("BAY_ID", bay.storage_id.to_string()),
    ];
    fuzz(&schemathesis, &server, &token, "schemathesis-pinned.toml", &ids).await;
}

/// Runs schemathesis against `server` with `config` (beside this file) and `env`; fails with
/// its report on any finding.
async fn fuzz(schemathesis: &std::path::Path, server: &TestServer, token: &str, config: &str, env: &[(&str, String)]) {
    let examples = std::env::var("MISSION_FUZZ_EXAMPLES").unwrap_or_else(|_| "25".into());
    let seed = std::env::var("MISSION_FUZZ_SEED").unwrap_or_else(|_| "1".into());
    let run = tokio::process::Command::new(schemathesis)
        .arg("--config-file")
        .arg(root().join("crates/mission-server/tests/api").join(config))
        .args(["run", &format!("{}/api/v1/openapi.json", server.url), "--checks", "all"])
        // A project has no budget until one is set: GET /projects/{id}/budget answers 404
        // (documented), which the stateful phase takes for a project that vanished after its
        // creation. The check cannot be turned off for one operation in that phase (the command
        // line's checks win over the config file's), so it is off; the API tests read back what
        // they create.
        .args(["--exclude-checks", "ensure_resource_availability"])
        .args(["--max-examples", &examples, "--seed", &seed, "--no-color", "--suppress-health-check", "all"])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--request-timeout", "10", "--exclude-path", "/api/v1/jobs/events", "--exclude-path", "/api/v1/events"])
        .env("SCHEMATHESIS_HOOKS", "")
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(600), run).await.expect("schemathesis within 10 min").unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis found problems:\n{report}");
}

/// The event streams' and the webhook deliveries' listing's query parameters (which
/// schemathesis does not reach: the streams never end, and it registers no webhook, see
/// schemathesis.toml).
#[tokio::test]
async fn event_streams_refuse_bad_filters() {
    let server = TestServer::spawn().await;
    let token = token_for(&server, "alice").await;
    let refusals = [
        ("jobs/events?mission_ids=nope", None, 400, "mission_ids"),
        ("jobs/events?colour=blue", None, 400, "colour"),
        ("events?job_ids=nope", None, 400, "job_ids"),
        ("events?kinds=JOB", None, 400, "kinds"),
        ("events?after=-1", None, 400, "after"),
        ("events?all=yes", None, 400, "all"),
        ("events?all=true", None, 403, "admins"),
        ("events", Some("twelve"), 400, "Last-Event-ID"),
        ("webhooks/nope", None, 400, "webhook_id"),
        ("webhooks/6d697373-696f-4e00-8000-00000000ffff", None, 404, "webhook"),
        ("webhooks/6d697373-696f-4e00-8000-00000000ffff/deliveries?status=lost", None, 400, "status"),
        ("webhooks/6d697373-696f-4e00-8000-00000000ffff/deliveries?limit=0", None, 400, "limit"),
        ("webhooks/6d697373-696f-4e00-8000-00000000ffff/deliveries?before=x", None, 400, "before"),
        ("webhooks/6d697373-696f-4e00-8000-00000000ffff/deliveries?colour=blue", None, 400, "colour"),
        ("jobs/usage?since=yesterday", None, 400, "since"),
        ("jobs/usage?mission_ids=nope", None, 400, "mission_ids"),
        ("jobs/usage?colour=blue", None, 400, "colour"),
    ];
    for (path, resume, expected, field) in refusals {
        let mut request = crate::http().get(format!("{}/api/v1/{path}", server.url)).bearer_auth(&token);
        if let Some(resume) = resume {
            request = request.header("Last-Event-ID", resume);
        }
        let (status, problem) = crate::problem(request.send().await.unwrap()).await;
        assert_eq!(status, expected, "{path}: {problem:?}");
        assert!(problem.detail.contains(field), "{path}: {problem:?}");
    }
    for path in ["jobs/events", "events", "webhooks"] {
        let unsigned = crate::http().get(format!("{}/api/v1/{path}", server.url)).send().await.unwrap();
        assert_eq!(unsigned.status(), 401);
    }
}
