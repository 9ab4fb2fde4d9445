//! Interactive sessions through the server: the proxy at `/sessions/{job_id}/…` and the
//! tunnels agents open for it.
//!
//! A session is a job ([`mission_api::sessions`]) whose app serves HTTP on a loopback port of its
//! landing zone. Its owner alone reaches it (and the managers of its job's project, where its
//! owner shares it with them); everyone else gets a 404, as for a job they may not see. The proxy
//! strips Mission's own credentials (every bearer token, the console's cookies and CSRF token)
//! and every header of the tunnel's own before a request goes on (an app's own `Authorization`
//! scheme passes; `X-Forwarded-For` is the address this server saw), and sends it through the
//! tunnel of the job's landing zone ([`mission_tunnel`]): one connection per agent and replica,
//! which the agent opens out when this replica orders it to
//! ([`Order::Tunnel`](mission_api::lz::Order::Tunnel)), so the compute host needs no inbound port.
//! WebSockets travel the same way, each upgraded connection bounded as the tunnel's streams are.
//! No cookie an app sets may be named like Mission's own, nor name a domain.
//!
//! Where a session's pages run matters, since they run whatever its app sends:
//! - **On an origin of its own** (`--sessions-url https://*.sessions.example.org`): each session
//!   at `https://{job_id}.sessions.example.org/sessions/{job_id}/`, where no page of the console,
//!   the API or another session is same-origin, and the console's cookie is never sent. A browser
//!   that opens a session from the console (with its cookie) is sent there through a one-time
//!   handshake ([`HANDSHAKE_PATH`]) that sets a cookie of that session's alone ([`APP_COOKIE`]);
//!   nothing else is served on a session's host. Programs keep reaching sessions with a bearer
//!   token at the console's origin (no browser sends one by itself). This is the mode for apps
//!   one does not trust.
//! - **Under the console's origin** (no sessions URL): the app's pages are same-origin with the
//!   console, so an app's scripts could read console pages and act as whoever opens the session.
//!   The app's cookies are kept to its own path (a `Path` that reaches the console or the API
//!   becomes the session's root). Only for apps one trusts as one trusts the console.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioIo;
use mission_api::{Job, JobStatus, ProjectRole, SessionKind};
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

use crate::AppState;
use crate::domain::Principal;
use crate::http::error::{ApiError, ApiResult};
use crate::http::routes::lz::Agent;

/// How long a request waits for the agent to open a tunnel it was ordered to.
const TUNNEL_WAIT: Duration = Duration::from_secs(10);

/// How long a replica trusts what it read of a running session (its owner, kind and landing
/// zone) before reading it again: not a read of the database per request. A session that ended
/// meanwhile is no longer known to its agent, which says so, and the route is read again.
const ROUTE_TTL: Duration = Duration::from_secs(2);

/// Where a session's own origin hands a browser its cookie: `{origin}{HANDSHAKE_PATH}?code=…&next=…`.
pub const HANDSHAKE_PATH: &str = "/_mission/handshake";

/// The cookie that lets a browser into one session on that session's own origin (host-only, so
/// no other origin gets it).
pub const APP_COOKIE: &str = "mission_app";

/// How long a handshake's code may wait to be used (once).
const HANDSHAKE_TTL: Duration = Duration::from_secs(60);

/// How long a session's cookie lets its holder in (the route is checked on every request, so a
/// manager the session is no longer shared with is refused before it expires).
const APP_COOKIE_TTL: Duration = Duration::from_secs(12 * 3600);

/// What a handshake's code and a session's cookie say, sealed for the session's job
/// ([`crate::services::sealing`]): no one else can make one, nor move one to another session.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Pass {
    /// `handshake` or `cookie`: one is never taken for the other.
    purpose: String,
    user_id: Uuid,
    /// Seconds since the epoch.
    expires: i64,
    /// Tells a handshake's code from every other, so it is used once.
    nonce: String,
}

/// Where a running, ready session's requests go.
#[derive(Debug, Clone)]
struct Route {
    user_id: Uuid,
    kind: SessionKind,
    lz_id: Uuid,
    /// Who else may open it: the managers of its job's project, where its owner shares it.
    managers: Arc<[Uuid]>,
}

impl Route {
    /// Whether `user_id` may open the session: its owner, or a manager it is shared with.
    fn opens_for(&self, user_id: Uuid) -> bool {
        self.user_id == user_id || self.managers.contains(&user_id)
    }
}

