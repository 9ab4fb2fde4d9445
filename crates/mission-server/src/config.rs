//! The server's configuration: what `mission server` flags and `MISSION_*` variables set.
//!
//! Building a [`ServerConfig`] never touches the disk; [`crate::Server::new`] creates the data dir.

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

/// Who signs the access tokens the API accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// The server's own identity provider (device flow, `/activate`, keys in the data dir).
    Builtin,
    /// An external OIDC provider (Auth0, Keycloak, …) whose keys are found from `auth_url`.
    External {
        /// Base URL of the provider; its `iss` claim, with or without a trailing slash.
        auth_url: Url,
    },
}

/// Project memberships that follow an external provider's group claim: a token whose `claim`
/// (an array of strings, or one string of them separated by spaces or commas) holds
/// `{prefix}{project}` makes its user a `member` of that shared project, `{prefix}{project}:{role}`
/// a `viewer`, `member` or `manager`. Memberships so given are set anew with each new token (each
/// sign-in or refresh) and end when the claim no longer names the project; those set by hand stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectGroups {
    /// The claim's name (`groups`, `roles`, …).
    pub claim: String,
    /// What starts the groups that name projects (`mission:`); others are passed over.
    pub prefix: String,
}

impl ProjectGroups {
    /// The projects, with roles, that a token's claims name.
    pub fn memberships(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<(String, mission_api::ProjectRole)> {
        let groups: Vec<&str> = match claims.get(&self.claim) {
            Some(serde_json::Value::Array(values)) => values.iter().filter_map(|v| v.as_str()).collect(),
            Some(serde_json::Value::String(text)) => text.split([' ', ',']).filter(|g| !g.is_empty()).collect(),
            _ => Vec::new(),
        };
        let mut memberships: Vec<(String, mission_api::ProjectRole)> = Vec::new();
        for group in groups {
            let Some(named) = group.strip_prefix(&self.prefix) else { continue };
            let (project, role) = match named.rsplit_once(':') {
                Some((project, role)) => match role.parse() {
                    Ok(role) => (project, role),
                    Err(_) => continue,
                },
                None => (named, mission_api::ProjectRole::Member),
            };
            if project.is_empty() {
                continue;
            }
            // Named twice with two roles: the greater.
            match memberships.iter_mut().find(|(p, _)| p == project) {
                Some((_, held)) => *held = (*held).max(role),
                None => memberships.push((project.to_owned(), role)),
            }
        }
        memberships
    }
}

/// Everything [`crate::Server::new`] needs besides a bound listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Holds the SQLite database and the signing key (`./mission-data` by default).
    pub data_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://…`; `sqlite://{data_dir}/mission.db` when absent.
    pub database_url: Option<mission_store::DatabaseUrl>,
    /// Holds the built-in identity provider's signing key and the cargo-bay sealing key; the data
    /// dir when absent. Replicas of one service share it (the same keys on each).
    pub key_dir: Option<PathBuf>,
    /// The default storage of mission files and job results (and, in one process, job logs): a
    /// folder or an S3 bucket; the data dir when absent. Replicas of one service share it.
    pub storage: Option<Storage>,
    /// URL clients and token issuers use to reach this server; `http://{listen address}` when
    /// absent. Also the `iss` of tokens the built-in provider signs.
    pub public_url: Option<Url>,
    /// The URL agents reach this replica itself at, where they open session tunnels; absent:
    /// the URL each agent connects to (right for one server).
    pub advertise_url: Option<Url>,
    /// Where sessions are served from an origin of their own, one host per session
    /// (`https://*.sessions.example.org`); absent: under the console's origin, at
    /// `/sessions/{job_id}/` (see [`crate::http::sessions`] for which is safe for which apps).
    pub sessions_url: Option<SessionsUrl>,
    /// Built-in or external identity provider.
    pub auth: AuthMode,
    /// The API audience access tokens must name.
    pub audience: String,
    /// The client id advertised to clients in `/api/v1/auth-config`.
    pub client_id: String,
    /// Lifetime of access tokens the built-in provider signs.
    pub access_token_ttl: Duration,
    /// Lifetime of refresh tokens.
    pub refresh_token_ttl: Duration,
    /// Lifetime of a device code.
    pub device_code_ttl: Duration,
    /// Polling interval the built-in provider asks device clients for, in seconds.
    pub device_poll_interval: u64,
    /// With an external provider, the least time between two fetches of its JWKS when a token
    /// names an unknown key (a forged `kid` must not make us hammer the provider).
    pub jwks_min_refetch: Duration,
    /// Limits on mission files.
    pub file_limits: FileLimits,
    /// Brakes on guessing at the built-in provider's sign-in.
    pub sign_in_limits: SignInLimits,
    /// Timeouts and the bound on connections.
    pub connection_limits: ConnectionLimits,
    /// S3 endpoints (URLs) that users other than admins may name in their cargo bays, besides
    /// AWS itself. Admins may name any: an endpoint is a place the server sends requests to, so
    /// letting anyone choose it would let them probe the server's network.
    pub s3_endpoints: Vec<Url>,
    /// Container registries (`HOST[:PORT]`) whose images users other than admins may register
    /// (`POST /api/v1/images/references`): landing zones pull from them. Admins may name any.
    pub image_registries: Vec<String>,
    /// Directories of the server's host that GA4GH TES tasks may name `file://` inputs and
    /// outputs under (the server reads and writes them, as itself); none by default.
    pub tes_file_roots: Vec<PathBuf>,
    /// URL prefixes users other than admins may register webhooks under (for the reason of
    /// `s3_endpoints`: the server POSTs to them). Admins may name any http(s) URL.
    pub webhook_targets: Vec<Url>,
    /// How webhook deliveries are tried.
    pub webhook_attempts: WebhookAttempts,
    /// How long a landing zone counts as online after its agent was last heard from.
    pub lz_lease: Duration,
    /// How long events are kept: a client that reconnects to `GET /api/v1/events` within it
    /// misses nothing.
    pub event_retention: Duration,
    /// The most bytes kept of each output stream of a job (jobs may ask for less): past it,
    /// output is dropped except its last quarter-cap bytes. See [`crate::services::job_logs`].
    pub job_log_cap: u64,
    /// The largest image archive one may import, in bytes.
    pub max_image_bytes: u64,
    /// The most jobs one user may have on landing zones at once (placed, staging, running or
    /// uploading); their further jobs wait in the queue. `None`: no limit.
    pub max_running_jobs_per_user: Option<u32>,
    /// With an external identity provider: project memberships that follow a group claim of
    /// its access tokens. `None`: memberships are set by hand only.
    pub project_groups: Option<ProjectGroups>,
    /// Which queued job a station takes first: fair-share (the default) or first come, first
    /// served.
    pub queue_order: mission_scheduler::QueueOrder,
    /// How long a job whose borrowed room is reclaimed for another project may take to end
    /// after `SIGTERM`, before `SIGKILL`.
    pub reclaim_grace: Duration,
    /// How long audit entries are kept.
    pub audit_retention: Duration,
    /// How often the stations' grid intensity files are read (a minute; tests shorten it).
    pub grid_intensity_refresh: Duration,
    /// Create an `admin` account with a generated password when the store has no users.
    pub bootstrap_admin: bool,
}

