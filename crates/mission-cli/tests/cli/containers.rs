//! Jobs in container images: an image imported into the service, named by a mission or a run,
//! and run with Podman by `mission lz` agents, against the Debian test image that
//! `scripts/install-test-deps.sh` builds (`MISSION_TEST_IMAGE`, an OCI archive). CI sets
//! `MISSION_REQUIRE_PODMAN`, which makes a missing image or Podman a failure.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use mission_client::{
    Client, ContainerNetwork, ImageFormat, ImportImage, Job, JobResources, JobStatus, LogStream,
    RegisterImageReference, UpdateMission, UpdateStation, Uuid,
};
use mission_testkit::TestServer;

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission, wait_until};

/// The test image's archive, or `None` (saying why) where there is none.
pub(super) fn test_image() -> Option<PathBuf> {
    match std::env::var_os("MISSION_TEST_IMAGE") {
        Some(path) => Some(path.into()),
        None => {
            let why = "MISSION_TEST_IMAGE names no image archive (scripts/install-test-deps.sh builds one)";
            mission_testkit::skip_unless_required("PODMAN", why);
            None
        }
    }
}

/// A copy of the test image that no other test (or earlier run) loaded: the archive with zero
/// blocks of its own after its end (still the same image), so its digest is new. The names
/// agents gave it are removed when dropped (no other test's are).
struct FreshImage {
    archive: PathBuf,
    hex: String,
    _dir: tempfile::TempDir,
}

impl FreshImage {
    fn of(original: &std::path::Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("image.tar");
        let mut bytes = std::fs::read(original).unwrap();
        let blocks = 2 + (Uuid::new_v4().as_u128() % 4096) as usize;
        bytes.extend(std::iter::repeat_n(0u8, 512 * blocks));
        std::fs::write(&archive, bytes).unwrap();
        let sum = std::process::Command::new("sha256sum").arg(&archive).output().unwrap().stdout;
        let hex = String::from_utf8_lossy(&sum).split_whitespace().next().unwrap().to_owned();
        Self { archive, hex, _dir: dir }
    }
}

impl Drop for FreshImage {
    fn drop(&mut self) {
        mission_testkit::forget_podman_image(&self.hex);
    }
}

/// `podman {args}`'s stdout.
async fn podman(args: &[&str]) -> String {
    let out = tokio::process::Command::from(mission_testkit::podman_command()).args(args).output().await;
    String::from_utf8_lossy(&out.expect("podman runs").stdout).into_owned()
}

/// Whether a container of `job` still exists.
async fn container_of(job: &Job) -> bool {
    !podman(&["ps", "-a", "-q", "--filter", &format!("name=mission-{}", job.job_id)]).await.trim().is_empty()
}

/// How many times landing zones downloaded an image, from the server's metrics.
async fn image_downloads(server: &TestServer) -> u64 {
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    let line = r#"mission_http_request_duration_seconds_count{method="GET",route="/api/v1/lz/jobs/{id}/image"} "#;
    metrics.lines().find_map(|l| l.strip_prefix(line)?.parse().ok()).unwrap_or(0)
}

/// A shell mission of `script` in the image `image`.
pub(super) async fn mission_in(client: &Client, image: &str, script: &str) -> Uuid {
    let m = mission(client, SHELL, &[("run.sh", script)], &[]).await;
    let changes = UpdateMission { image: Some(image.into()), ..Default::default() };
    assert!(client.update_mission(m.mission_id, &changes).await.unwrap());
    m.mission_id
}

/// Waits for a job and checks it completed, showing it and its stderr otherwise.
pub(super) async fn completed(client: &Client, job_id: Uuid) -> Job {
    let done = client.wait_for_job(job_id).await.unwrap();
    let stderr = client.job_logs(job_id, LogStream::Stderr).await.unwrap_or_default();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}\nstderr: {stderr}");
    done
}

