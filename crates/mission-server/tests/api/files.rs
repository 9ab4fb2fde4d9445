//! Mission files end to end: upload rules, listing, download, delete, ranges, limits, path
//! traversal over raw HTTP, interrupted uploads, crash recovery and ownership.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use mission_client::{Client, CreateMission, TransferOptions, Uuid};
use mission_store::{Intent, IntentKind};
use mission_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{http, problem, token_for};

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

async fn mission(client: &Client, name: &str, public: bool) -> Uuid {
    client
        .create_mission(&CreateMission { name: name.into(), public: Some(public), ..Default::default() })
        .await
        .unwrap()
        .mission_id
}

fn write(root: &Path, relative: &str, content: &[u8]) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

#[tokio::test]
async fn upload_rules_listing_download_and_delete() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let id = mission(client, "files", false).await;
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "top.txt", b"top level");
    write(src.path(), "empty.dat", b"");
    write(src.path(), "data/raw/ü n i c o d e.csv", b"a,b\n1,2\n");
    write(src.path(), "data/with space/x", &vec![7u8; 300_000]);

    // Rule 2: a directory's first level at the top, subfolders as subfolders.
    assert!(client.upload(id, src.path(), None, false).await.unwrap());
    // Rule 1: a file at the top level, or where `rename` says.
    let single = src.path().join("top.txt");
    assert!(client.upload(id, &single, Some("docs/renamed.txt"), false).await.unwrap());
    let mut listing = client.get_mission_files(id).await.unwrap();
    listing.sort_by_key(|f| f.relative_path());
    let paths: Vec<String> = listing.iter().map(|f| f.relative_path()).collect();
    assert_eq!(paths, ["data/raw/ü n i c o d e.csv", "data/with space/x", "docs/renamed.txt", "empty.dat", "top.txt"]);
    let csv = &listing[0];
    assert_eq!(
        (csv.filename.as_str(), csv.name.as_str(), csv.path.as_str()),
        ("ü n i c o d e.csv", "ü n i c o d e.csv", "data/raw")
    );
    assert_eq!(csv.file_size, 8);
    assert_eq!(csv.sha256, sha256_hex(b"a,b\n1,2\n"));
    let top = listing.iter().find(|f| f.filename == "top.txt").unwrap();
    assert_eq!(top.path, "", "top-level files have an empty folder");
    assert_eq!(listing.iter().find(|f| f.filename == "empty.dat").unwrap().file_size, 0);

    assert!(server.app.store.pending_intents().await.unwrap().is_empty(), "committed uploads leave no intent");

    // Re-uploading the unchanged tree skips every file.
    let summary = client.upload_with(id, src.path(), None, &TransferOptions::default()).await.unwrap().unwrap();
    assert_eq!((summary.transferred, summary.skipped), (0, 4));
    write(src.path(), "top.txt", b"changed");
    let summary = client.upload_with(id, src.path(), None, &TransferOptions::default()).await.unwrap().unwrap();
    assert_eq!((summary.transferred, summary.skipped, summary.bytes), (1, 3, 7));

    // Download mirrors the tree byte for byte; a second download skips everything.
    let out = tempfile::tempdir().unwrap();
    let got = client.download(id, out.path()).await.unwrap();
    assert_eq!(got.transferred, 5);
    for relative in ["data/raw/ü n i c o d e.csv", "data/with space/x", "empty.dat", "top.txt"] {
        assert_eq!(
            std::fs::read(out.path().join(relative)).unwrap(),
            std::fs::read(src.path().join(relative)).unwrap()
        );
    }
    assert_eq!(std::fs::read(out.path().join("docs/renamed.txt")).unwrap(), b"top level");
    assert_eq!(client.download(id, out.path()).await.unwrap().skipped, 5);

    // Delete: true, then false; the spec's `path` + `name` join names the file.
    let victim = client.get_mission_files(id).await.unwrap().into_iter().find(|f| f.name.ends_with(".csv")).unwrap();
    let joined = format!("{}/{}", victim.path, victim.name);
    assert!(client.delete_file(id, &joined).await.unwrap());
    assert!(!client.delete_file(id, &joined).await.unwrap());
    assert_eq!(client.get_mission_files(id).await.unwrap().len(), 4);

    // A mission that does not exist: upload says false.
    assert!(!client.upload(Uuid::new_v4(), src.path(), None, false).await.unwrap());
}