/// The tunnels agents opened to this replica, by landing zone, and the upgraded connections
/// (WebSockets) that go through them.
pub struct Tunnels {
    open: Mutex<HashMap<Uuid, OpenTunnel>>,
    /// The embedded landing zone's in-process tunnel, where this server runs one.
    local: Mutex<Option<(Uuid, mission_tunnel::LocalTunnel)>>,
    /// Routes of sessions read lately, by job, with when they were read.
    routes: Mutex<HashMap<Uuid, (tokio::time::Instant, Route)>>,
    /// Handshake codes used on this replica (their nonces), with when they expire.
    spent: Mutex<HashMap<String, i64>>,
    /// Woken whenever a tunnel opens.
    opened: Notify,
    /// One permit per upgraded connection of a client: they outlive the server's connection
    /// slots, so they have a bound of their own.
    upgraded: Arc<Semaphore>,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.lock().map(|open| open.len()).unwrap_or_default();
        f.debug_struct("Tunnels").field("open", &open).finish_non_exhaustive()
    }
}

/// How a request reaches a landing zone's agent.
enum ToAgent {
    /// Through the tunnel it opened.
    Tunnel(SendRequest<mission_tunnel::Body>),
    /// By a call: it is embedded in this process.
    Local(mission_tunnel::LocalService),
}

impl ToAgent {
    async fn send(
        self,
        request: hyper::Request<mission_tunnel::Body>,
    ) -> Result<hyper::Response<mission_tunnel::Body>, hyper::Error> {
        match self {
            ToAgent::Tunnel(mut sender) => Ok(sender.send_request(request).await?.map(mission_tunnel::boxed)),
            ToAgent::Local(service) => Ok(service(request).await),
        }
    }
}

struct OpenTunnel {
    /// Tells this tunnel from a later one of the same agent.
    serial: u64,
    sender: SendRequest<mission_tunnel::Body>,
}

impl Tunnels {
    /// No tunnels yet; at most `max_upgraded` upgraded client connections at once.
    pub fn new(max_upgraded: usize) -> Self {
        Tunnels {
            routes: Mutex::new(HashMap::new()),
            spent: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            local: Mutex::new(None),
            opened: Notify::new(),
            upgraded: Arc::new(Semaphore::new(max_upgraded)),
        }
    }

    /// The route of session `job_id` read within [`ROUTE_TTL`], if there is one.
    fn cached_route(&self, job_id: Uuid) -> Option<Route> {
        let routes = self.routes.lock().expect("not poisoned");
        routes.get(&job_id).filter(|(read, _)| read.elapsed() < ROUTE_TTL).map(|(_, route)| route.clone())
    }

    /// Remembers the route of session `job_id`, just read.
    fn remember_route(&self, job_id: Uuid, route: Route) {
        let mut routes = self.routes.lock().expect("not poisoned");
        if routes.len() >= 10_000 {
            routes.retain(|_, (read, _)| read.elapsed() < ROUTE_TTL);
        }
        routes.insert(job_id, (tokio::time::Instant::now(), route));
    }

    /// Forgets the route of session `job_id` (its agent no longer knows it).
    fn forget_route(&self, job_id: Uuid) {
        self.routes.lock().expect("not poisoned").remove(&job_id);
    }

    /// The embedded landing zone `lz_id` is reached through `tunnel`, in this process.
    pub fn attach_local(&self, lz_id: Uuid, tunnel: mission_tunnel::LocalTunnel) {
        *self.local.lock().expect("not poisoned") = Some((lz_id, tunnel));
    }

    /// The in-process service of `lz_id`, if it is the embedded landing zone and its agent is up.
    fn local(&self, lz_id: Uuid) -> Option<mission_tunnel::LocalService> {
        let local = self.local.lock().expect("not poisoned");
        local.as_ref().filter(|(id, _)| *id == lz_id).and_then(|(_, tunnel)| tunnel.service())
    }

    /// The open tunnel of `lz_id`, if one is.
    fn sender(&self, lz_id: Uuid) -> Option<SendRequest<mission_tunnel::Body>> {
        let mut open = self.open.lock().expect("not poisoned");
        match open.get(&lz_id) {
            Some(tunnel) if !tunnel.sender.is_closed() => Some(tunnel.sender.clone()),
            Some(_) => {
                open.remove(&lz_id);
                None
            }
            None => None,
        }
    }

    /// The way to `lz_id`: in-process for the embedded landing zone; else its open tunnel, or
    /// a new one the agent is ordered to open.
    async fn to(&self, app: &AppState, lz_id: Uuid) -> ApiResult<ToAgent> {
        if let Some(service) = self.local(lz_id) {
            return Ok(ToAgent::Local(service));
        }
        self.remote(app, lz_id).await.map(ToAgent::Tunnel)
    }

