//! Service endpoints: health, readiness, metrics, OpenAPI, errors for unknown routes.

use std::time::Duration;

use mission_testkit::TestServer;

use crate::{http, problem};

#[tokio::test]
async fn health_metrics_openapi_and_fallbacks() {
    let server = TestServer::spawn().await;
    let get = |path: &str| http().get(format!("{}{path}", server.url)).send();
    assert_eq!(get("/healthz").await.unwrap().text().await.unwrap(), "ok\n");
    assert_eq!(get("/readyz").await.unwrap().status(), 200);

    // A few requests, then the metrics show them by route template and status.
    server.client.list_missions(&Default::default()).await.unwrap();
    let _ = get("/api/v1/missions").await.unwrap();
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(r#"mission_http_requests_total{method="GET",route="/api/v1/missions",status="200"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"mission_http_requests_total{method="GET",route="/api/v1/missions",status="401"} 1"#));
    assert!(metrics.contains(
        "mission_http_request_duration_seconds_bucket{method=\"GET\",route=\"/api/v1/missions\",le=\"+Inf\"} 2"
    ));

    let openapi: serde_json::Value = get("/api/v1/openapi.json").await.unwrap().json().await.unwrap();
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/api/v1/missions",
        "/api/v1/missions/{id}",
        "/api/v1/missions/{id}/args",
        "/api/v1/mission-types/{id}/settings",
    ] {
        assert!(openapi["paths"][path].is_object(), "{path} missing from OpenAPI");
    }
    assert!(openapi["components"]["schemas"]["Mission"].is_object());

    let (status, p) = problem(get("/api/v1/nothing-here").await.unwrap()).await;
    assert_eq!(status, 404);
    assert!(p.detail.contains("/api/v1/nothing-here"));
    let (status, _) = problem(http().put(format!("{}/api/v1/missions", server.url)).send().await.unwrap()).await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn invented_methods_and_paths_do_not_grow_the_metrics() {
    let server = TestServer::spawn().await;
    let client = http();
    let metrics =
        || async { client.get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap() };
    let send = |i: usize| {
        let method = reqwest::Method::from_bytes(format!("INVENTED{i}").as_bytes()).unwrap();
        let path = if i.is_multiple_of(2) { format!("/api/v1/missions/{i}") } else { format!("/no/such/path/{i}") };
        client.request(method, format!("{}{path}", server.url)).send()
    };
    for i in 0..50 {
        send(i).await.unwrap();
    }
    metrics().await;
    let before = metrics().await;
    for i in 50..1000 {
        send(i).await.unwrap();
    }
    let after = metrics().await;
    assert!(!after.contains("INVENTED"), "{after}");
    assert!(after.contains(r#"method="other",route="unmatched""#), "{after}");
    // The same series, only higher counts (the counts of /metrics itself aside).
    assert_eq!(before.lines().count(), after.lines().count(), "{after}");
}

/// Sends `head` (request line and headers) and no body; answers the status line the server
/// sends without waiting for the body (or fails after 5 s).
async fn status_without_body(server: &TestServer, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), socket.read(&mut answer))
        .await
        .expect("an answer before the body is sent")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_announced_oversized_body_is_413_before_it_is_sent() {
    let server = TestServer::spawn_with(|c| c.file_limits.max_file_bytes = 1 << 20).await;
    let token = crate::token_for(&server, "alice").await;
    let request = mission_client::CreateMission { name: "big".into(), ..Default::default() };
    let mission = server.client.create_mission(&request).await.unwrap();
    let json = format!(
        "POST /api/v1/missions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"
    );
    assert_eq!(status_without_body(&server, &json).await, "HTTP/1.1 413 Payload Too Large");
    let upload = format!(
        "PUT /api/v1/missions/{}/files/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 2000000\r\n\r\n",
        mission.mission_id
    );
    assert_eq!(status_without_body(&server, &upload).await, "HTTP/1.1 413 Payload Too Large");
}

/// Reads from `socket` until the server closes it; answers what it sent and how long that took
/// (fails after `limit`).
async fn read_until_closed(socket: &mut tokio::net::TcpStream, limit: Duration) -> (String, Duration) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(limit, socket.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection in time")
        .unwrap();
    (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed_in_time_and_normal_requests_go_on() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::spawn_with(|c| {
        c.connection_limits.header_timeout = Duration::from_secs(1);
        c.connection_limits.body_idle_timeout = Duration::from_secs(1);
    })
    .await;
    let token = crate::token_for(&server, "alice").await;
    let address = server.url.trim_start_matches("http://").to_owned();
    let connect = || tokio::net::TcpStream::connect(address.clone());

    // Nothing sent; half a header; a keep-alive left idle after one request; half a body.
    let mut silent = connect().await.unwrap();
    let mut slow_head = connect().await.unwrap();
    slow_head.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
    let mut idle = connect().await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut slow_body = connect().await.unwrap();
    let head = format!(
        "POST /api/v1/missions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\": "
    );
    slow_body.write_all(head.as_bytes()).await.unwrap();

    // Meanwhile a normal client is served.
    for _ in 0..5 {
        assert!(server.client.whoami().await.is_ok());
    }
    let limit = Duration::from_secs(5);
    for socket in [&mut silent, &mut slow_head] {
        let (_, took) = read_until_closed(socket, limit).await;
        assert!(took < Duration::from_secs(3), "closed after {took:?}");
    }
    let (answer, took) = read_until_closed(&mut idle, limit).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < Duration::from_secs(3), "the idle keep-alive was closed after {took:?}");
    let (answer, took) = read_until_closed(&mut slow_body, limit).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("sent nothing for 1 s"), "{answer}");
    assert!(took < Duration::from_secs(3), "the stalled body was given up after {took:?}");
}

#[tokio::test]
async fn connections_past_the_bound_get_a_clear_503() {
    let server = TestServer::spawn_with(|c| c.connection_limits.max_connections = 16).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    // The test client holds a connection or two; fill the rest with idle ones.
    let mut held = Vec::new();
    let refused = loop {
        assert!(held.len() < 20, "no refusal after {} connections", held.len());
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        // A connection within the bound hears nothing until it asks; one past it is answered.
        let mut first = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(300), socket.peek(&mut first)).await {
            Ok(Ok(n)) if n > 0 => break read_until_closed(&mut socket, Duration::from_secs(5)).await.0,
            _ => held.push(socket),
        }
    };
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("\"title\":\"Too many connections\""), "{refused}");
    let body = refused.split("\r\n\r\n").nth(1).unwrap();
    let problem: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(problem["status"], 503);
    // Once connections go, the server serves again.
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.client.whoami().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "still refused after the connections went");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_second_server_on_a_data_dir_is_refused() {
    let server = TestServer::spawn().await;
    let mut config = server.app.config.clone();
    config.public_url = None;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = mission_server::Server::new(listener, config).await else {
        panic!("a second server started on a data dir in use")
    };
    let message = err.to_string();
    assert!(
        message.contains("another mission server") && message.contains(&std::process::id().to_string()),
        "{message}"
    );
    // The first one is unharmed.
    server.client.list_missions(&Default::default()).await.unwrap();
}

