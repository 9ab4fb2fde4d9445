//! The spawner: the small process that starts every job of an agent, and what each job's
//! process does before its program runs.
//!
//! The agent does not set a job up between `fork` and `exec` itself: forking a server of many
//! threads and a large address space costs milliseconds, and a fork that stays alive (as the
//! namespace's init must) makes every page the server writes a copy-on-write fault for as long
//! as the job runs. Executing a fresh helper for each job costs a millisecond more (on virtual
//! machines, every dynamic loader's start traps to the hypervisor for the CPU's features). So
//! the agent starts its own executable once (`/proc/self/exe`, with `posix_spawn`, which copies
//! nothing) under the name [`NAME`]: a single-threaded process of a few MiB that stays root and
//! serves the agent's [`Launcher`](super::Launcher) over a socket. For each job it gets a
//! `Plan`, the job's stdin, stdout and stderr and a pipe for its wait status, and forks a copy
//! of itself (cheap) with `clone3(CLONE_PARENT | CLONE_PIDFD)`, in new mount and PID namespaces
//! where the plan has them: the job's process is the agent's child as if the agent had forked
//! it, and the agent gets a pidfd for it. The copy carries out the plan (the steps of the
//! [module docs](super)), as the namespace's init where there is one, and the program's process
//! executes the program; failures end it with status 127 and a line on the job's stderr.
//!
//! Executables that start agents call [`run_if_invoked`] first thing in `main`.
//!
//! This is the one module of the workspace with `unsafe` code: namespaces, forks, mounts and
//! the switch of users are system calls std does not wrap (the launcher's one `unsafe` block hands
//! tokio a pidfd to watch).
#![allow(unsafe_code)]

use std::convert::Infallible;
use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// The spawner's `argv[0]`, by which [`run_if_invoked`] knows it.
pub const NAME: &str = "mission-lz-spawner";

/// The largest plan the spawner takes, in bytes.
pub(crate) const MAX_PLAN: usize = 256 * 1024;

/// How one job's process starts: what it does before its program runs, and the program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `cgroup.procs` files of the job's cgroups, joined first.
    pub cgroups: Vec<PathBuf>,
    /// The job's `(uid, gid)`; `None` keeps the agent's.
    pub ids: Option<(u32, u32)>,
    /// New mount and PID namespaces, with these directories masked.
    pub namespaces: Option<Namespaces>,
    /// The mount and PID namespaces of this process (a running job's init) to enter instead:
    /// a shell in the job.
    pub join: Option<u32>,
    /// Its stdin is a terminal, to be its controlling terminal in a session of its own.
    pub terminal: bool,
    /// The program's working directory.
    pub dir: PathBuf,
    /// The program's whole environment, as `NAME=value`.
    pub env: Vec<OsString>,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

/// The mount namespace of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Namespaces {
    /// Directories hidden under an empty read-only tmpfs.
    pub masked: Vec<PathBuf>,
    /// A fresh `/tmp` and `/dev/shm`.
    pub private_tmp: bool,
}

impl Plan {
    /// How `program` starts in the running job that `self` started, whose process (the init
    /// of its namespaces, where it has them) is `pid`: as the job's user, in its cgroups, work
    /// dir, environment and namespaces; on a terminal (its stdin) with `terminal`.
    pub fn shell(&self, pid: u32, program: Vec<OsString>, terminal: bool) -> Plan {
        let mut env = self.env.clone();
        if terminal {
            env.push("TERM=xterm-256color".into());
        }
        let join = self.namespaces.is_some().then_some(pid);
        Plan { namespaces: None, join, terminal, env, program, ..self.clone() }
    }

