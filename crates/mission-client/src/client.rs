//! [`Client`]: an authenticated handle to one Mission Compute service.
//!
//! It attaches `Authorization: Bearer <access token>` to every API request and renews the access
//! token by itself: shortly before it expires, and once more if the server answers 401. A service
//! run as several replicas may be named by all their URLs, comma-separated: a request that cannot
//! connect to one goes to the next.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Local};
use mission_api::{API_PREFIX, AuthConfig, PROBLEM_CONTENT_TYPE, Problem, User};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;

use crate::auth::{DeviceAuth, Prompt, Tokens, session_cache};
use crate::error::Error;

/// Renew the access token when it has less than this left.
const RENEW_MARGIN: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// An HTTP client of the SDK for requests to `urls`: bounded connect time, no global timeout
/// (uploads and log follows run long), `TCP_NODELAY`. Reading the system's trusted roots costs
/// milliseconds, paid by every process (each `sbatch` of a workflow is one), so a client for
/// `http://` addresses alone skips it; such a client refuses a redirect to `https://` by name
/// instead of failing on a certificate it cannot check.
pub(crate) fn http_client<'a>(urls: impl IntoIterator<Item = &'a str>) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .user_agent(crate::version::user_agent());
    let plain = urls.into_iter().all(|url| url.get(..7).is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://")));
    let builder = if plain {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.url().scheme() != "http" {
                let to = attempt.url().to_string();
                attempt.error(format!("the server redirects to {to}: use that address instead"))
            } else if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else {
                attempt.follow()
            }
        });
        builder.tls_built_in_root_certs(false).redirect(redirects)
    } else {
        builder
    };
    builder.build().expect("the HTTP client builds")
}

/// Redirects a client follows, as many as reqwest's default policy.
const MAX_REDIRECTS: usize = 10;

/// Options of [`Client::login`]: the spec's client parameters and where tokens go.
///
/// ```
/// use mission_client::{LoginOptions, Prompt};
/// let options = LoginOptions {
///     client_id: Some("lab-notebook".into()),
///     token_file: Some("/tmp/mission-tokens".into()),
///     prompt: Prompt::Print,
///     ..Default::default()
/// };
/// ```
#[derive(Debug, Clone, Default)]
pub struct LoginOptions {
    /// Client id; the server's advertised one (normally `mission-cli`) when absent.
    pub client_id: Option<String>,
    /// API audience; the server's advertised one when absent or empty.
    pub audience: Option<String>,
    /// Token file; `~/.mission` when absent, nothing stored when empty.
    pub token_file: Option<PathBuf>,
    /// How to show the device code.
    pub prompt: Prompt,
}

struct Session {
    access_token: String,
    expires_at: Option<DateTime<Local>>,
    /// The provider and refresh token to renew with, when the session can renew.
    renew: Option<(DeviceAuth, String)>,
}

struct Inner {
    http: reqwest::Client,
    /// The service's URLs (several replicas); requests go to the one `current` names.
    base_urls: Vec<String>,
    current: std::sync::atomic::AtomicUsize,
    session: tokio::sync::Mutex<Session>,
}

impl Inner {
    fn base_url(&self) -> &str {
        &self.base_urls[self.current.load(std::sync::atomic::Ordering::Relaxed) % self.base_urls.len()]
    }

