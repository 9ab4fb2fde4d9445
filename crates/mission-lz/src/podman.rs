//! Jobs in container images on a process landing zone, with Podman.
//!
//! - Detection: the agent asks `podman version` when it starts; a host without a working Podman
//!   takes no image jobs (its hello says so, and the server never places one there).
//! - Images: a job's image comes from the server once per landing zone
//!   (`GET /api/v1/lz/jobs/{id}/image`, checked against its digest; a registry image is pulled
//!   from its registry by its pinned reference instead), is loaded with
//!   `podman pull` from the archive, without the names the archive gives ([`names`]), and tagged
//!   `localhost/mission-image-{agent}:{hex digest}`; later jobs of the same image find it loaded.
//!   Past the cache size the agent is given, the least recently used images no job runs in are
//!   removed.
//! - An image is what its digest says, or it is not run: the agent records the id of the image it
//!   loaded for each digest (in its data dir) and runs containers by that id, never by a name
//!   (anyone with access to the host's image storage may move a name). At start-up, a name of its
//!   repository whose image is not the one recorded for that digest is dropped, and the image is
//!   loaded again when a job needs it.
//! - Each agent tags in a repository of its own: agents sharing a host's image storage never
//!   count, evict or untag each other's images (removing a name another agent also gave the same
//!   image only removes that name).
//! - Running ([`run_args`]): `podman run --rm` as the job's own uid (never root inside), with no
//!   new privileges and no capabilities, only the job's work dir mounted (at the same path, and
//!   the working directory), the job's environment, its GPUs (through CDI where the host has a
//!   spec), the landing zone's network setting, and its cgroup as the container's parent
//!   (`--cgroup-parent`): the job's limits hold for the container and measure it.
//! - Containers carry the agent's label: a restarted agent removes those an earlier run left.
//!
//! On cgroup v1 hosts Podman needs `--runtime runc --cgroup-manager cgroupfs` (crun refuses
//! hybrid hierarchies), and every container gets the agent's own open-file and process limits
//! (Podman's defaults may exceed the host's hard limits).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use mission_api::{ContainerNetwork, JobImage};
use uuid::Uuid;

use crate::client::LzClient;

pub(crate) mod names;

/// How long one Podman command other than a container's run may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
/// The most processes Podman lets a container have (its own limit as it starts the runtime).
const MAX_PROCESSES: u64 = 32_768;
/// The repository loaded images are tagged in, followed by `-{agent}` (the Slurm runner's
/// gateways tag in it as it is).
const REPOSITORY: &str = mission_api::images::AGENTS_REPOSITORY;

/// How a process landing zone runs container images.
#[derive(Debug, Clone)]
pub struct ContainerConfig {
    /// Run no image jobs, even where Podman is installed.
    pub disabled: bool,
    /// The most bytes of image archives kept loaded; past it the least recently used go.
    pub cache_bytes: u64,
    /// The most network its containers get (the station's setting, or none where this says so).
    pub network: ContainerNetwork,
    /// Registries (`HOST[:PORT]`) pulled from without TLS verification (plain http).
    pub insecure_registries: Vec<String>,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        Self {
            disabled: false,
            cache_bytes: 20 << 30,
            network: ContainerNetwork::Host,
            insecure_registries: Vec::new(),
        }
    }
}

/// A loaded image of the cache.
#[derive(Debug)]
struct Cached {
    /// Its archive's size.
    size: u64,
    /// When it was last used, by the cache's clock.
    used: u64,
    /// Jobs that run in it now.
    jobs: u32,
    /// Its image id, as this agent loaded it: containers run by id, which no name change in
    /// Podman's storage (another agent's, or anyone's) can take away or point elsewhere.
    id: String,
}

