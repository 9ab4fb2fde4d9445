//! Memory and CPU limits for jobs through Linux control groups, v1 or v2, whichever the host has.
//!
//! Each job runs in a group of its own beside (v2) or below (v1) the agent's own. The job's
//! process joins it before it executes the program (the sandbox's spawner writes `0` into the
//! group's `cgroup.procs` files in the job's process), so nothing it starts escapes the limits. The
//! group also finds every process of the job when it has to be killed, and tells whether the
//! kernel killed one for want of memory. Groups are reused from job to job (see [`Cgroups`]);
//! one only ever holds one job at a time.
//!
//! Where no controller is usable (not root, no cgroup filesystem, a v2 parent that cannot hand
//! out controllers) jobs run without limits and their status says why.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use uuid::Uuid;

const ROOT: &str = "/sys/fs/cgroup";
/// The v2 group the agent moves itself into, so that its own group may hand out controllers.
const AGENT_GROUP: &str = "mission-lz-agent";
/// Name prefix of the job groups (`slot-{agent pid}-{random}`), so stale ones can be told apart.
const GROUP_PREFIX: &str = "slot-";
const CPU_PERIOD_US: u64 = 100_000;
/// Most idle groups kept for reuse; more are removed.
const MAX_IDLE: usize = 64;
/// A group whose jobs left more memory charged to it than this (files in tmpfs, page cache of
/// what the job read) is removed rather than reused, so the next job gets its whole limit.
const REUSE_MAX_CHARGED: u64 = 8 << 20;

/// How this host can limit jobs, and the job groups kept for reuse.
///
/// Making a group and removing it again is most of what limits cost a short job (directories
/// in cgroupfs, each with its control files), so a group whose job ended empty waits here for
/// the next job, which rewrites only the limits that differ.
#[derive(Debug)]
pub struct Cgroups {
    host: Host,
    idle: Mutex<Vec<JobCgroup>>,
}

#[derive(Debug)]
enum Host {
    /// cgroup v1: separate memory and cpu hierarchies; job groups under `{…}/mission-lz/`.
    V1 {
        /// Parent of the job groups in the memory hierarchy.
        memory: PathBuf,
        /// Parent of the job groups in the cpu hierarchy.
        cpu: PathBuf,
        /// Parent of the job groups in the cpuacct hierarchy, where it is not the cpu one's
        /// (then the job's CPU time is counted there); `None` when they are mounted together.
        cpuacct: Option<PathBuf>,
        /// Whether swap is accounted (`memory.memsw.*` exists).
        memsw: bool,
    },
    /// cgroup v2: one hierarchy; job groups are children of `parent`.
    V2 {
        /// Parent of the job groups.
        parent: PathBuf,
        /// Why CPU is not limited, where the host delegates the memory controller but not the
        /// cpu one (a container manager may hand out only memory): jobs then get their memory
        /// limit alone.
        no_cpu: Option<String>,
    },
    /// No limits; the reason.
    Unavailable(String),
}

/// The limits a job group is set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    memory_bytes: u64,
    cpu_quota_us: u64,
}

/// One job's group(s): one directory in v2, a memory and a cpu one in v1.
#[derive(Debug)]
pub struct JobCgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
    limits: Option<Limits>,
    /// The group's OOM-kill count when its current job started; `None` where the kernel does
    /// not count them (then `memory.failcnt` is reset at the start instead).
    oom_base: Option<u64>,
    /// The group's CPU time, in nanoseconds, when its current job started.
    cpu_base: Option<u64>,
    /// v2: `memory.peak`, opened and reset as the current job started (kernels since 6.12 keep
    /// a peak per open file); `None` where it cannot be reset, and then the group is not reused,
    /// so that the peak a new group shows is its one job's.
    peak: Option<std::fs::File>,
}

/// What a job's group measured of it: CPU seconds and the most bytes of memory it held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// CPU time of all its processes, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Its peak memory (as the limit counts it: the page cache it caused included), in bytes.
    pub peak_memory: Option<u64>,
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

/// Removes the job groups that agents no longer running left under `parent`, killing what their
/// jobs left running in them first (a job never outlives its agent). Another agent on this host
/// may share the parent, so a group is only taken for stale when the agent named in it
/// (`slot-{pid}-…`) is gone.
fn remove_stale_groups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(GROUP_PREFIX)?.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let group = JobCgroup::at(vec![entry.path()], false);
            if !group.kill_all() {
                tracing::warn!("could not empty the stale job group {}", entry.path().display());
            }
            group.remove();
        }
    }
}

