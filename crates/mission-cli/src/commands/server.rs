//! `mission server`: run the service, or manage its built-in accounts.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use mission_server::{AuthMode, Server, ServerConfig};
use mission_store::Store;

use super::sizes::{Size, log_cap};

/// `--queue-order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum QueueOrderArg {
    /// By usage against share, then by submission.
    FairShare,
    /// By submission alone.
    FirstCome,
}

/// Run the Mission Compute service (HTTP API, identity provider, store).
///
/// With no flags it runs on embedded defaults: it listens on 127.0.0.1:8080, keeps its SQLite
/// database and signing key under ./mission-data, and signs users in with its built-in identity
/// provider. The first start creates an `admin` account and saves its password in the data dir.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServerCommand {
    #[command(subcommand)]
    action: Option<ServerAction>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum ServerAction {
    /// Create a built-in account (a password is generated and printed unless --password-stdin).
    AddUser(AddUserArgs),
    /// Print an example config file (for --config) documenting every key and its default.
    DefaultConfig,
}

/// The embedded defaults, which the flags' defaults show: the configuration holds them, once.
fn defaults() -> ServerConfig {
    ServerConfig::new("")
}

/// Where the server keeps its state.
#[derive(Debug, Args)]
struct StoreArgs {
    /// Read settings from this TOML file: one key per flag, named as the flag with `_` for `-`
    /// (`data_dir = "/var/lib/mission"`). A flag or its environment variable overrides the file;
    /// `mission server default-config` prints an example documenting every key.
    #[arg(long, env = "MISSION_SERVER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Folder for the SQLite database, the signing key and the first admin's password.
    #[arg(long, env = "MISSION_DATA_DIR", default_value = "./mission-data")]
    data_dir: PathBuf,
    /// Database URL: sqlite://PATH (default sqlite://DATA_DIR/mission.db), or
    /// postgres://USER:PASSWORD@HOST:PORT/DATABASE for a database several servers share.
    #[arg(long, env = "MISSION_DATABASE_URL", hide_env_values = true)]
    database_url: Option<mission_store::DatabaseUrl>,
    /// Folder of the identity provider's signing key and the cargo-bay sealing key (created on
    /// first start); defaults to DATA_DIR. Replicas of one service share it.
    #[arg(long, env = "MISSION_KEY_DIR")]
    key_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Print the configuration the server would run with (secrets redacted), each key saying
    /// whether a flag, the environment, the config file or the default set it; then exit.
    #[arg(long)]
    print_config: bool,
    /// Address and port to listen on.
    #[arg(long, env = "MISSION_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    #[command(flatten)]
    store: StoreArgs,
    /// URL clients and token issuers use to reach this server (default: http://LISTEN).
    #[arg(long, env = "MISSION_PUBLIC_URL")]
    public_url: Option<url::Url>,
    /// With several replicas: the URL agents reach this replica itself at (not the load
    /// balancer), where they open the tunnels of interactive sessions (default: the URL each
    /// agent connects to, right for one server).
    #[arg(long, env = "MISSION_ADVERTISE_URL")]
    advertise_url: Option<url::Url>,
    /// Serve interactive sessions from origins of their own, one host per session, such as
    /// https://*.sessions.example.org (a wildcard DNS name and certificate for it, pointing at
    /// this service; without a port, the public URL's). A browser reaches a session there with a
    /// cookie of that session alone, set by a one-time redirect from the console. This is the
    /// safe mode for apps you do not trust: without it, sessions are served under the console's
    /// own origin (/sessions/{job_id}/), where an app's pages could act as whoever opens them.
    #[arg(long, env = "MISSION_SESSIONS_URL", value_name = "URL")]
    sessions_url: Option<mission_server::SessionsUrl>,
    /// Use this external OIDC identity provider (e.g. https://TENANT.auth0.com/) instead of the
    /// built-in one; needs --audience.
    #[arg(long, env = "MISSION_AUTH_URL", requires = "audience")]
    auth_url: Option<url::Url>,
    /// API audience access tokens must carry.
    #[arg(long, env = "MISSION_AUDIENCE")]
    audience: Option<String>,
    /// With --auth-url: the access-token claim (e.g. groups) whose groups starting with
    /// --project-group-prefix make their user a member of a shared project: PREFIXbio makes a
    /// member of bio, PREFIXbio:manager a manager (or :viewer). Set at each sign-in; memberships
    /// the claim gave end when it stops naming the project; those set by hand stay.
    #[arg(long, env = "MISSION_PROJECT_GROUP_CLAIM", requires = "auth_url")]
    project_group_claim: Option<String>,
    /// What starts the groups of --project-group-claim that name projects.
    #[arg(long, env = "MISSION_PROJECT_GROUP_PREFIX", default_value = "mission:")]
    project_group_prefix: String,
    /// Client id advertised to clients in /api/v1/auth-config.
    #[arg(long, env = "MISSION_CLIENT_ID")]
    client_id: Option<String>,
    /// The default storage of mission files and job results: a folder (job logs go there too),
    /// or s3://BUCKET/PREFIX (see --storage-endpoint, --storage-region and the
    /// MISSION_STORAGE_ACCESS_KEY_ID / MISSION_STORAGE_SECRET_ACCESS_KEY variables). Defaults to
    /// DATA_DIR. Replicas of one service share it.
    #[arg(long, env = "MISSION_STORAGE")]
    storage: Option<mission_server::Storage>,
    /// With --storage s3://…: the URL of an S3-compatible server (AWS when absent).
    #[arg(long, env = "MISSION_STORAGE_ENDPOINT")]
    storage_endpoint: Option<String>,
    /// With --storage s3://…: the region to sign for.
    #[arg(long, env = "MISSION_STORAGE_REGION", default_value = mission_server::config::DEFAULT_REGION)]
    storage_region: String,
    /// With --storage s3://…: the access key id (prefer the environment variable).
    #[arg(long, env = "MISSION_STORAGE_ACCESS_KEY_ID", hide_env_values = true)]
    storage_access_key_id: Option<String>,
    /// With --storage s3://…: the secret access key (prefer the environment variable: arguments
    /// are visible to other users of the host).
    #[arg(long, env = "MISSION_STORAGE_SECRET_ACCESS_KEY", hide_env_values = true)]
    storage_secret_access_key: Option<Secret>,
    /// Seconds device clients are asked to wait between token polls.
    #[arg(long, env = "MISSION_DEVICE_POLL_INTERVAL", default_value_t = defaults().device_poll_interval)]
    device_poll_interval: u64,
    /// Lifetime of access tokens signed by the built-in provider, in seconds.
    #[arg(long, env = "MISSION_ACCESS_TOKEN_TTL", default_value_t = defaults().access_token_ttl.as_secs())]
    access_token_ttl: u64,
    /// Largest single mission file (bytes, or with a K/M/G/T suffix, powers of 1024).
    #[arg(long, env = "MISSION_MAX_FILE_SIZE", default_value_t = Size(defaults().file_limits.max_file_bytes))]
    max_file_size: Size,
    /// Most files one mission may hold.
    #[arg(long, env = "MISSION_MAX_FILES_PER_MISSION", default_value_t = defaults().file_limits.max_files_per_mission)]
    max_files_per_mission: u64,
    /// Most bytes all files of one user's missions and their image archives may hold (K/M/G/T suffixes allowed).
    #[arg(long, env = "MISSION_MAX_USER_BYTES", default_value_t = Size(defaults().file_limits.max_user_bytes))]
    max_user_bytes: Size,
    /// Largest container image archive one may import (`mission images import`; K/M/G/T
    /// suffixes allowed).
    #[arg(long, env = "MISSION_MAX_IMAGE_SIZE", default_value_t = Size(defaults().max_image_bytes))]
    max_image_size: Size,
    /// Seconds a landing zone counts as online after its agent was last heard from; a silent
    /// LZ's jobs are lost after it, and a new leader replica waits this long for agents to
    /// come back before giving up their jobs.
    #[arg(long, env = "MISSION_LZ_LEASE", default_value_t = defaults().lz_lease.as_secs())]
    lz_lease: u64,
    /// The most jobs one user may have on landing zones at once; their further jobs wait in
    /// the queue, saying so (pending reason `quota`). Default: no limit.
    #[arg(long, env = "MISSION_MAX_RUNNING_JOBS_PER_USER", value_name = "JOBS", value_parser = clap::value_parser!(u32).range(1..))]
    max_running_jobs_per_user: Option<u32>,
    /// Which queued job a station starts first. `fair-share`: a job of the project that used
    /// least against its share there (`mission projects limits --share`), then of its user that
    /// used least in the project, then the earliest; usage is CPU- plus GPU-seconds, decaying
    /// with --fair-share-half-life-hours, and a job counts as it starts (for its time limit, or
    /// an hour). `first-come`: the earliest submitted.
    #[arg(long, env = "MISSION_QUEUE_ORDER", value_enum, default_value_t = QueueOrderArg::FairShare)]
    queue_order: QueueOrderArg,
    /// Hours after which what a project or user used counts half in fair-share order.
    #[arg(long, env = "MISSION_FAIR_SHARE_HALF_LIFE_HOURS", default_value_t = 168, value_parser = clap::value_parser!(u64).range(1..))]
    fair_share_half_life_hours: u64,
    /// Seconds a job may take to end after `SIGTERM` when its room is reclaimed (it ran beyond
    /// its project's nominal on a station, and a project below its nominal needs the room),
    /// before `SIGKILL`; it then goes back in line at its old place.
    #[arg(long, env = "MISSION_RECLAIM_GRACE_SECONDS", default_value_t = defaults().reclaim_grace.as_secs())]
    reclaim_grace_seconds: u64,
    /// Days audit entries (who changed what: `mission audit`) are kept.
    #[arg(long, env = "MISSION_AUDIT_RETENTION_DAYS", default_value_t = defaults().audit_retention.as_secs() / 86_400,
        value_parser = clap::value_parser!(u64).range(1..))]
    audit_retention_days: u64,
    /// Hours events are kept: a client of the event stream that reconnects within them (with
    /// the last event id it saw) misses nothing.
    #[arg(long, env = "MISSION_EVENT_RETENTION_HOURS", default_value_t = defaults().event_retention.as_secs() / 3600)]
    event_retention_hours: u64,
    /// The most bytes kept of each output stream (stdout, stderr) of a job, K/M/G suffixes
    /// allowed; a job may ask for less (`mission run --log-cap`). Past it, output is dropped
    /// except its last quarter-cap bytes, which follow a marker line once the job ends, and the
    /// job says `log_truncated`. At least 1K.
    #[arg(long, env = "MISSION_JOB_LOG_CAP", default_value_t = Size(defaults().job_log_cap), value_parser = log_cap)]
    job_log_cap: Size,
    /// Do not create an `admin` account (with a generated password saved in the data dir) on
    /// the first start; create accounts with `mission server add-user` instead.
    #[arg(long, env = "MISSION_NO_BOOTSTRAP_ADMIN")]
    no_bootstrap_admin: bool,
    /// An S3 endpoint URL users other than admins may name in their cargo bays (repeat the flag,
    /// or separate with commas). AWS needs none; admins may name any endpoint.
    #[arg(long = "s3-endpoint", env = "MISSION_S3_ENDPOINTS", value_delimiter = ',')]
    s3_endpoints: Vec<url::Url>,
    /// A container registry, `HOST[:PORT]`, whose images users other than admins may register
    /// (`mission images add REFERENCE`; repeat the flag, or separate with commas). Landing zones
    /// pull from it; admins may name any registry.
    #[arg(long = "image-registry", env = "MISSION_IMAGE_REGISTRIES", value_delimiter = ',')]
    image_registries: Vec<String>,
    /// A directory of this host that GA4GH TES tasks may name `file://` inputs and outputs under
    /// (repeat the flag, or separate with commas). The server reads and writes there as itself,
    /// for whoever submits a task: allow only directories every user may share.
    #[arg(long = "tes-file-root", env = "MISSION_TES_FILE_ROOTS", value_delimiter = ',')]
    tes_file_roots: Vec<PathBuf>,
    /// A URL prefix users other than admins may register webhooks under, such as
    /// `https://hooks.example.org/` (repeat the flag, or separate with commas). The server POSTs
    /// events there, so it is a door into its network: allow only receivers you mean. Admins may
    /// register any http(s) URL.
    #[arg(long = "webhook-target", env = "MISSION_WEBHOOK_TARGETS", value_delimiter = ',')]
    webhook_targets: Vec<url::Url>,
    /// Attempts at one webhook delivery before it counts as failed; the waits between them
    /// double from 5 s, up to an hour.
    #[arg(long, env = "MISSION_WEBHOOK_ATTEMPTS", default_value_t = defaults().webhook_attempts.max_attempts,
        value_parser = clap::value_parser!(u32).range(1..=100))]
    webhook_attempts: u32,
    /// Seconds a webhook receiver has to answer an attempt.
    #[arg(long, env = "MISSION_WEBHOOK_TIMEOUT", default_value_t = defaults().webhook_attempts.timeout.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=300))]
    webhook_timeout: u64,
    /// Most connections served at once; more are answered 503 and closed. Default: 4096, or
    /// what the process's open-file limit leaves room for (raised to its hard limit at start).
    #[arg(long, env = "MISSION_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Seconds a connection may take to send a request's headers, counted from when it is ready
    /// for one (so also how long an idle keep-alive connection stays open).
    #[arg(long, env = "MISSION_HEADER_TIMEOUT", default_value_t = defaults().connection_limits.header_timeout.as_secs())]
    header_timeout: u64,
    /// Seconds a request body may send nothing before the request fails and its connection
    /// closes.
    #[arg(long, env = "MISSION_BODY_IDLE_TIMEOUT", default_value_t = defaults().connection_limits.body_idle_timeout.as_secs())]
    body_idle_timeout: u64,
    /// Do not run the embedded landing zone on the default station (jobs then need a
    /// `mission lz` agent).
    #[arg(long, env = "MISSION_NO_LOCAL_LZ", conflicts_with = "local_lz_name")]
    no_local_lz: bool,
    /// Name of the embedded landing zone. With SQLite it is `local` unless named here. With a
    /// postgres:// database several replicas serve one service, so none runs an embedded LZ
    /// unless given a name here, one per host (a second replica naming the same LZ takes it over).
    #[arg(long, env = "MISSION_LOCAL_LZ_NAME")]
    local_lz_name: Option<String>,
    #[command(flatten)]
    local_lz: super::lz::ResourceArgs,
    #[command(flatten)]
    local_lz_sandbox: super::lz::SandboxArgs,
    #[command(flatten)]
    local_lz_containers: super::lz::ContainerArgs,
}