/// Runs `command` in a shell in `job_id` (on a terminal with `tty`); answers its output once
/// it exited 0.
async fn shell(client: &Client, job_id: Uuid, command: &str, tty: bool) -> String {
    let (code, printed) = super::shell::run_in(client, job_id, command, tty).await;
    assert_eq!(code, Some(0), "{printed}");
    printed
}

pub(super) fn memory(mb: u64) -> JobResources {
    JobResources { cpu_count: Some(1), memory_amount: Some(mb), ..Default::default() }
}

#[tokio::test]
async fn a_job_runs_in_its_image_as_its_own_uid_within_its_limits_and_returns_its_results() {
    let Some(original) = test_image() else { return };
    let fresh = FreshImage::of(&original);
    let archive = fresh.archive.clone();
    let (server, admin) = cluster(|_| {}).await;
    let agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    assert!(lzs.iter().any(|lz| lz.lz_id == agent.lz_id && lz.images), "the agent found Podman: {lzs:?}");
    let alice = &server.client;

    // Imported as streamed, stored by digest.
    let request = ImportImage { name: "debian:bookworm".into(), ..Default::default() };
    let image = alice.import_image(&archive, &request, None).await.unwrap();
    let size = std::fs::metadata(&archive).unwrap().len();
    let digest = format!("sha256:{}", fresh.hex);
    assert_eq!((&image.digest, image.size, image.format), (&digest, size, ImageFormat::Oci));
    assert_eq!(alice.list_images().await.unwrap(), std::slice::from_ref(&image));
    let again = alice.import_image(&archive, &request, None).await.unwrap_err();
    assert!(again.to_string().contains("you have an image named \"debian:bookworm\" already"), "{again}");

    // The job reads the image's own files, runs as a uid of its own, and its results come back.
    let script = "cat /etc/debian_version\nid -u\npwd\necho made > out.txt\n";
    let m = mission_in(alice, "debian:bookworm", script).await;
    let job = alice.run_job_on_station(m, local_station(), memory(256)).await.unwrap();
    assert_eq!(job.image.as_ref().map(|i| i.image_id), Some(image.image_id));
    let done = completed(alice, job.job_id).await;
    let stdout = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("12."), "Debian 12's version file: {stdout}");
    assert_ne!(lines[1], "0", "never root inside");
    let limits = done.limits.unwrap_or_default();
    assert!(limits.contains("in a Podman container") && limits.contains(&format!("as uid {}", lines[1])), "{limits}");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "out.txt"), "{results:?}");
    assert!(!container_of(&job).await, "the container is removed");

    // A second job of the image finds it loaded; a run may name the image by digest.
    let by_digest = mission_in(alice, &image.digest, "echo again\n").await;
    let job = alice.run_job_on_station(by_digest, local_station(), memory(256)).await.unwrap();
    completed(alice, job.job_id).await;
    assert_eq!(image_downloads(&server).await, 1, "the landing zone loaded the image once");

    // Over its memory limit inside the container: out of memory.
    // (The limit leaves the container's runtime room to start.)
    let hog = mission_in(alice, "debian:bookworm", "dd if=/dev/zero of=/dev/null bs=600M count=1\n").await;
    let job = alice.run_job_on_station(hog, local_station(), memory(256)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    let stderr = alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap_or_default();
    let outcome = (done.status, done.reason.as_deref());
    assert_eq!(outcome, (JobStatus::Failed, Some("out of memory")), "{done:?}\nstderr: {stderr}");

    // A stop kills the container.
    let sleeper = mission_in(alice, "debian:bookworm", "echo up\nsleep 300\n").await;
    let job = alice.run_job_on_station(sleeper, local_station(), memory(256)).await.unwrap();
    wait_until("the sleeper runs", || async {
        let now = alice.get_job(job.job_id).await.unwrap();
        assert!(!now.status.is_final(), "{now:?}\n{:?}", alice.job_logs(job.job_id, LogStream::Stderr).await);
        container_of(&job).await
    })
    .await;
    // A shell opens in the container: the image's files, the job's uid, a terminal on demand.
    let ran = shell(alice, job.job_id, "cat /etc/debian_version; id -u; pwd", false).await;
    let uid = done.limits.as_deref().unwrap_or_default().split("as uid ").nth(1).unwrap_or_default();
    let lines: Vec<&str> = ran.lines().collect();
    assert!(lines[0].starts_with("12.") && uid.starts_with(lines[1]) && lines[2].contains("mission"), "{ran}");
    assert!(shell(alice, job.job_id, "tty", true).await.starts_with("/dev/pts/"));
    alice.stop_job(job.job_id).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Stopped, "{done:?}");
    wait_until("the stopped container is gone", || async { !container_of(&job).await }).await;

    // An image in use is not deleted; an unknown name is refused naming the field.
    let refused = alice.delete_image(image.image_id).await;
    assert!(refused.is_ok(), "no job runs in it now: {refused:?}");
    let job = alice.run_job_on_station(sleeper, local_station(), memory(256)).await.unwrap_err();
    assert!(job.to_string().contains("mission.image: no image \"debian:bookworm\" that you see"), "{job}");
}