    /// The plan as arguments, each ended by a NUL, the way it travels to the spawner.
    pub fn encode(&self) -> Vec<u8> {
        let mut args: Vec<OsString> = Vec::new();
        for procs in &self.cgroups {
            args.extend(["--cgroup".into(), procs.clone().into()]);
        }
        if let Some((uid, gid)) = self.ids {
            args.extend(["--user".into(), format!("{uid}:{gid}").into()]);
        }
        if let Some(namespaces) = &self.namespaces {
            args.push("--namespaces".into());
            for dir in &namespaces.masked {
                args.extend(["--mask".into(), dir.clone().into()]);
            }
            if namespaces.private_tmp {
                args.push("--private-tmp".into());
            }
        }
        if let Some(pid) = self.join {
            args.extend(["--join".into(), pid.to_string().into()]);
        }
        if self.terminal {
            args.push("--terminal".into());
        }
        args.extend(["--dir".into(), self.dir.clone().into()]);
        for var in &self.env {
            args.extend(["--env".into(), var.clone()]);
        }
        args.push("--".into());
        args.extend(self.program.iter().cloned());
        let mut encoded = Vec::new();
        for arg in args {
            encoded.extend_from_slice(arg.as_bytes());
            encoded.push(0);
        }
        encoded
    }

    /// Reads a plan back from [`Plan::encode`]'s form.
    pub fn decode(encoded: &[u8]) -> Result<Self, String> {
        let encoded = encoded.strip_suffix(&[0]).ok_or("a plan ends with a NUL")?;
        let mut args = encoded.split(|b| *b == 0).map(|arg| OsStr::from_bytes(arg).to_owned());
        let mut plan = Self::default();
        let value = |args: &mut dyn Iterator<Item = OsString>, flag: &str| {
            args.next().ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |raw: &str| raw.parse::<u32>().map_err(|_| format!("--user: {raw:?} is not a number"));
        while let Some(arg) = args.next() {
            match arg.to_str().unwrap_or_default() {
                "--cgroup" => plan.cgroups.push(value(&mut args, "--cgroup")?.into()),
                "--user" => {
                    let raw = value(&mut args, "--user")?;
                    let (uid, gid) = raw.to_str().and_then(|s| s.split_once(':')).ok_or("--user needs UID:GID")?;
                    plan.ids = Some((number(uid)?, number(gid)?));
                }
                "--namespaces" => plan.namespaces = Some(Namespaces::default()),
                "--mask" | "--private-tmp" if plan.namespaces.is_none() => {
                    return Err(format!("{} needs --namespaces before it", arg.display()));
                }
                "--mask" => {
                    let dir = value(&mut args, "--mask")?.into();
                    plan.namespaces.as_mut().expect("checked above").masked.push(dir);
                }
                "--private-tmp" => plan.namespaces.as_mut().expect("checked above").private_tmp = true,
                "--join" => {
                    let raw = value(&mut args, "--join")?;
                    let pid = raw.to_str().and_then(|pid| pid.parse().ok()).ok_or("--join needs a pid")?;
                    plan.join = Some(pid);
                }
                "--terminal" => plan.terminal = true,
                "--dir" => plan.dir = value(&mut args, "--dir")?.into(),
                "--env" => plan.env.push(value(&mut args, "--env")?),
                "--" => {
                    plan.program = args.collect();
                    if plan.program.is_empty() {
                        return Err("no program after --".into());
                    }
                    if plan.dir.as_os_str().is_empty() {
                        return Err("--dir is required".into());
                    }
                    if plan.join.is_some() && plan.namespaces.is_some() {
                        return Err("--join enters namespaces; --namespaces makes new ones: not both".into());
                    }
                    return Ok(plan);
                }
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Err("no program: expected -- PROGRAM [ARGS...]".into())
    }

    /// Confines this process (a fresh fork of the spawner, the agent's child, already in its
    /// new namespaces where the plan has them) as planned and executes the program; returns
    /// only on failure. `status` is the write end of the pipe for the program's wait status.
    fn run(self, status: OwnedFd) -> Result<Infallible, String> {
        // SAFETY (all blocks below): plain system calls on valid, NUL-terminated strings and
        // local buffers, in a process of one thread (so forking it is as safe as forking gets).
        unsafe {
            for procs in &self.cgroups {
                std::fs::write(procs, "0").map_err(|e| format!("joining {}: {e}", procs.display()))?;
            }
            if let Some(namespaces) = &self.namespaces {
                namespaces.enter(status).map_err(|e| format!("setting up the job's namespaces: {e}"))?;
                // Only the program's process, pid 2 of the namespace, comes back here.
            } else if let Some(pid) = self.join {
                join(pid, status).map_err(|e| format!("entering the namespaces of the job (pid {pid}): {e}"))?;
                // Only the program's process, in the job's namespaces, comes back here.
            } else {
                drop(status);
            }
            if self.terminal {
                check(libc::setsid())
                    .and_then(|()| check(libc::ioctl(0, libc::TIOCSCTTY, 0)))
                    .map_err(|e| format!("taking the terminal: {e}"))?;
            }
            // The job's processes are the OOM killer's first choice, before the agent's.
            let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
            if let Some((uid, gid)) = self.ids {
                check(libc::setgroups(0, std::ptr::null()))
                    .and_then(|()| check(libc::setresgid(gid, gid, gid)))
                    .and_then(|()| check(libc::setresuid(uid, uid, uid)))
                    .map_err(|e| format!("switching to uid {uid}: {e}"))?;
                if self.join.is_some() {
                    // Changing users cleared the parent-death signal: the process that waits
                    // for it takes it along when the agent ends it.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                } else if self.namespaces.is_none() {
                    // Changing users cleared the parent-death signal (in a namespace, the
                    // namespace's end takes the program instead).
                    die_with_parent();
                }
            }
            check(libc::prctl(
                libc::PR_SET_NO_NEW_PRIVS,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ))
            .map_err(|e| format!("setting no_new_privs: {e}"))?;
        }
        let (program, args) = self.program.split_first().expect("decode checks there is one");
        let env = self.env.iter().map(|var| {
            let bytes = var.as_bytes();
            let split = bytes.iter().position(|b| *b == b'=').unwrap_or(bytes.len());
            (OsStr::from_bytes(&bytes[..split]), OsStr::from_bytes(bytes.get(split + 1..).unwrap_or_default()))
        });
        // The directory is entered as the job's user: its permissions apply to the job.
        let error = std::process::Command::new(program).args(args).env_clear().envs(env).current_dir(&self.dir).exec();
        Err(format!("cannot run {} in {}: {error}", program.display(), self.dir.display()))
    }
}

impl Namespaces {
    /// Sets up the mounts of this process, pid 1 of new mount and PID namespaces, and forks
    /// the program's process. This process stays the namespace's init: it reaps orphans until
    /// the program ends, writes the program's wait status to `status` and ends, which ends
    /// everything left in the namespace. Only the program's process returns.
    ///
    /// # Safety
    /// The process must have one thread.
    unsafe fn enter(&self, status: OwnedFd) -> io::Result<()> {
        // SAFETY: see the caller.
        unsafe {
            mount(c"none", c"/", c"", libc::MS_REC | libc::MS_PRIVATE, None)?;
            // Masked dirs first: a fresh /tmp would hide those below it from the mounts.
            for dir in &self.masked {
                let dir = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
                let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                mount(c"tmpfs", &dir, c"tmpfs", flags, Some(c"mode=000"))?;
            }
            if self.private_tmp {
                for dir in [c"/tmp", c"/dev/shm"] {
                    mount(c"tmpfs", dir, c"tmpfs", libc::MS_NOSUID | libc::MS_NODEV, Some(c"mode=1777"))?;
                }
            }
            mount(c"proc", c"/proc", c"proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)?;
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    drop(status);
                    Ok(())
                }
                program => wait_for_program(program, status.as_raw_fd()),
            }
        }
    }
}

/// Enters the mount and PID namespaces of process `pid` (a running job's init) and forks the
/// program's process there (a PID namespace is entered by children only). This process, still
/// the agent's child, stays outside to wait for it and pass its wait status up. Only the
/// program's process returns; it dies with this one.
///
/// # Safety
/// The process must have one thread.
unsafe fn join(pid: u32, status: OwnedFd) -> io::Result<()> {
    // A process that ended (even one not reaped yet) has no namespaces left to enter.
    let ended = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => io::Error::other("the job's processes have ended"),
        _ => e,
    };
    let pid_namespace = std::fs::File::open(format!("/proc/{pid}/ns/pid")).map_err(ended)?;
    let mount_namespace = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).map_err(ended)?;
    // SAFETY: see the caller.
    unsafe {
        check(libc::setns(pid_namespace.as_raw_fd(), libc::CLONE_NEWPID))?;
        check(libc::setns(mount_namespace.as_raw_fd(), libc::CLONE_NEWNS))?;
        drop((pid_namespace, mount_namespace));
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                drop(status);
                Ok(())
            }
            program => wait_for_program(program, status.as_raw_fd()),
        }
    }
}

