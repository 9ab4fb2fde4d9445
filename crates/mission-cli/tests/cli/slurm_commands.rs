//! Slurm's commands spoken by `mission`, end to end: a real account of this host (made with
//! `useradd`), signed in with its own session, runs the links `mission slurm-commands install`
//! makes from its own home directory against a real server's embedded landing zone, which runs
//! its batch jobs there as that account. What they print is held to what the real Slurm prints
//! (the captures in `fixtures/slurm`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use tokio::process::Command;

use mission_testkit::HostAccount;

use super::jobs::{Agent, TWO_CPUS, local_station};
use super::{BIN, Fixture};

/// The account's shell for the commands: its uid and groups, its home, the links on its PATH.
struct Shell<'a> {
    account: &'a HostAccount,
    bin: PathBuf,
}

impl Shell<'_> {
    /// Runs `program ARGS` as the account in `dir` (its home by default), with `stdin`.
    async fn run_in(&self, dir: &Path, program: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid",
                &self.account.uid.to_string(),
                "--regid",
                &self.account.gid.to_string(),
                "--init-groups",
                "--",
            ])
            .arg(program)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("HOME", &self.account.home)
            .env("USER", &self.account.name)
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin.display()))
            .env("LANG", "C.UTF-8")
            .stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        if let Some(input) = stdin {
            use tokio::io::AsyncWriteExt;
            child.stdin.take().unwrap().write_all(input.as_bytes()).await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await.expect("finished").unwrap()
    }

    async fn run(&self, program: &str, args: &[&str]) -> Output {
        self.run_in(&self.account.home, program, args, None).await
    }

    /// Runs and expects success; its standard output.
    async fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args).await;
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The lines a capture of the real Slurm holds (without its `exit=` line), and its exit code.
fn captured(name: &str) -> (Vec<String>, i32) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/slurm").join(format!("{name}.txt"));
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let code = lines.pop().and_then(|l| l.strip_prefix("exit=").and_then(|c| c.parse().ok())).unwrap();
    (lines, code)
}