#[tokio::test]
async fn a_sparse_gigabyte_round_trips() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let id = mission(client, "big", false).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zeros.bin");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    assert!(client.upload(id, &path, None, false).await.unwrap());
    let listing = client.get_mission_files(id).await.unwrap();
    assert_eq!(listing[0].file_size, 1 << 30);
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..1024 {
        context.update(&zeros);
    }
    let expected: String = context.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(listing[0].sha256, expected);
    // The tail, by range, without fetching the gigabyte.
    let token = token_for(&server, "alice").await;
    let response = http()
        .get(format!("{}/api/v1/missions/{id}/files/zeros.bin", server.url))
        .bearer_auth(&token)
        .header("range", "bytes=-16")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(
        response.headers()["content-range"],
        format!("bytes {}-{}/{}", (1u64 << 30) - 16, (1u64 << 30) - 1, 1u64 << 30)
    );
    assert_eq!(response.bytes().await.unwrap().as_ref(), &[0u8; 16]);
}

#[tokio::test]
async fn ranges_and_etags() {
    let server = TestServer::spawn().await;
    let id = mission(&server.client, "ranges", false).await;
    let token = token_for(&server, "alice").await;
    let url = format!("{}/api/v1/missions/{id}/files/digits.txt", server.url);
    let put = http().put(&url).bearer_auth(&token).body("0123456789").send().await.unwrap();
    assert_eq!(put.status(), 201);
    let replaced = http().put(&url).bearer_auth(&token).body("0123456789").send().await.unwrap();
    assert_eq!(replaced.status(), 200);
    let get = |range: Option<&'static str>| {
        let mut request = http().get(&url).bearer_auth(&token);
        if let Some(r) = range {
            request = request.header("range", r);
        }
        request.send()
    };
    let whole = get(None).await.unwrap();
    assert_eq!(whole.headers()["etag"], format!("\"{}\"", sha256_hex(b"0123456789")));
    assert_eq!(whole.headers()["content-length"], "10");
    assert_eq!(whole.text().await.unwrap(), "0123456789");
    for (range, body, content_range) in [
        ("bytes=2-4", "234", "bytes 2-4/10"),
        ("bytes=7-", "789", "bytes 7-9/10"),
        ("bytes=-2", "89", "bytes 8-9/10"),
        ("bytes=8-100", "89", "bytes 8-9/10"),
    ] {
        let r = get(Some(range)).await.unwrap();
        assert_eq!(r.status(), 206, "{range}");
        assert_eq!(r.headers()["content-range"], content_range);
        assert_eq!(r.text().await.unwrap(), body);
    }
    let r = get(Some("bytes=10-")).await.unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(r.headers()["content-range"], "bytes */10");
    let (status, p) = problem(http().get(format!("{url}.missing")).bearer_auth(&token).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert!(p.detail.contains("digits.txt.missing"));
}

/// Sends a raw HTTP/1.1 request (no client-side normalisation of `..`) and returns the status.
async fn raw_request(server: &TestServer, request: String) -> (u16, String) {
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text)
}

#[tokio::test]
async fn path_traversal_is_refused_over_raw_http() {
    let server = TestServer::spawn().await;
    let id = mission(&server.client, "traversal", false).await;
    let token = token_for(&server, "alice").await;
    let long = "a/".repeat(600) + "b";
    let attempts = [
        "../../../etc/passwd".to_owned(),
        "a/../../b".to_owned(),
        "%2e%2e/%2e%2e/etc/passwd".to_owned(),
        "..%2F..%2Fsecret".to_owned(),
        "..%5C..%5Cwindows".to_owned(),
        "a%00b".to_owned(),
        "/etc/passwd".to_owned(),
        "a//b".to_owned(),
        "dir/".to_owned(),
        "file%231".to_owned(),
        long,
    ];
    let put = |path: &str| {
        format!(
            "PUT /api/v1/missions/{id}/files/{path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: 4\r\nConnection: close\r\n\r\nevil"
        )
    };
    for attempt in &attempts {
        let (status, text) = raw_request(&server, put(attempt)).await;
        assert_eq!(status, 400, "{attempt}: {text}");
        assert!(text.contains("application/problem+json") && text.contains("\"field\":\"path\""), "{attempt}: {text}");
        let get = format!(
            "GET /api/v1/missions/{id}/files/{attempt} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw_request(&server, get).await.0, 400, "{attempt}");
    }
    // A path within the longest a path may be, whose object key under the mission's folder
    // (`missions/{id}/`) is longer than S3 takes: refused, naming the limit.
    let deep = format!("{}/{}", vec!["d".repeat(240); 4].join("/"), "f".repeat(30));
    assert!(deep.len() <= mission_api::paths::MAX_PATH_BYTES);
    let (status, text) = raw_request(&server, put(&deep)).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("\"field\":\"path\"") && text.contains("object keys are at most 1024"), "{text}");
    assert!(server.client.get_mission_files(id).await.unwrap().is_empty());
    // Nothing was written anywhere under the data dir but the database and the key.
    let mut stack = vec![server.app.config.data_dir.join("files")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            assert!(entry.file_type().unwrap().is_dir(), "unexpected file {:?}", entry.path());
            stack.push(entry.path());
        }
    }
}

