//! The job sandbox: who a job runs as, what it can see, and that nothing of it outlives it.
//!
//! Jobs are untrusted code. Where the agent runs as root, each running job gets a uid of its own
//! (from `--lz-job-uids`, claimed host-wide through lock files under [`UID_LOCKS`], so that
//! agents sharing a host never hand out the same one), or the one configured `--lz-job-user`.
//! Its process starts like this, forked by the agent's [spawner] as the agent's child,
//! and then becomes the job's program:
//! 1. it takes `SIGKILL` as its parent-death signal (the parent is the agent's launcher thread,
//!    which lives as long as the agent: see [`Launcher`]);
//! 2. where the host allows it, it is forked into new mount and PID namespaces, whose init it is;
//! 3. it joins the job's cgroups, so everything it starts is counted and can be killed;
//! 4. in its namespaces, `/` becomes a private mount, `/tmp` and `/dev/shm` fresh tmpfs, the
//!    data dirs of the agent (and of the server, for the embedded landing zone) empty read-only
//!    tmpfs, `/proc` that of the namespace; it forks the program's process and stays to reap
//!    orphans. When the program ends, it passes the program's status up and ends, and the kernel
//!    kills whatever else is left in the namespace — `setsid` and double-forked children
//!    included. So the whole job dies with the agent;
//! 5. the program's process prefers itself for the OOM killer, drops all groups and switches to
//!    the job's uid and gid (which clears every capability), sets `no_new_privs`, so no set-uid
//!    program gives any back, and executes the program.
//!
//! The agent, its spawner and the init waiting for the program stay root and are unreachable
//! from the job: another uid cannot signal, trace or read them.
//!
//! Where the agent cannot switch users (not root), jobs run as the agent's own user: only jobs of
//! the landing zone's operators (admins and the station's owner) run then, unless the operator
//! passes `--lz-allow-unisolated`.

mod launcher;
pub mod spawner;

pub use launcher::{JobProcess, Launcher};
use spawner::{Namespaces, Plan};

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mission_api::lz::Assignment;

/// Where agents on a host claim job uids: one lock file per uid, locked while an agent holds it.
pub const UID_LOCKS: &str = "/run/mission-lz/uids";

/// The uids handed out to jobs by default, one per running job.
pub const DEFAULT_JOB_UIDS: (u32, u32) = (2_000_000_000, 2_000_009_999);

/// How jobs are to be run, as the operator configured it.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The uid range handed out to jobs, one uid per running job (first, last).
    pub job_uids: (u32, u32),
    /// One user all jobs run as instead: a name from `/etc/passwd`, or `UID[:GID]`.
    pub job_user: Option<String>,
    /// Run jobs of every user as the agent's own user where users cannot be separated.
    pub allow_unisolated: bool,
    /// Directories no job may see (masked in its mount namespace).
    pub private_dirs: Vec<PathBuf>,
    /// Where work dirs are made, outside every private dir (a private `/tmp` is only mounted
    /// when this is not under `/tmp`).
    pub work_root: PathBuf,
    /// A file mapping mission users to accounts of this host or cluster (lines of
    /// `MISSION_USER ACCOUNT`): their jobs run as that account (needs root).
    pub user_map: Option<PathBuf>,
    /// Refuse the jobs of mission users the map does not name (else they run as a uid of
    /// their own, as without a map). A Slurm landing zone always refuses them.
    pub refuse_unmapped: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            job_uids: DEFAULT_JOB_UIDS,
            job_user: None,
            allow_unisolated: false,
            private_dirs: Vec::new(),
            work_root: PathBuf::new(),
            user_map: None,
            refuse_unmapped: false,
        }
    }
}

/// Why the sandbox cannot be set up as configured.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `--lz-job-user` does not name a usable user.
    #[error("--lz-job-user {0}: {1}")]
    JobUser(String, String),
    /// The uid range is malformed.
    #[error("--lz-job-uids: {0}")]
    JobUids(String),
    /// The work root lies where jobs must not see.
    #[error("the work root {0} lies inside {1}, which jobs must not see")]
    WorkRoot(PathBuf, PathBuf),
    /// The user map cannot be used.
    #[error("--user-map: {0}")]
    UserMap(String),
}