/// Podman on this host, and the images it holds for jobs.
#[derive(Debug)]
pub(crate) struct Podman {
    /// Arguments before every subcommand (the runtime and cgroup manager the host needs).
    global: Vec<String>,
    /// `--ulimit` arguments: the agent's own limits.
    ulimits: Vec<String>,
    /// The label of this agent's containers (`mission.agent={hash}`).
    label: String,
    /// The repository this agent tags its loaded images in (`{REPOSITORY}-{hash}`).
    repository: String,
    /// Where archives are downloaded to.
    downloads: PathBuf,
    /// Where the id of the image loaded for each digest is recorded (a file per hex digest).
    loaded_ids: PathBuf,
    config: ContainerConfig,
    /// Whether the host has a CDI spec for NVIDIA GPUs.
    cdi: bool,
    /// Loaded images by hex digest, and the cache's clock.
    cache: Mutex<(HashMap<String, Cached>, u64)>,
    /// One image is loaded at a time: a second job of an image waits for the first's load.
    loading: tokio::sync::Mutex<()>,
}

/// A container's run, as [`run_args`] writes it.
#[derive(Debug)]
pub(crate) struct ContainerRun<'a> {
    pub name: String,
    pub image: &'a str,
    pub work_dir: &'a Path,
    pub user: (u32, u32),
    pub env: Vec<(&'a str, OsString)>,
    pub cgroup_parent: Option<String>,
    /// The network its station gives it (this landing zone may allow less).
    pub network: ContainerNetwork,
    /// CPUs to limit the container to itself, where the job's CPU group is not its parent.
    pub cpus: Option<u32>,
    pub gpus: &'a [u32],
    pub command: &'a [String],
    /// How a TES task's executor differs: see [`TaskContainer`].
    pub task: Option<TaskContainer<'a>>,
}

/// What a TES task's executor runs with instead of a job's work dir: the task's own mounts, each
/// at its path inside the container; the directory it names, or the image's own; and standard
/// input, where it reads a file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskContainer<'a> {
    /// `(host path, container path)`, parents before what is mounted inside them.
    pub mounts: &'a [(PathBuf, String)],
    pub workdir: Option<&'a str>,
    pub stdin: bool,
}

