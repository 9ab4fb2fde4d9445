//! Cargo bays end to end: the API's rules (ownership, kinds, admin-only local bays, endpoint
//! allowlist, missions naming bays), mission files kept in a local bay, and an S3 bay against a
//! real S3-compatible server (moto, started by the test) including wrong credentials.

use std::path::Path;

use mission_client::{
    CargoBayKind, Client, CreateCargoBay, CreateMission, DEFAULT_CARGO_BAY_ID, Error, UpdateMission, Uuid,
};
use mission_server::blobs::Location;
use mission_testkit::{S3Server, TestServer};

use crate::{http, token_for};

fn write(root: &Path, relative: &str, content: &[u8]) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// The status and detail of a failed call.
fn failure<T: std::fmt::Debug>(result: Result<T, Error>) -> (u16, String, Option<String>) {
    let error = result.expect_err("the call should fail");
    let problem = error.problem().unwrap_or_else(|| panic!("not an API error: {error}"));
    (problem.status, problem.detail.clone(), problem.field.clone())
}

async fn mission_in(client: &Client, bay: Uuid, source_path: Option<&str>) -> Result<Uuid, Error> {
    let request = CreateMission {
        name: "bay mission".into(),
        source_storage_id: Some(bay),
        source_path: source_path.map(str::to_owned),
        ..Default::default()
    };
    client.create_mission(&request).await.map(|m| m.mission_id)
}

fn local(name: &str, path: &Path) -> CreateCargoBay {
    CreateCargoBay { path: Some(path.to_str().unwrap().to_owned()), ..CreateCargoBay::new(name, CargoBayKind::Local) }
}