/// Waits until `sacct` says the job `number` ended; its state.
async fn ended(shell: &Shell<'_>, number: &str) -> String {
    for _ in 0..600 {
        let state = shell.ok("sacct", &["-X", "-n", "-P", "-j", number, "-o", "State"]).await;
        let state = state.trim().to_owned();
        if !matches!(state.as_str(), "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING" | "") {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {number} did not end");
}

/// Whether this test can run: it makes host accounts and runs jobs as them, as root.
fn as_root() -> bool {
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        mission_testkit::skip_unless_required("SANDBOX", "running batch jobs as a host account needs root");
        return false;
    }
    true
}

/// A server whose embedded landing zone maps `account`'s mission user to it; the account
/// signed in with a session of its own, the commands linked into its ~/bin.
async fn service_for(account: &HostAccount) -> (Fixture, tempfile::TempDir) {
    let maps = tempfile::tempdir().unwrap();
    let map = maps.path().join("users.map");
    std::fs::write(&map, format!("{} {}\n", account.name, account.name)).unwrap();
    let fx = Fixture::start_with(&["--user-map", map.to_str().unwrap()]).await;
    let password = "a long test passphrase";
    fx.add_user(&account.name, password).await;
    let bin = account.home.join("bin");
    let shell = Shell { account, bin: bin.clone() };
    sign_in(&fx, &shell, password).await;
    let installed = shell.ok(BIN, &["slurm-commands", "install", bin.to_str().unwrap()]).await;
    assert_eq!(installed.lines().count(), 8, "{installed}");
    (fx, maps)
}

#[tokio::test]
async fn sbatch_squeue_sacct_scancel_and_scontrol_as_a_mapped_account() {
    if !as_root() {
        return;
    }
    let account = HostAccount::create("msl");
    let (fx, _maps) = service_for(&account).await;
    let shell = Shell { account: &account, bin: account.home.join("bin") };

    // sbatch --wrap: the job runs in the submit directory as the account, its output in
    // slurm-%j.out there; --parsable prints the number alone.
    let number = shell.ok("sbatch", &["--parsable", "--wrap", "echo \"$SLURM_JOB_ID $(id -un) $(pwd)\""]).await;
    let number = number.trim().to_owned();
    assert!(number.parse::<u64>().is_ok(), "{number:?}");
    assert_eq!(ended(&shell, &number).await, "COMPLETED");
    let out = std::fs::read_to_string(account.home.join(format!("slurm-{number}.out"))).unwrap();
    assert_eq!(out, format!("{number} {} {}\n", account.name, account.home.display()));
    let written = std::fs::metadata(account.home.join(format!("slurm-{number}.out"))).unwrap();
    assert_eq!((written.uid(), written.gid()), (account.uid, account.gid), "the account's file");

    // A script: #SBATCH lines, the command line winning over them, the SLURM_* environment,
    // -o patterns, -D, and the script's arguments.
    let work = account.home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(account.uid), Some(account.gid)).unwrap();
    let script = "#!/bin/bash\n#SBATCH --job-name=from-script\n#SBATCH -c 2 --mem=300M\n#SBATCH --time=1:30\n\
                  #SBATCH --output=out-%x-%j.txt\n# a comment\n#SBATCH --comment=\"a b\"\n\
                  echo \"name=$SLURM_JOB_NAME cpus=$SLURM_CPUS_PER_TASK ntasks=$SLURM_NTASKS args=$*\"\n\
                  echo \"submit=$SLURM_SUBMIT_DIR nodes=$SLURM_NNODES node=$SLURMD_NODENAME\"\n\
                  echo \"account=$SLURM_JOB_ACCOUNT partition=$SLURM_JOB_PARTITION mem=$SLURM_MEM_PER_NODE\"\n\
                  echo to-stderr >&2\n";
    std::fs::write(account.home.join("job.sh"), script).unwrap();
    let submitted = shell.ok("sbatch", &["-J", "from-cli", "-D", "work", "job.sh", "one", "two"]).await;
    let number = submitted.trim().strip_prefix("Submitted batch job ").expect(&submitted).to_owned();
    assert_eq!(ended(&shell, &number).await, "COMPLETED");
    let out = std::fs::read_to_string(work.join(format!("out-from-cli-{number}.txt"))).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("name=from-cli cpus=2 ntasks=1 args=one two"));
    let host = rustix::system::uname().nodename().to_string_lossy().split('.').next().unwrap().to_owned();
    assert_eq!(lines.next(), Some(format!("submit={} nodes=1 node={host}", account.home.display()).as_str()));
    assert_eq!(lines.next(), Some(format!("account=~{} partition=local mem=300", account.name).as_str()));
    assert_eq!(lines.next(), Some("to-stderr"), "stderr goes with stdout without -e");
    let fields = "JobID,JobName,State,ExitCode,AllocCPUS,ReqMem,Timelimit,Comment,WorkDir";
    let row = shell.ok("sacct", &["-X", "-n", "-P", "-j", &number, "-o", fields]).await;
    assert_eq!(row.trim(), format!("{number}|from-cli|COMPLETED|0:0|2|300M|00:02:00|a b|{}", work.display()));
    // A job's energy in joules, as a cluster's energy plugin counts it (what its parts drew,
    // here modelled: 2 s of a busy CPU and 1,000 MB held), raw and as sacct prints it (under
    // 1,000 J without a unit), for the job and its batch step.
    let busy = "end=$((SECONDS + 2)); while [ $SECONDS -lt $end ]; do :; done";
    let burner = shell.ok("sbatch", &["--parsable", "--wait", "--mem=1000", "--wrap", busy]).await.trim().to_owned();
    let energy = shell.ok("sacct", &["-n", "-P", "-j", &burner, "-o", "JobID,ConsumedEnergyRaw,ConsumedEnergy"]).await;
    let rows: Vec<Vec<&str>> = energy.lines().map(|line| line.split('|').collect()).collect();
    assert_eq!(rows.len(), 2, "{energy}");
    let job: serde_json::Value =
        serde_json::from_str(&shell.ok(BIN, &["jobs", "get", &burner, "--json"]).await).unwrap();
    let parts = &job["usage"]["energy_parts"];
    let wh: f64 = ["cpu", "memory", "gpu"].iter().map(|p| parts[p]["wh"].as_f64().unwrap_or(0.0)).sum();
    assert_eq!(rows[0][1], format!("{}", (wh * 3600.0).round()), "{energy} {parts}");
    assert!((10..1000).contains(&rows[0][1].parse::<u64>().unwrap()), "2 s of a CPU at 12 W: {energy}");
    assert_eq!((rows[0][2], rows[1][1], rows[1][2]), (rows[0][1], rows[0][1], rows[0][1]), "{energy}");
    let noconvert = shell.ok("sacct", &["-X", "-n", "-P", "--noconvert", "-j", &number, "-o", "MaxRSS"]).await;
    assert!(noconvert.trim().parse::<u64>().is_ok_and(|bytes| bytes % (1 << 20) == 0), "bytes: {noconvert}");

    // --wait exits with the job's code; sacct says FAILED and 3:0, as Slurm does.
    let failing = shell.run("sbatch", &["--wait", "--wrap", "exit 3"]).await;
    assert_eq!(failing.status.code(), Some(3), "{}", stderr(&failing));
    let number =
        String::from_utf8_lossy(&failing.stdout).trim().strip_prefix("Submitted batch job ").unwrap().to_owned();
    let row = shell.ok("sacct", &["-X", "-n", "-P", "-j", &number, "-o", "JobID,JobIDRaw,State,ExitCode"]).await;
    assert_eq!(row.trim(), format!("{number}|{number}|FAILED|3:0"));
    // Dependencies by number: afternotok on the failed job runs, on a completed one never does;
    // afterok and afterany wait for theirs.
    let first = shell.ok("sbatch", &["--parsable", "--wrap", "sleep 0.5"]).await.trim().to_owned();
    let deps = [
        ("afternotok", number.as_str(), "COMPLETED"),
        ("afternotok", first.as_str(), "FAILED"),
        ("afterok", first.as_str(), "COMPLETED"),
        ("afterany", number.as_str(), "COMPLETED"),
        ("afterok", number.as_str(), "FAILED"),
    ];
    for (kind, on, ends) in deps {
        let spec = format!("--dependency={kind}:{on}");
        let waiter = shell.ok("sbatch", &["--parsable", &spec, "--wrap", "true"]).await.trim().to_owned();
        assert_eq!(ended(&shell, &waiter).await, ends, "{spec}");
    }
    let (sacct_layout, _) = captured("sacct");
    let default = shell.ok("sacct", &["-j", &number]).await;
    let mut lines = default.lines();
    assert_eq!(lines.next(), Some(sacct_layout[0].as_str()), "the header of the real sacct");
    assert_eq!(lines.next(), Some(sacct_layout[1].as_str()));
    assert!(lines.next().unwrap().starts_with(&format!("{number:<12} ")), "{default}");
    assert!(lines.next().unwrap().starts_with(&format!("{:<12} ", format!("{number}.batch"))), "{default}");

    // A held job waits, priority 0, until released; requeueing it while it waits is Slurm's
    // error, and so is holding a job never given.
    let held = shell.ok("sbatch", &["--parsable", "-H", "--wrap", "true"]).await.trim().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = shell.ok("squeue", &["-h", "-j", &held, "-o", "%i %T %r"]).await;
    assert_eq!(waiting.trim(), format!("{held} PENDING JobHeldUser"));
    let shown = shell.ok("scontrol", &["show", "job", &held]).await;
    assert!(shown.contains("   Priority=0 ") && shown.contains("   JobState=PENDING Reason=JobHeldUser"), "{shown}");
    let out = shell.run("scontrol", &["requeue", &held]).await;
    assert_eq!(
        (out.status.code(), stderr(&out).trim()),
        (Some(1), format!("Job is pending execution for job {held}").as_str())
    );
    for (verb, capture) in [("hold", "scontrol-hold-unknown"), ("release", "scontrol-release-unknown")] {
        let out = shell.run("scontrol", &[verb, "999999"]).await;
        let (lines, code) = captured(capture);
        assert_eq!(
            (out.status.code(), stderr(&out).lines().map(str::to_owned).collect()),
            (Some(code), lines),
            "{verb}"
        );
    }
    shell.ok("scontrol", &["release", &held]).await;
    assert_eq!(ended(&shell, &held).await, "COMPLETED");

    // A running job: squeue, scontrol show job, requeue (it runs again), then scancel; sacct
    // says CANCELLED.
    let sleeper = shell
        .ok("sbatch", &["--parsable", "-J", "sleeper", "--wrap", "echo x >> starts; sleep 60"])
        .await
        .trim()
        .to_owned();
    let squeue_running = async || {
        for _ in 0..300 {
            let running = shell.ok("squeue", &["--me", "-h", "-o", "%i %j %T %t"]).await;
            if running.contains("RUNNING") {
                return running;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the job did not start");
    };
    assert_eq!(squeue_running().await.trim(), format!("{sleeper} sleeper RUNNING R"));
    let starts = account.home.join("starts");
    let started = async |times: usize| {
        for _ in 0..300 {
            if std::fs::read_to_string(&starts).is_ok_and(|s| s.lines().count() == times) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the job did not start {times} times");
    };
    started(1).await;
    shell.ok("scontrol", &["requeue", &sleeper]).await;
    started(2).await;
    assert_eq!(squeue_running().await.trim(), format!("{sleeper} sleeper RUNNING R"));
    let (squeue_layout, _) = captured("squeue");
    let table = shell.ok("squeue", &[]).await;
    assert_eq!(table.lines().next(), Some(squeue_layout[0].as_str()), "the header of the real squeue");
    assert!(table.lines().nth(1).unwrap().trim_start().starts_with(&format!("{sleeper} ")), "{table}");
    let shown = shell.ok("scontrol", &["show", "job", &sleeper]).await;
    assert!(shown.starts_with(&format!("JobId={sleeper} JobName=sleeper\n")), "{shown}");
    assert!(shown.contains("   JobState=RUNNING Reason=None"), "{shown}");
    assert!(shown.contains(&format!("   StdOut={}/slurm-{sleeper}.out\n", account.home.display())), "{shown}");
    shell.ok("scancel", &[&sleeper]).await;
    assert_eq!(ended(&shell, &sleeper).await, "CANCELLED");
    let hosts = shell.ok("scontrol", &["show", "hostnames", "n[1-3],m5"]).await;
    assert_eq!(hosts.lines().collect::<Vec<_>>(), captured("scontrol-hostnames").0);

    // An array with a throttle: N_I ids, %A_%a files, the SLURM_ARRAY_* environment, and never
    // more than two elements running at once.
    let script = "#!/bin/bash\n#SBATCH --array=1-5%2\n\
                  echo \"$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX\"\n\
                  sleep 0.3\n";
    std::fs::write(account.home.join("array.sh"), script).unwrap();
    let waited = shell.run("sbatch", &["--wait", "array.sh"]).await;
    assert!(waited.status.success(), "{}", stderr(&waited));
    let array = String::from_utf8_lossy(&waited.stdout).trim().strip_prefix("Submitted batch job ").unwrap().to_owned();
    for index in 1..=5 {
        let out = std::fs::read_to_string(account.home.join(format!("slurm-{array}_{index}.out"))).unwrap();
        assert_eq!(out, format!("{array} {index} 5 1 5\n"));
    }
    let rows = shell.ok("sacct", &["-X", "-n", "-P", "-j", &array, "-o", "JobID,State,Start,End"]).await;
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('|').collect()).collect();
    let ids: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(ids, (1..=5).map(|i| format!("{array}_{i}")).collect::<Vec<_>>());
    for row in &rows {
        let running_with = rows.iter().filter(|other| other[2] <= row[2] && other[3] > row[2]).count();
        assert!(running_with <= 2, "at most two at once: {rows:?}");
    }

    // srun outside a job streams the output of a job of its own and exits with its code; inside
    // one, it runs -n tasks there, each knowing its rank, into --output patterns.
    let out = shell.run("srun", &["sh", "-c", "echo out; echo err >&2; exit 5"]).await;
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(stderr(&out).contains("err\n"), "{}", stderr(&out));
    let script = "#!/bin/bash\nsrun -n 2 --output=task-%j-%t.out sh -c 'echo rank $SLURM_PROCID of $SLURM_NTASKS'\n";
    std::fs::write(account.home.join("steps.sh"), script).unwrap();
    let waited = shell.run("sbatch", &["--wait", "steps.sh"]).await;
    assert!(waited.status.success(), "{}", stderr(&waited));
    let job = String::from_utf8_lossy(&waited.stdout).trim().strip_prefix("Submitted batch job ").unwrap().to_owned();
    for rank in 0..2 {
        let out = std::fs::read_to_string(account.home.join(format!("task-{job}-{rank}.out"))).unwrap();
        assert_eq!(out, format!("rank {rank} of 2\n"));
    }

    // sinfo: the station as a partition, the embedded landing zone as its node, in the real
    // sinfo's layout; sacctmgr: the accounts the user may charge.
    let (sinfo_layout, _) = captured("sinfo");
    let table = shell.ok("sinfo", &[]).await;
    assert_eq!(table.lines().next(), Some(sinfo_layout[0].as_str()));
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["local*", "up", "infinite", "1"], "{table}");
    let accounts = shell.ok("sacctmgr", &["-n", "-s", "list", "user", &account.name, "format=account%256"]).await;
    assert_eq!(accounts.trim(), format!("~{}", account.name));
    let user = shell.ok("sacctmgr", &["-n", "-P", "show", "user", &account.name, "format=User,DefaultAccount"]).await;
    assert_eq!(user.trim(), format!("{0}|~{0}", account.name));

    // Who the account is and the stations are read once a minute, not at every submission (a
    // workflow runs sbatch once a job); a station made since is read afresh when named.
    shell.ok("sbatch", &["--parsable", "--output=/dev/null", "--wrap", "true"]).await;
    let asked = requests(&fx, "/api/v1/me").await;
    shell.ok("sbatch", &["--parsable", "--output=/dev/null", "--wrap", "true"]).await;
    assert_eq!(requests(&fx, "/api/v1/me").await, asked, "the second submission asked who it is again");
    fx.login("admin", "admin", &super::admin_password(&fx.data_dir)).await;
    fx.ok("admin", &["stations", "create", "fresh", "--open"]).await;
    let out = shell.run("sbatch", &["-p", "fresh", "--wrap", "true"]).await;
    assert!(!stderr(&out).contains("invalid partition"), "{}", stderr(&out));
    assert!(requests(&fx, "/api/v1/me").await > asked, "the station was looked up afresh");

    // Bad input: Slurm's words and exit codes, and nothing queued.
    let before = shell.ok("sacct", &["-X", "-n", "-P", "-o", "JobID", "-S", "2000-01-01"]).await;
    for (args, capture) in [
        (vec!["nonexistent.sh"], "sbatch-no-script"),
        (vec!["--mem=lots", "--wrap", "true"], "sbatch-bad-mem"),
        (vec!["--time=abc", "--wrap", "true"], "sbatch-bad-time"),
        (vec!["-c", "x", "--wrap", "true"], "sbatch-bad-cpus"),
        (vec!["--gres=foo:2", "--wrap", "true"], "sbatch-bad-gres"),
        (vec!["-p", "nopart", "--wrap", "true"], "sbatch-bad-partition"),
    ] {
        let out = shell.run("sbatch", &args).await;
        let (lines, code) = captured(capture);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().collect::<Vec<_>>(), lines, "{args:?}");
    }
    let out = shell.run("sbatch", &["-A", "no-such-account", "--wrap", "true"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    );
    // Someone else's job is no job at all, by its number as by anything else.
    let theirs = admins_job(&fx).await.to_string();
    let out = shell.run("scontrol", &["show", "job", &theirs]).await;
    assert_eq!((out.status.code(), stderr(&out).trim()), (Some(1), "slurm_load_jobs error: Invalid job id specified"));
    let out = shell.run("scancel", &[&theirs]).await;
    let refused = format!("scancel: error: Kill job error on job id {theirs}: Invalid job id specified");
    assert_eq!((out.status.code(), stderr(&out).trim()), (Some(1), refused.as_str()));
    let out = shell.run("sbatch", &["--dependency", &format!("afterok:{theirs}"), "--wrap", "true"]).await;
    assert_eq!(stderr(&out).trim(), "sbatch: error: Batch job submission failed: Job dependency problem");
    let after = shell.ok("sacct", &["-X", "-n", "-P", "-o", "JobID", "-S", "2000-01-01"]).await;
    assert_eq!(before, after, "nothing was queued");

    // An option this service does not honour: one warning, and the job runs.
    let out = shell.run("sbatch", &["--mail-type=ALL", "--qos", "high", "--wrap", "true"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let warnings = stderr(&out);
    let warnings: Vec<&str> = warnings.lines().collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("sbatch: warning: --mail-type is not supported"), "{warnings:?}");
    assert!(warnings[1].starts_with("sbatch: warning: --qos is not supported"), "{warnings:?}");
}

/// How many requests the server answered on `route` (its metrics).
async fn requests(fx: &Fixture, route: &str) -> u64 {
    let metrics = reqwest::get(format!("{}/metrics", fx.url)).await.unwrap().text().await.unwrap();
    let series = format!("mission_http_request_duration_seconds_count{{method=\"GET\",route=\"{route}\"}} ");
    metrics.lines().find_map(|line| line.strip_prefix(&series)).map_or(0, |n| n.parse().unwrap())
}

/// The number of a job of the admin's (a mission's job, run with the CLI).
async fn admins_job(fx: &Fixture) -> u64 {
    let password = super::admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("admins");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "true\n").unwrap();
    let args =
        ["missions", "create", "--name", "admins", "--type", "shell", "--setting", "filename=run.sh", "--upload"];
    let created = fx.json("admin", &[&args[..], &[src.to_str().unwrap()]].concat()).await;
    let job = fx.json("admin", &["run", created["mission_id"].as_str().unwrap(), "--wait"]).await;
    job["number"].as_u64().unwrap()
}

