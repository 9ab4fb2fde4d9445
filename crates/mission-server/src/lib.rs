//! The Mission Compute service: HTTP API, built-in identity provider and store.
//!
//! The crate is built in floors, each using only the ones below it:
//! - [`http`]: the edge (the API's routes, the web console, the galileo façade, the sessions
//!   proxy, sign-in, problem+json errors, connections);
//! - [`domain`]: what the service does, resource by resource, with its validation and
//!   authorization: the routes, the console and the façade all call it;
//! - [`services`]: what the running server holds (the scheduler's handle and the replicas'
//!   cluster, object storage, job logs, events, webhooks, the built-in provider's keys);
//! - [`config`]: what the flags set, a leaf.
//!
//! This root builds the floors: [`Server`] turns a config and a bound listener into a running
//! service (the binary and the tests share this one entry point), and [`App`] is what it holds,
//! the one handle the edge and the domain are given. The database (SQLite or PostgreSQL) is the
//! `mission-store` crate's.

pub mod config;
pub mod domain;
pub mod http;
pub mod services;

// The paths other crates and the tests name.
pub use domain::{catalogue, users};
pub use http::serve;
pub use services::{agent_tokens, blobs, idp, job_logs, scheduler};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use config::{
    AuthMode, FileLimits, ProjectGroups, S3Storage, ServerConfig, SessionsUrl, SignInLimits, Storage, WebhookAttempts,
};
pub use http::routes::{ApiDoc, RecoveryError};
use mission_store::Store;
pub use mission_store::fsutil::create_private_dir;
pub use users::BootstrapAdmin;

use domain::{audit, bay_storage};
use http::auth::Authenticator;
use http::metrics::Metrics;
use http::{idempotency, routes, sessions};
use mission_store::fsutil;
use services::idp::BuiltinIdp;
use services::{events, locks, sealing, webhooks};

