//! The web console as a person uses it, in headless Chromium (WebDriver), against the real
//! server: signing in, the missions list, a mission's files, escaping, other users' missions,
//! CSRF, and signing out. The sign-in form's own guards are checked over raw HTTP.

use mission_client::{CreateMission, JobStatus, RegisterLandingZone, Uuid};
use mission_testkit::{Browser, ENTER, PASSWORD, TAB, TestServer};
use reqwest::header;

use crate::http;

fn write(root: &std::path::Path, relative: &str, content: &[u8]) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

async fn create(client: &mission_client::Client, name: &str) -> Uuid {
    client.create_mission(&CreateMission { name: name.into(), ..Default::default() }).await.unwrap().mission_id
}

/// The browser's session cookie, as a `Cookie` header value.
async fn session_cookie(browser: &Browser) -> String {
    let cookie = browser.cookie("mission_session").await;
    assert_eq!(cookie["httpOnly"], true, "scripts cannot read the session cookie: {cookie}");
    assert_eq!(cookie["sameSite"], "Lax", "{cookie}");
    format!("mission_session={}", cookie["value"].as_str().expect("a session cookie"))
}

#[tokio::test]
async fn a_person_signs_in_finds_a_mission_sees_its_files_and_signs_out() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    let alice = &server.client;
    let alpha = create(alice, "alpha sweep").await;
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "run.sh", b"echo hello\n");
    write(src.path(), "data/raw/input one.csv", b"a,b\n1,2\n");
    assert!(alice.upload(alpha, src.path(), None, false).await.unwrap());
    let hostile = "<img src=x onerror=\"document.title='owned'\"> & <b>bold</b>";
    create(alice, hostile).await;
    server.add_user("bob", false).await;
    let bobs = create(&server.sign_in("bob").await, "bob's secret").await;

    // Signed out, the console is the sign-in page, which comes back to where it was sent from.
    browser.goto(&format!("{}/missions?q=alpha", server.url)).await;
    assert_eq!(browser.title().await, "Sign in · Mission Compute");
    browser.screenshot("console-sign-in").await;
    browser.type_into("#username", "alice").await;
    browser.type_into("#password", "not the password").await;
    browser.click("button[type=submit]").await;
    browser.wait_for_text(".error", "Wrong username or password").await;
    browser.type_into("#password", PASSWORD).await;
    browser.click("button[type=submit]").await;
    browser.wait_for_text("h1", "Missions").await;
    assert!(browser.current_url().await.ends_with("/missions?q=alpha"), "back where the sign-in started");
    assert_eq!(browser.count("#missions tbody tr").await, 1, "the search found alpha only");
    assert_eq!(browser.property("#q", "value").await, "alpha");

    // Every mission the viewer may see; a hostile name is text, not markup.
    browser.goto(&format!("{}/missions", server.url)).await;
    let list = browser.wait_for_text("#missions", "alpha sweep").await;
    assert!(list.contains(hostile), "the name shows as typed: {list}");
    assert!(!list.contains("bob's secret"), "another user's private mission is not listed");
    assert_eq!(browser.count("#missions img, #missions b").await, 0, "no markup from the name");
    assert_eq!(browser.title().await, "Missions · Mission Compute", "no script from the name ran");
    browser.screenshot("console-missions").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());

    // A mission's page: its files as a tree, each downloadable, and all of them as one archive.
    browser.click("#missions a[href$='{alpha}']".replace("{alpha}", &alpha.to_string()).as_str()).await;
    browser.wait_for_text("#mission-name", "alpha sweep").await;
    let tree = browser.text("#file-tree").await;
    for name in ["data/", "raw/", "input one.csv", "run.sh"] {
        assert!(tree.contains(name), "{name} in {tree}");
    }
    browser.screenshot("console-mission").await;
    let cookie = session_cookie(&browser).await;
    let archive_href = browser.property("#download-all", "href").await;
    let archive = http().get(archive_href.as_str().unwrap()).header(header::COOKIE, &cookie).send().await.unwrap();
    assert_eq!(archive.status(), 200);
    let mut files = mission_testkit::unzip(&archive.bytes().await.unwrap());
    files.sort();
    assert_eq!(
        files,
        [
            ("data/raw/input one.csv".to_owned(), b"a,b\n1,2\n".to_vec()),
            ("run.sh".to_owned(), b"echo hello\n".to_vec())
        ]
    );
    let file_href = browser.property("#file-tree a[href$='run.sh']", "href").await;
    let file = http().get(file_href.as_str().unwrap()).header(header::COOKIE, &cookie).send().await.unwrap();
    assert_eq!(file.bytes().await.unwrap().as_ref(), b"echo hello\n");

    // Another user's private mission is a 404 page that does not say whose it is.
    browser.goto(&format!("{}/missions/{bobs}", server.url)).await;
    assert_eq!(browser.text("h1").await, "Not found");
    browser.screenshot("console-not-found").await;

    // The API takes the session cookie, but a change only with the session's CSRF token.
    browser.goto(&format!("{}/missions", server.url)).await;
    let csrf =
        browser.execute("return document.querySelector('meta[name=csrf-token]').content", serde_json::json!([])).await;
    let create_url = format!("{}/api/v1/missions", server.url);
    let body = serde_json::json!({ "name": "made by script" });
    let forged = http().post(&create_url).header(header::COOKIE, &cookie).json(&body).send().await.unwrap();
    assert_eq!(forged.status(), 403, "no CSRF token: refused");
    let wrong = http().post(&create_url).header(header::COOKIE, &cookie).header("x-csrf-token", "guess").json(&body);
    assert_eq!(wrong.send().await.unwrap().status(), 403, "a wrong CSRF token: refused");
    let made = http()
        .post(&create_url)
        .header(header::COOKIE, &cookie)
        .header("x-csrf-token", csrf.as_str().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let sign_out =
        http().post(format!("{}/sign-out", server.url)).header(header::COOKIE, &cookie).form(&[("csrf", "x")]);
    assert_eq!(sign_out.send().await.unwrap().status(), 403, "signing out needs the token too");

    // Signing out ends the session on the server: the old cookie is worth nothing.
    browser.click("form.who button").await;
    browser.wait_for_text("h1", "Sign in").await;
    browser.goto(&format!("{}/missions", server.url)).await;
    assert_eq!(browser.title().await, "Sign in · Mission Compute");
    let me = http().get(format!("{}/api/v1/me", server.url)).header(header::COOKIE, &cookie).send().await.unwrap();
    assert_eq!(me.status(), 401);
    browser.close().await;
}

