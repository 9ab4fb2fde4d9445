//! GA4GH TES tasks end to end: tasks sent to `/ga4gh/tes/v1` as a TES client sends them, run
//! by a `mission lz` agent with Podman in the Debian test image (see `containers`), their
//! inputs fetched from inline content, a web server on 127.0.0.1 and the service's own storage,
//! their outputs stored in a mission.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mission_client::{ImportImage, Uuid};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use mission_testkit::S3Server;

use super::containers::test_image;
use super::jobs::{Agent, TWO_CPUS, cluster, local_station};

/// A web server on 127.0.0.1 serving `/hello.txt` (with an entity tag, answering a conditional
/// request that names it with 304) and 404 for anything else; counts full answers of
/// `/hello.txt` and 304s.
struct WebServer {
    url: String,
    sent: Arc<AtomicUsize>,
    not_modified: Arc<AtomicUsize>,
}

const HELLO: &str = "hello from the web\n";

impl WebServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (sent, not_modified) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counters = (sent.clone(), not_modified.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (sent, not_modified) = (counters.0.clone(), counters.1.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await {
                            Ok(Ok(n)) if n > 0 => request.extend_from_slice(&buffer[..n]),
                            _ => return,
                        }
                    }
                    let request = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    let answer = if !request.starts_with("get /hello.txt ") {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
                    } else if request.contains("if-none-match: \"v1\"") {
                        not_modified.fetch_add(1, Ordering::SeqCst);
                        "HTTP/1.1 304 Not Modified\r\netag: \"v1\"\r\nconnection: close\r\n\r\n".to_owned()
                    } else {
                        sent.fetch_add(1, Ordering::SeqCst);
                        format!(
                            "HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{HELLO}",
                            HELLO.len()
                        )
                    };
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self { url, sent, not_modified }
    }
}

