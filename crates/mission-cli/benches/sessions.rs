//! Interactive sessions benchmark (issue 38), against the real release `mission server`, a
//! session's app reached through the proxy and, in the same run, directly on its loopback port,
//! twice: on the server's embedded landing zone (reached in-process) and on a landing zone of its
//! own (`mission lz`, reached through the HTTP/2 tunnel it opens):
//!
//! - HTTP request latency, p50 and p99 over `BENCH_SESSION_REQUESTS` sequential requests on a
//!   kept-alive connection (target: through the proxy within 2× of directly);
//! - the throughput of a 100 MB download (target: through the proxy at least 50%);
//! - WebSocket round trips of 32-byte messages, p50 (target: under 2 ms added);
//! - the server's memory (RSS) with `BENCH_IDLE_SESSIONS` (100) sessions running, a WebSocket
//!   open to each through the proxy, against the same server before they started.
//!
//! The app is Python's standard library (`mission_testkit::SESSION_APP`: files of the work dir,
//! a WebSocket echo): what it costs is the same both ways, so the difference is the proxy's.
//!
//! Run: `cargo bench -p mission-cli --bench sessions`.

mod common;

use std::time::{Duration, Instant};

use mission_client::{Client, JobStatus, RunJob, SessionKind, SessionRequest, Uuid};
use mission_testkit::WebSocket;

use common::{SignedIn, percentile, rss_kib, shell_mission};

use mission_testkit::SESSION_APP as APP;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A `web` session on `station`, with one CPU and 256 MB.
fn session_request(station: Uuid) -> RunJob {
    RunJob {
        station_id: station,
        cpu_count: Some(1),
        memory_amount: Some(256),
        session: Some(SessionRequest { kind: SessionKind::Web, idle_timeout: None, share_with_managers: false }),
        ..Default::default()
    }
}

/// Starts a session of `mission`; answers its job id and its app's port once it answers.
async fn start_session(client: &Client, mission: Uuid, station: Uuid) -> (Uuid, u16) {
    let job = client.run_job(mission, &session_request(station)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = client.get_job(job.job_id).await.unwrap();
        assert!(!now.status.is_final(), "the session ended: {now:?}");
        if now.session.as_ref().is_some_and(|session| session.url.is_some()) {
            let stdout = client.job_logs(job.job_id, mission_client::LogStream::Stdout).await.unwrap();
            if let Some(port) = stdout.lines().find_map(|line| line.strip_prefix("PORT=")) {
                return (job.job_id, port.trim().parse().unwrap());
            }
        }
        assert!(Instant::now() < deadline, "the session did not answer within 2 minutes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// p50 and p99 of `n` sequential GETs of `url` on one kept-alive connection.
async fn latency(http: &reqwest::Client, url: &str, token: &str, n: usize) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let answer = http.get(url).bearer_auth(token).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        answer.bytes().await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// MB/s of the best of three downloads of `url`.
async fn throughput(http: &reqwest::Client, url: &str, token: &str) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let started = Instant::now();
        let mut answer = http.get(url).bearer_auth(token).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        let mut bytes = 0usize;
        while let Some(chunk) = answer.chunk().await.unwrap() {
            bytes += chunk.len();
        }
        assert_eq!(bytes, 100 << 20);
        best = best.max(bytes as f64 / 1e6 / started.elapsed().as_secs_f64());
    }
    best
}

/// p50 of `n` round trips of a 32-byte message on a WebSocket to `path` on `address`.
async fn round_trips(address: &str, path: &str, token: &str, n: usize) -> Duration {
    let mut socket = WebSocket::open(address, path, token).await.unwrap();
    let message = [7u8; 32];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        assert_eq!(socket.echo(&message).await, message);
        times.push(started.elapsed());
    }
    times.sort();
    percentile(&times, 0.5)
}

/// Latency, download throughput and WebSocket round trips of a session of `mission` on
/// `station`, through the proxy against directly, printed under `label`.
async fn measure(service: &SignedIn, mission: Uuid, station: Uuid, requests: usize, label: &str) {
    let (client, token) = (&service.client, &service.access_token);
    println!("== {label}");
    let (job_id, port) = start_session(client, mission, station).await;
    let proxied = format!("{}/sessions/{job_id}", service.url);
    let direct = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    // Warm both ways (the tunnel opens on the first request).
    latency(&http, &format!("{proxied}/small.txt"), token, 20).await;
    latency(&http, &format!("{direct}/small.txt"), token, 20).await;
    let (direct_p50, direct_p99) = latency(&http, &format!("{direct}/small.txt"), token, requests).await;
    let (proxied_p50, proxied_p99) = latency(&http, &format!("{proxied}/small.txt"), token, requests).await;
    println!("HTTP GET of a small file, {requests} sequential requests on a kept-alive connection:");
    println!("  direct   p50 {}  p99 {}", ms(direct_p50), ms(direct_p99));
    println!(
        "  proxied  p50 {}  p99 {}  ({:.2}x, {:.2}x)",
        ms(proxied_p50),
        ms(proxied_p99),
        proxied_p50.as_secs_f64() / direct_p50.as_secs_f64(),
        proxied_p99.as_secs_f64() / direct_p99.as_secs_f64()
    );

    let direct_mbs = throughput(&http, &format!("{direct}/big.bin"), token).await;
    let proxied_mbs = throughput(&http, &format!("{proxied}/big.bin"), token).await;
    println!("100 MB download, best of 3:");
    println!("  direct   {direct_mbs:.0} MB/s");
    println!("  proxied  {proxied_mbs:.0} MB/s  ({:.0}%)", proxied_mbs / direct_mbs * 100.0);

    let server_address = service.url.trim_start_matches("http://").to_owned();
    let direct_rtt = round_trips(&format!("127.0.0.1:{port}"), "/echo", token, requests).await;
    let proxied_rtt = round_trips(&server_address, &format!("/sessions/{job_id}/echo"), token, requests).await;
    println!("WebSocket round trip of 32 bytes, p50 of {requests}:");
    println!("  direct   {}", ms(direct_rtt));
    println!("  proxied  {}  (+{})", ms(proxied_rtt), ms(proxied_rtt.saturating_sub(direct_rtt)));
    client.stop_job(job_id).await.unwrap();
    assert_eq!(client.wait_for_job(job_id).await.unwrap().status, JobStatus::Stopped);
}

