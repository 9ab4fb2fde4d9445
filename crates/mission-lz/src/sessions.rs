//! The agent's side of interactive sessions ([`mission_api::sessions`]).
//!
//! Before a session job starts, the agent picks a free loopback port and a secret for it
//! ([`Sessions::prepare`]): its program finds them in `MISSION_SESSION_PORT` and
//! `MISSION_SESSION_TOKEN`, and the built-in kinds get their command (Jupyter Lab, VS Code)
//! with them. Once the port answers, the server hears that the session is ready
//! ([`watch`]). When the server orders a tunnel ([`open_tunnel`]), the agent opens one out
//! to it and serves the requests that come through it ([`mission_tunnel`]) by forwarding each
//! to its session's port, WebSockets included. A request for a job that is no session of this
//! agent's is a 404. Every tunnel of every replica ends here, so the agent is where a session's
//! traffic is seen whole: a session with an idle timeout ends once nothing went through it
//! for that long ([`Sessions::idle_end`]).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use mission_api::SessionKind;
use mission_api::lz::Assignment;
use mission_api::sessions::{
    BASE_PATH_VARIABLE, ENDING_WARNING_MINUTES, PORT_VARIABLE, TOKEN_HEADER, TOKEN_VARIABLE, base_path,
};
use uuid::Uuid;

use crate::jobs::JobContext;

/// How often a starting session's port is tried.
const READY_POLL: Duration = Duration::from_millis(200);

/// How long an idle session's program has between `SIGTERM` and `SIGKILL` (to save its work).
const IDLE_GRACE: Duration = Duration::from_secs(10);

/// The sessions this agent runs, and the tunnels it holds open.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    ports: Mutex<HashMap<Uuid, Arc<SessionPort>>>,
    /// The base URLs of the servers a tunnel is open to.
    tunnels: Mutex<HashSet<String>>,
    /// Sessions ended for being idle, with the reason their final report gives.
    idled: Mutex<HashMap<Uuid, String>>,
}

/// Where a session's app listens, the secret every request to it carries, and when traffic
/// last went through.
#[derive(Debug)]
struct SessionPort {
    port: u16,
    secret: String,
    kind: SessionKind,
    idle_timeout: Option<Duration>,
    last_active: AtomicU64,
    /// When its owner is to be warned that it nears its time limit, and the minutes then left.
    warn_at: Option<(Instant, u32)>,
    /// Connections to its app that are free for the next request.
    idle: Mutex<Vec<AppConnection>>,
    /// How its app is reached.
    reach: Mutex<Reach>,
}

/// A session as a batch system's job's record keeps it: its port, secret, kind and idle
/// timeout (minutes).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedSession {
    port: u16,
    secret: String,
    kind: SessionKind,
    idle_timeout: Option<u32>,
}

/// How the agent reaches a session's app.
#[derive(Debug, Clone)]
pub(crate) enum Reach {
    /// On the agent's own loopback (the process runner's jobs).
    Loopback,
    /// Not yet: the batch system has not started the job.
    Waiting,
    /// On a batch system's node, through a command that runs in the job's allocation.
    Node(NodeCommand),
}

/// A command that runs `mission lz-relay` inside a running batch job (`srun --jobid … --overlap
/// … mission lz-relay`), as the job's account, with the batch system's environment.
#[derive(Debug, Clone)]
pub(crate) struct NodeCommand {
    /// The program and its arguments, up to the relay's own.
    pub program: Vec<std::ffi::OsString>,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// The uid and gid it runs as, where not the agent's.
    pub ids: Option<(u32, u32)>,
}

