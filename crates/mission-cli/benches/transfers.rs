//! File transfer benchmark (issue 3): the real `mission` CLI uploading to the real server on
//! 127.0.0.1 with the default local storage, against `cp` of the same data on the same disk in
//! the same run.
//!
//! - one 1 GiB file: upload rate vs `cp` rate, and the CLI's peak RSS during the upload;
//! - 10,000 files of 4 KiB in 100 folders: files per second (and `cp -r` for scale);
//! - re-upload of that unchanged tree: seconds.
//!
//! Run: `cargo bench -p mission-cli --bench transfers` (env `BENCH_DIR` picks the disk, default
//! the system temp dir; `BENCH_SKIP_BIG=1` leaves out the 1 GiB rounds).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{SignedIn, bin, cpu_time, vm_hwm_kib};
const PASSWORD: &str = "benchmark password";

/// What one CLI run took.
struct Run {
    wall: Duration,
    peak_kib: u64,
    /// The CLI's CPU time, as last sampled before it exited (up to 20 ms short).
    cpu: Duration,
}

/// Runs `mission ARGS` with the benchmark's CLI state.
async fn cli(home: &Path, args: &[&str]) -> Run {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(bin())
        .args(args)
        .env("HOME", home)
        .env("MISSION_CONFIG", home.join("config.json"))
        .env("MISSION_TOKEN_FILE", home.join("tokens"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let (mut peak, mut cpu) = (0, Duration::ZERO);
    loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        cpu = cpu_time(pid).unwrap_or(cpu).max(cpu);
        tokio::select! {
            status = child.wait() => {
                assert!(status.unwrap().success(), "mission {args:?} failed");
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    Run { wall: started.elapsed(), peak_kib: peak, cpu }
}

fn timed(program: &str, args: &[&str]) -> Duration {
    let started = Instant::now();
    assert!(std::process::Command::new(program).args(args).status().unwrap().success());
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = std::env::var_os("BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let root = dir.path();
    let session = SignedIn::start(root, "bench", PASSWORD).await;
    let (mut server, home, client) = (session.server, session.home, session.client);
    let new_mission = |name: &'static str| {
        let client = client.clone();
        async move {
            let request = mission_client::CreateMission { name: name.into(), ..Default::default() };
            client.create_mission(&request).await.unwrap().mission_id.to_string()
        }
    };

    // One 1 GiB file of incompressible bytes.
    let big = root.join("big.bin");
    common::write_incompressible(&big, 1024);
    let big_s = big.to_str().unwrap();
    // Three alternating rounds (each upload into a fresh mission, so nothing is skipped); the
    // medians are compared, as this machine is shared and noisy.
    let (mut cp_runs, mut upload_runs, mut peak_kib) = (Vec::new(), Vec::new(), 0);
    let rounds = if std::env::var_os("BENCH_SKIP_BIG").is_some() { 0 } else { 3 };
    for round in 0..rounds {
        let copy = root.join(format!("big.copy{round}"));
        cp_runs.push(timed("cp", &[big_s, copy.to_str().unwrap()]));
        std::fs::remove_file(copy).unwrap();
        let one = new_mission("big").await;
        let run = cli(&home, &["files", "upload", &one, big_s]).await;
        upload_runs.push(run.wall);
        peak_kib = peak_kib.max(run.peak_kib);
    }
    cp_runs.sort();
    upload_runs.sort();
    let median = |runs: &[Duration]| runs.get(runs.len() / 2).copied().unwrap_or(Duration::MAX);
    let (cp_big, upload_big) = (median(&cp_runs), median(&upload_runs));
    let gib = |d: Duration| 1024.0 / d.as_secs_f64();

    // 10,000 files of 4 KiB in 100 folders.
    let tree = root.join("tree");
    common::write_small_file_tree(&tree);
    let tree_s = tree.to_str().unwrap();
    let cp_tree = timed("cp", &["-r", tree_s, root.join("tree.copy").to_str().unwrap()]);
    let many = new_mission("tree").await;
    let server_pid = server.id().unwrap();
    let server_before = cpu_time(server_pid).unwrap();
    let tree_run = cli(&home, &["files", "upload", &many, tree_s]).await;
    let server_tree_cpu = cpu_time(server_pid).unwrap() - server_before;
    let upload_tree = tree_run.wall;
    let reupload_tree = cli(&home, &["files", "upload", &many, tree_s]).await.wall;
    assert_eq!(client.get_mission_files(many.parse().unwrap()).await.unwrap().len(), 10_000);

    println!();
    println!(
        "| measure (loopback, default local storage, {} cores) | value | target |",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("|---|---|---|");
    println!("| cp of 1 GiB (median of 3) | {:.2} s ({:.0} MiB/s) | baseline |", cp_big.as_secs_f64(), gib(cp_big));
    println!(
        "| upload of 1 GiB (median of 3) | {:.2} s ({:.0} MiB/s) = {:.0}% of cp | >= 70% |",
        upload_big.as_secs_f64(),
        gib(upload_big),
        100.0 * cp_big.as_secs_f64() / upload_big.as_secs_f64()
    );
    println!("| CLI peak RSS during the 1 GiB upload | {:.1} MB | < 64 MB |", peak_kib as f64 / 1024.0);
    println!(
        "| cp -r of 10,000 x 4 KiB | {:.2} s ({:.0} files/s) | for scale |",
        cp_tree.as_secs_f64(),
        10_000.0 / cp_tree.as_secs_f64()
    );
    println!(
        "| upload of 10,000 x 4 KiB | {:.2} s ({:.0} files/s) | >= 1500 files/s |",
        upload_tree.as_secs_f64(),
        10_000.0 / upload_tree.as_secs_f64()
    );
    println!(
        "| CPU during that upload: server / CLI | {:.2} s / {:.2} s ({:.0} / {:.0} us per file) | for scale |",
        server_tree_cpu.as_secs_f64(),
        tree_run.cpu.as_secs_f64(),
        server_tree_cpu.as_secs_f64() * 100.0,
        tree_run.cpu.as_secs_f64() * 100.0
    );
    println!("| re-upload of the unchanged tree | {:.2} s | < 2 s |", reupload_tree.as_secs_f64());
    let _ = server.kill().await;
}
