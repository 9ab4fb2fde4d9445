//! The authorization matrix: every operation of `openapi/v1.json` called by every kind of
//! principal, against real resources of one user's, generated from the document so a new route
//! cannot be left out. What must hold for every cell:
//!
//! - no answer is a server error;
//! - without a valid user token (none, a garbage one, a landing zone's) nothing but the public
//!   operations answers 2xx;
//! - a user who may not see a resource learns nothing of it: every answer they get for it is
//!   the answer they get for an id that does not exist (no 404-against-403 oracle), and none is 2xx;
//! - a project's viewer changes nothing of its members' resources.
//!
//! The owner's, the project manager's and the admin's calls run too (no server errors), the
//! deletions last.

use std::collections::BTreeMap;
use std::time::Duration;

use mission_client::{
    CargoBayKind, CreateCargoBay, CreateMission, CreateProject, CreateStation, CreateWebhook, ImportImage, ProjectRole,
    RunJob, Uuid,
};
use mission_testkit::TestServer;
use reqwest::Method;
use serde_json::Value;

use crate::token_for;

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Principal {
    Anonymous,
    Garbage,
    LandingZone,
    /// A user of no project of the owner's.
    Outsider,
    /// A viewer of the owner's project.
    Viewer,
    /// A manager of the owner's project.
    Manager,
    Owner,
    Admin,
}

/// The resources of alice's that the operations name, by path parameter.
struct Resources {
    mission: Uuid,
    job: Uuid,
    array: Uuid,
    image: Uuid,
    webhook: Uuid,
    bay: Uuid,
    project: Uuid,
    station: Uuid,
    lz: Uuid,
    mission_type: Uuid,
}

/// What a path's `{id}` names, by the collection before it, and whether an outsider may not see
/// it (stations and mission types are for everyone to read).
fn id_of(path: &str, resources: &Resources) -> (Uuid, bool) {
    let collection = path.trim_start_matches("/api/v1/").split('/').next().unwrap_or_default();
    match collection {
        "missions" => (resources.mission, true),
        "jobs" => (resources.job, true),
        "job-arrays" => (resources.array, true),
        "images" => (resources.image, true),
        "webhooks" => (resources.webhook, true),
        "cargo-bays" => (resources.bay, true),
        "projects" => (resources.project, true),
        "stations" => (resources.station, false),
        "mission-types" => (resources.mission_type, false),
        other => panic!("{path}: the matrix knows no resource for `{{id}}` under /{other}; add one"),
    }
}

/// One operation of the document.
struct Operation {
    method: Method,
    path: String,
    public: bool,
    body: Option<&'static str>,
    required_query: Vec<String>,
}

fn operations(document: &Value) -> Vec<Operation> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let method = match method.as_str() {
                "get" => Method::GET,
                "post" => Method::POST,
                "put" => Method::PUT,
                "patch" => Method::PATCH,
                "delete" => Method::DELETE,
                _ => continue,
            };
            let content = operation["requestBody"]["content"].as_object();
            let body = content.map(|content| {
                if content.contains_key("application/json") { "application/json" } else { "application/octet-stream" }
            });
            let required_query = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| p["name"].as_str().unwrap().to_owned())
                .collect();
            found.push(Operation {
                method,
                path: path.clone(),
                public: operation["security"].as_array().is_some_and(Vec::is_empty),
                body,
                required_query,
            });
        }
    }
    found
}

/// The URL of `op` on `server` with its parameters filled: the real resources, or (`fresh`) ids
/// that exist nowhere.
fn url_of(server: &TestServer, op: &Operation, resources: &Resources, fresh: bool) -> String {
    let mut path = op.path.clone();
    let (id, _) = if path.contains("{id}") { id_of(&op.path, resources) } else { (Uuid::nil(), false) };
    let pick = |real: Uuid| if fresh { Uuid::new_v4() } else { real };
    for (name, value) in [
        ("{id}", pick(id).to_string()),
        ("{path}", "data/in.txt".to_owned()),
        ("{station_id}", resources.station.to_string()),
        ("{lz_id}", pick(resources.lz).to_string()),
        ("{user}", "carol".to_owned()),
    ] {
        path = path.replace(name, &value);
    }
    assert!(!path.contains('{'), "{}: the matrix fills no value for a parameter of {path}; add one", op.path);
    let query: Vec<String> = op.required_query.iter().map(|name| format!("{name}=matrix")).collect();
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    format!("{}{path}{query}", server.url)
}

