//! Schemathesis (PyPI, in `target/test-venv`) fuzzes the real server from its own OpenAPI
//! document with a valid token, every check on, for a bounded number of examples per
//! operation: any 5xx, response that contradicts the document or undocumented status code
//! fails the test. `GET /jobs/events` is left out: a stream that ends only when the client
//! goes cannot be answered within a request timeout; `jobs_events_refuse_bad_filters` and the
//! console's tests cover it.

use std::path::PathBuf;
use std::time::Duration;

use mission_testkit::TestServer;

use crate::token_for;

#[tokio::test]
async fn schemathesis_finds_nothing() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let schemathesis = root.join("target/test-venv/bin/schemathesis");
    if !schemathesis.exists() {
        assert!(
            std::env::var("MISSION_REQUIRE_SCHEMATHESIS").as_deref() != Ok("1"),
            "schemathesis is required (MISSION_REQUIRE_SCHEMATHESIS=1) but {} is missing; run scripts/install-test-deps.sh",
            schemathesis.display()
        );
        eprintln!("skipped: {} is missing; scripts/install-test-deps.sh installs it", schemathesis.display());
        return;
    }
    // As an admin, so that no operation is closed to it (stations' management is admin's).
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    let token = token_for(&server, "root").await;
    let examples = std::env::var("MISSION_FUZZ_EXAMPLES").unwrap_or_else(|_| "25".into());
    let seed = std::env::var("MISSION_FUZZ_SEED").unwrap_or_else(|_| "1".into());
    let run = tokio::process::Command::new(&schemathesis)
        .arg("--config-file")
        .arg(root.join("crates/mission-server/tests/api/schemathesis.toml"))
        .args(["run", &format!("{}/api/v1/openapi.json", server.url), "--checks", "all"])
        .args(["--max-examples", &examples, "--seed", &seed, "--no-color", "--suppress-health-check", "all"])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--request-timeout", "10", "--exclude-path", "/api/v1/jobs/events"])
        .env("SCHEMATHESIS_HOOKS", "")
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(Duration::from_secs(600), run).await.expect("schemathesis within 10 min").unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis found problems:\n{report}");
}

#[tokio::test]
async fn jobs_events_refuse_bad_filters() {
    let server = TestServer::spawn().await;
    let token = token_for(&server, "alice").await;
    for (query, field) in [("mission_ids=nope", "mission_ids"), ("colour=blue", "colour")] {
        let response = crate::http()
            .get(format!("{}/api/v1/jobs/events?{query}", server.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        let (status, problem) = crate::problem(response).await;
        assert_eq!(status, 400);
        assert!(problem.detail.contains(field), "{problem:?}");
    }
    let unsigned = crate::http().get(format!("{}/api/v1/jobs/events", server.url)).send().await.unwrap();
    assert_eq!(unsigned.status(), 401);
}