/// A TES client: the bearer token of a signed-in user, and the API's base URL.
struct Tes {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Tes {
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response =
            self.http.post(format!("{}{path}", self.base)).bearer_auth(&self.token).json(body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Creates `task`; its id.
    async fn create(&self, task: &Value) -> String {
        let (status, answer) = self.post("/tasks", task).await;
        assert_eq!(status, 200, "{answer}");
        answer["id"].as_str().unwrap().to_owned()
    }

    /// Waits until the task `id` is in a final state; answers it, in full.
    async fn ended(&self, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let (status, task) = self.get(&format!("/tasks/{id}?view=FULL")).await;
            assert_eq!(status, 200, "{task}");
            let state = task["state"].as_str().unwrap().to_owned();
            if ["COMPLETE", "EXECUTOR_ERROR", "SYSTEM_ERROR", "CANCELED", "PREEMPTED"].contains(&state.as_str()) {
                return task;
            }
            assert!(tokio::time::Instant::now() < deadline, "task {id} did not end: {task}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn state(&self, id: &str) -> String {
        let (_, task) = self.get(&format!("/tasks/{id}")).await;
        task["state"].as_str().unwrap_or_default().to_owned()
    }
}

#[tokio::test]
async fn tes_tasks_fetch_their_inputs_run_their_executors_in_order_and_store_their_outputs() {
    let Some(archive) = test_image() else { return };
    let Some(s3) = S3Server::start().await else { return };
    let endpoint: url::Url = s3.endpoint.parse().unwrap();
    let (server, admin) = cluster(move |c| c.s3_endpoints = vec![endpoint]).await;
    let _agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let alice = &server.client;
    let request = ImportImage { name: "debian".into(), ..Default::default() };
    alice.import_image(&archive, &request, None).await.unwrap();
    let token = alice.tokens().await.unwrap().access_token;
    let tes = Tes { http: reqwest::Client::new(), base: format!("{}/ga4gh/tes/v1", server.url), token };
    let web = WebServer::start().await;
    let create = mission_client::CreateMission { name: "tes results".into(), ..Default::default() };
    let results = alice.create_mission(&create).await.unwrap().mission_id;

    // The service says what it is, without a token.
    let info: Value = reqwest::get(format!("{}/service-info", tes.base)).await.unwrap().json().await.unwrap();
    assert_eq!(info["type"]["artifact"], "tes");
    assert!(info["storage"].as_array().unwrap().iter().any(|s| s == "mission://"), "{info}");

    // Two executors share a volume; the second's stdout goes to a file that is an output too;
    // a directory output lists each of its files.
    let task = json!({
        "name": "two steps",
        "inputs": [
            {"path": "/data/in.txt", "content": "abc\n"},
            {"path": "/data/web.txt", "url": format!("{}/hello.txt", web.url)}
        ],
        "executors": [
            {"image": "debian", "command": ["sh", "-c", "cat /data/in.txt /data/web.txt > /vol/both.txt"]},
            {"image": "debian", "command": ["sh", "-c",
                "wc -c < /vol/both.txt; mkdir -p /out/dir; cp /vol/both.txt /out/dir/a.txt; echo x > /out/dir/b.txt"],
             "stdout": "/out/count.txt", "env": {"GREETING": "hi"}}
        ],
        "volumes": ["/vol"],
        "outputs": [
            {"path": "/out/count.txt", "url": format!("mission://{results}/count.txt")},
            {"path": "/out/dir", "url": format!("mission://{results}/dir"), "type": "DIRECTORY"}
        ],
        "tags": {"workflow": "test"},
        "resources": {"cpu_cores": 1, "ram_gb": 0.5, "disk_gb": 0.01, "preemptible": true}
    });
    let id = tes.create(&task).await;
    let done = tes.ended(&id).await;
    assert_eq!(done["state"], "COMPLETE", "{done}");
    let log = &done["logs"][0];
    let executors = log["logs"].as_array().unwrap();
    assert_eq!(executors.len(), 2, "{log}");
    assert!(executors.iter().all(|e| e["exit_code"] == 0), "{log}");
    let both = "abc\nhello from the web\n";
    assert_eq!(executors[1]["stdout"], format!("{}\n", both.len()));
    let outputs: Vec<(String, String)> = log["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["url"].as_str().unwrap().to_owned(), o["size_bytes"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        outputs,
        [
            (format!("mission://{results}/count.txt"), format!("{}", format!("{}\n", both.len()).len())),
            (format!("mission://{results}/dir/a.txt"), both.len().to_string()),
            (format!("mission://{results}/dir/b.txt"), "2".to_owned()),
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    alice.download_file(results, "dir/a.txt", &dir.path().join("a.txt")).await.unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), both);
    // The task is a job of its caller's, labelled with its tags.
    let job = alice.get_job(Uuid::parse_str(&id).unwrap()).await.unwrap();
    assert_eq!(job.labels.get("workflow").map(String::as_str), Some("test"));

    // The same web input again crosses the network as a conditional request answered 304.
    assert_eq!(web.sent.load(Ordering::SeqCst), 1);
    let again = tes.create(&task).await;
    assert_eq!(tes.ended(&again).await["state"], "COMPLETE");
    assert_eq!((web.sent.load(Ordering::SeqCst), web.not_modified.load(Ordering::SeqCst)), (1, 1));

    // Through an S3 cargo bay of the caller's: a file and a directory written, then read back
    // by another task, as a file and as a prefix.
    alice.create_cargo_bay(&s3.cargo_bay("tes bucket")).await.unwrap();
    let bucket = &s3.bucket;
    let writes = json!({
        "executors": [{"image": "debian", "command": ["sh", "-c",
            "echo one > /out/one.txt; mkdir -p /out/many/deep; echo a > /out/many/a.txt; echo b > /out/many/deep/b.txt"]}],
        "outputs": [
            {"path": "/out/one.txt", "url": format!("s3://{bucket}/tes/one.txt")},
            {"path": "/out/many", "url": format!("s3://{bucket}/tes/many"), "type": "DIRECTORY"}
        ]
    });
    let written = tes.ended(&tes.create(&writes).await).await;
    assert_eq!(written["state"], "COMPLETE", "{written}");
    assert_eq!(written["logs"][0]["outputs"].as_array().unwrap().len(), 3, "{written}");
    let reads = json!({
        "inputs": [
            {"path": "/in/one.txt", "url": format!("s3://{bucket}/tes/one.txt")},
            {"path": "/in/many", "url": format!("s3://{bucket}/tes/many"), "type": "DIRECTORY"}
        ],
        "executors": [{"image": "debian", "command": ["sh", "-c", "cat /in/one.txt /in/many/a.txt /in/many/deep/b.txt"]}]
    });
    let read = tes.ended(&tes.create(&reads).await).await;
    assert_eq!(read["state"], "COMPLETE", "{read}");
    assert_eq!(read["logs"][0]["logs"][0]["stdout"], "one\na\nb\n");

    // An executor that fails ends the task, unless it ignores its error.
    let failing = json!({"executors": [
        {"image": "debian", "command": ["sh", "-c", "exit 3"], "ignore_error": true},
        {"image": "debian", "command": ["sh", "-c", "exit 4"]},
        {"image": "debian", "command": ["true"]}
    ]});
    let failed = tes.ended(&tes.create(&failing).await).await;
    assert_eq!(failed["state"], "EXECUTOR_ERROR", "{failed}");
    let codes: Vec<i64> =
        failed["logs"][0]["logs"].as_array().unwrap().iter().map(|e| e["exit_code"].as_i64().unwrap()).collect();
    assert_eq!(codes, [3, 4]);

    // An input that cannot be fetched is a system error that names it.
    let missing = format!("{}/missing.txt", web.url);
    let broken =
        json!({"inputs": [{"path": "/in", "url": missing}], "executors": [{"image": "debian", "command": ["true"]}]});
    let broken = tes.ended(&tes.create(&broken).await).await;
    assert_eq!(broken["state"], "SYSTEM_ERROR", "{broken}");
    let said = broken["logs"][0]["system_logs"].to_string();
    assert!(said.contains(&missing) && said.contains("404"), "{said}");

    // Cancelled while it runs.
    let long = tes.create(&json!({"executors": [{"image": "debian", "command": ["sleep", "300"]}]})).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while tes.state(&long).await != "RUNNING" {
        assert!(tokio::time::Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = tes.post(&format!("/tasks/{long}:cancel"), &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(tes.ended(&long).await["state"], "CANCELED");

    // Listing: the three views, newest first, a page at a time; filters by name and tag.
    let (_, minimal) = tes.get("/tasks?page_size=2").await;
    let first = minimal["tasks"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["id"], long.as_str());
    let shown: Vec<&String> = first[0].as_object().unwrap().keys().collect();
    assert_eq!(shown, ["executors", "id", "state"], "MINIMAL is the id and state: {}", first[0]);
    assert_eq!(first[0]["executors"], serde_json::json!([]), "no executors in MINIMAL: {}", first[0]);
    let token = minimal["next_page_token"].as_str().expect("a next page").to_owned();
    let (_, rest) = tes.get(&format!("/tasks?page_size=100&page_token={token}")).await;
    assert_eq!(rest["tasks"].as_array().unwrap().len(), 5, "{rest}");
    assert!(rest.get("next_page_token").is_none(), "{rest}");
    let (_, basic) = tes.get("/tasks?view=BASIC&name_prefix=two&tag_key=workflow&tag_value=test").await;
    let basic = basic["tasks"].as_array().unwrap();
    assert_eq!(basic.len(), 2);
    assert!(basic[0]["inputs"][0].get("content").is_none(), "BASIC leaves inline content out: {}", basic[0]);
    assert!(basic[0]["logs"][0]["logs"][0].get("stdout").is_none());
    let (_, full) = tes.get(&format!("/tasks/{id}?view=FULL")).await;
    assert_eq!(full["inputs"][0]["content"], "abc\n");
    let (_, by_state) = tes.get("/tasks?state=EXECUTOR_ERROR").await;
    assert_eq!(by_state["tasks"].as_array().unwrap().len(), 1);

    // Bad tasks are refused, naming what is wrong, and nothing is queued.
    let jobs_before = alice.list_jobs(&Default::default()).await.unwrap().len();
    let refused = [
        (json!({"executors": []}), "executors"),
        (json!({"executors": [{"image": "no-such-image", "command": ["true"]}]}), "no-such-image"),
        (
            json!({"inputs": [{"path": "/x", "url": "ftp://example.org/x"}], "executors": [{"image": "debian", "command": ["true"]}]}),
            "ftp",
        ),
        (
            json!({"inputs": [{"path": "/x", "url": "file:///etc/passwd"}], "executors": [{"image": "debian", "command": ["true"]}]}),
            "--tes-file-root",
        ),
        (
            json!({"inputs": [{"path": "/x", "url": "s3://nobodys-bucket/x"}], "executors": [{"image": "debian", "command": ["true"]}]}),
            "no S3 cargo bay",
        ),
        (
            json!({"inputs": [{"path": "relative", "content": "x"}], "executors": [{"image": "debian", "command": ["true"]}]}),
            "absolute",
        ),
        // More disk than the landing zone has free (it said how much as it connected).
        (
            json!({"resources": {"disk_gb": 900000}, "executors": [{"image": "debian", "command": ["true"]}]}),
            "MB free for a task's files",
        ),
        (json!({"resources": {"ram_gb": -1}, "executors": [{"image": "debian", "command": ["true"]}]}), "ram_gb"),
        (json!({"resources": {"cpu_cores": 0}, "executors": [{"image": "debian", "command": ["true"]}]}), "cpu_cores"),
    ];
    for (task, says) in refused {
        let (status, problem) = tes.post("/tasks", &task).await;
        assert_eq!(status, 400, "{task}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(says), "{task}: {problem}");
    }
    let huge = json!({"inputs": [{"path": "/x", "content": "x".repeat(1 << 20)}], "executors": [{"image": "debian", "command": ["true"]}]});
    let (status, _) = tes.post("/tasks", &huge).await;
    assert_eq!(status, 413);
    assert_eq!(alice.list_jobs(&Default::default()).await.unwrap().len(), jobs_before, "nothing was queued");

    // Someone else's task is no task at all.
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    let bobs = Tes { token: bob.tokens().await.unwrap().access_token, ..tes };
    let (status, _) = bobs.get(&format!("/tasks/{id}")).await;
    assert_eq!(status, 404);
    let (status, _) = bobs.post(&format!("/tasks/{id}:cancel"), &json!({})).await;
    assert_eq!(status, 404);
}

/// The test venv's Python, with py-tes and boto3 (`scripts/install-test-deps.sh`), or `None`
/// (saying why) where it is not installed, unless `MISSION_REQUIRE_S3=1` makes that a failure.
fn test_python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("MISSION_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv/bin/python"),
        std::path::PathBuf::from,
    );
    let has_py_tes = std::process::Command::new(&python)
        .args(["-c", "import tes, boto3"])
        .output()
        .is_ok_and(|out| out.status.success());
    if has_py_tes {
        return Some(python);
    }
    let why = format!("{} cannot import py-tes (scripts/install-test-deps.sh installs it)", python.display());
    mission_testkit::skip_unless_required("S3", why);
    None
}

/// py-tes 1.1.4 from PyPI, unchanged, creates, waits for, reads in all three views, lists a page
/// at a time and cancels tasks, with inline, web and S3 inputs and an S3 directory output
/// (`tes_with_py_tes.py`).
#[tokio::test]
async fn py_tes_drives_tasks_unchanged() {
    let Some(archive) = test_image() else { return };
    let Some(python) = test_python() else { return };
    let Some(s3) = S3Server::start().await else { return };
    let endpoint: url::Url = s3.endpoint.parse().unwrap();
    let (server, admin) = cluster(move |c| c.s3_endpoints = vec![endpoint]).await;
    let _agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let alice = &server.client;
    alice.import_image(&archive, &ImportImage { name: "debian".into(), ..Default::default() }, None).await.unwrap();
    alice.create_cargo_bay(&s3.cargo_bay("tes bucket")).await.unwrap();
    let web = WebServer::start().await;
    let given = json!({
        "url": server.url,
        "token": alice.tokens().await.unwrap().access_token,
        "web": web.url,
        "endpoint": s3.endpoint,
        "region": s3.region,
        "bucket": s3.bucket,
        "access_key_id": s3.access_key_id,
        "secret_access_key": s3.secret_access_key,
    });
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/tes_with_py_tes.py");
    let mut child = tokio::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(given.to_string().as_bytes()).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(600), child.wait_with_output()).await.unwrap().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "py-tes: {said}");
    assert!(said.contains("py-tes: all checks passed"), "{said}");
}

/// The image snakemake's TES executor runs its jobs in (the test image with snakemake and its
/// S3 storage plugin, which scripts/install-test-deps.sh builds beside it), or `None` (saying
/// why) where it is not there.
fn snakemake_image(test_image: &std::path::Path) -> Option<std::path::PathBuf> {
    let image = test_image.with_file_name("snakemake-bookworm.tar");
    if image.exists() {
        return Some(image);
    }
    let why = format!("{} is missing (scripts/install-test-deps.sh builds it)", image.display());
    mission_testkit::skip_unless_required("WORKFLOWS", why);
    None
}

/// Snakemake with its TES executor plugin and S3 as its default storage, from PyPI, unchanged:
/// a workflow of 11 jobs across 3 rules, each job a TES task in the Snakemake image whose
/// snakemake reads its inputs from and writes its outputs to the S3 test server.
#[tokio::test]
async fn snakemake_runs_a_workflow_as_tes_tasks_on_s3() {
    let Some(test_image) = test_image() else { return };
    let Some(image) = snakemake_image(&test_image) else { return };
    let Some(tools) = super::slurm_commands::workflow_tools() else { return };
    let Some(s3) = S3Server::start().await else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let alice = &server.client;
    alice.import_image(&image, &ImportImage { name: "snakemake".into(), ..Default::default() }, None).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("Snakefile"), super::slurm_commands::SQUARES_SNAKEFILE).unwrap();
    let token = alice.tokens().await.unwrap().access_token;
    let prefix = format!("s3://{}/workflow", s3.bucket);
    // py-tes 0.4 (the plugin's) adds `/v1/tasks` to the URL it is given.
    let tes_url = format!("{}/ga4gh/tes", server.url);
    let args = [
        "--executor",
        "tes",
        "--tes-url",
        &tes_url,
        "--container-image",
        "snakemake",
        "--default-storage-provider",
        "s3",
        "--default-storage-prefix",
        &prefix,
        "--storage-s3-endpoint-url",
        &s3.endpoint,
        "--storage-s3-access-key",
        &s3.access_key_id,
        "--storage-s3-secret-key",
        &s3.secret_access_key,
        "--jobs",
        "10",
        "--seconds-between-status-checks",
        "1",
    ];
    let run = tokio::process::Command::new(tools.join("snakemake"))
        .args(args)
        .current_dir(work.path())
        .env("SNAKEMAKE_TES_TOKEN", &token)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(900), run).await.expect("the workflow within 15 min").unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tes = Tes { http: reqwest::Client::new(), base: format!("{tes_url}/v1"), token };
    if !out.status.success() {
        // The plugin reads a Funnel log of its CI's on a failed task: what the tasks said instead.
        let (_, tasks) = tes.get("/tasks?view=FULL").await;
        panic!("snakemake failed: {log}\ntasks: {tasks:#}");
    }
    assert!(log.contains("12 of 12 steps (100%) done"), "{log}");
    // The result is in the bucket, where snakemake's storage put it.
    let read = format!(
        "import boto3; print(boto3.client('s3', endpoint_url='{}', aws_access_key_id='{}', \
         aws_secret_access_key='{}', region_name='{}').get_object(Bucket='{}', \
         Key='workflow/summary.txt')['Body'].read().decode(), end='')",
        s3.endpoint, s3.access_key_id, s3.secret_access_key, s3.region, s3.bucket
    );
    let summary = std::process::Command::new(tools.join("python")).args(["-c", &read]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&summary.stdout), "30\n", "{}", String::from_utf8_lossy(&summary.stderr));
    // Each rule's job was a task of alice's, ended COMPLETE.
    let (_, listed) = tes.get("/tasks?view=BASIC&state=COMPLETE").await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 11, "{listed}");
}