impl Cgroups {
    /// Finds how jobs can be limited here, preparing the parent groups.
    pub fn detect() -> Self {
        let host = if Path::new(ROOT).join("cgroup.controllers").exists() {
            Host::detect_v2()
        } else if Path::new(ROOT).join("memory").is_dir() {
            Host::detect_v1()
        } else {
            Host::Unavailable(format!("no cgroup filesystem at {ROOT}"))
        };
        match &host {
            Host::V1 { memory, cpu, .. } => {
                remove_stale_groups(memory);
                remove_stale_groups(cpu);
            }
            Host::V2 { parent, .. } => remove_stale_groups(parent),
            Host::Unavailable(_) => {}
        }
        Self { host, idle: Mutex::new(Vec::new()) }
    }

    /// No limits, for the reason given.
    pub fn unavailable(why: impl Into<String>) -> Self {
        Self { host: Host::Unavailable(why.into()), idle: Mutex::new(Vec::new()) }
    }

    /// One line for a job's status: how its limits are enforced, or why they are not.
    pub fn describe(&self) -> String {
        match &self.host {
            Host::V1 { .. } => "memory and CPU limits enforced by cgroup v1".into(),
            Host::V2 { no_cpu: None, .. } => "memory and CPU limits enforced by cgroup v2".into(),
            Host::V2 { no_cpu: Some(why), .. } => format!("memory limit enforced by cgroup v2; CPU not limited: {why}"),
            Host::Unavailable(why) => format!("limits not enforced: {why}"),
        }
    }

    /// A group for a job, set to its limits: an idle one (preferring one with these limits
    /// already) or a new one.
    pub fn take(&self, cpus: u32, memory_mb: u64) -> Result<JobCgroup, CgroupError> {
        if let Host::Unavailable(why) = &self.host {
            return Err(CgroupError::Unavailable(why.clone()));
        }
        let limits = Limits { memory_bytes: memory_mb * 1024 * 1024, cpu_quota_us: u64::from(cpus) * CPU_PERIOD_US };
        let reused = {
            let mut idle = self.idle.lock().expect("not poisoned");
            let same = idle.iter().position(|g| g.limits == Some(limits));
            same.or(idle.len().checked_sub(1)).map(|i| idle.swap_remove(i))
        };
        if let Some(mut group) = reused {
            // A limit below what the group still holds can be refused (EBUSY): then a new one.
            match group.start_job(&self.host, limits) {
                Ok(()) => return Ok(group),
                Err(_) => group.remove(),
            }
        }
        let mut group = self.create()?;
        if let Err(e) = group.start_job(&self.host, limits) {
            group.remove();
            return Err(e);
        }
        Ok(group)
    }

    /// Takes back a group whose job has ended, killing whatever the job left running in it:
    /// kept for the next job when it is then empty and holds little memory, removed otherwise.
    pub fn give_back(&self, group: JobCgroup) {
        // On v2, a group whose peak could not be reset would show the next job this one's.
        let measurable_again = !group.v2 || group.peak.is_some() || !group.dirs[0].join("memory.peak").exists();
        if measurable_again
            && group.kill_all()
            && group.charged_memory().is_some_and(|bytes| bytes <= REUSE_MAX_CHARGED)
        {
            let mut idle = self.idle.lock().expect("not poisoned");
            if idle.len() < MAX_IDLE {
                idle.push(group);
                return;
            }
        }
        group.remove();
    }

    /// A new, unlimited group.
    fn create(&self) -> Result<JobCgroup, CgroupError> {
        let name = format!("{GROUP_PREFIX}{}-{}", std::process::id(), Uuid::new_v4().simple());
        let fail = CgroupError::file;
        let group = match &self.host {
            Host::Unavailable(why) => return Err(CgroupError::Unavailable(why.clone())),
            Host::V1 { memory, cpu, cpuacct, .. } => {
                let mut dirs = vec![memory.join(&name), cpu.join(&name)];
                dirs.extend(cpuacct.as_ref().map(|parent| parent.join(&name)));
                JobCgroup::at(dirs, false)
            }
            Host::V2 { parent, .. } => JobCgroup::at(vec![parent.join(&name)], true),
        };
        for (i, dir) in group.dirs.iter().enumerate() {
            if let Err(e) = std::fs::create_dir(dir) {
                for made in &group.dirs[..i] {
                    let _ = std::fs::remove_dir(made);
                }
                return Err(fail(dir, e));
            }
        }
        if let Host::V1 { .. } = self.host {
            let period = group.dirs[1].join("cpu.cfs_period_us");
            if let Err(e) = write(&period, &CPU_PERIOD_US.to_string()) {
                group.remove();
                return Err(fail(&period, e));
            }
        }
        Ok(group)
    }
}

