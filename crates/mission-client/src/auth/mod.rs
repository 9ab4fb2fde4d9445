//! Sign-in with the OAuth 2.0 device authorization grant (spec §5, RFC 8628).
//!
//! [`DeviceAuth`] runs the flow as states: [`DeviceAuth::start`] asks for a device code,
//! [`DeviceAuth::prompt_user`] shows it, [`DeviceAuth::finish`] polls until the user decides or the
//! code expires. [`DeviceAuth::initialize`] is the usual entry: refresh with the stored token when
//! the token file exists, the device flow otherwise.
//!
//! Where the reference behaviour is unsafe this implementation deliberately differs:
//! - polling stops with an error on `access_denied`, on `expired_token` and once the device code's
//!   `expires_in` has passed (the reference polls forever);
//! - after the 200 it never polls again (some providers revoke a grant whose code is replayed);
//! - `slow_down` adds 5 seconds to the wait from then on (RFC 8628 §3.5);
//! - when a refresh response carries a new refresh token (providers that rotate), it is kept;
//! - the token file is written atomically with mode 0600.

mod browser;
pub(crate) mod session_cache;
pub mod token_file;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Local};
use mission_api::{
    DEFAULT_CLIENT_ID, DEVICE_CODE_GRANT, DEVICE_FLOW_SCOPE, DeviceAuthorization, OAuthError, TokenResponse,
};
use tokio::time::Instant;

use crate::error::{Error, SignInError};
pub use session_cache::sha256_hex;
pub use token_file::{StoredToken, default_token_file};

/// Lifetime assumed for a device code whose provider does not say (`expires_in` absent).
const DEFAULT_DEVICE_CODE_LIFETIME: Duration = Duration::from_secs(900);
/// Smallest wait between polls, for providers that announce an interval of 0.
const MIN_POLL_WAIT: Duration = Duration::from_millis(100);

/// The tokens of a signed-in session.
///
/// ```no_run
/// # async fn demo(auth: mission_client::DeviceAuth) -> Result<(), mission_client::Error> {
/// let tokens = auth.initialize().await?;
/// let client = mission_client::Client::with_access_token("http://127.0.0.1:8080", &tokens.access_token)?;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    /// Bearer token for the mission API.
    pub access_token: String,
    /// Token to get new access tokens with.
    pub refresh_token: String,
    /// When the access token expires (local time).
    pub expires_at: DateTime<Local>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"<redacted>")
            .field("refresh_token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// How the device code is shown to the user.
///
/// ```
/// use std::sync::Arc;
/// use mission_client::{DeviceAuth, Prompt};
/// // A notebook could render the code itself instead of opening a browser:
/// let prompt = Prompt::Callback(Arc::new(|a| println!("Go to {} and enter {}", a.verification_uri, a.user_code)));
/// let auth = DeviceAuth::new("http://127.0.0.1:8080", "mission-api").prompt(prompt);
/// ```
#[derive(Clone, Default)]
pub enum Prompt {
    /// Open `verification_uri_complete` and a local Device Confirmation page in the browser; print
    /// the instructions when no browser opens (the spec's behaviour).
    #[default]
    Browser,
    /// Only print the instructions (for terminals without a browser).
    Print,
    /// Hand the authorization to a function, e.g. a notebook widget or a test that approves it.
    Callback(Arc<dyn Fn(&DeviceAuthorization) + Send + Sync>),
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Prompt::Browser => "Browser",
            Prompt::Print => "Print",
            Prompt::Callback(_) => "Callback",
        })
    }
}

/// A device authorization waiting for the user, between [`DeviceAuth::start`] and
/// [`DeviceAuth::finish`].
///
/// ```no_run
/// # async fn demo(auth: mission_client::DeviceAuth) -> Result<(), mission_client::Error> {
/// let pending = auth.start().await?;
/// println!("enter {} at {}", pending.authorization().user_code, pending.authorization().verification_uri);
/// let tokens = auth.finish(pending).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PendingSignIn {
    authorization: DeviceAuthorization,
    deadline: Instant,
}

impl PendingSignIn {
    /// What the provider answered: user code, verification URIs, interval, lifetime.
    pub fn authorization(&self) -> &DeviceAuthorization {
        &self.authorization
    }
}

