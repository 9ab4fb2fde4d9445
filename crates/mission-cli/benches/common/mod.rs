//! What the benchmarks share: the real `mission server` binary on 127.0.0.1 and a sign-in
//! through the real device flow.

// Each benchmark compiles this module and uses only some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// The binary under test.
/// The `mission` binary under test: this build's, or the one `BENCH_MISSION_BIN` names (to compare
/// two builds on the same machine, run after run).
pub fn bin() -> String {
    std::env::var("BENCH_MISSION_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mission").to_owned())
}

/// Starts a landing zone's agent (`mission lz`, its `flags` added) with its `token`, connecting
/// to `url`, its files in `data_dir`; it logs at `warn`, its output dropped, and is killed when
/// dropped.
pub fn spawn_agent(url: &str, token: &str, data_dir: &Path, flags: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(bin())
        .args(["lz", "--server", url])
        .args(flags)
        .arg("--data-dir")
        .arg(data_dir)
        .env("MISSION_LZ_TOKEN", token)
        .env("MISSION_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Starts `mission server` on a free port over `data_dir`; returns the process and its URL.
pub async fn spawn_server(data_dir: &Path) -> (tokio::process::Child, String) {
    spawn_server_with(data_dir, &[]).await
}

/// [`spawn_server`] with `extra` flags.
pub async fn spawn_server_with(data_dir: &Path, extra: &[&str]) -> (tokio::process::Child, String) {
    spawn_server_env(data_dir, extra, &[]).await
}

/// [`spawn_server_with`] with `env` set for the server. It logs at `warn`, or at the filter
/// `BENCH_SERVER_LOG` gives (`warn,sqlx::query=debug` logs every SQL statement with its time).
pub async fn spawn_server_env(
    data_dir: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let mut server = tokio::process::Command::new(bin())
        .args(["server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .envs(env.iter().copied())
        .env("MISSION_LOG", std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("server banner");
        if let Some(u) = line.strip_prefix("Mission Compute Service listening on ") {
            break u.to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (server, url)
}

pub use mission_testkit::device_sign_in as sign_in;

/// Where the benchmark's service keeps its store, from `BENCH_DATABASE`: `sqlite` (the default:
/// one process, SQLite in its data dir), `postgres` (one replica on the PostgreSQL test server),
/// `postgres2` (two replicas on it, requests spread over both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// One process on SQLite.
    Sqlite,
    /// `replicas` processes on one PostgreSQL database.
    Postgres { replicas: usize },
}

impl Deployment {
    /// The deployment `BENCH_DATABASE` names.
    pub fn from_env() -> Self {
        match std::env::var("BENCH_DATABASE").as_deref() {
            Err(_) | Ok("sqlite") => Self::Sqlite,
            Ok("postgres") => Self::Postgres { replicas: 1 },
            Ok("postgres2") => Self::Postgres { replicas: 2 },
            Ok(other) => panic!("BENCH_DATABASE={other:?}: expected sqlite, postgres or postgres2"),
        }
    }

    /// A name for the tables.
    pub fn label(self) -> String {
        match self {
            Self::Sqlite => "SQLite, 1 process".into(),
            Self::Postgres { replicas } => format!("PostgreSQL, {replicas} replica(s)"),
        }
    }

    /// The service's database for a benchmark under `home`: created empty (PostgreSQL) or
    /// where the first replica's data dir will hold it (SQLite).
    pub async fn database(self, home: &Path) -> mission_store::DatabaseUrl {
        match self {
            Self::Sqlite => mission_store::DatabaseUrl::sqlite(&home.join("data/mission.db")),
            Self::Postgres { .. } => {
                mission_testkit::PostgresDatabase::create().await.expect("PostgreSQL for the benchmark").url
            }
        }
    }
}

/// The service under test: its replicas (the first runs the embedded landing zone) and the
/// first one's data dir.
pub struct Service {
    /// Each replica's process and URL.
    pub replicas: Vec<(tokio::process::Child, String)>,
    /// The first replica's data dir (the first admin's password is there).
    pub data_dir: std::path::PathBuf,
}

impl Service {
    /// Starts the deployment's replicas under `home` on `database`, with `extra` flags.
    pub async fn start(
        deployment: Deployment,
        home: &Path,
        database: &mission_store::DatabaseUrl,
        extra: &[&str],
    ) -> Self {
        let data_dir = home.join("data");
        let Deployment::Postgres { replicas } = deployment else {
            return Self { replicas: vec![spawn_server_with(&data_dir, extra).await], data_dir };
        };
        let (keys, storage) = (home.join("keys").display().to_string(), home.join("storage").display().to_string());
        let mut started: Vec<(tokio::process::Child, String)> = Vec::new();
        for i in 0..replicas {
            let mut flags: Vec<String> = extra.iter().map(|f| (*f).to_owned()).collect();
            flags.extend(["--key-dir".to_owned(), keys.clone(), "--storage".to_owned(), storage.clone()]);
            match started.first() {
                // The first replica runs the embedded LZ (the single process's `local`), if any.
                None if !extra.contains(&"--no-local-lz") => {
                    flags.extend(["--local-lz-name".to_owned(), "local".to_owned()]);
                }
                None => {}
                Some((_, first)) => flags.extend(["--public-url".to_owned(), first.clone()]),
            }
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let dir = if i == 0 { data_dir.clone() } else { home.join(format!("data{i}")) };
            // The URL with its password goes by the environment, not the command line.
            started.push(spawn_server_env(&dir, &flags, &[("MISSION_DATABASE_URL", database.expose())]).await);
        }
        Self { replicas: started, data_dir }
    }

    /// The replicas' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.replicas.iter().map(|(_, url)| url.clone()).collect()
    }

    /// CPU time all replicas have used so far.
    pub fn cpu_time(&self) -> Duration {
        self.replicas.iter().filter_map(|(child, _)| child.id().and_then(cpu_time)).sum()
    }
}

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resident memory of a process now, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:").unwrap_or(0)
}

/// Peak resident memory of a process so far, in KiB.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// CPU time (user + system) a process has used so far, from /proc (clock ticks of 10 ms).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks: u64 = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The `p`-th percentile (0..=1) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Writes `mib` MiB of incompressible bytes (xorshift) to `path`.
pub fn write_incompressible(path: &Path, mib: usize) {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes());
        }
        file.write_all(&block).unwrap();
    }
}