/// Calls `op` as whoever `token` is; answers the status (the body is left unread: some answers
/// stream for ever).
async fn call(http: &reqwest::Client, url: &str, op: &Operation, token: Option<&str>) -> u16 {
    let mut request = http.request(op.method.clone(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request = match op.body {
        Some("application/json") => request.header("Content-Type", "application/json").body("{}"),
        Some(other) => request.header("Content-Type", other).body("x"),
        None => request,
    };
    let answer = request.send().await.unwrap_or_else(|e| panic!("{} {url}: {e}", op.method));
    answer.status().as_u16()
}

#[tokio::test]
async fn every_operation_answers_every_principal_as_it_may() {
    let bay_dir = tempfile::tempdir().unwrap();
    let server = TestServer::spawn_with(|config| {
        config.webhook_targets = vec!["http://127.0.0.1:9/".parse().unwrap()];
    })
    .await;
    for (user, admin) in [("root", true), ("bob", false), ("carol", false), ("vera", false)] {
        server.add_user(user, admin).await;
    }
    let admin = server.sign_in("root").await;
    let alice = &server.client;

    // alice's resources, in a project of hers where carol manages and vera views.
    let project = admin.create_project(&CreateProject { name: "lab".into(), description: None }).await.unwrap();
    for (user, role) in [("alice", ProjectRole::Member), ("carol", ProjectRole::Manager), ("vera", ProjectRole::Viewer)]
    {
        admin.set_project_member(project.project_id, user, role).await.unwrap();
    }
    let mission_type = alice.list_mission_types().await.unwrap()[0].id;
    let create = CreateMission {
        name: "private".into(),
        project_id: Some(project.project_id),
        mission_type_id: Some(mission_type),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        ..Default::default()
    };
    let mission = alice.create_mission(&create).await.unwrap();
    let file = bay_dir.path().join("in.txt");
    std::fs::write(&file, "input\n").unwrap();
    assert!(alice.upload(mission.mission_id, &file, Some("data/in.txt"), false).await.unwrap());
    let station = admin
        .create_station(&CreateStation { name: "lab-hosts".into(), open: Some(false), ..Default::default() })
        .await
        .unwrap();
    let registered = mission_client::RegisterLandingZone { name: "lab-lz".into(), cluster_account: None };
    let registered = admin.register_landing_zone(station.station_id, &registered).await.unwrap();
    let (lz, lz_token) = (registered.landing_zone.lz_id, registered.token);
    let run = RunJob { station_id: station.station_id, ..Default::default() };
    admin.add_station_member(station.station_id, "alice").await.unwrap();
    let job = alice.run_job(mission.mission_id, &run).await.unwrap();
    let array_request = mission_api::RunJobArray { run, range: Some("1-2".into()), ..Default::default() };
    let array = alice.run_job_array(mission.mission_id, &array_request).await.unwrap();
    let archive = bay_dir.path().join("image.tar");
    std::fs::write(&archive, mission_api::tar::archive(&[("manifest.json", b'0', b"[]")])).unwrap();
    let import = ImportImage { name: "private".into(), ..Default::default() };
    let image = alice.import_image(&archive, &import, None).await.unwrap();
    let hook = CreateWebhook { url: "http://127.0.0.1:9/hook".into(), ..Default::default() };
    let webhook = alice.create_webhook(&hook).await.unwrap();
    let bay = CreateCargoBay {
        path: Some(bay_dir.path().display().to_string()),
        user_id: Some(mission.user_id),
        ..CreateCargoBay::new("alices", CargoBayKind::Local)
    };
    let bay = admin.create_cargo_bay(&bay).await.unwrap();
    let resources = Resources {
        mission: mission.mission_id,
        job: job.job_id,
        array: array.array_id,
        image: image.image_id,
        webhook: webhook.webhook_id,
        bay: bay.storage_id,
        project: project.project_id,
        station: station.station_id,
        lz,
        mission_type,
    };

    let tokens = BTreeMap::from([
        ("alice", token_for(&server, "alice").await),
        ("bob", token_for(&server, "bob").await),
        ("carol", token_for(&server, "carol").await),
        ("vera", token_for(&server, "vera").await),
        ("root", token_for(&server, "root").await),
    ]);
    let document: Value =
        reqwest::get(format!("{}/api/v1/openapi.json", server.url)).await.unwrap().json().await.unwrap();
    let operations = operations(&document);
    assert!(operations.len() >= 75, "{} operations", operations.len());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();

    let mut wrong = Vec::new();
    let mut cells = 0;
    let principals = [
        Principal::Anonymous,
        Principal::Garbage,
        Principal::LandingZone,
        Principal::Outsider,
        Principal::Viewer,
        Principal::Manager,
        Principal::Admin,
        Principal::Owner,
    ];
    // Every principal's calls but deletions first, then every principal's deletions: what they
    // remove, later calls would miss.
    let phases = principals.iter().map(|p| (false, *p)).chain(principals.iter().map(|p| (true, *p)));
    for (deletions, principal) in phases {
        let token = match principal {
            Principal::Anonymous => None,
            Principal::Garbage => Some("not-a-token"),
            Principal::LandingZone => Some(lz_token.as_str()),
            Principal::Outsider => Some(tokens["bob"].as_str()),
            Principal::Viewer => Some(tokens["vera"].as_str()),
            Principal::Manager => Some(tokens["carol"].as_str()),
            Principal::Admin => Some(tokens["root"].as_str()),
            Principal::Owner => Some(tokens["alice"].as_str()),
        };
        for op in operations.iter().filter(|op| (op.method == Method::DELETE) == deletions) {
            cells += 1;
            let url = url_of(&server, op, &resources, false);
            let status = call(&http, &url, op, token).await;
            let at = format!("{principal:?} {} {}: {status}", op.method, op.path);
            if status >= 500 {
                wrong.push(format!("{at}: a server error"));
            }
            let signed_out = matches!(principal, Principal::Anonymous | Principal::Garbage | Principal::LandingZone);
            if signed_out && !op.public && (200..300).contains(&status) {
                wrong.push(format!("{at}: answered without a user's token"));
            }
            let hidden = op.path.contains("{id}") && id_of(&op.path, &resources).1;
            if hidden && (signed_out || principal == Principal::Outsider) {
                if (200..300).contains(&status) {
                    wrong.push(format!("{at}: a resource they may not see"));
                }
                let unknown = call(&http, &url_of(&server, op, &resources, true), op, token).await;
                if unknown != status {
                    wrong.push(format!("{at}, but {unknown} for an id that does not exist: an oracle"));
                }
            }
            // The owner (the admin for what an admin made) reads each resource: the refusals
            // above are refusals of something that is there.
            let reads_it = matches!(principal, Principal::Owner | Principal::Admin);
            if reads_it && op.method == Method::GET && op.path.ends_with("/{id}") && status != 200 {
                wrong.push(format!("{at}: the resource's owner could not read it"));
            }
            let member_owned = ["/missions/{id}", "/jobs/{id}", "/job-arrays/{id}", "/images/{id}", "/projects/{id}"];
            let changes = op.method != Method::GET;
            if principal == Principal::Viewer
                && changes
                && member_owned.iter().any(|prefix| op.path.starts_with(&format!("/api/v1{prefix}")))
                && (200..300).contains(&status)
            {
                wrong.push(format!("{at}: a viewer changed a member's resource"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {cells} cells wrong:\n{}", wrong.len(), wrong.join("\n"));
}