/// Runs the spawner, and never returns, when this process was started as one (its `argv[0]`
/// is [`NAME`]); returns at once otherwise.
pub fn run_if_invoked() {
    run_if_invoked_with(std::env::args_os());
}

fn run_if_invoked_with(mut args: impl Iterator<Item = OsString>) {
    if args.next().as_deref() != Some(OsStr::new(NAME)) {
        return;
    }
    // SAFETY: standard input is the socket the launcher passed; nothing else owns fd 0.
    let socket = unsafe { OwnedFd::from_raw_fd(0) };
    let parent = args
        .next()
        .zip(args.next())
        .and_then(|(flag, pid)| (flag == "--parent").then(|| pid.to_str()?.parse::<libc::pid_t>().ok()).flatten());
    let Some(parent) = parent else {
        eprintln!("{NAME}: expected --parent PID (this process is started by a landing-zone agent)");
        std::process::exit(2);
    };
    AGENT.store(parent, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: a plain system call.
    unsafe { die_with_parent() };
    serve(socket.as_fd());
}

/// Serves the launcher until it hangs up: one plan and four descriptors (stdin, stdout, stderr,
/// the status pipe) in, a pid and a pidfd (or why not) out.
fn serve(socket: BorrowedFd<'_>) -> ! {
    let mut plan = vec![0u8; MAX_PLAN];
    loop {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            socket,
            &mut [io::IoSliceMut::new(&mut plan)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        );
        let received = match received {
            Ok(msg) if msg.bytes == 0 => std::process::exit(0),
            Ok(msg) => msg,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => std::process::exit(0),
        };
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        let answer = match (<[OwnedFd; 4]>::try_from(fds), Plan::decode(&plan[..received.bytes])) {
            (Ok(fds), Ok(plan)) => spawn(plan, fds).map_err(|e| format!("starting the job's process: {e}")),
            (Err(_), _) => Err("a plan comes with stdin, stdout, stderr and a status pipe".to_owned()),
            (_, Err(e)) => Err(e),
        };
        let sent = match &answer {
            Ok((pid, pidfd)) => {
                let fds = [pidfd.as_fd()];
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
                let mut ancillary = SendAncillaryBuffer::new(&mut space);
                ancillary.push(SendAncillaryMessage::ScmRights(&fds));
                let reply = format!("ok {pid}");
                rustix::net::sendmsg(socket, &[io::IoSlice::new(reply.as_bytes())], &mut ancillary, SendFlags::empty())
            }
            Err(why) => {
                let reply = format!("error {why}");
                let mut none = SendAncillaryBuffer::default();
                rustix::net::sendmsg(socket, &[io::IoSlice::new(reply.as_bytes())], &mut none, SendFlags::empty())
            }
        };
        if sent.is_err() {
            std::process::exit(0);
        }
    }
}

/// Forks the job's process as a child of the agent (the spawner's parent), in new mount and PID
/// namespaces where the plan has them, and answers its pid and a pidfd for it. The process
/// takes its stdio, a process group of its own, and runs `plan`.
fn spawn(plan: Plan, fds: [OwnedFd; 4]) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut flags = libc::CLONE_PARENT | libc::CLONE_PIDFD;
    if plan.namespaces.is_some() {
        flags |= libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    }
    let mut pidfd: libc::c_int = -1;
    // struct clone_args of clone3(2), up to `tls` (CLONE_ARGS_SIZE_VER0). With CLONE_PARENT the
    // exit signal must be 0: the child takes the spawner's own (SIGCHLD).
    let args: [u64; 8] = [flags as u64, (&raw mut pidfd) as u64, 0, 0, 0, 0, 0, 0];
    // SAFETY: clone3 without CLONE_VM is a fork; this process has one thread, so the child may
    // run any code.
    match unsafe { libc::syscall(libc::SYS_clone3, args.as_ptr(), size_of_val(&args)) } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let error = become_job(plan, fds);
            eprintln!("{NAME}: {error}");
            // SAFETY: ends this process.
            unsafe { libc::_exit(127) }
        }
        pid => {
            // SAFETY: CLONE_PIDFD stored a new descriptor that nothing else owns.
            Ok((pid as libc::pid_t, unsafe { OwnedFd::from_raw_fd(pidfd) }))
        }
    }
}