    /// The open tunnel of `lz_id`, or a new one the agent is ordered to open.
    async fn remote(&self, app: &AppState, lz_id: Uuid) -> ApiResult<SendRequest<mission_tunnel::Body>> {
        let deadline = tokio::time::Instant::now() + TUNNEL_WAIT;
        let mut ordered = false;
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if let Some(sender) = self.sender(lz_id) {
                return Ok(sender);
            }
            if !ordered {
                let url = app.config.advertise_url.as_ref().map(|url| url.as_str().trim_end_matches('/').to_owned());
                app.scheduler.open_tunnel(lz_id, url).await.map_err(|e| {
                    ApiError::session_unreachable(format!("the session's landing zone cannot be reached: {e}"))
                })?;
                ordered = true;
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return Err(ApiError::session_unreachable(format!(
                    "the session's landing zone did not open a tunnel to this server within {}s (with several \
                     replicas, each needs --advertise-url, the URL agents reach it at)",
                    TUNNEL_WAIT.as_secs()
                )));
            }
        }
    }

    /// Takes the tunnel an agent opened: speaks HTTP/2 over it once upgraded, until it closes.
    fn adopt(self: Arc<Self>, app: &AppState, lz_id: Uuid, upgrade: hyper::upgrade::OnUpgrade) {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut closing = app.closing.subscribe();
        app.tasks.spawn(async move {
            let io = match upgrade.await {
                Ok(upgraded) => TokioIo::new(upgraded),
                Err(e) => return tracing::warn!(%lz_id, "a session tunnel did not upgrade: {e}"),
            };
            let (sender, connection) = match mission_tunnel::client(io).await {
                Ok(client) => client,
                Err(e) => return tracing::warn!(%lz_id, "a session tunnel's HTTP/2 handshake failed: {e}"),
            };
            self.open.lock().expect("not poisoned").insert(lz_id, OpenTunnel { serial, sender });
            self.opened.notify_waiters();
            tracing::debug!(%lz_id, "session tunnel open");
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!(%lz_id, "session tunnel closed: {e}");
                },
                _ = closing.wait_for(|closing| *closing) => {}
            }
            let mut open = self.open.lock().expect("not poisoned");
            if open.get(&lz_id).is_some_and(|tunnel| tunnel.serial == serial) {
                open.remove(&lz_id);
            }
        });
    }
}

/// `GET /api/v1/lz/tunnel`: an agent opens a tunnel for its sessions (`Upgrade:
/// mission-tunnel`).
pub async fn agent_tunnel(State(app): State<AppState>, Agent(lz): Agent, mut request: Request) -> ApiResult<Response> {
    let asks = request.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok());
    if !asks.is_some_and(|protocol| protocol.eq_ignore_ascii_case(mission_tunnel::PROTOCOL)) {
        return Err(ApiError::invalid(format!("a tunnel is opened with Upgrade: {}", mission_tunnel::PROTOCOL)));
    }
    let upgrade = hyper::upgrade::on(&mut request);
    app.tunnels.clone().adopt(&app, lz.lz_id, upgrade);
    Ok(upgrade_answer(mission_tunnel::PROTOCOL))
}

/// A `101 Switching Protocols` to `protocol`.
fn upgrade_answer(protocol: &str) -> Response {
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_str(protocol).expect("a header's value"));
    response
}

/// `/sessions/{job_id}`: the session's root is `/sessions/{job_id}/`, where relative links
/// resolve under it.
pub async fn to_root(request: Request) -> Response {
    Redirect::permanent(&format!("{}/", request.uri().path())).into_response()
}

