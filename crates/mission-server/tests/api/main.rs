//! End-to-end tests of the server over HTTP on a free port, through the SDK and raw requests.

mod audit;
mod authorization;
mod browser;
mod cargo_bays;
mod console;
mod device_flow;
mod external;
mod files;
mod fuzz;
mod idempotency;
mod meta;
mod mission_types;
mod missions;
mod polling;
mod projects;
mod queue_at_scale;
mod replicas;
mod stations;

use mission_testkit::TestServer;

/// The status and field at fault of a call that must fail with an API error.
pub fn status<T: std::fmt::Debug>(result: Result<T, mission_client::Error>) -> (u16, Option<String>) {
    let error = result.expect_err("the call should fail");
    let problem = error.problem().unwrap_or_else(|| panic!("not an API error: {error}"));
    (problem.status, problem.field.clone())
}

/// A plain HTTP client for raw requests.
pub fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// An access token for `username` on `server`, through the device flow.
pub async fn token_for(server: &TestServer, username: &str) -> String {
    let auth = server.device_auth();
    let pending = auth.start().await.unwrap();
    let (status, _) =
        server.activate(&pending.authorization().user_code, username, mission_testkit::PASSWORD, "approve").await;
    assert_eq!(status, 200);
    auth.finish(pending).await.unwrap().access_token
}

/// Reads a problem+json answer, checking its content type.
pub async fn problem(response: reqwest::Response) -> (u16, mission_api::Problem) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    assert_eq!(content_type, "application/problem+json", "status {status}");
    let body: mission_api::Problem = response.json().await.unwrap();
    assert_eq!(body.status, status);
    (status, body)
}