impl NodeCommand {
    /// The command after `prefix` (a program that then runs it), with `args` after it.
    pub fn wrapped(&self, prefix: &[&str], args: &[std::ffi::OsString]) -> tokio::process::Command {
        let mut words = prefix.iter().map(std::ffi::OsString::from).chain(self.program.iter().cloned());
        let mut command = tokio::process::Command::new(words.next().expect("a program"));
        command.args(words).args(args).env_clear().envs(self.env.iter().cloned());
        if let Some((uid, gid)) = self.ids {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// The command with `args` after it, its stdin and stdout piped.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let mut command = self.wrapped(&[], &args);
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        command.stderr(std::process::Stdio::null()).kill_on_drop(true);
        command
    }
}

/// How long a probe of an app on a node may take.
const NODE_PROBE_LIMIT: Duration = Duration::from_secs(30);

/// How often a starting session's port is tried on a node (each try starts a job step).
const NODE_READY_POLL: Duration = Duration::from_secs(2);

impl Reach {
    /// Whether the app answers on `port`.
    async fn probe(&self, port: u16) -> bool {
        match self {
            Reach::Loopback => tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok(),
            Reach::Waiting => false,
            Reach::Node(node) => {
                let mut command = node.command(&["--probe", &port.to_string()]);
                command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
                let status = tokio::time::timeout(NODE_PROBE_LIMIT, command.status()).await;
                matches!(status, Ok(Ok(status)) if status.success())
            }
        }
    }

    /// How long between two probes.
    fn poll(&self) -> Duration {
        match self {
            Reach::Loopback => READY_POLL,
            Reach::Waiting | Reach::Node(_) => NODE_READY_POLL,
        }
    }

