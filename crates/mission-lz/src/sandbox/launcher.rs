//! The agent's side of starting jobs: it keeps a [spawner](super::spawner) process running and
//! asks it for each job's process, which is then the agent's own child, watched through a pidfd.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
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
        Ok(Self { orders, spawner: Mutex::new(None) })
    }

    /// Starts a job's process as `plan` says, with stdin from `/dev/null` and stdout and stderr
    /// piped. Blocking.
    pub(crate) fn start_job(&self, plan: &Plan) -> io::Result<JobProcess> {
        let encoded = plan.encode();
        if encoded.len() > spawner::MAX_PLAN {
            return Err(io::Error::other(format!(
                "the job's command and environment exceed {} KiB",
                spawner::MAX_PLAN / 1024
            )));
        }
        let stdin = std::fs::File::open("/dev/null")?;
        let (stdout, stdout_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (stderr, stderr_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (status, status_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK)?;
        let fds = [stdin.as_fd(), stdout_w.as_fd(), stderr_w.as_fd(), status_w.as_fd()];
        let mut spawner = self.spawner.lock().expect("not poisoned");
        // A spawner that died (killed by hand, say) is replaced once.
        for attempt in 0.. {
            let socket = match spawner.take() {
                Some(socket) => socket,
                None => self.new_spawner()?,
            };
            match exchange(&socket, &encoded, &fds) {
                Ok(Ok((pid, pidfd))) => {
                    *spawner = Some(socket);
                    return Ok(JobProcess { pid, pidfd, stdout: Some(stdout), stderr: Some(stderr), status });
                }
                Ok(Err(refusal)) => {
                    *spawner = Some(socket);
                    return Err(io::Error::other(refusal));
                }
                Err(e) if attempt > 0 => return Err(io::Error::other(format!("the job spawner is gone: {e}"))),
                Err(_) => {}
            }
        }
        unreachable!("the loop returns by its second round")
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

/// Sends one plan with its stdio and status pipe and reads the answer: the pid and pidfd, or the spawner's
/// refusal. `Err` when the spawner is gone.
fn exchange(
    socket: &OwnedFd,
    plan: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>; 4],
) -> io::Result<Result<(u32, OwnedFd), String>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    ancillary.push(SendAncillaryMessage::ScmRights(fds));
    rustix::net::sendmsg(socket, &[io::IoSlice::new(plan)], &mut ancillary, SendFlags::NOSIGNAL)?;
    let mut reply = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [io::IoSliceMut::new(&mut reply)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        ) {
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
    Ok(match (reply.strip_prefix("ok "), pidfd) {
        (Some(pid), Some(pidfd)) => {
            Ok((pid.parse().map_err(|_| io::Error::other(format!("the spawner answered {reply:?}")))?, pidfd))
        }
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
