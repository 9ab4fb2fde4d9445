//! Memory and CPU limits for jobs through Linux control groups, v1 or v2, whichever the host has.
//!
//! Each job gets its own group beside (v2) or below (v1) the agent's own. The job's process is in
//! it before it executes the program, so nothing it starts escapes the limits: in v1, where single
//! threads may change groups, a short-lived thread of the agent joins the job's groups and starts
//! the program there; in v2 a `/bin/sh` shim writes its pid into `cgroup.procs`, then `exec`s. The group also finds every process of the
//! job when it has to be killed, and tells whether the kernel killed one for want of memory.
//!
//! Where no controller is usable (not root, no cgroup filesystem, a v2 parent that cannot hand
//! out controllers) jobs run without limits and their status says why.

use std::path::{Path, PathBuf};

use uuid::Uuid;

const ROOT: &str = "/sys/fs/cgroup";
/// The v2 group the agent moves itself into, so that its own group may hand out controllers.
const AGENT_GROUP: &str = "mission-lz-agent";
const CPU_PERIOD_US: u64 = 100_000;

/// How this host can limit jobs.
#[derive(Debug, Clone)]
pub enum Cgroups {
    /// cgroup v1: separate memory and cpu hierarchies; job groups under `{…}/mission-lz/`.
    V1 {
        /// Parent of the job groups in the memory hierarchy.
        memory: PathBuf,
        /// Parent of the job groups in the cpu hierarchy.
        cpu: PathBuf,
    },
    /// cgroup v2: one hierarchy; job groups are children of `parent`.
    V2 {
        /// Parent of the job groups.
        parent: PathBuf,
    },
    /// No limits; the reason.
    Unavailable(String),
}

/// One job's group(s).
#[derive(Debug)]
pub struct JobCgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

/// The agent's own group in the hierarchy holding `controller` (v1), or in the v2 hierarchy when
/// `controller` is empty, from `/proc/self/cgroup`.
fn own_group(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_owned())
    })
}

impl Cgroups {
    /// Finds how jobs can be limited here, preparing the parent groups.
    pub fn detect() -> Self {
        if Path::new(ROOT).join("cgroup.controllers").exists() {
            Self::detect_v2()
        } else if Path::new(ROOT).join("memory").is_dir() {
            Self::detect_v1()
        } else {
            Self::Unavailable(format!("no cgroup filesystem at {ROOT}"))
        }
    }