/// The served OpenAPI document is `openapi/v1.json` as committed: every change to the API shows
/// as a reviewed diff of that file. `MISSION_UPDATE_OPENAPI=1` rewrites it from the server.
#[tokio::test]
async fn the_served_document_is_the_one_in_the_repository() {
    let server = TestServer::spawn().await;
    let served: serde_json::Value =
        http().get(format!("{}/api/v1/openapi.json", server.url)).send().await.unwrap().json().await.unwrap();
    let served = serde_json::to_string_pretty(&served).unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi/v1.json");
    if std::env::var_os("MISSION_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &served).unwrap();
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    if kept != served {
        let line = kept
            .lines()
            .zip(served.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(kept.lines().count().min(served.lines().count()));
        let show = |text: &str| text.lines().skip(line.saturating_sub(3)).take(7).collect::<Vec<_>>().join("\n");
        panic!(
            "the served OpenAPI document differs from openapi/v1.json from line {}:\nkept:\n{}\nserved:\n{}\n\
             Review the change, then run `MISSION_UPDATE_OPENAPI=1 cargo nextest run -p mission-server \
             the_served_document` and commit the file.",
            line + 1,
            show(&kept),
            show(&served)
        );
    }
}

/// `openapi/v1.json` breaks nothing a client of the last release's document
/// (`openapi/v1.last-release.json`) relies on; and the check catches what it should, on a
/// deliberately broken copy of today's document.
#[test]
fn the_api_keeps_what_the_last_release_promised() {
    use mission_testkit::api_compat::breaking_changes;
    let read = |name: &str| -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi").join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let (released, current) = (read("v1.last-release.json"), read("v1.json"));
    let broken = breaking_changes(&released, &current);
    assert!(
        broken.is_empty(),
        "openapi/v1.json breaks clients of release {}:\n{}\nKeep the old shape, or mark the operation \
         `deprecated` in a release first (docs/src/reference/http-api.md: the API's lifecycle).",
        released["info"]["version"],
        broken.join("\n")
    );

    let mut copy = current.clone();
    let schemas = &mut copy["components"]["schemas"];
    schemas["Mission"]["properties"].as_object_mut().unwrap().remove("name");
    let statuses = schemas["JobStatus"]["enum"].as_array_mut().unwrap();
    statuses.retain(|s| s != "lost");
    copy["paths"]["/api/v1/jobs"]["get"]["parameters"].as_array_mut().unwrap().push(serde_json::json!(
        {"in": "query", "name": "owner", "required": true, "schema": {"type": "string"}}
    ));
    copy["paths"]["/api/v1/missions/{id}"].as_object_mut().unwrap().remove("delete");
    let caught = breaking_changes(&current, &copy);
    for expected in [
        "GET /api/v1/missions: 200 response (application/json): field missions[]: field name: removed",
        "GET /api/v1/jobs: query parameter owner: new and required",
        "DELETE /api/v1/missions/{id}: removed",
    ] {
        assert!(caught.iter().any(|c| c == expected), "{expected} not in {caught:#?}");
    }
    assert!(caught.iter().any(|c| c.ends_with("enum value \"lost\" removed")), "{caught:#?}");

    // Deprecated in the release before, the operation may go.
    let mut deprecated = current.clone();
    deprecated["paths"]["/api/v1/missions/{id}"]["delete"]["deprecated"] = serde_json::Value::Bool(true);
    assert!(!breaking_changes(&deprecated, &copy).iter().any(|c| c.starts_with("DELETE")));
}

/// A deprecated operation is marked in the document, with its dates, and every answer to it,
/// refusals included, says when it was deprecated (`Deprecation`, RFC 9745) and when it may go
/// (`Sunset`, RFC 8594); its successor and every other operation say nothing of the kind.
#[tokio::test]
async fn a_deprecated_operation_says_so_in_the_document_and_in_every_answer() {
    let server = TestServer::spawn().await;
    let token = crate::token_for(&server, "alice").await;
    let document: serde_json::Value =
        http().get(format!("{}/api/v1/openapi.json", server.url)).send().await.unwrap().json().await.unwrap();
    let mut deprecated = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if operation["deprecated"] == true {
                deprecated.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert_eq!(deprecated, ["PUT /api/v1/missions/{id}/args"]);
    let operation = &document["paths"]["/api/v1/missions/{id}/args"]["put"];
    let description = operation["description"].as_str().unwrap();
    assert!(description.contains("since 2026-11-27; it may be removed from 2027-05-27 on"), "{description}");
    assert!(description.contains("`PATCH /api/v1/missions/{id}` with `args`"), "{description}");

    let mission = server
        .client
        .create_mission(&mission_client::CreateMission { name: "old script".into(), ..Default::default() })
        .await
        .unwrap();
    let args_url = format!("{}/api/v1/missions/{}/args", server.url, mission.mission_id);
    let put = |body: serde_json::Value| http().put(&args_url).bearer_auth(&token).json(&body).send();
    let says_deprecated = |answer: &reqwest::Response| {
        assert_eq!(answer.headers()["deprecation"], "@1795737600");
        assert_eq!(answer.headers()["sunset"], "Thu, 27 May 2027 00:00:00 GMT");
    };
    let answer = put(serde_json::json!({"args": ["--steps", "3"]})).await.unwrap();
    assert_eq!(answer.status(), 200);
    says_deprecated(&answer);
    let stored = server.client.get_mission_by_id(mission.mission_id).await.unwrap();
    assert_eq!(stored.args, ["--steps", "3"], "the deprecated operation still works");
    let refused = put(serde_json::json!({"args": "not a list"})).await.unwrap();
    assert_eq!(refused.status(), 400);
    says_deprecated(&refused);

    // The successor changes them without the headers, and so does the SDK (which uses it).
    let patched = http()
        .patch(format!("{}/api/v1/missions/{}", server.url, mission.mission_id))
        .bearer_auth(&token)
        .json(&serde_json::json!({"args": ["--steps", "4"], "description": "both at once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    assert!(patched.headers().get("deprecation").is_none() && patched.headers().get("sunset").is_none());
    let mission: mission_client::Mission = patched.json().await.unwrap();
    assert_eq!(mission.args, ["--steps", "4"]);
    assert_eq!(mission.description, "both at once");
    let updated = server.client.update_mission_args(mission.mission_id, &["5".into()]).await.unwrap();
    assert_eq!(updated.args, ["5"]);
    let (status, p) = problem(
        http()
            .patch(format!("{}/api/v1/missions/{}", server.url, mission.mission_id))
            .bearer_auth(&token)
            .json(&serde_json::json!({"args": ["nul\u{0}inside"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, p.field.as_deref()), (400, Some("args")), "{}", p.detail);
}

/// Every answer names the server's version; one of Mission's own clients older than the server
/// serves is refused before it does anything, told what to upgrade to; others are served.
#[tokio::test]
async fn clients_learn_the_servers_version_and_too_old_ones_are_refused() {
    let server = TestServer::spawn().await;
    let version = env!("CARGO_PKG_VERSION");
    let get = |agent: &str| http().get(format!("{}/api/v1/auth-config", server.url)).header("User-Agent", agent).send();
    for served in ["curl/8.1.2", &format!("mission-cli/{version} mission-client/{version}"), "mission-python/99.0.0"] {
        let answer = get(served).await.unwrap();
        assert_eq!(answer.status(), 200, "{served}");
        assert_eq!(answer.headers()["mission-server-version"], version);
    }
    let (status, p) = problem(get("mission-cli/0.0.9 mission-client/0.0.9").await.unwrap()).await;
    assert_eq!((status, p.kind.as_str()), (400, "urn:mission:problem:client-too-old"));
    assert!(
        p.detail.contains("mission-cli 0.0.9 is older than this server")
            && p.detail.ends_with("upgrade it to 0.1.0 or later"),
        "{}",
        p.detail
    );
    // The SDK's requests name it.
    assert!(server.client.list_missions(&Default::default()).await.is_ok());
    assert_eq!(mission_client::version::server_version_seen().as_deref(), Some(version));
}
