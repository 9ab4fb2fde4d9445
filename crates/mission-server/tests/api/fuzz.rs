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
    let why = format!("{} is missing (scripts/install-test-deps.sh installs it)", schemathesis.display());
    mission_testkit::skip_unless_required("SCHEMATHESIS", why);
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What runs our own document at `server`: every check, all its operations but the event
/// streams (see the module's doc).
fn our_document(server: &TestServer) -> Vec<String> {
    let schema = format!("{}/api/v1/openapi.json", server.url);
    let mut args = vec![schema, "--checks".into(), "all".into()];
    // A project has no budget until one is set: GET /projects/{id}/budget answers 404
    // (documented), which the stateful phase takes for a project that vanished after its
    // creation. The check cannot be turned off for one operation in that phase (the command
    // line's checks win over the config file's), so it is off; the API tests read back what
    // they create.
    args.extend(["--exclude-checks", "ensure_resource_availability"].map(String::from));
    args.extend(["--exclude-path", "/api/v1/jobs/events", "--exclude-path", "/api/v1/events"].map(String::from));
    args
}

#[tokio::test]
async fn schemathesis_finds_nothing() {
    let Some(schemathesis) = schemathesis() else { return };
    // As an admin, so that no operation is closed to it (stations' management is admin's).
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let token = token_for(&server, "root").await;
    fuzz(&schemathesis, &token, &our_document(&server), "schemathesis.toml", &[]).await;
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
    fuzz(&schemathesis, &token, &our_document(&server), "schemathesis-pinned.toml", &ids).await;
}

/// GA4GH TES against the official TES 1.1 schema, not ours (ga4gh-tes-1.1.openapi.yaml, as
/// published), as a user who may run jobs: the one change is where the schema's service-info
/// parts are read from, a copy beside it rather than GitHub.
#[tokio::test]
async fn schemathesis_against_the_official_tes_schema_finds_nothing() {
    let Some(schemathesis) = schemathesis() else { return };
    let server = TestServer::spawn().await;
    let token = token_for(&server, "alice").await;
    // What a task needs to be accepted: the image the schema's example names, and a landing zone on the default station (that never comes: tasks wait in the queue).
    server.add_user("root", true).await;
    let admin = server.sign_in("root").await;
    let stations = admin.list_stations().await.unwrap();
    let default = stations.iter().find(|s| s.name == mission_api::DEFAULT_STATION_NAME).unwrap();
    let lz = mission_client::RegisterLandingZone { name: "tes".into(), cluster_account: None };
    admin.register_landing_zone(default.station_id, &lz).await.unwrap();
    let alice = server.sign_in("alice").await;
    let archive = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(archive.path(), mission_api::tar::archive(&[("manifest.json", b'0', b"[]")])).unwrap();
    let import = mission_client::ImportImage { name: "ubuntu:20.04".into(), ..Default::default() };
    alice.import_image(archive.path(), &import, None).await.unwrap();
    let here = root().join("crates/mission-server/tests/api");
    let schemas = tempfile::tempdir().unwrap();
    std::fs::copy(here.join("ga4gh-service-info-1.0.0.yaml"), schemas.path().join("service-info.yaml")).unwrap();
    let official = std::fs::read_to_string(here.join("ga4gh-tes-1.1.openapi.yaml")).unwrap();
    let remote = "https://raw.githubusercontent.com/ga4gh-discovery/ga4gh-service-info/v1.0.0/service-info.yaml";
    assert!(official.contains(remote), "the TES schema names service-info at {remote}");
    let schema = schemas.path().join("tes.yaml");
    std::fs::write(&schema, official.replace(remote, "service-info.yaml")).unwrap();
    let base = format!("{}{}", server.url, mission_api::tes::TES_PREFIX);
    // A task with every part shown, which GET /tasks/{id} reads in the views the fuzzer picks.
    let outputs = mission_client::CreateMission { name: "out".into(), ..Default::default() };
    let mission = alice.create_mission(&outputs).await.unwrap();
    let task = serde_json::json!({
        "name": "seeded", "description": "every part",
        "inputs": [{"name": "in", "path": "/data/in.txt", "content": "hello\n"}],
        "outputs": [{"path": "/data/out.txt", "url": format!("mission://{}/out.txt", mission.mission_id)}],
        "resources": {"cpu_cores": 1, "ram_gb": 0.5, "backend_parameters": {"time_limit_minutes": "5"}},
        "executors": [{"image": "ubuntu:20.04", "command": ["cp", "/data/in.txt", "/data/out.txt"],
                       "workdir": "/data", "env": {"A": "1"}, "ignore_error": false}],
        "volumes": ["/scratch"], "tags": {"seeded": "yes"},
    });
    let created = crate::http().post(format!("{base}/tasks")).bearer_auth(&token).json(&task).send().await.unwrap();
    assert_eq!(created.status(), 200);
    let created: serde_json::Value = created.json().await.unwrap();
    let task_id = created["id"].as_str().unwrap().to_owned();
    // Its checks are chosen in the config file, as one is off for some operations there.
    let target = [schema.to_str().unwrap().to_owned(), "--url".into(), base];
    fuzz(&schemathesis, &token, &target, "schemathesis-tes.toml", &[("TASK_ID", task_id)]).await;
}

/// Runs schemathesis on `target` (the schema's location, then what selects its operations or
/// says where they are) with `config` (beside this file) and `env`; fails with its report on
/// any finding.
async fn fuzz(schemathesis: &std::path::Path, token: &str, target: &[String], config: &str, env: &[(&str, String)]) {
    let examples = std::env::var("MISSION_FUZZ_EXAMPLES").unwrap_or_else(|_| "25".into());
    let seed = std::env::var("MISSION_FUZZ_SEED").unwrap_or_else(|_| "1".into());
    let run = tokio::process::Command::new(schemathesis)
        .arg("--config-file")
        .arg(root().join("crates/mission-server/tests/api").join(config))
        .arg("run")
        .args(target)
        .args(["--max-examples", &examples, "--seed", &seed, "--no-color", "--suppress-health-check", "all"])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--request-timeout", "10"])
        .env("SCHEMATHESIS_HOOKS", "")
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(600), run).await.expect("schemathesis within 10 min").unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis found problems:\n{report}");
    eprintln!("{report}");
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