    fn detect_v1() -> Self {
        let parent = |controller: &str, dir: &str| -> Result<PathBuf, String> {
            let own = own_group(controller).unwrap_or_else(|| "/".into());
            let mut base = Path::new(ROOT).join(dir).join(own.trim_start_matches('/'));
            if !base.is_dir() {
                base = Path::new(ROOT).join(dir); // a cgroup namespace shows "/" paths differently
            }
            let parent = base.join("mission-lz");
            std::fs::create_dir_all(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            Ok(parent)
        };
        match (parent("memory", "memory"), parent("cpu", "cpu")) {
            (Ok(memory), Ok(cpu)) => Self::V1 { memory, cpu },
            (Err(e), _) | (_, Err(e)) => Self::Unavailable(format!("cgroup v1: {e}")),
        }
    }

    fn detect_v2() -> Self {
        let own = own_group("").unwrap_or_else(|| "/".into());
        let mut base = Path::new(ROOT).join(own.trim_start_matches('/'));
        if base.file_name().is_some_and(|n| n == AGENT_GROUP) {
            base.pop(); // a previous start moved the agent already
        }
        let controllers = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        for wanted in ["memory", "cpu"] {
            if !controllers.split_whitespace().any(|c| c == wanted) {
                return Self::Unavailable(format!(
                    "cgroup v2: controller {wanted} is not available in {}",
                    base.display()
                ));
            }
        }
        let enable = || write(&base.join("cgroup.subtree_control"), "+memory +cpu");
        if enable().is_err() {
            // A group with processes cannot hand controllers to children ("no internal
            // processes"): move the agent into a leaf of its own, then try again.
            let leaf = base.join(AGENT_GROUP);
            let moved = std::fs::create_dir_all(&leaf)
                .and_then(|()| write(&leaf.join("cgroup.procs"), &std::process::id().to_string()));
            if let Err(e) = moved.and_then(|()| enable()) {
                return Self::Unavailable(format!(
                    "cgroup v2: cannot enable the memory and cpu controllers in {}: {e}",
                    base.display()
                ));
            }
        }
        Self::V2 { parent: base }
    }

    /// One line for a job's status: how its limits are enforced, or why they are not.
    pub fn describe(&self) -> String {
        match self {
            Self::V1 { .. } => "memory and CPU limits enforced by cgroup v1".into(),
            Self::V2 { .. } => "memory and CPU limits enforced by cgroup v2".into(),
            Self::Unavailable(why) => format!("limits not enforced: {why}"),
        }
    }

    /// Creates a job's group with its limits.
    pub fn create(&self, job_id: Uuid, cpus: u32, memory_mb: u64) -> Result<JobCgroup, String> {
        let name = format!("job-{job_id}");
        let bytes = (memory_mb * 1024 * 1024).to_string();
        let quota = (u64::from(cpus) * CPU_PERIOD_US).to_string();
        let fail = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
        match self {
            Self::Unavailable(why) => Err(why.clone()),
            Self::V1 { memory, cpu } => {
                let (m, c) = (memory.join(&name), cpu.join(&name));
                let group = JobCgroup { dirs: vec![m.clone(), c.clone()], v2: false };
                for dir in &group.dirs {
                    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
                }
                let limit = m.join("memory.limit_in_bytes");
                write(&limit, &bytes).map_err(|e| fail(&limit, e))?;
                // Without swap accounting this file is missing; the memory limit still holds.
                let _ = write(&m.join("memory.memsw.limit_in_bytes"), &bytes);
                let period = c.join("cpu.cfs_period_us");
                write(&period, &CPU_PERIOD_US.to_string()).map_err(|e| fail(&period, e))?;
                let q = c.join("cpu.cfs_quota_us");
                write(&q, &quota).map_err(|e| fail(&q, e))?;
                Ok(group)
            }
            Self::V2 { parent } => {
                let dir = parent.join(&name);
                std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, e))?;
                let group = JobCgroup { dirs: vec![dir.clone()], v2: true };
                let max = dir.join("memory.max");
                write(&max, &bytes).map_err(|e| fail(&max, e))?;
                let _ = write(&dir.join("memory.swap.max"), "0");
                let cpu = dir.join("cpu.max");
                write(&cpu, &format!("{quota} {CPU_PERIOD_US}")).map_err(|e| fail(&cpu, e))?;
                Ok(group)
            }
        }
    }
}

impl JobCgroup {
    /// Whether a single thread may join the group (v1), so that a process it starts is born
    /// inside; in v2 only whole processes move, and the job's process must join by itself.
    pub fn threads_may_join(&self) -> bool {
        !self.v2
    }

    /// Runs `start` on a short-lived thread that has joined the job's groups first (v1 only, see
    /// [`JobCgroup::threads_may_join`]): what it spawns starts inside them, with no shim. The
    /// thread ends with `start`, so no thread of the agent stays in the job's groups.
    pub fn on_joined_thread<T: Send>(&self, start: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
                    for dir in &self.dirs {
                        let tasks = dir.join("tasks");
                        write(&tasks, &tid).map_err(|e| {
                            std::io::Error::new(e.kind(), format!("cannot join {}: {e}", tasks.display()))
                        })?;
                    }
                    Ok(start())
                })
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread starting the job panicked")))
        })
    }

    /// The `cgroup.procs` files the job's process must join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Whether the kernel killed a process of the job for exceeding its memory.
    pub fn oom_killed(&self) -> bool {
        let (file, key) = if self.v2 { ("memory.events", "oom_kill") } else { ("memory.oom_control", "oom_kill") };
        let Ok(text) = std::fs::read_to_string(self.dirs[0].join(file)) else { return false };
        let counted = text.lines().find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok());
        match counted {
            Some(n) => n > 0,
            // Kernels before 4.13 do not count OOM kills in v1: a hit limit is the best sign.
            None => std::fs::read_to_string(self.dirs[0].join("memory.failcnt"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0),
        }
    }

    /// Pids still in the group.
    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills every process of the job.
    pub fn kill_all(&self) {
        if self.v2 && write(&self.dirs[0].join("cgroup.kill"), "1").is_ok() {
            return;
        }
        // A process may fork while we kill: go round until the group is empty (bounded).
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Whether no process is left in the group.
    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    /// Removes the group (once it is empty).
    pub fn remove(&self) {
        for dir in &self.dirs {
            for _ in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        }
    }
}
