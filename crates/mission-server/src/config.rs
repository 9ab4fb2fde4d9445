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

/// Everything [`crate::Server::new`] needs besides a bound listener.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Holds the SQLite database and the signing key (`./mission-data` by default).
    pub data_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://…`; `sqlite://{data_dir}/mission.db` when absent.
    pub database_url: Option<crate::store::DatabaseUrl>,
    /// Holds the built-in identity provider's signing key and the cargo-bay sealing key; the data
    /// dir when absent. Replicas of one service share it (the same keys on each).
    pub key_dir: Option<PathBuf>,
    /// The default storage of mission files, job results and job logs: a folder; the data dir
    /// when absent. Replicas of one service share it.
    pub storage: Option<PathBuf>,
    /// URL clients and token issuers use to reach this server; `http://{listen address}` when
    /// absent. Also the `iss` of tokens the built-in provider signs.
    pub public_url: Option<Url>,
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
    pub connection_limits: crate::serve::ConnectionLimits,
    /// S3 endpoints (URLs) that users other than admins may name in their cargo bays, besides
    /// AWS itself. Admins may name any: an endpoint is a place the server sends requests to, so
    /// letting anyone choose it would let them probe the server's network.
    pub s3_endpoints: Vec<Url>,
    /// How long a landing zone counts as online after its agent was last heard from.
    pub lz_lease: Duration,
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
            connection_limits: crate::serve::ConnectionLimits::default(),
            s3_endpoints: Vec::new(),
            lz_lease: Duration::from_secs(30),
            bootstrap_admin: true,
        }
    }

    /// The folder the keys are in.
    pub fn key_dir(&self) -> PathBuf {
        self.key_dir.clone().unwrap_or_else(|| self.data_dir.clone())
    }

    /// The folder of the default storage.
    pub fn storage(&self) -> PathBuf {
        self.storage.clone().unwrap_or_else(|| self.data_dir.clone())
    }

    /// The database URL in effect.
    pub fn effective_database_url(&self) -> crate::store::DatabaseUrl {
        self.database_url
            .clone()
            .unwrap_or_else(|| crate::store::DatabaseUrl::sqlite(&self.data_dir.join("mission.db")))
    }
}

/// Audience of the API when none is configured.
pub const DEFAULT_AUDIENCE: &str = "mission-api";

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
    /// Most bytes all files of one user's missions may hold together.
    pub max_user_bytes: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self { max_file_bytes: 100 << 30, max_files_per_mission: 100_000, max_user_bytes: 1 << 40 }
    }
}