#[tokio::test]
async fn an_agent_killed_mid_job_ends_its_container_when_it_restarts_and_networks_and_accounts_are_kept() {
    let Some(original) = test_image() else { return };
    let fresh = FreshImage::of(&original);
    let (server, admin) = cluster(|_| {}).await;
    let alice = &server.client;
    let request = ImportImage { name: "debian".into(), ..Default::default() };
    alice.import_image(&fresh.archive, &request, None).await.unwrap();

    // A station whose containers get no network: they see loopback alone.
    let mut agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let network = |n| UpdateStation { container_network: Some(n), ..Default::default() };
    admin.update_station(local_station(), &network(ContainerNetwork::None)).await.unwrap();
    let m = mission_in(alice, "debian", "ls /sys/class/net\n").await;
    let job = alice.run_job_on_station(m, local_station(), memory(256)).await.unwrap();
    let done = completed(alice, job.job_id).await;
    assert!(done.limits.unwrap_or_default().contains("network none"));
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "lo\n");
    admin.update_station(local_station(), &network(ContainerNetwork::Host)).await.unwrap();

    // A mapped user's job runs as their account inside too: what it writes is theirs. This
    // landing zone allows its containers no network, whatever the station's.
    let maps = tempfile::tempdir().unwrap();
    let map = maps.path().join("users.map");
    std::fs::write(&map, "alice nobody\n").unwrap();
    let map = map.display().to_string();
    let mapped = ["--user-map", map.as_str(), "--lz-container-network", "none"];
    let mut mapped_agent = Agent::start_with(&server, &admin, local_station(), "mapped", TWO_CPUS, &mapped).await;
    agent.kill_hard().await;
    let script = "id -u\necho made > mine.txt\nstat -c %u mine.txt\nls /sys/class/net\n";
    let writer = mission_in(alice, "debian", script).await;
    let job = alice.run_job_on_station(writer, local_station(), memory(256)).await.unwrap();
    completed(alice, job.job_id).await;
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "65534\n65534\nlo\n");
    mapped_agent.kill_hard().await;
    agent.restart(&server).await;

    // Killed mid-job, the agent leaves its container running; started again, it removes it,
    // and the server counts the job lost, as for a process.
    let sleeper = mission_in(alice, "debian", "sleep 300\n").await;
    let job = alice.run_job_on_station(sleeper, local_station(), memory(256)).await.unwrap();
    wait_until("the sleeper runs", || async { container_of(&job).await }).await;
    agent.kill_hard().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(container_of(&job).await, "the container outlived the agent");
    agent.restart(&server).await;
    wait_until("the restarted agent removed the container", || async { !container_of(&job).await }).await;
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Lost, "{done:?}");
}

/// The name an OCI archive's index gives its image (`podman save` writes the one it saved).
fn name_in_archive(archive: &std::path::Path) -> String {
    let index = std::process::Command::new("tar").arg("-xOf").arg(archive).arg("index.json").output().unwrap();
    let index: serde_json::Value = serde_json::from_slice(&index.stdout).expect("the archive has an index.json");
    let name = &index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"];
    name.as_str().expect("the test image's archive names its image").to_owned()
}

