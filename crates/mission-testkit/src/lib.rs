//! Test helpers (unpublished): [`TestServer`] runs the real server on 127.0.0.1 with a free port
//! and a temporary data dir, and signs users in through the real device flow; [`S3Server`] runs an
//! S3-compatible server for cargo-bay tests; [`PostgresDatabase`] makes a fresh database on the
//! PostgreSQL test server; [`Browser`] drives headless Chromium over WebDriver; [`Receiver`] takes
//! webhook deliveries; [`FakeAgent`] speaks the landing-zone protocol by hand; [`Registry`] serves an image archive
//! as a registry, and [`podman_names_of`] finds what agents named the images they loaded;
//! [`api_compat`] finds the breaking changes between two OpenAPI documents.

mod agent;
pub mod api_compat;
mod browser;
mod host_account;
mod podman;
mod registry;
mod s3;
mod webhooks;
mod websocket;

pub use agent::{FakeAgent, Lines, lines};
pub use browser::{Browser, ENTER, TAB};
pub use host_account::HostAccount;
pub use mission_store::test_support::PostgresDatabase;
pub use podman::{forget_podman_image, podman_command, podman_names_of};
pub use registry::Registry;
pub use s3::S3Server;
pub use webhooks::{Received, Receiver};
pub use websocket::WebSocket;

use std::sync::Arc;

use mission_client::auth::{DeviceAuth, Prompt};
use mission_client::{Client, DeviceAuthorization};
use mission_server::{AppState, Server, ServerConfig};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Skips the calling test where this machine lacks something it needs, saying `why` on stderr —
/// unless `MISSION_REQUIRE_<requirement>` is set (`scripts/test.sh` sets every one, after
/// installing what they name), where the lack fails the test: CI never passes by skipping.
pub fn skip_unless_required(requirement: &str, why: impl std::fmt::Display) {
    let variable = format!("MISSION_REQUIRE_{requirement}");
    let required = std::env::var(&variable).is_ok_and(|value| !value.is_empty() && value != "0");
    assert!(!required, "{variable} is set, but {why}");
    eprintln!("SKIPPED: {why}");
}

/// Signs `username` in on the server at `url` through the device flow, approving the code via
/// `POST /activate` with `password`: for servers that are not a [`TestServer`] (processes).
pub async fn device_sign_in(url: &str, username: &str, password: &str) -> (mission_client::Tokens, DeviceAuth) {
    let auth = DeviceAuth::new(url, "mission-api").token_file("").prompt(Prompt::Print);
    let pending = auth.start().await.expect("device code");
    let form = [
        ("user_code", pending.authorization().user_code.as_str()),
        ("username", username),
        ("password", password),
        ("action", "approve"),
    ];
    let page = reqwest::Client::new().post(format!("{url}/activate")).form(&form).send().await.expect("POST /activate");
    assert_eq!(page.status(), 200, "approval failed");
    (auth.finish(pending).await.expect("tokens"), auth)
}

