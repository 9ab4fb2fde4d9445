//! What the benchmarks share: the real `mission server` binary on 127.0.0.1 and a sign-in
//! through the real device flow.

// Each benchmark compiles this module and uses only some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// The binary under test.
/// The `mission` binary under test: this build's, or the one `BENCH_MISSION_BIN` names (to compare
/// two builds on the same machine, run after run).
pub fn bin() -> String {
    std::env::var("BENCH_MISSION_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mission").to_owned())
}

/// Starts `mission server` on a free port over `data_dir`; returns the process and its URL.
pub async fn spawn_server(data_dir: &Path) -> (tokio::process::Child, String) {
    spawn_server_with(data_dir, &[]).await
}

/// [`spawn_server`] with `extra` flags.
pub async fn spawn_server_with(data_dir: &Path, extra: &[&str]) -> (tokio::process::Child, String) {
    let mut server = tokio::process::Command::new(bin())
        .args(["server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
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

pub use mission_testkit::device_sign_in as sign_in;

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resident memory of a process now, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:").unwrap_or(0)
}

/// Peak resident memory of a process so far, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// CPU time (user + system) a process has used so far, from /proc (clock ticks of 10 ms).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The `p`-th percentile (0..=1) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
