//! The agent's side of starting jobs: it keeps a [spawner](super::spawner) process running and
//! asks it for each job's process, which is then the agent's own child, watched through a pidfd.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::sync::{Mutex, mpsc};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};
use rustix::process::{WaitId, WaitIdOptions};
use tokio::io::unix::AsyncFd;

use super::spawner::{self, Plan};

/// The executable started as the spawner: the agent's own, which calls
/// [`spawner::run_if_invoked`] first thing.
const SPAWNER_EXECUTABLE: &str = "/proc/self/exe";

/// Starts job processes through the spawner, from one thread that lives as long as the agent.
///
/// A parent-death signal fires when the *thread* that started the child ends, not the process:
/// were the spawner started from tokio's blocking pool (whose idle threads end after a few
/// seconds), it and every job (whose parent it makes the same thread) would be killed at random.
/// The launcher's thread starts it instead, and ends only when the launcher is dropped, so jobs
/// die exactly when the agent does.
#[derive(Debug)]
pub struct Launcher {
    orders: mpsc::Sender<mpsc::SyncSender<io::Result<OwnedFd>>>,
    /// The socket to the running spawner, if one runs.
    spawner: Mutex<Option<OwnedFd>>,
    /// Every job's stdin.
    dev_null: std::fs::File,
}

/// A job's process, started: the agent's child.
#[derive(Debug)]
pub struct JobProcess {
    /// Its pid, which is also its process group's.
    pub pid: u32,
    pidfd: OwnedFd,
    /// The read end of its stdout.
    pub stdout: Option<OwnedFd>,
    /// The read end of its stderr.
    pub stderr: Option<OwnedFd>,
    /// The read end of the pipe the namespace's init writes the program's wait status to.
    status: OwnedFd,
}

impl Launcher {
    /// Starts the launcher's thread; the spawner starts with the first job.
    pub fn start() -> io::Result<Self> {
        let (orders, queue) = mpsc::channel::<mpsc::SyncSender<io::Result<OwnedFd>>>();
        std::thread::Builder::new().name("mission-lz-launcher".into()).spawn(move || {
            let mut spawners: Vec<std::process::Child> = Vec::new();
            for answer in queue {
                spawners.retain_mut(|s| s.try_wait().is_ok_and(|ended| ended.is_none()));
                let _ = answer.send(start_spawner().map(|(child, socket)| {
                    spawners.push(child);
                    socket
                }));
            }
            // The agent hung up on every spawner when it dropped the launcher.
            for mut spawner in spawners {
                let _ = spawner.wait();
            }
        })?;
        Ok(Self { orders, spawner: Mutex::new(None), dev_null: std::fs::File::open("/dev/null")? })
    }

