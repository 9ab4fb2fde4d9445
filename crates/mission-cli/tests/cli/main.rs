//! The `mission` binary end to end: `mission server` on a free port, `mission login` through the
//! device flow (approved via `POST /activate`), and the mission and type commands.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod containers;
mod ends;
mod fair_share;
mod gangs;
mod jobs;
mod manual;
mod reclaim;
mod replicas;
mod sessions;
mod shell;
mod slurm;
mod slurm_commands;
mod store_writes;
mod tes;
mod walkthrough;
mod webhooks;

const BIN: &str = env!("CARGO_BIN_EXE_mission");

/// A `mission server` process and a home for CLI state.
struct Fixture {
    /// Killed when the fixture drops.
    server: Child,
    url: String,
    data_dir: PathBuf,
    home: tempfile::TempDir,
}

impl Fixture {
    async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts `mission server` with `extra` flags.
    async fn start_with(extra: &[&str]) -> Self {
        let home = tempfile::tempdir().unwrap();
        let data_dir = home.path().join("data");
        // Under umask 000: the server must keep what it writes private by itself.
        let mut server = Command::new("sh")
            .args(["-c", "umask 000; exec \"$0\" \"$@\"", BIN])
            .args(["server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0", "--data-dir"])
            .arg(&data_dir)
            .args(extra)
            .env_remove("MISSION_SERVER")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (url, banner) = read_banner(&mut server).await;
        assert!(banner.contains("Created the administrator account \"admin\""), "{banner}");
        Self { server, url, data_dir, home }
    }

    fn command(&self, profile: &str) -> Command {
        let dir = self.home.path().join(profile);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.env("HOME", &dir)
            .env("MISSION_CONFIG", dir.join("config.json"))
            .env("MISSION_TOKEN_FILE", dir.join("tokens"))
            .env_remove("MISSION_SERVER")
            .env_remove("BROWSER")
            .kill_on_drop(true);
        cmd
    }

    /// Runs `mission ARGS` as `profile` and returns its output.
    async fn run(&self, profile: &str, args: &[&str]) -> Output {
        let output = self.command(profile).args(args).output();
        tokio::time::timeout(Duration::from_secs(60), output).await.expect("command finished").unwrap()
    }

    /// Runs and expects success; returns stdout.
    async fn ok(&self, profile: &str, args: &[&str]) -> String {
        let out = self.run(profile, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "mission {args:?} failed: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `mission ARGS` as `profile` with `input` on standard input.
    async fn run_with_stdin(&self, profile: &str, args: &[&str], input: &str) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .command(profile)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("command finished")
            .unwrap()
    }

    /// Adds a built-in user through `mission server add-user --password-stdin`.
    async fn add_user(&self, username: &str, password: &str) {
        let data_dir = self.data_dir.to_str().unwrap().to_owned();
        let args = ["server", "add-user", username, "--password-stdin", "--data-dir", &data_dir];
        let out = self.run_with_stdin("ops", &args, &format!("{password}\n")).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("Created user \"{username}\"")));
    }

    /// Runs with `--json` and parses stdout.
    async fn json(&self, profile: &str, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(profile, &all).await).unwrap()
    }

    /// `mission login --no-browser`, approving the printed code as `username`.
    async fn login(&self, profile: &str, username: &str, password: &str) -> String {
        let mut login = self.command(profile);
        login.args(["login", "--no-browser", "--server", &self.url]);
        approve_login(login, &self.url, username, password).await
    }
}

/// Reads a starting `mission server`'s banner from its stdout (within 60 s), up to its sign-in
/// line, and keeps draining the rest; answers the address it listens on and the banner.
async fn read_banner(server: &mut Child) -> (String, String) {
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut banner = String::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            banner.push_str(&line);
            banner.push('\n');
            if let Some(u) = line.strip_prefix("Mission Compute Service listening on ") {
                url = Some(u.to_owned());
            }
            if line.starts_with("Sign in with:") {
                break;
            }
        }
    })
    .await
    .expect("the server's banner within 60 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (url.expect("the server says where it listens"), banner)
}

/// Runs `login` (a `mission login --no-browser` against `url`) and approves the code it prints
/// through `POST /activate` as `username`; it must succeed. Answers its stdout.
async fn approve_login(mut login: Command, url: &str, username: &str, password: &str) -> String {
    let mut child = login.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let code = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(code) = line.split("enter the code ").nth(1) {
                assert!(line.contains(&format!("{url}/activate")), "{line}");
                return code.trim().to_owned();
            }
        }
        panic!("login printed no code");
    })
    .await
    .unwrap();
    let form = [("user_code", code.as_str()), ("username", username), ("password", password), ("action", "approve")];
    let page = reqwest::Client::new().post(format!("{url}/activate")).form(&form).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Checks that every folder under `dir` is 0700 and every file 0600.
fn assert_private(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut dirs = vec![dir.to_path_buf()];
    let mut files = 0;
    while let Some(dir) = dirs.pop() {
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                files += 1;
                assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", entry.path().display());
            }
        }
    }
    assert!(files > 0);
}

fn admin_password(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("initial-admin-password")).unwrap().trim().to_owned()
}