/// Writes 10,000 files of 4 KiB into 100 folders under `root`.
pub fn write_small_file_tree(root: &Path) {
    for folder in 0..100 {
        let dir = root.join(format!("d{folder:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for file in 0..100 {
            std::fs::write(dir.join(format!("f{file:03}.dat")), vec![(folder * 100 + file) as u8; 4096]).unwrap();
        }
    }
}

/// A server over `root/data` with one account, signed in for the SDK and, through `root/home`'s
/// token and config files, for the CLI.
pub struct SignedIn {
    pub server: tokio::process::Child,
    pub url: String,
    /// The CLI's home: run it with [`SignedIn::cli_env`].
    pub home: std::path::PathBuf,
    pub client: mission_client::Client,
    pub access_token: String,
}

impl SignedIn {
    pub async fn start(root: &Path, username: &str, password: &str) -> Self {
        Self::start_with(root, username, password, &[]).await
    }

    /// [`SignedIn::start`] with `extra` flags for the server.
    pub async fn start_with(root: &Path, username: &str, password: &str, extra: &[&str]) -> Self {
        Self::start_as(root, username, password, false, extra).await
    }

    /// [`SignedIn::start_with`], the user an administrator where `admin`.
    pub async fn start_as(root: &Path, username: &str, password: &str, admin: bool, extra: &[&str]) -> Self {
        use mission_client::auth::token_file::{self, StoredToken};
        let home = root.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let data_dir = root.join("data");
        let mut add = std::process::Command::new(bin())
            .args(["server", "add-user", username, "--password-stdin", "--data-dir"])
            .arg(&data_dir)
            .args(admin.then_some("--admin"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut add.stdin.take().unwrap(), password.as_bytes()).unwrap();
        drop(add.stdin.take());
        assert!(add.wait().unwrap().success());
        let (server, url) = spawn_server_with(&data_dir, extra).await;
        let (tokens, auth) = sign_in(&url, username, password).await;
        token_file::write(&home.join("tokens"), &StoredToken::new(&tokens.refresh_token, tokens.expires_at)).unwrap();
        std::fs::write(home.join("config.json"), serde_json::json!({ "server": url }).to_string()).unwrap();
        let access_token = tokens.access_token.clone();
        let client = mission_client::Client::with_tokens(&url, tokens, auth).unwrap();
        Self { server, url, home, client, access_token }
    }

    /// The environment the CLI finds this sign-in in.
    pub fn cli_env(&self) -> [(&'static str, std::path::PathBuf); 3] {
        [
            ("HOME", self.home.clone()),
            ("MISSION_CONFIG", self.home.join("config.json")),
            ("MISSION_TOKEN_FILE", self.home.join("tokens")),
        ]
    }

    /// A new empty mission; its id.
    pub async fn new_mission(&self, name: &str) -> uuid::Uuid {
        let request = mission_client::CreateMission { name: name.into(), ..Default::default() };
        self.client.create_mission(&request).await.unwrap().mission_id
    }
}

/// Mission number `i` of a benchmark's store: owned by `user_id`, created `at`, named so that
/// names repeat every 10,000, one in a hundred public.
pub fn bench_mission(i: usize, user_id: uuid::Uuid, at: chrono::DateTime<chrono::Utc>) -> mission_api::Mission {
    mission_api::Mission {
        mission_id: uuid::Uuid::new_v4(),
        name: format!("mission {:05}", i % 10_000),
        description: "benchmark mission with a description of ordinary length".into(),
        mission_type_id: None,
        source_storage_id: None,
        destination_storage_id: None,
        source_path: None,
        destination_path: None,
        settings: std::collections::BTreeMap::new(),
        public: i.is_multiple_of(100),
        archived: false,
        args: vec!["--steps".into(), "100".into()],
        labels: Default::default(),
        retry: None,
        image: None,
        user_id,
        project_id: user_id,
        created_at: at,
        updated_at: at,
    }
}

/// A `shell` mission named `name` running `sh run.sh`, with the files of `src` (which holds
/// `run.sh`) uploaded.
pub async fn shell_mission(client: &mission_client::Client, name: &str, src: &Path) -> mission_api::Mission {
    let request = mission_client::CreateMission {
        name: name.into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some(std::collections::BTreeMap::from([
            ("filename".to_owned(), "run.sh".to_owned()),
            ("shell".to_owned(), "sh".to_owned()),
        ])),
        ..Default::default()
    };
    client.create_and_upload_mission(&request, src).await.unwrap()
}

/// A test cluster: the one `MISSION_TEST_SLURM_CONF` names, or one started for the benchmark.
pub struct SlurmCluster {
    pub conf: String,
    started: Option<tempfile::TempDir>,
}

impl SlurmCluster {
    pub fn up() -> Self {
        if let Ok(conf) = std::env::var("MISSION_TEST_SLURM_CONF") {
            return Self { conf, started: None };
        }
        let dir = tempfile::tempdir().unwrap();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-test-cluster.sh");
        let out = std::process::Command::new("bash").arg(&script).arg("start").arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { conf: String::from_utf8(out.stdout).unwrap().trim().to_owned(), started: Some(dir) }
    }

    /// `program` with the cluster's `SLURM_CONF`.
    pub fn command(&self, program: &str) -> std::process::Command {
        let mut command = std::process::Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.started {
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-test-cluster.sh");
            let _ = std::process::Command::new("bash").arg(script).arg("stop").arg(dir.path()).status();
        }
    }
}