    /// A connection to the app on `port`.
    async fn connect(&self, port: u16) -> std::io::Result<Box<dyn AppIo>> {
        match self {
            Reach::Loopback => {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
                let _ = tcp.set_nodelay(true);
                Ok(Box::new(tcp))
            }
            Reach::Waiting => Err(std::io::Error::other("the job has not started yet")),
            Reach::Node(node) => {
                let mut child = node.command(&[&port.to_string()]).spawn()?;
                let (stdout, stdin) = (child.stdout.take(), child.stdin.take());
                let (Some(stdout), Some(stdin)) = (stdout, stdin) else {
                    return Err(std::io::Error::other("no pipes to the relay"));
                };
                Ok(Box::new(Relayed { io: tokio::io::join(stdout, stdin), _relay: child }))
            }
        }
    }
}

/// A connection to a session's app.
pub(crate) trait AppIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> AppIo for T {}

/// A connection through a relay on a node; the relay ends with it.
struct Relayed {
    io: tokio::io::Join<tokio::process::ChildStdout, tokio::process::ChildStdin>,
    _relay: tokio::process::Child,
}

impl tokio::io::AsyncRead for Relayed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Relayed {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A kept-alive HTTP/1.1 connection to a session's app.
type AppConnection = hyper::client::conn::http1::SendRequest<mission_tunnel::Body>;

/// Connections kept per session for the next requests.
const IDLE_CONNECTIONS: usize = 8;

/// Milliseconds since the agent's first look at the clock: when a session last had traffic.
fn now_ms() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed().as_millis() as u64
}

impl Sessions {
    /// Prepares a session for `job`: a port and a secret; answers the job as it runs (a
    /// built-in kind's command in place of the mission's) and the environment its program gets.
    pub fn prepare(&self, job: Assignment) -> std::io::Result<(Assignment, Vec<(&'static str, String)>)> {
        let Some(request) = job.session else { return Ok((job, Vec::new())) };
        let kind = request.kind;
        let port = free_loopback_port()?;
        let secret = random_secret()?;
        let base = base_path(job.job_id);
        let mut env = vec![
            (PORT_VARIABLE, port.to_string()),
            (BASE_PATH_VARIABLE, base.clone()),
            (TOKEN_VARIABLE, secret.clone()),
        ];
        let command = match kind {
            SessionKind::Web => job.command.clone(),
            SessionKind::Jupyter => {
                // Jupyter takes its token from the environment, never from a command line that
                // other users of the host could read.
                env.push(("JUPYTER_TOKEN", secret.clone()));
                vec![
                    "jupyter".into(),
                    "lab".into(),
                    "--no-browser".into(),
                    "--ip=127.0.0.1".into(),
                    format!("--port={port}"),
                    "--ServerApp.port_retries=0".into(),
                    format!("--ServerApp.base_url={base}"),
                ]
            }
            SessionKind::Vscode => vec![
                "code-server".into(),
                "--auth=none".into(),
                format!("--bind-addr=127.0.0.1:{port}"),
                format!("--abs-proxy-base-path={}", base.trim_end_matches('/')),
            ],
        };
        let session = SessionPort {
            port,
            secret,
            kind,
            idle_timeout: request.idle_timeout.map(|minutes| Duration::from_secs(u64::from(minutes) * 60)),
            last_active: AtomicU64::new(now_ms()),
            idle: Mutex::default(),
            reach: Mutex::new(Reach::Loopback),
            warn_at: job.time_limit.map(|limit| {
                let left = limit.min(ENDING_WARNING_MINUTES);
                (Instant::now() + Duration::from_secs(u64::from(limit - left) * 60), left)
            }),
        };
        self.ports.lock().expect("not poisoned").insert(job.job_id, Arc::new(session));
        Ok((Assignment { command, ..job }, env))
    }

    /// What a later run of the agent needs to reach the session of `job_id` again (a batch
    /// system's job outlives its ctx), if it is one.
    pub fn saved(&self, job_id: Uuid) -> Option<SavedSession> {
        let session = self.port(job_id)?;
        let idle_timeout = session.idle_timeout.map(|idle| (idle.as_secs() / 60) as u32);
        Some(SavedSession { port: session.port, secret: session.secret.clone(), kind: session.kind, idle_timeout })
    }

    /// Takes back the session of `job_id` that an earlier run of the agent started, unreached
    /// until its runner says how to reach it. (Its time-limit warning was given, or is lost.)
    pub fn restore(&self, job_id: Uuid, saved: SavedSession) {
        let session = SessionPort {
            port: saved.port,
            secret: saved.secret,
            kind: saved.kind,
            idle_timeout: saved.idle_timeout.map(|minutes| Duration::from_secs(u64::from(minutes) * 60)),
            last_active: AtomicU64::new(now_ms()),
            warn_at: None,
            idle: Mutex::default(),
            reach: Mutex::new(Reach::Waiting),
        };
        self.ports.lock().expect("not poisoned").insert(job_id, Arc::new(session));
    }

    /// Whether `job_id` is a session of this agent's.
    pub fn is_session(&self, job_id: Uuid) -> bool {
        self.port(job_id).is_some()
    }

    /// The app of `job_id`'s session is reached as `reach` from now on (nothing for a job that
    /// is no session).
    pub fn reach(&self, job_id: Uuid, reach: Reach) {
        if let Some(session) = self.port(job_id) {
            *session.reach.lock().expect("not poisoned") = reach;
        }
    }

    /// The session of `job_id` ended.
    pub fn forget(&self, job_id: Uuid) {
        self.ports.lock().expect("not poisoned").remove(&job_id);
    }

    /// Why the session of `job_id` was ended, if it was for being idle: its end then counts as
    /// the session's normal end (`completed`, its results returned), not as a stop.
    pub fn idle_end(&self, job_id: Uuid) -> Option<String> {
        self.idled.lock().expect("not poisoned").remove(&job_id)
    }

    fn port(&self, job_id: Uuid) -> Option<Arc<SessionPort>> {
        self.ports.lock().expect("not poisoned").get(&job_id).cloned()
    }
}

/// 32 random hex digits.
fn random_secret() -> std::io::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| std::io::Error::other("no randomness"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A port of the loopback interface no one listens on now (the app binds it next; another
/// program could take it first, and the session then fails to start, as a port clash does).
fn free_loopback_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Tries a started session's port until it answers, then tells the server (once), which shows
/// the session's URL from then on; gives up when the session ends first. Then, while it runs:
/// warns its owner (through the server) [`ENDING_WARNING_MINUTES`] before its time limit, and,
/// with an idle timeout, ends it once nothing went through it for that long.
pub(crate) fn watch(ctx: JobContext, job_id: Uuid) {
    tokio::spawn(async move {
        let session = loop {
            let Some(session) = ctx.sessions.port(job_id) else { return };
            let reach = session.reach.lock().expect("not poisoned").clone();
            if reach.probe(session.port).await {
                session.last_active.store(now_ms(), Ordering::Relaxed);
                break session;
            }
            tokio::time::sleep(reach.poll()).await;
        };
        if let Err(e) = ctx.client.delivered(|| ctx.client.session_ready(job_id)).await {
            tracing::warn!(%job_id, "telling the server that the session is ready: {e}");
        }
        let mut warn_at = session.warn_at;
        let look_every =
            session.idle_timeout.map(|idle| (idle / 6).clamp(Duration::from_secs(1), Duration::from_secs(30)));
        loop {
            let next = match (warn_at, look_every) {
                (None, None) => return,
                (Some((at, _)), None) => at,
                (None, Some(every)) => Instant::now() + every,
                (Some((at, _)), Some(every)) => at.min(Instant::now() + every),
            };
            tokio::time::sleep_until(next.into()).await;
            let Some(session) = ctx.sessions.port(job_id) else { return };
            if let Some((at, minutes_left)) = warn_at
                && Instant::now() >= at
            {
                warn_at = None;
                let warned = ctx.client.delivered(|| ctx.client.session_ending(job_id, minutes_left)).await;
                if let Err(e) = warned {
                    tracing::warn!(%job_id, "warning the session's owner of its time limit: {e}");
                }
            }
            if let Some(idle_timeout) = session.idle_timeout {
                let idle = Duration::from_millis(now_ms().saturating_sub(session.last_active.load(Ordering::Relaxed)));
                if idle >= idle_timeout {
                    let minutes = idle_timeout.as_secs() / 60;
                    let reason = format!("idle timeout: no request for {minutes} minute(s)");
                    ctx.sessions.idled.lock().expect("not poisoned").insert(job_id, reason);
                    ctx.book.stop_job(job_id, IDLE_GRACE);
                    return;
                }
            }
        }
    });
}

/// Opens a tunnel for sessions to the server at `url` (the one the agent connects to when
/// none), unless one is open to it, and serves it until it closes.
pub(crate) fn open_tunnel(ctx: JobContext, url: Option<String>) {
    let base = url.unwrap_or_else(|| ctx.client.server().to_owned());
    if !ctx.sessions.tunnels.lock().expect("not poisoned").insert(base.clone()) {
        return;
    }
    tokio::spawn(async move {
        match ctx.client.tunnel(&base).await {
            Ok(io) => {
                let serving = ctx.clone();
                let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let forwarded = forward(serving.clone(), request.map(mission_tunnel::boxed));
                    async move { Ok::<_, Infallible>(forwarded.await) }
                });
                if let Err(e) = mission_tunnel::serve(io, service).await {
                    tracing::debug!("the session tunnel to {base} closed: {e}");
                }
            }
            Err(e) => tracing::warn!("opening a session tunnel to {base}: {e}"),
        }
        ctx.sessions.tunnels.lock().expect("not poisoned").remove(&base);
    });
}

/// The agent's sessions served in-process to the server it is embedded in (see
/// [`mission_tunnel::LocalTunnel`]): the same handling as a tunnel's requests get, by a call.
pub(crate) fn local_service(ctx: JobContext) -> mission_tunnel::LocalService {
    Arc::new(move |request| Box::pin(forward(ctx.clone(), request)))
}

/// One request from the tunnel, forwarded to its session's app (or a job shell's WebSocket).
async fn forward(ctx: JobContext, request: Request<mission_tunnel::Body>) -> Response<mission_tunnel::Body> {
    if mission_tunnel::is_shell(&request) {
        return crate::shell::open(&ctx, request).await;
    }
    let job_id = request
        .headers()
        .get(mission_tunnel::SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Uuid::parse_str(v).ok());
    let Some((job_id, session)) = job_id.and_then(|id| ctx.sessions.port(id).map(|session| (id, session))) else {
        let mut refusal = answer(StatusCode::NOT_FOUND, "no such session on this landing zone");
        refusal.headers_mut().insert(mission_tunnel::NO_SESSION_HEADER, HeaderValue::from_static("1"));
        return refusal;
    };
    session.last_active.store(now_ms(), Ordering::Relaxed);
    match to_app(request, &session).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(%job_id, "forwarding to the session's app: {e}");
            answer(StatusCode::BAD_GATEWAY, &format!("the session's app did not answer on its port: {e}"))
        }
    }
}