/// `mission login` as the account, approving its code as the account's mission user.
async fn sign_in(fx: &Fixture, shell: &Shell<'_>, password: &str) {
    use tokio::io::AsyncBufReadExt;
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            &shell.account.uid.to_string(),
            "--regid",
            &shell.account.gid.to_string(),
            "--init-groups",
            "--",
        ])
        .arg(BIN)
        .args(["login", "--no-browser", "--server", &fx.url])
        .current_dir(&shell.account.home)
        .env_clear()
        .env("HOME", &shell.account.home)
        .env("PATH", "/usr/bin:/bin")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let code = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(code) = line.split("enter the code ").nth(1) {
                return code.trim().to_owned();
            }
        }
        panic!("login printed no code");
    })
    .await
    .unwrap();
    let form = [
        ("user_code", code.as_str()),
        ("username", shell.account.name.as_str()),
        ("password", password),
        ("action", "approve"),
    ];
    let page = reqwest::Client::new().post(format!("{}/activate", fx.url)).form(&form).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A workflow of 12 steps (11 jobs and `all`) over 3 rules: 5 numbers made, squared, summed to 30.
pub(super) const SQUARES_SNAKEFILE: &str = r#"N = range(5)

rule all:
    input: "summary.txt"

rule make:
    output: "data/{i}.txt"
    shell: "echo {wildcards.i} > {output}"

