//! `Idempotency-Key` on creating requests: a retry with the key gets the first answer again and
//! creates nothing; the key with another request, a malformed key, or one on a body that is not
//! JSON is refused, naming the header.

use mission_testkit::TestServer;

use crate::{http, problem, token_for};

#[tokio::test]
async fn a_retried_create_with_its_key_creates_once() {
    let server = TestServer::spawn().await;
    server.add_user("bob", false).await;
    let (alice, bob) = (token_for(&server, "alice").await, token_for(&server, "bob").await);
    let base = format!("{}/api/v1", server.url);
    let create = |token: &str, key: &str, name: &str| {
        http()
            .post(format!("{base}/missions"))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "name": name }))
            .send()
    };
    let count = |token: &str| {
        let request = http().get(format!("{base}/missions")).bearer_auth(token).send();
        async move {
            request.await.unwrap().json::<serde_json::Value>().await.unwrap()["missions"].as_array().unwrap().len()
        }
    };

    let first = create(&alice, "3f0c6f2e-retry-1", "simulation").await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let created: serde_json::Value = first.json().await.unwrap();
    let again = create(&alice, "3f0c6f2e-retry-1", "simulation").await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["content-type"], "application/json");
    assert_eq!(again.json::<serde_json::Value>().await.unwrap(), created, "the first answer, again");
    assert_eq!(count(&alice).await, 1, "created once");

    // Another request with the key is refused; another user's key is their own.
    let (status, p) = problem(create(&alice, "3f0c6f2e-retry-1", "other").await.unwrap()).await;
    assert_eq!(
        (status, p.kind.as_str(), p.field.as_deref()),
        (422, "urn:mission:problem:idempotency-key-reused", Some("Idempotency-Key"))
    );
    assert_eq!(create(&bob, "3f0c6f2e-retry-1", "simulation").await.unwrap().status(), 201);
    assert_eq!(count(&bob).await, 1);

    // A request the server refuses is answered the same way again (nothing was created).
    let refused = create(&alice, "bad-name", "").await.unwrap();
    assert_eq!(refused.status(), 400);
    let refused_again = create(&alice, "bad-name", "").await.unwrap();
    assert_eq!(
        (refused_again.status(), &refused_again.headers()["idempotent-replayed"]),
        (reqwest::StatusCode::BAD_REQUEST, &reqwest::header::HeaderValue::from_static("true"))
    );
    assert_eq!(count(&alice).await, 1);

    // Malformed keys, keys on bodies that are not JSON, and requests without a token.
    for key in ["has space", "", &"k".repeat(256), "é"] {
        let sent = http()
            .post(format!("{base}/missions"))
            .bearer_auth(&alice)
            .header("Idempotency-Key", key.as_bytes())
            .json(&serde_json::json!({"name": "x"}))
            .send()
            .await
            .unwrap();
        let (status, p) = problem(sent).await;
        assert_eq!((status, p.field.as_deref()), (400, Some("Idempotency-Key")), "{key:?}: {}", p.detail);
    }
    let tar = http()
        .post(format!("{base}/images?name=x"))
        .bearer_auth(&alice)
        .header("Idempotency-Key", "k2")
        .header("content-type", "application/x-tar")
        .body(vec![0u8; 1024])
        .send()
        .await
        .unwrap();
    let (status, p) = problem(tar).await;
    assert_eq!(status, 400);
    assert!(p.detail.contains("not taken on a request whose body is not JSON"), "{}", p.detail);
    let anonymous = http()
        .post(format!("{base}/missions"))
        .header("Idempotency-Key", "k3")
        .json(&serde_json::json!({"name": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(count(&alice).await, 1);
}