/// Mission users and the accounts (name, uid, gid) their jobs run as.
pub(crate) type UserMap = HashMap<String, (String, u32, u32)>;

/// Reads a user map and finds each account's uid and gid (with `id`, which asks NSS): an
/// account that does not exist, or one that is root, is refused. Needs root, which alone can
/// run jobs as other accounts.
pub(crate) fn read_user_map(path: &Path) -> Result<UserMap, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("the agent must run as root to run jobs as the accounts it maps users to".into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let map = crate::slurm::parse_user_map(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let id = |flag: &str, account: &str| -> Result<u32, String> {
        let out = std::process::Command::new("id").args([flag, "--", account]).output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().parse().map_err(|_| format!("{}: no account {account:?} (id {flag})", path.display()))
    };
    map.into_iter()
        .map(|(user, account)| {
            let (uid, gid) = (id("-u", &account)?, id("-g", &account)?);
            if uid == 0 {
                return Err(format!("{}: {user:?} maps to root; jobs never run as root", path.display()));
            }
            Ok((user, (account, uid, gid)))
        })
        .collect()
}

/// Who jobs run as, and how they are confined.
#[derive(Debug)]
pub struct Sandbox {
    users: JobUsers,
    /// Whether jobs get their own PID and mount namespaces.
    namespaces: Result<(), String>,
    masked: Vec<PathBuf>,
    private_tmp: bool,
    allow_unisolated: bool,
    /// Mission users whose jobs run as an account of theirs.
    mapped: UserMap,
    refuse_unmapped: bool,
}

#[derive(Debug)]
enum JobUsers {
    /// A uid of its own for each running job.
    PerJob(UidPool),
    /// One configured user for all jobs.
    Configured { uid: u32, gid: u32, name: String },
    /// The agent's own user; why users cannot be separated.
    Agent(String),
}

/// The user one job runs as; handed back with [`Sandbox::release`] once its processes are gone.
#[derive(Debug)]
pub struct JobUser {
    /// `(uid, gid)`, or `None` for the agent's own user.
    ids: Option<(u32, u32)>,
    claimed: Option<ClaimedUid>,
    /// The mission user whose mapped account it is, where it is one.
    account: Option<String>,
}

impl JobUser {
    /// The uid and gid the job's files must belong to, when not the agent's.
    pub fn ids(&self) -> Option<(u32, u32)> {
        self.ids
    }

    /// The uid, where it is the job's own (claimed from the range for it alone): what may be
    /// swept of processes when the job ends.
    pub fn own_uid(&self) -> Option<u32> {
        self.claimed.as_ref().map(|claimed| claimed.uid)
    }
}

/// A uid this agent holds the lock of.
#[derive(Debug)]
struct ClaimedUid {
    uid: u32,
    _lock: File,
}

/// Uids of a range, claimed on demand and kept by this agent for its next jobs.
#[derive(Debug)]
struct UidPool {
    first: u32,
    last: u32,
    idle: Mutex<Vec<ClaimedUid>>,
}

impl UidPool {
    /// A uid no running job uses: one this agent holds already, or a newly claimed one whose
    /// leftover processes (of an agent that died) are killed first.
    fn take(&self) -> Result<ClaimedUid, UidError> {
        if let Some(claimed) = self.idle.lock().expect("not poisoned").pop() {
            return Ok(claimed);
        }
        let span = u64::from(self.last - self.first) + 1;
        let start = u64::from(std::process::id()).wrapping_mul(7919) % span;
        for i in 0..span {
            let uid = self.first + ((start + i) % span) as u32;
            if let Some(claimed) = claim(uid)? {
                kill_uid(uid);
                return Ok(claimed);
            }
        }
        Err(UidError::AllInUse { first: self.first, last: self.last })
    }
}

/// Why no uid could be had for a job.
#[derive(Debug, thiserror::Error)]
pub enum UidError {
    /// Every uid of the range runs a job (of this agent or another on the host).
    #[error("every job uid of {first}-{last} is in use on this host")]
    AllInUse {
        /// The range's first uid.
        first: u32,
        /// Its last.
        last: u32,
    },
    /// A uid's lock file cannot be opened or locked.
    #[error("{}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Locks `uid`'s lock file; `None` when another agent holds it.
fn claim(uid: u32) -> Result<Option<ClaimedUid>, UidError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = Path::new(UID_LOCKS).join(uid.to_string());
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path);
    let lock_failed = |source| UidError::Lock { path: path.clone(), source };
    let file = file.map_err(lock_failed)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(ClaimedUid { uid, _lock: file })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(lock_failed(e)),
    }
}