/// Why Podman could not do what the agent asked of it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodmanError {
    /// The landing zone's operator switched images off.
    #[error("switched off on this landing zone (--no-images)")]
    Disabled,
    /// A directory of the agent's for images cannot be used.
    #[error("{0}: {1}")]
    Dir(PathBuf, std::io::Error),
    /// `podman` cannot be run.
    #[error("cannot run podman: {0}")]
    Spawn(std::io::Error),
    /// A `podman` command did not answer in time.
    #[error("podman {0} did not answer within {COMMAND_TIMEOUT:?}")]
    Timeout(String),
    /// A `podman` command failed, saying this.
    #[error("podman {command} failed ({status}): {stderr}")]
    Failed {
        /// Its subcommand.
        command: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// `podman pull` answered no image id.
    #[error("podman pull answered no id")]
    NoId,
    /// What names the image is not a digest.
    #[error("{0:?} is not an image digest")]
    NotADigest(String),
    /// Its archive could not be fetched from the service.
    #[error("downloading it: {0}")]
    Fetch(#[from] crate::client::Failure),
    /// Its archive's download failed or does not match its digest.
    #[error("downloading it: {0}")]
    Download(#[from] crate::cache::DownloadError),
    /// Its registry would not give it.
    #[error("pulling {remote}: {source}")]
    Pull {
        /// The registry reference.
        remote: String,
        /// Why.
        source: Box<PodmanError>,
    },
    /// The archive's names cannot be taken out before it is loaded.
    #[error("the image archive cannot be loaded: {0}")]
    Archive(#[from] names::ArchiveError),
    /// The archive's path is not UTF-8, which Podman's command line needs.
    #[error("the image archive's path is not UTF-8")]
    NonUtf8Path,
    /// The archive is neither kind Podman loads.
    #[error("neither an OCI archive ({oci}) nor a docker archive ({docker})")]
    NotAnArchive {
        /// Why it is no OCI archive.
        oci: Box<PodmanError>,
        /// Why it is no docker archive.
        docker: Box<PodmanError>,
    },
    /// The id of an image loaded could not be recorded.
    #[error("recording the loaded image's id: {0}")]
    Record(std::io::Error),
}

impl Podman {
    /// Finds a working Podman (`None`, saying why, where there is none or `config` disables
    /// it), lists the images an earlier run loaded, and removes the containers it left.
    pub async fn detect(data_dir: &Path, config: ContainerConfig, agent: &str) -> Result<Self, PodmanError> {
        if config.disabled {
            return Err(PodmanError::Disabled);
        }
        let v1 = !Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let mut global = vec!["--cgroup-manager".to_owned(), "cgroupfs".to_owned()];
        if v1 {
            global.extend(["--runtime".to_owned(), "runc".to_owned()]);
        }
        // Podman runs its runtime with at most 32768 processes: a container may not get more.
        let limits = [
            (rustix::process::Resource::Nofile, "nofile", u64::MAX),
            (rustix::process::Resource::Nproc, "nproc", MAX_PROCESSES),
        ];
        let ulimits = limits
            .into_iter()
            .flat_map(|(resource, name, most)| {
                let limit = rustix::process::getrlimit(resource);
                let value = |v: Option<u64>| v.unwrap_or(most).min(most);
                ["--ulimit".to_owned(), format!("{name}={}:{}", value(limit.current), value(limit.maximum))]
            })
            .collect();
        let downloads = data_dir.join("images");
        let loaded_ids = data_dir.join("image-ids");
        for dir in [&downloads, &loaded_ids] {
            crate::dirs::private_dir(dir, 0o700).map_err(|e| PodmanError::Dir(dir.clone(), e))?;
        }
        let cdi = ["/etc/cdi", "/var/run/cdi"].iter().any(|dir| {
            std::fs::read_dir(dir)
                .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().contains("nvidia")))
        });
        let podman = Self {
            global,
            ulimits,
            label: format!("mission.agent={agent}"),
            repository: format!("{REPOSITORY}-{agent}"),
            downloads,
            loaded_ids,
            config,
            cdi,
            cache: Mutex::new((HashMap::new(), 0)),
            loading: tokio::sync::Mutex::new(()),
        };
        let version = podman.command(&["version", "--format", "{{.Client.Version}}"]).await?;
        podman.sweep().await;
        podman.list_loaded().await;
        tracing::info!(version = version.trim(), cdi, "Podman runs the jobs that name an image");
        Ok(podman)
    }

    /// How a container runs, for a job's `limits`.
    pub fn describe(&self, run: &ContainerRun) -> String {
        format!("in a Podman container, network {}", run.network.within(self.config.network))
    }

    /// Runs `podman {global} {args}`; answers its stdout, or why it failed.
    async fn command(&self, args: &[&str]) -> Result<String, PodmanError> {
        let mut command = tokio::process::Command::new("podman");
        command.args(&self.global).args(args).stdin(std::process::Stdio::null()).kill_on_drop(true);
        let output = tokio::time::timeout(COMMAND_TIMEOUT, command.output())
            .await
            .map_err(|_| PodmanError::Timeout(args[0].to_owned()))?
            .map_err(PodmanError::Spawn)?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(PodmanError::Failed { command: args[0].to_owned(), status: output.status, stderr });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Removes the containers of this agent that an earlier run left (killed with the agent).
    async fn sweep(&self) {
        let listed = self.command(&["ps", "-a", "-q", "--filter", &format!("label={}", self.label)]).await;
        let ids: Vec<&str> = listed.as_deref().unwrap_or_default().split_whitespace().collect();
        if ids.is_empty() {
            return;
        }
        let mut args = vec!["rm", "-f", "-t", "0"];
        args.extend(&ids);
        match self.command(&args).await {
            Ok(_) => tracing::info!("removed {} container(s) an earlier run of the agent left", ids.len()),
            Err(why) => tracing::warn!("removing the containers an earlier run left failed: {why}"),
        }
    }

    /// Fills the cache with the images an earlier run loaded, each by the id recorded for its
    /// digest; a name whose image is not that one is dropped.
    async fn list_loaded(&self) {
        let filter = format!("reference={}", self.repository);
        let format = "{{.Tag}} {{.ID}} {{.Size}}";
        let listed = self.command(&["images", "--no-trunc", "--format", format, "--filter", &filter]).await;
        let Ok(listed) = listed else { return };
        for line in listed.lines() {
            let mut words = line.splitn(3, ' ');
            let (Some(hex), Some(id)) = (words.next().filter(|tag| is_hex_digest(tag)), words.next()) else { continue };
            let id = id.strip_prefix("sha256:").unwrap_or(id);
            // The size is what `images` prints (rounded); the archive's is not known any more.
            let size = parse_size(words.next().unwrap_or_default()).unwrap_or(0);
            let recorded = std::fs::read_to_string(self.loaded_ids.join(hex)).unwrap_or_default();
            if recorded.trim() == id {
                let cached = Cached { size, used: 0, jobs: 0, id: id.to_owned() };
                self.cache.lock().expect("not poisoned").0.insert(hex.to_owned(), cached);
                continue;
            }
            let reference = format!("{}:{hex}", self.repository);
            tracing::warn!(
                %reference, found = id, loaded = recorded.trim(),
                "the image named for this digest is not the one this agent loaded: its name is dropped (the image \
                 is loaded again when a job needs it)"
            );
            if let Err(why) = self.command(&["untag", id, &reference]).await {
                tracing::warn!(%reference, "dropping the name failed: {why}");
            }
            let _ = std::fs::remove_file(self.loaded_ids.join(hex));
        }
    }

    /// Records that the image loaded for digest `hex` has id `id`.
    fn record_id(&self, hex: &str, id: &str) -> Result<(), PodmanError> {
        let id = id.strip_prefix("sha256:").unwrap_or(id);
        let partial = self.loaded_ids.join(format!("{hex}.partial"));
        std::fs::write(&partial, id)
            .and_then(|()| std::fs::rename(&partial, self.loaded_ids.join(hex)))
            .map_err(PodmanError::Record)
    }

    /// The local name of `image`, loaded (from the server, for `job_id`) unless it is already;
    /// the job then counts as running in it until [`Podman::release`].
    pub async fn take(&self, client: &LzClient, job_id: Uuid, image: &JobImage) -> Result<String, PodmanError> {
        let hex = image
            .digest
            .strip_prefix("sha256:")
            .filter(|hex| is_hex_digest(hex))
            .ok_or_else(|| PodmanError::NotADigest(image.digest.clone()))?;
        let reference = format!("{}:{hex}", self.repository);
        // A loaded image needs no turn at the lock: only loads wait for each other.
        if self.mark_used(hex) {
            return Ok(reference);
        }
        let _one_load = self.loading.lock().await;
        if self.mark_used(hex) {
            // Loaded by the job before this one in line.
            return Ok(reference);
        }
        let (size, id) = match &image.reference {
            Some(remote) => self.pull(remote, &reference).await?,
            None => {
                let archive = self.download(client, job_id, hex).await?;
                let size = std::fs::metadata(&archive).map(|m| m.len()).unwrap_or(0);
                let loaded = self.load(&archive, &reference).await;
                let _ = tokio::fs::remove_file(&archive).await;
                (size, loaded?)
            }
        };
        self.record_id(hex, &id)?;
        {
            let mut cache = self.cache.lock().expect("not poisoned");
            cache.1 += 1;
            let used = cache.1;
            cache.0.insert(hex.to_owned(), Cached { size, used, jobs: 1, id });
        }
        self.evict().await;
        Ok(reference)
    }

    /// Counts a job in a loaded image; false where it is not loaded.
    fn mark_used(&self, hex: &str) -> bool {
        let mut cache = self.cache.lock().expect("not poisoned");
        cache.1 += 1;
        let now = cache.1;
        match cache.0.get_mut(hex) {
            Some(entry) => {
                entry.used = now;
                entry.jobs += 1;
                true
            }
            None => false,
        }
    }

    /// A job no longer runs in `reference` (from [`Podman::take`]).
    pub async fn release(&self, reference: &str) {
        let hex = reference.rsplit(':').next().unwrap_or_default();
        if let Some(entry) = self.cache.lock().expect("not poisoned").0.get_mut(hex) {
            entry.jobs = entry.jobs.saturating_sub(1);
        }
        self.evict().await;
    }

    /// Downloads the archive of `hex` for `job_id`, checked against its digest.
    async fn download(&self, client: &LzClient, job_id: Uuid, hex: &str) -> Result<PathBuf, PodmanError> {
        let path = self.downloads.join(format!("{hex}.{}.tar", Uuid::new_v4().simple()));
        let body = client.job_image(job_id, &format!("sha256:{hex}")).await?;
        crate::cache::download_checked(body, &path, hex).await?;
        Ok(path)
    }

    /// Pulls `remote` (pinned by digest, so what comes is what was registered) from its registry
    /// and names it `reference`; answers its size and id.
    async fn pull(&self, remote: &str, reference: &str) -> Result<(u64, String), PodmanError> {
        let insecure = insecure(remote, &self.config.insecure_registries);
        let tls = format!("--tls-verify={}", !insecure);
        let id = self.command(&["pull", "-q", &tls, remote]).await;
        let id = id.map_err(|e| PodmanError::Pull { remote: remote.to_owned(), source: Box::new(e) })?;
        let id = id.lines().last().map(str::trim).filter(|id| !id.is_empty()).ok_or(PodmanError::NoId)?;
        self.command(&["tag", id, reference]).await?;
        let size = self.command(&["image", "inspect", "--format", "{{.Size}}", id]).await?;
        Ok((size.trim().parse().unwrap_or(0), id.to_owned()))
    }

    /// Loads an archive (OCI, else docker) without the names it gives ([`names`]) and names it
    /// `reference`; answers its id.
    async fn load(&self, archive: &Path, reference: &str) -> Result<String, PodmanError> {
        let removed = names::strip_before_loading(archive.to_owned()).await?;
        if removed > 0 {
            tracing::debug!(%reference, "loading the image without the {removed} name(s) its archive gives");
        }
        let archive = archive.to_str().ok_or(PodmanError::NonUtf8Path)?;
        // `pull` from the archive answers the image's id, which names it whatever names other
        // agents give their images meanwhile (`load` answers a name).
        let id = match self.command(&["pull", "-q", &format!("oci-archive:{archive}")]).await {
            Ok(id) => id,
            Err(oci) => self
                .command(&["pull", "-q", &format!("docker-archive:{archive}")])
                .await
                .map_err(|docker| PodmanError::NotAnArchive { oci: Box::new(oci), docker: Box::new(docker) })?,
        };
        let id = id.lines().last().map(str::trim).filter(|id| !id.is_empty()).ok_or(PodmanError::NoId)?;
        self.command(&["tag", id, reference]).await?;
        Ok(id.to_owned())
    }

    /// Removes the least recently used images no job runs in, while the cache holds more than
    /// its size.
    async fn evict(&self) {
        loop {
            let victim = {
                let cache = self.cache.lock().expect("not poisoned");
                let total: u64 = cache.0.values().map(|c| c.size).sum();
                if total <= self.config.cache_bytes {
                    return;
                }
                cache.0.iter().filter(|(_, c)| c.jobs == 0).min_by_key(|(_, c)| c.used).map(|(hex, _)| hex.clone())
            };
            let Some(hex) = victim else { return };
            let _ = std::fs::remove_file(self.loaded_ids.join(&hex));
            let reference = format!("{}:{hex}", self.repository);
            match self.command(&["rmi", &reference]).await {
                Ok(_) => tracing::info!(%reference, "evicted from the image cache"),
                Err(why) => tracing::warn!(%reference, "evicting the image failed: {why}"),
            }
            self.cache.lock().expect("not poisoned").0.remove(&hex);
        }
    }

    /// What a container of `reference` (from [`Podman::take`]) runs: the id of the image this
    /// agent loaded for it (see [`Cached::id`]); `None` where it holds none.
    pub fn runnable(&self, reference: &str) -> Option<String> {
        let hex = reference.rsplit(':').next().unwrap_or_default();
        self.cache.lock().expect("not poisoned").0.get(hex).map(|cached| cached.id.clone())
    }

    /// The whole `podman` command line of a container's run.
    pub fn run_command(&self, run: &ContainerRun) -> Vec<OsString> {
        run_args(&self.global, &self.ulimits, &self.label, run.network.within(self.config.network), self.cdi, run)
    }

    /// The whole command line (`podman` first) that runs `program` in the running container `name`, as
    /// `user` in `work_dir` (`podman exec`: the container's environment, namespaces and
    /// limits), on a terminal (its stdin) with `terminal`.
    pub fn exec_command(
        &self,
        name: &str,
        user: (u32, u32),
        work_dir: &Path,
        terminal: bool,
        program: &[OsString],
    ) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["podman".into()];
        args.extend(self.global.iter().map(OsString::from));
        args.extend(["exec".into(), "-i".into()]);
        if terminal {
            args.extend(["-t".into(), "-e".into(), "TERM=xterm-256color".into()]);
        }
        args.extend(["--user".into(), format!("{}:{}", user.0, user.1).into(), "-w".into(), work_dir.into()]);
        args.push(name.into());
        args.extend(program.iter().cloned());
        args
    }

    /// Sends `signal` (`TERM`) to a container's processes (`podman kill`), in the background.
    pub fn signal(&self, name: &str, signal: &str) {
        let mut command = tokio::process::Command::new("podman");
        command.args(&self.global).args(["kill", "--signal", signal, name]).stdin(std::process::Stdio::null());
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        if let Ok(mut child) = command.spawn() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await;
            });
        }
    }

    /// Ends a container at once and removes it, wherever its processes are (`podman rm -f`), in
    /// the background.
    pub fn remove(&self, name: &str) {
        let mut command = tokio::process::Command::new("podman");
        command.args(&self.global).args(["rm", "-f", "-t", "0", name]).stdin(std::process::Stdio::null());
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        if let Ok(mut child) = command.spawn() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await;
            });
        }
    }
}