/// A web app for sessions' tests and benchmarks, on Python's standard library alone: files of
/// its work dir by their paths; any other `GET` says what it received (path, whether the
/// session's secret came, `Authorization`, `Cookie`, base path); a `POST` the size and SHA-256
/// of its body; a WebSocket on any path echoes each message (one frame each). It prints
/// `PORT=…` first.
pub const SESSION_APP: &str = r#"
import base64, hashlib, http.server, os
PORT = int(os.environ["MISSION_SESSION_PORT"])
TOKEN = os.environ["MISSION_SESSION_TOKEN"]
class App(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm holds the
    # body for the client's delayed ACK (40 ms a request).
    disable_nagle_algorithm = True
    def reply(self, text):
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.echo()
        if os.path.isfile(self.path.lstrip("/").split("?")[0]):
            return super().do_GET()
        if self.path == "/set-cookies":
            # An app that sets cookies named like Mission's, and for paths and domains beyond it.
            self.send_response(200)
            for cookie in ("mission_session=planted; Path=/", "theme=dark; Path=/api/v1",
                           "wide=1; Domain=localhost; Path=/", "own=1"):
                self.send_header("Set-Cookie", cookie)
            self.send_header("Content-Length", "0")
            return self.end_headers()
        if self.path == "/tunnel-headers":
            # An app that answers with headers of the tunnel's own: none may reach the server.
            self.send_response(200)
            for name in ("Mission-No-Session", "Mission-Upgraded", "Mission-Shell"):
                self.send_header(name, "1")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        token = "ok" if self.headers.get("x-mission-session-token") == TOKEN else "missing"
        tunnel = ",".join(sorted(name.lower() for name in self.headers.keys() if name.lower().startswith("mission-")))
        self.reply(f"path={self.path}\ntoken={token}\nauthorization={self.headers.get('Authorization')}\n"
                   f"authorizations={self.headers.get_all('Authorization')}\n"
                   f"cookie={self.headers.get('Cookie')}\nbase={os.environ['MISSION_SESSION_BASE_PATH']}\n"
                   f"csrf={self.headers.get('X-CSRF-Token')}\nforwarded_for={self.headers.get('X-Forwarded-For')}\n"
                   f"tunnel_headers={tunnel}\n")
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(f"received={len(body)} sha256={hashlib.sha256(body).hexdigest()}\n")
    def echo(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, length = head[0] & 15, head[1] & 127
            if length == 126:
                length = int.from_bytes(self.rfile.read(2), "big")
            elif length == 127:
                length = int.from_bytes(self.rfile.read(8), "big")
            mask = self.rfile.read(4) if head[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                self.wfile.flush()
                return
            if length < 126:
                size = bytes([length])
            elif length < 65536:
                size = bytes([126]) + length.to_bytes(2, "big")
            else:
                size = bytes([127]) + length.to_bytes(8, "big")
            self.wfile.write(bytes([0x80 | opcode]) + size + data)
            self.wfile.flush()
    def log_message(self, *args):
        pass
print(f"PORT={PORT}", flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), App).serve_forever()
"#;

/// Signs `username` in to the web console at `url` through its sign-in form, as a browser
/// does; answers the session's `Cookie` header value (`mission_session=…`).
pub async fn console_cookie(url: &str, username: &str, password: &str) -> String {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("a client");
    let set_cookie = |response: &reqwest::Response, name: &str| {
        response
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.split(';').next()?.strip_prefix(&format!("{name}=")).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {name} cookie"))
    };
    let form = http.get(format!("{url}/sign-in")).send().await.expect("GET /sign-in");
    let csrf = set_cookie(&form, "mission_sign_in");
    let fields = [("username", username), ("password", password), ("csrf", csrf.as_str())];
    let signed_in = http
        .post(format!("{url}/sign-in"))
        .header(reqwest::header::COOKIE, format!("mission_sign_in={csrf}"))
        .form(&fields)
        .send()
        .await
        .expect("POST /sign-in");
    assert!(signed_in.status().is_redirection(), "signing in to the console: {}", signed_in.status());
    format!("mission_session={}", set_cookie(&signed_in, "mission_session"))
}

/// The repository's root, where `scripts/` lives.
fn workspace_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Password every test account gets.
pub const PASSWORD: &str = "correct horse battery";

/// A running server for one test; stops when dropped.
pub struct TestServer {
    /// Base URL, `http://127.0.0.1:PORT`: where this server listens (its public URL may name
    /// another replica of the service).
    pub url: String,
    /// The server's state (store, config).
    pub app: AppState,
    /// A client signed in as `alice`, an ordinary user (built-in identity provider only).
    pub client: Client,
    /// The data dir; removed on drop.
    pub data_dir: TempDir,
    config: ServerConfig,
    stop: Option<oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server on the embedded defaults (no bootstrap admin, device-code interval 0 so
    /// sign-ins do not wait) and signs in `alice`.
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// Like [`TestServer::spawn`], with `adjust` applied to the configuration first.
    pub async fn spawn_with(adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        let mut this = Self::spawn_signed_out_with(adjust).await;
        if this.app.idp.is_some() {
            // A server started on another test server's data dir finds alice there already.
            if this.app.store.user_by_username("alice").await.expect("store").is_none() {
                this.add_user("alice", false).await;
            }
            this.client = this.sign_in("alice").await;
        }
        this
    }

    /// Like [`TestServer::spawn_with`], signing nobody in: the client carries no token (for a
    /// configuration a sign-in could not get through in time, such as device codes that live
    /// a second).
    pub async fn spawn_signed_out_with(adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig::new(data_dir.path().join("data"));
        config.bootstrap_admin = false;
        config.device_poll_interval = 0;
        adjust(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let (server, stop, serving) = Self::serve(listener, config.clone()).await;
        let url = server.0;
        let app = server.1;
        // With an external identity provider there is no one to sign in here: the client then
        // carries no token until the test gives it one.
        let client = Client::with_access_token(&url, "").expect("client");
        Self { url, app, client, data_dir, config, stop: Some(stop), serving: Some(serving) }
    }

    async fn serve(
        listener: TcpListener,
        config: ServerConfig,
    ) -> ((String, AppState), oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
        let server = Server::new(listener, config).await.expect("server starts");
        let url = server.local_url();
        let app = server.app();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        ((url, app), stop, serving)
    }

    /// Stops the server (letting in-flight requests finish), then starts it again on the same
    /// port and data dir; clients keep working.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.start().await;
    }

    /// Stops the server, letting in-flight requests finish and its tasks end (a replica that
    /// led gives up the lead).
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(serving) = self.serving.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(20), serving).await.expect("server stops");
        }
    }

    /// Starts a [stopped](TestServer::stop) server again on its port and data dir.
    pub async fn start(&mut self) {
        assert!(self.serving.is_none(), "the server is stopped");
        let address = self.url.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind(&address).await.expect("bind the same port again");
        let ((_, app), stop, serving) = Self::serve(listener, self.config.clone()).await;
        self.app = app;
        self.stop = Some(stop);
        self.serving = Some(serving);
    }

    /// Registers a landing zone on a station directly in the store; answers its id and agent
    /// token.
    pub async fn register_lz(&self, station_id: mission_client::Uuid, name: &str) -> (mission_client::Uuid, String) {
        let token = format!("test-token-{}", mission_client::Uuid::new_v4());
        let hash = mission_server::idp::hash_secret(&token);
        let id = self.app.store.rotate_lz_token(station_id, name, &hash, mission_store::now()).await.expect("register");
        (id, token)
    }

    /// Creates a built-in account with [`PASSWORD`].
    pub async fn add_user(&self, username: &str, admin: bool) {
        mission_server::users::add_user(&self.app.store, username, Some(PASSWORD), admin, None)
            .await
            .expect("add user");
    }

    /// The device-flow client of this server, storing nothing and approving nothing by itself.
    pub fn device_auth(&self) -> DeviceAuth {
        DeviceAuth::new(&self.url, &self.app.config.audience).token_file("").prompt(Prompt::Print)
    }

    /// Approves `user_code` as `username` through `POST /activate`; returns the page's status.
    pub async fn activate(&self, user_code: &str, username: &str, password: &str, action: &str) -> (u16, String) {
        let form = [("user_code", user_code), ("username", username), ("password", password), ("action", action)];
        let response = reqwest::Client::new()
            .post(format!("{}/activate", self.url))
            .form(&form)
            .send()
            .await
            .expect("POST /activate");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// Signs `username` in through the device flow, approving via `/activate`.
    pub async fn sign_in(&self, username: &str) -> Client {
        let auth = self.device_auth();
        let pending = auth.start().await.expect("device code");
        let (status, page) = self.activate(&pending.authorization().user_code, username, PASSWORD, "approve").await;
        assert_eq!(status, 200, "approval failed: {page}");
        let tokens = auth.finish(pending).await.expect("tokens");
        Client::with_tokens(&self.url, tokens, auth).expect("client")
    }

    /// A prompt that records the authorization it is shown.
    pub fn recording_prompt() -> (Prompt, Arc<std::sync::Mutex<Option<DeviceAuthorization>>>) {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let sink = seen.clone();
        (Prompt::Callback(Arc::new(move |a: &DeviceAuthorization| *sink.lock().unwrap() = Some(a.clone()))), seen)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The files of a zip archive (name, content) in its order, read by Python's `zipfile`, a reader
/// independent of the server's writer that checks every CRC and size.
pub fn unzip(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("archive.zip");
    std::fs::write(&path, archive).expect("write the archive");
    let read = "import base64, json, sys, zipfile\n\
                z = zipfile.ZipFile(sys.argv[1])\n\
                assert z.testzip() is None, 'a CRC does not match'\n\
                print(json.dumps([[i.filename, base64.b64encode(z.read(i)).decode()] for i in z.infolist()]))";
    let out = std::process::Command::new("python3").args(["-c", read]).arg(&path).output().expect("run python3");
    assert!(out.status.success(), "not a valid zip archive: {}", String::from_utf8_lossy(&out.stderr));
    let files: Vec<(String, String)> = serde_json::from_slice(&out.stdout).expect("python's listing");
    use base64::Engine as _;
    files
        .into_iter()
        .map(|(name, data)| (name, base64::engine::general_purpose::STANDARD.decode(data).expect("base64")))
        .collect()
}
