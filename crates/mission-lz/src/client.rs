//! The agent's side of the landing-zone protocol ([`mission_api::lz`]): one typed client that
//! knows the paths under `/api/v1/lz`, the token, the server's URLs (one, or the replicas of one
//! service, tried in turn), and one retry policy ([`Timings`]). The agent, every runner and the
//! pilots of a Slurm gateway speak to the server only through it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use mission_api::RegisteredLandingZone;
use mission_api::lz::{Demand, Hello, Order, Report, Welcome};
use mission_api::paths::MissionPath;
use mission_api::shell::ShellQuery;
use mission_api::tes::{InputListing, StoredOutput};
use reqwest::{Method, RequestBuilder, StatusCode};
use uuid::Uuid;

/// Growing delays between attempts: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// The delays, one per failed attempt.
    pub fn delays(self) -> impl Iterator<Item = Duration> {
        std::iter::successors(Some(self.first), move |d| Some((*d * 2).min(self.max)))
    }
}

/// Every delay and retry count of the agent, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Between attempts to connect after a connection broke.
    pub reconnect: Backoff,
    /// Between attempts to deliver reports and log chunks, which are retried until taken.
    pub deliver: Backoff,
    /// Between attempts to upload a result file.
    pub upload: Backoff,
    /// Attempts per result file before the job fails.
    pub upload_attempts: u32,
    /// How long a report that frees nothing may wait for the next one, so that a short job's
    /// moves travel together (a final report goes at once).
    pub report_gather: Duration,
    /// How long output is gathered before it is sent, so chatty programs make few requests.
    pub log_gather: Duration,
    /// Largest log chunk sent in one request.
    pub log_chunk: usize,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            reconnect: Backoff { first: Duration::from_millis(100), max: Duration::from_secs(5) },
            deliver: Backoff { first: Duration::from_millis(50), max: Duration::from_secs(2) },
            upload: Backoff { first: Duration::from_millis(100), max: Duration::from_secs(5) },
            upload_attempts: 20,
            report_gather: Duration::from_millis(5),
            log_gather: Duration::from_millis(10),
            log_chunk: 256 * 1024,
        }
    }
}

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The server will never take it (a 4xx other than 409); its answer says why.
    #[error("refused ({status}): {detail}")]
    Refused {
        /// The status.
        status: StatusCode,
        /// The server's answer.
        detail: String,
    },
    /// The server does not know this connection (409: it restarted, or another replica took
    /// over its scheduler); it may take the request after the agent connects again.
    #[error("conflict: {0}")]
    Conflict(String),
    /// It may work later: the server could not be reached or answered 5xx.
    #[error("{0}")]
    Retry(String),
    /// What the agent was to send could not be read on its side.
    #[error("{0}")]
    Local(String),
}

impl Failure {
    async fn of(response: reqwest::Response) -> Self {
        let status = response.status();
        let detail = response.text().await.unwrap_or_default();
        if status == StatusCode::CONFLICT {
            Failure::Conflict(detail)
        } else if status.is_client_error() {
            Failure::Refused { status, detail }
        } else {
            Failure::Retry(format!("the server answered {status}: {detail}"))
        }
    }
}

/// Why a tunnel for sessions, or a node's shell, could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The server could not be reached, or the upgrade broke off.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    /// The server answered without switching protocols.
    #[error("{status}: {detail}")]
    Refused {
        /// Its status.
        status: StatusCode,
        /// What it said.
        detail: String,
    },
}

/// The connection `response` switched to, or why it did not.
async fn upgraded(response: reqwest::Response) -> Result<reqwest::Upgraded, TunnelError> {
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Err(TunnelError::Refused { status, detail: response.text().await.unwrap_or_default() });
    }
    Ok(response.upgrade().await?)
}

/// What answered a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease is renewed.
    Renewed,
    /// The server does not know this connection (it restarted, or another replica took over its
    /// scheduler): connect again and tell it which jobs run.
    Forgotten,
}

/// Why a connection could not be made or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The server refused the token (the LZ was removed or re-registered).
    Refused(String),
    /// The connection broke or could not be made; connecting again may work.
    Broken(String),
}

/// A landing zone's client of the server.
pub struct LzClient {
    http: reqwest::Client,
    servers: Vec<String>,
    current: AtomicUsize,
    token: String,
    timings: Timings,
}

impl std::fmt::Debug for LzClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LzClient").field("servers", &self.servers).field("token", &"[redacted]").finish()
    }
}