async fn to_app(
    request: Request<mission_tunnel::Body>,
    session: &Arc<SessionPort>,
) -> Result<Response<mission_tunnel::Body>, mission_tunnel::BoxError> {
    let mut sender = connection(session).await?;

    let (mut parts, body) = request.into_parts();
    let upgrade = parts.headers.remove(mission_tunnel::UPGRADE_HEADER);
    mission_tunnel::strip_tunnel_headers(&mut parts.headers);
    // The app sees the host the browser asked for, as apps that check a WebSocket's origin
    // against their host (Jupyter) need.
    let host = parts.headers.get("x-forwarded-host").cloned();
    let host = host.unwrap_or_else(|| HeaderValue::from_str(&format!("127.0.0.1:{}", session.port)).expect("ASCII"));
    parts.headers.insert(header::HOST, host);
    let secret = HeaderValue::from_str(&session.secret).expect("tokens are ASCII");
    parts.headers.insert(TOKEN_HEADER, secret.clone());
    if session.kind == SessionKind::Jupyter {
        let token = HeaderValue::from_str(&format!("token {}", session.secret)).expect("ASCII");
        parts.headers.insert(header::AUTHORIZATION, token);
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    parts.uri = path.parse()?;
    parts.version = hyper::Version::HTTP_11;

    let Some(protocol) = upgrade else {
        let response = sender.send_request(Request::from_parts(parts, mission_tunnel::boxed(body))).await;
        give_back(session, sender);
        let response = response?;
        let (mut parts, body) = response.into_parts();
        mission_tunnel::strip_hop_by_hop(&mut parts.headers);
        mission_tunnel::strip_tunnel_headers(&mut parts.headers);
        return Ok(Response::from_parts(parts, mission_tunnel::boxed(body)));
    };
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.headers.insert(header::UPGRADE, protocol);
    let mut response = sender.send_request(Request::from_parts(parts, mission_tunnel::empty())).await?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (mut parts, body) = response.into_parts();
        mission_tunnel::strip_hop_by_hop(&mut parts.headers);
        mission_tunnel::strip_tunnel_headers(&mut parts.headers);
        return Ok(Response::from_parts(parts, mission_tunnel::boxed(body)));
    }
    let mut headers = response.headers().clone();
    mission_tunnel::strip_hop_by_hop(&mut headers);
    mission_tunnel::strip_tunnel_headers(&mut headers);
    let upgraded = hyper::upgrade::on(&mut response).await?;
    let (to_server, from_app) = mission_tunnel::channel_body();
    let upgraded = Active { io: TokioIo::new(upgraded), session: session.clone() };
    tokio::spawn(mission_tunnel::splice(upgraded, body, to_server));
    let mut answer = Response::new(from_app);
    *answer.headers_mut() = headers;
    answer.headers_mut().insert(mission_tunnel::UPGRADED_HEADER, HeaderValue::from_static("1"));
    Ok(answer)
}

