//! Interactive sessions end to end: the real server on a free port, a real `mission lz` agent,
//! and a web app in a session job reached through the server's proxy and the agent's tunnel.

use std::time::Duration;

use mission_client::{Client, Job, JobStatus, RunJob, SessionKind, SessionRequest, Uuid};
use mission_testkit::WebSocket;
use mission_tunnel::websocket::Opcode;

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission};

pub(super) use mission_testkit::SESSION_APP as APP;

/// Starts a `web` session of a mission that runs [`APP`] on the local station; answers it once
/// its URL is known.
pub(super) async fn start_web_session(client: &Client) -> Job {
    let app = mission(client, SHELL, &[("run.sh", "exec python3 app.py\n"), ("app.py", APP)], &[]).await;
    let request = RunJob {
        station_id: local_station(),
        session: Some(SessionRequest { kind: SessionKind::Web, idle_timeout: None, share_with_managers: false }),
        ..Default::default()
    };
    let job = client.run_job(app.mission_id, &request).await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let job = client.get_job(job.job_id).await.unwrap();
            assert!(!job.status.is_final(), "the session ended before it answered: {job:?}");
            if job.session.as_ref().is_some_and(|session| session.url.is_some()) {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the session answers within two minutes")
}

#[tokio::test]
async fn a_web_session_is_reached_through_the_server_by_its_owner_alone() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let job = start_web_session(&server.client).await;
    let session = job.session.clone().unwrap();
    assert_eq!(session.kind, SessionKind::Web);
    assert!(session.ready_at.is_some());
    let url = session.url.unwrap();
    assert_eq!(url, format!("{}/sessions/{}/", server.url, job.job_id));

    let alice = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    server.add_user("bob", false).await;
    let bob = mission_testkit::device_sign_in(&server.url, "bob", mission_testkit::PASSWORD).await.0.access_token;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // Its owner reaches the app, which sees the path under the session's root and the
    // session's secret, and none of Mission's credentials.
    let page = http
        .get(format!("{url}hello?x=1"))
        .bearer_auth(&alice)
        .header("Cookie", "mission_session=not-for-the-app; theme=dark")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    for seen in [
        "path=/hello?x=1",
        "token=ok",
        "authorization=None",
        "cookie=theme=dark\n",
        &format!("base=/sessions/{}/", job.job_id),
    ] {
        assert!(text.contains(seen), "{seen} not in {text}");
    }
    // Under the console's origin, no cookie the app sets is named like the console's, names a
    // domain, or reaches the console or the API.
    let planted = http.get(format!("{url}set-cookies")).bearer_auth(&alice).send().await.unwrap();
    let cookies: Vec<&str> = planted.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap()).collect();
    let root = format!("Path=/sessions/{}/", job.job_id);
    assert_eq!(cookies, [format!("theme=dark; {root}"), format!("wide=1; {root}"), "own=1".to_owned()]);
    // A body goes through whole.
    let upload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let digest = ring::digest::digest(&ring::digest::SHA256, &upload);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let posted = http.post(format!("{url}upload")).bearer_auth(&alice).body(upload).send().await.unwrap();
    assert_eq!(posted.text().await.unwrap(), format!("received=3000000 sha256={hex}\n"));

    // Nobody else: another user as if there were no such session, an anonymous program told
    // to sign in, an anonymous browser sent to sign in.
    let as_bob = http.get(&url).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(as_bob.status(), 404);
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let browser = http.get(&url).header("Accept", "text/html").send().await.unwrap();
    assert_eq!(browser.status(), 303);
    let to = browser.headers()["location"].to_str().unwrap();
    assert!(to.starts_with("/sign-in?next=%2Fsessions%2F"), "{to}");
    let root = http.get(format!("{}/sessions/{}", server.url, job.job_id)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(root.headers()["location"], format!("/sessions/{}/", job.job_id));

    // WebSockets: a short and a long message echoed; bob is refused the upgrade.
    let address = server.url.trim_start_matches("http://");
    let path = format!("/sessions/{}/echo", job.job_id);
    let mut socket = WebSocket::open(address, &path, &alice).await.unwrap();
    assert_eq!(socket.echo(b"ping").await, b"ping");
    let long: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(socket.echo(&long).await, long);
    let refused = WebSocket::open(address, &path, &bob).await.unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 404"), "{refused}");

    // Once the job is stopped, the session is gone.
    server.client.stop_job(job.job_id).await.unwrap();
    let ended = server.client.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(ended.status, JobStatus::Stopped);
    assert_eq!(ended.session.unwrap().url, None, "an ended session has no URL");
    let gone = http.get(&url).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(gone.status(), 410);
}