/// Every process of the host with its real and effective uid, from `/proc`.
fn processes() -> Vec<(i32, [u32; 2])> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let ids = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
        let mut ids = ids.split_whitespace().filter_map(|id| id.parse::<u32>().ok());
        if let (Some(real), Some(effective)) = (ids.next(), ids.next()) {
            found.push((pid, [real, effective]));
        }
    }
    found
}

/// Pids of the processes running as `uid` (real or effective).
fn processes_of(uid: u32) -> Vec<i32> {
    processes().into_iter().filter(|(_, ids)| ids.contains(&uid)).map(|(pid, _)| pid).collect()
}

/// Kills every process running as `uid`, going round until none is left (bounded: a process
/// may fork while it is killed).
pub fn kill_uid(uid: u32) {
    for _ in 0..50 {
        let pids = processes_of(uid);
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

/// Parses `FIRST-LAST`.
pub fn parse_uid_range(raw: &str) -> Result<(u32, u32), String> {
    let (first, last) = raw.split_once('-').ok_or_else(|| format!("expected FIRST-LAST, got {raw:?}"))?;
    let parse = |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{s:?} is not a uid"));
    check_uid_range((parse(first)?, parse(last)?))
}

/// The range, if it is one of uids above 0 (root) and below -1 (no uid).
fn check_uid_range((first, last): (u32, u32)) -> Result<(u32, u32), String> {
    if first == 0 || first > last || last == u32::MAX {
        return Err(format!("{first}-{last} is not a range of uids above 0"));
    }
    Ok((first, last))
}

/// `(uid, gid)` of a `--lz-job-user`: `UID[:GID]`, or a name in `/etc/passwd`.
fn resolve_user(spec: &str) -> Result<(u32, u32), String> {
    if let Some((uid, gid)) = spec.split_once(':') {
        let uid = uid.parse().map_err(|_| format!("{uid:?} is not a uid"))?;
        return Ok((uid, gid.parse().map_err(|_| format!("{gid:?} is not a gid"))?));
    }
    if let Ok(uid) = spec.parse() {
        return Ok((uid, uid));
    }
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() >= 4 && fields[0] == spec).then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
        })
        .flatten()
        .ok_or_else(|| "no such user in /etc/passwd".to_owned())
}