#[tokio::test]
async fn limits_are_413_and_keep_the_old_content() {
    let server = TestServer::spawn_with(|c| {
        c.file_limits.max_file_bytes = 1000;
        c.file_limits.max_files_per_mission = 2;
        c.file_limits.max_user_bytes = 1500;
    })
    .await;
    let id = mission(&server.client, "limits", false).await;
    let token = token_for(&server, "alice").await;
    let url = |name: &str| format!("{}/api/v1/missions/{id}/files/{name}", server.url);
    assert_eq!(http().put(url("a")).bearer_auth(&token).body(vec![1u8; 900]).send().await.unwrap().status(), 201);

    // Too large, announced by Content-Length or found while streaming (chunked).
    let (status, p) =
        problem(http().put(url("a")).bearer_auth(&token).body(vec![2u8; 1001]).send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert!(p.detail.contains("max_file_size = 1000"), "{}", p.detail);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..11).map(|_| Ok(vec![3u8; 100])).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let (status, p) = problem(http().put(url("a")).bearer_auth(&token).body(body).send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert!(p.detail.contains("max_file_size"));
    // The user's total: 900 in use, 700 more would pass 1500.
    let (status, p) =
        problem(http().put(url("b")).bearer_auth(&token).body(vec![4u8; 700]).send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert!(p.detail.contains("max_user_bytes = 1500"), "{}", p.detail);
    // Replacing a file counts only the difference.
    assert_eq!(http().put(url("a")).bearer_auth(&token).body(vec![5u8; 1000]).send().await.unwrap().status(), 200);
    assert_eq!(http().put(url("b")).bearer_auth(&token).body(vec![6u8; 100]).send().await.unwrap().status(), 201);
    let (status, p) = problem(http().put(url("c")).bearer_auth(&token).body("x").send().await.unwrap()).await;
    assert_eq!(status, 413);
    assert!(p.detail.contains("max_files_per_mission = 2"));

    // What failed changed nothing.
    let a = http().get(url("a")).bearer_auth(&token).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(a.as_ref(), &[5u8; 1000]);
    assert_eq!(server.client.get_mission_files(id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn parallel_uploads_never_exceed_a_limit() {
    let server = TestServer::spawn_with(|c| {
        c.file_limits.max_files_per_mission = 10;
        c.file_limits.max_user_bytes = 1 << 20;
    })
    .await;
    let token = token_for(&server, "alice").await;
    // 40 uploads at once, of 160 KiB each: all pass the check before their bodies, and the
    // limits allow only 6 (bytes) into one mission, and 10 files into the other.
    let big = mission(&server.client, "bytes", false).await;
    let many = mission(&server.client, "files", false).await;
    let upload = |id: uuid::Uuid, name: String, size: usize| {
        let (url, token) = (format!("{}/api/v1/missions/{id}/files/{name}", server.url), token.clone());
        async move { http().put(url).bearer_auth(token).body(vec![7u8; size]).send().await.unwrap().status() }
    };
    let bytes = futures_util::future::join_all((0..40).map(|i| upload(big, format!("f{i}"), 160 << 10))).await;
    assert!(bytes.iter().all(|s| *s == 201 || *s == 413), "{bytes:?}");
    let stored: u64 = server.client.get_mission_files(big).await.unwrap().iter().map(|f| f.file_size).sum();
    assert!(stored <= 1 << 20, "{stored} bytes stored against a limit of 1 MiB");
    assert_eq!(bytes.iter().filter(|s| **s == 201).count() as u64, stored / (160 << 10));

    let files = futures_util::future::join_all((0..40).map(|i| upload(many, format!("g{i}"), 10))).await;
    assert!(files.iter().all(|s| *s == 201 || *s == 413), "{files:?}");
    let listed = server.client.get_mission_files(many).await.unwrap().len();
    assert!(listed <= 10, "{listed} files stored against a limit of 10");
    assert_eq!(files.iter().filter(|s| **s == 201).count(), listed);
}

#[tokio::test]
async fn an_interrupted_upload_leaves_nothing() {
    let server = TestServer::spawn().await;
    let id = mission(&server.client, "interrupted", false).await;
    let token = token_for(&server, "alice").await;
    let url = format!("{}/api/v1/missions/{id}/files/keep.bin", server.url);
    http().put(&url).bearer_auth(&token).body(vec![9u8; 1000]).send().await.unwrap();

    // A client that promises 20 MB, sends 12 MB (past the single-put buffer, so a multipart
    // upload is under way) and vanishes.
    for name in ["keep.bin", "new.bin"] {
        let address = server.url.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let head = format!(
            "PUT /api/v1/missions/{id}/files/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 20000000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![1u8; 1 << 20];
        for _ in 0..12 {
            stream.write_all(&chunk).await.unwrap();
        }
        drop(stream);
    }
    // The server notices the disconnect and cleans up; wait for it, bounded.
    let files_dir = server.app.config.data_dir.join("files");
    let mut clean = false;
    for _ in 0..300 {
        let intents = server.app.store.pending_intents().await.unwrap();
        if intents.is_empty() && count_files(&files_dir) == 1 {
            clean = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(clean, "an intent or a staging file was left behind");
    let listing = server.client.get_mission_files(id).await.unwrap();
    assert_eq!(listing.len(), 1);
    assert_eq!(listing[0].file_size, 1000);
    let kept = http().get(&url).bearer_auth(&token).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(kept.as_ref(), &[9u8; 1000]);
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test]
async fn restart_after_a_crash_settles_unfinished_changes() {
    let mut first = TestServer::spawn().await;
    let id = mission(&first.client, "crash", false).await;
    let token = token_for(&first, "alice").await;
    let url = |name: &str| format!("{}/api/v1/missions/{id}/files/{name}", first.url);
    http().put(url("deleting.txt")).bearer_auth(&token).body("old").send().await.unwrap();
    http().put(url("stable.txt")).bearer_auth(&token).body("stable").send().await.unwrap();
    let store = &first.app.store;
    let files = first.app.bays.default_store().default_location(id);
    let path = |p: &str| mission_api::paths::MissionPath::parse(p).unwrap();

    // The state a kill -9 can leave: an upload whose object completed but was not committed,
    // one that never wrote its object, a delete that removed the row but not the object, a
    // staging file of a write in progress, and the folder of a deleted mission.
    let intent = |kind, p: &str| Intent::new(kind, id, p);
    store.begin_intent(&intent(IntentKind::Upload, "completed.txt")).await.unwrap();
    let body = futures_util::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"complete"))]);
    files.files.write(&files.key(&path("completed.txt")), body, 100).await.unwrap();
    store.begin_intent(&intent(IntentKind::Upload, "never.txt")).await.unwrap();
    store.begin_intent(&intent(IntentKind::Delete, "deleting.txt")).await.unwrap();
    store.delete_file_row(id, "deleting.txt").await.unwrap();
    let root = first.app.config.data_dir.join("files");
    let staging = root.join(format!("missions/{id}/partial.bin#17"));
    std::fs::File::create(&staging).unwrap().write_all(b"half").unwrap();
    let ghost = Uuid::new_v4();
    std::fs::create_dir_all(root.join(format!("missions/{ghost}"))).unwrap();
    std::fs::write(root.join(format!("missions/{ghost}/left.txt")), "x").unwrap();

    // Restart on the same data dir.
    first.restart().await;
    let second = &first;
    let mut names: Vec<String> =
        second.client.get_mission_files(id).await.unwrap().into_iter().map(|f| f.relative_path()).collect();
    names.sort();
    assert_eq!(names, ["completed.txt", "stable.txt"]);
    let completed =
        second.client.get_mission_files(id).await.unwrap().into_iter().find(|f| f.name == "completed.txt").unwrap();
    assert_eq!(completed.sha256, sha256_hex(b"complete"));
    assert!(second.app.store.pending_intents().await.unwrap().is_empty());
    assert!(!staging.exists());
    assert!(!root.join(format!("missions/{id}/deleting.txt")).exists());
    assert!(
        !root.join(format!("missions/{ghost}")).exists() || count_files(&root.join(format!("missions/{ghost}"))) == 0
    );
}

#[tokio::test]
async fn concurrent_uploads_of_one_path_never_mix() {
    let server = TestServer::spawn().await;
    let id = mission(&server.client, "race", false).await;
    let token = token_for(&server, "alice").await;
    let url = format!("{}/api/v1/missions/{id}/files/race.bin", server.url);
    let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 10 << 20]).collect();
    let uploads = bodies.iter().map(|b| http().put(&url).bearer_auth(&token).body(b.clone()).send());
    for response in futures_util::future::join_all(uploads).await {
        let response = response.unwrap();
        let status = response.status();
        assert!(status.is_success(), "{status}: {}", response.text().await.unwrap());
    }
    let got = http().get(&url).bearer_auth(&token).send().await.unwrap().bytes().await.unwrap();
    assert!(bodies.iter().any(|b| b.as_slice() == got.as_ref()), "the file mixes uploads");
    let listing = server.client.get_mission_files(id).await.unwrap();
    assert_eq!(listing[0].sha256, sha256_hex(&got), "the listing describes the content served");
}

#[tokio::test]
async fn files_follow_mission_ownership() {
    let server = TestServer::spawn().await;
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    let alice = &server.client;
    let private = mission(alice, "private", false).await;
    let public = mission(alice, "public", true).await;
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "a.txt", b"alice's");
    alice.upload(private, src.path(), None, false).await.unwrap();
    alice.upload(public, src.path(), None, false).await.unwrap();

    // Private: invisible to bob in every way.
    assert!(!bob.upload(private, src.path(), None, false).await.unwrap());
    assert!(matches!(bob.get_mission_files(private).await, Err(mission_client::Error::NotFound(_))));
    assert!(!bob.delete_file(private, "a.txt").await.unwrap());
    // Public: readable, not writable.
    assert_eq!(bob.get_mission_files(public).await.unwrap().len(), 1);
    let out = tempfile::tempdir().unwrap();
    bob.download(public, out.path()).await.unwrap();
    assert_eq!(std::fs::read(out.path().join("a.txt")).unwrap(), b"alice's");
    let bobs = tempfile::tempdir().unwrap();
    write(bobs.path(), "a.txt", b"bob's overwrite");
    assert!(matches!(bob.upload(public, bobs.path(), None, false).await, Err(mission_client::Error::Forbidden(_))));
    assert!(matches!(bob.delete_file(public, "a.txt").await, Err(mission_client::Error::Forbidden(_))));
    assert_eq!(alice.get_mission_files(public).await.unwrap().len(), 1);

    // Deleting the mission removes its files from storage.
    alice.delete_mission_by_id(private).await.unwrap();
    assert!(!server.app.config.data_dir.join(format!("files/missions/{private}")).join("a.txt").exists());
}

#[tokio::test]
async fn a_file_and_a_folder_of_one_name_conflict() {
    let server = TestServer::spawn().await;
    let id = mission(&server.client, "shapes", false).await;
    let token = token_for(&server, "alice").await;
    let url = |name: &str| format!("{}/api/v1/missions/{id}/files/{name}", server.url);
    assert_eq!(http().put(url("d/f")).bearer_auth(&token).body("in a folder").send().await.unwrap().status(), 201);
    assert_eq!(http().put(url("f")).bearer_auth(&token).body("a file").send().await.unwrap().status(), 201);
    for (path, why) in [("d", "folder"), ("f/x", "file")] {
        let (status, p) = problem(http().put(url(path)).bearer_auth(&token).body("x").send().await.unwrap()).await;
        assert_eq!(status, 409, "{path}: {}", p.detail);
        assert!(p.detail.contains(why), "{path}: {}", p.detail);
    }
    assert_eq!(server.client.get_mission_files(id).await.unwrap().len(), 2);
    assert!(server.app.store.pending_intents().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_mission_downloads_as_one_zip_archive() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let id = client
        .create_mission(&CreateMission { name: "sweep 2026/ä".into(), ..Default::default() })
        .await
        .unwrap()
        .mission_id;
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "run.sh", b"echo hi\n");
    write(src.path(), "data/raw/ü n i c o d e.csv", b"a,b\n1,2\n");
    write(src.path(), "empty.dat", b"");
    write(src.path(), "big.bin", &(0..300_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    assert!(client.upload(id, src.path(), None, false).await.unwrap());

    let token = token_for(&server, "alice").await;
    let url = format!("{}/api/v1/missions/{id}/archive", server.url);
    let response = http().get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("content-type"), "application/zip");
    assert_eq!(header("content-disposition"), "attachment; filename=\"sweep_2026__.zip\"");
    let announced: usize = header("content-length").parse().unwrap();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes.len(), announced, "the announced size is the archive's");
    let mut files = mission_testkit::unzip(&bytes);
    files.sort();
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["big.bin", "data/raw/ü n i c o d e.csv", "empty.dat", "run.sh"]);
    for (name, content) in &files {
        assert_eq!(content, &std::fs::read(src.path().join(name)).unwrap(), "{name}");
    }

    // An empty mission is an empty archive; someone else's private mission is not there at all.
    let empty = mission(client, "empty", false).await;
    let response =
        http().get(format!("{}/api/v1/missions/{empty}/archive", server.url)).bearer_auth(&token).send().await.unwrap();
    assert!(mission_testkit::unzip(&response.bytes().await.unwrap()).is_empty());
    server.add_user("bob", false).await;
    let bob = token_for(&server, "bob").await;
    let (status, problem) = problem(http().get(&url).bearer_auth(&bob).send().await.unwrap()).await;
    assert_eq!(status, 404, "{problem:?}");
}