    /// Starts a job's process as `plan` says, with stdin from `/dev/null` and stdout and stderr
    /// piped. Blocking.
    pub(crate) fn start_job(&self, plan: &Plan) -> io::Result<JobProcess> {
        let (stdout, stdout_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (stderr, stderr_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut process = self.start_with(plan, [self.dev_null.as_fd(), stdout_w.as_fd(), stderr_w.as_fd()])?;
        (process.stdout, process.stderr) = (Some(stdout), Some(stderr));
        Ok(process)
    }

    /// Starts a process as `plan` says with `stdio` as its stdin, stdout and stderr. Blocking.
    pub(crate) fn start_with(&self, plan: &Plan, stdio: [BorrowedFd<'_>; 3]) -> io::Result<JobProcess> {
        let encoded = plan.encode();
        if encoded.len() > spawner::MAX_PLAN {
            return Err(io::Error::other(format!(
                "the job's command and environment exceed {} KiB",
                spawner::MAX_PLAN / 1024
            )));
        }
        let (status, status_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK)?;
        let [stdin, stdout, stderr] = stdio;
        let fds = [stdin, stdout, stderr, status_w.as_fd()];
        let mut spawner = self.spawner.lock().expect("not poisoned");
        let mut socket = match spawner.take() {
            Some(socket) => socket,
            None => self.new_spawner()?,
        };
        // A spawner that died (killed by hand, say) is replaced once, where the plan never
        // reached it: one that failed after taking it may have started the job.
        if send(&socket, &encoded, &fds).is_err() {
            socket = self.new_spawner()?;
            send(&socket, &encoded, &fds).map_err(|e| io::Error::other(format!("the job spawner is gone: {e}")))?;
        }
        let answer = receive(&socket).map_err(|e| io::Error::other(format!("the job spawner is gone: {e}")))?;
        *spawner = Some(socket);
        let (pid, pidfd) = answer.map_err(io::Error::other)?;
        Ok(JobProcess { pid, pidfd, stdout: None, stderr: None, status })
    }

    /// Has the launcher's thread start a spawner, and answers the socket to it.
    fn new_spawner(&self) -> io::Result<OwnedFd> {
        let (answer, answered) = mpsc::sync_channel(1);
        let gone = || io::Error::other("the launcher has ended");
        self.orders.send(answer).map_err(|_| gone())?;
        answered.recv().map_err(|_| gone())?
    }
}

/// Starts a spawner with one end of a new socket pair as its stdin; answers it and the other end.
fn start_spawner() -> io::Result<(std::process::Child, OwnedFd)> {
    let (ours, theirs) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    // No pre_exec hook and no change of user: std uses posix_spawn, which copies nothing.
    let child = std::process::Command::new(SPAWNER_EXECUTABLE)
        .arg0(spawner::NAME)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .env_clear()
        .current_dir("/")
        .stdin(theirs)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    Ok((child, ours))
}

/// Sends one plan with the job's stdio and status pipe to the spawner.
fn send(socket: &OwnedFd, plan: &[u8], fds: &[std::os::fd::BorrowedFd<'_>; 4]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    ancillary.push(SendAncillaryMessage::ScmRights(fds));
    rustix::net::sendmsg(socket, &[io::IoSlice::new(plan)], &mut ancillary, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Reads the spawner's answer to a plan: the job's pid and pidfd, or why it could not start it.
fn receive(socket: &OwnedFd) -> io::Result<Result<(u32, OwnedFd), String>> {
    let mut reply = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = loop {
        let buffers = &mut [io::IoSliceMut::new(&mut reply)];
        match rustix::net::recvmsg(socket, buffers, &mut ancillary, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if received.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let pidfd = ancillary.drain().find_map(|message| match message {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    let reply = String::from_utf8_lossy(&reply[..received.bytes]);
    Ok(match (reply.strip_prefix("ok ").and_then(|pid| pid.parse().ok()), pidfd) {
        (Some(pid), Some(pidfd)) => Ok((pid, pidfd)),
        _ => Err(reply.strip_prefix("error ").unwrap_or(&reply).to_owned()),
    })
}

impl JobProcess {
    /// Waits for the process to end and reaps it.
    #[allow(unsafe_code)]
    pub async fn wait(&self) -> io::Result<ExitStatus> {
        // SAFETY: the AsyncFd owns the descriptor (an OwnedFd), which stays open and the same
        // until the AsyncFd is dropped.
        let watched =
            unsafe { AsyncFd::register_with_interest(self.pidfd.try_clone()?, tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)?;
        loop {
            let mut ready = watched.readable().await?;
            if let Some(status) = self.reap(WaitIdOptions::NOHANG)? {
                return Ok(status);
            }
            ready.clear_ready();
        }
    }

    /// Waits for the process to end and reaps it. Blocking.
    pub fn wait_blocking(&self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.reap(WaitIdOptions::empty())? {
                return Ok(status);
            }
        }
    }

    fn reap(&self, options: WaitIdOptions) -> io::Result<Option<ExitStatus>> {
        let status = match rustix::process::waitid(WaitId::PidFd(self.pidfd.as_fd()), WaitIdOptions::EXITED | options) {
            Err(rustix::io::Errno::INTR) => return Ok(None),
            other => other?,
        };
        let Some(own) = status else { return Ok(None) };
        // The program's status where a namespace's init passed it on; the process's own
        // otherwise.
        let mut program = [0u8; 4];
        if rustix::io::read(&self.status, &mut program).is_ok_and(|n| n == program.len()) {
            return Ok(Some(ExitStatus::from_raw(i32::from_ne_bytes(program))));
        }
        // As wait(2) encodes it: the exit code in the second byte, or the signal in the first.
        Ok(Some(match (own.exit_status(), own.terminating_signal()) {
            (Some(code), _) => ExitStatus::from_raw((code & 0xff) << 8),
            (None, Some(signal)) => ExitStatus::from_raw(signal & 0x7f),
            (None, None) => ExitStatus::from_raw(127 << 8),
        }))
    }
}