/// `/sessions/{job_id}/…`, any method: the request, forwarded to the session's app.
pub async fn proxy(State(app): State<AppState>, request: Request) -> Response {
    match forward(&app, request).await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

async fn forward(app: &AppState, request: Request) -> Result<Response, Response> {
    let path = request.uri().path().to_owned();
    let raw_id = path.trim_start_matches("/sessions/").split('/').next().unwrap_or_default();
    let no_session = || ApiError::not_found("session", raw_id).into_response();
    let job_id = Uuid::parse_str(raw_id).map_err(|_| no_session())?;
    let Some((user_id, by_cookie)) = caller(app, request.headers()).await? else {
        return Err(sign_in_first(request.headers(), &path));
    };
    let route = authorized_route(app, job_id, user_id).await?;
    if by_cookie && let Some(sessions) = &app.config.sessions_url {
        // A browser: the app's pages open on the session's own origin, never on this one.
        let next = request.uri().path_and_query().map_or(path.clone(), |p| p.as_str().to_owned());
        return Ok(hand_over(app, sessions, job_id, user_id, &next));
    }
    to_app(app, job_id, user_id, route, request, false).await
}

/// The route of session `job_id` if `user_id` may open it; the refusal otherwise.
async fn authorized_route(app: &AppState, job_id: Uuid, user_id: Uuid) -> Result<Route, Response> {
    let no_session = || ApiError::not_found("session", job_id).into_response();
    let route = match app.tunnels.cached_route(job_id) {
        Some(route) => route,
        None => read_route(app, job_id, user_id).await?.ok_or_else(no_session)?,
    };
    if !route.opens_for(user_id) {
        return Err(no_session());
    }
    Ok(route)
}

/// `request`, from `user_id` whom `route` lets in, forwarded to session `job_id`'s app; the
/// answer for a page of the session's own origin where `own_origin`, else of the console's.
async fn to_app(
    app: &AppState,
    job_id: Uuid,
    user_id: Uuid,
    route: Route,
    request: Request,
    own_origin: bool,
) -> Result<Response, Response> {
    let Route { kind, lz_id, .. } = route;
    let path = request.uri().path().to_owned();

    // What the app sees: the path under the session's root for a web app, the whole path for
    // apps told their base path; none of Mission's own credentials.
    let prefix = format!("/sessions/{job_id}");
    let seen = match kind {
        SessionKind::Web => path.strip_prefix(&prefix).filter(|rest| !rest.is_empty()).unwrap_or("/"),
        SessionKind::Jupyter | SessionKind::Vscode => &path,
    };
    let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let upgrade = requested_upgrade(request.headers());
    let mut headers = request.headers().clone();
    mission_tunnel::strip_hop_by_hop(&mut headers);
    mission_tunnel::strip_tunnel_headers(&mut headers);
    strip_bearer_tokens(&mut headers);
    strip_own_cookies(&mut headers);
    headers.remove(crate::http::console::session::CSRF_HEADER);
    // Who asked, as this server saw it: never what the client says it is.
    headers.remove("x-forwarded-for");
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>()
        && let Ok(peer) = HeaderValue::from_str(&peer.ip().to_string())
    {
        headers.insert("x-forwarded-for", peer);
    }
    headers.insert(mission_tunnel::SESSION_HEADER, HeaderValue::from_str(&job_id.to_string()).expect("an id"));
    if let Some(host) = request.headers().get(header::HOST) {
        headers.insert("x-forwarded-host", host.clone());
    }
    let https = match (&app.config.sessions_url, own_origin) {
        (Some(sessions), true) => sessions.https(),
        _ => app.public_url.starts_with("https://"),
    };
    headers.insert("x-forwarded-proto", HeaderValue::from_static(if https { "https" } else { "http" }));

    let uri = format!("http://{}{seen}{query}", mission_tunnel::SESSION_AUTHORITY);
    let answer = match upgrade {
        Some(protocol) => {
            let protocol = protocol.to_str().unwrap_or("websocket").to_owned();
            through_tunnel(app, lz_id, request, uri, headers, &protocol).await
        }
        None => send(app, lz_id, request, uri, headers).await,
    };
    let mut answer = answer.map_err(IntoResponse::into_response)?;
    if answer.headers().contains_key(mission_tunnel::NO_SESSION_HEADER) {
        // Ended, or its agent started again without it: the job says which.
        app.tunnels.forget_route(job_id);
        read_route(app, job_id, user_id).await?;
        let lost = "the session's landing zone no longer runs it (its agent started again?)";
        return Err(ApiError::session_unreachable(lost).into_response());
    }
    mission_tunnel::strip_tunnel_headers(answer.headers_mut());
    keep_app_cookies_to_the_app(answer.headers_mut(), job_id, own_origin);
    Ok(answer)
}

/// A session's URL: on its own origin where the server has a sessions URL, else under the
/// console's.
pub fn session_url(app: &AppState, job_id: Uuid) -> String {
    let base = mission_api::sessions::base_path(job_id);
    match &app.config.sessions_url {
        Some(sessions) => format!("{}{base}", sessions.origin(job_id, public_port(app))),
        None => format!("{}{base}", app.public_url),
    }
}

/// The port of the service's public URL, where it names one.
fn public_port(app: &AppState) -> Option<u16> {
    url::Url::parse(&app.public_url).ok().and_then(|url| url.port())
}

/// Sends a browser that opened session `job_id` on the console (signed in as `user_id`) to the
/// session's own origin, with a one-time code that gets it the session's cookie there, then
/// `next` (the path and query it asked for).
fn hand_over(
    app: &AppState,
    sessions: &crate::config::SessionsUrl,
    job_id: Uuid,
    user_id: Uuid,
    next: &str,
) -> Response {
    let code = seal_pass(app, job_id, "handshake", user_id, HANDSHAKE_TTL);
    let origin = sessions.origin(job_id, public_port(app));
    let to = format!("{origin}{HANDSHAKE_PATH}?code={code}&next={}", crate::http::console::query_value(next));
    let mut response = Redirect::to(&to).into_response();
    private_answer(response.headers_mut());
    response
}

/// A pass of `purpose` for `user_id` into session `job_id`, valid for `ttl`, sealed and encoded
/// for a URL or a cookie.
fn seal_pass(app: &AppState, job_id: Uuid, purpose: &str, user_id: Uuid, ttl: Duration) -> String {
    let expires = chrono::Utc::now().timestamp() + ttl.as_secs() as i64;
    let pass = Pass { purpose: purpose.to_owned(), user_id, expires, nonce: crate::services::idp::random_secret() };
    let sealed = app.sealing.seal(job_id, &serde_json::to_vec(&pass).expect("a pass serialises"));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
}

/// The pass of `purpose` into session `job_id` that `encoded` holds, if it is one and has not
/// expired.
fn open_pass(app: &AppState, job_id: Uuid, purpose: &str, encoded: &str) -> Option<Pass> {
    let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).ok()?;
    let pass: Pass = serde_json::from_slice(&app.sealing.unseal(job_id, &sealed)?).ok()?;
    (pass.purpose == purpose && pass.expires > chrono::Utc::now().timestamp()).then_some(pass)
}

