//! Slurm's commands on us against the real Slurm (issue 52), in one run, as root, on the one-node
//! Slurm of `scripts/slurm-test-cluster.sh` and the release `mission server` with its embedded
//! landing zone (both offer this machine's CPUs):
//!
//! - the shim's own cost as a whole process: `sbatch --parsable --wrap true`, start-up included,
//!   p50 and p99 of `BENCH_ROUNDS` (default 30) runs, against the real `sbatch` doing the same,
//!   and against `mission --version` (a process of the same binary doing nothing);
//! - submit → start: `sbatch --wrap 'date +%s.%N > …'`, from just before the command runs to the
//!   time the job wrote, one job at a time, p50 and p99 of `BENCH_STARTS` (default 20), on us and
//!   on Slurm;
//! - a workflow of `BENCH_WORKFLOW_JOBS` (default 1,000) short jobs (one rule writing one file
//!   each) through snakemake and its Slurm executor plugin, unchanged, on us and on Slurm: first
//!   submission to the workflow's end. 0 leaves it out.
//!
//! Jobs on us run as a host account the benchmark makes (`useradd`), mapped to the signed-in
//! user, in a directory of its home; on Slurm, as root. Needs what `scripts/install-test-deps.sh`
//! installs (Slurm, and snakemake in `/opt/mission-test/workflows` or `MISSION_TEST_WORKFLOWS`).
//!
//! Run: `cargo bench -p mission-cli --bench slurm_commands`. `MISSION_TEST_SLURM_CONF` names a
//! running test cluster; otherwise the benchmark starts one in a temporary dir (and stops it).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use common::{SignedIn, SlurmCluster, bin, percentile};
use mission_testkit::HostAccount;

/// `program ARGS` as the account in `dir`, with `path` first on its PATH and the sign-in of
/// `env`.
fn as_account(account: &HostAccount, program: &str, dir: &Path, path: &Path, env: &[(&str, PathBuf)]) -> Command {
    let mut command = Command::new("setpriv");
    let (uid, gid) = (account.uid.to_string(), account.gid.to_string());
    command.args(["--reuid", &uid, "--regid", &gid, "--init-groups", "--", program]);
    command.current_dir(dir).env_clear().env("HOME", &account.home).env("USER", &account.name).env("LANG", "C.UTF-8");
    command.env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", path.display()));
    command.envs(env.iter().map(|(k, v)| (*k, v.as_os_str())));
    command
}

fn chown(path: &Path, account: &HostAccount) {
    let owner = format!("{0}:{0}", account.name);
    assert!(Command::new("chown").args(["-R", &owner]).arg(path).status().unwrap().success());
}

fn ok(out: std::io::Result<Output>, what: &str) -> String {
    let out = out.unwrap();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// p50 and p99 of `samples`, in milliseconds.
fn p50_p99(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    (percentile(&samples, 0.50).as_secs_f64() * 1e3, percentile(&samples, 0.99).as_secs_f64() * 1e3)
}

/// How long each of `rounds` runs of `command` took, as a whole process.
fn process_times(rounds: usize, what: &str, mut command: impl FnMut() -> Command) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            let at = Instant::now();
            ok(command().output(), what);
            at.elapsed()
        })
        .collect()
}

/// Submits `jobs` jobs one at a time with `sbatch` (the command `submit` makes, given the
/// stamp file's name), each writing when it started; the time from just before each command to
/// its stamp. Waits for each stamp before the next submission.
fn starts(jobs: usize, dir: &Path, mut submit: impl FnMut(&str) -> Command) -> Vec<Duration> {
    (0..jobs)
        .map(|i| {
            let stamp = dir.join(format!("start.{i}"));
            let at = SystemTime::now();
            ok(submit(&format!("date +%s.%N > {}", stamp.display())).output(), "sbatch");
            let deadline = Instant::now() + Duration::from_secs(120);
            let text = loop {
                if let Ok(text) = std::fs::read_to_string(&stamp)
                    && text.ends_with('\n')
                {
                    break text;
                }
                assert!(Instant::now() < deadline, "job {i} did not start within 2 minutes");
                std::thread::sleep(Duration::from_millis(5));
            };
            let start = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(text.trim().parse().unwrap());
            start.duration_since(at).unwrap_or_default()
        })
        .collect()
}

