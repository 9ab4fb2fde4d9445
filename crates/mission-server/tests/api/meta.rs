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
        let path = if i % 2 == 0 { format!("/api/v1/missions/{i}") } else { format!("/no/such/path/{i}") };
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
