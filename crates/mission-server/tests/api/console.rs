//! The web console as a person uses it, in headless Chromium (WebDriver), against the real
//! server: signing in, the missions list, a mission's files, escaping, other users' missions,
//! CSRF, and signing out. The sign-in form's own guards are checked over raw HTTP.

use mission_client::{CreateMission, Uuid};
use mission_testkit::{Browser, PASSWORD, TestServer};
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