/// Everything a person needs is reachable with the keyboard alone, in reading order, with a
/// visible focus ring at every stop: signing in, skipping the navigation, opening a mission,
/// its run dialog and running it.
#[tokio::test]
async fn a_keyboard_alone_signs_in_opens_a_mission_and_runs_it() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    let shell = CreateMission {
        name: "alpha".into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some([("filename".to_owned(), "run.sh".to_owned())].into()),
        ..Default::default()
    };
    let alpha = server.client.create_mission(&shell).await.unwrap().mission_id;
    create(&server.client, "beta").await;

    // The username field has the focus as the page opens; Tab goes on to the password.
    browser.goto(&format!("{}/sign-in", server.url)).await;
    browser.press(&format!("alice{TAB}{PASSWORD}{ENTER}")).await;
    browser.wait_for_text("h1", "Missions").await;

    // The first Tab shows the skip link on screen; following it, the next Tab is in the page's
    // own content, past the navigation and the account menu.
    let passed = browser.tab_to("a.skip", 1).await;
    assert!(passed.is_empty());
    let left =
        browser.execute("return document.activeElement.getBoundingClientRect().left", serde_json::json!([])).await;
    assert!(left.as_f64().unwrap() >= 0.0, "the focused skip link is on screen: {left}");
    browser.screenshot("console-keyboard-skip").await;
    browser.press(ENTER).await;
    let alpha_link = format!("#missions a[href$='{alpha}']");
    let passed = browser.tab_to(&alpha_link, 10).await;
    let in_main = browser.execute("return !!document.activeElement.closest('main')", serde_json::json!([])).await;
    assert_eq!(in_main, true);
    assert!(passed.iter().all(|name| !name.contains("Jobs") && !name.contains("Sign out")), "{passed:?}");
    assert!(passed.iter().any(|name| name.starts_with("input q")), "the search field comes first: {passed:?}");

    // Enter follows the link; on the mission's page the run dialog is one Tab stop after the
    // breadcrumbs, and Enter on its Run button starts the job.
    browser.press(ENTER).await;
    browser.wait_for_text("#mission-name", "alpha").await;
    browser.tab_to("#run-mission", 10).await;
    browser.press(ENTER).await;
    browser.wait_for_text("h1", "Run alpha").await;
    let passed = browser.tab_to("#run", 20).await;
    for field in ["select station", "select lz", "input cpu_count", "input memory_amount", "input time_limit"] {
        assert!(passed.iter().any(|name| name.starts_with(field)), "{field} before Run: {passed:?}");
    }
    browser.screenshot("console-keyboard-run").await;

    // With no landing zone to run on, Enter is refused before any request, and the focus goes
    // to the field that says why.
    browser.press(ENTER).await;
    let refused = "const el = document.activeElement; return [el.id, el.validationMessage]";
    let refused = browser.execute(refused, serde_json::json!([])).await;
    assert_eq!(refused, serde_json::json!(["cpu_count", "The station has no landing zone to run on."]));
    assert_eq!(browser.text("h1").await, "Run alpha");
    assert!(browser.text("main").await.contains("None of these stations has a landing zone yet"));

    // Once the station has one, the same keys run the job.
    server.add_user("root", true).await;
    let node = RegisterLandingZone { name: "node".into(), cluster_account: None };
    server.sign_in("root").await.register_landing_zone(LOCAL_STATION.parse().unwrap(), &node).await.unwrap();
    browser.goto(&format!("{}/missions/{alpha}/run", server.url)).await;
    browser.tab_to("#run", 20).await;
    browser.press(ENTER).await;
    browser.wait_for_text("h1", "Job ").await;
    let jobs = server.client.list_jobs(&Default::default()).await.unwrap();
    assert_eq!(jobs.len(), 1, "one job, started from the keyboard");
    assert_eq!(jobs[0].mission_id, alpha);

    // The walk fails a page whose focus draws no ring, or jumps out of reading order.
    use futures_util::FutureExt as _;
    let walk_fails = async |setup: &str| {
        browser.goto(&format!("{}/missions", server.url)).await;
        browser.execute(setup, serde_json::json!([])).await;
        let walk = std::panic::AssertUnwindSafe(browser.tab_to(&alpha_link, 30)).catch_unwind().await;
        walk.is_err()
    };
    assert!(!walk_fails("").await, "the page as served passes");
    assert!(walk_fails("document.querySelector('#q').style.outline = 'none'").await, "a missing ring is caught");
    assert!(
        walk_fails("[...document.querySelectorAll('#missions a')].find(a => a.textContent === 'beta').tabIndex = 1")
            .await,
        "a positive tabindex is caught"
    );
    browser.close().await;
}