rule square:
    input: "data/{i}.txt"
    output: "squared/{i}.txt"
    shell: "n=$(cat {input}); echo $((n * n)) > {output}"

rule summary:
    input: expand("squared/{i}.txt", i=N)
    output: "summary.txt"
    shell: "cat {input} | awk '{{s += $1}} END {{print s}}' > {output}"
"#;

/// The workflow tools' virtualenv (scripts/install-test-deps.sh makes it), if it is there.
pub(super) fn workflow_tools() -> Option<PathBuf> {
    let venv = std::env::var_os("MISSION_TEST_WORKFLOWS")
        .map_or_else(|| PathBuf::from("/opt/mission-test/workflows"), PathBuf::from)
        .join("bin");
    if venv.join("snakemake").exists() {
        return Some(venv);
    }
    let why = format!("{} is missing (scripts/install-test-deps.sh installs it)", venv.join("snakemake").display());
    mission_testkit::skip_unless_required("WORKFLOWS", why);
    None
}

/// Workflow tools from PyPI, unchanged, as their users run them: snakemake with its Slurm
/// executor plugin runs a workflow of 11 jobs across 3 rules (each job a batch job whose
/// snakemake runs its rule through srun), and submitit runs a function and an array of them
/// (`map_array`, at most two at once) and returns their results.
#[tokio::test]
async fn snakemake_and_submitit_run_unchanged() {
    if !as_root() {
        return;
    }
    let Some(tools) = workflow_tools() else { return };
    let account = HostAccount::create("msl");
    let (_fx, _maps) = service_for(&account).await;
    let shell = Shell { account: &account, bin: account.home.join("bin") };
    let work = account.home.join("workflow");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("Snakefile"), SQUARES_SNAKEFILE).unwrap();
    let script = r#"import submitit