/// Answers a redirect or handshake that carries a code: not cached, no referrer sent on.
fn private_answer(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
}

/// Every request whose `Host` is a session's own ([`crate::config::SessionsUrl`]): that session
/// and its handshake, nothing else (not the API, not the console). Other requests go on.
pub async fn on_own_origin(State(app): State<AppState>, request: Request, next: axum::middleware::Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).or(request.uri().host());
    let session =
        app.config.sessions_url.as_ref().zip(host).and_then(|(sessions, host)| sessions.session_of_host(host));
    let Some(job_id) = session else { return next.run(request).await };
    match serve_own_origin(&app, job_id, request).await {
        Ok(response) | Err(response) => response,
    }
}

async fn serve_own_origin(app: &AppState, job_id: Uuid, request: Request) -> Result<Response, Response> {
    let path = request.uri().path().to_owned();
    if path == HANDSHAKE_PATH {
        return Ok(complete_handshake(app, job_id, &request));
    }
    let root = mission_api::sessions::base_path(job_id);
    if path == root.trim_end_matches('/') || !path.starts_with(&root) {
        // Nothing but the session lives on its host.
        return Ok(Redirect::to(&root).into_response());
    }
    let cookie = crate::http::console::session::cookie(request.headers(), APP_COOKIE);
    let pass = cookie.and_then(|cookie| open_pass(app, job_id, "cookie", cookie));
    let Some(pass) = pass else {
        // Through the console, which signs the browser in and hands the session over.
        let browser = request.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        if browser.is_some_and(|accept| accept.contains("text/html")) {
            let next = request.uri().path_and_query().map_or(path.clone(), |p| p.as_str().to_owned());
            return Ok(Redirect::to(&format!("{}{next}", app.public_url)).into_response());
        }
        let why = "sign in: a session's own origin is entered from the console (its link hands the session over)";
        return Err(ApiError::unauthorized(why).into_response());
    };
    let route = authorized_route(app, job_id, pass.user_id).await?;
    to_app(app, job_id, pass.user_id, route, request, true).await
}