/// The arguments of `podman` for a container's run (see the module docs).
pub(crate) fn run_args(
    global: &[String],
    ulimits: &[String],
    label: &str,
    network: ContainerNetwork,
    cdi: bool,
    run: &ContainerRun,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = global.iter().map(OsString::from).collect();
    let dir = run.work_dir.as_os_str();
    let mut volume = dir.to_owned();
    volume.push(":");
    volume.push(dir);
    for arg in [
        "run",
        "--rm",
        "--replace",
        "--pull=never",
        "--name",
        &run.name,
        "--label",
        label,
        "--security-opt",
        "no-new-privileges",
        "--cap-drop",
        "all",
        "--network",
        network.as_str(),
        "--user",
        &format!("{}:{}", run.user.0, run.user.1),
    ] {
        args.push(arg.into());
    }
    args.extend(ulimits.iter().map(OsString::from));
    match &run.task {
        None => args.extend(["-v".into(), volume, "-w".into(), dir.to_owned()]),
        Some(task) => {
            for (host, inside) in task.mounts {
                let mut volume = host.as_os_str().to_owned();
                volume.push(":");
                volume.push(inside);
                args.extend(["-v".into(), volume]);
            }
            if let Some(workdir) = task.workdir {
                args.extend(["-w".into(), workdir.into()]);
            }
            if task.stdin {
                args.push("-i".into());
            }
        }
    }
    for (name, value) in &run.env {
        let mut pair = OsString::from(format!("{name}="));
        pair.push(value);
        args.extend(["-e".into(), pair]);
    }
    if let Some(parent) = &run.cgroup_parent {
        args.extend(["--cgroup-parent".into(), parent.into()]);
    }
    if let Some(cpus) = run.cpus {
        args.extend(["--cpus".into(), cpus.to_string().into()]);
    }
    for gpu in run.gpus {
        let device = if cdi { format!("nvidia.com/gpu={gpu}") } else { format!("/dev/nvidia{gpu}") };
        args.extend(["--device".into(), device.into()]);
    }
    if !cdi && !run.gpus.is_empty() {
        for device in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
            if Path::new(device).exists() {
                args.extend(["--device".into(), device.into()]);
            }
        }
    }
    args.push(run.image.into());
    args.extend(run.command.iter().map(OsString::from));
    args
}