#[tokio::test]
async fn first_start_login_and_mission_commands() {
    let fx = Fixture::start().await;
    let password = admin_password(&fx.data_dir);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(fx.data_dir.join("initial-admin-password")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Not signed in yet: a one-line reason and a non-zero exit.
    let out = fx.run("admin", &["missions", "list", "--server", &fx.url]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: not signed in") && stderr.lines().count() == 1, "{stderr}");

    let said = fx.login("admin", "admin", &password).await;
    assert_eq!(said.trim(), format!("Signed in to {} as admin.", fx.url));
    // The server is remembered; the token file is 0600.
    let tokens = fx.home.path().join("admin/tokens");
    assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    let me = fx.json("admin", &["whoami"]).await;
    assert_eq!((me["username"].as_str(), me["admin"].as_bool()), (Some("admin"), Some(true)));
    // An access token for other clients (a TES engine, curl): one line, accepted by the API.
    let token = fx.ok("admin", &["token"]).await;
    assert_eq!(token.lines().count(), 1, "{token}");
    let me =
        reqwest::Client::new().get(format!("{}/api/v1/me", fx.url)).bearer_auth(token.trim()).send().await.unwrap();
    assert_eq!(me.json::<serde_json::Value>().await.unwrap()["username"], "admin");
    let token = fx.json("admin", &["token"]).await;
    assert!(token["access_token"].is_string() && token["expires_at"].is_string(), "{token}");

    // Types.
    let types = fx.ok("admin", &["types", "list"]).await;
    assert!(types.starts_with("NAME") && types.contains("python") && types.contains("julia"), "{types}");
    let settings = fx.json("admin", &["types", "settings", "python"]).await;
    assert!(settings["filename"].as_str().unwrap().contains("required"));
    let detail = fx.ok("admin", &["types", "get", "shell"]).await;
    assert!(detail.contains("command:") && detail.contains("{filename}"), "{detail}");

    // Missions: create, list, get, update, args, delete.
    let created = fx
        .json(
            "admin",
            &[
                "missions",
                "create",
                "--name",
                "cli mission",
                "--type",
                "python",
                "--setting",
                "filename=main.py",
                "--public",
                "--label",
                "project=climate",
            ],
        )
        .await;
    let id = created["mission_id"].as_str().unwrap().to_owned();
    assert_eq!(created["settings"]["filename"], "main.py");
    assert_eq!(created["public"], true);
    let table = fx.ok("admin", &["missions", "list"]).await;
    assert!(table.contains(&id) && table.contains("cli mission") && table.contains("public"), "{table}");
    let listed = fx.json("admin", &["missions", "list", "--name", "cli mission", "--type", "python"]).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    fx.ok("admin", &["missions", "update", &id, "--description", "from the CLI", "--archive"]).await;
    let got = fx.json("admin", &["missions", "get", &id]).await;
    assert_eq!((got["description"].as_str(), got["archived"].as_bool()), (Some("from the CLI"), Some(true)));
    let with_args = fx.json("admin", &["missions", "args", &id, "--", "--steps", "10", "a b"]).await;
    assert_eq!(with_args["args"], serde_json::json!(["--steps", "10", "a b"]));
    let shown = fx.ok("admin", &["missions", "get", &id]).await;
    assert!(shown.contains("args:") && shown.contains("--steps 10 a b"), "{shown}");
    assert!(shown.contains("project=climate"), "{shown}");
    let relabelled = fx.ok("admin", &["missions", "label", &id, "project-", "stage=final"]).await;
    assert!(relabelled.contains("labels: stage=final"), "{relabelled}");
    let found = fx.json("admin", &["missions", "list", "--label", "stage=final"]).await;
    assert_eq!(found[0]["mission_id"], id.as_str());
    assert!(fx.json("admin", &["missions", "list", "--label", "project=climate"]).await.as_array().unwrap().is_empty());
    let table = fx.ok("admin", &["missions", "list", "--label", "stage=final"]).await;
    assert!(table.contains("LABELS") && table.contains("stage=final"), "{table}");

    // Errors name the problem.
    let out =
        fx.run("admin", &["missions", "create", "--name", "x", "--type", "python", "--setting", "colour=red"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("setting \"colour\""));
    let out = fx.run("admin", &["missions", "create", "--name", "x", "--type", "fortran"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("no mission type \"fortran\""));
    let out = fx.run("admin", &["missions", "get", "00000000-0000-4000-8000-000000000000"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: not found"));

    fx.ok("admin", &["missions", "delete", &id]).await;
    assert!(fx.json("admin", &["missions", "list"]).await.as_array().unwrap().is_empty());

    // A second user from `server add-user`, with a password on stdin; isolated from the admin.
    fx.add_user("bob", "bobs secret pw").await;
    fx.login("bob", "bob", "bobs secret pw").await;
    let private = fx.json("admin", &["missions", "create", "--name", "admin only"]).await;
    let out = fx.run("bob", &["missions", "get", private["mission_id"].as_str().unwrap()]).await;
    assert!(!out.status.success());

    // Logout revokes: the CLI is signed out afterwards.
    assert_eq!(fx.ok("bob", &["logout"]).await.trim(), "Signed out.");
    assert!(!fx.home.path().join("bob/tokens").exists());
    let out = fx.run("bob", &["whoami"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("not signed in"));
}

#[tokio::test]
async fn help_teaches_and_bad_flags_fail() {
    let fx_home = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).arg("--help").env("HOME", fx_home.path()).output().await.unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for word in ["server", "login", "missions", "files", "cargo-bays", "types", "--json"] {
        assert!(help.contains(word), "{word} missing from --help");
    }
    let out = Command::new(BIN).args(["server", "--help"]).output().await.unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("--auth-url") && help.contains("add-user") && help.contains("embedded defaults"), "{help}");
    let out = Command::new(BIN).args(["missions", "create"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    let out = Command::new(BIN).args(["files", "upload", "--help"]).output().await.unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("--concurrency") && help.contains("MISSION_TRANSFER_CONCURRENCY"), "{help}");
    let id = "6d697373-696f-4e00-8000-000000000001";
    let out = Command::new(BIN).args(["files", "upload", id, ".", "--concurrency", "0"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "a concurrency of 0 is a usage error");
    let out = Command::new(BIN).args(["cargo-bays", "create", "x", "--kind", "local"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "a local bay needs --path");
}

#[tokio::test]
async fn files_commands_round_trip() {
    let fx = Fixture::start().await;
    let password = admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("main.py"), "print('hi')\n").unwrap();
    std::fs::write(src.join("sub/data.csv"), "x\n1\n").unwrap();
    let src_str = src.to_str().unwrap();

    // Create and upload in one command.
    let created = fx.json("admin", &["missions", "create", "--name", "with files", "--upload", src_str]).await;
    let id = created["mission_id"].as_str().unwrap().to_owned();
    let listed = fx.json("admin", &["files", "list", &id]).await;
    let paths: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}|{}", f["path"].as_str().unwrap(), f["filename"].as_str().unwrap()))
        .collect();
    assert_eq!(paths, ["|main.py", "sub|data.csv"]);

    // Upload again: unchanged; a single file with --rename.
    let again = fx.json("admin", &["files", "upload", &id, src_str]).await;
    assert_eq!((again["uploaded"].as_u64(), again["unchanged"].as_u64()), (Some(0), Some(2)));
    let single = src.join("main.py");
    fx.ok("admin", &["files", "upload", &id, single.to_str().unwrap(), "--rename", "bin/run.py"]).await;
    let table = fx.ok("admin", &["files", "list", &id]).await;
    assert!(table.starts_with("PATH") && table.contains("bin/run.py") && table.contains("sub/data.csv"), "{table}");

    // Download everything, and one folder.
    let out = fx.home.path().join("out");
    let all = fx.ok("admin", &["files", "download", &id, "-o", out.to_str().unwrap()]).await;
    assert!(all.contains("Downloaded 3 file(s)"), "{all}");
    assert_eq!(std::fs::read_to_string(out.join("bin/run.py")).unwrap(), "print('hi')\n");
    assert_eq!(std::fs::read_to_string(out.join("sub/data.csv")).unwrap(), "x\n1\n");
    let only = fx.home.path().join("only-sub");
    fx.ok("admin", &["files", "download", &id, "sub", "-o", only.to_str().unwrap()]).await;
    assert!(only.join("sub/data.csv").exists() && !only.join("main.py").exists());

    // Delete, then deleting again fails with a reason.
    fx.ok("admin", &["files", "delete", &id, "bin/run.py"]).await;
    let out = fx.run("admin", &["files", "delete", &id, "bin/run.py"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no file \"bin/run.py\""));
    let out = fx.run("admin", &["files", "delete", &id, "../escape"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("'..'"));
}

#[tokio::test]
async fn server_file_limit_flags_apply() {
    let fx = Fixture::start_with(&["--max-file-size", "1K", "--max-files-per-mission", "1"]).await;
    let password = admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let id =
        fx.json("admin", &["missions", "create", "--name", "small"]).await["mission_id"].as_str().unwrap().to_owned();
    let big = fx.home.path().join("big.bin");
    std::fs::write(&big, vec![0u8; 1025]).unwrap();
    let out = fx.run("admin", &["files", "upload", &id, big.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_file_size = 1024"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let small = fx.home.path().join("a.txt");
    std::fs::write(&small, "a").unwrap();
    fx.ok("admin", &["files", "upload", &id, small.to_str().unwrap()]).await;
    let out = fx.run("admin", &["files", "upload", &id, small.to_str().unwrap(), "--rename", "b.txt"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_files_per_mission = 1"));
}

#[tokio::test]
async fn cargo_bay_commands_with_an_s3_server() {
    let Some(s3) = mission_testkit::S3Server::start().await else { return };
    let fx = Fixture::start_with(&["--s3-endpoint", &s3.endpoint]).await;
    fx.add_user("carol", "carols password").await;
    fx.login("carol", "carol", "carols password").await;

    let listed = fx.ok("carol", &["cargo-bays", "list"]).await;
    assert!(listed.starts_with("NAME") && listed.contains("default"), "{listed}");

    // The server allows this endpoint to non-admins (--s3-endpoint); not another one.
    let create = |name: &'static str, endpoint: String| {
        let args: Vec<String> = [
            "cargo-bays",
            "create",
            name,
            "--bucket",
            &s3.bucket,
            "--prefix",
            "cli",
            "--region",
            &s3.region,
            "--endpoint",
            &endpoint,
            "--access-key-id",
            &s3.access_key_id,
            "--secret-access-key-stdin",
        ]
        .map(String::from)
        .to_vec();
        args
    };
    let refused = create("elsewhere", "http://127.0.0.1:9".into());
    let refused: Vec<&str> = refused.iter().map(String::as_str).collect();
    let out = fx.run_with_stdin("carol", &refused, &s3.secret_access_key).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--s3-endpoint"));
    let wrong = create("wrong", s3.endpoint.clone());
    let wrong: Vec<&str> = wrong.iter().map(String::as_str).collect();
    let out = fx.run_with_stdin("carol", &wrong, "not the secret").await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the credentials"));

    let args = create("lab", s3.endpoint.clone());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.insert(0, "--json");
    let out = fx.run_with_stdin("carol", &args, &format!("{}\n", s3.secret_access_key)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bay: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((bay["kind"].as_str(), bay["has_credentials"].as_bool()), (Some("s3"), Some(true)));
    let shown = fx.ok("carol", &["cargo-bays", "get", "lab"]).await;
    assert!(shown.contains(&format!("s3://{}/cli", s3.bucket)) && shown.contains("stored (encrypted)"), "{shown}");
    assert!(!shown.contains(&s3.secret_access_key));

    // A mission whose files live in the bay, named by the bay's name.
    let src = fx.home.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("input.txt"), "from the bucket\n").unwrap();
    let created = fx
        .json(
            "carol",
            &["missions", "create", "--name", "s3 run", "--source-storage", "lab", "--upload", src.to_str().unwrap()],
        )
        .await;
    let id = created["mission_id"].as_str().unwrap().to_owned();
    assert_eq!(created["source_storage_id"], bay["storage_id"]);
    let out_dir = fx.home.path().join("out");
    fx.ok("carol", &["files", "download", &id, "-o", out_dir.to_str().unwrap()]).await;
    assert_eq!(std::fs::read_to_string(out_dir.join("input.txt")).unwrap(), "from the bucket\n");

    // In use, the bay stays; once the mission is gone it can be deleted.
    let out = fx.run("carol", &["cargo-bays", "delete", "lab"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 mission"));
    fx.ok("carol", &["missions", "delete", &id]).await;
    assert!(fx.ok("carol", &["cargo-bays", "delete", "lab"]).await.contains("deleted cargo bay"));
    let out = fx.run("carol", &["cargo-bays", "delete", "default"]).await;
    assert!(!out.status.success());
}

#[tokio::test]
async fn run_and_jobs_commands_on_the_embedded_landing_zone() {
    let fx = Fixture::start().await;
    let password = admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("job");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "echo \"hello $1\"\necho warn >&2\necho made > made.txt\n").unwrap();
    let src_str = src.to_str().unwrap();
    let created = fx
        .json(
            "admin",
            &[
                "missions",
                "create",
                "--name",
                "cli job",
                "--type",
                "shell",
                "--setting",
                "filename=run.sh",
                "--upload",
                src_str,
            ],
        )
        .await;
    let id = created["mission_id"].as_str().unwrap().to_owned();
    fx.ok("admin", &["missions", "args", &id, "--", "world"]).await;

    // The default station holds the embedded LZ, online with this host's resources.
    let station = fx.ok("admin", &["stations", "get", "local"]).await;
    assert!(station.contains("open to all") && station.contains("online"), "{station}");

    // Run and follow: the job's output comes through as it is written; exit 0 on completion.
    let out = fx.run("admin", &["run", &id, "--follow"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("hello world\n") && stdout.contains("completed"), "{stdout}");
    assert!(stderr.contains("warn"), "{stderr}");

    let jobs = fx.json("admin", &["jobs", "list"]).await;
    let job = jobs["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    assert_eq!(jobs["jobs"][0]["status"], "completed");
    let shown = fx.ok("admin", &["jobs", "get", &job]).await;
    assert!(shown.contains("status:") && shown.contains("history:") && shown.contains("bash run.sh world"), "{shown}");
    let logs = fx.run("admin", &["jobs", "logs", &job]).await;
    assert_eq!(String::from_utf8_lossy(&logs.stdout), "hello world\n");
    let dest = fx.home.path().join("results");
    let got = fx.ok("admin", &["jobs", "download", &job, dest.to_str().unwrap()]).await;
    assert!(got.contains("Downloaded 3 file(s)"), "{got}");
    assert_eq!(std::fs::read_to_string(dest.join("made.txt")).unwrap(), "made\n");
    let dest = fx.home.path().join("results-o");
    let got = fx.ok("admin", &["jobs", "download", &job, "-o", dest.to_str().unwrap()]).await;
    assert!(got.contains("Downloaded 3 file(s)"), "{got}");
    assert_eq!(std::fs::read_to_string(dest.join("made.txt")).unwrap(), "made\n");
    let both = fx.run("admin", &["jobs", "download", &job, "-o", "a", "b"]).await;
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"), "one directory, not two");

    // Labels: given at run, found by `jobs list --label`, changed by `jobs label`.
    let labelled = fx.json("admin", &["run", &id, "--label", "sweep=lr", "--label", "seed=7", "--wait"]).await;
    let labelled_id = labelled["job_id"].as_str().unwrap().to_owned();
    assert_eq!(labelled["labels"], serde_json::json!({"seed": "7", "sweep": "lr"}));
    let found = fx.json("admin", &["jobs", "list", "--label", "sweep=lr"]).await;
    assert_eq!(found["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(found["jobs"][0]["job_id"], labelled_id.as_str());
    let table = fx.ok("admin", &["jobs", "list", "--label", "seed=7"]).await;
    assert!(table.contains("LABELS") && table.contains("seed=7, sweep=lr"), "{table}");
    let relabelled = fx.ok("admin", &["jobs", "label", &labelled_id, "seed-", "best=yes"]).await;
    assert!(relabelled.contains("best=yes, sweep=lr"), "{relabelled}");
    assert!(fx.ok("admin", &["jobs", "get", &labelled_id]).await.contains("labels:"));
    let none = fx.json("admin", &["jobs", "list", "--label", "seed=7"]).await;
    assert_eq!(none["jobs"].as_array().unwrap().len(), 0, "the removed label no longer finds it");
    let bad = fx.run("admin", &["run", &id, "--label", "no value"]).await;
    assert!(String::from_utf8_lossy(&bad.stderr).contains("key=value"), "{}", String::from_utf8_lossy(&bad.stderr));

    // A failing job makes `run --wait` fail, naming the reason; an impossible one is refused.
    std::fs::write(src.join("run.sh"), "exit 7\n").unwrap();
    fx.ok("admin", &["files", "upload", &id, src.join("run.sh").to_str().unwrap()]).await;
    let out = fx.run("admin", &["run", &id, "--wait"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failed: exit status 7"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = fx.run("admin", &["run", &id, "--cpus", "100000"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("could ever hold"));

    // Dependencies: a job after one that failed fails at once, saying which; one after a job
    // still running waits, and `jobs get` says why.
    let listed = fx.json("admin", &["jobs", "list", "--items", "1"]).await;
    let failed = listed["jobs"][0]["job_id"].as_str().unwrap().to_owned();
    let doomed = fx.json("admin", &["run", &id, "--after-ok", &failed]).await;
    assert_eq!(doomed["status"], "failed");
    assert_eq!(doomed["reason"].as_str().unwrap(), format!("the job it waited for, {failed}, ended failed"));
    let shown = fx.ok("admin", &["jobs", "get", doomed["job_id"].as_str().unwrap()]).await;
    assert!(shown.lines().any(|l| l.starts_with("after ok:") && l.ends_with(&failed)), "{shown}");
    std::fs::write(src.join("run.sh"), "sleep 30\n").unwrap();
    fx.ok("admin", &["files", "upload", &id, src.join("run.sh").to_str().unwrap()]).await;
    let long = fx.json("admin", &["run", &id]).await;
    let long = long["job_id"].as_str().unwrap().to_owned();
    let next = fx.json("admin", &["run", &id, "--after-any", &long]).await;
    let next = next["job_id"].as_str().unwrap().to_owned();
    let shown = fx.ok("admin", &["jobs", "get", &next]).await;
    let waiting = format!("waiting for job {long} to end (dependency)");
    assert!(shown.lines().any(|l| l.starts_with("waiting:") && l.ends_with(&waiting)), "{shown}");
    let table = fx.ok("admin", &["jobs", "list", "--items", "1"]).await;
    assert!(table.contains(&format!("waiting for job {long} to end")), "{table}");
    fx.ok("admin", &["jobs", "stop", &long]).await;
    let out = fx.run("admin", &["--json", "run", &id, "--after-ok", &long, "--wait"]).await;
    assert!(!out.status.success(), "a job that could not run fails `run --wait`");
    let stopped_after: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stopped_after["reason"].as_str().unwrap(), format!("the job it waited for, {long}, ended stopped"));
    fx.ok("admin", &["jobs", "stop", &next]).await;

    // Stations: create, register an LZ (token printed once), list, remove.
    fx.ok("admin", &["stations", "create", "lab", "--description", "the lab"]).await;
    let added = fx.ok("admin", &["stations", "add-lz", "lab", "node1"]).await;
    assert!(added.contains("MISSION_LZ_TOKEN=") && added.contains("mission lz --server"), "{added}");
    let listed = fx.ok("admin", &["stations", "list"]).await;
    assert!(listed.contains("lab") && listed.contains("members only"), "{listed}");
    fx.ok("admin", &["stations", "remove-lz", "lab", "node1"]).await;
    fx.ok("admin", &["stations", "delete", "lab"]).await;

    // Projects: an admin makes one and adds members; a mission and a run name it; lists show it.
    let bio = fx.json("admin", &["projects", "create", "bio", "--description", "biology"]).await;
    let bio_id = bio["project_id"].as_str().unwrap().to_owned();
    let added = fx.ok("admin", &["projects", "add-member", "bio", "admin", "--role", "manager"]).await;
    assert!(added.contains("admin is a manager of bio"), "{added}");
    let bad_role = fx.run("admin", &["projects", "add-member", "bio", "admin", "--role", "owner"]).await;
    let stderr = String::from_utf8_lossy(&bad_role.stderr);
    assert!(stderr.contains("roles are viewer, member and manager"), "{stderr}");
    let members = fx.ok("admin", &["projects", "members", "bio"]).await;
    assert!(members.contains("ROLE") && members.contains("manager"), "{members}");
    std::fs::write(src.join("run.sh"), "echo charged\n").unwrap();
    let create = ["missions", "create", "--name", "bio run", "--type", "shell", "--setting", "filename=run.sh"];
    let in_bio = fx.json("admin", &[&create[..], &["--upload", src_str, "--project", "bio"]].concat()).await;
    assert_eq!(in_bio["project_id"], bio_id.as_str());
    let in_bio = in_bio["mission_id"].as_str().unwrap().to_owned();
    let home = fx.json("admin", &["run", &in_bio, "--project", "~admin", "--wait"]).await;
    assert_ne!(home["project_id"], bio_id.as_str(), "the run names its project");
    let charged = fx.json("admin", &["run", &in_bio, "--wait"]).await;
    assert_eq!(
        (charged["project_id"].as_str(), charged["status"].as_str()),
        (Some(bio_id.as_str()), Some("completed"))
    );
    let table = fx.ok("admin", &["jobs", "list", "--items", "2"]).await;
    assert!(table.contains("PROJECT") && table.contains(" bio ") && table.contains("~admin"), "{table}");
    let table = fx.ok("admin", &["missions", "list", "--items", "1"]).await;
    assert!(table.contains("PROJECT") && table.contains("bio run") && table.contains(" bio "), "{table}");
    let of_bio = fx.json("admin", &["jobs", "list", "--project", "bio"]).await;
    let of_bio = of_bio["jobs"].as_array().unwrap();
    assert!(of_bio.len() == 1 && of_bio[0]["project_id"] == bio_id.as_str(), "{of_bio:?}");
    let missions_of_bio = fx.json("admin", &["missions", "list", "--project", "bio"]).await;
    assert_eq!(missions_of_bio.as_array().unwrap().len(), 1, "{missions_of_bio}");
    let unknown = fx.run("admin", &["run", &in_bio, "--project", "astro"]).await;
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no project \"astro\""));
    let listed = fx.ok("admin", &["projects", "list"]).await;
    assert!(listed.contains("bio") && listed.contains("~admin") && listed.contains("YOUR ROLE"), "{listed}");
    let shown = fx.ok("admin", &["projects", "get", "bio"]).await;
    assert!(shown.contains("kind:") && shown.contains("shared") && shown.contains("biology"), "{shown}");
    fx.ok("admin", &["projects", "limits", "bio", "local", "--cpus", "1", "--borrow-cpus", "0", "--max-queued", "5"])
        .await;
    let table = fx.ok("admin", &["projects", "limits", "bio"]).await;
    assert!(
        table.contains("STATION") && table.contains("local") && table.contains("0/1 ") && table.contains("0/5"),
        "{table}"
    );
    let nothing = fx.run("admin", &["projects", "limits", "bio", "local"]).await;
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("nothing to set"));
    fx.ok("admin", &["projects", "limits", "bio", "local", "--clear"]).await;
    let none = fx.ok("admin", &["projects", "budget", "bio"]).await;
    assert_eq!(none.trim(), "project bio has no budget");
    let set = fx.ok("admin", &["projects", "budget", "bio", "--cpu-hours", "500", "--period", "week"]).await;
    assert!(
        set.starts_with("project bio spent 0.0 of 500 CPU-hours (0%) and 0.0 GPU-hours (no limit) for the week of"),
        "{set}"
    );
    let shown = fx.json("admin", &["projects", "budget", "bio"]).await;
    assert_eq!(
        (shown["budget"]["cpu_hours"].as_f64(), shown["budget"]["period"].as_str()),
        (Some(500.0), Some("week"))
    );
    let energy =
        fx.ok("admin", &["projects", "budget", "bio", "--kwh", "80", "--money", "120", "--currency", "EUR"]).await;
    assert!(energy.contains(" of 80 kWh (") && energy.contains(" of 120 EUR ("), "{energy}");
    let bad = fx.run("admin", &["projects", "budget", "bio", "--money", "5"]).await;
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--currency"), "{bad:?}");
    let bad = fx.run("admin", &["projects", "budget", "bio", "--cpu-hours", "1", "--period", "year"]).await;
    assert!(String::from_utf8_lossy(&bad.stderr).contains("week, month or total"));
    fx.ok("admin", &["projects", "budget", "bio", "--clear"]).await;
    let usage = fx.ok("admin", &["projects", "usage", "--group-by", "user"]).await;
    assert!(usage.starts_with("USER") && usage.contains("CPU H HELD") && usage.contains("admin"), "{usage}");
    // With --since, the kWh each group drew a day, as a sparkline: 30 days and today, the jobs
    // of today at the end (the highest bar, the only one above the floor).
    let month = fx.ok("admin", &["projects", "usage", "--since", "30d"]).await;
    let header = month.lines().next().unwrap();
    assert!(header.contains("KWH") && header.contains("CO2E KG") && header.ends_with("KWH A DAY"), "{month}");
    let bio = month.lines().find(|line| line.starts_with("bio ")).unwrap_or_else(|| panic!("{month}"));
    let spark: String = bio.chars().rev().take_while(|c| ('▁'..='█').contains(c)).collect();
    assert_eq!(spark.chars().count(), 31, "{month}");
    assert!(spark.starts_with('█') && spark.chars().skip(1).all(|c| c == '▁'), "{month}");
    let csv = fx.ok("admin", &["projects", "usage", "--csv", "--since", "1d"]).await;
    assert!(csv.starts_with("project,project_id,jobs,") && csv.contains("\nbio,"), "{csv}");
    let bad = fx.run("admin", &["projects", "usage", "--group-by", "team"]).await;
    assert!(String::from_utf8_lossy(&bad.stderr).contains("group_by"), "{}", String::from_utf8_lossy(&bad.stderr));
    let refused = fx.run("admin", &["projects", "delete", "bio"]).await;
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds 1 mission(s)"));
    fx.ok("admin", &["missions", "update", &in_bio, "--project", "~admin"]).await;
    fx.ok("admin", &["projects", "delete", "bio"]).await;

    // Database, keys, stored files, logs, the landing zone's cache: all private, under umask 000.
    let written = ["mission.db", "mission.db-wal", "idp-signing-key.p8", "files", "job-logs", "lz/cache"];
    for path in written {
        assert!(fx.data_dir.join(path).exists(), "{path}");
    }
    assert_private(&fx.data_dir);
}

#[tokio::test]
async fn a_job_on_the_embedded_landing_zone_cannot_reach_the_server() {
    let fx = Fixture::start().await;
    fx.add_user("mallory", "a long passphrase").await;
    fx.login("mallory", "mallory", "a long passphrase").await;
    let src = fx.home.path().join("probe");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("probe.sh"), jobs::PROBE).unwrap();
    let args = ["missions", "create", "--name", "probe", "--type", "shell", "--setting", "filename=probe.sh"];
    let created = fx.json("mallory", &[&args[..], &["--upload", src.to_str().unwrap()]].concat()).await;
    let id = created["mission_id"].as_str().unwrap().to_owned();
    let data = &fx.data_dir;
    let targets = [
        format!("read:{}", data.join("idp-signing-key.p8").display()),
        format!("read:{}", data.join("initial-admin-password").display()),
        format!("read:{}", data.join("mission.db").display()),
        format!("write:{}", data.join("mission.db").display()),
        format!("list:{}", data.display()),
        format!("list:{}", data.join("lz/cache").display()),
        format!("signal:{}", fx.server.id().unwrap()),
    ];
    let mut set_args = vec!["missions", "args", &id, "--"];
    set_args.extend(targets.iter().map(String::as_str));
    fx.ok("mallory", &set_args).await;
    let out = fx.run("mallory", &["run", &id, "--follow"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("ALLOWED"), "a job reached the server's files:\n{stdout}");
    assert_eq!(stdout.matches("denied").count(), targets.len(), "{stdout}");
    assert!(!stdout.starts_with("uid=0\n"), "{stdout}");
}

/// `mission completions SHELL` prints a completion script from the CLI's own definitions.
#[tokio::test]
async fn completions_come_from_the_clis_definitions() {
    let fx = Fixture::start().await;
    let bash = fx.ok("ops", &["completions", "bash"]).await;
    assert!(bash.contains("_mission()") && bash.contains("images") && bash.contains("--container-network"), "{bash}");
    assert!(fx.ok("ops", &["completions", "zsh"]).await.starts_with("#compdef mission"));
    assert!(fx.ok("ops", &["completions", "fish"]).await.contains("complete -c mission"));
    let out = fx.run("ops", &["completions", "tcsh"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}

/// A `mission server` logging to `log` (with `extra` flags), and its URL once it serves.
async fn server_logging_to(log: &Path, extra: &[&str]) -> (Child, String) {
    let data_dir = log.with_extension("data");
    let mut server = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--device-poll-interval", "0", "--data-dir"])
        .arg(&data_dir)
        .args(extra)
        .env_remove("MISSION_SERVER")
        .env("MISSION_LOG", "info,mission_server::audit=debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        let mut url = None;
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(u) = line.strip_prefix("Mission Compute Service listening on ") {
                url = Some(u.to_owned());
            }
            if line.starts_with("Sign in with:") {
                break;
            }
        }
        url.expect("listening line")
    })
    .await
    .expect("server banner");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (server, url)
}

/// Waits until `log` holds a line `found` accepts.
async fn wait_for_log_line(log: &Path, found: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(log).unwrap().lines().any(&found) {
        assert!(tokio::time::Instant::now() < deadline, "not logged: {}", std::fs::read_to_string(log).unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs written anywhere but a terminal carry no colour codes (a journal or file stays
/// greppable); `--log-format json` writes one JSON object per line, and every line logged for
/// a request names its request id, which the answer's `X-Request-Id` carries.
#[tokio::test]
async fn logs_to_a_file_hold_no_colour_codes_and_name_each_requests_id() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("server.log");
    let (mut server, _) = server_logging_to(&log, &[]).await;
    // The embedded landing zone's agent logs as it starts.
    wait_for_log_line(&log, |line| line.contains(" INFO ")).await;
    server.kill().await.unwrap();
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(!written.contains('\u{1b}'), "no escape codes: {written:?}");

    let log = home.path().join("json.log");
    let (mut server, url) = server_logging_to(&log, &["--log-format", "json"]).await;
    let answer = reqwest::Client::new()
        .get(format!("{url}/api/v1/missions/{}", uuid::Uuid::nil()))
        .header("X-Request-Id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.headers()["x-request-id"], "trace-me-42");
    let logged = |line: &str| {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        line["span"]["request_id"] == "trace-me-42"
            && line["span"]["route"] == "/api/v1/missions/{id}"
            && line["fields"]["message"] == "request answered"
            && line["fields"]["status"] == 401
    };
    wait_for_log_line(&log, logged).await;
    server.kill().await.unwrap();
    let written = std::fs::read_to_string(&log).unwrap();
    for line in written.lines() {
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(parsed["level"].is_string() && parsed["timestamp"].is_string(), "{line}");
    }
}

/// `mission images` end to end through the binary: import (as JSON for scripts), list, get,
/// and delete, with the errors a user meets.
#[tokio::test]
async fn image_commands_import_list_get_and_delete() {
    let Some(archive) = containers::test_image() else { return };
    let fx = Fixture::start().await;
    fx.login("admin", "admin", &admin_password(&fx.data_dir)).await;
    let archive = archive.to_str().unwrap();
    let image = fx.json("admin", &["images", "import", archive, "--name", "debian:12"]).await;
    assert_eq!((image["name"].as_str(), image["format"].as_str()), (Some("debian:12"), Some("oci")));
    let id = image["image_id"].as_str().unwrap().to_owned();
    let listed = fx.ok("admin", &["images", "list"]).await;
    assert!(listed.starts_with("ID") && listed.contains("debian:12") && listed.contains("private"), "{listed}");
    let shown = fx.ok("admin", &["images", "get", &id]).await;
    assert!(shown.contains(image["digest"].as_str().unwrap()), "{shown}");
    let again = fx.run("admin", &["images", "import", archive, "--name", "debian:12"]).await;
    assert!(String::from_utf8_lossy(&again.stderr).contains("you have an image named \"debian:12\" already"));
    let said = fx.ok("admin", &["images", "delete", &id]).await;
    assert_eq!(said.trim(), format!("deleted image {id}"));
    let gone = fx.run("admin", &["images", "delete", &id]).await;
    assert!(!gone.status.success() && String::from_utf8_lossy(&gone.stderr).contains(&format!("no image {id}")));
}

/// `mission server --config FILE` starts the server where the file says (its database URL from
/// a file of its own, as systemd credentials deliver secrets); a variable and a flag override the
/// file; an unknown key or a wrong value is refused naming the file's line. `mission lz` reads
/// one too, its token from a file named by a variable.
#[tokio::test]
async fn a_config_file_configures_the_server_and_the_agent() {
    let home = tempfile::tempdir().unwrap();
    let path = |name: &str| home.path().join(name).display().to_string();
    std::fs::write(path("database_url"), format!("sqlite://{}\n", path("elsewhere.db"))).unwrap();
    let config = format!(
        "# where the service keeps its state\ndata_dir = {:?}\ndatabase_url_file = {:?}\n\
         listen = \"127.0.0.1:0\"\ndevice_poll_interval = 0\nmax_files_per_mission = 3\n",
        path("data"),
        path("database_url")
    );
    std::fs::write(path("server.toml"), &config).unwrap();
    let mission = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command.args(args).env_remove("MISSION_SERVER").env_remove("MISSION_MAX_FILES_PER_MISSION").kill_on_drop(true);
        command
    };

    let mut server = mission(&["server", "--config", &path("server.toml")]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("Mission Compute Service listening on ") {
                return url.to_owned();
            }
        }
        panic!("no listening line");
    })
    .await
    .expect("the server starts");
    assert_eq!(reqwest::get(format!("{url}/healthz")).await.unwrap().status(), 200);
    assert!(Path::new(&path("elsewhere.db")).exists(), "the database is where the secret's file says");
    assert!(Path::new(&path("data")).join("initial-admin-password").exists());
    server.kill().await.unwrap();

    // Flag > environment > file > default, and where each came from.
    let printed = |extra: &[&str], env: Option<&str>| {
        let mut command = mission(&["server", "--config", &path("server.toml"), "--print-config"]);
        command.args(extra);
        if let Some(value) = env {
            command.env("MISSION_MAX_FILES_PER_MISSION", value);
        }
        async move {
            let out = command.output().await.unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let from_file = printed(&[], None).await;
    assert!(from_file.contains("max_files_per_mission = 3  # file\n"), "{from_file}");
    assert!(from_file.contains("database_url = \"[redacted]\"  # file\n"), "{from_file}");
    assert!(from_file.contains("listen = \"127.0.0.1:0\"  # file\n"), "{from_file}");
    assert!(from_file.contains("header_timeout = 30  # default\n"), "{from_file}");
    assert!(!from_file.contains("elsewhere.db"), "secrets are never printed: {from_file}");
    assert!(printed(&[], Some("5")).await.contains("max_files_per_mission = 5  # environment\n"));
    let flag = printed(&["--max-files-per-mission", "4"], Some("5")).await;
    assert!(flag.contains("max_files_per_mission = 4  # flag\n"), "{flag}");

    // Nothing wrong is ignored.
    for (line, expected) in [
        (
            "max_files_per_mision = 3",
            "server.toml:7: max_files_per_mision: unknown key (mission server has no --max-files-per-mision flag",
        ),
        ("header_timeout = \"soon\"", "server.toml:7: header_timeout: invalid value 'soon' for '--header-timeout'"),
        ("no_local_lz = \"yes\"", "server.toml:7: no_local_lz: expected true or false, not string"),
    ] {
        std::fs::write(path("server.toml"), format!("{config}{line}\n")).unwrap();
        let out = mission(&["server", "--config", &path("server.toml")]).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }

    // The agent: its server from the file, its token from a file a variable names.
    std::fs::write(path("token"), "lz-secret-token\n").unwrap();
    std::fs::write(path("lz.toml"), format!("server = \"{url}\"\ndata_dir = {:?}\n", path("lz"))).unwrap();
    let out = mission(&["lz", "--config", &path("lz.toml"), "--print-config"])
        .env_remove("MISSION_LZ_TOKEN")
        .env("MISSION_LZ_TOKEN_FILE", path("token"))
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains("token = \"[redacted]\"  # environment\n"), "{printed}");
    assert!(printed.contains(&format!("server = \"{url}\"  # file\n")), "{printed}");
    assert!(!printed.contains("lz-secret-token"), "{printed}");
    let example = mission(&["server", "default-config"]).output().await.unwrap();
    let example = String::from_utf8(example.stdout).unwrap();
    assert!(example.contains("#listen = \"127.0.0.1:8080\"\n") && example.contains("#database_url =\n"), "{example}");
}

/// The service units of `packaging/systemd` pass `systemd-analyze verify` without a word (it
/// exits 0 on unknown keys and bad values, so any output fails), with this binary as the
/// `mission` they start; and their hardening is what the guide promises
/// (`docs/src/admins/service.md`).
#[tokio::test]
async fn the_systemd_units_verify() {
    if Command::new("systemd-analyze").arg("--version").output().await.is_err() {
        mission_testkit::skip_unless_required(
            "SYSTEMD",
            "no systemd-analyze (scripts/install-test-deps.sh installs systemd)",
        );
        return;
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd");
    let dir = tempfile::tempdir().unwrap();
    let mut copies = Vec::new();
    for name in ["mission-server.service", "mission-lz.service"] {
        let unit = std::fs::read_to_string(units.join(name)).unwrap();
        assert!(unit.contains("ExecStart=/usr/local/bin/mission "), "{name}");
        let copy = dir.path().join(name);
        std::fs::write(&copy, unit.replace("/usr/local/bin/mission", BIN)).unwrap();
        copies.push(copy);
    }
    let out = Command::new("systemd-analyze").arg("verify").args(&copies).output().await.unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "{said}");

    let server = std::fs::read_to_string(units.join("mission-server.service")).unwrap();
    for setting in [
        "DynamicUser=yes",
        "StateDirectory=mission",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
    ] {
        assert!(server.contains(setting), "the server's unit has {setting:?}");
    }
    let agent = std::fs::read_to_string(units.join("mission-lz.service")).unwrap();
    for setting in ["LoadCredential=token:", "Delegate=yes", "ProtectSystem=strict", "RestrictNamespaces=mnt pid"] {
        assert!(agent.contains(setting), "the agent's unit has {setting:?}");
    }
}

/// `scripts/release.sh` packs what a site installs: the binary, completions that load in bash,
/// the units, example configs that are valid files, the OpenAPI document, and checksums that
/// check.
#[tokio::test]
async fn the_release_archive_holds_what_a_site_installs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let packed = Command::new("bash")
        .arg(root.join("scripts/release.sh"))
        .args(["--binary", BIN, "--out"])
        .arg(out.path())
        .output()
        .await
        .unwrap();
    assert!(packed.status.success(), "{}", String::from_utf8_lossy(&packed.stderr));
    let archive = PathBuf::from(String::from_utf8(packed.stdout).unwrap().trim());
    let name = archive.file_name().unwrap().to_str().unwrap().strip_suffix(".tar.gz").unwrap().to_owned();
    assert!(name.starts_with("mission-") && name.ends_with("-linux-gnu"), "{name}");
    let unpacked = tempfile::tempdir().unwrap();
    let tar = Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(unpacked.path()).status().await.unwrap();
    assert!(tar.success());
    let dir = unpacked.path().join(&name);
    for file in [
        "mission",
        "completions/mission.bash",
        "completions/_mission",
        "completions/mission.fish",
        "systemd/mission-server.service",
        "systemd/mission-lz.service",
        "config/server.toml",
        "config/lz.toml",
        "openapi/v1.json",
        "man/man1/mission.1",
        "man/man1/mission-run.1",
        "man/man1/mission-jobs-list.1",
        "README.md",
        "BUILD-INFO",
        "SHA256SUMS",
    ] {
        assert!(dir.join(file).is_file(), "{file} is in the archive");
    }
    let sums =
        Command::new("sha256sum").args(["-c", "--quiet", "SHA256SUMS"]).current_dir(&dir).output().await.unwrap();
    assert!(sums.status.success(), "{}", String::from_utf8_lossy(&sums.stdout));
    let summed = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let man_pages = std::fs::read_dir(dir.join("man/man1")).unwrap().count();
    assert!(man_pages > 50, "a page for each command: {man_pages}");
    assert_eq!(summed.lines().count(), 11 + man_pages, "every file but itself: {summed}");
    let info = std::fs::read_to_string(dir.join("BUILD-INFO")).unwrap();
    assert!(info.lines().any(|l| l.starts_with("needs: glibc 2.")), "{info}");
    // The Slurm commands: links that move with the folder, each answering as its command.
    for command in ["sbatch", "srun", "squeue", "sacct", "scancel", "scontrol", "sinfo", "sacctmgr"] {
        let link = dir.join("slurm-commands").join(command);
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("../mission"), "{command}");
        let version = Command::new(&link).arg("--version").output().await.unwrap();
        assert!(String::from_utf8_lossy(&version.stdout).starts_with("slurm 22.05.8 (mission "), "{command}");
    }

    let loaded = Command::new("bash")
        .arg("-c")
        .arg("source completions/mission.bash && complete -p mission")
        .current_dir(&dir)
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&loaded.stdout).contains("-F _mission mission"), "{loaded:?}");

    // Every key of the examples that has a default, set to it, makes a valid file.
    for (daemon, example) in [("server", "config/server.toml"), ("lz", "config/lz.toml")] {
        let text = std::fs::read_to_string(dir.join(example)).unwrap();
        let set: String = text
            .lines()
            .filter_map(|l| l.strip_prefix('#').filter(|l| !l.starts_with(' ') && !l.ends_with('=') && !l.is_empty()))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(set.lines().count() > 10, "{set}");
        let file = unpacked.path().join(format!("{daemon}.toml"));
        std::fs::write(&file, &set).unwrap();
        let mut command = Command::new(dir.join("mission"));
        command.args([daemon, "--config"]).arg(&file).arg("--print-config").env_remove("MISSION_SERVER");
        if daemon == "lz" {
            command.env("MISSION_LZ_TOKEN", "t").env("MISSION_SERVER", "http://127.0.0.1:1");
        }
        let out = command.output().await.unwrap();
        assert!(out.status.success(), "{daemon}: {}\n{set}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("# file\n"));
    }
}

/// `mission` names itself and its version to the server (`User-Agent: mission-cli/…`), and tells
/// its user once that a server is newer than it knows: here a stand-in server on 127.0.0.1 that
/// says it runs 9.1.0 (the real server of this build is as new as the CLI).
#[tokio::test]
async fn the_cli_names_its_version_and_warns_once_of_a_newer_server() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            seen.lock().unwrap().push(String::from_utf8_lossy(&head).to_lowercase());
            // Where clients sign in: nowhere that answers, so the sign-in stops there.
            let body = r#"{"auth_url":"http://127.0.0.1:1","audience":"mission-api","client_id":"mission-cli"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmission-server-version: 9.1.0\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    let home = tempfile::tempdir().unwrap();
    let login = || {
        Command::new(BIN)
            .args(["login", "--no-browser", "--server", &url])
            .env("HOME", home.path())
            .env("MISSION_CONFIG", home.path().join("config.json"))
            .env("MISSION_TOKEN_FILE", home.path().join("tokens"))
            .env_remove("MISSION_SERVER")
            .output()
    };
    let first = login().await.unwrap();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(!first.status.success(), "the sign-in goes nowhere: {stderr}");
    let warning = format!(
        "warning: the server runs Mission Compute Service 9.1.0, newer than this mission ({})",
        env!("CARGO_PKG_VERSION")
    );
    assert!(stderr.contains(&warning), "{stderr}");
    let second = login().await.unwrap();
    assert!(!String::from_utf8_lossy(&second.stderr).contains("warning:"), "told once");
    let heads = heads.lock().unwrap();
    let agent = format!("user-agent: mission-cli/{} mission-client/", env!("CARGO_PKG_VERSION"));
    assert!(heads.iter().all(|head| head.contains(&agent)), "{heads:?}");
}

/// Every job has a number, given in submission order and taken wherever a job's id is: by the
/// API, the CLI and the console; an array's number is its first element's. Someone else's job
/// is as unknown by number as by id.
#[tokio::test]
async fn jobs_are_known_by_their_numbers() {
    let fx = Fixture::start().await;
    let password = admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let src = fx.home.path().join("numbered");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "echo \"number $1\"\n").unwrap();
    let args = ["missions", "create", "--name", "numbered", "--type", "shell", "--setting", "filename=run.sh"];
    let created = fx.json("admin", &[&args[..], &["--upload", src.to_str().unwrap()]].concat()).await;
    let mission = created["mission_id"].as_str().unwrap().to_owned();

    let mut numbers = Vec::new();
    for _ in 0..3 {
        let job = fx.json("admin", &["run", &mission, "--wait"]).await;
        let number = job["number"].as_u64().unwrap();
        assert!(number > 0, "{job}");
        // By number, the same job: the CLI, and the API's path.
        let shown = fx.json("admin", &["jobs", "get", &number.to_string()]).await;
        assert_eq!(shown["job_id"], job["job_id"]);
        assert_eq!(shown["number"], number);
        numbers.push(number);
    }
    assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "in submission order: {numbers:?}");
    let last = numbers[2].to_string();
    let logs = fx.run("admin", &["jobs", "logs", &last]).await;
    assert_eq!(String::from_utf8_lossy(&logs.stdout), "number \n");
    let table = fx.ok("admin", &["jobs", "get", &last]).await;
    let number_line = table.lines().find(|line| line.starts_with("number:"));
    assert_eq!(number_line.map(|line| line.split_whitespace().collect::<Vec<_>>()), Some(vec!["number:", &last]));

    // An array: consecutive numbers, each element knowing the array's (its first element's).
    let array = fx.json("admin", &["run", &mission, "--array", "0-2", "--wait"]).await;
    assert!(array["number"].as_u64().unwrap() > numbers[2], "{array}");
    let listed = fx.json("admin", &["jobs", "list", "--array", array["array_id"].as_str().unwrap()]).await;
    let mut elements: Vec<(u64, u64, u64)> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (j["array_index"].as_u64().unwrap(), j["number"].as_u64().unwrap(), j["array_number"].as_u64().unwrap())
        })
        .collect();
    elements.sort();
    let first = elements[0].1;
    assert_eq!(array["number"].as_u64(), Some(first));
    assert_eq!(elements, [(0, first, first), (1, first + 1, first), (2, first + 2, first)]);

    // Someone else's number reads as no job at all, named by the number asked for.
    fx.add_user("eve", "eves own passphrase").await;
    fx.login("eve", "eve", "eves own passphrase").await;
    for asked in [last.clone(), "999999".to_owned()] {
        let out = fx.run("eve", &["jobs", "get", &asked]).await;
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("no job {asked}")), "{stderr}");
    }
    let stop = fx.run("eve", &["jobs", "stop", &last]).await;
    assert!(String::from_utf8_lossy(&stop.stderr).contains(&format!("no job {last}")));

    // Neither a UUID nor a number: refused before anything is asked.
    let bad = fx.run("admin", &["jobs", "get", "12ab"]).await;
    assert!(String::from_utf8_lossy(&bad.stderr).contains("neither a job's id (a UUID) nor its number"));
}

/// `mission stations energy`: a station's settings; an admin's flags change those they name (a
/// value out of bounds is refused naming it, and nothing changes); a grid intensity file is
/// shown with what its last reading said.
#[tokio::test]
async fn station_energy_settings_are_shown_and_changed() {
    let fx = Fixture::start().await;
    let password = admin_password(&fx.data_dir);
    fx.login("admin", "admin", &password).await;
    let shown = fx.ok("admin", &["stations", "energy", "local"]).await;
    assert!(shown.contains("1.67") && shown.contains("475 gCO2e/kWh") && shown.contains("none"), "{shown}");
    let args = ["--pue", "1.2", "--grid-intensity", "30", "--currency", "EUR", "--price-cpu-hour", "0.02"];
    let set = fx.ok("admin", &[&["stations", "energy", "local"][..], &args].concat()).await;
    assert!(set.contains("1.2") && set.contains("30 gCO2e/kWh") && set.contains("EUR 0.02 per CPU-hour"), "{set}");
    let refused = fx.run("admin", &["stations", "energy", "local", "--pue", "0.5"]).await;
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("energy.pue"));
    let relative = fx.run("admin", &["stations", "energy", "local", "--grid-intensity-file", "intensity"]).await;
    assert!(String::from_utf8_lossy(&relative.stderr).contains("energy.grid_intensity_file"), "{relative:?}");
    let file = fx.home.path().join("intensity");
    std::fs::write(&file, "88\n").unwrap();
    let file = file.to_str().unwrap();
    let with_file = fx.ok("admin", &["stations", "energy", "local", "--grid-intensity-file", file]).await;
    assert!(with_file.contains(&format!("{file} (read every minute)")), "{with_file}");
    let json = fx.json("admin", &["stations", "energy", "local"]).await;
    assert_eq!(
        (json["energy"]["pue"].as_f64(), json["energy"]["grid_intensity_file"].as_str()),
        (Some(1.2), Some(file))
    );
    assert_eq!(json["energy"]["prices"]["currency"], "EUR", "the rest kept: {json}");
}