/// An image of the host's own, made of one file (it holds no shell: no job runs in it), removed
/// when dropped.
struct HostImage {
    id: String,
}

impl HostImage {
    async fn named(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker"), "the host's image\n").unwrap();
        let tar = dir.path().join("rootfs.tar");
        let made =
            std::process::Command::new("tar").arg("-C").arg(dir.path()).arg("-cf").arg(&tar).arg("marker").status();
        assert!(made.unwrap().success());
        let id = podman(&["import", "-q", tar.to_str().unwrap()]).await;
        let id = id.trim().trim_start_matches("sha256:").to_owned();
        assert!(!id.is_empty(), "podman import answered an id");
        podman(&["tag", &id, name]).await;
        Self { id }
    }
}

impl Drop for HostImage {
    fn drop(&mut self) {
        let _ = mission_testkit::podman_command().args(["rmi", "-f", &self.id]).output();
    }
}

/// The id of the image `name` names.
async fn image_id_of(name: &str) -> String {
    podman(&["image", "inspect", "--format", "{{.Id}}", name]).await.trim().to_owned()
}

/// An image is what its digest says, whatever names say: its archive's names are not loaded (a
/// host image keeps a name the archive also gives), and where someone moves the agent's name of
/// it to another image, the agent started again drops that name and loads the image again.
#[tokio::test]
async fn an_image_is_what_its_digest_says_whatever_names_say() {
    let Some(original) = test_image() else { return };
    let fresh = FreshImage::of(&original);
    let archive_name = name_in_archive(&fresh.archive);
    let host = HostImage::named(&archive_name).await;
    let (server, admin) = cluster(|_| {}).await;
    let alice = &server.client;
    let request = ImportImage { name: "debian".into(), ..Default::default() };
    alice.import_image(&fresh.archive, &request, None).await.unwrap();
    let mut agent = Agent::start(&server, &admin, local_station(), "podman", TWO_CPUS).await;
    let m = mission_in(alice, "debian", "cat /etc/debian_version\n").await;
    let job = alice.run_job_on_station(m, local_station(), memory(256)).await.unwrap();
    completed(alice, job.job_id).await;
    let version = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert!(version.starts_with("12."), "{version}");
    assert_eq!(image_id_of(&archive_name).await, host.id, "the host's image keeps its name");

    // Someone with the host's image storage moves the agent's name of the image to theirs.
    let names = mission_testkit::podman_names_of(&fresh.hex);
    assert_eq!(names.len(), 1, "{names:?}");
    let loaded = image_id_of(&names[0]).await;
    podman(&["tag", &host.id, &names[0]]).await;
    assert_eq!(image_id_of(&names[0]).await, host.id);
    agent.kill_hard().await;
    agent.restart(&server).await;
    let job = alice.run_job_on_station(m, local_station(), memory(256)).await.unwrap();
    completed(alice, job.job_id).await;
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), version, "the image of its digest ran");
    assert_eq!(image_id_of(&names[0]).await, loaded, "the name is the loaded image's again");
    assert_eq!(image_id_of(&archive_name).await, host.id);
}

/// An archive that names an image in the landing zones' namespace is refused at import, as soon
/// as its index arrives: the rest of the body is not read.
#[tokio::test]
async fn an_archive_naming_an_agents_image_is_refused_before_its_layers_are_read() {
    let (server, _admin) = cluster(|_| {}).await;
    let token = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    // A tar whose first entry is a docker manifest naming an agent's image, then 256 MiB of layer.
    let manifest = br#"[{"Config":"c.json","RepoTags":["localhost/mission-image-0123456789abcdef:00"],"Layers":[]}]"#;
    let mut head = mission_api::tar::Header::block("manifest.json", b'0', manifest.len() as u64).to_vec();
    head.extend_from_slice(manifest);
    head.resize(1024, 0);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = sent.clone();
    let chunks = std::iter::once(head).chain(std::iter::repeat_n(vec![0u8; 1 << 20], 256));
    let body = futures_util::stream::iter(chunks).map(move |chunk| {
        counted.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok::<_, std::io::Error>(chunk)
    });
    let answer = reqwest::Client::new()
        .post(format!("{}/api/v1/images?name=poisoned", server.url))
        .bearer_auth(&token)
        .header("Content-Type", "application/octet-stream")
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await;
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    // The server answers and closes as soon as it knows; the client may be cut off sending.
    if let Ok(answer) = answer {
        assert_eq!(answer.status(), 400);
        let text = answer.text().await.unwrap();
        assert!(text.contains("mission-image-0123456789abcdef"), "{text}");
    }
    assert!(sent < 64 << 20, "{sent} bytes were taken of a body refused in its first kilobyte");
    assert!(server.client.list_images().await.unwrap().is_empty());
}