/// Whether `reference` lies in one of the `insecure` registries.
pub(crate) fn insecure(reference: &str, insecure: &[String]) -> bool {
    let registry = reference.split('/').next().unwrap_or_default();
    insecure.iter().any(|host| host == registry)
}

/// Whether `text` is 64 lowercase hex digits.
fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A size as `podman images` prints it (`204 MB`, `1.2 GB`), in bytes.
fn parse_size(text: &str) -> Option<u64> {
    let (number, unit) = text.trim().split_once(' ')?;
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "B" => 1.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    Some((number * scale) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_containers_run_mounts_only_its_work_dir_and_drops_every_privilege() {
        let command = ["sh".to_owned(), "run.sh".to_owned()];
        let run = ContainerRun {
            name: "mission-1".into(),
            image: "localhost/mission-image:ab",
            work_dir: Path::new("/var/tmp/w/7"),
            user: (2000001, 2000001),
            env: vec![("HOME", "/var/tmp/w/7".into()), ("JOB_ID", "1".into())],
            cgroup_parent: Some("/mission-lz/slot-1-2".into()),
            network: ContainerNetwork::Host,
            cpus: Some(2),
            gpus: &[1],
            command: &command,
            task: None,
        };
        let global = ["--runtime".to_owned(), "runc".to_owned()];
        let ulimits = ["--ulimit".to_owned(), "nofile=1024:4096".to_owned()];
        let args = run_args(&global, &ulimits, "mission.agent=x", ContainerNetwork::None, true, &run);
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        let line = args.join(" ");
        assert!(
            line.starts_with("--runtime runc run --rm --replace --pull=never --name mission-1 --label mission.agent=x")
        );
        for expected in [
            "--security-opt no-new-privileges",
            "--cap-drop all",
            "--network none",
            "--user 2000001:2000001",
            "--ulimit nofile=1024:4096",
            "-v /var/tmp/w/7:/var/tmp/w/7 -w /var/tmp/w/7",
            "-e HOME=/var/tmp/w/7 -e JOB_ID=1",
            "--cgroup-parent /mission-lz/slot-1-2 --cpus 2",
            "--device nvidia.com/gpu=1",
        ] {
            assert!(line.contains(expected), "{expected:?} in {line}");
        }
        assert!(line.ends_with("localhost/mission-image:ab sh run.sh"), "{line}");
        assert_eq!(args.iter().filter(|a| **a == "-v").count(), 1, "only the work dir is mounted");
    }

    #[test]
    fn the_sizes_podman_images_prints_are_read() {
        assert_eq!(parse_size("204 MB"), Some(204_000_000));
        assert_eq!(parse_size("1.5 GB"), Some(1_500_000_000));
        assert_eq!(parse_size("lots"), None);
    }
}