impl Sandbox {
    /// Finds how jobs can be confined here: which users they can run as, and whether they get
    /// namespaces (tried by starting `true` in a sandbox). Blocking.
    pub fn detect(config: &SandboxConfig, launcher: &Launcher) -> Result<Self, SandboxError> {
        // Only the outermost of nested private dirs is masked (its mount hides the others).
        let dirs: Vec<PathBuf> = config.private_dirs.iter().filter_map(|d| std::fs::canonicalize(d).ok()).collect();
        let work_root = std::fs::canonicalize(&config.work_root).unwrap_or_else(|_| config.work_root.clone());
        if let Some(dir) = dirs.iter().find(|d| work_root.starts_with(d)) {
            return Err(SandboxError::WorkRoot(work_root, dir.clone()));
        }
        let outermost = dirs.iter().filter(|d| !dirs.iter().any(|o| o != *d && d.starts_with(o)));
        let masked = outermost.cloned().collect();
        let mut sandbox = Self {
            users: JobUsers::Agent(String::new()),
            namespaces: Err("the agent is not root".into()),
            masked,
            private_tmp: !work_root.starts_with("/tmp"),
            allow_unisolated: config.allow_unisolated,
            mapped: match &config.user_map {
                Some(path) => read_user_map(path).map_err(SandboxError::UserMap)?,
                None => UserMap::new(),
            },
            refuse_unmapped: config.refuse_unmapped,
        };
        if config.refuse_unmapped && config.user_map.is_none() {
            return Err(SandboxError::UserMap("refusing unmapped users needs a user map".into()));
        }
        let root = rustix::process::geteuid().is_root();
        sandbox.users = match (&config.job_user, root) {
            (Some(spec), _) => {
                let (uid, gid) = resolve_user(spec).map_err(|e| SandboxError::JobUser(spec.clone(), e))?;
                if uid == 0 {
                    return Err(SandboxError::JobUser(spec.clone(), "jobs must not run as root".into()));
                }
                JobUsers::Configured { uid, gid, name: spec.clone() }
            }
            (None, true) => {
                let (first, last) = check_uid_range(config.job_uids).map_err(SandboxError::JobUids)?;
                match std::fs::create_dir_all(UID_LOCKS) {
                    Ok(()) => JobUsers::PerJob(UidPool { first, last, idle: Mutex::new(Vec::new()) }),
                    Err(e) => JobUsers::Agent(format!("cannot make {UID_LOCKS}: {e}")),
                }
            }
            (None, false) => JobUsers::Agent("the agent is not root, so jobs cannot run as users of their own".into()),
        };
        if root {
            // Namespaces where the kernel lets us; a plain uid switch otherwise.
            sandbox.namespaces = Ok(());
            if let Err(e) = sandbox.probe(launcher) {
                sandbox.namespaces = Err(format!("namespaces refused: {e}"));
                if let Err(e) = sandbox.probe(launcher) {
                    if let JobUsers::Configured { name, .. } = &sandbox.users {
                        return Err(SandboxError::JobUser(name.clone(), e));
                    }
                    sandbox.users = JobUsers::Agent(format!("jobs cannot be started as a user of their own: {e}"));
                }
            }
        } else if let JobUsers::Configured { name, .. } = &sandbox.users {
            return Err(SandboxError::JobUser(name.clone(), "only an agent running as root can switch users".into()));
        }
        Ok(sandbox)
    }

    /// Starts `true` in a sandbox as a job would be.
    fn probe(&self, launcher: &Launcher) -> Result<(), String> {
        let user = self.job_user().map_err(|e| e.to_string())?;
        let plan = self.plan(&["true".into()], crate::runner::process::base_env(), Path::new("/"), &user, &[]);
        let ended = launcher.start_job(&plan).and_then(|mut process| {
            let mut stderr = String::new();
            io::Read::read_to_string(&mut File::from(process.stderr.take().expect("piped")), &mut stderr)?;
            Ok((process.wait_blocking()?, stderr))
        });
        self.release(user);
        match ended.map_err(|e| e.to_string())? {
            (status, _) if status.success() => Ok(()),
            (status, stderr) => Err(format!("the sandboxed probe ended with {status}: {}", stderr.trim())),
        }
    }

    /// How one job runs, for its status.
    pub fn describe_job(&self, user: &JobUser) -> String {
        let who = match (&self.users, user.ids) {
            (_, Some((uid, _))) if user.account.is_some() => {
                let (account, _, _) = &self.mapped[user.account.as_deref().unwrap_or_default()];
                format!("runs as {account} (uid {uid}), the account its user is mapped to")
            }
            (JobUsers::PerJob(_), Some((uid, _))) => format!("runs as uid {uid}, a uid of its own"),
            (JobUsers::Configured { name, uid, .. }, _) => format!("runs as {name} (uid {uid})"),
            _ => "runs as the landing-zone agent's own user".to_owned(),
        };
        format!("{who}, {}", self.describe_namespaces(false))
    }

    /// Whether jobs get namespaces (and, with `why`, why not).
    fn describe_namespaces(&self, why: bool) -> String {
        match &self.namespaces {
            Ok(()) => "in PID and mount namespaces of its own".to_owned(),
            Err(reason) if why => format!("without namespaces ({reason})"),
            Err(_) => "without namespaces".to_owned(),
        }
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let user = match &self.users {
            JobUsers::PerJob(pool) => format!("runs as a uid of its own ({}-{})", pool.first, pool.last),
            JobUsers::Configured { name, uid, .. } => format!("runs as {name} (uid {uid})"),
            JobUsers::Agent(why) if self.allow_unisolated => {
                format!("runs as the agent's own user ({why}; every user's jobs allowed by --lz-allow-unisolated)")
            }
            JobUsers::Agent(why) => {
                format!("runs as the agent's own user ({why}), so only admins' and the station owner's jobs run")
            }
        };
        format!("{user}, {}", self.describe_namespaces(true))
    }

