//! Web console benchmark (issue 18), in headless Chromium over WebDriver against the real
//! `mission server` binary on 127.0.0.1:
//!
//! - navigation to `/missions` until the page has loaded (Navigation Timing's `loadEventEnd`),
//!   for a user who owns 100,000 missions and, as the baseline in the same run, one who owns 10;
//! - navigation to a running job's page until its first log line is on screen;
//! - the bytes the missions page needs: the document, the stylesheet and the script.
//!
//! Run: `cargo bench -p mission-cli --bench console` (env `BENCH_MISSIONS`, default 100000;
//! `BENCH_ROUNDS`, default 30 navigations per figure). Needs chromedriver (scripts/test.sh installs it).

mod common;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use mission_store::Store;
use mission_testkit::Browser;
use serde_json::{Value, json};

const PASSWORD: &str = "benchmark password";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Gives `username` `count` missions, newest last.
async fn fill(store: &Store, username: &str, count: usize) {
    let user =
        mission_server::users::add_user(store, username, Some(PASSWORD), false, None).await.unwrap().user.user_id;
    let start = Utc::now() - TimeDelta::days(30);
    let mut batch = Vec::with_capacity(5000);
    for i in 0..count {
        batch.push(common::bench_mission(i, user, start + TimeDelta::milliseconds(i as i64 * 10)));
        if batch.len() == batch.capacity() {
            store.insert_missions(&batch).await.unwrap();
            batch.clear();
        }
    }
    store.insert_missions(&batch).await.unwrap();
}

/// Milliseconds from navigation start to the end of the load event of the page now shown.
async fn load_ms(browser: &Browser) -> f64 {
    let timing = browser
        .execute(
            "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;",
            json!([]),
        )
        .await;
    timing.as_f64().expect("navigation timing")
}

/// p50 and p99 of `samples` (ms).
fn summary(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// Load times of `rounds` navigations to `url`.
async fn navigations(browser: &Browser, url: &str, rounds: usize, check: &str) -> Vec<f64> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        browser.goto(url).await;
        assert!(browser.count(check).await > 0, "{url} shows {check}");
        samples.push(load_ms(browser).await);
    }
    samples
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = env_or("BENCH_MISSIONS", 100_000) as usize;
    let rounds = env_or("BENCH_ROUNDS", 30) as usize;
    let browser = Browser::start().await.expect("chromedriver is needed (scripts/install-test-deps.sh)");
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    mission_server::create_private_dir(&data_dir).unwrap();
    let database = common::Deployment::Sqlite.database(dir.path()).await;
    let store = Store::open(&database).await.unwrap();
    fill(&store, "many", total).await;
    fill(&store, "few", 10).await;
    drop(store);
    let (_server, url) = common::spawn_server(&data_dir).await;

    // The missions page: 100,000 own missions against 10.
    browser.sign_in_to_console(&url, "few", PASSWORD).await;
    navigations(&browser, &format!("{url}/missions"), 3, "#missions tbody tr").await; // warm up
    let mut few = navigations(&browser, &format!("{url}/missions"), rounds, "#missions tbody tr").await;
    browser.click("form.who button").await;
    browser.wait_for_text("h1", "Sign in").await;
    browser.sign_in_to_console(&url, "many", PASSWORD).await;
    navigations(&browser, &format!("{url}/missions"), 3, "#missions tbody tr").await;
    let mut many = navigations(&browser, &format!("{url}/missions"), rounds, "#missions tbody tr").await;
    let sizes = browser
        .execute(
            "const n = performance.getEntriesByType('navigation')[0]; \
             const r = performance.getEntriesByType('resource').map(e => e.decodedBodySize); \
             return [n.decodedBodySize].concat(r);",
            json!([]),
        )
        .await;
    let bytes: Vec<u64> = sizes.as_array().unwrap().iter().filter_map(Value::as_u64).collect();

    // A running job's page: from navigation to its first log line on screen.
    let token = common::sign_in(&url, "many", PASSWORD).await.0.access_token;
    let client = mission_client::Client::with_access_token(&url, &token).unwrap();
    let mission = client
        .create_mission(&mission_client::CreateMission {
            name: "console bench".into(),
            mission_type_id: Some(mission_server::catalogue::SHELL),
            settings: Some([("filename".to_owned(), "run.sh".to_owned())].into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "echo first line\nsleep 600\n").unwrap();
    client.upload(mission.mission_id, &script, None, false).await.unwrap();
    let station = "6d697373-696f-4e00-8000-000000000002".parse().unwrap(); // `local`, the embedded LZ's
    let job = client.run_job_on_station(mission.mission_id, station, Default::default()).await.unwrap();
    let mut first_line = Vec::with_capacity(rounds);
    let wait_for_line = "const done = arguments[arguments.length - 1]; const pre = document.getElementById('stdout'); \
        const check = () => pre.textContent.length > 0 ? done(performance.now()) : setTimeout(check, 1); check();";
    for round in 0..rounds + 3 {
        browser.goto(&format!("{url}/jobs/{}", job.job_id)).await;
        let at =
            browser.call(reqwest::Method::POST, "/execute/async", json!({"script": wait_for_line, "args": []})).await;
        if round >= 3 {
            first_line.push(at.as_f64().expect("the first line appeared"));
        }
    }
    client.stop_job(job.job_id).await.unwrap();
    browser.close().await;

    let (few_50, few_99) = summary(&mut few);
    let (many_50, many_99) = summary(&mut many);
    let (line_50, line_99) = summary(&mut first_line);
    println!("missions page, 10 missions:        p50 {few_50:6.1} ms  p99 {few_99:6.1} ms");
    println!(
        "missions page, {total} missions:   p50 {many_50:6.1} ms  p99 {many_99:6.1} ms  ({:.2}x the 10-mission page)",
        many_50 / few_50
    );
    println!("running job page to first log line: p50 {line_50:6.1} ms  p99 {line_99:6.1} ms");
    println!(
        "missions page bytes (document, then each resource, uncompressed): {bytes:?} = {} B",
        bytes.iter().sum::<u64>()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
}
