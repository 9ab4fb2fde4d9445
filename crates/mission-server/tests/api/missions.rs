//! The missions API through the SDK and raw HTTP: every operation, paging and filters,
//! ownership between users, and bad input.

use std::collections::BTreeMap;

use mission_client::{CreateMission, Error, ListMissions, UpdateMission, Uuid};
use mission_testkit::TestServer;

use crate::{http, problem, token_for};

const PYTHON: Uuid = uuid::uuid!("c407e534-62e7-472b-8830-3d2ebe1bffbd");

fn named(name: &str) -> CreateMission {
    CreateMission { name: name.into(), ..Default::default() }
}

#[tokio::test]
async fn create_get_update_args_delete() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let me = client.whoami().await.unwrap();

    let created = client
        .create_mission(&CreateMission {
            name: "  climate  ".into(),
            description: Some("ERA5 downscaling".into()),
            mission_type_id: Some(PYTHON),
            settings: Some(BTreeMap::from([("filename".into(), "src/run.py".into())])),
            source_path: Some("inputs/2026".into()),
            source_storage_id: Some(mission_client::DEFAULT_CARGO_BAY_ID),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(created.name, "climate", "names are trimmed");
    assert_eq!(created.user_id, me.user_id);
    assert!(!created.public && !created.archived && created.args.is_empty());
    assert_eq!(created.created_at, created.updated_at);

    let fetched = client.get_mission_by_id(created.mission_id).await.unwrap();
    assert_eq!(fetched, created);

    // Defaults: empty description, private, no type.
    let plain = client.create_mission(&named("plain")).await.unwrap();
    assert_eq!((plain.description.as_str(), plain.public, plain.mission_type_id), ("", false, None));

    // Update changes only what is given.
    let changes = UpdateMission {
        description: Some("v2".into()),
        settings: Some(BTreeMap::from([
            ("filename".into(), "main.py".into()),
            ("interpreter".into(), "python3.11".into()),
        ])),
        ..Default::default()
    };
    assert!(client.update_mission(created.mission_id, &changes).await.unwrap());
    let updated = client.get_mission_by_id(created.mission_id).await.unwrap();
    assert_eq!(updated.name, "climate");
    assert_eq!(updated.description, "v2");
    assert_eq!(updated.settings["interpreter"], "python3.11");
    assert_eq!(updated.source_path.as_deref(), Some("inputs/2026"));
    assert!(updated.updated_at > created.updated_at);
    assert!(!client.update_mission(Uuid::new_v4(), &changes).await.unwrap(), "missing mission → false");

    // Arguments are stored and returned with the mission.
    let args = vec!["--steps".to_owned(), "100".to_owned(), "two words".to_owned()];
    assert_eq!(client.update_mission_args(created.mission_id, &args).await.unwrap().args, args);
    assert_eq!(client.get_mission_by_id(created.mission_id).await.unwrap().args, args);

    // Archive, then filter.
    let archive = UpdateMission { archived: Some(true), ..Default::default() };
    assert!(client.update_mission(plain.mission_id, &archive).await.unwrap());
    let archived = client.list_missions(&ListMissions { archived: Some(true), ..Default::default() }).await.unwrap();
    assert_eq!(archived.iter().map(|m| m.mission_id).collect::<Vec<_>>(), [plain.mission_id]);

    // Delete; then it is gone.
    client.delete_mission_by_id(created.mission_id).await.unwrap();
    let err = client.get_mission_by_id(created.mission_id).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    let err = client.delete_mission_by_id(created.mission_id).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)));
}