/// `{HANDSHAKE_PATH}?code=…&next=…` on session `job_id`'s origin: a code made for this session
/// within the last minute, not used before, becomes the session's cookie, and the browser goes
/// on to `next` (a path of the session's).
fn complete_handshake(app: &AppState, job_id: Uuid, request: &Request) -> Response {
    #[derive(serde::Deserialize)]
    struct Handshake {
        code: String,
        next: Option<String>,
    }
    let refused = |why: &str| {
        let mut refusal =
            ApiError::unauthorized(format!("{why}: open the session again from the console")).into_response();
        private_answer(refusal.headers_mut());
        refusal
    };
    let Ok(handshake) = serde_urlencoded::from_str::<Handshake>(request.uri().query().unwrap_or("")) else {
        return refused("the handshake has no code");
    };
    let Some(pass) = open_pass(app, job_id, "handshake", &handshake.code) else {
        return refused("the handshake's code is not this session's, or it expired");
    };
    {
        let now = chrono::Utc::now().timestamp();
        let mut spent = app.tunnels.spent.lock().expect("not poisoned");
        spent.retain(|_, expires| *expires > now);
        if spent.insert(pass.nonce.clone(), pass.expires).is_some() {
            drop(spent);
            return refused("the handshake's code was used already");
        }
    }
    let root = mission_api::sessions::base_path(job_id);
    let next = handshake.next.filter(|next| next.starts_with(&root)).unwrap_or(root);
    let cookie = seal_pass(app, job_id, "cookie", pass.user_id, APP_COOKIE_TTL);
    let secure = app.config.sessions_url.as_ref().is_some_and(|s| s.https());
    let max_age = APP_COOKIE_TTL.as_secs() as i64;
    let mut response = Redirect::to(&next).into_response();
    private_answer(response.headers_mut());
    let cookie = crate::http::console::session::cookie_header(APP_COOKIE, &cookie, "/", max_age, secure);
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// Whether a cookie's name is like one of Mission's ([`crate::http::console::OWN_COOKIES`], all
/// `mission…`; with or without a `__Host-` or `__Secure-` prefix): no app may set one, and none
/// reaches an app.
fn named_like_ours(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("__host-").or_else(|| name.strip_prefix("__secure-")).unwrap_or(&name);
    name.starts_with("mission")
}

/// Keeps the cookies an app sets to the app: none named like ours, none for a domain (which on
/// a session's own origin would reach every other session), and under the console's origin
/// none whose path reaches beyond the session's root (it becomes the root).
fn keep_app_cookies_to_the_app(headers: &mut HeaderMap, job_id: Uuid, own_origin: bool) {
    let root = mission_api::sessions::base_path(job_id);
    let kept: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| {
            let value = value.to_str().ok()?;
            let mut parts = value.split(';');
            let pair = parts.next()?.trim();
            if named_like_ours(pair.split_once('=').map_or(pair, |(name, _)| name)) {
                return None;
            }
            let mut attributes: Vec<String> = Vec::new();
            for attribute in parts.map(str::trim).filter(|a| !a.is_empty()) {
                let name = attribute.split_once('=').map_or(attribute, |(name, _)| name).trim().to_ascii_lowercase();
                match name.as_str() {
                    "domain" => {}
                    "path" if !own_origin => {
                        let path = attribute.split_once('=').map_or("", |(_, path)| path.trim());
                        let within = path == root.trim_end_matches('/') || path.starts_with(&root);
                        attributes.push(if within { attribute.to_owned() } else { format!("Path={root}") });
                    }
                    _ => attributes.push(attribute.to_owned()),
                }
            }
            let rebuilt = std::iter::once(pair.to_owned()).chain(attributes).collect::<Vec<_>>().join("; ");
            HeaderValue::from_str(&rebuilt).ok()
        })
        .collect();
    headers.remove(header::SET_COOKIE);
    for value in kept {
        headers.append(header::SET_COOKIE, value);
    }
}

/// Sends `request` (its method and body) to `uri` through the tunnel of `lz_id` with `headers`
/// in place of its own, and answers what comes back.
async fn send(app: &AppState, lz_id: Uuid, request: Request, uri: String, headers: HeaderMap) -> ApiResult<Response> {
    let (parts, body) = request.into_parts();
    let answer = to_agent(app, lz_id, parts.method, uri, headers, mission_tunnel::boxed(body)).await?;
    let (mut parts, from_app) = answer.into_parts();
    mission_tunnel::strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::new(from_app)))
}

/// Sends a request to the agent of `lz_id` (through a tunnel it is ordered to open, if none is).
async fn to_agent(
    app: &AppState,
    lz_id: Uuid,
    method: axum::http::Method,
    uri: String,
    headers: HeaderMap,
    body: mission_tunnel::Body,
) -> ApiResult<hyper::Response<mission_tunnel::Body>> {
    let sender = app.tunnels.to(app, lz_id).await?;
    let mut forwarded = hyper::Request::builder()
        .method(method)
        .uri(uri)
        .body(body)
        .map_err(|e| ApiError::invalid(format!("the request cannot be forwarded: {e}")))?;
    *forwarded.headers_mut() = headers;
    sender
        .send(forwarded)
        .await
        .map_err(|e| ApiError::session_unreachable(format!("the session's landing zone did not answer: {e}")))
}