/// Unused ids are 404s, like sessions of others.
#[tokio::test]
async fn no_session_by_an_unknown_or_malformed_id() {
    let (server, _admin) = cluster(|_| {}).await;
    let alice = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let http = reqwest::Client::new();
    for id in [Uuid::new_v4().to_string(), "not-an-id".to_owned()] {
        let answer = http.get(format!("{}/sessions/{id}/x", server.url)).bearer_auth(&alice).send().await.unwrap();
        assert_eq!(answer.status(), 404, "{id}");
    }
}

/// A session with an idle timeout ends once nothing went through it for that long: as a
/// session ends, `completed`, saying why, with its results returned.
#[tokio::test]
async fn an_idle_session_ends_with_its_results() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let client = &server.client;
    let app =
        mission(client, SHELL, &[("run.sh", "echo saved > notebook.txt\nexec python3 app.py\n"), ("app.py", APP)], &[])
            .await;
    let request = RunJob {
        station_id: local_station(),
        session: Some(SessionRequest { kind: SessionKind::Web, idle_timeout: Some(1), share_with_managers: false }),
        ..Default::default()
    };
    let job = client.run_job(app.mission_id, &request).await.unwrap();
    let alice = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let url = format!("{}/sessions/{}/", server.url, job.job_id);
    // Used now and then for a while, it stays.
    let http = reqwest::Client::new();
    let started = tokio::time::Instant::now();
    let mut used = 0;
    while used < 3 {
        let answer = http.get(&url).bearer_auth(&alice).send().await.unwrap();
        if answer.status() == 200 {
            used += 1;
            tokio::time::sleep(Duration::from_secs(20)).await;
        } else {
            assert_eq!(answer.status(), 503, "starting");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(started.elapsed() < Duration::from_secs(120));
    }
    assert!(!client.get_job(job.job_id).await.unwrap().status.is_final(), "in use, it runs on");
    let last_use = tokio::time::Instant::now() - Duration::from_secs(20);
    let ended = tokio::time::timeout(Duration::from_secs(150), client.wait_for_job(job.job_id)).await.unwrap().unwrap();
    assert!(last_use.elapsed() >= Duration::from_secs(60), "it ended {:?} after its last use", last_use.elapsed());
    assert_eq!(ended.status, JobStatus::Completed, "{ended:?}");
    assert_eq!(ended.reason.as_deref(), Some("idle timeout: no request for 1 minute(s)"));
    let results: Vec<String> =
        client.list_job_results(job.job_id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    assert!(results.contains(&"notebook.txt".to_owned()), "{results:?}");
}

/// `mission run --session` waits for the app and prints where it is; `--again` starts the
/// same session once more after it ended.
#[tokio::test]
async fn the_cli_starts_a_session_and_starts_it_again() {
    let fx = super::Fixture::start().await;
    let password = super::admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("app");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "exec python3 app.py\n").unwrap();
    std::fs::write(src.join("app.py"), APP).unwrap();
    let create = ["missions", "create", "--name", "app", "--type", "shell", "--setting", "filename=run.sh", "--upload"];
    let mut args: Vec<&str> = create.to_vec();
    args.push(src.to_str().unwrap());
    let created = fx.json("admin", &args).await;
    let mission_id = created["mission_id"].as_str().unwrap().to_owned();

    let first = fx.json("admin", &["run", &mission_id, "--session", "web"]).await;
    let job_id = first["job_id"].as_str().unwrap().to_owned();
    assert_eq!(first["status"], "running");
    assert_eq!(first["session"]["kind"], "web");
    assert_eq!(first["session"]["url"], format!("{}/sessions/{job_id}/", fx.url));
    let text = fx.ok("admin", &["jobs", "stop", &job_id]).await;
    assert!(text.contains(&format!("job {job_id}")), "{text}");

    let bad = fx.run("admin", &["run", &mission_id, "--session", "desktop"]).await;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected web, jupyter or vscode"));

    // Once it ended, the same session again, as a new job.
    tokio::time::timeout(Duration::from_secs(30), async {
        while fx.json("admin", &["jobs", "get", &job_id]).await["status"] == "running" {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap();
    let again = fx.ok("admin", &["run", "--again", &job_id]).await;
    assert!(again.contains("is ready at ") && again.contains("/sessions/"), "{again}");
    assert!(!again.contains(&job_id), "a new job: {again}");
}

/// In the console a session's owner opens it from its job's page, in headless Chromium (the
/// console's cookie carries the sign-in), and starts it again once it ended.
#[tokio::test]
async fn the_console_opens_a_session_and_starts_it_again() {
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let job = start_web_session(&server.client).await;
    browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;
    browser.goto(&format!("{}/jobs/{}", server.url, job.job_id)).await;
    assert!(browser.text("#job-session").await.starts_with("web"));
    let href = browser.property("#open-session", "href").await;
    assert_eq!(href.as_str().unwrap(), format!("{}/sessions/{}/", server.url, job.job_id));
    browser.goto(href.as_str().unwrap()).await;
    let page = browser.text("body").await;
    assert!(page.contains("path=/\n") && page.contains("token=ok") && page.contains("cookie=None"), "{page}");
    browser.screenshot("session-opened").await;

    server.client.stop_job(job.job_id).await.unwrap();
    server.client.wait_for_job(job.job_id).await.unwrap();
    browser.goto(&format!("{}/jobs/{}", server.url, job.job_id)).await;
    assert_eq!(browser.count("#open-session").await, 0, "an ended session has nothing to open");
    browser.click("#again").await;
    // The form's answer navigates on its own time: wait for the new job's page.
    let mut again = browser.current_url().await;
    for _ in 0..100 {
        if !again.contains(&job.job_id.to_string()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        again = browser.current_url().await;
    }
    assert!(again.contains("/jobs/") && !again.contains(&job.job_id.to_string()), "{again}");
    let new_id = Uuid::parse_str(again.rsplit('/').next().unwrap()).unwrap();
    let rerun = server.client.get_job(new_id).await.unwrap();
    assert_eq!((rerun.rerun_of, rerun.session.map(|s| s.kind)), (Some(job.job_id), Some(SessionKind::Web)));
}

/// A real Jupyter Lab as a `jupyter` session: through the proxy, its REST API starts a kernel
/// and its WebSocket API runs a cell, as a browser front end does; then Jupyter Lab's page
/// loads in headless Chromium, signed in by the console's cookie alone.
#[tokio::test]
async fn jupyter_lab_runs_a_cell_through_the_proxy() {
    let venv = std::env::var_os("MISSION_TEST_JUPYTER").map_or_else(
        || std::path::PathBuf::from("/opt/mission-test/jupyter/bin"),
        |venv| std::path::PathBuf::from(venv).join("bin"),
    );
    if !venv.join("jupyter-lab").exists() {
        let why =
            format!("{} is missing (scripts/install-test-deps.sh installs it)", venv.join("jupyter-lab").display());
        return mission_testkit::skip_unless_required("JUPYTER", why);
    }
    let (server, admin) = cluster(|_| {}).await;
    // Jupyter on the agent's PATH, which its jobs get.
    let path = format!("{}:{}", venv.display(), std::env::var("PATH").unwrap_or_default());
    let _agent = Agent::start_at(&server.url, &admin, local_station(), "lz1", TWO_CPUS, &[], &[("PATH", path)]).await;
    let client = &server.client;
    let notebook = mission(client, SHELL, &[("run.sh", "echo unused\n"), ("data.txt", "six times seven\n")], &[]).await;
    let request = RunJob {
        station_id: local_station(),
        time_limit: Some(10),
        session: Some(SessionRequest { kind: SessionKind::Jupyter, idle_timeout: None, share_with_managers: false }),
        ..Default::default()
    };
    let job = client.run_job(notebook.mission_id, &request).await.unwrap();
    let url = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let job = client.get_job(job.job_id).await.unwrap();
            if job.status.is_final() {
                let stderr = client.job_logs(job.job_id, mission_client::LogStream::Stderr).await.unwrap();
                panic!("Jupyter ended before it answered: {job:?}\n{stderr}");
            }
            if let Some(url) = job.session.and_then(|session| session.url) {
                return url;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("Jupyter answers within 90 s");
    let token = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let http = reqwest::Client::new();

    // Its REST API: the proxy presents Jupyter's token, so the owner's own sign-in is enough.
    let status = http.get(format!("{url}api/status")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(status.status(), 200, "{}", status.text().await.unwrap());
    let contents: serde_json::Value =
        http.get(format!("{url}api/contents")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> =
        contents["content"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"data.txt"), "the mission's files are in its work dir: {names:?}");
    let kernel: serde_json::Value = http
        .post(format!("{url}api/kernels"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"name": "python3"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kernel_id = kernel["id"].as_str().unwrap_or_else(|| panic!("a kernel: {kernel}"));

    // Its WebSocket API: a cell runs, and its output comes back.
    let address = server.url.trim_start_matches("http://");
    let path = format!("/sessions/{}/api/kernels/{kernel_id}/channels", job.job_id);
    let mut channels = WebSocket::open(address, &path, &token).await.unwrap();
    let execute = serde_json::json!({
        "header": {"msg_id": "cell-1", "username": "alice", "session": "test", "msg_type": "execute_request",
                   "version": "5.3", "date": "2026-11-27T00:00:00Z"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": "print(6 * 7, open('data.txt').read().strip())", "silent": false,
                    "store_history": false, "user_expressions": {}, "allow_stdin": false, "stop_on_error": true},
    });
    channels.send(Opcode::Text, execute.to_string().as_bytes()).await;
    let printed = loop {
        let frame = channels.receive().await.expect("the kernel's answer");
        if frame.opcode != Opcode::Text {
            continue;
        }
        let message: serde_json::Value = serde_json::from_slice(&frame.payload).unwrap();
        if message["msg_type"] == "stream" && message["parent_header"]["msg_id"] == "cell-1" {
            break message["content"]["text"].as_str().unwrap().to_owned();
        }
        assert_ne!(message["msg_type"], "error", "{message}");
    };
    assert_eq!(printed, "42 six times seven\n");

    // In a browser, signed in to the console, Jupyter Lab's page and its assets load.
    if let Some(browser) = mission_testkit::Browser::start().await {
        browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;
        browser.goto(&format!("{url}lab")).await;
        // Its file browser lists the mission's files: its scripts, styles and API calls all
        // came through the proxy.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while browser.count(".jp-DirListing-item[title*='data.txt']").await == 0 {
            assert!(tokio::time::Instant::now() < deadline, "Jupyter Lab's file browser did not list data.txt");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(browser.title().await.contains("JupyterLab"), "{}", browser.title().await);
        browser.screenshot("jupyter-lab").await;
    }
    client.stop_job(job.job_id).await.unwrap();
}

/// A session near its time limit warns its owner: a `session.ending` event (which webhooks
/// deliver too), once, and a banner on its job's page.
#[tokio::test]
async fn a_session_near_its_time_limit_warns_its_owner() {
    let receiver = mission_testkit::Receiver::start(|_, _| 204).await;
    let target = format!("{}/hooks/", receiver.url);
    let (server, admin) = cluster(|config| config.webhook_targets = vec![target.parse().unwrap()]).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let client = &server.client;
    let hook = mission_client::CreateWebhook {
        url: format!("{target}ending"),
        kinds: vec!["session.ending".into()],
        ..Default::default()
    };
    client.create_webhook(&hook).await.unwrap();
    let mut events = client
        .watch_events(&mission_client::WatchEvents { kinds: vec!["session".into()], ..Default::default() })
        .await
        .unwrap();
    let app = mission(client, SHELL, &[("run.sh", "exec python3 app.py\n"), ("app.py", APP)], &[]).await;
    let request = RunJob {
        station_id: local_station(),
        time_limit: Some(3),
        session: Some(SessionRequest { kind: SessionKind::Web, idle_timeout: None, share_with_managers: false }),
        ..Default::default()
    };
    let job = client.run_job(app.mission_id, &request).await.unwrap();
    // Its limit is under the warning's ten minutes: the warning comes as soon as it answers.
    let event = tokio::time::timeout(Duration::from_secs(60), events.next()).await.unwrap().unwrap();
    assert_eq!((event.kind.as_str(), event.job_id), ("session.ending", Some(job.job_id)));
    assert_eq!(event.data["minutes_left"], 3);
    assert_eq!(event.data["time_limit"], 3);
    assert!(event.data["detail"].as_str().unwrap().contains("save your work"));
    // A webhook delivers it too.
    let delivered = receiver.wait_until("the warning's delivery", |received| !received.is_empty()).await;
    let delivered = delivered[0].json();
    assert_eq!(
        (delivered["kind"].as_str(), delivered["data"]["minutes_left"].as_u64()),
        (Some("session.ending"), Some(3))
    );

    let cookie = mission_testkit::console_cookie(&server.url, "alice", mission_testkit::PASSWORD).await;
    let page = reqwest::Client::new()
        .get(format!("{}/jobs/{}", server.url, job.job_id))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"session-ending\""), "{page}");
    client.stop_job(job.job_id).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(2), events.next()).await.is_err(), "one warning");
}

/// A huge WebSocket message to an app that does not read it holds neither end's memory: the
/// tunnel's flow control makes the sender wait. The server is a process of its own here, so
/// its memory can be read.
#[tokio::test]
async fn a_huge_message_to_an_app_that_does_not_read_waits_instead_of_filling_memory() {
    let fx = super::Fixture::start().await;
    let password = super::admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("app");
    std::fs::create_dir_all(&src).unwrap();
    // It takes the WebSocket, then reads nothing.
    let app = APP.replace("            head = self.rfile.read(2)", "            __import__('time').sleep(600)");
    std::fs::write(src.join("run.sh"), "exec python3 app.py\n").unwrap();
    std::fs::write(src.join("app.py"), app).unwrap();
    let create = ["missions", "create", "--name", "app", "--type", "shell", "--setting", "filename=run.sh", "--upload"];
    let mut args: Vec<&str> = create.to_vec();
    args.push(src.to_str().unwrap());
    let mission_id = fx.json("admin", &args).await["mission_id"].as_str().unwrap().to_owned();
    let job = fx.json("admin", &["run", &mission_id, "--session", "web"]).await;
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let token = mission_testkit::device_sign_in(&fx.url, "admin", password.trim()).await.0.access_token;

    let pid = fx.server.id().unwrap();
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
        line.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap()
    };
    let address = fx.url.trim_start_matches("http://").to_owned();
    let mut socket = WebSocket::open(&address, &format!("/sessions/{job_id}/echo"), &token).await.unwrap();
    let before = rss();
    const HUGE: usize = 256 << 20;
    let sending = tokio::spawn(async move {
        socket.send(Opcode::Binary, &vec![b'x'; HUGE]).await;
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!sending.is_finished(), "the sender waits for a reader that never comes");
    let grown = rss().saturating_sub(before);
    assert!(grown < 32 << 10, "the server grew by {grown} KiB while a 256 MiB message waited");
    sending.abort();
    fx.ok("admin", &["jobs", "stop", &job_id]).await;
}

/// The project `lab`: alice (the fixture's client) and bob its members, carol its manager.
async fn lab(server: &mission_testkit::TestServer, admin: &Client) -> Uuid {
    use mission_client::{CreateProject, ProjectRole};
    let project = admin.create_project(&CreateProject { name: "lab".into(), description: None }).await.unwrap();
    for (user, role) in [("alice", ProjectRole::Member), ("carol", ProjectRole::Manager), ("bob", ProjectRole::Member)]
    {
        if user != "alice" {
            server.add_user(user, false).await;
        }
        admin.set_project_member(project.project_id, user, role).await.unwrap();
    }
    project.project_id
}

/// Starts a `web` session of [`APP`] charged to `project`, shared with its managers or not.
async fn start_in(client: &Client, project: Uuid, share_with_managers: bool) -> Job {
    let app = mission(client, SHELL, &[("run.sh", "exec python3 app.py\n"), ("app.py", APP)], &[]).await;
    let session = SessionRequest { kind: SessionKind::Web, idle_timeout: None, share_with_managers };
    let request =
        RunJob { station_id: local_station(), project_id: Some(project), session: Some(session), ..Default::default() };
    client.run_job(app.mission_id, &request).await.unwrap()
}

/// With a sessions URL, each session has an origin of its own: a browser coming from the
/// console is handed over with a one-time code that sets a cookie of that session alone; that
/// host serves the session and nothing else, and no other session's cookie opens it. Programs
/// still reach it with a bearer token at the console's origin.
#[tokio::test]
async fn a_session_on_its_own_origin_is_entered_by_a_one_time_handshake() {
    let (server, admin) = cluster(|config| config.sessions_url = Some("http://*.localhost".parse().unwrap())).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let (job, other) = (start_web_session(&server.client).await, start_web_session(&server.client).await);
    let address: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let origin = |job: &Job| format!("http://{}.localhost:{}", job.job_id, address.port());
    let root = |job: &Job| format!("{}/sessions/{}/", origin(job), job.job_id);
    assert_eq!(job.session.as_ref().unwrap().url.as_deref(), Some(root(&job).as_str()));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&format!("{}.localhost", job.job_id), address)
        .resolve(&format!("{}.localhost", other.job_id), address)
        .build()
        .unwrap();
    let console = mission_testkit::console_cookie(&server.url, "alice", mission_testkit::PASSWORD).await;
    let alice = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let location = |answer: &reqwest::Response| answer.headers()["location"].to_str().unwrap().to_owned();

    // From the console, a browser is handed over: the code once, then the session's cookie.
    let from_console = format!("{}/sessions/{}/hello?x=1", server.url, job.job_id);
    let handed = http.get(&from_console).header("Cookie", &console).send().await.unwrap();
    assert_eq!(handed.status(), 303);
    let handshake = location(&handed);
    assert!(handshake.starts_with(&format!("{}/_mission/handshake?code=", origin(&job))), "{handshake}");
    let entered = http.get(&handshake).send().await.unwrap();
    assert_eq!(entered.status(), 303);
    assert_eq!(location(&entered), format!("/sessions/{}/hello?x=1", job.job_id));
    let set = entered.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("mission_app=") && set.contains("HttpOnly") && !set.contains("Domain"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    assert_eq!(http.get(&handshake).send().await.unwrap().status(), 401, "a code is used once");

    // On its own origin, the session's cookie opens it, and the app sees none of Mission's.
    let page = http.get(format!("{}hello", root(&job))).header("Cookie", format!("{cookie}; theme=dark")).send();
    let page = page.await.unwrap();
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    assert!(text.contains("path=/hello") && text.contains("cookie=theme=dark\n"), "{text}");
    // Nothing else lives on its host: not the API, not the console, not another session.
    for elsewhere in ["/api/v1/jobs".to_owned(), "/missions".to_owned(), format!("/sessions/{}/", other.job_id)] {
        let answer = http.get(format!("{}{elsewhere}", origin(&job))).header("Cookie", &cookie);
        let answer = answer.bearer_auth(&alice).send().await.unwrap();
        assert_eq!((answer.status().as_u16(), location(&answer)), (303, root(&job).replace(&origin(&job), "")));
    }
    // Its cookie opens no other session, nor does the console's cookie open it.
    let wrong = http.get(root(&other)).header("Cookie", &cookie).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let console_there = http.get(root(&job)).header("Cookie", &console).header("Accept", "text/html").send().await;
    let console_there = console_there.unwrap();
    assert_eq!(console_there.status(), 303, "to the console, to be handed over");
    assert_eq!(location(&console_there), format!("{}/sessions/{}/", server.url, job.job_id));
    // A program keeps its bearer token at the console's origin.
    let program = http.get(&from_console).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(program.status(), 200);
    for job in [job, other] {
        server.client.stop_job(job.job_id).await.unwrap();
    }
}

/// In Chromium, a page of a session on its own origin cannot read the console, the API or
/// another session, and the cookies it plants reach neither.
#[tokio::test]
async fn a_sessions_page_cannot_read_the_console_the_api_or_another_session() {
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    let (server, admin) = cluster(|config| config.sessions_url = Some("http://*.localhost".parse().unwrap())).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let (job, other) = (start_web_session(&server.client).await, start_web_session(&server.client).await);
    browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;
    for session in [&other, &job] {
        browser.goto(&format!("{}/sessions/{}/hello", server.url, session.job_id)).await;
        let page = browser.text("body").await;
        assert!(page.contains("path=/hello") && page.contains("cookie=None"), "{page}");
    }
    let here = browser.current_url().await;
    assert!(here.starts_with(&format!("http://{}.localhost:", job.job_id)), "{here}");

    let read = |url: String| {
        let script = "const done = arguments[arguments.length - 1]; \
            fetch(arguments[0], {credentials: 'include'}).then(r => r.text()).then(t => done('read: ' + t), \
            e => done('refused: ' + e));";
        let browser = &browser;
        async move { browser.execute_async(script, serde_json::json!([url])).await.as_str().unwrap().to_owned() }
    };
    let port = here.split(':').nth(2).unwrap().split('/').next().unwrap();
    let other_root = format!("http://{}.localhost:{port}/sessions/{}/hello", other.job_id, other.job_id);
    for url in [format!("{}/api/v1/jobs", server.url), format!("{}/missions", server.url), other_root] {
        let got = read(url.clone()).await;
        assert!(got.starts_with("refused: "), "{url}: {got}");
    }
    let own_api = read("/api/v1/jobs".to_owned()).await;
    assert!(own_api.starts_with("read: path=/\n"), "its own host serves only the session: {own_api}");
    // The cookies it plants stay on its host, and none is named like the console's.
    browser.goto(&format!("http://{}.localhost:{port}/sessions/{}/set-cookies", job.job_id, job.job_id)).await;
    assert!(browser.cookie("mission_session").await.get("value").is_none());
    browser.goto(&format!("{}/missions", server.url)).await;
    assert_eq!(browser.text("h1").await, "Missions", "the console still knows who signed in");
    browser.screenshot("session-own-origin").await;
    for job in [job, other] {
        server.client.stop_job(job.job_id).await.unwrap();
    }
}

/// No header a client sends changes what the agent does, and none of the tunnel's own reaches
/// the app or comes back from it: a WebSocket upgrade carrying the agent's shell header reaches
/// the app (its owner's and a manager's alike), so no shell runs unaudited; the app sees no
/// bearer token wherever it stands among several `Authorization` headers, no console CSRF
/// token, and the address the server saw the client at, not the one the client claims.
#[tokio::test]
async fn no_header_a_client_or_an_app_sends_crosses_the_tunnel() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let project = lab(&server, &admin).await;
    let job = start_in(&server.client, project, true).await;
    let job_id = job.job_id.to_string();
    super::jobs::wait_until("the session answers", || async {
        server.client.get_job(job.job_id).await.unwrap().session.is_some_and(|s| s.url.is_some())
    })
    .await;
    let sign_in = |user| mission_testkit::device_sign_in(&server.url, user, mission_testkit::PASSWORD);
    let (alice, carol) = (sign_in("alice").await.0.access_token, sign_in("carol").await.0.access_token);
    let address = server.url.trim_start_matches("http://");
    let http = reqwest::Client::new();
    let url = format!("{}/sessions/{job_id}", server.url);
    for token in [&alice, &carol] {
        let bearer = format!("Bearer {token}");
        let smuggled = [
            ("Authorization", bearer.as_str()),
            ("Mission-Shell", "command=echo smuggled"),
            ("Mission-Session", job_id.as_str()),
        ];
        let mut socket = WebSocket::open_with(address, &format!("/sessions/{job_id}/echo"), &smuggled).await.unwrap();
        assert_eq!(socket.echo(b"ping").await, b"ping", "the app's echo answers, not a shell");

        let page = http
            .get(format!("{url}/hello"))
            .header("Authorization", "Basic YXBwOnVzZXI=")
            .header("Authorization", &bearer)
            .header("X-CSRF-Token", "console-csrf")
            .header("X-Forwarded-For", "203.0.113.9")
            .header("Mission-Shell", "command=id")
            .header("Mission-Upgrade", "websocket")
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let text = page.text().await.unwrap();
        for seen in
            ["authorizations=['Basic YXBwOnVzZXI=']", "csrf=None", "forwarded_for=127.0.0.1\n", "tunnel_headers=\n"]
        {
            assert!(text.contains(seen), "{seen} not in {text}");
        }
        let answer = http.get(format!("{url}/tunnel-headers")).bearer_auth(token).send().await.unwrap();
        assert_eq!(answer.status(), 200, "the app's own 'no session' header is no agent's");
        let tunnel: Vec<_> = ["mission-no-session", "mission-upgraded", "mission-shell"]
            .into_iter()
            .filter(|name| answer.headers().contains_key(*name))
            .collect();
        assert!(tunnel.is_empty(), "the app's {tunnel:?} came through");
    }
    // Every shell is audited: none ran, so none is in the audit trail.
    let query = mission_client::AuditQuery { target: Some(job_id.clone()), ..Default::default() };
    let audit = admin.audit_jsonl(&query).await.unwrap();
    assert!(!audit.contains("job.shell"), "{audit}");
    server.client.stop_job(job.job_id).await.unwrap();
}

/// A session its owner shares with the managers of the project its job is charged to: they open
/// it; a member who is no manager does not, nor does a manager open a session not shared.
#[tokio::test]
async fn a_shared_session_opens_for_its_projects_managers_alone() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let project = lab(&server, &admin).await;
    let alice = &server.client;
    let (shared, unshared) = (start_in(alice, project, true).await, start_in(alice, project, false).await);
    assert!(shared.session.as_ref().unwrap().share_with_managers);
    let http = reqwest::Client::new();
    let sign_in = |user| mission_testkit::device_sign_in(&server.url, user, mission_testkit::PASSWORD);
    let (carol, bob) = (sign_in("carol").await.0.access_token, sign_in("bob").await.0.access_token);
    let status = |job: Uuid, token: String| {
        let url = format!("{}/sessions/{job}/", server.url);
        let http = http.clone();
        async move { http.get(url).bearer_auth(token).send().await.unwrap().status().as_u16() }
    };
    super::jobs::wait_until("both sessions answer", || async {
        let ready = |id| async move { alice.get_job(id).await.unwrap().session.is_some_and(|s| s.url.is_some()) };
        ready(shared.job_id).await && ready(unshared.job_id).await
    })
    .await;
    assert_eq!(status(shared.job_id, carol.clone()).await, 200, "a manager opens a shared session");
    assert_eq!(status(shared.job_id, bob.clone()).await, 404, "a member who is no manager does not");
    assert_eq!(status(unshared.job_id, carol).await, 404, "nor does a manager open one not shared");
    // The job's page shows the manager the session's Open button (and no terminal).
    let cookie = mission_testkit::console_cookie(&server.url, "carol", mission_testkit::PASSWORD).await;
    let page = http.get(format!("{}/jobs/{}", server.url, shared.job_id)).header("Cookie", cookie).send().await;
    let page = page.unwrap().text().await.unwrap();
    assert!(page.contains("id=\"open-session\"") && !page.contains("id=\"open-terminal\""), "{page}");
    for job in [shared, unshared] {
        alice.stop_job(job.job_id).await.unwrap();
    }
}