def add(a, b):
    return a + b

executor = submitit.AutoExecutor(folder="submitit-logs", cluster="slurm")
executor.update_parameters(timeout_min=5, slurm_array_parallelism=2)
job = executor.submit(add, 2, 3)
print("single", job.result())
jobs = executor.map_array(add, [1, 2, 3], [10, 20, 30])
print("array", [j.result() for j in jobs], len({j.job_id.split("_")[0] for j in jobs}))
"#;
    std::fs::write(work.join("functions.py"), script).unwrap();
    let chown = std::process::Command::new("chown").args(["-R", &format!("{0}:{0}", account.name)]).arg(&work).status();
    assert!(chown.unwrap().success());

    let snakemake = tools.join("snakemake").display().to_string();
    let args = [
        "--executor",
        "slurm",
        "--jobs",
        "10",
        "--latency-wait",
        "10",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--seconds-between-status-checks",
        "1",
    ];
    let out = shell.run_in(&work, &snakemake, &args, None).await;
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{log}");
    assert!(log.contains("12 of 12 steps (100%) done"), "{log}");
    assert_eq!(std::fs::read_to_string(work.join("summary.txt")).unwrap(), "30\n");
    // Each rule's job was a batch job of the service, named as the plugin names them.
    let jobs = shell.ok("sacct", &["-X", "-n", "-P", "-o", "JobName,State", "-S", "2000-01-01"]).await;
    assert_eq!(jobs.lines().filter(|l| l.ends_with("|COMPLETED")).count(), 11, "{jobs}");

    let python = tools.join("python").display().to_string();
    let out = shell.run_in(&work, &python, &["functions.py"], None).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "single 5\narray [11, 22, 33] 1\n");
}