/// Why a job's group could not be made or set to its limits.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// This host has no cgroups the agent can use (the words say why).
    #[error("{0}")]
    Unavailable(String),
    /// A file or directory of the cgroup tree could not be made or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl CgroupError {
    fn file(path: &Path, source: std::io::Error) -> Self {
        Self::File { path: path.to_owned(), source }
    }
}

impl Host {
    fn detect_v1() -> Self {
        let parent = |controller: &str, dir: &str| -> Result<PathBuf, CgroupError> {
            let own = own_group(controller).unwrap_or_else(|| "/".into());
            let mut base = Path::new(ROOT).join(dir).join(own.trim_start_matches('/'));
            if !base.is_dir() {
                base = Path::new(ROOT).join(dir); // a cgroup namespace shows "/" paths differently
            }
            let parent = base.join("mission-lz");
            std::fs::create_dir_all(&parent).map_err(|e| CgroupError::file(&parent, e))?;
            Ok(parent)
        };
        match (parent("memory", "memory"), parent("cpu", "cpu")) {
            (Ok(memory), Ok(cpu)) => {
                let memsw = memory.join("memory.memsw.limit_in_bytes").exists();
                // Without cpuacct, a job's CPU time is not measured; its limits still hold.
                let separate = !cpu.join("cpuacct.usage").exists() && Path::new(ROOT).join("cpuacct").is_dir();
                let cpuacct = separate.then(|| parent("cpuacct", "cpuacct").ok()).flatten();
                Self::V1 { memory, cpu, cpuacct, memsw }
            }
            (Err(e), _) | (_, Err(e)) => Self::Unavailable(format!("cgroup v1: cannot create {e}")),
        }
    }

    fn detect_v2() -> Self {
        let own = own_group("").unwrap_or_else(|| "/".into());
        let mut base = Path::new(ROOT).join(own.trim_start_matches('/'));
        if base.file_name().is_some_and(|n| n == AGENT_GROUP) {
            base.pop(); // a previous start moved the agent already
        }
        let controllers = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        let has = |wanted: &str| controllers.split_whitespace().any(|c| c == wanted);
        if !has("memory") {
            return Self::Unavailable(format!("cgroup v2: controller memory is not available in {}", base.display()));
        }
        let no_cpu = (!has("cpu")).then(|| format!("controller cpu is not delegated to {}", base.display()));
        let wanted = if no_cpu.is_none() { "+memory +cpu" } else { "+memory" };
        let enable = || write(&base.join("cgroup.subtree_control"), wanted);
        if enable().is_err() {
            // A group with processes cannot hand controllers to children ("no internal
            // processes"): move the agent into a leaf of its own, then try again. Where the
            // agent shares its group with other processes (it was started from a shell in a
            // container, say), they move into the leaf with it: the limits above them stay
            // the same.
            let leaf = base.join(AGENT_GROUP);
            let moved = std::fs::create_dir_all(&leaf)
                .and_then(|()| write(&leaf.join("cgroup.procs"), &std::process::id().to_string()));
            let enabled = moved.and_then(|()| enable()).or_else(|_| {
                let others = std::fs::read_to_string(base.join("cgroup.procs"))?;
                for pid in others.split_whitespace() {
                    // One that exited meanwhile is no longer in the way.
                    let _ = write(&leaf.join("cgroup.procs"), pid);
                }
                enable()
            });
            if let Err(e) = enabled {
                return Self::Unavailable(format!(
                    "cgroup v2: cannot enable the {} controllers in {}: {e}",
                    wanted.replace('+', ""),
                    base.display()
                ));
            }
        }
        Self::V2 { parent: base, no_cpu }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for group in self.idle.get_mut().expect("not poisoned").drain(..) {
            group.remove();
        }
    }
}