/// A free kept-alive connection to the session's app, or a new one.
async fn connection(session: &SessionPort) -> Result<AppConnection, mission_tunnel::BoxError> {
    while let Some(sender) = session.idle.lock().expect("not poisoned").pop() {
        if sender.is_ready() {
            return Ok(sender);
        }
    }
    let reach = session.reach.lock().expect("not poisoned").clone();
    let io = reach.connect(session.port).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection.with_upgrades());
    Ok(sender)
}

/// Keeps `sender` for the session's next request once its answer has been read (unless the
/// app closes it, or enough are kept).
fn give_back(session: &Arc<SessionPort>, mut sender: AppConnection) {
    let session = session.clone();
    tokio::spawn(async move {
        if sender.ready().await.is_ok() {
            let mut idle = session.idle.lock().expect("not poisoned");
            if idle.len() < IDLE_CONNECTIONS {
                idle.push(sender);
            }
        }
    });
}

/// A plain-text answer of the agent's own.
pub(crate) fn answer(status: StatusCode, text: &str) -> Response<mission_tunnel::Body> {
    let mut response = Response::new(mission_tunnel::full(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// An upgraded connection to a session's app whose every read and write counts as activity.
struct Active<IO> {
    io: IO,
    session: Arc<SessionPort>,
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Active<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.session.last_active.store(now_ms(), Ordering::Relaxed);
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Active<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.session.last_active.store(now_ms(), Ordering::Relaxed);
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