/// The station every first start creates, open to all.
const LOCAL_STATION: &str = "6d697373-696f-4e00-8000-000000000002";

#[tokio::test]
async fn an_admin_manages_a_station_cargo_bays_and_users_and_others_may_not() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    server.add_user("bob", false).await;
    browser.sign_in_to_console(&server.url, "root", PASSWORD).await;

    // A station: its landing zones, and registering one shows its token and command once.
    browser.click("nav a[href='/stations']").await;
    browser.click(&format!("#stations a[href$='{LOCAL_STATION}']")).await;
    browser.wait_for_text("#station-name", "local").await;
    browser.type_into("#lz-name", "gpu-box").await;
    browser.click("#register").await;
    let command = browser.wait_for_text("#agent-command", "MISSION_LZ_TOKEN=").await;
    assert!(command.ends_with(&format!("mission lz --server {}", server.url)), "{command}");
    let token = command.split_whitespace().next().unwrap().trim_start_matches("MISSION_LZ_TOKEN=").to_owned();
    assert!(token.len() >= 32, "{token}");
    browser.screenshot("console-station-registered").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());
    let lz_id = browser.property("#zones tr[data-lz]", "dataset").await["lz"].as_str().unwrap().to_owned();
    browser.goto(&format!("{}/stations/{LOCAL_STATION}", server.url)).await;
    browser.wait_for_text("#zones", "never connected").await;
    assert_eq!(browser.count("#registered").await, 0, "the token is shown once");
    let source = browser.execute("return document.documentElement.outerHTML", serde_json::json!([])).await;
    assert!(!source.as_str().unwrap().contains(&token));
    let connect = http()
        .post(format!("{}/api/v1/lz/connect", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({"resources": {"cpu_count": 1, "memory_amount": 512, "gpu_count": 0}, "version": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(connect.status(), 200, "the token shown signs its agent in");
    browser.goto(&format!("{}/stations/{LOCAL_STATION}", server.url)).await;
    let row = browser.wait_for_text(&format!("#zones tr[data-lz='{lz_id}']"), "online").await;
    assert!(row.contains("lease until") && row.contains("0 / 1") && row.contains("0 / 512 MB"), "{row}");
    drop(connect);

    // Members: added by name, a name nobody has is refused, removed after a question.
    browser.type_into("#member-name", "nobody").await;
    browser.click("#add").await;
    browser.wait_for_text("#form-error", "nobody").await;
    browser.type_into("#member-name", "bob").await;
    browser.click("#add").await;
    browser.wait_for_text("#member-list", "bob").await;
    browser.click("#member-list button").await;
    browser.accept_dialog().await;
    browser.wait_for_text("#no-members", "No members").await;
    browser.click(&format!("#zones tr[data-lz='{lz_id}'] button")).await;
    browser.accept_dialog().await;
    browser.wait_for_text("p.empty", "No landing zones").await;

    // Cargo bays: a refused form keeps what was typed except the secret; a folder bay is added
    // and deleted.
    browser.click("nav a[href='/cargo-bays']").await;
    browser.type_into("#bay-name", "unreachable").await;
    browser.type_into("#bay-bucket", "data").await;
    browser.type_into("#bay-endpoint", "http://127.0.0.1:9").await;
    browser.type_into("#bay-key", "AKIAEXAMPLE").await;
    browser.type_into("#bay-secret", "s3cr3t-never-shown").await;
    browser.click("#add-bay-submit").await;
    browser.wait_for_text("#form-error", "").await;
    assert_eq!(browser.property("#bay-key", "value").await, "AKIAEXAMPLE");
    assert_eq!(browser.property("#bay-secret", "value").await, "");
    let source = browser.execute("return document.documentElement.outerHTML", serde_json::json!([])).await;
    assert!(!source.as_str().unwrap().contains("s3cr3t-never-shown"), "a secret is never sent back");
    let folder = tempfile::tempdir().unwrap();
    browser.clear("#bay-name").await;
    browser.type_into("#bay-name", "scratch").await;
    browser.click("#bay-kind option[value='local']").await;
    browser.type_into("#bay-path", folder.path().to_str().unwrap()).await;
    browser.click("#add-bay-submit").await;
    browser.wait_for_text("#bays", "scratch").await;
    browser.screenshot("console-cargo-bays").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());
    browser.click("#bays tr:last-child button").await;
    browser.accept_dialog().await;
    browser.wait_for_text("h1", "Cargo bays").await;
    assert!(!browser.text("#bays").await.contains("scratch"));

    // Users: one added with a generated password, shown once, that signs in; then made admin.
    browser.click("nav a[href='/admin/users']").await;
    browser.type_into("#new-username", "carol").await;
    browser.click("#add-user-submit").await;
    let password = browser.wait_for_text("#generated-password", "").await;
    let pending = server.device_auth().start().await.unwrap();
    let (status, page) = server.activate(&pending.authorization().user_code, "carol", password.trim(), "approve").await;
    assert_eq!(status, 200, "the generated password signs carol in: {page}");
    browser.type_into("#new-username", "carol").await;
    browser.click("#add-user-submit").await;
    browser.wait_for_text("#form-error", "carol").await;
    browser.click("tr[data-user='carol'] button").await;
    browser.wait_for_text("tr[data-user='carol']", "admin").await;
    assert_eq!(browser.count("tr[data-user='root'] button").await, 0, "no admin takes their own rights");
    browser.screenshot("console-users").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());

    // Bob may use the station but not manage it, and has no users page.
    browser.click("form.who button").await;
    browser.sign_in_to_console(&server.url, "bob", PASSWORD).await;
    assert_eq!(browser.count("nav a[href='/admin/users']").await, 0);
    browser.goto(&format!("{}/stations/{LOCAL_STATION}", server.url)).await;
    browser.wait_for_text("#station-name", "local").await;
    assert_eq!(browser.count("#register-lz, #add-member").await, 0);
    browser.goto(&format!("{}/admin/users", server.url)).await;
    assert_eq!(browser.text("h1").await, "Not allowed");
    // The label check itself finds a field nobody named.
    browser
        .execute(
            "const i = document.createElement('input'); i.id = 'stray'; document.body.append(i)",
            serde_json::json!([]),
        )
        .await;
    assert_eq!(browser.unlabelled_controls().await, ["stray"]);
    browser.close().await;
}

#[tokio::test]
async fn the_sign_in_form_guards_itself_and_pages_carry_a_strict_policy() {
    let server = TestServer::spawn().await;
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = no_redirects.get(format!("{}/sign-in?next=//evil.example/", server.url)).send().await.unwrap();
    let policy = form.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    for rule in ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"] {
        assert!(policy.contains(rule), "{rule} in {policy}");
    }
    assert!(!policy.contains("unsafe-inline"));
    let form_cookie = form.headers()[header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let page = form.text().await.unwrap();
    assert!(!page.contains("<script>") && !page.contains(" style="), "nothing inline for the policy to refuse");
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();

    let sign_in = |cookie: Option<&str>, password: &str| {
        let request = no_redirects.post(format!("{}/sign-in", server.url)).form(&[
            ("username", "alice"),
            ("password", password),
            ("csrf", csrf.as_str()),
            ("next", "//evil.example/"),
        ]);
        match cookie {
            Some(cookie) => request.header(header::COOKIE, cookie.to_owned()),
            None => request,
        }
    };
    // Another site's form cannot sign a browser in: it has the field but not the cookie.
    assert_eq!(sign_in(None, PASSWORD).send().await.unwrap().status(), 403);
    assert_eq!(sign_in(Some(&form_cookie), "wrong").send().await.unwrap().status(), 401);
    let signed_in = sign_in(Some(&form_cookie), PASSWORD).send().await.unwrap();
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()[header::LOCATION], "/missions", "never on to another site");
    let cookies: Vec<&str> =
        signed_in.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap()).collect();
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("mission_session=") && c.contains("HttpOnly") && c.contains("SameSite=Lax"))
    );

    // The assets: cacheable for good under their content's name; nothing else is served there.
    let css = page.split("rel=\"stylesheet\" href=\"").nth(1).unwrap().split('"').next().unwrap();
    let asset = http().get(format!("{}{css}", server.url)).send().await.unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(asset.headers()[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
    assert_eq!(asset.headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
    let stale = http().get(format!("{}/assets/console.0000000000.css", server.url)).send().await.unwrap();
    assert_eq!(stale.status(), 404);
}

#[tokio::test]
async fn a_project_page_shows_members_limits_in_use_as_bars_and_the_budget_spent() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    server.add_user("root", true).await;
    server.add_user("bob", false).await;
    let root = server.sign_in("root").await;
    let station = mission_server::DEFAULT_STATION_ID;
    let worker = RegisterLandingZone { name: "worker".into(), cluster_account: None };
    let token = root.register_landing_zone(station, &worker).await.unwrap().token;
    let offers = mission_api::Resources { cpu_count: 4, memory_amount: 4096, gpu_count: 0 };
    let mut agent = mission_testkit::FakeAgent::connect(&server.url, &token, offers).await;
    let bio = root.create_project(&mission_client::CreateProject { name: "bio".into(), description: None }).await;
    let bio = bio.unwrap().project_id;
    root.set_project_member(bio, "alice", mission_client::ProjectRole::Member).await.unwrap();
    let two_cpus: mission_client::ProjectLimits =
        serde_json::from_str(r#"{"nominal": {"cpus": 2}, "borrowing_limit": {"cpus": 0}}"#).unwrap();
    root.set_project_limits(bio, station, &two_cpus).await.unwrap();
    let ten = mission_api::ProjectBudget {
        cpu_hours: Some(10.0),
        gpu_hours: None,
        kwh: None,
        money: None,
        period: mission_api::BudgetPeriod::Month,
    };
    root.set_project_budget(bio, &ten).await.unwrap();
    let mission = CreateMission {
        name: "sweep".into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some(std::collections::BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        project_id: Some(bio),
        ..Default::default()
    };
    let mission = server.client.create_mission(&mission).await.unwrap().mission_id;
    let run = mission_api::RunJob { station_id: station, cpu_count: Some(1), ..Default::default() };
    server.client.run_job(mission, &run).await.unwrap();
    assert!(matches!(agent.next_order().await, mission_api::lz::Order::Run(_)));
    // Another ran half an hour and ended: the page draws what it used, today.
    let ended = server.client.run_job(mission, &run).await.unwrap().job_id;
    assert!(matches!(agent.next_order().await, mission_api::lz::Order::Run(job) if job.job_id == ended));
    let now = mission_store::now();
    let usage = mission_api::JobUsage { wall_time: 1800.0, ..Default::default() };
    let report = |status| mission_api::lz::Report::new(ended, status, now);
    let done = mission_api::lz::Report { usage: Some(usage), exit_code: Some(0), ..report(JobStatus::Completed) };
    agent.report(&[report(JobStatus::Running), done]).await;
    let finished = tokio::time::timeout(std::time::Duration::from_secs(10), server.client.wait_for_job(ended));
    assert_eq!(finished.await.unwrap().unwrap().status, JobStatus::Completed);

    browser.sign_in_to_console(&server.url, "root", PASSWORD).await;
    browser.click("nav a[href='/projects']").await;
    browser.click(&format!("#projects a[href$='{bio}']")).await;
    browser.wait_for_text("#project-name", "bio").await;
    let limits = browser.text("#limits").await;
    assert!(limits.contains("local") && limits.contains("CPUs: 1 / 2, may not borrow"), "{limits}");
    let cpus = browser
        .execute("return document.querySelector('#limits .bar').getAttribute('aria-valuenow')", serde_json::json!([]));
    assert_eq!(cpus.await, "50", "half its two CPUs");
    let budget = browser.text("#budget").await;
    assert!(budget.contains("0.5 of 10 CPU-hours") && budget.contains("spent for"), "{budget}");
    // Its use a day over the last 30 days, as charts (a bar a day, today's last), and by user.
    let count = |selector: &str| {
        let script = "return String(document.querySelectorAll(arguments[0]).length)";
        browser.execute(script, serde_json::json!([selector]))
    };
    assert_eq!(count("#usage-charts svg.chart[role='img']").await, "4");
    for chart in ["chart-cpu", "chart-gpu", "chart-energy", "chart-co2e"] {
        assert_eq!(count(&format!("#{chart} rect")).await, "30", "{chart}");
    }
    let today = browser.execute(
        "const bars = document.querySelectorAll('#chart-cpu rect'); const last = bars[bars.length - 1]; \
         return [last.getAttribute('data-day'), last.getAttribute('data-value'), \
         String(last.getBoundingClientRect().height > 0), String(bars[0].getBoundingClientRect().height)].join(' ')",
        serde_json::json!([]),
    );
    let day = mission_store::now().date_naive();
    assert_eq!(today.await, format!("{day} 0.5 true 0"), "today's half CPU-hour drawn, nothing before");
    let label = browser
        .execute("return document.querySelector('#chart-energy').getAttribute('aria-label')", serde_json::json!([]));
    assert!(label.await.as_str().unwrap().starts_with("Energy a day: 0.0"), "its name says its figures");
    let users = browser.text("#usage-by-user").await;
    assert!(users.contains("alice") && users.contains("0.50"), "{users}");
    assert_eq!(count("#usage-by-user .spark svg.chart rect").await, "30", "a user's kWh a day");
    let members = browser.text("#members").await;
    assert!(members.contains("alice") && members.contains("member"), "{members}");
    // Its audit trail, for an admin: who did what, newest first.
    let audit = browser.text("#audit").await;
    for said in
        ["job.submit", "mission.create", "alice (user)", "project.budget.set", "root (admin)", "\"cpu_hours\":10.0"]
    {
        assert!(audit.contains(said), "no {said:?} in {audit}");
    }
    assert!(audit.find("job.submit") < audit.find("project.budget.set"), "newest first: {audit}");
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());
    browser.screenshot("console-project").await;

    // A member sees the project, not its audit trail.
    browser.close().await;
    let Some(browser) = Browser::start().await else { return };
    browser.sign_in_to_console(&server.url, "alice", PASSWORD).await;
    browser.goto(&format!("{}/projects/{bio}", server.url)).await;
    browser.wait_for_text("#project-name", "bio").await;
    let audit = browser.execute("return String(document.querySelector('#audit') === null)", serde_json::json!([]));
    assert_eq!(audit.await, "true", "no audit trail for a member");

    // Others do not see it.
    browser.close().await;
    let Some(browser) = Browser::start().await else { return };
    browser.sign_in_to_console(&server.url, "bob", PASSWORD).await;
    browser.goto(&format!("{}/projects/{bio}", server.url)).await;
    assert_eq!(browser.title().await, "Not found · Mission Compute");
    browser.goto(&format!("{}/projects", server.url)).await;
    assert!(!browser.text("#projects").await.contains("bio"));
    browser.close().await;
}