/// The device-flow client of one identity provider.
///
/// ```no_run
/// # async fn demo() -> Result<(), mission_client::Error> {
/// use mission_client::auth::DeviceAuth;
/// let auth = DeviceAuth::new("http://127.0.0.1:8080", "mission-api");
/// let tokens = auth.initialize().await?; // refresh from ~/.mission, or sign in
/// println!("signed in until {}", tokens.expires_at);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeviceAuth {
    /// Built on first use: a command signed in by its cached session never needs it.
    http: std::sync::OnceLock<reqwest::Client>,
    auth_url: String,
    client_id: String,
    audience: String,
    token_file: Option<PathBuf>,
    prompt: Prompt,
}

impl DeviceAuth {
    /// A client of the provider at `auth_url` for the API `audience`, with the default client id,
    /// the default token file `~/.mission` and the browser prompt.
    ///
    /// ```
    /// use mission_client::{DeviceAuth, Prompt};
    /// let auth = DeviceAuth::new("https://tenant.auth0.com/", "https://api.example")
    ///     .client_id("my-notebook")
    ///     .token_file("") // store nothing; the caller keeps the tokens
    ///     .prompt(Prompt::Print);
    /// assert_eq!(auth.auth_url(), "https://tenant.auth0.com");
    /// assert!(auth.token_file_path().is_none());
    /// ```
    pub fn new(auth_url: &str, audience: &str) -> Self {
        Self {
            http: std::sync::OnceLock::new(),
            auth_url: auth_url.trim_end_matches('/').to_owned(),
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            audience: audience.to_owned(),
            token_file: Some(default_token_file()),
            prompt: Prompt::Browser,
        }
    }

    /// Uses `client_id` instead of the default.
    pub fn client_id(mut self, client_id: &str) -> Self {
        if !client_id.is_empty() {
            self.client_id = client_id.to_owned();
        }
        self
    }

