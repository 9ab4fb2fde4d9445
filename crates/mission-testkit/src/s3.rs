//! An S3-compatible server for tests: `scripts/s3-test-server.py` (moto in server mode, with
//! authentication on) on 127.0.0.1 with a free port, one bucket and one access key.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running S3 test server; stops when dropped.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Region to sign requests for.
    pub region: String,
    /// A bucket that exists, empty at start.
    pub bucket: String,
    /// An access key allowed to use the bucket.
    pub access_key_id: String,
    /// Its secret.
    pub secret_access_key: String,
    _child: Child,
}

impl S3Server {
    /// A request for an S3 cargo bay named `name` of the whole bucket, with the server's key.
    pub fn cargo_bay(&self, name: &str) -> mission_client::CreateCargoBay {
        mission_client::CreateCargoBay {
            bucket: Some(self.bucket.clone()),
            endpoint: Some(self.endpoint.clone()),
            region: Some(self.region.clone()),
            access_key_id: Some(self.access_key_id.clone()),
            secret_access_key: Some(self.secret_access_key.clone()),
            ..mission_client::CreateCargoBay::new(name, mission_client::CargoBayKind::S3)
        }
    }

    /// Starts the server, or returns `None` (saying why) where its Python environment is not
    /// installed — unless `MISSION_REQUIRE_S3=1` (set by `scripts/test.sh`, which installs it)
    /// makes that a failure.
    pub async fn start() -> Option<Self> {
        let root = crate::workspace_root();
        let python = std::env::var_os("MISSION_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/test-venv/bin/python"));
        if !python.exists() {
            let why = format!(
                "no S3 test server ({} is missing; scripts/install-test-deps.sh installs it)",
                python.display()
            );
            crate::skip_unless_required("S3", why);
            return None;
        }
        let mut child = Command::new(&python)
            .arg(root.join("scripts/s3-test-server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start scripts/s3-test-server.py");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(60), BufReader::new(stdout).read_line(&mut line))
            .await
            .expect("the S3 test server did not start within 60 s")
            .expect("read the S3 test server's settings");
        let info: serde_json::Value =
            serde_json::from_str(&line).expect("the S3 test server prints its settings as JSON");
        let field = |name: &str| info[name].as_str().expect("settings field").to_owned();
        Some(Self {
            endpoint: field("endpoint"),
            region: field("region"),
            bucket: field("bucket"),
            access_key_id: field("access_key_id"),
            secret_access_key: field("secret_access_key"),
            _child: child,
        })
    }
}