/// A folder is not left behind by the deletion of its last file: the path may then hold a file
/// (found by fuzzing: `PUT 0/x`, `DELETE 0/x`, `PUT 0` was a 500), in the default storage and in
/// a local cargo bay alike, and a deleted mission leaves no folder in the default storage.
#[tokio::test]
async fn a_deleted_files_empty_folder_goes_with_it_and_a_deleted_missions_folder_too() {
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let root = server.sign_in("root").await;
    let bay_dir = tempfile::tempdir().unwrap();
    let bay = mission_client::CreateCargoBay {
        path: Some(bay_dir.path().to_str().unwrap().to_owned()),
        ..mission_client::CreateCargoBay::new("lab", mission_client::CargoBayKind::Local)
    };
    let bay = root.create_cargo_bay(&bay).await.unwrap().storage_id;
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "x", b"content");
    let file = src.path().join("x");
    for storage in [None, Some(bay)] {
        let request = CreateMission {
            name: "folders".into(),
            source_storage_id: storage,
            source_path: storage.map(|_| "runs/7".into()),
            ..Default::default()
        };
        let id = root.create_mission(&request).await.unwrap().mission_id;
        assert!(root.upload(id, &file, Some("0/deep/x"), false).await.unwrap());
        assert!(root.delete_file(id, "0/deep/x").await.unwrap());
        assert!(root.upload(id, &file, Some("0"), false).await.unwrap(), "{storage:?}: the path holds a file now");
        let listed: Vec<String> = root.get_mission_files(id).await.unwrap().iter().map(|f| f.relative_path()).collect();
        assert_eq!(listed, ["0"]);
        if storage.is_some() {
            assert!(bay_dir.path().join("runs/7/0").is_file(), "the bay's folder holds the file");
            assert!(root.delete_file(id, "0").await.unwrap());
            assert!(bay_dir.path().join("runs/7").is_dir(), "the mission's own root in the bay stays");
        }
        let folder = server.data_dir.path().join("data/files/missions").join(id.to_string());
        assert_eq!(folder.join("0").is_file(), storage.is_none(), "the default storage holds its files here");
        root.delete_mission_by_id(id).await.unwrap();
        assert!(!folder.exists(), "{storage:?}: {} is gone", folder.display());
    }
}