/// Sends the upgrade `request` asks for (to `protocol`) to `uri` through the tunnel of `lz_id`
/// with `headers` in place of its own. Where the other end agrees, answers `101` and splices
/// the client's upgraded connection to it, within the bound of upgraded connections; else
/// answers what came back.
pub(crate) async fn through_tunnel(
    app: &AppState,
    lz_id: Uuid,
    mut request: Request,
    uri: String,
    mut headers: HeaderMap,
    protocol: &str,
) -> ApiResult<Response> {
    let permit = app.tunnels.upgraded.clone().try_acquire_owned().map_err(|_| ApiError::too_many_connections())?;
    headers.insert(
        mission_tunnel::UPGRADE_HEADER,
        HeaderValue::from_str(protocol).map_err(|e| ApiError::invalid(e.to_string()))?,
    );
    let (to_far_end, body) = mission_tunnel::channel_body();
    let answer = to_agent(app, lz_id, request.method().clone(), uri, headers, body).await?;
    let (mut parts, from_far_end) = answer.into_parts();
    let upgraded = parts.headers.remove(mission_tunnel::UPGRADED_HEADER).is_some();
    mission_tunnel::strip_hop_by_hop(&mut parts.headers);
    mission_tunnel::strip_tunnel_headers(&mut parts.headers);
    if !upgraded {
        return Ok(Response::from_parts(parts, Body::new(from_far_end)));
    }
    let client = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let _permit = permit;
        if let Ok(client) = client.await {
            mission_tunnel::splice(TokioIo::new(client), from_far_end, to_far_end).await;
        }
    });
    let mut response = upgrade_answer(protocol);
    response.headers_mut().extend(parts.headers);
    Ok(response)
}

/// The token of a bearer `Authorization` value; `None` for another scheme (an app's own, say
/// Jupyter's `token …`, which is the app's business).
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// The bearer token of a request, from the first of its `Authorization` headers that holds one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get_all(header::AUTHORIZATION).iter().find_map(bearer_token)
}

/// Removes every bearer `Authorization` value, wherever it stands among several; the app's own
/// schemes stay.
fn strip_bearer_tokens(headers: &mut HeaderMap) {
    let kept: Vec<HeaderValue> =
        headers.get_all(header::AUTHORIZATION).iter().filter(|v| bearer_token(v).is_none()).cloned().collect();
    headers.remove(header::AUTHORIZATION);
    for value in kept {
        headers.append(header::AUTHORIZATION, value);
    }
}

/// Reads where session `job_id`'s requests go, and remembers it; `None` for a job that is no
/// session `user_id` may open; the refusal for one that cannot be reached now (ended: 410;
/// starting: 503).
async fn read_route(app: &AppState, job_id: Uuid, user_id: Uuid) -> Result<Option<Route>, Response> {
    let failed = |e: mission_store::StoreError| ApiError::from(e).into_response();
    let Some(job) = app.store.job_row(job_id).await.map_err(failed)? else { return Ok(None) };
    let shared = job.session.as_ref().is_some_and(|s| s.share_with_managers) && job.project_id != job.user_id;
    let managers: Arc<[Uuid]> = match shared {
        true => {
            let members = app.store.project_members(job.project_id).await.map_err(failed)?;
            members.into_iter().filter(|m| m.role == ProjectRole::Manager).map(|m| m.user_id).collect()
        }
        false => Arc::new([]),
    };
    if job.user_id != user_id && !managers.contains(&user_id) {
        return Ok(None);
    }
    let (kind, lz_id) = reachable(&job).map_err(|refusal| {
        let starting = refusal.status() == StatusCode::SERVICE_UNAVAILABLE;
        let mut refusal = refusal.into_response();
        if starting {
            refusal.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        }
        refusal
    })?;
    let route = Route { user_id: job.user_id, kind, lz_id, managers };
    app.tunnels.remember_route(job_id, route.clone());
    Ok(Some(route))
}

/// The signed-in caller, by bearer token or console cookie (then with `true`); `None` when
/// the request carries neither (a token that fails is refused, as on the API).
async fn caller(app: &AppState, headers: &HeaderMap) -> Result<Option<(Uuid, bool)>, Response> {
    let principal = caller_principal(app, headers).await.map_err(IntoResponse::into_response)?;
    Ok(principal.map(|(principal, by_cookie)| (principal.user_id, by_cookie)))
}

/// The signed-in caller, by bearer token or console cookie (then with `true`); `None` when
/// the request carries neither (a token that fails is refused, as on the API).
pub(crate) async fn caller_principal(app: &AppState, headers: &HeaderMap) -> ApiResult<Option<(Principal, bool)>> {
    if let Some(token) = bearer(headers) {
        return Ok(Some((app.auth.authenticate(token).await?, false)));
    }
    let principal = crate::http::console::session::cookie_principal(app, headers).await?;
    Ok(principal.map(|principal| (principal, true)))
}