impl ServerConfig {
    /// The embedded defaults with data under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            database_url: None,
            key_dir: None,
            storage: None,
            public_url: None,
            advertise_url: None,
            sessions_url: None,
            auth: AuthMode::Builtin,
            audience: DEFAULT_AUDIENCE.to_owned(),
            client_id: mission_api::DEFAULT_CLIENT_ID.to_owned(),
            access_token_ttl: Duration::from_secs(3600),
            refresh_token_ttl: Duration::from_secs(90 * 24 * 3600),
            device_code_ttl: Duration::from_secs(900),
            device_poll_interval: 5,
            jwks_min_refetch: Duration::from_secs(30),
            file_limits: FileLimits::default(),
            sign_in_limits: SignInLimits::default(),
            connection_limits: ConnectionLimits::default(),
            s3_endpoints: Vec::new(),
            image_registries: Vec::new(),
            tes_file_roots: Vec::new(),
            webhook_targets: Vec::new(),
            webhook_attempts: WebhookAttempts::default(),
            lz_lease: Duration::from_secs(30),
            max_running_jobs_per_user: None,
            queue_order: mission_scheduler::QueueOrder::DEFAULT,
            reclaim_grace: mission_scheduler::Policy::DEFAULT_RECLAIM_GRACE,
            audit_retention: Duration::from_secs(365 * 24 * 3600),
            grid_intensity_refresh: Duration::from_secs(60),
            project_groups: None,
            event_retention: Duration::from_secs(7 * 24 * 3600),
            job_log_cap: DEFAULT_LOG_CAP,
            max_image_bytes: 20 << 30,
            bootstrap_admin: true,
        }
    }

    /// The folder the keys are in.
    pub fn key_dir(&self) -> PathBuf {
        self.key_dir.clone().unwrap_or_else(|| self.data_dir.clone())
    }

    /// The default storage in effect.
    pub fn storage(&self) -> Storage {
        self.storage.clone().unwrap_or_else(|| Storage::Folder(self.data_dir.clone()))
    }

    /// The database URL in effect.
    pub fn effective_database_url(&self) -> mission_store::DatabaseUrl {
        self.database_url
            .clone()
            .unwrap_or_else(|| mission_store::DatabaseUrl::sqlite(&self.data_dir.join("mission.db")))
    }
}