/// A secret flag's value, which `Debug` does not show.
#[derive(Clone)]
struct Secret(String);

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Ok(Self(raw.to_owned()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[derive(Debug, Args)]
struct AddUserArgs {
    /// Login name: letters, digits, '.', '_', '-', '@'.
    name: String,
    /// Make the user an administrator.
    #[arg(long)]
    admin: bool,
    /// Read the password from standard input (first line) instead of generating one.
    #[arg(long)]
    password_stdin: bool,
    #[command(flatten)]
    store: StoreArgs,
}

impl StoreArgs {
    fn config(&self) -> ServerConfig {
        if let Some(file) = &self.config {
            tracing::info!(file = %file.display(), "settings read from the config file");
        }
        let mut config = ServerConfig::new(&self.data_dir);
        config.database_url = self.database_url.clone();
        config.key_dir = self.key_dir.clone();
        config
    }
}

impl ServerCommand {
    /// Runs the subcommand.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.action {
            Some(ServerAction::AddUser(args)) => add_user(args).await,
            Some(ServerAction::DefaultConfig) => {
                print!("{}", crate::config_file::example_of("server"));
                Ok(())
            }
            None => serve(self.run).await,
        }
    }
}

/// Raises the open-file limit to its hard limit (connections need descriptors, whatever bound
/// they have), and answers how many connections fit under it (at most 4096), keeping 256
/// descriptors for the database, files, pipes and agents.
fn raise_open_file_limit() -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    let open_files = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    usize::try_from(open_files.saturating_sub(256)).unwrap_or(usize::MAX).clamp(16, 4096)
}