    /// Why `job` may not run here, if it may not: its user cannot be kept apart from the agent
    /// and is not one of the landing zone's operators.
    pub fn refusal(&self, job: &Assignment) -> Option<String> {
        if self.mapped.contains_key(&job.username) {
            return None;
        }
        if self.refuse_unmapped {
            return Some(format!(
                "refused by the landing zone: mission user {:?} has no account in its user map",
                job.username
            ));
        }
        match &self.users {
            JobUsers::Agent(why) if !self.allow_unisolated && !job.user_is_operator => Some(format!(
                "refused by the landing zone: it would run this job as its agent's own user ({why}), which only \
                 admins and the station's owner may do; its operator can run the agent as root, or allow it for \
                 everyone with --lz-allow-unisolated"
            )),
            _ => None,
        }
    }

    /// Whether mission user `username` has an account of their own here (the user map's).
    pub fn maps(&self, username: &str) -> bool {
        self.mapped.contains_key(username)
    }

    /// The user the job of mission user `username` runs as: the account the user map names for
    /// them, else as [`Sandbox::job_user`] says.
    pub fn user_of(&self, username: &str) -> Result<JobUser, UidError> {
        match self.mapped.get(username) {
            Some((_, uid, gid)) => {
                Ok(JobUser { ids: Some((*uid, *gid)), claimed: None, account: Some(username.into()) })
            }
            None => self.job_user(),
        }
    }

    /// The user a job runs as, where no account is mapped to its user.
    pub fn job_user(&self) -> Result<JobUser, UidError> {
        Ok(match &self.users {
            JobUsers::PerJob(pool) => {
                let claimed = pool.take()?;
                JobUser { ids: Some((claimed.uid, claimed.uid)), claimed: Some(claimed), account: None }
            }
            JobUsers::Configured { uid, gid, .. } => JobUser { ids: Some((*uid, *gid)), claimed: None, account: None },
            JobUsers::Agent(_) => JobUser { ids: None, claimed: None, account: None },
        })
    }

    /// Kills what a job that has ended left running as its own uid `uid` (see
    /// [`JobUser::own_uid`]; never a shared or mapped account's), where no namespace did it
    /// already: `setsid` children escape the process group, and without cgroups nothing else
    /// finds them. Blocking.
    pub fn end(&self, uid: Option<u32>) {
        if let (JobUsers::PerJob(_), Err(_), Some(uid)) = (&self.users, &self.namespaces, uid) {
            kill_uid(uid);
        }
    }

    /// Takes back a job's user once its processes are gone and its work dir is the agent's
    /// again: the uid waits for the next job.
    pub fn release(&self, user: JobUser) {
        if let (JobUsers::PerJob(pool), Some(claimed)) = (&self.users, user.claimed) {
            pool.idle.lock().expect("not poisoned").push(claimed);
        }
    }

    /// Kills what jobs of agents that are gone left running as uids of the range (their lock is
    /// free): run at start-up, before any job. Blocking.
    pub fn sweep(&self) {
        let JobUsers::PerJob(pool) = &self.users else { return };
        let uids: std::collections::BTreeSet<u32> = processes()
            .into_iter()
            .flat_map(|(_, ids)| ids)
            .filter(|id| (pool.first..=pool.last).contains(id))
            .collect();
        for uid in uids {
            if let Ok(Some(claimed)) = claim(uid) {
                tracing::warn!(uid, "killing processes a previous agent's job left running");
                kill_uid(uid);
                pool.idle.lock().expect("not poisoned").push(claimed);
            }
        }
    }