/// The job's process, fresh from the fork: takes its stdio and runs the plan.
fn become_job(plan: Plan, [stdin, stdout, stderr, status]: [OwnedFd; 4]) -> String {
    // SAFETY: plain system calls on descriptors this process owns.
    unsafe {
        // In a new PID namespace the parent is out of sight (getppid answers 0), so whether the
        // agent is still there shows on the spawner's socket (fd 0) instead: it hangs up when
        // the agent goes.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let mut socket = libc::pollfd { fd: 0, events: libc::POLLRDHUP, revents: 0 };
        if libc::poll(&mut socket, 1, 0) < 0 || socket.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0 {
            libc::_exit(137);
        }
        let stdio = [stdin, stdout, stderr];
        for (target, fd) in stdio.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), target as libc::c_int) < 0 {
                return format!("taking stdio: {}", io::Error::last_os_error());
            }
        }
        drop(stdio);
        // The status pipe becomes fd 3 (close-on-exec or not, the program's process closes
        // it), and everything else of the spawner's goes.
        let status = if status.as_raw_fd() == STATUS_FD {
            status
        } else {
            if libc::dup2(status.as_raw_fd(), STATUS_FD) < 0 {
                return format!("taking the status pipe: {}", io::Error::last_os_error());
            }
            drop(status);
            OwnedFd::from_raw_fd(STATUS_FD)
        };
        close_all_but(STATUS_FD, true);
        // A program on a terminal takes a session of its own instead (see `Plan::run`).
        if !plan.terminal {
            libc::setpgid(0, 0);
        }
        libc::prctl(libc::PR_SET_NAME, c"mission-lz-job".as_ptr());
        plan.run(status).unwrap_err()
    }
}

