//! `mission jobs shell` end to end: the real server with its embedded landing zone, a running
//! job, and shells in it through the server and the agent's tunnel.

use std::time::Duration;

use mission_api::shell::ShellQuery;
use mission_client::{ShellEvent, Uuid};
use mission_testkit::WebSocket;
use mission_tunnel::websocket::Opcode;

use super::Fixture;

/// Starts a job that marks its work dir and sleeps; answers its id once it runs.
async fn running_job(fx: &Fixture) -> String {
    let src = fx.home.path().join("sleeper");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "echo started > marker.txt\nexec sleep 300\n").unwrap();
    let create =
        ["missions", "create", "--name", "sleeper", "--type", "shell", "--setting", "filename=run.sh", "--upload"];
    let mut args: Vec<&str> = create.to_vec();
    args.push(src.to_str().unwrap());
    let mission_id = fx.json("admin", &args).await["mission_id"].as_str().unwrap().to_owned();
    let job = fx.json("admin", &["run", &mission_id]).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let job = fx.json("admin", &["jobs", "get", &job_id]).await;
            if job["status"] == "running" {
                return;
            }
            assert!(!["failed", "completed", "stopped"].contains(&job["status"].as_str().unwrap()), "{job}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the job runs within a minute");
    job_id
}

/// Runs `command` in `job_id` through the SDK, on a terminal with `tty` (where all its output
/// is stdout); answers its exit code and stdout.
pub(super) async fn run_in(
    client: &mission_client::Client,
    job_id: Uuid,
    command: &str,
    tty: bool,
) -> (Option<i32>, String) {
    let run = if tty {
        let query = ShellQuery { command: Some(command.into()), tty: Some(true), ..ShellQuery::default() };
        let (_input, mut output) = client.open_shell(job_id, &query).await.unwrap();
        let mut run = mission_client::ShellRun::default();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), output.next()).await.unwrap().unwrap() {
                Some(ShellEvent::Stdout(bytes)) => run.stdout.extend(bytes),
                Some(ShellEvent::Stderr(bytes)) => run.stderr.extend(bytes),
                Some(ShellEvent::Exit(exit)) => break mission_client::ShellRun { exit_code: exit.exit_code, ..run },
                None => panic!("the shell closed before it exited"),
            }
        }
    } else {
        tokio::time::timeout(Duration::from_secs(60), client.run_in_job(job_id, command, b"")).await.unwrap().unwrap()
    };
    (run.exit_code, String::from_utf8_lossy(&run.stdout).into_owned())
}

/// Whether a process of this host runs with exactly `cmdline` (its words joined by spaces).
fn runs(cmdline: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|raw| String::from_utf8_lossy(&raw).trim_end_matches('\0').replace('\0', " ") == cmdline)
    })
}

/// Waits until a process runs `cmdline`.
async fn started(cmdline: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !runs(cmdline) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{cmdline:?} never ran"));
}