impl LzClient {
    /// A client of the service at `servers` (base URLs) with an LZ's `token`.
    pub fn new(servers: &[String], token: &str, timings: Timings) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().tcp_nodelay(true).connect_timeout(Duration::from_secs(5)).build()?;
        Ok(Self {
            http,
            servers: servers.iter().map(|url| url.trim_end_matches('/').to_owned()).collect(),
            current: AtomicUsize::new(0),
            token: token.to_owned(),
            timings,
        })
    }

    /// The delays and retry counts it uses.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// The URL requests go to now.
    pub fn server(&self) -> &str {
        &self.servers[self.current.load(Ordering::Relaxed) % self.servers.len()]
    }

    /// Moves on to the next of the server's URLs (after a broken connection), when there are
    /// several; answers the one requests go to now.
    pub fn next_server(&self) -> &str {
        if self.servers.len() > 1 {
            self.current.fetch_add(1, Ordering::Relaxed);
        }
        self.server()
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{}/lz{path}", self.server(), mission_api::API_PREFIX))
            .bearer_auth(&self.token)
    }

    async fn send(&self, request: RequestBuilder) -> Result<reqwest::Response, Failure> {
        let response = request.send().await.map_err(|e| Failure::Retry(e.to_string()))?;
        if response.status().is_success() { Ok(response) } else { Err(Failure::of(response).await) }
    }

    /// `POST /lz/connect`: the server's welcome, then its orders as they come.
    pub async fn connect(&self, hello: &Hello) -> Result<(Welcome, Orders), SessionEnd> {
        let response = self.request(Method::POST, "/connect").json(hello).send().await;
        let response = response.map_err(|e| SessionEnd::Broken(e.to_string()))?;
        if [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&response.status()) {
            let body = response.text().await.unwrap_or_default();
            // The server's problem document says why; show its detail, not the JSON.
            let detail = serde_json::from_str::<mission_api::Problem>(&body).map(|p| p.detail).unwrap_or(body);
            return Err(SessionEnd::Refused(detail));
        }
        if !response.status().is_success() {
            let status = response.status();
            return Err(SessionEnd::Broken(format!("{status}: {}", response.text().await.unwrap_or_default())));
        }
        let mut orders = Orders { body: Box::pin(response.bytes_stream()), buf: Vec::new() };
        let first = orders.line(None).await?.ok_or_else(|| SessionEnd::Broken("no welcome".into()))?;
        let welcome = serde_json::from_slice(&first).map_err(|e| SessionEnd::Broken(format!("bad welcome: {e}")))?;
        Ok((welcome, orders))
    }

    /// `POST /lz/jobs/{id}/session`: the session's port answers. A conflict (it was said
    /// already, or the session ended) needs no retry.
    pub async fn session_ready(&self, job_id: Uuid) -> Result<(), Failure> {
        match self.send(self.request(Method::POST, &format!("/jobs/{job_id}/session"))).await {
            Ok(_) | Err(Failure::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `POST /lz/jobs/{id}/session/ending`: the session reaches its time limit in
    /// `minutes_left` minutes. A conflict (said already, or the session ended) needs no retry.
    pub async fn session_ending(&self, job_id: Uuid, minutes_left: u32) -> Result<(), Failure> {
        let body = mission_api::sessions::SessionEnding { minutes_left };
        match self.send(self.request(Method::POST, &format!("/jobs/{job_id}/session/ending")).json(&body)).await {
            Ok(_) | Err(Failure::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `GET {base}/api/v1/lz/tunnel`, upgraded: a tunnel for sessions to the server at `base`.
    pub async fn tunnel(&self, base: &str) -> Result<reqwest::Upgraded, TunnelError> {
        let response = self
            .http
            .get(format!("{}{}", base.trim_end_matches('/'), mission_tunnel::PATH))
            .bearer_auth(&self.token)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, mission_tunnel::PROTOCOL)
            .send()
            .await?;
        upgraded(response).await
    }

    /// `GET /lz/jobs/{id}/shell`, upgraded: a shell (a command, `query`) in a node of a job
    /// whose part this landing zone holds, for that job's own processes (`mission lz-exec`).
    /// The answer is the shell's WebSocket past its handshake ([`mission_api::shell`]).
    pub async fn node_shell(&self, job_id: Uuid, query: &ShellQuery) -> Result<reqwest::Upgraded, TunnelError> {
        let response = self
            .request(Method::GET, &format!("/jobs/{job_id}/shell"))
            .query(query)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", mission_tunnel::websocket::new_key())
            .send()
            .await?;
        upgraded(response).await
    }

    /// `POST /lz/heartbeat`: renews the lease.
    pub async fn heartbeat(&self) -> Result<Heartbeat, Failure> {
        match self.send(self.request(Method::POST, "/heartbeat")).await {
            Ok(_) => Ok(Heartbeat::Renewed),
            Err(Failure::Conflict(_)) => Ok(Heartbeat::Forgotten),
            Err(e) => Err(e),
        }
    }

    /// `POST /lz/reports`: a batch of reports, in order.
    pub async fn reports(&self, reports: &[Report]) -> Result<(), Failure> {
        self.send(self.request(Method::POST, "/reports").json(reports)).await.map(drop)
    }

    /// `POST /lz/jobs/{id}/logs/{stream}?offset=`: output of a job, `bytes` starting at `offset`
    /// of the stream, retried until the server takes it or refuses it for good.
    pub async fn append_log(&self, job_id: Uuid, stream: &str, offset: u64, bytes: Vec<u8>) -> Result<(), Failure> {
        let path = format!("/jobs/{job_id}/logs/{stream}?offset={offset}");
        self.delivered(|| self.send(self.request(Method::POST, &path).body(bytes.clone()))).await.map(drop)
    }

    /// `GET /lz/jobs/{id}/files/{path}`: an input file of a job, as a stream of chunks.
    pub async fn input(
        &self,
        job_id: Uuid,
        path: &MissionPath,
    ) -> Result<impl Stream<Item = reqwest::Result<bytes::Bytes>> + use<>, Failure> {
        let url_path = format!("/jobs/{job_id}/files/{}", path.to_url_path());
        Ok(self.send(self.request(Method::GET, &url_path)).await?.bytes_stream())
    }

    /// `GET /lz/jobs/{id}/image?digest=`: the archive of the image `digest` a job runs in (one
    /// of its task's executors' images), as a stream of chunks.
    pub async fn job_image(
        &self,
        job_id: Uuid,
        digest: &str,
    ) -> Result<impl Stream<Item = reqwest::Result<bytes::Bytes>> + use<>, Failure> {
        let request = self.request(Method::GET, &format!("/jobs/{job_id}/image")).query(&[("digest", digest)]);
        Ok(self.send(request).await?.bytes_stream())
    }

    /// `PUT /lz/jobs/{id}/results/{path}`: a result file of a job, streamed from `file`, tried up
    /// to [`Timings::upload_attempts`] times.
    pub async fn put_result(&self, job_id: Uuid, path: &MissionPath, file: &std::path::Path) -> Result<(), Failure> {
        let url_path = format!("/jobs/{job_id}/results/{}", path.to_url_path());
        let mut delays = self.timings.upload.delays();
        let mut attempt = 1;
        loop {
            let opened =
                tokio::fs::File::open(file).await.map_err(|e| Failure::Local(format!("{}: {e}", file.display())))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(opened));
            match self.send(self.request(Method::PUT, &url_path).body(body)).await {
                Err(Failure::Retry(why) | Failure::Conflict(why)) if attempt < self.timings.upload_attempts => {
                    tracing::debug!(%job_id, "result {path} not taken yet ({why}); retrying");
                }
                done => return done.map(drop),
            }
            attempt += 1;
            tokio::time::sleep(delays.next().expect("endless")).await;
        }
    }

    /// `GET /lz/jobs/{id}/inputs/{n}`: the files of input `n` of a TES task that the service
    /// fetches for the agent.
    pub async fn task_input_listing(&self, job_id: Uuid, n: usize) -> Result<InputListing, Failure> {
        let response = self.send(self.request(Method::GET, &format!("/jobs/{job_id}/inputs/{n}"))).await?;
        response.json().await.map_err(|e| Failure::Retry(format!("cannot read the input's listing: {e}")))
    }

    /// `GET /lz/jobs/{id}/inputs/{n}/content` (a file input), or `…/files/{path}` (a file of a
    /// directory input): its content, as a stream of chunks.
    pub async fn task_input(
        &self,
        job_id: Uuid,
        n: usize,
        path: &str,
    ) -> Result<impl Stream<Item = reqwest::Result<bytes::Bytes>> + use<>, Failure> {
        let url_path = if path.is_empty() {
            format!("/jobs/{job_id}/inputs/{n}/content")
        } else {
            let path = MissionPath::parse(path).map_err(|e| Failure::Local(format!("{path:?}: {e}")))?;
            format!("/jobs/{job_id}/inputs/{n}/files/{}", path.to_url_path())
        };
        Ok(self.send(self.request(Method::GET, &url_path)).await?.bytes_stream())
    }

    /// `PUT /lz/jobs/{id}/outputs/{n}/content` (a file output), or `…/files/{path}` (a file of a
    /// directory output), streamed from the open `file`: where it went and its size.
    pub async fn put_task_output(
        &self,
        job_id: Uuid,
        n: usize,
        path: &str,
        file: std::fs::File,
    ) -> Result<StoredOutput, Failure> {
        let url_path = if path.is_empty() {
            format!("/jobs/{job_id}/outputs/{n}/content")
        } else {
            let path = MissionPath::parse(path).map_err(|e| Failure::Local(format!("{path:?}: {e}")))?;
            format!("/jobs/{job_id}/outputs/{n}/files/{}", path.to_url_path())
        };
        let opened = tokio::fs::File::from_std(file);
        let size = opened.metadata().await.map_err(|e| Failure::Local(e.to_string()))?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(opened));
        let request = self.request(Method::PUT, &url_path).header(reqwest::header::CONTENT_LENGTH, size).body(body);
        let response = self.send(request).await?;
        response.json().await.map_err(|e| Failure::Retry(format!("cannot read where the output went: {e}")))
    }

    /// `GET url` of a web input of a TES task, with neither the agent's token nor anything else
    /// of the service; `validators` (an entity tag, a modification time) make it conditional.
    pub async fn fetch_web(
        &self,
        url: &str,
        validators: &[(reqwest::header::HeaderName, String)],
    ) -> Result<reqwest::Response, reqwest::Error> {
        let mut request = self.http.get(url);
        for (name, value) in validators {
            request = request.header(name, value);
        }
        request.send().await
    }

    /// `GET /lz/demand`: what the gateway's station has queued that its pilots could run.
    pub async fn demand(&self) -> Result<Demand, Failure> {
        let response = self.send(self.request(Method::GET, "/demand")).await?;
        response.json().await.map_err(|e| Failure::Retry(format!("cannot read the demand: {e}")))
    }

    /// `POST /lz/pilots`: registers a pilot of this gateway; answers its landing zone and token.
    pub async fn register_pilot(&self) -> Result<RegisteredLandingZone, Failure> {
        let response = self.send(self.request(Method::POST, "/pilots")).await?;
        response.json().await.map_err(|e| Failure::Retry(format!("cannot read the pilot's registration: {e}")))
    }

    /// `DELETE /lz/pilots/{id}`: removes a pilot whose batch job ended (its unfinished jobs go
    /// back in the queue).
    pub async fn remove_pilot(&self, lz_id: Uuid) -> Result<(), Failure> {
        self.send(self.request(Method::DELETE, &format!("/pilots/{lz_id}"))).await.map(drop)
    }

    /// Runs `attempt` until it succeeds or is refused for good, waiting [`Timings::deliver`]
    /// between tries.
    pub async fn delivered<T, F: Future<Output = Result<T, Failure>>>(
        &self,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T, Failure> {
        let mut delays = self.timings.deliver.delays();
        loop {
            match attempt().await {
                Err(Failure::Retry(why) | Failure::Conflict(why)) => {
                    tracing::warn!("not delivered yet ({why}); retrying");
                }
                done => return done,
            }
            tokio::time::sleep(delays.next().expect("endless")).await;
        }
    }
}

/// The orders of one connection, as the server sends them (JSON lines).
pub struct Orders {
    body: std::pin::Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Orders {
    /// The next order; `Ok(None)` when the server ended the stream, an error when it broke or
    /// nothing came for `silence`. Orders this agent does not understand are skipped.
    pub async fn next(&mut self, silence: Duration) -> Result<Option<Order>, SessionEnd> {
        loop {
            let Some(line) = self.line(Some(silence)).await? else { return Ok(None) };
            match serde_json::from_slice::<Order>(&line) {
                Ok(order) => return Ok(Some(order)),
                Err(e) => tracing::warn!("ignoring an order this agent does not understand: {e}"),
            }
        }
    }

    async fn line(&mut self, silence: Option<Duration>) -> Result<Option<Vec<u8>>, SessionEnd> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(line[..line.len() - 1].to_vec()));
            }
            let chunk = match silence {
                Some(limit) => tokio::time::timeout(limit, self.body.next())
                    .await
                    .map_err(|_| SessionEnd::Broken(format!("no word from the server for {limit:?}")))?,
                None => self.body.next().await,
            };
            match chunk.transpose().map_err(|e| SessionEnd::Broken(e.to_string()))? {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return Ok(None),
            }
        }
    }
}
