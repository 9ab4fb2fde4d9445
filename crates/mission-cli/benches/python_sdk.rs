//! Python SDK benchmark (issue 17): the `mission` Python package against the Rust SDK and the
//! CLI it is built on, with the real release `mission server` on 127.0.0.1, alternating runs in
//! the same process so the ratios mean something on a noisy machine.
//!
//! - `get_mission_by_id` round trips per second, one after another, from Python and from the
//!   Rust SDK (target: Python within 20%);
//! - an upload of 10,000 files of 4 KiB in 100 folders through Python's `upload()` and through
//!   `mission files upload` (target: within 10%);
//! - the Python process's peak RSS (VmHWM) while it uploads one 1 GiB file (target: < 100 MB).
//!
//! The Python side is `BENCH_PYTHON` (default `target/test-venv/bin/python`) with the package
//! installed: `bash scripts/build-python.sh --release | tail -1 | xargs target/test-venv/bin/pip
//! install --force-reinstall --no-deps` first (a debug wheel measures the debug build).
//! Run: `cargo bench -p mission-cli --bench python_sdk` (`BENCH_SECONDS`, default 5, sets each
//! round trip phase; `BENCH_ROUNDS`, default 3, the rounds of each).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{SignedIn, bin, vm_hwm_kib};

const PASSWORD: &str = "benchmark password";

/// The Python side: `roundtrips SECONDS MISSION` prints calls per second; `upload MISSION PATH`
/// uploads and prints the seconds it took.
const PYTHON: &str = r#"
import sys, time
import mission
url, token, what = sys.argv[1:4]
client = mission.Client(url, access_token=token)
if what == "roundtrips":
    seconds, mission_id = float(sys.argv[4]), sys.argv[5]
    client.get_mission_by_id(mission_id)
    calls, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        client.get_mission_by_id(mission_id)
        calls += 1
    print(calls / (time.monotonic() - started))
else:
    mission_id, path = sys.argv[4:6]
    started = time.monotonic()
    assert client.upload(mission_id, path, progress=False)
    print(time.monotonic() - started)
"#;

fn python() -> String {
    std::env::var("BENCH_PYTHON").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv/bin/python").display().to_string()
    })
}

/// Runs the Python side; answers its printed number and its peak RSS in KiB.
async fn run_python(url: &str, token: &str, args: &[&str]) -> (f64, u64) {
    let mut child = tokio::process::Command::new(python())
        .args(["-c", PYTHON, url, token])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("BENCH_PYTHON runs");
    let pid = child.id().unwrap();
    let mut peak = 0;
    let mut stdout = child.stdout.take().unwrap();
    let reading = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut text).await.unwrap();
        text
    });
    loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        tokio::select! {
            status = child.wait() => {
                assert!(status.unwrap().success(), "python {args:?} failed");
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let said = reading.await.unwrap();
    (said.trim().parse().unwrap_or_else(|_| panic!("python said {said:?}")), peak)
}

/// Runs `mission ARGS` signed in as `session`; answers its wall time.
async fn cli(session: &SignedIn, args: &[&str]) -> Duration {
    let started = Instant::now();
    let status = tokio::process::Command::new(bin())
        .args(args)
        .envs(session.cli_env())
        .stdout(Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(status.success(), "mission {args:?} failed");
    started.elapsed()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: f64 = std::env::var("BENCH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5.0);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let base = std::env::var_os("BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let root = dir.path();
    let session = SignedIn::start(root, "bench", PASSWORD).await;
    let (url, access, client) = (&session.url, &session.access_token, &session.client);

    // Round trips, alternating Rust and Python.
    let target = session.new_mission("round trips").await;
    let target_s = target.to_string();
    let (mut rust_rates, mut python_rates) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        client.get_mission_by_id(target).await.unwrap();
        let (mut calls, started) = (0u64, Instant::now());
        while started.elapsed().as_secs_f64() < seconds {
            client.get_mission_by_id(target).await.unwrap();
            calls += 1;
        }
        rust_rates.push(calls as f64 / started.elapsed().as_secs_f64());
        let seconds_s = seconds.to_string();
        python_rates.push(run_python(url, access, &["roundtrips", &seconds_s, &target_s]).await.0);
    }
    let (rust_rate, python_rate) = (median(rust_rates), median(python_rates));

    // 10,000 files of 4 KiB in 100 folders, each upload into a fresh mission.
    let tree = root.join("tree");
    common::write_small_file_tree(&tree);
    let tree_s = tree.to_str().unwrap();
    let (mut cli_runs, mut python_runs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let one = session.new_mission("tree, CLI").await.to_string();
        cli_runs.push(cli(&session, &["files", "upload", &one, tree_s]).await.as_secs_f64());
        let other = session.new_mission("tree, Python").await.to_string();
        python_runs.push(run_python(url, access, &["upload", &other, tree_s]).await.0);
    }
    let (cli_tree, python_tree) = (median(cli_runs), median(python_runs));

    // One 1 GiB file of incompressible bytes.
    let big = root.join("big.bin");
    common::write_incompressible(&big, 1024);
    let one = session.new_mission("big, Python").await.to_string();
    let (big_seconds, big_peak) = run_python(url, access, &["upload", &one, big.to_str().unwrap()]).await;

    println!();
    println!("| measure (loopback, {} cores, median of {rounds}) | value | target |", num_cores());
    println!("|---|---|---|");
    println!("| get_mission_by_id from the Rust SDK | {rust_rate:.0} calls/s | baseline |");
    println!(
        "| get_mission_by_id from Python | {python_rate:.0} calls/s = {:.1}% of Rust | within 20% |",
        100.0 * python_rate / rust_rate
    );
    println!("| upload of 10,000 x 4 KiB, CLI | {cli_tree:.2} s | baseline |");
    println!(
        "| upload of 10,000 x 4 KiB, Python upload() | {python_tree:.2} s = {:+.1}% against the CLI | within 10% |",
        100.0 * (python_tree - cli_tree) / cli_tree
    );
    println!(
        "| Python peak RSS uploading 1 GiB | {:.1} MB ({big_seconds:.1} s) | < 100 MB |",
        big_peak as f64 * 1024.0 / 1e6
    );
    let mut server = session.server;
    let _ = server.kill().await;
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