/// `sbatch -N 2` on the embedded front door: the job holds two landing zones (the embedded one
/// and an agent beside it, mapping the account as it does), its script runs on the first, told
/// the nodes as Slurm tells them, and `srun` in it starts its tasks on both, in blocks, as the
/// account, in the script's directory; `scontrol show job` counts the nodes.
#[tokio::test]
async fn sbatch_on_two_nodes_runs_srun_tasks_on_both() {
    if !as_root() {
        return;
    }
    let account = HostAccount::create("msl");
    let (fx, maps) = service_for(&account).await;
    let shell = Shell { account: &account, bin: account.home.join("bin") };
    let password = super::admin_password(&fx.data_dir);
    let (tokens, auth) = mission_testkit::device_sign_in(&fx.url, "admin", &password).await;
    let admin = mission_client::Client::with_tokens(&fx.url, tokens, auth).unwrap();
    let map = maps.path().join("users.map");
    let home = account.home.to_str().unwrap();
    let extra = ["--node-address", "127.0.0.3", "--user-map", map.to_str().unwrap(), "--shared-path", home];
    let _second = Agent::start_at(&fx.url, &admin, local_station(), "second", TWO_CPUS, &extra, &[]).await;

    let script = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --output=two-%j.out\n\
                  echo \"nodes=$SLURM_NNODES list=$SLURM_JOB_NODELIST id=$SLURM_NODEID\"\n\
                  srun bash -c 'echo \"task $SLURM_PROCID node $SLURM_NODEID of $SLURM_STEP_NUM_NODES rank $MISSION_NODE_RANK $(id -un) $(pwd)\"' | sort\n\
                  srun -n 3 bash -c 'echo \"of three: $SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID\"' | sort\n\
                  scontrol show job \"$SLURM_JOB_ID\" | grep -o 'NumNodes=[0-9]*'\n";
    std::fs::write(account.home.join("two.sh"), script).unwrap();
    let submitted = shell.ok("sbatch", &["two.sh"]).await;
    let number = submitted.trim().strip_prefix("Submitted batch job ").expect(&submitted).to_owned();
    assert_eq!(ended(&shell, &number).await, "COMPLETED");
    let out = std::fs::read_to_string(account.home.join(format!("two-{number}.out"))).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let (list, id) = lines[0].strip_prefix("nodes=2 list=").and_then(|rest| rest.split_once(' ')).expect(&out);
    assert!(list.split(',').count() == 2 && list.contains("127.0.0.3") && id == "id=0", "{out}");
    assert_eq!(lines[1], format!("task 0 node 0 of 2 rank 0 {} {home}", account.name), "{out}");
    assert_eq!(lines[2], format!("task 1 node 1 of 2 rank 1 {} {home}", account.name), "{out}");
    assert_eq!(&lines[3..6], ["of three: 0 0 0", "of three: 1 0 1", "of three: 2 1 0"], "{out}");
    assert_eq!(lines[6], "NumNodes=2", "{out}");

    // Outside a job, `srun -N 2` runs its command on both nodes, and streams both's output.
    let both = shell.ok("srun", &["-N", "2", "sh", "-c", "echo \"srun task $SLURM_PROCID of $SLURM_NNODES\""]).await;
    let mut tasks: Vec<&str> = both.lines().collect();
    tasks.sort_unstable();
    assert_eq!(tasks, ["srun task 0 of 2", "srun task 1 of 2"], "{both}");

    // --signal and --requeue are the job's own.
    let args = ["--parsable", "--signal=B:USR1@30", "--requeue", "--wrap", "true"];
    let number = shell.ok("sbatch", &args).await.trim().to_owned();
    assert_eq!(ended(&shell, &number).await, "COMPLETED");
    assert!(shell.ok("scontrol", &["show", "job", &number]).await.contains("Requeue=1"));
    let listed: serde_json::Value = serde_json::from_str(&shell.ok(BIN, &["jobs", "list", "--json"]).await).unwrap();
    let job = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["number"] == number.parse::<u64>().unwrap())
        .expect(&number);
    assert_eq!(job["signal"]["signal"], "USR1", "{job}");
    assert_eq!((job["signal"]["seconds"].as_u64(), job["requeue"].as_bool()), (Some(30), Some(true)), "{job}");
    let wrong = shell.run("sbatch", &["--signal=R:USR1@30", "--wrap", "true"]).await;
    assert!(stderr(&wrong).contains("Invalid --signal specification"), "{}", stderr(&wrong));

    let oversized = shell.run("sbatch", &["-N", "3", "--wrap", "true"]).await;
    assert!(!oversized.status.success(), "a job larger than the station is refused");
    assert!(stderr(&oversized).contains("Batch job submission failed"), "{}", stderr(&oversized));
}