impl JobCgroup {
    /// Sets the limits (writing only those that changed) and notes the OOM count, for a job
    /// about to start in the group.
    fn start_job(&mut self, host: &Host, limits: Limits) -> Result<(), CgroupError> {
        let fail = CgroupError::file;
        let old = self.limits.take();
        let memory = limits.memory_bytes.to_string();
        match host {
            Host::Unavailable(why) => return Err(CgroupError::Unavailable(why.clone())),
            Host::V1 { memsw, .. } => {
                if old.map(|l| l.memory_bytes) != Some(limits.memory_bytes) {
                    // The swap limit may never be below the memory limit: when the limits grow
                    // it goes first, when they shrink (from unlimited, in a new group) it goes
                    // last.
                    let limit = self.dirs[0].join("memory.limit_in_bytes");
                    let swap = self.dirs[0].join("memory.memsw.limit_in_bytes");
                    let growing = old.is_some_and(|l| l.memory_bytes < limits.memory_bytes);
                    if *memsw && growing {
                        write(&swap, &memory).map_err(|e| fail(&swap, e))?;
                    }
                    write(&limit, &memory).map_err(|e| fail(&limit, e))?;
                    if *memsw && !growing {
                        write(&swap, &memory).map_err(|e| fail(&swap, e))?;
                    }
                }
                if old.map(|l| l.cpu_quota_us) != Some(limits.cpu_quota_us) {
                    let quota = self.dirs[1].join("cpu.cfs_quota_us");
                    write(&quota, &limits.cpu_quota_us.to_string()).map_err(|e| fail(&quota, e))?;
                }
            }
            Host::V2 { no_cpu, .. } => {
                let dir = &self.dirs[0];
                if old.map(|l| l.memory_bytes) != Some(limits.memory_bytes) {
                    let max = dir.join("memory.max");
                    write(&max, &memory).map_err(|e| fail(&max, e))?;
                }
                if old.is_none() {
                    let _ = write(&dir.join("memory.swap.max"), "0");
                }
                if no_cpu.is_none() && old.map(|l| l.cpu_quota_us) != Some(limits.cpu_quota_us) {
                    let cpu = dir.join("cpu.max");
                    write(&cpu, &format!("{} {CPU_PERIOD_US}", limits.cpu_quota_us)).map_err(|e| fail(&cpu, e))?;
                }
            }
        }
        self.limits = Some(limits);
        self.oom_base = self.oom_kills();
        if !self.v2 {
            // What `limit_hit` and kernels without OOM counts read.
            let _ = write(&self.dirs[0].join("memory.failcnt"), "0");
        }
        self.cpu_base = self.cpu_nanos();
        if self.v2 {
            self.peak = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.dirs[0].join("memory.peak"))
                .and_then(|mut peak| std::io::Write::write_all(&mut peak, b"reset\n").map(|()| peak))
                .ok();
        } else {
            // Writing 0 starts the high-water mark again from what is charged now.
            let _ = write(&self.dirs[0].join("memory.max_usage_in_bytes"), "0");
        }
        Ok(())
    }

    /// A group at `dirs` with no job yet.
    fn at(dirs: Vec<PathBuf>, v2: bool) -> Self {
        Self { dirs, v2, limits: None, oom_base: None, cpu_base: None, peak: None }
    }

    /// The CPU time the group's processes used so far, in nanoseconds.
    fn cpu_nanos(&self) -> Option<u64> {
        if self.v2 {
            let stat = std::fs::read_to_string(self.dirs[0].join("cpu.stat")).ok()?;
            let micros: u64 = stat.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())?;
            return Some(micros * 1000);
        }
        self.dirs[1..]
            .iter()
            .find_map(|dir| std::fs::read_to_string(dir.join("cpuacct.usage")).ok()?.trim().parse().ok())
    }

    /// What the current job used, read as it ends (before the group is given back).
    pub fn measure(&self) -> Measured {
        let cpu_seconds = self.cpu_base.zip(self.cpu_nanos()).map(|(base, now)| now.saturating_sub(base) as f64 / 1e9);
        let peak_memory = if self.v2 {
            match &self.peak {
                Some(file) => {
                    use std::io::{Read, Seek};
                    let mut text = String::new();
                    let mut file = file;
                    file.seek(std::io::SeekFrom::Start(0)).ok().and_then(|_| file.read_to_string(&mut text).ok());
                    text.trim().parse().ok()
                }
                // Not reset: a group's first job, whose peak is the group's.
                None => {
                    std::fs::read_to_string(self.dirs[0].join("memory.peak")).ok().and_then(|t| t.trim().parse().ok())
                }
            }
        } else {
            std::fs::read_to_string(self.dirs[0].join("memory.max_usage_in_bytes"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        Measured { cpu_seconds, peak_memory }
    }

    /// The kernel's count of OOM kills in the group, where it keeps one (v2, v1 since 4.13).
    fn oom_kills(&self) -> Option<u64> {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        let text = std::fs::read_to_string(self.dirs[0].join(file)).ok()?;
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }

    /// Memory still charged to the group.
    fn charged_memory(&self) -> Option<u64> {
        let file = if self.v2 { "memory.current" } else { "memory.usage_in_bytes" };
        std::fs::read_to_string(self.dirs[0].join(file)).ok()?.trim().parse().ok()
    }

    /// The `cgroup.procs` files the job's process must join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Whether the kernel killed a process of the current job for exceeding its memory.
    pub fn oom_killed(&self) -> bool {
        match (self.oom_base, self.oom_kills()) {
            (Some(base), Some(now)) => now > base,
            // Kernels before 4.13 do not count OOM kills in v1: a hit limit is the best sign.
            _ => std::fs::read_to_string(self.dirs[0].join("memory.failcnt"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0),
        }
    }

    /// Whether the current job's memory reached its limit (v1: the kernel counts OOM kills in
    /// the group where they happened, which for a container is its own group below the job's,
    /// gone with it; that its peak reached the limit is the sign that remains).
    pub fn limit_hit(&self) -> bool {
        let read = |file: &str| {
            std::fs::read_to_string(self.dirs[0].join(file)).ok().and_then(|s| s.trim().parse::<u64>().ok())
        };
        !self.v2
            && (read("memory.failcnt").is_some_and(|n| n > 0)
                || self.limits.zip(read("memory.max_usage_in_bytes")).is_some_and(|(l, peak)| peak >= l.memory_bytes))
    }

    /// The memory group's path below its hierarchy's root: what a container engine takes as the
    /// parent of a container's own groups (`--cgroup-parent`, the same path in every
    /// hierarchy), so that the job's memory limit holds for the container and measures it; and
    /// whether its CPU group has that path too (v1 hierarchies may place the agent apart), so
    /// that its CPU limit does as well.
    pub fn container_parent(&self) -> Option<(String, bool)> {
        let below_root = |dir: &PathBuf| -> Option<String> {
            let rest = dir.strip_prefix(ROOT).ok()?;
            let rest = if self.v2 { rest } else { rest.strip_prefix(rest.iter().next()?).ok()? };
            Some(format!("/{}", rest.to_str()?))
        };
        let memory = below_root(&self.dirs[0])?;
        let cpu_too = self.dirs[1..].iter().all(|dir| below_root(dir).as_ref() == Some(&memory));
        Some((memory, cpu_too))
    }

    /// Pids still in the group or in groups below it (a container's).
    fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.dirs[0].clone()];
        while let Some(dir) = dirs.pop() {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            dirs.extend(child_groups(&dir));
        }
        pids
    }

    /// Kills every process of the job; true when the group was seen empty afterwards.
    pub fn kill_all(&self) -> bool {
        if self.v2 && write(&self.dirs[0].join("cgroup.kill"), "1").is_ok() {
            return self.pids().is_empty();
        }
        // A process may fork while we kill: go round until the group is empty (bounded).
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for pid in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }

    /// Removes the group (once it is empty), with the groups a container engine made below it
    /// and, on v1, beside it in the hierarchies the job does not use.
    fn remove(&self) {
        let mut dirs = self.dirs.clone();
        if !self.v2
            && let Some((path, _)) = self.container_parent()
            && let Ok(hierarchies) = std::fs::read_dir(ROOT)
        {
            for hierarchy in hierarchies.flatten() {
                let dir = hierarchy.path().join(path.trim_start_matches('/'));
                if !dirs.contains(&dir) && !hierarchy.file_type().is_ok_and(|t| t.is_symlink()) && dir.is_dir() {
                    dirs.push(dir);
                }
            }
        }
        for dir in dirs {
            remove_tree(&dir);
        }
    }
}

/// The groups directly below `dir`.
fn child_groups(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect()
}

/// Removes the (empty) group at `dir` and the groups below it, deepest first.
fn remove_tree(dir: &Path) {
    for child in child_groups(dir) {
        remove_tree(&child);
    }
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's cgroups, or `None` (saying why) where this machine has none usable; CI sets
    /// `MISSION_REQUIRE_CGROUPS` to make that a failure.
    fn host_cgroups() -> Option<Cgroups> {
        let cgroups = Cgroups::detect();
        if let Host::Unavailable(why) = &cgroups.host {
            assert!(std::env::var_os("MISSION_REQUIRE_CGROUPS").is_none(), "CI must have cgroups: {why}");
            eprintln!("skipped: {why}");
            return None;
        }
        Some(cgroups)
    }

    #[test]
    fn groups_are_reused_with_their_limits_rewritten() {
        let Some(cgroups) = host_cgroups() else { return };
        let first = cgroups.take(1, 64).unwrap();
        let dirs = first.dirs.clone();
        assert!(dirs.iter().all(|d| d.is_dir()));
        assert!(!first.oom_killed());
        cgroups.give_back(first);
        assert!(dirs.iter().all(|d| d.is_dir()), "an empty group waits for the next job");

        // The next job gets the same group, with its own limits, growing and then shrinking.
        let memory_limit = |g: &JobCgroup| {
            let file = if g.v2 { "memory.max" } else { "memory.limit_in_bytes" };
            std::fs::read_to_string(g.dirs[0].join(file)).unwrap().trim().parse::<u64>().unwrap()
        };
        for (cpus, mb) in [(2, 128), (1, 32)] {
            let group = cgroups.take(cpus, mb).unwrap();
            assert_eq!(group.dirs, dirs);
            assert_eq!(memory_limit(&group), mb << 20);
            let cpu = if group.v2 {
                std::fs::read_to_string(group.dirs[0].join("cpu.max")).unwrap()
            } else {
                std::fs::read_to_string(group.dirs[1].join("cpu.cfs_quota_us")).unwrap()
            };
            assert!(cpu.starts_with(&(u64::from(cpus) * CPU_PERIOD_US).to_string()), "{cpu}");
            cgroups.give_back(group);
        }

        // Two jobs at once get two groups; dropping the pool removes the idle ones.
        let (a, b) = (cgroups.take(1, 64).unwrap(), cgroups.take(1, 64).unwrap());
        assert_ne!(a.dirs, b.dirs);
        let all: Vec<PathBuf> = a.dirs.iter().chain(&b.dirs).cloned().collect();
        cgroups.give_back(a);
        cgroups.give_back(b);
        drop(cgroups);
        assert!(all.iter().all(|d| !d.exists()), "idle groups are removed with the pool");
    }

    #[test]
    fn stale_groups_are_emptied_and_removed_live_ones_stay() {
        let Some(cgroups) = host_cgroups() else { return };
        let group = cgroups.take(1, 64).unwrap();
        let parent = group.dirs[0].parent().unwrap().to_path_buf();
        cgroups.give_back(group);
        // A pid no process can have (a just-ended child's pid may be taken again meanwhile by a
        // busy host).
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
        let gone = pid_max + 1;
        let stale = parent.join(format!("{GROUP_PREFIX}{gone}-test"));
        let live = parent.join(format!("{GROUP_PREFIX}{}-test", std::process::id()));
        let foreign = parent.join(format!("other-{gone}"));
        for dir in [&stale, &live, &foreign] {
            std::fs::create_dir(dir).unwrap();
        }
        // What a job of the agent that is gone left running dies with its group.
        let mut leftover = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(stale.join("cgroup.procs"), leftover.id().to_string()).unwrap();
        let again = Cgroups::detect();
        assert!(leftover.wait().unwrap().code().is_none(), "the leftover was killed");
        let (stale_left, live_left, foreign_left) = (stale.exists(), live.exists(), foreign.exists());
        for dir in [&stale, &live, &foreign] {
            let _ = std::fs::remove_dir(dir);
        }
        drop(again);
        assert!(!stale_left, "a group of an agent that is gone is removed");
        assert!(live_left, "a group of a running agent stays");
        assert!(foreign_left, "groups that are not the agents' stay");
    }
}
