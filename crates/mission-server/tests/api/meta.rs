//! Service endpoints: health, readiness, metrics, OpenAPI, errors for unknown routes.

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