/// Audience of the API when none is configured.
pub const DEFAULT_AUDIENCE: &str = "mission-api";

/// How webhook deliveries are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookAttempts {
    /// Attempts at one delivery before it counts as failed.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; each further wait is twice the one before, up
    /// to an hour.
    pub first_retry: Duration,
    /// How long a receiver has to answer an attempt.
    pub timeout: Duration,
}

impl Default for WebhookAttempts {
    /// 12 attempts over about two and a half hours (5 s, 10 s, 20 s … after each failure).
    fn default() -> Self {
        Self { max_attempts: 12, first_retry: Duration::from_secs(5), timeout: Duration::from_secs(10) }
    }
}

/// Brakes on guessing at the built-in provider's sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// Failed `/activate` attempts a client address, a user code or an account gets before each
    /// further failure makes it wait (1 s, doubling up to 15 min).
    pub free_failures: u32,
    /// Device codes one client address may ask for per minute.
    pub device_codes_per_minute: u32,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self { free_failures: 5, device_codes_per_minute: 30 }
    }
}

/// Limits on mission files; exceeding one is a 413 naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Largest single file, in bytes.
    pub max_file_bytes: u64,
    /// Most files one mission may hold.
    pub max_files_per_mission: u64,
    /// Most bytes all files of one user's missions and the user's image archives may hold together.
    pub max_user_bytes: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self { max_file_bytes: 100 << 30, max_files_per_mission: 100_000, max_user_bytes: 1 << 40 }
    }
}

/// Where the default storage is.
#[derive(Clone, PartialEq, Eq)]
pub enum Storage {
    /// A folder (`files/` and `job-logs/` in it).
    Folder(PathBuf),
    /// An S3 bucket (or an S3-compatible server's), under a key prefix.
    S3(S3Storage),
}

/// An S3 default storage: `s3://BUCKET/PREFIX`, with where and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Storage {
    /// The bucket.
    pub bucket: String,
    /// The key prefix every object lives under (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// An S3-compatible server's URL; AWS when absent.
    pub endpoint: Option<String>,
    /// The region to sign for.
    pub region: String,
    /// The access key id; with `secret_access_key`, the credentials.
    pub access_key_id: Option<String>,
    /// The secret access key (never shown).
    pub secret_access_key: Option<String>,
}

impl std::str::FromStr for Storage {
    type Err = String;

    /// `s3://BUCKET/PREFIX` (endpoint, region and credentials set afterwards), or a folder.
    fn from_str(raw: &str) -> Result<Self, String> {
        let Some(rest) = raw.strip_prefix("s3://") else {
            if raw.contains("://") {
                return Err(format!("{raw:?}: give a folder or s3://BUCKET/PREFIX"));
            }
            return Ok(Self::Folder(PathBuf::from(raw)));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{raw:?} names no bucket: give s3://BUCKET/PREFIX"));
        }
        Ok(Self::S3(S3Storage {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            endpoint: None,
            region: DEFAULT_REGION.to_owned(),
            access_key_id: None,
            secret_access_key: None,
        }))
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Folder(path) => f.debug_tuple("Folder").field(path).finish(),
            Self::S3(s3) => f
                .debug_struct("S3")
                .field("bucket", &s3.bucket)
                .field("prefix", &s3.prefix)
                .field("endpoint", &s3.endpoint)
                .field("region", &s3.region)
                .field("access_key_id", &s3.access_key_id)
                .field("secret_access_key", &s3.secret_access_key.as_ref().map(|_| "[redacted]"))
                .finish(),
        }
    }
}

/// The limits on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections served at once; more are refused with a 503.
    pub max_connections: usize,
    /// Longest wait for a request's headers, counted from when the connection is ready for
    /// one (so also the keep-alive idle timeout).
    pub header_timeout: Duration,
    /// Longest a request body may send nothing.
    pub body_idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The most bytes kept of each output stream of a job by default (see
/// `crate::services::job_logs`).
pub const DEFAULT_LOG_CAP: u64 = 64 * 1024 * 1024;

/// The S3 region of a bucket whose settings name none.
pub const DEFAULT_REGION: &str = "us-east-1";

#[cfg(test)]
mod tests {
    use super::Storage;

    #[test]
    fn storage_is_a_folder_or_an_s3_bucket_and_hides_its_secret() {
        assert_eq!("/srv/mission".parse::<Storage>(), Ok(Storage::Folder("/srv/mission".into())));
        let Ok(Storage::S3(mut s3)) = "s3://lab-data/mission/service/".parse::<Storage>() else { panic!("an S3 URL") };
        assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("lab-data", "mission/service"));
        assert!("s3://".parse::<Storage>().is_err());
        assert!("gs://bucket/x".parse::<Storage>().unwrap_err().contains("s3://BUCKET/PREFIX"));
        s3.secret_access_key = Some("s3cret-key".into());
        let shown = format!("{:?}", Storage::S3(s3));
        assert!(!shown.contains("s3cret-key") && shown.contains("redacted"), "{shown}");
    }
}

