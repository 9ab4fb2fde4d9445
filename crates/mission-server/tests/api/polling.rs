//! The SDK's polling rules against a scripted identity-provider double: twice the interval
//! between polls, the wait doubled after a 429, and no poll after the 200.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use mission_client::auth::{DeviceAuth, Prompt};

#[derive(Default)]
struct Script {
    device_form: Option<HashMap<String, String>>,
    polls: Vec<(Instant, HashMap<String, String>)>,
    started: Option<Instant>,
}

type Shared = Arc<Mutex<Script>>;

async fn device_code(State(s): State<Shared>, Form(form): Form<HashMap<String, String>>) -> Response {
    let mut script = s.lock().unwrap();
    script.device_form = Some(form);
    script.started = Some(Instant::now());
    axum::Json(serde_json::json!({
        "device_code": "dev-123", "user_code": "ABCD-EFGH", "verification_uri": "http://127.0.0.1/activate",
        "verification_uri_complete": "http://127.0.0.1/activate?user_code=ABCD-EFGH", "expires_in": 60, "interval": 1
    }))
    .into_response()
}

/// Answers: pending, then 429, then tokens; anything after that is a test failure.
async fn token(State(s): State<Shared>, Form(form): Form<HashMap<String, String>>) -> Response {
    let mut script = s.lock().unwrap();
    script.polls.push((Instant::now(), form));
    match script.polls.len() {
        1 => {
            (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": "authorization_pending"}))).into_response()
        }
        2 => (StatusCode::TOO_MANY_REQUESTS, "slow down there").into_response(),
        3 => axum::Json(serde_json::json!({
            "access_token": "at-1", "refresh_token": "rt-1", "expires_in": 86400, "token_type": "Bearer"
        }))
        .into_response(),
        _ => (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": "invalid_grant"}))).into_response(),
    }
}

#[tokio::test]
async fn waits_twice_the_interval_doubles_on_429_and_stops_after_200() {
    let script: Shared = Arc::default();
    let app = Router::new()
        .route("/oauth/device/code", post(device_code))
        .route("/oauth/token", post(token))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let auth = DeviceAuth::new(&url, "my-api").client_id("my-client").token_file("").prompt(Prompt::Print);
    let tokens = tokio::time::timeout(Duration::from_secs(30), auth.device_flow()).await.unwrap().unwrap();
    assert_eq!((tokens.access_token.as_str(), tokens.refresh_token.as_str()), ("at-1", "rt-1"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let script = script.lock().unwrap();
    let device_form = script.device_form.clone().unwrap();
    assert_eq!(device_form["client_id"], "my-client");
    assert_eq!(device_form["audience"], "my-api");
    assert_eq!(device_form["scope"], "email profile openid offline_access");
    assert_eq!(script.polls.len(), 3, "no poll after the 200");
    for (_, form) in &script.polls {
        assert_eq!(form["grant_type"], "urn:ietf:params:oauth:grant-type:device_code");
        assert_eq!(form["device_code"], "dev-123");
        assert_eq!(form["client_id"], "my-client");
    }
    let started = script.started.unwrap();
    let gaps: Vec<Duration> = std::iter::once(started)
        .chain(script.polls.iter().map(|(t, _)| *t))
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .collect();
    let secs = |d: Duration| d.as_secs_f64();
    // interval 1 → 2 s between polls; after the 429 → 4 s.
    assert!((1.9..4.0).contains(&secs(gaps[0])), "{gaps:?}");
    assert!((1.9..4.0).contains(&secs(gaps[1])), "{gaps:?}");
    assert!((3.9..6.0).contains(&secs(gaps[2])), "{gaps:?}");
}