#[tokio::test]
async fn bays_follow_their_rules() {
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    server.add_user("bob", false).await;
    let alice = &server.client;
    let root = server.sign_in("root").await;
    let bob = server.sign_in("bob").await;
    let alice_id = alice.whoami().await.unwrap().user_id;

    // Everyone has the default bay, which cannot be deleted or created.
    let bays = alice.list_cargo_bays().await.unwrap();
    assert_eq!(bays.len(), 1);
    assert_eq!((bays[0].storage_id, bays[0].kind), (DEFAULT_CARGO_BAY_ID, CargoBayKind::Default));
    assert_eq!(alice.get_cargo_bay(DEFAULT_CARGO_BAY_ID).await.unwrap(), bays[0]);
    assert_eq!(failure(alice.delete_cargo_bay(DEFAULT_CARGO_BAY_ID).await).0, 409);
    let (status, _, field) = failure(alice.create_cargo_bay(&CreateCargoBay::new("d", CargoBayKind::Default)).await);
    assert_eq!((status, field.as_deref()), (400, Some("kind")));

    // Bad requests name their field.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(failure(alice.create_cargo_bay(&local("mine", dir.path())).await).0, 403, "local bays are admin-only");
    let s3 =
        |bucket: &str| CreateCargoBay { bucket: Some(bucket.into()), ..CreateCargoBay::new("b", CargoBayKind::S3) };
    for (request, expected) in [
        (CreateCargoBay::new("b", CargoBayKind::S3), "bucket"),
        (s3("Bad_Bucket"), "bucket"),
        (s3("ab"), "bucket"),
        (CreateCargoBay { prefix: Some("a/../b".into()), ..s3("good-bucket") }, "prefix"),
        (CreateCargoBay { region: Some("eu west".into()), ..s3("good-bucket") }, "region"),
        (CreateCargoBay { endpoint: Some("http://10.0.0.1:9000".into()), ..s3("good-bucket") }, "endpoint"),
        (CreateCargoBay { endpoint: Some("file:///etc".into()), ..s3("good-bucket") }, "endpoint"),
        (CreateCargoBay { secret_access_key: Some("s".into()), ..s3("good-bucket") }, "access_key_id"),
        (CreateCargoBay { access_key_id: Some("AKIA".into()), ..s3("good-bucket") }, "secret_access_key"),
        (CreateCargoBay { path: Some("/tmp".into()), ..s3("good-bucket") }, "path"),
        (CreateCargoBay { name: " ".into(), ..s3("good-bucket") }, "name"),
    ] {
        let (status, detail, field) = failure(alice.create_cargo_bay(&request).await);
        assert_eq!((status, field.as_deref()), (400, Some(expected)), "{request:?}: {detail}");
    }
    let (_, detail, _) = failure(
        alice
            .create_cargo_bay(&CreateCargoBay { endpoint: Some("http://10.0.0.1:9000".into()), ..s3("good-bucket") })
            .await,
    );
    assert!(detail.contains("--s3-endpoint"), "{detail}");
    for (path, why) in [("relative/dir", "not an absolute path"), ("/no/such/dir/anywhere", "No such file")] {
        let (status, detail, _) = failure(root.create_cargo_bay(&local("x", Path::new(path))).await);
        assert_eq!(status, 400);
        assert!(detail.contains(why), "{detail}");
    }
    let token = token_for(&server, "alice").await;
    let response = http()
        .post(format!("{}/api/v1/cargo-bays", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({"name": "x", "kind": "s3", "bucket": "good-bucket", "colour": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "unknown fields are refused");

    // An admin adds a local bay for alice; only she (and admins) see and use it.
    let bay = root
        .create_cargo_bay(&CreateCargoBay { user_id: Some(alice_id), ..local("alice's scratch", dir.path()) })
        .await
        .unwrap();
    assert_eq!((bay.kind, bay.user_id, bay.has_credentials), (CargoBayKind::Local, Some(alice_id), false));
    assert_eq!(alice.list_cargo_bays().await.unwrap().len(), 2);
    assert_eq!(alice.get_cargo_bay(bay.storage_id).await.unwrap(), bay);
    assert!(matches!(bob.get_cargo_bay(bay.storage_id).await, Err(Error::NotFound(_))));
    assert_eq!(bob.list_cargo_bays().await.unwrap().len(), 1);
    assert!(!bob.delete_cargo_bay(bay.storage_id).await.unwrap());
    let (status, _, field) = failure(mission_in(&bob, bay.storage_id, None).await);
    assert_eq!((status, field.as_deref()), (400, Some("source_storage_id")), "not bob's bay");
    let (status, _, field) = failure(mission_in(alice, Uuid::new_v4(), None).await);
    assert_eq!((status, field.as_deref()), (400, Some("source_storage_id")), "no such bay");
    let (status, _, field) = failure(mission_in(alice, bay.storage_id, Some("../escape")).await);
    assert_eq!((status, field.as_deref()), (400, Some("source_path")));
    let bob_mission = bob.create_mission(&CreateMission { name: "b".into(), ..Default::default() }).await.unwrap();
    let steal = UpdateMission { destination_storage_id: Some(bay.storage_id), ..Default::default() };
    assert_eq!(
        failure(bob.update_mission(bob_mission.mission_id, &steal).await).2.as_deref(),
        Some("destination_storage_id")
    );

    // A mission's files live in the bay under its source path; what was there stays untouched.
    write(dir.path(), "proj/a/keep.txt", b"not the mission's");
    let id = mission_in(alice, bay.storage_id, Some("/proj/a/")).await.unwrap();
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "in.txt", b"input");
    write(src.path(), "sub/deep.bin", &[9u8; 70_000]);
    assert!(alice.upload(id, src.path(), None, false).await.unwrap());
    assert_eq!(std::fs::read(dir.path().join("proj/a/in.txt")).unwrap(), b"input");
    assert_eq!(std::fs::read(dir.path().join("proj/a/sub/deep.bin")).unwrap(), vec![9u8; 70_000]);
    let mut listed: Vec<String> =
        alice.get_mission_files(id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    listed.sort();
    assert_eq!(listed, ["in.txt", "sub/deep.bin"], "the listing is the mission's index, not the folder");
    let out = tempfile::tempdir().unwrap();
    alice.download(id, out.path()).await.unwrap();
    assert_eq!(std::fs::read(out.path().join("sub/deep.bin")).unwrap(), vec![9u8; 70_000]);
    assert!(alice.delete_file(id, "in.txt").await.unwrap());
    assert!(!dir.path().join("proj/a/in.txt").exists());

    // Content changed behind the service's back is not served as if it were the indexed one.
    std::fs::write(dir.path().join("proj/a/sub/deep.bin"), b"tampered").unwrap();
    let response = http()
        .get(format!("{}/api/v1/missions/{id}/files/sub/deep.bin", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    assert!(alice.upload(id, src.path(), None, false).await.unwrap(), "uploading again repairs it");

    // The source cannot move while files are there; a bay in use cannot be deleted.
    let moving = UpdateMission { source_path: Some("elsewhere".into()), ..Default::default() };
    assert_eq!(failure(alice.update_mission(id, &moving).await).0, 409);
    let (status, detail, _) = failure(alice.delete_cargo_bay(bay.storage_id).await);
    assert_eq!(status, 409);
    assert!(detail.contains("1 mission"), "{detail}");

    // Without a source path a mission gets its own folder in the bay.
    let other = mission_in(alice, bay.storage_id, None).await.unwrap();
    assert!(alice.upload(other, &src.path().join("in.txt"), None, false).await.unwrap());
    assert!(dir.path().join(format!("missions/{other}/in.txt")).exists());

    // Deleting the missions removes the files they indexed, and nothing else.
    alice.delete_mission_by_id(id).await.unwrap();
    alice.delete_mission_by_id(other).await.unwrap();
    assert!(!dir.path().join("proj/a/sub/deep.bin").exists());
    assert!(!dir.path().join(format!("missions/{other}/in.txt")).exists());
    assert_eq!(std::fs::read(dir.path().join("proj/a/keep.txt")).unwrap(), b"not the mission's");
    assert!(alice.delete_cargo_bay(bay.storage_id).await.unwrap());
    assert!(matches!(alice.get_cargo_bay(bay.storage_id).await, Err(Error::NotFound(_))));
}

#[tokio::test]
async fn s3_bays_hold_mission_files_and_refuse_wrong_credentials() {
    let Some(s3) = S3Server::start().await else { return };
    let endpoint: url::Url = s3.endpoint.parse().unwrap();
    let mut server = TestServer::spawn_with(move |c| c.s3_endpoints = vec![endpoint]).await;
    let alice = &server.client.clone();
    let bay_request = |access_key_id: &str, secret: &str| CreateCargoBay {
        bucket: Some(s3.bucket.clone()),
        prefix: Some("lab/".into()),
        endpoint: Some(s3.endpoint.clone()),
        region: Some(s3.region.clone()),
        access_key_id: Some(access_key_id.into()),
        secret_access_key: Some(secret.into()),
        ..CreateCargoBay::new("lab bucket", CargoBayKind::S3)
    };

    // Wrong credentials are a clear 400 at once, and no bay is saved.
    for (key, secret) in [("AKIAWRONGWRONGWRONG1", s3.secret_access_key.as_str()), (s3.access_key_id.as_str(), "wrong")]
    {
        let (status, detail, _) = failure(alice.create_cargo_bay(&bay_request(key, secret)).await);
        assert_eq!(status, 400);
        assert!(detail.contains("refused the credentials"), "{detail}");
    }
    assert_eq!(alice.list_cargo_bays().await.unwrap().len(), 1);
    let missing_bucket = CreateCargoBay {
        bucket: Some("no-such-bucket".into()),
        ..bay_request(&s3.access_key_id, &s3.secret_access_key)
    };
    assert_eq!(failure(alice.create_cargo_bay(&missing_bucket).await).0, 400);

    let bay = alice.create_cargo_bay(&bay_request(&s3.access_key_id, &s3.secret_access_key)).await.unwrap();
    assert_eq!((bay.kind, bay.prefix.as_deref(), bay.has_credentials), (CargoBayKind::S3, Some("lab"), true));
    // The secret never comes back and is not in the database in the clear.
    let token = token_for(&server, "alice").await;
    for url in
        [format!("{}/api/v1/cargo-bays", server.url), format!("{}/api/v1/cargo-bays/{}", server.url, bay.storage_id)]
    {
        let body = http().get(url).bearer_auth(&token).send().await.unwrap().text().await.unwrap();
        assert!(!body.contains(&s3.secret_access_key) && !body.contains("secret"), "{body}");
    }
    let record = server.app.store.cargo_bay(bay.storage_id).await.unwrap().unwrap();
    let sealed = record.sealed_credentials.clone().unwrap();
    assert!(!sealed.windows(s3.secret_access_key.len()).any(|w| w == s3.secret_access_key.as_bytes()));

    // Upload (a small file and one large enough for a multipart upload), list, download, ranges.
    let id = mission_in(alice, bay.storage_id, Some("run-7")).await.unwrap();
    let src = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..9 * 1024 * 1024 + 123).map(|i| (i % 251) as u8).collect();
    write(src.path(), "config.yaml", b"steps: 3\n");
    write(src.path(), "data/big.bin", &big);
    assert!(alice.upload(id, src.path(), None, false).await.unwrap());
    let mut listed: Vec<(String, u64)> =
        alice.get_mission_files(id).await.unwrap().iter().map(|f| (f.relative_path(), f.file_size)).collect();
    listed.sort();
    assert_eq!(listed, [("config.yaml".to_owned(), 9), ("data/big.bin".to_owned(), big.len() as u64)]);
    let objects = Location::new(server.app.bays.open(&record).unwrap(), ["lab", "run-7"].map(String::from), false);
    let key = objects.key(&mission_api::paths::MissionPath::parse("data/big.bin").unwrap());
    assert!(
        objects.files.e_tag(&key).await.unwrap().is_some(),
        "the object is in the bucket at lab/run-7/data/big.bin"
    );
    let out = tempfile::tempdir().unwrap();
    assert_eq!(alice.download(id, out.path()).await.unwrap().transferred, 2);
    assert_eq!(std::fs::read(out.path().join("data/big.bin")).unwrap(), big);
    let response = http()
        .get(format!("{}/api/v1/missions/{id}/files/data/big.bin", server.url))
        .bearer_auth(&token)
        .header("range", "bytes=1000-1009")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.bytes().await.unwrap().as_ref(), &big[1000..1010]);
    assert!(alice.upload(id, src.path(), None, false).await.unwrap(), "re-upload of unchanged files");
    assert_eq!(alice.upload_with(id, src.path(), None, &Default::default()).await.unwrap().unwrap().skipped, 2);

    // The sealed credentials survive a restart (the key is in the data dir).
    server.restart().await;
    let again = tempfile::tempdir().unwrap();
    server.client.download(id, again.path()).await.unwrap();
    assert_eq!(std::fs::read(again.path().join("config.yaml")).unwrap(), b"steps: 3\n");

    // Delete a file, then the mission: the objects leave the bucket.
    assert!(alice.delete_file(id, "config.yaml").await.unwrap());
    assert!(!alice.delete_file(id, "config.yaml").await.unwrap());
    let config_key = objects.key(&mission_api::paths::MissionPath::parse("config.yaml").unwrap());
    assert!(objects.files.e_tag(&config_key).await.unwrap().is_none());
    alice.delete_mission_by_id(id).await.unwrap();
    assert!(objects.files.e_tag(&key).await.unwrap().is_none());
    assert!(alice.delete_cargo_bay(bay.storage_id).await.unwrap());
}

#[tokio::test]
async fn restart_removes_staging_leftovers_of_unfinished_uploads_in_a_local_bay() {
    let mut first = TestServer::spawn().await;
    first.add_user("root", true).await;
    let root = first.sign_in("root").await;
    let dir = tempfile::tempdir().unwrap();
    let bay = root.create_cargo_bay(&local("scratch", dir.path())).await.unwrap();
    let id = mission_in(&root, bay.storage_id, Some("run")).await.unwrap();

    // A kill -9 mid-upload leaves the upload's intent and its staging files; the bay's folder
    // also holds people's own files that merely look like staging files.
    let intent = mission_store::Intent::new(mission_store::IntentKind::Upload, id, "data/big.bin");
    first.app.store.begin_intent(&intent).await.unwrap();
    write(dir.path(), "run/data/big.bin#3", b"half");
    write(dir.path(), "run/data/big.bin#17", b"half");
    write(dir.path(), "run/data/other.bin#5", b"someone's own");
    write(dir.path(), "run/notes#1", b"someone's own");

    first.restart().await;
    assert!(first.app.store.pending_intents().await.unwrap().is_empty());
    let mut left: Vec<String> = walk(dir.path());
    left.sort();
    assert_eq!(left, ["run/data/other.bin#5", "run/notes#1"]);
}

/// Files under `root`, as relative paths.
fn walk(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found
}