/// `Err(last OS error)` when `ret` is negative.
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `mount(2)`.
unsafe fn mount(
    source: &CStr,
    target: &CStr,
    fstype: &CStr,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let fstype = if fstype.is_empty() { std::ptr::null() } else { fstype.as_ptr() };
    let data = data.map_or(std::ptr::null(), |d| d.as_ptr().cast());
    // SAFETY: valid NUL-terminated strings or null pointers, as mount(2) takes them.
    check(unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype, flags, data) })
}

/// Takes `SIGKILL` as the parent-death signal (the parent is the agent's launcher thread), and
/// ends at once if the agent is already gone: then the parent is no longer the spawner's.
unsafe fn die_with_parent() {
    // SAFETY: see the caller.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != AGENT.load(std::sync::atomic::Ordering::Relaxed) {
            libc::_exit(137);
        }
    }
}

/// The agent's pid, as the spawner was told it.
static AGENT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Where the job's process keeps the status pipe.
const STATUS_FD: libc::c_int = 3;

/// Closes every descriptor but `keep` and, with `stdio`, the standard ones (the init must not
/// hold the job's output pipes open).
unsafe fn close_all_but(keep: libc::c_int, stdio: bool) {
    let first = if stdio { 3 } else { 0 };
    // SAFETY: see the caller.
    unsafe {
        if keep > first {
            libc::syscall(libc::SYS_close_range, first as libc::c_uint, (keep - 1) as libc::c_uint, 0 as libc::c_uint);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as libc::c_uint, libc::c_uint::MAX, 0 as libc::c_uint);
    }
}