/// Image archives count against their owner's bytes (`max_user_bytes`), with their files: an
/// import that would take them over it is refused, and so is a file upload past what the images
/// left.
#[tokio::test]
async fn images_count_against_their_owners_bytes() {
    let (server, _admin) = cluster(|config| config.file_limits.max_user_bytes = 64 << 10).await;
    let alice = &server.client;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("small.tar");
    let layer = vec![7u8; 40 << 10];
    std::fs::write(&archive, mission_api::tar::archive(&[("layer.tar", b'0', &layer), ("manifest.json", b'0', b"[]")]))
        .unwrap();
    let first = ImportImage { name: "small".into(), ..Default::default() };
    alice.import_image(&archive, &first, None).await.unwrap();
    let second = ImportImage { name: "again".into(), ..Default::default() };
    let refused = alice.import_image(&archive, &second, None).await.unwrap_err();
    assert!(refused.to_string().contains("max_user_bytes = 65536"), "{refused}");
    let m = mission(alice, SHELL, &[("run.sh", "true\n")], &[]).await;
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![1u8; 30 << 10]).unwrap();
    let upload = alice.upload(m.mission_id, &big, Some("big.bin"), false).await.unwrap_err();
    assert!(upload.to_string().contains("max_user_bytes"), "{upload}");
    assert_eq!(alice.list_images().await.unwrap().len(), 1);
}

/// Where the server allows a registry, an image may be a reference into it, pinned by digest:
/// the landing zone pulls it from there itself (here from a registry on 127.0.0.1 serving the
/// test image), and the server never serves its archive.
#[tokio::test]
async fn a_registry_image_is_pulled_by_the_landing_zone_from_an_allowed_registry() {
    let Some(archive) = test_image() else { return };
    let registry = mission_testkit::Registry::serve(&archive).await;
    let allowed = registry.host.clone();
    let (server, admin) = cluster(move |config| config.image_registries = vec![allowed]).await;
    let insecure = ["--lz-insecure-registry", registry.host.as_str()];
    let _agent = Agent::start_with(&server, &admin, local_station(), "puller", TWO_CPUS, &insecure).await;
    let alice = &server.client;

    // A registry the server does not allow, or a reference not pinned by digest, is refused.
    let elsewhere = RegisterImageReference {
        name: "elsewhere".into(),
        reference: format!("registry.example.org/lab/debian@{}", registry.manifest_digest),
        ..Default::default()
    };
    let refused = alice.register_image_reference(&elsewhere).await.unwrap_err().to_string();
    assert!(refused.contains("the server does not allow registry \"registry.example.org\""), "{refused}");
    let tagged = RegisterImageReference {
        name: "tagged".into(),
        reference: format!("{}/lab/debian:12", registry.host),
        ..Default::default()
    };
    let refused = alice.register_image_reference(&tagged).await.unwrap_err().to_string();
    assert!(refused.contains("it needs @sha256"), "{refused}");

    let request = RegisterImageReference {
        name: "debian-remote".into(),
        reference: registry.reference("lab/debian"),
        ..Default::default()
    };
    let image = alice.register_image_reference(&request).await.unwrap();
    assert_eq!((image.format, image.digest.as_str()), (ImageFormat::Registry, registry.manifest_digest.as_str()));
    let m = mission_in(alice, "debian-remote", "cat /etc/debian_version\n").await;
    let job = alice.run_job_on_station(m, local_station(), memory(256)).await.unwrap();
    assert_eq!(job.image.as_ref().and_then(|i| i.reference.clone()), Some(request.reference.clone()));
    completed(alice, job.job_id).await;
    assert!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap().starts_with("12."));
    assert_eq!(image_downloads(&server).await, 0, "the server served no archive");
    mission_testkit::forget_podman_image(registry.manifest_digest.trim_start_matches("sha256:"));
}

