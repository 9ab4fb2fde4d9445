//! Container benchmark (issue 36), in one run on this machine:
//!
//! - image import: `mission images import` of the test image archive through the API (streamed
//!   into the service's storage, checked as it arrives) against `cp` of the same archive, in
//!   MB/s;
//! - container overhead: `BENCH_CONTAINER_JOBS` (20) trivial jobs (`true`) in the image, one
//!   after another on the embedded landing zone, against `podman run --rm IMAGE true` alone, the
//!   same number of times: the job's own run (its `running` → `uploading`, what the agent spends
//!   on the container) and its whole life on the landing zone (`staging` → `completed`) against
//!   the bare `podman run`, as the issue names it and with the host's network as jobs have it
//!   (target: within 10% + 20 ms).
//!
//! Run (as root, with Podman and the image from `scripts/install-test-deps.sh`):
//! `cargo bench -p mission-cli --bench containers`. `MISSION_TEST_IMAGE` names another archive.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mission_client::{ImportImage, JobResources, JobStatus, UpdateMission};

use common::{SignedIn, percentile, shell_mission};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Podman's flags on this host, as the agent gives them.
/// Seconds between two transitions of a job's history.
fn between(job: &mission_client::Job, from: JobStatus, to: JobStatus) -> Duration {
    let at = |status| job.history.iter().find(|t| t.status == status).map(|t| t.at).expect("in the history");
    (at(to) - at(from)).to_std().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let archive = PathBuf::from(std::env::var("MISSION_TEST_IMAGE").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/test-image/debian-bookworm.tar").to_owned()
    }));
    assert!(archive.is_file(), "no image archive at {} (scripts/install-test-deps.sh builds it)", archive.display());
    let jobs = env_or("BENCH_CONTAINER_JOBS", 20);
    let root = tempfile::tempdir().unwrap();
    let service = SignedIn::start(root.path(), "bench", "bench-password-1").await;
    let client = &service.client;
    let size = std::fs::metadata(&archive).unwrap().len() as f64 / 1e6;

    // Import against cp, each three times (a fresh name each time), best of three.
    let mut imported = Vec::new();
    let mut copied = Vec::new();
    for round in 0..3 {
        let copy = root.path().join(format!("copy-{round}.tar"));
        let started = Instant::now();
        std::fs::copy(&archive, &copy).unwrap();
        copied.push(started.elapsed());
        std::fs::remove_file(&copy).unwrap();
        let request = ImportImage { name: format!("bench-{round}"), ..Default::default() };
        let started = Instant::now();
        client.import_image(&archive, &request, None).await.unwrap();
        imported.push(started.elapsed());
    }
    let best = |times: &[Duration]| times.iter().min().copied().unwrap_or_default();
    println!("image archive: {size:.1} MB");
    println!(
        "import  {:>8.1} MB/s   cp {:>8.1} MB/s   ({:.0}% of cp)",
        size / best(&imported).as_secs_f64(),
        size / best(&copied).as_secs_f64(),
        100.0 * best(&copied).as_secs_f64() / best(&imported).as_secs_f64()
    );

    // Trivial jobs in the image, after one that loads it.
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "true\n").unwrap();
    let mission = shell_mission(client, "trivial", &src).await;
    let changes = UpdateMission { image: Some("bench-0".into()), ..Default::default() };
    client.update_mission(mission.mission_id, &changes).await.unwrap();
    let station = mission_server::DEFAULT_STATION_ID;
    let mut runs = Vec::new();
    let mut lives = Vec::new();
    for i in 0..=jobs {
        let job = client.run_job_on_station(mission.mission_id, station, JobResources::default()).await.unwrap();
        let done = client.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        if i > 0 {
            runs.push(between(&done, JobStatus::Running, JobStatus::Uploading));
            lives.push(between(&done, JobStatus::Staging, JobStatus::Completed));
        }
    }
    let hex = {
        let image = client.list_images().await.unwrap().into_iter().find(|i| i.name == "bench-0").unwrap();
        image.digest.trim_start_matches("sha256:").to_owned()
    };
    let loaded = mission_testkit::podman_names_of(&hex).into_iter().next().expect("the landing zone named the image");
    // Bare runs: as the issue names them, and with the host's network as the jobs have it
    // (Podman's default network costs a namespace and its set-up).
    let bare_run = |extra: &[&str]| {
        let mut times = Vec::new();
        for _ in 0..jobs {
            let started = Instant::now();
            let status = mission_testkit::podman_command()
                .args(["run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"])
                .args(extra)
                .args([loaded.as_str(), "true"])
                .status()
                .unwrap();
            assert!(status.success());
            times.push(started.elapsed());
        }
        times.sort();
        times
    };
    let bare = bare_run(&[]);
    let bare_host = bare_run(&["--network", "host"]);
    for times in [&mut runs, &mut lives] {
        times.sort();
    }
    let line = |name: &str, times: &[Duration]| {
        println!("{name:<44} p50 {:>7.1} ms   p90 {:>7.1} ms", ms(percentile(times, 0.5)), ms(percentile(times, 0.9)))
    };
    println!("{jobs} trivial jobs in the image, one after another:");
    line("podman run --rm IMAGE true (alone)", &bare);
    line("podman run --rm --network host IMAGE true (alone)", &bare_host);
    line("job in the image: running -> uploading", &runs);
    line("job in the image: staging -> completed", &lives);
    let ours = percentile(&lives, 0.5);
    for (name, times) in [("podman run --rm IMAGE true", &bare), ("the same with --network host", &bare_host)] {
        let base = percentile(times, 0.5);
        let allowed = base.mul_f64(1.10) + Duration::from_millis(20);
        println!(
            "overhead p50 against {name}: {:+.1} ms ({:+.1}%); within 10% + 20 ms = {:.1} ms: {}",
            ms(ours) - ms(base),
            (ours.as_secs_f64() / base.as_secs_f64() - 1.0) * 100.0,
            ms(allowed),
            if ours <= allowed { "met" } else { "NOT met" }
        );
    }
    mission_testkit::forget_podman_image(&hex);
}