/// Where sessions get origins of their own: `SCHEME://*.SUFFIX[:PORT]`, each session at
/// `SCHEME://{job_id}.SUFFIX[:PORT]` (a wildcard DNS name and certificate point them all at the
/// service). Without a port, sessions are served on the public URL's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsUrl {
    https: bool,
    /// The host after `*.`, lowercase.
    suffix: String,
    port: Option<u16>,
}

impl std::str::FromStr for SessionsUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let wrong = |why: &str| {
            format!("{raw:?} is no sessions URL ({why}); expected one such as https://*.sessions.example.org")
        };
        let (scheme, rest) = raw.split_once("://").ok_or_else(|| wrong("no scheme"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(wrong("the scheme is http or https")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(wrong("only a scheme and a host: no path, query or user"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse::<u16>().map_err(|_| wrong("the port is no number"))?)),
            None => (authority, None),
        };
        let suffix = host.strip_prefix("*.").ok_or_else(|| wrong("the host begins with `*.`, the session's label"))?;
        let valid = |label: &str| {
            !label.is_empty() && label.len() <= 63 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !suffix.split('.').all(valid) {
            return Err(wrong("the host after `*.` is a DNS name"));
        }
        Ok(SessionsUrl { https, suffix: suffix.to_ascii_lowercase(), port })
    }
}

impl SessionsUrl {
    /// Whether sessions are served over https (their cookies are then `Secure`).
    pub fn https(&self) -> bool {
        self.https
    }

    /// The origin of session `job_id`, with `default_port` (the public URL's) where the sessions
    /// URL names none.
    pub fn origin(&self, job_id: uuid::Uuid, default_port: Option<u16>) -> String {
        let scheme = if self.https { "https" } else { "http" };
        match self.port.or(default_port) {
            Some(port) => format!("{scheme}://{job_id}.{}:{port}", self.suffix),
            None => format!("{scheme}://{job_id}.{}", self.suffix),
        }
    }

    /// The session a request's `Host` (`{job_id}.SUFFIX[:PORT]`, any case) names, if it names one.
    pub fn session_of_host(&self, host: &str) -> Option<uuid::Uuid> {
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let (label, suffix) = name.split_once('.')?;
        if !suffix.trim_end_matches('.').eq_ignore_ascii_case(&self.suffix) {
            return None;
        }
        uuid::Uuid::parse_str(label).ok().filter(|id| id.to_string().eq_ignore_ascii_case(label))
    }
}

#[cfg(test)]
mod sessions_url_tests {
    use super::SessionsUrl;

    #[test]
    fn a_sessions_url_is_a_wildcard_host_and_names_each_session_by_its_own() {
        let url: SessionsUrl = "https://*.Sessions.example.org".parse().unwrap();
        let job = uuid::Uuid::new_v4();
        assert_eq!(url.origin(job, None), format!("https://{job}.sessions.example.org"));
        assert_eq!(url.session_of_host(&format!("{job}.sessions.EXAMPLE.org")), Some(job));
        assert_eq!(url.session_of_host(&format!("{job}.sessions.example.org:443")), Some(job));
        assert_eq!(url.session_of_host("sessions.example.org"), None);
        assert_eq!(url.session_of_host(&format!("{job}.evil.example.org")), None);
        assert_eq!(url.session_of_host(&format!("x{job}.sessions.example.org")), None);
        let local: SessionsUrl = "http://*.localhost".parse().unwrap();
        assert_eq!(local.origin(job, Some(8080)), format!("http://{job}.localhost:8080"));
        let with_port: SessionsUrl = "http://*.localhost:9000/".parse().unwrap();
        assert_eq!(with_port.origin(job, Some(8080)), format!("http://{job}.localhost:9000"));
        for wrong in ["https://sessions.example.org", "ftp://*.x.org", "https://*.x.org/path", "https://*.", "*.x.org"]
        {
            assert!(wrong.parse::<SessionsUrl>().is_err(), "{wrong}");
        }
    }
}