    /// How a job's process starts `command` sandboxed as `user` in `dir` with the whole
    /// environment `env`, joining the cgroups whose `cgroup.procs` files are `procs` first.
    pub(crate) fn plan(
        &self,
        command: &[String],
        env: impl IntoIterator<Item = (impl AsRef<OsStr>, impl AsRef<OsStr>)>,
        dir: &Path,
        user: &JobUser,
        procs: &[PathBuf],
    ) -> Plan {
        Plan {
            cgroups: procs.to_vec(),
            ids: user.ids,
            namespaces: self
                .namespaces
                .is_ok()
                .then(|| Namespaces { masked: self.masked.clone(), private_tmp: self.private_tmp }),
            join: None,
            terminal: false,
            dir: dir.to_owned(),
            env: env
                .into_iter()
                .map(|(name, value)| {
                    let mut var = name.as_ref().to_owned();
                    var.push("=");
                    var.push(value);
                    var
                })
                .collect(),
            program: command.iter().map(Into::into).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// Whether this test can run: it needs root; CI sets `MISSION_REQUIRE_SANDBOX` to make its
    /// absence a failure.
    fn root() -> bool {
        let root = rustix::process::geteuid().is_root();
        if !root {
            assert!(std::env::var_os("MISSION_REQUIRE_SANDBOX").is_none(), "CI must run as root");
            eprintln!("skipped: not root");
        }
        root
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    }

    #[test]
    fn a_sandboxed_job_runs_as_its_own_uid_and_dies_with_the_launcher() {
        if !root() {
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let config = SandboxConfig {
            private_dirs: vec![home.path().join("data")],
            work_root: home.path().join("work"),
            ..SandboxConfig::default()
        };
        std::fs::create_dir(home.path().join("data")).unwrap();
        let launcher = Launcher::start().unwrap();
        let sandbox = Sandbox::detect(&config, &launcher).unwrap();
        assert!(sandbox.describe().contains("a uid of its own"), "{}", sandbox.describe());
        assert!(sandbox.namespaces.is_ok(), "{}", sandbox.describe());

        let user = sandbox.job_user().unwrap();
        let (uid, _) = user.ids().unwrap();
        // The job sees its own pid namespace (it is pid 2 under its init) and none of the data dir.
        let data = home.path().join("data").display().to_string();
        let script = "echo $$ $(id -u); ls -A \"$1\" | wc -l; exec sleep 300";
        let command = ["sh", "-c", script, "job", &data].map(String::from);
        let plan = sandbox.plan(&command, [("PATH", "/usr/bin:/bin")], Path::new("/"), &user, &[]);
        std::fs::write(home.path().join("data/secret"), "x").unwrap();
        let mut child = launcher.start_job(&plan).unwrap();
        let mut out = std::io::BufReader::new(File::from(child.stdout.take().unwrap()));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line, format!("2 {uid}\n"));
        line.clear();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "0", "the data dir is masked");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while processes_of(uid).is_empty() {
            assert!(std::time::Instant::now() < deadline, "the job's sleep never showed");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // The agent goes (its launcher thread ends): the whole job goes with it.
        drop(launcher);
        let _ = child.wait_blocking();
        while !processes_of(uid).is_empty() {
            assert!(std::time::Instant::now() < deadline, "the job outlived its agent");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!alive(child.pid));
        sandbox.release(user);
    }

    #[test]
    fn start_up_kills_what_dead_agents_jobs_left_running() {
        if !root() {
            return;
        }
        // A uid of a range no other test uses, running a leftover no agent holds the lock of.
        let uid = 2_100_000_007;
        std::fs::create_dir_all(UID_LOCKS).unwrap();
        let mut leftover =
            std::process::Command::new("sleep").arg("300").uid(uid).gid(uid).spawn().expect("sleep as another uid");
        let sandbox = Sandbox {
            users: JobUsers::PerJob(UidPool { first: uid - 7, last: uid + 2, idle: Mutex::new(Vec::new()) }),
            namespaces: Ok(()),
            masked: Vec::new(),
            private_tmp: true,
            allow_unisolated: false,
            mapped: UserMap::new(),
            refuse_unmapped: false,
        };
        // A uid another agent holds is left alone.
        let held = claim(uid + 1).unwrap().unwrap();
        let mut others = std::process::Command::new("sleep").arg("300").uid(uid + 1).gid(uid + 1).spawn().unwrap();
        sandbox.sweep();
        assert!(leftover.wait().unwrap().code().is_none(), "the leftover was killed");
        assert!(alive(others.id()), "a live agent's job runs on");
        let _ = others.kill();
        let _ = others.wait();
        drop(held);
        let JobUsers::PerJob(pool) = &sandbox.users else { unreachable!() };
        assert_eq!(pool.idle.lock().unwrap().iter().map(|c| c.uid).collect::<Vec<_>>(), [uid], "the swept uid is kept");
    }
}