#[tokio::main]
async fn main() {
    let requests = env_or("BENCH_SESSION_REQUESTS", 1000);
    let idle_sessions = env_or("BENCH_IDLE_SESSIONS", 100);
    let root = tempfile::tempdir().unwrap();
    // Room for every idle session on the embedded landing zone: 256 MB and one CPU each.
    let cpus = (idle_sessions + 2).to_string();
    let memory = ((idle_sessions + 2) * 256).to_string();
    let service =
        SignedIn::start_with(root.path(), "bench", "bench password 1", &["--lz-cpus", &cpus, "--lz-memory", &memory])
            .await;
    let (client, token) = (&service.client, &service.access_token);
    let station = client.list_stations().await.unwrap().into_iter().find(|s| s.name == "local").unwrap().station_id;
    let src = root.path().join("app");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("app.py"), APP).unwrap();
    std::fs::write(
        src.join("run.sh"),
        "head -c 104857600 /dev/zero > big.bin\necho small > small.txt\nexec python3 app.py\n",
    )
    .unwrap();
    let mission = shell_mission(client, "session bench", &src).await.mission_id;
    // The idle sessions serve no big file.
    let idle_src = root.path().join("idle");
    std::fs::create_dir_all(&idle_src).unwrap();
    std::fs::write(idle_src.join("app.py"), APP).unwrap();
    std::fs::write(idle_src.join("run.sh"), "exec python3 app.py\n").unwrap();
    let idle_mission = shell_mission(client, "idle sessions", &idle_src).await.mission_id;
    let server_pid = service.server.id().unwrap();

    measure(&service, mission, station, requests, "the embedded landing zone, reached in-process").await;
    // A landing zone of its own on a station of its own, as a remote host's would be (an admin
    // registers them; the bench's user may run there, the station being open).
    let mut add = std::process::Command::new(common::bin())
        .args(["server", "add-user", "bench-admin", "--admin", "--password-stdin", "--data-dir"])
        .arg(root.path().join("data"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut add.stdin.take().unwrap(), b"bench admin password 1").unwrap();
    assert!(add.wait().unwrap().success());
    let (tokens, auth) = common::sign_in(&service.url, "bench-admin", "bench admin password 1").await;
    let admin = Client::with_tokens(&service.url, tokens, auth).unwrap();
    let open = mission_client::CreateStation { name: "remote".into(), open: Some(true), ..Default::default() };
    let remote = admin.create_station(&open).await.unwrap().station_id;
    let registered = admin
        .register_landing_zone(
            remote,
            &mission_client::RegisterLandingZone { name: "remote".into(), cluster_account: None },
        )
        .await
        .unwrap();
    let flags = ["--lz-cpus", "2", "--lz-memory", "1024"];
    let _agent = common::spawn_agent(&service.url, &registered.token, &root.path().join("remote-lz"), &flags);
    measure(&service, mission, remote, requests, "a landing zone of its own (mission lz), through its tunnel").await;

    let server_address = service.url.trim_start_matches("http://").to_owned();
    // Idle sessions: the server before, and with each running and a WebSocket open to it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(server_pid);
    let mut jobs = Vec::with_capacity(idle_sessions);
    for _ in 0..idle_sessions {
        jobs.push(client.run_job(idle_mission, &session_request(station)).await.unwrap().job_id);
    }
    let mut sockets = Vec::with_capacity(idle_sessions);
    for job_id in &jobs {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let job = client.get_job(*job_id).await.unwrap();
            if job.session.as_ref().is_some_and(|s| s.url.is_some()) {
                break;
            }
            assert!(Instant::now() < deadline, "session {job_id} did not answer within 5 minutes: {job:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let socket = WebSocket::open(&server_address, &format!("/sessions/{job_id}/echo"), token).await.unwrap();
        sockets.push(socket);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with_sessions = rss_kib(server_pid);
    println!("Server memory (RSS) with {idle_sessions} idle sessions, a WebSocket open through the proxy to each:");
    println!(
        "  before {} MiB, with them {} MiB: {:.1} KiB per session",
        before / 1024,
        with_sessions / 1024,
        with_sessions.saturating_sub(before) as f64 / idle_sessions as f64
    );
    drop(sockets);
    // Each ends before the server goes, or its agent leaves its work dir behind.
    for job_id in &jobs {
        client.stop_job(*job_id).await.unwrap();
    }
    for job_id in jobs {
        client.wait_for_job(job_id).await.unwrap();
    }
}