    /// Stores tokens at `path`; an empty path stores nothing (the caller keeps the tokens).
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        self.token_file = (!path.as_os_str().is_empty()).then_some(path);
        self
    }

    /// Chooses how the code is shown.
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.prompt = prompt;
        self
    }

    /// The token file in use, if any.
    pub fn token_file_path(&self) -> Option<&std::path::Path> {
        self.token_file.as_deref()
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| crate::client::http_client([self.auth_url.as_str()]))
    }

    /// The identity provider's base URL.
    pub fn auth_url(&self) -> &str {
        &self.auth_url
    }

    /// Refreshes with the stored refresh token when the token file exists, signs in with the
    /// device flow otherwise; stores the result in the token file.
    pub async fn initialize(&self) -> Result<Tokens, Error> {
        let stored = match &self.token_file {
            Some(path) => token_file::read(path)?,
            None => None,
        };
        let tokens = match stored {
            Some(stored) => self.refresh(&stored.refresh_token).await?,
            None => return self.device_flow().await,
        };
        self.store(&tokens)?;
        Ok(tokens)
    }

    /// The whole device flow: start, show the code, poll, store.
    pub async fn device_flow(&self) -> Result<Tokens, Error> {
        let pending = self.start().await?;
        self.prompt_user(&pending).await;
        self.finish(pending).await
    }

    /// Step 1: asks the provider for a device code.
    pub async fn start(&self) -> Result<PendingSignIn, Error> {
        let form = [
            ("client_id", self.client_id.as_str()),
            ("audience", self.audience.as_str()),
            ("scope", DEVICE_FLOW_SCOPE),
        ];
        let response = self.http().post(format!("{}/oauth/device/code", self.auth_url)).form(&form).send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        if !status.is_success() {
            return Err(refused(status.as_u16(), &body).into());
        }
        let authorization: DeviceAuthorization = serde_json::from_slice(&body)
            .map_err(|e| SignInError::Protocol(format!("device authorization response: {e}")))?;
        let lifetime = authorization.expires_in.map(Duration::from_secs).unwrap_or(DEFAULT_DEVICE_CODE_LIFETIME);
        Ok(PendingSignIn { authorization, deadline: Instant::now() + lifetime })
    }

    /// Step 2: shows the code as [`Prompt`] says.
    pub async fn prompt_user(&self, pending: &PendingSignIn) {
        let authorization = &pending.authorization;
        match &self.prompt {
            Prompt::Callback(show) => show(authorization),
            Prompt::Print => browser::print_instructions(authorization),
            Prompt::Browser => {
                let url = authorization.verification_uri_complete.as_deref().unwrap_or(&authorization.verification_uri);
                if browser::open(url).await {
                    if let Ok(page) = browser::write_confirmation_page(authorization) {
                        browser::open(&page.to_string_lossy()).await;
                    }
                    eprintln!("A browser tab was opened; confirm the code {} there.", authorization.user_code);
                } else {
                    browser::print_instructions(authorization);
                }
            }
        }
    }

    /// Step 3: polls the token endpoint until the user approves (tokens, stored), denies, or the
    /// code expires. Waits twice the interval between polls, doubles the wait on 429, adds 5 s
    /// on `slow_down`.
    pub async fn finish(&self, pending: PendingSignIn) -> Result<Tokens, Error> {
        let mut schedule = PollSchedule::new(pending.authorization.interval, pending.deadline);
        loop {
            let wait = schedule.wait();
            if Instant::now() + wait >= schedule.deadline {
                return Err(SignInError::Expired.into());
            }
            tokio::time::sleep(wait).await;
            let form = [
                ("grant_type", DEVICE_CODE_GRANT),
                ("device_code", pending.authorization.device_code.as_str()),
                ("client_id", self.client_id.as_str()),
            ];
            let outcome = match self.http().post(format!("{}/oauth/token", self.auth_url)).form(&form).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    match response.bytes().await {
                        Ok(body) if status == 200 => {
                            let tokens = parse_tokens(&body, None)?;
                            self.store(&tokens)?;
                            return Ok(tokens);
                        }
                        Ok(body) => PollOutcome::from_error(status, &body),
                        Err(_) => PollOutcome::Transient,
                    }
                }
                Err(_) => PollOutcome::Transient,
            };
            schedule.record(outcome)?;
        }
    }

    /// Gets a new access token with `refresh_token`. Does not touch the token file. The refresh
    /// token stays the same unless the provider rotates it, in which case the new one is returned.
    ///
    /// ```no_run
    /// # async fn demo(auth: mission_client::DeviceAuth, saved: &str) -> Result<(), mission_client::Error> {
    /// let tokens = auth.refresh(saved).await?;
    /// println!("new access token valid until {}", tokens.expires_at);
    /// # Ok(()) }
    /// ```
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, Error> {
        let form =
            [("client_id", self.client_id.as_str()), ("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
        let response = self.http().post(format!("{}/oauth/token", self.auth_url)).form(&form).send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        if !status.is_success() {
            return Err(refused(status.as_u16(), &body).into());
        }
        parse_tokens(&body, Some(refresh_token))
    }

    /// Revokes `refresh_token` at the provider (RFC 7009) and removes the token file. Providers
    /// without a revocation endpoint only lose the file.
    pub async fn revoke(&self, refresh_token: &str) -> Result<(), Error> {
        let form = [("token", refresh_token), ("token_type_hint", "refresh_token"), ("client_id", &self.client_id)];
        let response = self.http().post(format!("{}/oauth/revoke", self.auth_url)).form(&form).send().await?;
        if let Some(path) = &self.token_file {
            token_file::remove(path)?;
        }
        let status = response.status();
        if status.is_success() || status.as_u16() == 404 {
            Ok(())
        } else {
            Err(refused(status.as_u16(), &response.bytes().await.unwrap_or_default()).into())
        }
    }

    /// Writes `tokens` to the token file, if there is one.
    pub fn store(&self, tokens: &Tokens) -> Result<(), Error> {
        match &self.token_file {
            Some(path) => token_file::write(path, &StoredToken::new(&tokens.refresh_token, tokens.expires_at)),
            None => Ok(()),
        }
    }
}

fn parse_tokens(body: &[u8], previous_refresh: Option<&str>) -> Result<Tokens, Error> {
    let response: TokenResponse =
        serde_json::from_slice(body).map_err(|e| SignInError::Protocol(format!("token response: {e}")))?;
    let refresh_token = response.refresh_token.or_else(|| previous_refresh.map(str::to_owned)).ok_or_else(|| {
        SignInError::Protocol("the provider issued no refresh token (is offline_access allowed?)".into())
    })?;
    Ok(Tokens {
        access_token: response.access_token,
        refresh_token,
        expires_at: Local::now() + chrono::Duration::seconds(response.expires_in.min(i64::MAX as u64) as i64),
    })
}

fn refused(status: u16, body: &[u8]) -> SignInError {
    match serde_json::from_slice::<OAuthError>(body) {
        Ok(e) => SignInError::Refused { status, error: e.error, description: e.error_description },
        Err(_) => SignInError::Refused {
            status,
            error: "unexpected response".into(),
            description: Some(String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()),
        },
    }
}

/// What one poll of the token endpoint said, short of success.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PollOutcome {
    /// `authorization_pending`, or an answer that does not end the flow.
    Pending,
    /// `slow_down`.
    SlowDown,
    /// HTTP 429.
    TooManyRequests,
    /// A network failure or 5xx: try again.
    Transient,
    /// `access_denied`.
    Denied,
    /// `expired_token`.
    Expired,
    /// Any other OAuth error: polling again cannot help.
    Refused(u16, Option<OAuthError>),
}