/// The server's container image (`packaging/Containerfile`), built here from the Debian test
/// image (no registry is reachable) with the binary under test: it runs as a user of its own,
/// keeps its state in the `/data` volume, passes its health check, and serves sign-in and
/// missions.
#[tokio::test]
async fn the_server_image_builds_runs_unprivileged_and_serves() {
    let Some(base) = test_image() else { return };
    let context = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::copy(root.join("packaging/Containerfile"), context.path().join("Containerfile")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_mission"), context.path().join("mission")).unwrap();
    let tag = format!("localhost/mission-server-test:{}", Uuid::new_v4().simple());
    let name = format!("mission-server-test-{}", Uuid::new_v4().simple());
    let _tidy = Tidy { container: name.clone(), image: tag.clone() };
    let built = podman_ok(&[
        "build",
        "--format",
        "docker",
        "--build-arg",
        &format!("BASE=oci-archive:{}", base.display()),
        "-t",
        &tag,
        context.path().to_str().unwrap(),
    ])
    .await;
    assert!(built.contains(&tag), "{built}");
    let config = podman_ok(&["image", "inspect", "--format", "{{.Config.User}} {{json .Config.Volumes}}", &tag]).await;
    assert_eq!(config.trim(), r#"10001:10001 {"/data":{}}"#);
    let health = podman_ok(&["image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", &tag]).await;
    assert!(health.contains("/healthz"), "{health}");

    let data = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(data.path(), Some(10001), Some(10001)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    podman_ok(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-v",
        &format!("{}:/data", data.path().display()),
        "-e",
        &format!("MISSION_LISTEN=127.0.0.1:{port}"),
        "-e",
        &format!("MISSION_PUBLIC_URL={url}"),
        &tag,
    ])
    .await;
    wait_until("the server in the container answers", || async {
        reqwest::get(format!("{url}/healthz")).await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    podman_ok(&["healthcheck", "run", &name]).await;
    let owner = podman_ok(&["exec", &name, "id", "-u"]).await;
    assert_eq!(owner.trim(), "10001", "never root");

    // Signed in as the first admin, whose password it saved in the volume; a mission is kept there.
    let password = std::fs::read_to_string(data.path().join("initial-admin-password")).unwrap();
    let (tokens, auth) = mission_testkit::device_sign_in(&url, "admin", password.trim()).await;
    let admin = Client::with_tokens(&url, tokens, auth).unwrap();
    let request = mission_client::CreateMission { name: "in a container".into(), ..Default::default() };
    let created = admin.create_mission(&request).await.unwrap();
    assert_eq!(admin.get_mission_by_id(created.mission_id).await.unwrap().name, "in a container");
    assert!(data.path().join("mission.db").exists(), "the state is in the volume");
}

/// Runs `podman ARGS` as the landing zones do on this host, and answers its stdout (panics,
/// saying why, where it fails).
async fn podman_ok(args: &[&str]) -> String {
    let out = tokio::process::Command::from(mission_testkit::podman_command()).args(args).output().await;
    let out = out.expect("podman runs");
    assert!(out.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes a test's container and image when it ends, however it ends.
struct Tidy {
    container: String,
    image: String,
}

impl Drop for Tidy {
    fn drop(&mut self) {
        let podman = mission_testkit::podman_command;
        let _ = podman().args(["rm", "-f", "-t", "0", &self.container]).output();
        let _ = podman().args(["rmi", &self.image]).output();
    }
}
