//! The README's five-minute walkthrough (which the guide's quick start includes) runs as written:
//! its commands are read from the README, run by `sh` in a fresh directory against the server its
//! first step starts, and each must succeed; the output its comments show must appear. A renamed
//! command or flag fails this test, not the reader.
//!
//! What cannot run here as written is changed, and only that: the server listens on a free port
//! of 127.0.0.1 (the README's `http://127.0.0.1:8080` becomes its address), the sign-in is
//! approved through `POST /activate` instead of a browser, the ids the commands print stand in for
//! `MISSION_ID`, `JOB_ID` and `JOB`, the webhook's receiver is a closed port of 127.0.0.1 (nothing
//! leaves the machine), and the build and `PATH` steps are this test's own binary.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::{BIN, approve_login, read_banner};

/// The README's address for the server, replaced by the test server's.
const README_URL: &str = "http://127.0.0.1:8080";
/// The README's webhook receiver, replaced by a port of 127.0.0.1 where nothing listens.
const README_HOOKS: &str = "https://hooks.example.org";

/// The walkthrough's shell lines, between the README's anchors, without the code fence.
fn walkthrough() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let start = readme.find("<!-- ANCHOR: walkthrough -->").expect("the README marks its walkthrough");
    let end = readme.find("<!-- ANCHOR_END: walkthrough -->").expect("and its end");
    let block = &readme[start..end];
    let body = block.split("```sh\n").nth(1).and_then(|b| b.split("\n```").next()).expect("a sh block");
    body.lines().map(str::to_owned).collect()
}

/// A command line without its trailing comment (`  # …` after the command).
fn command_of(line: &str) -> &str {
    line.split("  #").next().unwrap_or(line).trim()
}

/// The state the walkthrough builds up as it runs.
struct Walk {
    dir: tempfile::TempDir,
    url: Option<String>,
    mission_id: Option<String>,
    job_id: Option<String>,
}

impl Walk {
    fn command(&self, line: &str) -> Command {
        let bin_dir = Path::new(BIN).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut command = Command::new("sh");
        command
            .args(["-c", line])
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("HOME", &home)
            .env("MISSION_CONFIG", home.join("config.json"))
            .env("MISSION_TOKEN_FILE", home.join("tokens"))
            .env_remove("MISSION_SERVER")
            .env_remove("BROWSER")
            .env_remove("DISPLAY")
            .kill_on_drop(true);
        command
    }

    /// Runs `line` through `sh`; it must succeed. Answers its stdout.
    async fn run(&self, line: &str) -> String {
        let output = self.command(line).stdin(Stdio::null()).output();
        let output = tokio::time::timeout(Duration::from_secs(120), output).await.expect("finished in 120 s").unwrap();
        assert!(
            output.status.success(),
            "the walkthrough's `{line}` failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    async fn json(&self, line: &str) -> serde_json::Value {
        serde_json::from_str(&self.run(line).await).unwrap()
    }

    /// The README's line with what stands in for the ids and addresses of this run.
    async fn substituted(&mut self, line: &str) -> String {
        let mut line = line.replace(README_URL, self.url.as_deref().expect("the server runs"));
        line = line.replace(README_HOOKS, "http://127.0.0.1:9");
        if line.contains("MISSION_ID") {
            if self.mission_id.is_none() {
                let missions = self.json("mission --json missions list").await;
                let id = missions.as_array().and_then(|m| m.first()).and_then(|m| m["mission_id"].as_str());
                self.mission_id = Some(id.expect("the walkthrough made a mission").to_owned());
            }
            line = line.replace("MISSION_ID", self.mission_id.as_deref().unwrap());
        }
        if self.job_id.is_none() && line.split(' ').any(|word| word == "JOB_ID" || word == "JOB") {
            let page = self.json("mission --json jobs list").await;
            let id = page["jobs"].as_array().and_then(|j| j.first()).and_then(|j| j["job_id"].as_str());
            self.job_id = Some(id.expect("the walkthrough ran a job").to_owned());
        }
        // Word by word: `JOB` is a placeholder, `job.completed` is not.
        let words = line.split(' ').map(|word| match word {
            "JOB_ID" | "JOB" => self.job_id.clone().unwrap_or_default(),
            other => other.to_owned(),
        });
        words.collect::<Vec<_>>().join(" ")
    }

    /// `mission login` as the README has it, without a browser: the printed code is approved as
    /// `admin` with the password the first start saved.
    async fn login(&self, line: &str) {
        let password = std::fs::read_to_string(self.dir.path().join("mission-data/initial-admin-password")).unwrap();
        let login = self.command(&format!("{line} --no-browser"));
        approve_login(login, self.url.as_deref().unwrap(), "admin", password.trim()).await;
    }
}

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written() {
    let lines = walkthrough();
    let mut walk = Walk { dir: tempfile::tempdir().unwrap(), url: None, mission_id: None, job_id: None };
    // The folder the walkthrough makes a mission of.
    let experiment = walk.dir.path().join("my-experiment");
    std::fs::create_dir_all(&experiment).unwrap();
    std::fs::write(experiment.join("main.py"), "import sys\nprint('steps', sys.argv[1:])\n").unwrap();
    std::fs::write(experiment.join("data.csv"), "x,y\n1,2\n").unwrap();

    let mut server = None;
    let mut ran = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].as_str();
        i += 1;
        let command = command_of(line);
        if command.is_empty() || command.starts_with('#') {
            continue;
        }
        // The comment lines right after a command, indented, show what it prints.
        let mut shown = Vec::new();
        while let Some(comment) = lines.get(i).and_then(|l| l.strip_prefix("#   ")) {
            shown.push(comment.to_owned());
            i += 1;
        }
        if command.starts_with("cargo build") || command.starts_with("export PATH=") {
            // This test's own build of `mission` is first on PATH.
            continue;
        }
        if command == "mission server &" {
            let mut child = walk
                .command("exec mission server --listen 127.0.0.1:0 --device-poll-interval 0")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let (url, banner) = read_banner(&mut child).await;
            walk.url = Some(url.clone());
            for expected in &shown {
                let expected = expected.replace(README_URL, &url);
                let expected = expected.trim_end_matches('…').trim_end();
                assert!(banner.contains(expected), "the server printed\n{banner}\nnot the README's `{expected}`");
            }
            server = Some(child);
            continue;
        }
        assert!(shown.is_empty(), "only the server's output is shown in the walkthrough: {shown:?}");
        let line = walk.substituted(command).await;
        eprintln!("$ {line}");
        if line.starts_with("mission login") {
            walk.login(&line).await;
        } else {
            walk.run(&line).await;
        }
        ran += 1;
    }
    assert!(server.is_some(), "the walkthrough starts a server");
    assert!(ran >= 20, "the walkthrough ran {ran} commands");
    // What its commands were for: the files came back, the job's results and logs too, and a
    // station for the new host exists.
    let dir = walk.dir.path();
    assert!(dir.join("copy/main.py").is_file(), "mission files download");
    let stdout = std::fs::read_to_string(dir.join("results/mission-logs/stdout.log")).unwrap();
    assert!(stdout.contains("steps ['--steps', '100']"), "the job ran with the mission's arguments: {stdout}");
    let stations = walk.json("mission --json stations list").await;
    assert!(stations.as_array().unwrap().iter().any(|s| s["name"] == "lab"), "{stations}");
}