impl PollOutcome {
    fn from_error(status: u16, body: &[u8]) -> Self {
        if status == 429 {
            return Self::TooManyRequests;
        }
        if status >= 500 {
            return Self::Transient;
        }
        match serde_json::from_slice::<OAuthError>(body) {
            Ok(e) => match e.error.as_str() {
                "authorization_pending" => Self::Pending,
                "slow_down" => Self::SlowDown,
                "access_denied" => Self::Denied,
                "expired_token" => Self::Expired,
                _ => Self::Refused(status, Some(e)),
            },
            // Not an OAuth answer (a proxy's error page, say): keep waiting, as the spec says.
            Err(_) => Self::Pending,
        }
    }
}

/// The waiting rules of the poll loop, kept apart from the I/O so they can be tested exactly.
#[derive(Debug)]
struct PollSchedule {
    wait: Duration,
    deadline: Instant,
}

impl PollSchedule {
    fn new(interval_secs: u64, deadline: Instant) -> Self {
        Self { wait: Duration::from_secs(interval_secs.saturating_mul(2)).max(MIN_POLL_WAIT), deadline }
    }

    fn wait(&self) -> Duration {
        self.wait
    }

    fn record(&mut self, outcome: PollOutcome) -> Result<(), SignInError> {
        match outcome {
            PollOutcome::Pending | PollOutcome::Transient => Ok(()),
            PollOutcome::SlowDown => {
                self.wait += Duration::from_secs(5);
                Ok(())
            }
            PollOutcome::TooManyRequests => {
                self.wait *= 2;
                Ok(())
            }
            PollOutcome::Denied => Err(SignInError::Denied),
            PollOutcome::Expired => Err(SignInError::Expired),
            PollOutcome::Refused(status, e) => Err(SignInError::Refused {
                status,
                error: e.as_ref().map_or_else(|| "unknown".into(), |e| e.error.clone()),
                description: e.and_then(|e| e.error_description),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth(error: &str) -> Vec<u8> {
        serde_json::to_vec(&OAuthError { error: error.into(), error_description: None }).unwrap()
    }

    #[test]
    fn waits_twice_the_interval_and_doubles_on_429() {
        let mut s = PollSchedule::new(5, Instant::now() + Duration::from_secs(900));
        assert_eq!(s.wait(), Duration::from_secs(10));
        s.record(PollOutcome::from_error(400, &oauth("authorization_pending"))).unwrap();
        assert_eq!(s.wait(), Duration::from_secs(10));
        s.record(PollOutcome::from_error(429, b"")).unwrap();
        assert_eq!(s.wait(), Duration::from_secs(20));
        s.record(PollOutcome::from_error(429, b"")).unwrap();
        assert_eq!(s.wait(), Duration::from_secs(40));
        s.record(PollOutcome::from_error(400, &oauth("slow_down"))).unwrap();
        assert_eq!(s.wait(), Duration::from_secs(45));
        s.record(PollOutcome::from_error(503, b"busy")).unwrap();
        assert_eq!(s.wait(), Duration::from_secs(45));
    }

    #[test]
    fn terminal_answers_end_the_flow() {
        let mut s = PollSchedule::new(1, Instant::now());
        assert!(matches!(s.record(PollOutcome::from_error(400, &oauth("access_denied"))), Err(SignInError::Denied)));
        assert!(matches!(s.record(PollOutcome::from_error(400, &oauth("expired_token"))), Err(SignInError::Expired)));
        assert!(matches!(
            s.record(PollOutcome::from_error(400, &oauth("invalid_grant"))),
            Err(SignInError::Refused { status: 400, .. })
        ));
        // A non-OAuth body is "keep waiting" (spec §7.2).
        assert!(s.record(PollOutcome::from_error(400, b"<html>")).is_ok());
    }

    #[test]
    fn a_zero_interval_still_waits_a_little() {
        assert_eq!(PollSchedule::new(0, Instant::now()).wait(), MIN_POLL_WAIT);
    }
}
