//! Headless Chromium driven over W3C WebDriver (chromedriver on a free port of 127.0.0.1), for
//! tests of the pages a person uses: `/activate` and the web console.
//!
//! Where chromedriver is not installed [`Browser::start`] answers `None` and the test skips,
//! saying so, unless `MISSION_REQUIRE_BROWSER=1` (set by `scripts/test.sh`, which installs it)
//! makes that a failure. Screenshots go to `MISSION_SCREENSHOT_DIR` when it is set.

use std::process::Stdio;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

/// The W3C WebDriver key under which an element reference comes back.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a wait for an element or a text may take.
const PATIENCE: Duration = Duration::from_secs(15);

/// The WebDriver code of the Tab key, for [`Browser::press`].
pub const TAB: &str = "\u{E004}";
/// The WebDriver code of the Enter key, for [`Browser::press`].
pub const ENTER: &str = "\u{E007}";

/// One browser session; the browser and its driver end when it is dropped, even when a failed
/// test never closed the session.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session (`None` where none is installed and
    /// none is required).
    pub async fn start() -> Option<Self> {
        let driver_path = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(driver_path) = driver_path else {
            crate::skip_unless_required("BROWSER", "chromedriver is not installed (scripts/test.sh installs it)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = tokio::process::Command::new(driver_path)
            .arg(format!("--port={port}"))
            // Its own process group, which the browsers it starts join: see `Drop`.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Ok(r) = http.get(format!("{base}/status")).send().await
                    && r.status().is_success()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("chromedriver ready");
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display())],
                "prefs": {"download.default_directory": profile.path().join("downloads").display().to_string()},
            }
        }}});
        let created: Value =
            http.post(format!("{base}/session")).json(&capabilities).send().await.unwrap().json().await.unwrap();
        let session = format!("{base}/session/{}", created["value"]["sessionId"].as_str().expect("session id"));
        Some(Self { http, session, driver, _profile: profile })
    }

    /// A WebDriver command of this session; answers its `value`.
    pub async fn call(&self, method: Method, path: &str, body: Value) -> Value {
        let request = self.http.request(method, format!("{}{path}", self.session));
        let request = if body.is_null() { request } else { request.json(&body) };
        let response = request.send().await.unwrap_or_else(|e| panic!("WebDriver {path}: {e}"));
        let response: Value = response.json().await.unwrap_or_else(|e| panic!("WebDriver {path}: {e}"));
        response["value"].clone()
    }

    /// Opens `url` and waits for its page to load.
    pub async fn goto(&self, url: &str) {
        self.call(Method::POST, "/url", json!({ "url": url })).await;
    }

    /// The page's title.
    pub async fn title(&self) -> String {
        self.call(Method::GET, "/title", Value::Null).await.as_str().unwrap_or_default().to_owned()
    }

    /// The address the browser shows.
    pub async fn current_url(&self) -> String {
        self.call(Method::GET, "/url", Value::Null).await.as_str().unwrap_or_default().to_owned()
    }

    /// The element `css` selects, waiting for it: after a click the next page may still be
    /// loading when the test asks.
    pub async fn element(&self, css: &str) -> String {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let found = self.call(Method::POST, "/element", json!({"using": "css selector", "value": css})).await;
            if let Some(id) = found[ELEMENT].as_str() {
                return id.to_owned();
            }
            assert!(tokio::time::Instant::now() < deadline, "no element {css}: {found}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many elements `css` selects now.
    pub async fn count(&self, css: &str) -> usize {
        let found = self.call(Method::POST, "/elements", json!({"using": "css selector", "value": css})).await;
        found.as_array().map_or(0, Vec::len)
    }

    /// Types `text` into the field `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self.element(css).await;
        self.call(Method::POST, &format!("/element/{field}/value"), json!({ "text": text })).await;
    }

    /// Empties the field `css` selects.
    pub async fn clear(&self, css: &str) {
        let field = self.element(css).await;
        self.call(Method::POST, &format!("/element/{field}/clear"), json!({})).await;
    }

    /// Clicks what `css` selects.
    pub async fn click(&self, css: &str) {
        let target = self.element(css).await;
        self.call(Method::POST, &format!("/element/{target}/click"), json!({})).await;
    }

    /// The visible text of what `css` selects.
    pub async fn text(&self, css: &str) -> String {
        let element = self.element(css).await;
        self.call(Method::GET, &format!("/element/{element}/text"), Value::Null).await.as_str().unwrap_or("").to_owned()
    }

    /// A property (`value`, `href`, …) of what `css` selects.
    pub async fn property(&self, css: &str, name: &str) -> Value {
        let element = self.element(css).await;
        self.call(Method::GET, &format!("/element/{element}/property/{name}"), Value::Null).await
    }

    /// Waits until the text of what `css` selects contains `needle`; answers that text.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let text = self.text(css).await;
            if text.contains(needle) {
                return text;
            }
            assert!(tokio::time::Instant::now() < deadline, "{css} never showed {needle:?}; it shows {text:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page; answers its result.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.call(Method::POST, "/execute/sync", json!({ "script": script, "args": args })).await
    }

    /// Runs `script` in the page as an asynchronous function body: it answers by calling
    /// `arguments[arguments.length - 1]` with its result (within the WebDriver's script timeout).
    pub async fn execute_async(&self, script: &str, args: Value) -> Value {
        self.call(Method::POST, "/execute/async", json!({ "script": script, "args": args })).await
    }

    /// The browser's cookie `name` for the current page's site (`value`, `httpOnly`, `sameSite`, …).
    pub async fn cookie(&self, name: &str) -> Value {
        self.call(Method::GET, &format!("/cookie/{name}"), Value::Null).await
    }

    /// Signs in to the web console at `url` as `username` with `password`, through its form.
    pub async fn sign_in_to_console(&self, url: &str, username: &str, password: &str) {
        self.goto(&format!("{url}/sign-in")).await;
        self.type_into("#username", username).await;
        self.type_into("#password", password).await;
        self.click("button[type=submit]").await;
        self.wait_for_text("h1", "Missions").await;
    }

    /// Presses the keys of `keys` one after another (letters, or [`TAB`] and [`ENTER`]), as
    /// a keyboard does: to whatever has the focus, through the browser's own input handling.
    pub async fn press(&self, keys: &str) {
        let strokes: Vec<Value> = keys
            .chars()
            .flat_map(|key| [json!({"type": "keyDown", "value": key}), json!({"type": "keyUp", "value": key})])
            .collect();
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": strokes}]});
        self.call(Method::POST, "/actions", actions).await;
    }

    /// Presses Tab until the focus is on what `css` selects, at most `limit` times; answers what
    /// the focus passed on the way (tag, then id, text or name). Fails on a focused element that
    /// draws no focus ring, or that comes before the one focused last in the page's reading
    /// order: the keyboard must go through a page the way it reads.
    pub async fn tab_to(&self, css: &str, limit: usize) -> Vec<String> {
        let step = "const [css, first] = arguments; const el = document.activeElement; \
            const style = getComputedStyle(el); \
            const ring = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0; \
            const last = first ? null : window.__lastFocus; \
            const forward = !last || !!(last.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING); \
            window.__lastFocus = el; \
            const name = el.id || (el.textContent || '').trim().slice(0, 40) || el.name || ''; \
            return { here: el.matches(css), ring, forward, name: el.tagName.toLowerCase() + ' ' + name }";
        let mut passed = Vec::new();
        for n in 0..limit {
            self.press(TAB).await;
            let focus = self.execute(step, json!([css, n == 0])).await;
            let name = focus["name"].as_str().unwrap_or_default().to_owned();
            assert_eq!(focus["ring"], true, "{name} has the focus but shows no ring (after {passed:?})");
            assert_eq!(focus["forward"], true, "Tab went back to {name} (after {passed:?})");
            if focus["here"] == true {
                return passed;
            }
            passed.push(name);
        }
        panic!("{limit} presses of Tab never reached {css}; the focus passed {passed:?}");
    }

    /// Accepts the page's `confirm()` dialog, waiting for it to open.
    pub async fn accept_dialog(&self) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let text = self.call(Method::GET, "/alert/text", Value::Null).await;
            if text.is_string() {
                self.call(Method::POST, "/alert/accept", json!({})).await;
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "no dialog opened: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The form controls of the page that a screen reader could not name: no `<label>`, no
    /// `aria-label` or `aria-labelledby`, and (for buttons) no text. Answered as their ids or
    /// names, for an assertion that the list is empty.
    pub async fn unlabelled_controls(&self) -> Vec<String> {
        let script = "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]\
            .filter(c => !(c.labels && c.labels.length) && !c.getAttribute('aria-label') \
                && !c.getAttribute('aria-labelledby') && !(c.tagName === 'BUTTON' && c.textContent.trim()))\
            .map(c => c.id || c.name || c.outerHTML.slice(0, 80))";
        let found = self.execute(script, json!([])).await;
        found.as_array().into_iter().flatten().map(|v| v.as_str().unwrap_or_default().to_owned()).collect()
    }

    /// Shows pages as on a phone (a 390×844 window) or a desktop (1280×800), in the dark or the
    /// light colour scheme (Chrome's media emulation, through ChromeDriver's DevTools bridge).
    pub async fn emulate(&self, phone: bool, dark: bool) {
        let (width, height) = if phone { (390, 844) } else { (1280, 800) };
        self.call(Method::POST, "/window/rect", json!({ "width": width, "height": height })).await;
        let scheme = if dark { "dark" } else { "light" };
        let features = json!([{ "name": "prefers-color-scheme", "value": scheme }]);
        let command = json!({ "cmd": "Emulation.setEmulatedMedia", "params": { "features": features } });
        self.call(Method::POST, "/goog/cdp/execute", command).await;
        let matches = self.execute("return matchMedia('(prefers-color-scheme: dark)').matches", json!([])).await;
        assert_eq!(matches, dark, "the colour scheme was not emulated");
    }

    /// Drags the files and folders at `paths` (on this machine) from outside the browser and
    /// drops them on the middle of what `css` selects, as a person dragging from a file manager
    /// does (Chrome's input emulation, through ChromeDriver's DevTools bridge).
    pub async fn drop_files(&self, css: &str, paths: &[&std::path::Path]) {
        let middle = "const r = document.querySelector(arguments[0]).getBoundingClientRect(); \
            return [r.left + r.width / 2, r.top + r.height / 2]";
        let at = self.execute(middle, json!([css])).await;
        let files: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let data = json!({ "items": [], "files": files, "dragOperationsMask": 1 });
        for kind in ["dragEnter", "dragOver", "drop"] {
            let params = json!({ "type": kind, "x": at[0], "y": at[1], "data": data });
            let command = json!({ "cmd": "Input.dispatchDragEvent", "params": params });
            self.call(Method::POST, "/goog/cdp/execute", command).await;
        }
    }

    /// Saves a screenshot as `{name}.png` in `MISSION_SCREENSHOT_DIR`, when that is set.
    pub async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("MISSION_SCREENSHOT_DIR") else { return };
        use base64::Engine as _;
        let png = self.call(Method::GET, "/screenshot", Value::Null).await;
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), bytes).unwrap();
    }

    /// Ends the session (the browser closes).
    ///
    /// Best effort: the test's checks are over by then, and a session end that chromedriver
    /// answers badly (CI once saw this call fail after every check had passed) must not fail it;
    /// `Drop` kills whatever is left either way.
    pub async fn close(&self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

impl Drop for Browser {
    /// Kills the driver's whole process group: killing the driver alone would leave its
    /// Chromium processes running, orphaned, after every test that failed before `close`.
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        }
    }
}