/// Waits until no process runs `cmdline`.
async fn gone(cmdline: &str) {
    tokio::time::timeout(Duration::from_secs(15), async {
        while runs(cmdline) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{cmdline:?} still runs"));
}

/// The next message of a shell's WebSocket: its channel and bytes.
async fn next(socket: &mut WebSocket) -> Option<(u8, Vec<u8>)> {
    let message = socket.receive().await?;
    match message.opcode {
        Opcode::Close => None,
        _ => Some((message.payload[0], message.payload[1..].to_vec())),
    }
}

/// Reads a terminal's output until it holds `wanted`; answers all of it.
async fn read_until(socket: &mut WebSocket, wanted: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(wanted) {
        let (channel, bytes) = next(socket).await.unwrap_or_else(|| panic!("closed before {wanted:?}: {seen}"));
        assert_eq!(channel, 1, "a terminal's output comes on stdout: {}", String::from_utf8_lossy(&bytes));
        seen.push_str(&String::from_utf8_lossy(&bytes));
    }
    seen
}

#[tokio::test]
async fn a_shell_runs_in_the_jobs_sandbox_for_its_owner_alone_and_is_audited() {
    let fx = Fixture::start().await;
    let password = super::admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let job_id = running_job(&fx).await;
    let job = fx.json("admin", &["jobs", "get", &job_id]).await;
    let limits = job["limits"].as_str().unwrap_or_default().to_owned();

    // A command: its output, its error output and its exit code come back; it runs in the
    // job's work dir and environment, as the job's user, in the job's PID namespace.
    let script = "pwd; test \"$PWD\" = \"$HOME\" && echo home; cat marker.txt; echo \"job=$JOB_ID\"; id -u; \
                  tr '\\0' ' ' < /proc/1/cmdline; echo; echo oops >&2; exit 3";
    let out = fx.run("admin", &["jobs", "shell", &job_id, "--", script]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert_eq!(stderr.trim(), "oops");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[1..4], ["home", "started", &format!("job={job_id}")], "{stdout}");
    if rustix::process::geteuid().is_root() {
        let uid = lines[4];
        assert!(limits.contains(&format!("uid {uid}")), "the job's own uid {uid}: {limits}");
        assert!(lines[5].starts_with("mission-lz-spawner"), "pid 1 is the job's init: {stdout}");
    }

    // Input: a command reads stdin to its end.
    let out = fx.run_with_stdin("admin", &["jobs", "shell", &job_id, "--", "tr", "a-z", "A-Z"], "hello\n").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO\n");

    // Each opening is audited, with its command, and tells its owner.
    let audit = fx.ok("admin", &["audit", "--target", &job_id, "--json"]).await;
    let shells = audit.matches("\"job.shell\"").count();
    assert!(shells >= 2, "{audit}");
    assert!(audit.contains("tr a-z A-Z"), "{audit}");

    // Someone else is told there is no such job.
    fx.add_user("bob", "bob-password-1").await;
    fx.login("bob", "bob", "bob-password-1").await;
    let out = fx.run("bob", &["jobs", "shell", &job_id, "--", "true"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"), "{}", String::from_utf8_lossy(&out.stderr));

    // A terminal, as a browser's terminal speaks it: typed lines, a resize, and the exit.
    let token = mission_testkit::device_sign_in(&fx.url, "admin", password.trim()).await.0.access_token;
    let address = fx.url.trim_start_matches("http://").to_owned();
    let path = format!("/api/v1/jobs/{job_id}/shell?cols=80&rows=24");
    let mut terminal = WebSocket::open(&address, &path, &token).await.unwrap();
    terminal.send(Opcode::Binary, b"\x00echo $((6*7))\r").await;
    read_until(&mut terminal, "42").await;
    terminal.send(Opcode::Binary, b"\x04{\"cols\":100,\"rows\":30}").await;
    terminal.send(Opcode::Binary, b"\x00stty size; tty\r").await;
    let seen = read_until(&mut terminal, "/dev/pts/").await;
    assert!(seen.contains("30 100"), "the new size: {seen}");
    terminal.send(Opcode::Binary, b"\x00exit 7\r").await;
    let exit = loop {
        match next(&mut terminal).await.expect("the exit before the close") {
            (3, exit) => break String::from_utf8(exit).unwrap(),
            (1, _) => continue,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(exit, r#"{"exit_code":7}"#);
    assert!(next(&mut terminal).await.is_none(), "closed after the exit");

    // Bad requests are refused with the reason.
    let refused = WebSocket::open(&address, &format!("/api/v1/jobs/{job_id}/shell?cols=0"), &token).await.unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    let plain = reqwest::Client::new()
        .get(format!("{}/api/v1/jobs/{job_id}/shell", fx.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 400);
    assert!(plain.text().await.unwrap().contains("WebSocket"));
    let malformed = WebSocket::open(&address, "/api/v1/jobs/not-a-job/shell", &token).await.unwrap_err();
    assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");

    // The console's cookie opens one from the console's own pages alone.
    let cookie = mission_testkit::console_cookie(&fx.url, "admin", password.trim()).await;
    let elsewhere = [("Cookie", cookie.as_str()), ("Origin", "http://evil.example")];
    let refused = WebSocket::open_with(&address, &path, &elsewhere).await.unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let own = [("Cookie", cookie.as_str()), ("Origin", fx.url.as_str())];
    let mut console = WebSocket::open_with(&address, &format!("{path}&command=echo+hi"), &own).await.unwrap();
    assert_eq!(next(&mut console).await, Some((1, b"hi\n".to_vec())));

    // Closing the WebSocket ends its shell.
    let mut held = WebSocket::open(&address, &format!("{path}&command=exec+sleep+777"), &token).await.unwrap();
    started("sleep 777").await;
    held.send(Opcode::Close, &1000u16.to_be_bytes()).await;
    drop(held);
    gone("sleep 777").await;

    // The job's end ends the shells open in it, and no shell opens after.
    let mut open = WebSocket::open(&address, &format!("{path}&command=exec+sleep+778"), &token).await.unwrap();
    started("sleep 778").await;
    fx.ok("admin", &["jobs", "stop", &job_id]).await;
    gone("sleep 778").await;
    while let Some((channel, _)) = next(&mut open).await {
        assert_ne!(channel, 2);
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        while fx.json("admin", &["jobs", "get", &job_id]).await["status"] != "stopped" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the job stops");
    let out = fx.run("admin", &["jobs", "shell", &job_id, "--", "true"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not running"), "{stderr}");
}

/// The console's terminal: from a running job's page its owner opens a shell in headless
/// Chromium (xterm.js over the same WebSocket, signed in by the console's cookie), types a
/// command and reads its output.
#[tokio::test]
async fn the_console_opens_a_terminal_in_a_running_job() {
    use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission};
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let sleeper =
        mission(&server.client, SHELL, &[("run.sh", "echo started > marker.txt\nexec sleep 300\n")], &[]).await;
    let request = mission_client::RunJob { station_id: local_station(), ..Default::default() };
    let job = server.client.run_job(sleeper.mission_id, &request).await.unwrap();
    super::jobs::wait_until("the job runs", || async {
        server.client.get_job(job.job_id).await.unwrap().status == mission_client::JobStatus::Running
    })
    .await;

    browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;
    browser.goto(&format!("{}/jobs/{}", server.url, job.job_id)).await;
    browser.click("#open-terminal").await;
    browser.wait_for_text("#terminal-status", "Connected").await;
    browser.type_into(".xterm-helper-textarea", "cat marker.txt; echo $((6*7))\n").await;
    browser.wait_for_text("#terminal .xterm-rows", "42").await;
    assert!(browser.text("#terminal .xterm-rows").await.contains("started"));
    browser.screenshot("job-terminal").await;
    browser.type_into(".xterm-helper-textarea", "exit 5\n").await;
    browser.wait_for_text("#terminal-status", "exited with 5").await;

    // Another user gets no terminal on it, nor a link to one.
    server.add_user("bob", false).await;
    let bob = mission_testkit::Browser::start().await.unwrap();
    bob.sign_in_to_console(&server.url, "bob", mission_testkit::PASSWORD).await;
    bob.goto(&format!("{}/jobs/{}/terminal", server.url, job.job_id)).await;
    assert_eq!(bob.count("#terminal").await, 0);
    server.client.stop_job(job.job_id).await.unwrap();
}