/// A task asking for `nodes: 2` in its backend parameters is a gang: its executor runs on two
/// landing zones at once, each told its rank and the nodes, each node's output kept apart, and
/// its outputs are rank 0's. A node count that is no number is refused, naming the parameter.
#[tokio::test]
async fn a_task_on_two_nodes_runs_its_executors_on_each() {
    let Some(archive) = test_image() else { return };
    let (server, admin) = cluster(|_| {}).await;
    let mut agents = Vec::new();
    for (name, address) in [("node0", "127.0.0.2"), ("node1", "127.0.0.3")] {
        agents.push(
            Agent::start_with(&server, &admin, local_station(), name, TWO_CPUS, &["--node-address", address]).await,
        );
    }
    let alice = &server.client;
    alice.import_image(&archive, &ImportImage { name: "debian".into(), ..Default::default() }, None).await.unwrap();
    let token = alice.tokens().await.unwrap().access_token;
    let tes = Tes { http: reqwest::Client::new(), base: format!("{}/ga4gh/tes/v1", server.url), token };
    let create = mission_client::CreateMission { name: "gang results".into(), ..Default::default() };
    let results = alice.create_mission(&create).await.unwrap().mission_id;
    let command = "echo \"rank $MISSION_NODE_RANK of $MISSION_NNODES on $MISSION_HOSTS\" > /out/rank.txt; \
                   echo \"node $MISSION_NODE_RANK\"";
    let task = |nodes: &str| {
        json!({
            "executors": [{"image": "debian", "command": ["sh", "-c", command]}],
            "outputs": [{"path": "/out/rank.txt", "url": format!("mission://{results}/rank.txt")}],
            "resources": {"cpu_cores": 1, "backend_parameters": {"nodes": nodes}}
        })
    };
    let id = tes.create(&task("2")).await;
    let done = tes.ended(&id).await;
    assert_eq!(done["state"], "COMPLETE", "{done}");
    let job = alice.get_job(Uuid::parse_str(&id).unwrap()).await.unwrap();
    let gang = job.gang.expect("a gang");
    assert!(gang.nodes == 2 && gang.lz_ids.len() == 2 && gang.lz_ids[0] != gang.lz_ids[1], "{gang:?}");
    for rank in 0..2 {
        let out = alice.node_logs(job.job_id, rank, mission_client::LogStream::Stdout).await.unwrap();
        assert!(out.contains(&format!("node {rank}\n")), "node {rank}: {out}");
    }
    let dir = tempfile::tempdir().unwrap();
    alice.download_file(results, "rank.txt", &dir.path().join("rank.txt")).await.unwrap();
    let written = std::fs::read_to_string(dir.path().join("rank.txt")).unwrap();
    assert!(written.starts_with("rank 0 of 2 on 127.0.0."), "rank 0's output: {written}");

    let (status, problem) = tes.post("/tasks", &task("two")).await;
    assert_eq!(status, 400, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("backend_parameters.nodes"), "{problem}");
}