/// Shared state of the running service.
#[derive(Debug)]
pub struct App {
    /// The database.
    pub store: Store,
    /// The configuration it was started with.
    pub config: ServerConfig,
    /// Base URL of this server, without a trailing slash.
    pub public_url: String,
    /// Base URL of the identity provider clients sign in with.
    pub auth_url: String,
    /// The built-in provider, unless an external one is configured.
    pub idp: Option<BuiltinIdp>,
    /// Bearer-token verification.
    pub auth: Authenticator,
    /// Where mission files' bytes live: the default storage and the cargo bays.
    pub bays: bay_storage::CargoBays,
    /// Places jobs on landing zones and follows them.
    pub scheduler: scheduler::Scheduler,
    /// Landing-zone agents' tokens.
    pub agent_tokens: Arc<agent_tokens::AgentTokens>,
    /// Jobs' output as it streams in.
    pub logs: Arc<job_logs::JobLogs>,
    /// New events, for the event streams open here.
    pub events: Arc<events::EventHub>,
    /// Webhook deliveries: their router and sender.
    pub webhooks: Arc<webhooks::Webhooks>,
    /// Seals the secrets the server must read back (cargo-bay credentials, webhook secrets).
    pub sealing: Arc<sealing::SealingKey>,
    /// Turns true when the server stops, ending long-lived responses (agent orders, log follows).
    pub closing: tokio::sync::watch::Sender<bool>,
    /// What the server spawned besides the connections (the scheduler, copies of logs): waited
    /// for before [`Server::run`] returns.
    pub(crate) tasks: tokio_util::task::TaskTracker,
    /// Cancelled once the connections are done: the spawned tasks end.
    shutdown: tokio_util::sync::CancellationToken,
    /// The tunnels agents opened to this replica for their sessions.
    pub tunnels: Arc<sessions::Tunnels>,
    /// Serialises the commit of concurrent changes to one file.
    path_locks: locks::PathLocks,
    metrics: Metrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

pub use mission_store::DEFAULT_STATION_ID;

/// Handle to [`App`] that handlers receive.
pub type AppState = Arc<App>;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data dir or key file could not be used.
    #[error("data dir {path}: {source}")]
    DataDir {
        /// The path involved.
        path: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// Another server runs on the data dir.
    #[error(
        "another mission server{} is using the data dir {}: stop it first, or give this one a \
         --data-dir of its own",
        .pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
        .path.display()
    )]
    DataDirInUse {
        /// The data dir.
        path: std::path::PathBuf,
        /// The process holding it, if known.
        pid: Option<u32>,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] mission_store::StoreError),
    /// The default storage cannot be used.
    #[error("the default storage: {0}")]
    Storage(object_store::Error),
    /// Unfinished file changes could not be settled.
    #[error("settling the file changes a stopped server left: {0}")]
    Recovery(#[from] routes::RecoveryError),
    /// The first admin account could not be created.
    #[error(transparent)]
    Account(#[from] users::AccountError),
}

/// The service, bound and ready to run.
pub struct Server {
    app: AppState,
    /// Held until [`Server::run`] returns, so no second server starts on the data dir.
    data_dir_lock: fsutil::DataDirLock,
    listener: TcpListener,
    bootstrap: Option<BootstrapAdmin>,
    local: SocketAddr,
}

impl Server {
    /// Opens the store, loads or creates keys and the first admin, and prepares to serve on
    /// `listener`.
    pub async fn new(listener: TcpListener, config: ServerConfig) -> Result<Self, StartError> {
        let local: SocketAddr =
            listener.local_addr().map_err(|source| StartError::DataDir { path: config.data_dir.clone(), source })?;
        fsutil::create_private_dir(&config.data_dir)
            .map_err(|source| StartError::DataDir { path: config.data_dir.clone(), source })?;
        let data_dir_lock = fsutil::DataDirLock::acquire(&config.data_dir).map_err(|e| match e {
            fsutil::LockError::Held(pid) => StartError::DataDirInUse { path: config.data_dir.clone(), pid },
            fsutil::LockError::Io(source) => StartError::DataDir { path: config.data_dir.clone(), source },
        })?;
        let store = Store::open(&config.effective_database_url()).await?;
        // On a shared database, this process is one replica: its unfinished file changes say so.
        let store = if store.cluster().is_some() { store.for_replica(uuid::Uuid::new_v4()) } else { store };
        let public_url = match &config.public_url {
            Some(url) => url.as_str().trim_end_matches('/').to_owned(),
            None => format!("http://{local}"),
        };
        let key_dir = config.key_dir();
        fsutil::create_private_dir(&key_dir).map_err(|source| StartError::DataDir { path: key_dir.clone(), source })?;
        let (idp, auth, auth_url, bootstrap) = match &config.auth {
            AuthMode::Builtin => {
                let idp = BuiltinIdp::load_or_create(
                    &key_dir,
                    public_url.clone(),
                    config.audience.clone(),
                    config.access_token_ttl,
                    config.sign_in_limits,
                    store.cluster(),
                )
                .map_err(|source| StartError::DataDir { path: key_dir.clone(), source })?;
                let auth = Authenticator::builtin(
                    idp.kid().to_owned(),
                    idp.decoding_key().clone(),
                    idp.issuer().to_owned(),
                    config.audience.clone(),
                    store.clone(),
                );
                let bootstrap =
                    if config.bootstrap_admin { users::bootstrap_admin(&store, &config.data_dir).await? } else { None };
                (Some(idp), auth, public_url.clone(), bootstrap)
            }
            AuthMode::External { auth_url } => {
                let auth = Authenticator::external(
                    auth_url,
                    config.jwks_min_refetch,
                    config.audience.clone(),
                    store.clone(),
                    config.project_groups.clone(),
                );
                (None, auth, auth_url.as_str().trim_end_matches('/').to_owned(), None)
            }
        };
        let (files, logs_folder) = match config.storage() {
            config::Storage::Folder(root) => {
                let files_root = root.join("files");
                let files = blobs::FileStore::local(&files_root)
                    .map_err(|source| StartError::DataDir { path: files_root.clone(), source })?;
                (files, root)
            }
            config::Storage::S3(s3) => {
                let files = blobs::FileStore::s3(&s3).map_err(StartError::Storage)?;
                files.probe(&[]).await.map_err(StartError::Storage)?;
                (files, config.data_dir.clone())
            }
        };
        let sealing = Arc::new(
            sealing::SealingKey::load(&key_dir)
                .map_err(|source| StartError::DataDir { path: key_dir.clone(), source })?,
        );
        let bays = bay_storage::CargoBays::new(sealing.clone(), files);
        // With several replicas another one may be mid-upload right now: what a stopped replica
        // left is not this start's to settle.
        if store.cluster().is_none() {
            routes::recover_files(&store, &bays).await?;
            match domain::images::remove_orphans(&store, bays.default_store()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("removed {n} image archive(s) an interrupted import or delete left"),
                Err(e) => tracing::warn!("looking for image archives without an image failed: {e}"),
            }
        }
        let logs_root = logs_folder.join("job-logs");
        let logs = Arc::new(match store.cluster() {
            // Replicas keep logs in the database they share.
            Some(db) => job_logs::JobLogs::in_database(db),
            None => job_logs::JobLogs::new(logs_root.clone())
                .map_err(|source| StartError::DataDir { path: logs_root, source })?,
        });
        let agent_tokens = Arc::new(agent_tokens::AgentTokens::new(store.clone()));
        let (tasks, shutdown) = (tokio_util::task::TaskTracker::new(), tokio_util::sync::CancellationToken::new());
        let scheduler = scheduler::Scheduler::start(
            store.clone(),
            logs.clone(),
            agent_tokens.clone(),
            scheduler::Policy {
                lease: config.lz_lease,
                max_running_per_user: config.max_running_jobs_per_user,
                order: config.queue_order,
                reclaim_grace: config.reclaim_grace,
            },
            &tasks,
            shutdown.clone(),
        )
        .await?;
        let cluster = store.cluster();
        let events = events::EventHub::new(store.clone());
        tasks.spawn(events.clone().run(config.event_retention, shutdown.clone()));
        tasks.spawn(audit::prune(store.clone(), config.audit_retention, shutdown.clone()));
        let grid_files = domain::stations::GridIntensityFiles::new(store.clone(), scheduler.clone());
        tasks.spawn(grid_files.every(config.grid_intensity_refresh, shutdown.clone()));
        tasks.spawn(idempotency::prune(store.clone(), shutdown.clone()));
        let webhooks = webhooks::Webhooks::new(store.clone(), sealing.clone(), config.webhook_attempts);
        tasks.spawn(webhooks.clone().run(events.clone(), shutdown.clone()));
        let connection_limits = config.connection_limits;
        let app = Arc::new(App {
            store,
            config,
            public_url,
            auth_url,
            idp,
            auth,
            bays,
            scheduler,
            agent_tokens,
            logs,
            events,
            webhooks,
            sealing,
            closing: tokio::sync::watch::channel(false).0,
            tasks,
            shutdown,
            tunnels: Arc::new(sessions::Tunnels::new(connection_limits.max_connections)),
            path_locks: locks::PathLocks::new(cluster),
            metrics: Metrics::default(),
        });
        if app.store.cluster().is_some() {
            app.tasks.spawn(routes::settle_stopped_replicas(app.clone(), app.shutdown.clone()));
        }
        Ok(Self { app, data_dir_lock, listener, bootstrap, local })
    }

    /// A URL of this server on the loopback interface, for agents on the same host.
    pub fn local_url(&self) -> String {
        let ip = match self.local.ip() {
            ip if ip.is_unspecified() && ip.is_ipv6() => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip if ip.is_unspecified() => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.local.port()))
    }

    /// Registers the embedded landing zone `name` on the default station (or gives it a new token
    /// if it exists) and answers the token its agent connects with, and the in-process tunnel
    /// through which this server reaches its sessions (the agent serves it).
    pub async fn embedded_lz(
        &self,
        name: &str,
    ) -> Result<(String, mission_tunnel::LocalTunnel), mission_store::StoreError> {
        let token = idp::random_secret();
        let lz_id = self
            .app
            .store
            .rotate_lz_token(DEFAULT_STATION_ID, name, &idp::hash_secret(&token), mission_store::now())
            .await?;
        self.app.scheduler.registered(mission_store::LzIdentity {
            lz_id,
            station_id: DEFAULT_STATION_ID,
            name: name.into(),
            cluster_account: None,
        });
        let tunnel = mission_tunnel::LocalTunnel::default();
        self.app.tunnels.attach_local(lz_id, tunnel.clone());
        Ok((token, tunnel))
    }

    /// The URL clients reach this server at.
    pub fn public_url(&self) -> &str {
        &self.app.public_url
    }

    /// The admin account created on this start, if the store was empty.
    pub fn bootstrap_admin(&self) -> Option<&BootstrapAdmin> {
        self.bootstrap.as_ref()
    }

    /// The shared state (tests use it to reach the store).
    pub fn app(&self) -> AppState {
        self.app.clone()
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests, then stops and waits
    /// for what the server spawned (the scheduler, with a replica's lead; copies of logs).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let _data_dir_lock = self.data_dir_lock;
        let router = routes::router(self.app.clone());
        let app = self.app.clone();
        let shutdown = async move {
            shutdown.await;
            app.closing.send_replace(true);
        };
        let served = serve::serve(self.listener, router, self.app.config.connection_limits, shutdown).await;
        self.app.shutdown.cancel();
        self.app.tasks.close();
        self.app.tasks.wait().await;
        served
    }
}
