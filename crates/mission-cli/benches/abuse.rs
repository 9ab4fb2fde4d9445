//! How the real `mission server` holds up under abuse, through raw sockets on 127.0.0.1:
//! - requests per second a normal client gets (one keep-alive connection, `GET /api/v1/me`)
//!   alone, and then while 2,000 idle and 1,000 slow connections (a header trickled a byte at a
//!   time) are held open (`BENCH_IDLE`, `BENCH_SLOW` change the counts);
//! - the server's RSS and the size of `/metrics` before and after 200,000 requests with
//!   invented methods (`BENCH_INVENTED`);
//! - how many password guesses `/activate` checks per minute from one address (over
//!   `BENCH_GUESS_SECONDS`, default 20), and how many it refuses unchecked.
//!
//! `cargo bench -p mission-cli --bench abuse`; `BENCH_MISSION_BIN` names another build to compare.

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::rss_kib;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Requests per second one keep-alive client gets for `GET /api/v1/me` over `length`.
async fn normal_rate(address: &str, token: &str, length: Duration) -> f64 {
    let request = format!("GET /api/v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n");
    let mut socket = match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(address)).await {
        Ok(Ok(socket)) => socket,
        _ => return 0.0,
    };
    let started = Instant::now();
    let mut done = 0u64;
    let mut buf = vec![0u8; 8192];
    while started.elapsed() < length {
        if socket.write_all(request.as_bytes()).await.is_err() {
            break;
        }
        // One response: headers then a small JSON body; read until the body's end.
        let mut answer = Vec::new();
        let complete = loop {
            let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf)).await;
            match read {
                Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
                _ => break false,
            }
            if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&answer[..end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if answer.len() >= end + 4 + length {
                    break head.starts_with("http/1.1 200");
                }
            }
        };
        if !complete {
            break;
        }
        done += 1;
    }
    done as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let (idle_count, slow_count) = (env_or("BENCH_IDLE", 2000), env_or("BENCH_SLOW", 1000));
    let invented = env_or("BENCH_INVENTED", 200_000);
    let guess_seconds = env_or("BENCH_GUESS_SECONDS", 20) as u64;
    let home = tempfile::tempdir().unwrap();
    let data_dir = home.path().join("data");
    let (server, url) = common::spawn_server_with(&data_dir, &["--no-local-lz"]).await;
    let pid = server.id().unwrap();
    let password = std::fs::read_to_string(data_dir.join("initial-admin-password")).unwrap();
    let (tokens, _) = common::sign_in(&url, "admin", password.trim()).await;
    let address = url.trim_start_matches("http://").to_owned();
    let token = tokens.access_token;
    let window = Duration::from_secs(5);

    println!("| figure | value |");
    println!("|---|---|");
    let alone = normal_rate(&address, &token, window).await;
    println!("| normal client alone | {alone:.0} requests/s |");

    // Idle connections send nothing; slow ones trickle a header, a byte a second.
    let mut idle = Vec::new();
    for _ in 0..idle_count {
        match TcpStream::connect(&address).await {
            Ok(socket) => idle.push(socket),
            Err(e) => {
                println!("| (connecting idle socket {} failed: {e}) | |", idle.len());
                break;
            }
        }
    }
    let mut slow = Vec::new();
    for _ in 0..slow_count {
        let Ok(socket) = TcpStream::connect(&address).await else { break };
        slow.push(tokio::spawn(async move {
            let mut socket = socket;
            let _ = socket.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if socket.write_all(b"X").await.is_err() {
                    return;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = normal_rate(&address, &token, window).await;
    println!(
        "| normal client while {} idle and {} slow connections are held | {held:.0} requests/s ({:.0}% of alone) |",
        idle.len(),
        slow.len(),
        100.0 * held / alone.max(1.0)
    );
    // How many of the idle ones the server still holds after its header timeout (30 s).
    tokio::time::sleep(Duration::from_secs(35)).await;
    let mut still_open = 0;
    for socket in &idle {
        let mut byte = [0u8; 1];
        if matches!(socket.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            still_open += 1;
        }
    }
    println!("| idle connections still open 35 s later | {still_open} of {} |", idle.len());
    drop(idle);
    for task in slow {
        task.abort();
    }

    // Invented methods, over 16 keep-alive connections.
    let metrics_size =
        |url: String| async move { reqwest::get(format!("{url}/metrics")).await.unwrap().bytes().await.unwrap().len() };
    let (rss_before, metrics_before) = (rss_kib(pid), metrics_size(url.clone()).await);
    let started = Instant::now();
    let per_connection = invented / 16;
    let tasks: Vec<_> = (0..16)
        .map(|c| {
            let address = address.clone();
            tokio::spawn(async move {
                let mut socket = TcpStream::connect(&address).await.unwrap();
                let mut buf = vec![0u8; 4096];
                for i in 0..per_connection {
                    let request = format!("M{c}X{i} /api/v1/missions/{i} HTTP/1.1\r\nHost: x\r\n\r\n");
                    if socket.write_all(request.as_bytes()).await.is_err() {
                        socket = TcpStream::connect(&address).await.unwrap();
                        continue;
                    }
                    match tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => socket = TcpStream::connect(&address).await.unwrap(),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (rss_after, metrics_after) = (rss_kib(pid), metrics_size(url.clone()).await);
    println!(
        "| {} requests with invented methods ({:.1} s) | server RSS {:.1} → {:.1} MB, /metrics {} → {} bytes |",
        per_connection * 16,
        started.elapsed().as_secs_f64(),
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        metrics_before,
        metrics_after
    );

    // Password guesses at /activate, from one address, as fast as answers come.
    let auth = mission_client::auth::DeviceAuth::new(&url, "mission-api").token_file("");
    let pending = auth.start().await.unwrap();
    let code = pending.authorization().user_code.clone();
    let client = reqwest::Client::new();
    let started = Instant::now();
    let (mut checked, mut refused) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(guess_seconds) {
        let form = [("user_code", code.as_str()), ("username", "admin"), ("password", "guess"), ("action", "approve")];
        let answer = client.post(format!("{url}/activate")).form(&form).send().await.unwrap();
        match answer.status().as_u16() {
            429 => refused += 1,
            _ => checked += 1,
        }
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    println!(
        "| /activate password guesses in {guess_seconds} s from one address | {checked} checked ({:.0}/min), {refused} refused unchecked |",
        checked as f64 / minutes
    );
    drop(server);
}
