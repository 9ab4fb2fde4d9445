//! What the benchmarks share: the real `mission server` binary on 127.0.0.1 and a sign-in
//! through the real device flow.

use std::path::Path;
use std::process::Stdio;

use mission_client::Tokens;
use mission_client::auth::{DeviceAuth, Prompt};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mission");

/// Starts `mission server` on a free port over `data_dir`; returns the process and its URL.
pub async fn spawn_server(data_dir: &Path) -> (tokio::process::Child, String) {
    let mut server = tokio::process::Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0", "--data-dir"])
        .arg(data_dir)
        .env("MISSION_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("server banner");
        if let Some(u) = line.strip_prefix("Mission Compute Service listening on ") {
            break u.to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (server, url)
}

/// Signs `username` in through the device flow, approving the code via `POST /activate`.
pub async fn sign_in(url: &str, username: &str, password: &str) -> (Tokens, DeviceAuth) {
    let auth = DeviceAuth::new(url, "mission-api").token_file("").prompt(Prompt::Print);
    let pending = auth.start().await.unwrap();
    let form = [
        ("user_code", pending.authorization().user_code.as_str()),
        ("username", username),
        ("password", password),
        ("action", "approve"),
    ];
    let page = reqwest::Client::new().post(format!("{url}/activate")).form(&form).send().await.unwrap();
    assert_eq!(page.status(), 200);
    (auth.finish(pending).await.unwrap(), auth)
}
