//! The `/activate` page in a real browser: headless Chromium driven over WebDriver (chromedriver)
//! opens `verification_uri_complete`, signs in and presses Approve, and the SDK's poll then gets
//! tokens. Skipped, saying so, where chromedriver is not installed, unless
//! `MISSION_REQUIRE_BROWSER=1` (set by `scripts/test.sh`, which installs it) makes that a failure.

use std::process::Stdio;
use std::time::Duration;

use mission_testkit::{PASSWORD, TestServer};
use serde_json::{Value, json};

/// The W3C WebDriver key under which an element reference comes back.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

struct Browser {
    http: reqwest::Client,
    session: String,
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Option<Self> {
        let driver_path = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(driver_path) = driver_path else {
            assert!(
                std::env::var("MISSION_REQUIRE_BROWSER").as_deref() != Ok("1"),
                "chromedriver is required (MISSION_REQUIRE_BROWSER=1) but not installed"
            );
            eprintln!("skipped: chromedriver is not installed (scripts/test.sh installs it)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = tokio::process::Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Ok(r) = http.get(format!("{base}/status")).send().await
                    && r.status().is_success()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("chromedriver ready");
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    format!("--user-data-dir={}", profile.path().display())],
            }
        }}});
        let created: Value =
            http.post(format!("{base}/session")).json(&capabilities).send().await.unwrap().json().await.unwrap();
        let session = format!("{base}/session/{}", created["value"]["sessionId"].as_str().expect("session id"));
        Some(Self { http, session, _driver: driver, _profile: profile })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let request = self.http.request(method, format!("{}{path}", self.session));
        let request = if body.is_null() { request } else { request.json(&body) };
        let response: Value = request.send().await.unwrap().json().await.unwrap();
        response["value"].clone()
    }

    /// The element `css` selects, waiting up to 10 s for it: after a form is submitted the next
    /// page may still be loading when the test asks.
    async fn element(&self, css: &str) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let found =
                self.call(reqwest::Method::POST, "/element", json!({"using": "css selector", "value": css})).await;
            if let Some(id) = found[ELEMENT].as_str() {
                return id.to_owned();
            }
            assert!(tokio::time::Instant::now() < deadline, "no element {css}: {found}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn approving_in_a_real_browser_signs_the_device_in() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    let auth = server.device_auth();
    let pending = auth.start().await.unwrap();
    let authorization = pending.authorization().clone();

    use reqwest::Method;
    let url = authorization.verification_uri_complete.clone().unwrap();
    browser.call(Method::POST, "/url", json!({ "url": url })).await;
    assert_eq!(browser.call(Method::GET, "/title", Value::Null).await, "Sign in a device · Mission Compute");
    let code_input = browser.element("#user_code").await;
    let prefilled = browser.call(Method::GET, &format!("/element/{code_input}/property/value"), Value::Null).await;
    assert_eq!(prefilled, authorization.user_code.as_str());
    let username = browser.element("#username").await;
    browser.call(Method::POST, &format!("/element/{username}/value"), json!({"text": "alice"})).await;
    let password = browser.element("#password").await;
    browser.call(Method::POST, &format!("/element/{password}/value"), json!({ "text": PASSWORD })).await;
    let approve = browser.element("button[value=approve]").await;
    browser.call(Method::POST, &format!("/element/{approve}/click"), json!({})).await;

    // The click may return before the POST's answer page (a PBKDF2 check away) has replaced the
    // form, so read the page until it has, for a bounded time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let text = loop {
        let body = browser.element("body").await;
        let text = browser.call(Method::GET, &format!("/element/{body}/text"), Value::Null).await;
        if text.as_str().is_some_and(|t| t.contains("Device approved")) || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(text.as_str().unwrap().contains("Device approved"), "{text}");
    if let Ok(dir) = std::env::var("MISSION_SCREENSHOT_DIR") {
        use base64::Engine;
        let png = browser.call(Method::GET, "/screenshot", Value::Null).await;
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        std::fs::write(std::path::Path::new(&dir).join("activate-approved.png"), bytes).unwrap();
    }
    browser.call(Method::DELETE, "", Value::Null).await;

    let tokens = tokio::time::timeout(Duration::from_secs(20), auth.finish(pending)).await.unwrap().unwrap();
    let client = mission_client::Client::with_access_token(&server.url, &tokens.access_token).unwrap();
    assert_eq!(client.whoami().await.unwrap().username, "alice");
}
