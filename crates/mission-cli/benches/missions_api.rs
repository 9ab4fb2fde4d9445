//! Missions API benchmark (issue 2): 100,000 missions in the store, the real `mission server`
//! binary on 127.0.0.1, a valid JWT from the real device flow, and over HTTP:
//!
//! - `list_missions` (25 items) latency p50/p99, without and with a name filter, sequential;
//! - `GET /missions/{id}` throughput with 32 concurrent connections;
//! - the server's resident memory when idle (after start, and after the load).
//!
//! Run: `cargo bench -p mission-cli --bench missions_api` (env `BENCH_SECONDS`, default 10, sets
//! the throughput phase; `BENCH_MISSIONS`, default 100000, the store size; `BENCH_DATABASE=postgres`
//! or `postgres2` runs the service on PostgreSQL with one or two replicas, requests spread over
//! both).

mod common;

use common::{Deployment, Service, percentile, rss_kib};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use mission_store::Store;
use uuid::Uuid;

const USERS: usize = 10;
const PASSWORD: &str = "benchmark password";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Fills the store: `total` missions spread over `USERS` users (the benchmark user owns one in
/// ten), one in a hundred public, names repeating every 10,000 so a name filter matches 10.
async fn fill(database: &mission_store::DatabaseUrl, total: usize) -> Vec<Uuid> {
    let store = Store::open(database).await.unwrap();
    let mut users = Vec::new();
    for i in 0..USERS {
        let account =
            mission_server::users::add_user(&store, &format!("user{i}"), Some(PASSWORD), false, None).await.unwrap();
        users.push(account.user.user_id);
    }
    let start = Utc::now() - TimeDelta::days(30);
    let mut own = Vec::new();
    let mut batch = Vec::with_capacity(5000);
    for i in 0..total {
        let at = start + TimeDelta::milliseconds(i as i64 * 10);
        let mission = common::bench_mission(i, users[i % USERS], at);
        if i % USERS == 0 {
            own.push(mission.mission_id);
        }
        batch.push(mission);
        if batch.len() == batch.capacity() {
            store.insert_missions(&batch).await.unwrap();
            batch.clear();
        }
    }
    store.insert_missions(&batch).await.unwrap();
    own
}

/// Latencies of `n` GETs of `path`, alternating over the replicas at `urls`, sorted.
async fn latencies(http: &reqwest::Client, urls: &[String], path: &str, token: &str, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let response = http.get(format!("{}{path}", urls[i % urls.len()])).bearer_auth(token).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body = response.bytes().await.unwrap();
        out.push(started.elapsed());
        assert!(body.len() > 2);
    }
    out.sort();
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = env_or("BENCH_MISSIONS", 100_000) as usize;
    let seconds = env_or("BENCH_SECONDS", 10);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    mission_server::create_private_dir(&data_dir).unwrap();
    let deployment = Deployment::from_env();
    let database = deployment.database(dir.path()).await;

    let filling = Instant::now();
    let own = fill(&database, total).await;
    println!("filled {total} missions in {:.1} s", filling.elapsed().as_secs_f64());

    let service = Service::start(deployment, dir.path(), &database, &["--no-local-lz"]).await;
    let urls = service.urls();
    let pid = service.replicas[0].0.id().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss_start = rss_kib(pid);

    let token = common::sign_in(&urls[0], "user0", PASSWORD).await.0.access_token;
    let http = reqwest::Client::builder().tcp_nodelay(true).build().unwrap();
    let list = "/api/v1/missions?items=25";
    let filtered = "/api/v1/missions?items=25&names=mission%2004242";
    latencies(&http, &urls, list, &token, 200).await; // warm up
    let cpu_before = service.cpu_time();
    let plain = latencies(&http, &urls, list, &token, 2000).await;
    let by_name = latencies(&http, &urls, filtered, &token, 2000).await;
    let cpu_per_request = (service.cpu_time() - cpu_before) / 4000;

    // Throughput: 32 connections, each its own client so each holds one connection.
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let own = Arc::new(own);
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let url = urls[worker % urls.len()].clone();
        let (count, stop, own, token) = (count.clone(), stop.clone(), own.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(1).build().unwrap();
            let mut i = worker * 7919;
            while !stop.load(Ordering::Relaxed) {
                let id = own[i % own.len()];
                i += 31;
                let response =
                    client.get(format!("{url}/api/v1/missions/{id}")).bearer_auth(&token).send().await.unwrap();
                assert_eq!(response.status(), 200);
                response.bytes().await.unwrap();
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // warm up
    let before = count.load(Ordering::Relaxed);
    let cpu_before_gets = service.cpu_time();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let done = count.load(Ordering::Relaxed) - before;
    let cpu_per_get = (service.cpu_time() - cpu_before_gets) / done.max(1) as u32;
    let rate = done as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss_after = rss_kib(pid);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!();
    println!(
        "| measure ({total} missions, {}, {} cores) | value | target |",
        deployment.label(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("|---|---|---|");
    println!("| list 25 items, p50 | {:.2} ms | |", ms(percentile(&plain, 0.5)));
    println!("| list 25 items, p99 | {:.2} ms | < 5 ms |", ms(percentile(&plain, 0.99)));
    println!("| list 25 items by name, p50 | {:.2} ms | |", ms(percentile(&by_name, 0.5)));
    println!("| list 25 items by name, p99 | {:.2} ms | < 5 ms |", ms(percentile(&by_name, 0.99)));
    println!("| GET /missions/{{id}}, 32 connections | {rate:.0} req/s | >= 5000 |");
    println!("| server CPU per list request (all replicas) | {:.3} ms | |", ms(cpu_per_request));
    println!("| server CPU per GET (all replicas) | {:.3} ms | |", ms(cpu_per_get));
    println!("| server RSS idle after start | {:.1} MB | < 40 MB |", idle_rss_start as f64 / 1024.0);
    println!("| server RSS idle after load | {:.1} MB | |", idle_rss_after as f64 / 1024.0);
    drop(service);
}