async fn serve(args: RunArgs) -> anyhow::Result<()> {
    let mut config = args.store.config();
    config.public_url = args.public_url;
    config.advertise_url = args.advertise_url;
    config.sessions_url = args.sessions_url;
    if let Some(auth_url) = args.auth_url {
        config.auth = AuthMode::External { auth_url };
    }
    config.project_groups = args
        .project_group_claim
        .map(|claim| mission_server::ProjectGroups { claim, prefix: args.project_group_prefix });
    if let Some(audience) = args.audience {
        config.audience = audience;
    }
    if let Some(client_id) = args.client_id {
        config.client_id = client_id;
    }
    config.device_poll_interval = args.device_poll_interval;
    config.access_token_ttl = Duration::from_secs(args.access_token_ttl);
    config.file_limits = mission_server::FileLimits {
        max_file_bytes: args.max_file_size.0,
        max_files_per_mission: args.max_files_per_mission,
        max_user_bytes: args.max_user_bytes.0,
    };
    config.storage = args.storage.map(|storage| match storage {
        mission_server::Storage::S3(s3) => mission_server::Storage::S3(mission_server::S3Storage {
            endpoint: args.storage_endpoint,
            region: args.storage_region,
            access_key_id: args.storage_access_key_id,
            secret_access_key: args.storage_secret_access_key.map(|secret| secret.0),
            ..s3
        }),
        folder => folder,
    });
    config.lz_lease = Duration::from_secs(args.lz_lease.max(1));
    config.event_retention = Duration::from_secs(args.event_retention_hours.max(1).saturating_mul(3600));
    config.job_log_cap = args.job_log_cap.0;
    config.max_image_bytes = args.max_image_size.0;
    config.max_running_jobs_per_user = args.max_running_jobs_per_user;
    config.queue_order = match args.queue_order {
        QueueOrderArg::FairShare => mission_server::scheduler::QueueOrder::FairShare {
            half_life: Duration::from_secs(args.fair_share_half_life_hours.saturating_mul(3600)),
        },
        QueueOrderArg::FirstCome => mission_server::scheduler::QueueOrder::FirstCome,
    };
    config.reclaim_grace = Duration::from_secs(args.reclaim_grace_seconds);
    config.audit_retention = Duration::from_secs(args.audit_retention_days.saturating_mul(86_400));
    config.bootstrap_admin = !args.no_bootstrap_admin;
    let shared_database = config.effective_database_url().is_postgres();
    config.s3_endpoints = args.s3_endpoints;
    config.image_registries = args.image_registries;
    config.tes_file_roots = args.tes_file_roots;
    config.webhook_targets = args.webhook_targets;
    config.webhook_attempts.max_attempts = args.webhook_attempts;
    config.webhook_attempts.timeout = Duration::from_secs(args.webhook_timeout);
    let connections_allowed = raise_open_file_limit();
    config.connection_limits = mission_server::serve::ConnectionLimits {
        max_connections: args.max_connections.unwrap_or(connections_allowed),
        header_timeout: Duration::from_secs(args.header_timeout),
        body_idle_timeout: Duration::from_secs(args.body_idle_timeout),
    };
    let data_dir = config.data_dir.clone();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let server = Server::new(listener, config).await?;
    let url = server.public_url().to_owned();
    println!("Mission Compute Service listening on {url}");
    println!("Data dir: {}", data_dir.display());
    if let Some(admin) = server.bootstrap_admin() {
        println!(
            "Created the administrator account {:?}; its password is in {} (readable only by you).",
            admin.username,
            admin.password_file.display()
        );
        println!("Sign in with: mission login --server {url}");
    }
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let local_lz = match (args.no_local_lz, args.local_lz_name) {
        (true, _) => None,
        (false, Some(name)) => Some(name),
        (false, None) if shared_database => {
            println!("No embedded landing zone (the database is shared by replicas; give --local-lz-name to run one).");
            None
        }
        (false, None) => Some(super::lz::EMBEDDED_LZ_NAME.to_owned()),
    };
    let agent = if let Some(local_lz) = local_lz {
        let (token, local_tunnel) = server.embedded_lz(&local_lz).await?;
        let config = mission_lz::AgentConfig {
            servers: vec![server.local_url()],
            token,
            data_dir: data_dir.join("lz"),
            overrides: args.local_lz.overrides(),
            no_limits: args.local_lz.no_limits,
            // Jobs must not see the server's data dir (database, keys) either.
            sandbox: args.local_lz_sandbox.config(vec![data_dir.clone()]),
            containers: args.local_lz_containers.config(),
            runner: mission_lz::RunnerKind::Process,
            idle_exit: None,
            local_tunnel: Some(local_tunnel),
            // The embedded landing zone runs on the host users submit from.
            shared_paths: vec!["/".to_owned()],
            node_address: None,
        };
        println!("Embedded landing zone {local_lz:?} on station {:?}.", mission_api::DEFAULT_STATION_NAME);
        Some(tokio::spawn(mission_lz::run(config, wait(stopping.clone()))))
    } else {
        None
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    server.run(wait(stopping)).await.context("server failed")?;
    if let Some(agent) = agent {
        agent.await.context("the embedded landing zone panicked")?.context("the embedded landing zone failed")?;
    }
    println!("Stopped.");
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

async fn add_user(args: AddUserArgs) -> anyhow::Result<()> {
    let password = if args.password_stdin { Some(super::stdin_line("--password-stdin", "password")?) } else { None };
    let config = args.store.config();
    mission_server::create_private_dir(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let store = Store::open(&config.effective_database_url()).await?;
    let account = mission_server::users::add_user(&store, &args.name, password.as_deref(), args.admin, None).await?;
    let role = if args.admin { "administrator" } else { "user" };
    println!("Created {role} {:?} ({}).", account.user.username, account.user.user_id);
    if let Some(generated) = account.generated_password {
        println!("Password: {generated}");
    }
    Ok(())
}