/// An anonymous request: a browser goes to sign in and comes back; a program is told to.
fn sign_in_first(headers: &HeaderMap, path: &str) -> Response {
    let browser = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/html"));
    if browser {
        return Redirect::to(&format!("/sign-in?next={}", crate::http::console::query_value(path))).into_response();
    }
    ApiError::unauthorized("sign in: a session is reached with a bearer token or the console's session").into_response()
}

/// A session job that can be reached now: its kind and landing zone; otherwise why not.
fn reachable(job: &Job) -> Result<(SessionKind, Uuid), ApiError> {
    let Some(session) = &job.session else {
        return Err(ApiError::not_found("session", job.job_id));
    };
    if job.status.is_final() {
        let ended =
            format!("the session ended ({}); start it again with `mission run --again {}`", job.status, job.job_id);
        return Err(ApiError::session_ended(ended));
    }
    match (job.status, job.lz_id, &session.url) {
        (JobStatus::Running, Some(lz_id), Some(_)) => Ok((session.kind, lz_id)),
        (status, _, _) => {
            let detail = match status {
                JobStatus::Running => "the session's app is starting: its port does not answer yet".to_owned(),
                other => format!("the session has not started yet ({other})"),
            };
            Err(ApiError::unavailable(detail))
        }
    }
}

/// The protocol a request asks to upgrade to (`Connection: upgrade` with `Upgrade`).
pub(crate) fn requested_upgrade(headers: &HeaderMap) -> Option<HeaderValue> {
    let connection = headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    let asks = connection.flat_map(|v| v.split(',')).any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned()).flatten()
}

/// Removes Mission's cookies (the console's, a session's own) from `Cookie`, keeping the app's.
fn strip_own_cookies(headers: &mut HeaderMap) {
    let own = |pair: &str| named_like_ours(pair.split_once('=').map_or(pair, |(name, _)| name));
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && !own(pair))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty()
        && let Ok(value) = HeaderValue::from_str(&kept.join("; "))
    {
        headers.insert(header::COOKIE, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_consoles_cookies_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("mission_session=secret; _xsrf=abc; mission_oauth=x"));
        headers.append(header::COOKIE, HeaderValue::from_static("theme=dark"));
        strip_own_cookies(&mut headers);
        assert_eq!(headers.get_all(header::COOKIE).iter().collect::<Vec<_>>(), ["_xsrf=abc; theme=dark"]);
        let mut only_ours = HeaderMap::new();
        only_ours.insert(header::COOKIE, HeaderValue::from_static("mission_session=secret"));
        strip_own_cookies(&mut only_ours);
        assert!(only_ours.get(header::COOKIE).is_none());
    }

    #[test]
    fn every_cookie_of_ours_is_named_like_ours() {
        for name in crate::http::console::OWN_COOKIES {
            assert!(named_like_ours(name), "{name}");
        }
        assert!(!named_like_ours("_xsrf") && !named_like_ours("theme"));
    }

    #[test]
    fn an_apps_cookies_stay_the_apps() {
        let job_id = Uuid::new_v4();
        let set = |own_origin: bool, cookies: &[&str]| {
            let mut headers = HeaderMap::new();
            for cookie in cookies {
                headers.append(header::SET_COOKIE, HeaderValue::from_str(cookie).unwrap());
            }
            keep_app_cookies_to_the_app(&mut headers, job_id, own_origin);
            headers.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_owned()).collect::<Vec<_>>()
        };
        let planted = [
            "mission_session=planted; Path=/",
            "__Host-Mission_session=x; Path=/; Secure",
            "mission_app=y",
            "theme=dark; Path=/api/v1; HttpOnly",
            &format!("_xsrf=1; Path=/sessions/{job_id}/lab; Domain=example.org"),
            "plain=1",
        ];
        assert_eq!(
            set(false, &planted),
            [
                format!("theme=dark; Path=/sessions/{job_id}/; HttpOnly"),
                format!("_xsrf=1; Path=/sessions/{job_id}/lab"),
                "plain=1".to_owned()
            ]
        );
        assert_eq!(
            set(true, &planted),
            ["theme=dark; Path=/api/v1; HttpOnly", &format!("_xsrf=1; Path=/sessions/{job_id}/lab"), "plain=1"]
        );
    }

    #[test]
    fn an_upgrade_is_asked_for_by_connection_and_upgrade_together() {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(requested_upgrade(&headers), None);
        headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        assert_eq!(requested_upgrade(&headers).unwrap(), "websocket");
    }
}