/// A Snakefile of `jobs` jobs of one rule, each writing one file.
fn snakefile(jobs: usize) -> String {
    format!(
        "rule all:\n    input: expand(\"out/{{i}}.txt\", i=range({jobs}))\n\n\
         rule make:\n    output: \"out/{{i}}.txt\"\n    shell: \"echo {{wildcards.i}} > {{output}}\"\n"
    )
}

/// The plugin's arguments: at most 100 jobs submitted at once, status checked every second.
const SNAKEMAKE_ARGS: &[&str] = &[
    "--executor",
    "slurm",
    "--jobs",
    "100",
    "--latency-wait",
    "30",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
    "--quiet",
    "all",
];

fn workflow_dir(root: &Path, name: &str, jobs: usize) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Snakefile"), snakefile(jobs)).unwrap();
    dir
}

/// A workflow's time, printed as soon as it ends: a long run stopped on the other side keeps it.
fn report_workflow(name: &str, jobs: usize, took: Duration) {
    let secs = took.as_secs_f64();
    println!("{name:<10} {secs:>8.1} s  {:>6.1} jobs/s", jobs as f64 / secs);
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "the benchmark runs jobs as a host account: run it as root"
    );
    let rounds = env_usize("BENCH_ROUNDS", 30);
    let start_jobs = env_usize("BENCH_STARTS", 20);
    let workflow_jobs = env_usize("BENCH_WORKFLOW_JOBS", 1000);
    let tools = std::env::var_os("MISSION_TEST_WORKFLOWS")
        .map_or_else(|| PathBuf::from("/opt/mission-test/workflows"), PathBuf::from)
        .join("bin");
    let snakemake = tools.join("snakemake");
    assert!(
        workflow_jobs == 0 || snakemake.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        snakemake.display()
    );

    let cluster = SlurmCluster::up();
    let account = HostAccount::create("mslb");
    let root = tempfile::tempdir().unwrap();
    let map = root.path().join("users.map");
    std::fs::write(&map, format!("{0} {0}\n", account.name)).unwrap();
    let service =
        SignedIn::start_with(root.path(), &account.name, "a bench passphrase", &["--user-map", map.to_str().unwrap()])
            .await;
    // The account's own sign-in, as `mission login` leaves it, and the commands on its PATH.
    let mission_home = account.home.join(".mission-bench");
    std::fs::create_dir_all(&mission_home).unwrap();
    for file in ["tokens", "config.json"] {
        std::fs::copy(service.home.join(file), mission_home.join(file)).unwrap();
    }
    let sign_in =
        [("MISSION_CONFIG", mission_home.join("config.json")), ("MISSION_TOKEN_FILE", mission_home.join("tokens"))];
    let shims = account.home.join("bin");
    ok(
        Command::new(bin()).args(["slurm-commands", "install"]).arg(&shims).arg("--link-to").arg(bin()).output(),
        "install",
    );
    let ours = account.home.join("ours");
    std::fs::create_dir_all(&ours).unwrap();
    chown(&account.home, &account);
    let theirs = root.path().join("slurm");
    std::fs::create_dir_all(&theirs).unwrap();
    let on_us = |program: &str, dir: &Path| as_account(&account, program, dir, &shims, &sign_in);
    let on_slurm = |program: &str, dir: &Path| {
        let mut command = cluster.command(program);
        command.current_dir(dir);
        command
    };

    println!("== the command as a whole process, {rounds} runs (ms), as root as Slurm's is");
    println!("{:<44} {:>8} {:>8}", "", "p50", "p99");
    // As root, beside the real one (`setpriv` alone costs a few ms): the same sign-in, then
    // handed back to the account, whose later commands refresh and rewrite its token file.
    let as_root = |args: &[&str]| {
        let mut command = Command::new(shims.join("sbatch"));
        command.current_dir(&ours).env("HOME", &account.home).env("PATH", format!("{}:/usr/bin:/bin", shims.display()));
        command.envs(sign_in.iter().map(|(k, v)| (*k, v.as_os_str()))).args(args);
        command
    };
    let cases: [(&str, Vec<Duration>); 3] = [
        (
            "sbatch --version, ours (a process, no request)",
            process_times(rounds, "our sbatch --version", || as_root(&["--version"])),
        ),
        (
            "sbatch --parsable --wrap true, ours",
            process_times(rounds, "our sbatch", || as_root(&["--parsable", "--output=/dev/null", "--wrap", "true"])),
        ),
        (
            "sbatch --parsable --wrap true, Slurm's",
            process_times(rounds, "Slurm's sbatch", || {
                let mut command = on_slurm("sbatch", &theirs);
                command.args(["--parsable", "--output=/dev/null", "--wrap", "true"]);
                command
            }),
        ),
    ];
    chown(&mission_home, &account);
    for (name, times) in cases {
        let (p50, p99) = p50_p99(times);
        println!("{name:<44} {p50:>8.1} {p99:>8.1}");
    }
    // Let the submitted jobs end before the starts are timed.
    for _ in 0..600 {
        let left = ok(on_slurm("squeue", &theirs).args(["-h", "-o", "%i"]).output(), "squeue");
        let ours_left = ok(on_us("squeue", &ours).args(["-h", "-o", "%i"]).output(), "our squeue");
        if left.trim().is_empty() && ours_left.trim().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    println!("== submit to start, {start_jobs} jobs one at a time (ms)");
    let ours_starts = starts(start_jobs, &ours, |wrap| {
        let mut command = on_us("sbatch", &ours);
        command.args(["--parsable", "--output=/dev/null", "--wrap", wrap]);
        command
    });
    let slurm_starts = starts(start_jobs, &theirs, |wrap| {
        let mut command = on_slurm("sbatch", &theirs);
        command.args(["--parsable", "--output=/dev/null", "--wrap", wrap]);
        command
    });
    for (name, times) in [("ours", ours_starts), ("Slurm's", slurm_starts)] {
        let (p50, p99) = p50_p99(times);
        println!("{name:<10} p50 {p50:>8.1}  p99 {p99:>8.1}");
    }

    if workflow_jobs > 0 {
        println!("== a snakemake workflow of {workflow_jobs} jobs through its Slurm executor plugin");
        let dir = workflow_dir(&account.home, "workflow", workflow_jobs);
        chown(&dir, &account);
        let at = Instant::now();
        ok(on_us(snakemake.to_str().unwrap(), &dir).args(SNAKEMAKE_ARGS).output(), "snakemake on us");
        let on_ours = at.elapsed();
        report_workflow("ours", workflow_jobs, on_ours);
        let dir = workflow_dir(&theirs, "workflow", workflow_jobs);
        // The plugin's job step drops every SLURM_* variable but a few before its `srun`, so
        // that `srun` finds the cluster only at the default place, as on a real cluster.
        let default_conf = Path::new("/etc/slurm/slurm.conf");
        let linked = !default_conf.exists();
        if linked {
            std::fs::create_dir_all("/etc/slurm").unwrap();
            std::os::unix::fs::symlink(&cluster.conf, default_conf).unwrap();
        }
        let at = Instant::now();
        let mut command = on_slurm(snakemake.to_str().unwrap(), &dir);
        command.env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", tools.display()));
        ok(command.args(SNAKEMAKE_ARGS).output(), "snakemake on Slurm");
        let on_slurm_time = at.elapsed();
        if linked {
            let _ = std::fs::remove_file(default_conf);
        }
        report_workflow("Slurm's", workflow_jobs, on_slurm_time);
        println!("ours / Slurm's time: {:.2}", on_ours.as_secs_f64() / on_slurm_time.as_secs_f64());
    }
    drop(service);
}