    /// Moves on from `failed` to the next URL (unless another request did already).
    fn next_after(&self, failed: &str) {
        use std::sync::atomic::Ordering;
        let now = self.current.load(Ordering::Relaxed);
        if self.base_urls[now % self.base_urls.len()] == failed {
            let _ = self.current.compare_exchange(now, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// A signed-in connection to a server. Cheap to clone; clones share the session.
///
/// ```no_run
/// # async fn demo() -> Result<(), mission_client::Error> {
/// use mission_client::{Client, LoginOptions};
/// let client = Client::login("http://127.0.0.1:8080", LoginOptions::default()).await?;
/// println!("signed in as {}", client.whoami().await?.username);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base_urls", &self.inner.base_urls).finish_non_exhaustive()
    }
}

fn normalise_base(base_url: &str) -> Result<String, Error> {
    let parsed = url::Url::parse(base_url).map_err(|_| Error::InvalidUrl(base_url.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::InvalidUrl(base_url.to_owned()));
    }
    Ok(base_url.trim_end_matches('/').to_owned())
}

/// The URLs of `base_urls`: one, or several replicas' comma-separated.
fn normalise_bases(base_urls: &str) -> Result<Vec<String>, Error> {
    let urls: Vec<String> =
        base_urls.split(',').map(str::trim).filter(|u| !u.is_empty()).map(normalise_base).collect::<Result<_, _>>()?;
    if urls.is_empty() {
        return Err(Error::InvalidUrl(base_urls.to_owned()));
    }
    Ok(urls)
}

impl Client {
    /// A client that sends a fixed access token and never renews it.
    ///
    /// ```
    /// let client = mission_client::Client::with_access_token("http://127.0.0.1:8080", "eyJ…").unwrap();
    /// assert_eq!(client.base_url(), "http://127.0.0.1:8080");
    /// ```
    pub fn with_access_token(base_url: &str, access_token: &str) -> Result<Self, Error> {
        Ok(Self::from_session(
            normalise_bases(base_url)?,
            Session { access_token: access_token.to_owned(), expires_at: None, renew: None },
        ))
    }

    /// A client with `tokens` that renews them with `auth` (writing its token file, if any).
    pub fn with_tokens(base_url: &str, tokens: Tokens, auth: DeviceAuth) -> Result<Self, Error> {
        Ok(Self::from_session(
            normalise_bases(base_url)?,
            Session {
                access_token: tokens.access_token,
                expires_at: Some(tokens.expires_at),
                renew: Some((auth, tokens.refresh_token)),
            },
        ))
    }

    fn from_session(base_urls: Vec<String>, session: Session) -> Self {
        let current = std::sync::atomic::AtomicUsize::new(0);
        let session = tokio::sync::Mutex::new(session);
        let http = http_client(base_urls.iter().map(String::as_str));
        Self { inner: Arc::new(Inner { http, base_urls, current, session }) }
    }

    /// Asks the server where clients sign in (`GET /api/v1/auth-config`, no token needed); of
    /// several replicas' URLs, the first that answers.
    pub async fn auth_config(base_url: &str) -> Result<AuthConfig, Error> {
        let bases = normalise_bases(base_url)?;
        let http = http_client(bases.iter().map(String::as_str));
        let mut last = None;
        for base in &bases {
            match http.get(format!("{base}{API_PREFIX}/auth-config")).send().await {
                Ok(response) => {
                    crate::version::note_server_version(response.headers());
                    return read_json(response).await;
                }
                Err(e) if e.is_connect() => last = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.expect("at least one URL was tried").into())
    }

    /// The device-flow client for the server at `base_url`: its identity provider, audience and
    /// client id, overridden by `options`.
    pub async fn device_auth(base_url: &str, options: &LoginOptions) -> Result<DeviceAuth, Error> {
        let config = Self::auth_config(base_url).await?;
        let audience = options.audience.as_deref().filter(|a| !a.is_empty()).unwrap_or(&config.audience);
        let mut auth = DeviceAuth::new(&config.auth_url, audience)
            .client_id(options.client_id.as_deref().unwrap_or(&config.client_id))
            .prompt(options.prompt.clone());
        if let Some(path) = &options.token_file {
            auth = auth.token_file(path.clone());
        }
        Ok(auth)
    }

    /// Signs in to the server at `base_url` ([`DeviceAuth::initialize`]: refresh from the token
    /// file, or the device flow) and returns a client that renews its token by itself.
    /// A session still valid in the token file's cache (`FILE.session`, see `auth::session_cache`) is taken
    /// as it is, without a request.
    pub async fn login(base_url: &str, options: LoginOptions) -> Result<Self, Error> {
        let server = normalise_bases(base_url)?.join(",");
        if let Some((auth, tokens)) = Self::cached_session(&server, &options)? {
            return Self::with_tokens(base_url, tokens, auth.prompt(options.prompt));
        }
        let auth = Self::device_auth(base_url, &options).await?;
        let tokens = auth.initialize().await?;
        session_cache::write(&auth, &server, &tokens);
        Self::with_tokens(base_url, tokens, auth)
    }

    /// The session the cache beside the token file of `options` keeps for `server`, if it is
    /// the token file's and lasts a while yet.
    fn cached_session(server: &str, options: &LoginOptions) -> Result<Option<(DeviceAuth, Tokens)>, Error> {
        let path = match &options.token_file {
            Some(path) if path.as_os_str().is_empty() => return Ok(None),
            Some(path) => path.clone(),
            None => crate::auth::token_file::default_token_file(),
        };
        let Some(stored) = crate::auth::token_file::read(&path)? else { return Ok(None) };
        let (client_id, audience) = (options.client_id.as_deref(), options.audience.as_deref());
        Ok(session_cache::read(&path, server, &stored.refresh_token, client_id, audience, RENEW_MARGIN))
    }

    /// The base URL requests go to now (of several replicas', the one that last answered).
    pub fn base_url(&self) -> &str {
        self.inner.base_url()
    }

    /// Every URL of the service, comma-separated as given.
    pub fn base_urls(&self) -> String {
        self.inner.base_urls.join(",")
    }

    /// The current tokens, when the session can renew (for callers that persist them).
    pub async fn tokens(&self) -> Option<Tokens> {
        let session = self.inner.session.lock().await;
        let (_, refresh_token) = session.renew.as_ref()?;
        Some(Tokens {
            access_token: session.access_token.clone(),
            refresh_token: refresh_token.clone(),
            expires_at: session.expires_at?,
        })
    }

    /// Ends the session: revokes the refresh token at the provider and removes the token file.
    pub async fn logout(&self) -> Result<(), Error> {
        let session = self.inner.session.lock().await;
        match &session.renew {
            Some((auth, refresh_token)) => auth.revoke(refresh_token).await,
            None => Ok(()),
        }
    }

    /// The signed-in user.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// let me = client.whoami().await?;
    /// println!("{} (admin: {})", me.username, me.admin);
    /// # Ok(()) }
    /// ```
    pub async fn whoami(&self) -> Result<User, Error> {
        self.get_json("/me", &[]).await
    }

    /// Tokens renewed now, for a client of another kind to use (a TES engine, `curl`): the
    /// access token then lasts the server's whole access-token lifetime. `None` where this
    /// client holds a bare access token it cannot renew.
    pub async fn renewed_tokens(&self) -> Result<Option<Tokens>, Error> {
        if !self.can_renew().await {
            return Ok(None);
        }
        self.access_token(true).await?;
        Ok(self.tokens().await)
    }

    /// A valid access token, renewed first when it is about to expire (or `force`).
    async fn access_token(&self, force: bool) -> Result<String, Error> {
        let mut session = self.inner.session.lock().await;
        let expiring = session.expires_at.is_some_and(|at| at - Local::now() < RENEW_MARGIN);
        if (force || expiring)
            && let Some((auth, refresh_token)) = session.renew.clone()
        {
            let tokens = auth.refresh(&refresh_token).await?;
            auth.store(&tokens)?;
            session_cache::write(&auth, &self.inner.base_urls.join(","), &tokens);
            session.access_token = tokens.access_token;
            session.expires_at = Some(tokens.expires_at);
            session.renew = Some((auth, tokens.refresh_token));
        }
        Ok(session.access_token.clone())
    }

    async fn can_renew(&self) -> bool {
        self.inner.session.lock().await.renew.is_some()
    }

    /// Sends an API request built by `build` (given the HTTP client and the full URL), with the
    /// bearer token; on a 401 renews the token once and retries. A request that cannot connect
    /// (so was never sent) goes to the service's next URL, each tried once.
    pub(crate) async fn send(
        &self,
        path: &str,
        build: impl Fn(&reqwest::Client, String) -> RequestBuilder,
    ) -> Result<Response, Error> {
        let mut tries = self.inner.base_urls.len();
        loop {
            let base = self.inner.base_url().to_owned();
            let url = format!("{base}{API_PREFIX}{path}");
            let token = self.access_token(false).await?;
            let response = match build(&self.inner.http, url.clone()).bearer_auth(token).send().await {
                Ok(response) => response,
                Err(e) if e.is_connect() && tries > 1 => {
                    tries -= 1;
                    self.inner.next_after(&base);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            crate::version::note_server_version(response.headers());
            if response.status() == StatusCode::UNAUTHORIZED && self.can_renew().await {
                let token = self.access_token(true).await?;
                return Ok(build(&self.inner.http, url).bearer_auth(token).send().await?);
            }
            return Ok(response);
        }
    }

    /// Sends a request whose body can be sent only once (a file stream): no retry on 401; the
    /// token is renewed before it expires instead.
    pub(crate) async fn send_once(
        &self,
        path: &str,
        build: impl FnOnce(&reqwest::Client, String) -> RequestBuilder,
    ) -> Result<Response, Error> {
        let url = format!("{}{API_PREFIX}{path}", self.inner.base_url());
        let token = self.access_token(false).await?;
        Ok(build(&self.inner.http, url).bearer_auth(token).send().await?)
    }

    /// `GET path?query` as JSON.
    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &str, query: &[(&str, String)]) -> Result<T, Error> {
        read_json(self.send(path, |http, url| http.get(url).query(query)).await?).await
    }

    /// `method path` with a JSON body, answered with JSON.
    pub(crate) async fn send_json<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T, Error> {
        // A POST creates (or acts): every try of it (on the next replica, after a token renewal)
        // carries one key, so the server runs it at most once.
        let key = (method == reqwest::Method::POST).then(|| uuid::Uuid::new_v4().to_string());
        let response = self
            .send(path, |http, url| {
                let request = http.request(method.clone(), url).json(body);
                match &key {
                    Some(key) => request.header("Idempotency-Key", key),
                    None => request,
                }
            })
            .await?;
        read_json(response).await
    }
}

impl Client {
    /// `DELETE path`: `Ok(true)` when deleted, `Ok(false)` on a 404, an error otherwise.
    pub(crate) async fn delete_found(&self, path: &str) -> Result<bool, Error> {
        match check(self.send(path, |http, url| http.delete(url)).await?).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Reads a JSON answer, or turns an error answer into [`Error`].
pub(crate) async fn read_json<T: DeserializeOwned>(response: Response) -> Result<T, Error> {
    let response = check(response).await?;
    let bytes = response.bytes().await?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Protocol(format!("cannot read the answer: {e}")))
}

/// Passes a success through and turns an error answer into [`Error`], keeping its problem body.
pub(crate) async fn check(response: Response) -> Result<Response, Error> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let is_problem = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROBLEM_CONTENT_TYPE) || v.starts_with("application/json"));
    let bytes = response.bytes().await.unwrap_or_default();
    let problem =
        is_problem.then(|| serde_json::from_slice::<Problem>(&bytes).ok()).flatten().unwrap_or_else(|| Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("HTTP error").into(),
            status: status.as_u16(),
            detail: String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).trim().to_owned(),
            field: None,
        });
    Err(match status {
        StatusCode::NOT_FOUND => Error::NotFound(problem),
        StatusCode::UNAUTHORIZED => Error::Unauthorized(problem),
        StatusCode::FORBIDDEN => Error::Forbidden(problem),
        _ => Error::Api(problem),
    })
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_client_of_an_http_address_names_a_redirect_to_https_instead_of_following_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n") {
                let mut byte = [0];
                assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "the request ends early");
                request.push(byte[0]);
            }
            let answer = "HTTP/1.1 308 Permanent Redirect\r\nlocation: https://127.0.0.1:9/api/v1/me\r\ncontent-length: 0\r\n\r\n";
            stream.write_all(answer.as_bytes()).await.unwrap();
        });
        let client = Client::with_access_token(&url, "a token").unwrap();
        let error = tokio::time::timeout(Duration::from_secs(30), client.whoami()).await.unwrap().unwrap_err();
        let mut said = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            said.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        assert!(
            said.contains("the server redirects to https://127.0.0.1:9/api/v1/me: use that address instead"),
            "{said}"
        );
        server.await.unwrap();
    }
}