#[tokio::test]
async fn paging_and_filters() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let mut ids = Vec::new();
    for i in 0..30 {
        let mut request = named(&format!("m{:02}", i % 10));
        if i % 3 == 0 {
            request.mission_type_id = Some(PYTHON);
        }
        ids.push(client.create_mission(&request).await.unwrap().mission_id);
    }
    // Default page: 25 newest first, more to come.
    let page = client.list_missions_page(&ListMissions::default()).await.unwrap();
    assert_eq!((page.missions.len(), page.page, page.items, page.has_more), (25, 1, 25, true));
    assert_eq!(page.missions[0].mission_id, ids[29]);
    let second = client.list_missions_page(&ListMissions { page: 2, ..Default::default() }).await.unwrap();
    assert_eq!(second.missions.len(), 5);
    assert!(!second.has_more);
    let mut seen: Vec<Uuid> = page.missions.iter().chain(&second.missions).map(|m| m.mission_id).collect();
    seen.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(seen, all, "pages cover every mission once");

    let small = client.list_missions(&ListMissions { items: 7, page: 3, ..Default::default() }).await.unwrap();
    assert_eq!(small.len(), 7);
    assert_eq!(small[0].mission_id, ids[29 - 14]);

    let by_name = client
        .list_missions(&ListMissions { names: vec!["m03".into(), "m04".into()], ..Default::default() })
        .await
        .unwrap();
    assert_eq!(by_name.len(), 6);
    assert!(by_name.iter().all(|m| m.name == "m03" || m.name == "m04"));
    let by_id =
        client.list_missions(&ListMissions { mission_ids: vec![ids[0], ids[5]], ..Default::default() }).await.unwrap();
    assert_eq!(by_id.len(), 2);
    let by_type = client
        .list_missions(&ListMissions { mission_type_ids: vec![PYTHON], items: 200, ..Default::default() })
        .await
        .unwrap();
    assert_eq!(by_type.len(), 10);
    let me = client.whoami().await.unwrap().user_id;
    let by_user = client
        .list_missions(&ListMissions { user_ids: vec![me], names: vec!["m01".into()], ..Default::default() })
        .await
        .unwrap();
    assert_eq!(by_user.len(), 3);
    let nobody =
        client.list_missions(&ListMissions { user_ids: vec![Uuid::new_v4()], ..Default::default() }).await.unwrap();
    assert!(nobody.is_empty());
    let unarchived =
        client.list_missions(&ListMissions { archived: Some(false), items: 200, ..Default::default() }).await.unwrap();
    assert_eq!(unarchived.len(), 30);
}