/// The namespace's init (or the process that waits outside the namespaces a shell joined):
/// reaps every process handed to it until the program ends, then passes the program's wait
/// status up and ends (which ends a namespace it is the init of) with the program's exit
/// code, or 128 + the signal that killed it (pid 1 cannot be killed by its own signal).
unsafe fn wait_for_program(program: libc::pid_t, status_out: libc::c_int) -> ! {
    // SAFETY: see the caller.
    unsafe {
        close_all_but(status_out, false);
        loop {
            let mut status = 0;
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped == program {
                libc::write(status_out, (&raw const status).cast(), size_of::<libc::c_int>());
                libc::_exit(if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                });
            }
            if reaped < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                libc::_exit(127);
            }
        }
    }
}

/// In the test binary of this crate, which has no `main` of ours, the spawner runs from the
/// start-up code instead, with the arguments the C runtime passes there.
#[cfg(test)]
#[used]
#[unsafe(link_section = ".init_array")]
static RUN_IN_TESTS: extern "C" fn(libc::c_int, *const *const libc::c_char) = {
    extern "C" fn run(argc: libc::c_int, argv: *const *const libc::c_char) {
        // SAFETY: glibc passes argc and argv to .init_array functions, as it does to main.
        let args = (0..argc.max(0) as usize)
            .map(|i| unsafe { OsStr::from_bytes(CStr::from_ptr(*argv.add(i)).to_bytes()).to_owned() });
        run_if_invoked_with(args.collect::<Vec<_>>().into_iter());
    }
    run
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_goes_through_its_encoding_unchanged() {
        let plan = Plan {
            cgroups: vec!["/sys/fs/cgroup/memory/j/cgroup.procs".into(), "/a b/cgroup.procs".into()],
            ids: Some((2_000_000_001, 2_000_000_001)),
            namespaces: Some(Namespaces { masked: vec!["/var/lib/mission".into()], private_tmp: true }),
            join: None,
            terminal: false,
            dir: "/var/tmp/work/1".into(),
            env: vec!["PATH=/bin".into(), "EMPTY=".into()],
            program: vec!["sh".into(), "run.sh".into(), "--".into(), "--user".into()],
        };
        assert_eq!(Plan::decode(&plan.encode()), Ok(plan));
        let bare = Plan { dir: "/".into(), program: vec!["true".into()], ..Plan::default() };
        assert_eq!(Plan::decode(&bare.encode()), Ok(bare));
        let shell =
            Plan { join: Some(4242), terminal: true, dir: "/".into(), program: vec!["sh".into()], ..Plan::default() };
        assert_eq!(Plan::decode(&shell.encode()), Ok(shell));
    }

    #[test]
    fn malformed_plans_are_refused() {
        let encode = |list: &[&str]| list.iter().flat_map(|a| a.bytes().chain([0])).collect::<Vec<u8>>();
        for (bad, why) in [
            (b"--dir\0/\0".to_vec(), "no program"),
            (encode(&["--dir", "/", "--"]), "no program after --"),
            (encode(&["--", "true"]), "--dir is required"),
            (encode(&["--dir", "/", "--user", "x:1", "--", "true"]), "not a number"),
            (encode(&["--dir", "/", "--user", "5", "--", "true"]), "UID:GID"),
            (encode(&["--dir", "/", "--mask", "/d", "--", "true"]), "needs --namespaces"),
            (encode(&["--dir", "/", "--bogus", "--", "true"]), "unknown argument"),
            (encode(&["--namespaces", "--join", "7", "--dir", "/", "--", "true"]), "not both"),
            (encode(&["--join", "x", "--dir", "/", "--", "true"]), "--join needs a pid"),
            (b"--dir\0/\0--\0true".to_vec(), "ends with a NUL"),
        ] {
            let error = Plan::decode(&bad).unwrap_err();
            assert!(error.contains(why), "{:?}: {error}", String::from_utf8_lossy(&bad));
        }
    }
}