#[tokio::test]
async fn labels_find_missions_again_and_change() {
    let server = TestServer::spawn().await;
    server.add_user("bob", false).await;
    let alice = &server.client;
    let bob = server.sign_in("bob").await;
    let labelled = |pairs: &[(&str, &str)]| -> mission_client::Labels {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let with = |pairs: &[(&str, &str)]| ListMissions {
        labels: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..Default::default()
    };
    let ids = |missions: Vec<mission_client::Mission>| missions.into_iter().map(|m| m.mission_id).collect::<Vec<_>>();
    let create = |name: &str, public: bool, pairs: &[(&str, &str)]| CreateMission {
        public: Some(public),
        labels: labelled(pairs),
        ..named(name)
    };
    let a = alice.create_mission(&create("a", false, &[("project", "climate"), ("stage", "draft")])).await.unwrap();
    let b = alice.create_mission(&create("b", true, &[("project", "climate")])).await.unwrap();
    let c = alice.create_mission(&create("c", false, &[])).await.unwrap();
    assert_eq!(a.labels, labelled(&[("project", "climate"), ("stage", "draft")]), "create answers the labels");
    assert!(c.labels.is_empty());

    // Filters take every label given, and keep to what the caller may see.
    assert_eq!(ids(alice.list_missions(&with(&[("project", "climate")])).await.unwrap()), [b.mission_id, a.mission_id]);
    assert_eq!(
        ids(alice.list_missions(&with(&[("project", "climate"), ("stage", "draft")])).await.unwrap()),
        [a.mission_id]
    );
    assert_eq!(ids(bob.list_missions(&with(&[("project", "climate")])).await.unwrap()), [b.mission_id]);

    // Labels change with an update (the whole map), and other fields stay.
    let changed = alice.set_mission_labels(a.mission_id, &labelled(&[("project", "ocean")])).await.unwrap();
    assert_eq!((changed.labels, changed.name.as_str()), (labelled(&[("project", "ocean")]), "a"));
    assert_eq!(ids(alice.list_missions(&with(&[("project", "climate")])).await.unwrap()), [b.mission_id]);
    let rename = UpdateMission { name: Some("a2".into()), ..Default::default() };
    assert!(alice.update_mission(a.mission_id, &rename).await.unwrap());
    assert_eq!(alice.get_mission_by_id(a.mission_id).await.unwrap().labels, labelled(&[("project", "ocean")]));

    // Bad labels are a 400 naming the label, and nothing is created or changed.
    let bad = alice.create_mission(&create("bad", false, &[("bad key", "x")])).await.unwrap_err();
    let problem = bad.problem().expect("a problem");
    assert_eq!((problem.status, problem.field.as_deref()), (400, Some("labels.bad key")), "{problem:?}");
    let control = alice.set_mission_labels(b.mission_id, &labelled(&[("note", "a\nb")])).await.unwrap_err();
    assert_eq!(control.problem().unwrap().field.as_deref(), Some("labels.note"));
    let bad = alice.list_missions(&with(&[("", "x")])).await.unwrap_err();
    assert_eq!(bad.problem().unwrap().field.as_deref(), Some("label"));
    assert_eq!(alice.list_missions(&Default::default()).await.unwrap().len(), 3, "the refused create made nothing");
    assert_eq!(alice.get_mission_by_id(b.mission_id).await.unwrap().labels, labelled(&[("project", "climate")]));
    // Another user's public mission is read-only: its labels too.
    assert!(matches!(bob.set_mission_labels(b.mission_id, &labelled(&[])).await, Err(Error::Forbidden(_))));
}

#[tokio::test]
async fn users_are_isolated_and_public_missions_are_read_only() {
    let server = TestServer::spawn().await;
    server.add_user("bob", false).await;
    server.add_user("root", true).await;
    let alice = &server.client;
    let bob = server.sign_in("bob").await;
    let admin = server.sign_in("root").await;

    let private = alice.create_mission(&named("alice private")).await.unwrap();
    let public = alice.create_mission(&CreateMission { public: Some(true), ..named("alice public") }).await.unwrap();
    let bobs = bob.create_mission(&named("bob's")).await.unwrap();

    // Bob sees his own and Alice's public mission, never her private one.
    let visible: Vec<Uuid> =
        bob.list_missions(&Default::default()).await.unwrap().iter().map(|m| m.mission_id).collect();
    assert_eq!(visible, [bobs.mission_id, public.mission_id]);
    let hidden =
        bob.list_missions(&ListMissions { mission_ids: vec![private.mission_id], ..Default::default() }).await.unwrap();
    assert!(hidden.is_empty());
    assert!(matches!(bob.get_mission_by_id(private.mission_id).await, Err(Error::NotFound(_))));
    assert_eq!(bob.get_mission_by_id(public.mission_id).await.unwrap().name, "alice public");

    // Private: 404 for every write (its existence is not revealed); public: 403.
    let change = UpdateMission { name: Some("taken".into()), ..Default::default() };
    assert!(!bob.update_mission(private.mission_id, &change).await.unwrap());
    assert!(matches!(bob.delete_mission_by_id(private.mission_id).await, Err(Error::NotFound(_))));
    assert!(matches!(bob.update_mission(public.mission_id, &change).await, Err(Error::Forbidden(_))));
    assert!(matches!(bob.update_mission_args(public.mission_id, &["x".into()]).await, Err(Error::Forbidden(_))));
    assert!(matches!(bob.delete_mission_by_id(public.mission_id).await, Err(Error::Forbidden(_))));
    assert_eq!(alice.get_mission_by_id(public.mission_id).await.unwrap().name, "alice public");

    // Admins see and change everything.
    assert_eq!(admin.list_missions(&Default::default()).await.unwrap().len(), 3);
    assert!(admin.update_mission(private.mission_id, &change).await.unwrap());
    admin.delete_mission_by_id(bobs.mission_id).await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_clear_400() {
    let server = TestServer::spawn().await;
    let token = token_for(&server, "alice").await;
    let base = format!("{}/api/v1", server.url);
    let post = |body: String| {
        http()
            .post(format!("{base}/missions"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: Vec<(String, u16, &str)> = vec![
        (r#"{"name": ""}"#.into(), 400, "name: must not be empty"),
        (r#"{"name": "   "}"#.into(), 400, "name: must not be empty"),
        (serde_json::json!({ "name": "x".repeat(100_000) }).to_string(), 400, "name: at most 256 characters"),
        (r#"{"name": "a\u0000b"}"#.into(), 400, "control characters"),
        (r#"{"description": "no name"}"#.into(), 400, "missing field `name`"),
        (r#"{"name": 42}"#.into(), 400, "invalid type"),
        (r#"{"name": "x", "colour": "red"}"#.into(), 400, "unknown field `colour`"),
        (r#"{"name": "x", "public": "yes"}"#.into(), 400, "invalid type"),
        (r#"{"name": "x", "mission_type_id": "not-a-uuid"}"#.into(), 400, "mission_type_id"),
        (format!(r#"{{"name": "x", "mission_type_id": "{}"}}"#, Uuid::new_v4()), 400, "no mission type"),
        (
            format!(r#"{{"name": "x", "mission_type_id": "{PYTHON}", "settings": {{"colour": "red"}}}}"#),
            400,
            "setting \"colour\"",
        ),
        (
            format!(
                r#"{{"name": "x", "mission_type_id": "{PYTHON}", "settings": {{"filename": "../../etc/passwd"}}}}"#
            ),
            400,
            "'..'",
        ),
        (r#"{"name": "x", "settings": {"filename": "a.py"}}"#.into(), 400, "without a mission_type_id"),
        (r#"{"name": "x""#.into(), 400, "EOF"),
        ("[]".into(), 400, "the body must be a JSON object"),
        (format!(r#"{{"name": "{}"}}"#, "y".repeat(2 * 1024 * 1024)), 413, "limited to"),
    ];
    for (body, status, needle) in cases {
        let shown: String = body.chars().take(80).collect();
        let (got, p) = problem(post(body).await.unwrap()).await;
        assert_eq!(got, status, "{shown}: {p:?}");
        assert!(p.detail.contains(needle), "{shown}: {}", p.detail);
    }
    // Not JSON at all: 415.
    let response = http().post(format!("{base}/missions")).bearer_auth(&token).body("name=x").send().await.unwrap();
    assert_eq!(problem(response).await.0, 415);

    let mission = server.client.create_mission(&named("target")).await.unwrap();
    let id = mission.mission_id;
    // `public` cannot be changed by update (the spec's update takes no such parameter).
    let response = http()
        .patch(format!("{base}/missions/{id}"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"public": true}))
        .send()
        .await
        .unwrap();
    let (status, p) = problem(response).await;
    assert_eq!(status, 400);
    assert!(p.detail.contains("unknown field `public`"), "{}", p.detail);
    // Settings on a mission without a type; args that are not strings.
    let err = server
        .client
        .update_mission(
            id,
            &UpdateMission { settings: Some(BTreeMap::from([("a".into(), "b".into())])), ..Default::default() },
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    let response = http()
        .put(format!("{base}/missions/{id}/args"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"args": [1, 2]}))
        .send()
        .await
        .unwrap();
    assert_eq!(problem(response).await.0, 400);
    let response =
        http().put(format!("{base}/missions/{id}/args")).bearer_auth(&token).json(&["a"]).send().await.unwrap();
    assert_eq!(problem(response).await.0, 400);

    // Malformed ids and queries.
    for path in ["missions/not-a-uuid", "missions/1234", "missions/%00", "missions/..%2F..%2Fetc"] {
        let (status, p) = problem(http().get(format!("{base}/{path}")).bearer_auth(&token).send().await.unwrap()).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(p.kind, "urn:mission:problem:invalid-id");
    }
    for query in [
        "items=0",
        "items=201",
        "items=ten",
        "page=0",
        "page=-1",
        "archived=maybe",
        "ids=nope",
        "colour=red",
        "user_ids=1",
    ] {
        let response = http().get(format!("{base}/missions?{query}")).bearer_auth(&token).send().await.unwrap();
        let (status, p) = problem(response).await;
        assert_eq!(status, 400, "{query}: {p:?}");
    }
    // Nothing half-written: the mission is as it was.
    assert_eq!(server.client.get_mission_by_id(id).await.unwrap(), mission);
}

/// A job's path takes its id or its number; anything else is a malformed id, and a number no
/// job has (or one of a job the caller may not see) is no job, named by the number.
#[tokio::test]
async fn job_paths_take_an_id_or_a_number() {
    let server = TestServer::spawn().await;
    let token = token_for(&server, "alice").await;
    let base = format!("{}/api/v1", server.url);
    for path in ["jobs/12ab", "jobs/-1", "jobs/1.5", "jobs/%2031", "jobs/99999999999999999999999"] {
        let response = http().get(format!("{base}/{path}")).bearer_auth(&token).send().await.unwrap();
        let (status, p) = problem(response).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(p.kind, "urn:mission:problem:invalid-id", "{path}");
        assert!(p.detail.contains("neither a job's id (a UUID) nor its number"), "{path}: {p:?}");
    }
    for path in ["jobs/4711", "jobs/4711/results", "jobs/00000000-0000-4000-8000-000000000000"] {
        let (status, p) = problem(http().get(format!("{base}/{path}")).bearer_auth(&token).send().await.unwrap()).await;
        assert_eq!(status, 404, "{path}");
        if path.contains("4711") {
            assert!(p.detail.contains("no job 4711"), "{path}: {p:?}");
        }
    }
}
