//! The agent's side of the job shell ([`mission_api::shell`]): a shell, or a command, started in
//! a running job's sandbox and spoken to over a WebSocket that comes through the session
//! tunnel.
//!
//! A runner that can start processes in its jobs says so for each job once it runs
//! ([`Shells::offer`]), and the agent forgets the job when it ends ([`Shells::forget`]), which
//! also ends the shells still open in it. The server sends a shell's WebSocket through the
//! tunnel as it sends a session's ([`mission_tunnel`]), to the authority
//! [`mission_tunnel::SHELL_AUTHORITY`] (which only the server writes: no header a client sends
//! makes a shell), with [`mission_tunnel::SHELL_HEADER`] holding the query. The agent starts the process first (so a failure is
//! an HTTP answer, not a broken WebSocket), on a pseudo-terminal or on pipes, then accepts the
//! WebSocket and relays: input and terminal sizes in, output out, and how the process ended
//! last. Closing the WebSocket kills the process; what it started in the job runs on, as it
//! would after a logout, until the job ends.

use crate::jobs::JobContext;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use mission_api::shell::{Channel, MAX_MESSAGE_BYTES, ShellExit, ShellQuery, TerminalSize};
use mission_tunnel::websocket::{self, Opcode, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::sandbox::JobProcess;

/// How long the output of a process that ended may take to drain (what it started in the
/// background may hold its terminal or pipes open for as long as the job runs).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Bytes of one read of a shell's output.
const READ_BYTES: usize = 16 * 1024;

/// Starts processes in one running job.
pub(crate) trait ShellStarter: Send + Sync + 'static {
    /// Starts `program` in the job with `stdio` as its stdin, stdout and stderr, on a terminal
    /// (its stdin) with `terminal`. Blocking.
    fn start(&self, program: Vec<OsString>, terminal: bool, stdio: [BorrowedFd<'_>; 3]) -> io::Result<ShellProcess>;
}

/// A shell's pid and the signal that ends it.
struct Ender(Option<u32>, rustix::process::Signal);

impl Ender {
    fn end(&self) {
        if let Some(pid) = self.0.and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) {
            let _ = rustix::process::kill_process(pid, self.1);
        }
    }
}

/// A shell's process, as its starter started it.
pub(crate) enum ShellProcess {
    /// Started by the agent's spawner: in a job's sandbox, or `podman exec`.
    Spawned(JobProcess),
    /// A plain child of the agent (`srun` into a batch system's job), which `SIGTERM` ends
    /// with what it started.
    Child(tokio::process::Child),
}

impl ShellProcess {
    /// What ends it: `SIGKILL` for a process in a sandbox, `SIGTERM` for `srun` (which passes
    /// it on to the job step, then leaves). Its pid stays its own until it is waited for.
    fn ender(&self) -> Ender {
        match self {
            Self::Spawned(process) => Ender(Some(process.pid), rustix::process::Signal::KILL),
            Self::Child(child) => Ender(child.id(), rustix::process::Signal::TERM),
        }
    }

    async fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        match self {
            Self::Spawned(process) => process.wait().await,
            Self::Child(child) => child.wait().await,
        }
    }
}

/// The running jobs a shell can be opened in.
#[derive(Default)]
pub(crate) struct Shells {
    jobs: Mutex<HashMap<Uuid, OpenableJob>>,
}

struct OpenableJob {
    starter: Arc<dyn ShellStarter>,
    /// Set when the job ends: its open shells end with it.
    ended: watch::Sender<bool>,
}

impl std::fmt::Debug for Shells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let jobs = self.jobs.lock().expect("not poisoned");
        f.debug_struct("Shells").field("jobs", &jobs.keys().collect::<Vec<_>>()).finish()
    }
}

impl Shells {
    /// Shells can be opened in `job_id`, which runs, with `starter`.
    pub fn offer(&self, job_id: Uuid, starter: Arc<dyn ShellStarter>) {
        let (ended, _) = watch::channel(false);
        self.jobs.lock().expect("not poisoned").insert(job_id, OpenableJob { starter, ended });
    }

    /// `job_id` ended: no shell opens in it any more, and those open end.
    pub fn forget(&self, job_id: Uuid) {
        if let Some(job) = self.jobs.lock().expect("not poisoned").remove(&job_id) {
            job.ended.send_replace(true);
        }
    }

    fn get(&self, job_id: Uuid) -> Option<(Arc<dyn ShellStarter>, watch::Receiver<bool>)> {
        let jobs = self.jobs.lock().expect("not poisoned");
        jobs.get(&job_id).map(|job| (job.starter.clone(), job.ended.subscribe()))
    }
}

/// A shell's WebSocket from the tunnel: starts its process and relays it; an HTTP refusal when
/// it cannot.
pub(crate) async fn open(ctx: &JobContext, request: Request<mission_tunnel::Body>) -> Response<mission_tunnel::Body> {
    match start(ctx, request).await {
        Ok(response) => response,
        Err((status, why)) => crate::sessions::answer(status, &why),
    }
}

async fn start(
    ctx: &JobContext,
    request: Request<mission_tunnel::Body>,
) -> Result<Response<mission_tunnel::Body>, (StatusCode, String)> {
    let bad = |why: &str| (StatusCode::BAD_REQUEST, why.to_owned());
    let (parts, from_client) = request.into_parts();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let job_id = header(mission_tunnel::SESSION_HEADER).and_then(|id| Uuid::parse_str(&id).ok());
    let job_id = job_id.ok_or_else(|| bad("no job named"))?;
    let query: ShellQuery = serde_urlencoded::from_str(&header(mission_tunnel::SHELL_HEADER).unwrap_or_default())
        .map_err(|e| bad(&format!("the shell's query: {e}")))?;
    query.check().map_err(|e| bad(&e))?;
    let key = header("sec-websocket-key").ok_or_else(|| bad("a WebSocket handshake needs Sec-WebSocket-Key"))?;
    let Some((starter, mut ended)) = ctx.shells.get(job_id) else {
        let why = if ctx.book.runs(job_id) {
            "no shell opens in this job yet: it has not started running (a batch system's job waits in its \
             queue until it does)"
        } else {
            "the job does not run on this landing zone (any more)"
        };
        return Err((StatusCode::CONFLICT, why.into()));
    };

    let terminal = query.tty();
    let program: Vec<OsString> = match &query.command {
        Some(command) => ["sh", "-c", command.as_str()].map(OsString::from).to_vec(),
        // bash where the job's host (or image) has it, else sh; a login shell either way.
        None => ["sh", "-c", "command -v bash >/dev/null && exec bash -l || exec sh -l"].map(OsString::from).to_vec(),
    };
    let io = if terminal { ShellIo::terminal(query.size()) } else { ShellIo::pipes() };
    let (ours, theirs) =
        io.map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("making the shell's stdio: {e}")))?;
    let process = tokio::task::spawn_blocking(move || {
        let [stdin, stdout, stderr] = &theirs;
        starter.start(program, terminal, [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()])
    })
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| (StatusCode::CONFLICT, format!("the shell could not start in the job: {e}")))?;

    let accept = HeaderValue::from_str(&websocket::accept_key(&key)).expect("base64 is a header value");
    let (to_server, body) = mission_tunnel::channel_body();
    let (near, far) = tokio::io::duplex(64 * 1024);
    tokio::spawn(mission_tunnel::splice(near, from_client, to_server));
    tokio::spawn(async move {
        let (reader, writer) = websocket::split(far, Role::Server, MAX_MESSAGE_BYTES);
        relay(process, ours, reader, writer, &mut ended).await;
    });
    let mut response = Response::new(body);
    response.headers_mut().insert("sec-websocket-accept", accept);
    response.headers_mut().insert(mission_tunnel::UPGRADED_HEADER, HeaderValue::from_static("1"));
    Ok(response)
}

/// The agent's ends of a shell's stdio: its input, its outputs, and the terminal's master
/// (for its size) where it runs on one.
struct ShellIo {
    stdin: pipe::Sender,
    outputs: Vec<(Channel, pipe::Receiver)>,
    terminal: Option<OwnedFd>,
}

impl ShellIo {
    /// A pseudo-terminal of `size`: ours (the master), and the process's stdio (its end).
    fn terminal(size: TerminalSize) -> io::Result<(Self, [OwnedFd; 3])> {
        use rustix::pty::OpenptFlags;
        let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let end = rustix::pty::ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
        resize(&master, size)?;
        // Not a pipe, but read and written the same way once it does not block.
        rustix::io::ioctl_fionbio(&master, true)?;
        let stdin = pipe::Sender::from_owned_fd_unchecked(master.try_clone()?)?;
        let output = pipe::Receiver::from_owned_fd_unchecked(master.try_clone()?)?;
        let stdio = [end.try_clone()?, end.try_clone()?, end];
        Ok((Self { stdin, outputs: vec![(Channel::Stdout, output)], terminal: Some(master) }, stdio))
    }

    /// Three pipes: ours, and the process's stdio.
    fn pipes() -> io::Result<(Self, [OwnedFd; 3])> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC;
        let (stdin_r, stdin_w) = rustix::pipe::pipe_with(flags)?;
        let (stdout_r, stdout_w) = rustix::pipe::pipe_with(flags)?;
        let (stderr_r, stderr_w) = rustix::pipe::pipe_with(flags)?;
        let outputs = vec![
            (Channel::Stdout, pipe::Receiver::from_owned_fd(stdout_r)?),
            (Channel::Stderr, pipe::Receiver::from_owned_fd(stderr_r)?),
        ];
        let ours = Self { stdin: pipe::Sender::from_owned_fd(stdin_w)?, outputs, terminal: None };
        Ok((ours, [stdin_r, stdout_w, stderr_w]))
    }
}

fn resize(master: impl AsFd, size: TerminalSize) -> io::Result<()> {
    let size = rustix::termios::Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    Ok(rustix::termios::tcsetwinsize(master, size)?)
}

/// Reads what is there, waiting for it; 0 at the end (a terminal whose other end closed
/// answers `EIO`: an end too).
async fn read(output: &mut pipe::Receiver, buffer: &mut [u8]) -> io::Result<usize> {
    match output.read(buffer).await {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => Ok(0),
        other => other,
    }
}

/// Relays between the WebSocket and the process until the process ends (then its output, and
/// how it ended), the client goes, or the job ends (both kill the process).
async fn relay<R, W>(
    mut process: ShellProcess,
    io: ShellIo,
    mut from_client: websocket::Reader<R>,
    mut to_client: websocket::Writer<W>,
    ended: &mut watch::Receiver<bool>,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Everything to the client goes through one writer task, in order; the channel's bound
    // makes a slow client slow the output readers down.
    let (out, mut outgoing) = mpsc::channel::<(Opcode, Vec<u8>)>(8);
    let writer = tokio::spawn(async move {
        while let Some((opcode, payload)) = outgoing.recv().await {
            let sent = match opcode {
                Opcode::Close => to_client.close(websocket::CLOSE_NORMAL, "").await,
                _ => to_client.send(opcode, &payload).await,
            };
            if sent.is_err() {
                break;
            }
        }
    });
    let ShellIo { stdin, outputs, terminal } = io;
    let mut readers: Vec<_> = outputs
        .into_iter()
        .map(|(channel, mut output)| {
            let out = out.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; READ_BYTES];
                while let Ok(n @ 1..) = read(&mut output, &mut buffer).await {
                    if out.send((Opcode::Binary, channel.message(&buffer[..n]))).await.is_err() {
                        break;
                    }
                }
            })
        })
        .collect();

    let mut stdin = Some(stdin);
    let ender = process.ender();
    let kill = || ender.end();
    let waited = process.wait();
    tokio::pin!(waited);
    let mut error = None;
    let status = loop {
        tokio::select! {
            status = &mut waited => break status,
            () = async { drop(ended.wait_for(|ended| *ended).await) }, if error.is_none() => {
                error = Some("the job ended".to_owned());
                kill();
            }
            message = from_client.receive() => match message {
                Ok(Some(message)) => match message.opcode {
                    Opcode::Binary => match Channel::of(&message.payload) {
                        // An empty input ends a command's input (a terminal's ends with ^D).
                        Some((Channel::Stdin, [])) if terminal.is_none() => stdin = None,
                        // A process that does not read its input holds the client back.
                        Some((Channel::Stdin, bytes)) => {
                            if let Some(input) = &mut stdin {
                                let _ = input.write_all(bytes).await;
                            }
                        }
                        Some((Channel::Resize, size)) => {
                            if let (Some(master), Ok(size)) = (&terminal, serde_json::from_slice::<TerminalSize>(size))
                                && size.check().is_ok()
                            {
                                let _ = resize(master, size);
                            }
                        }
                        _ => {}
                    },
                    Opcode::Ping => {
                        let _ = out.send((Opcode::Pong, message.payload)).await;
                    }
                    Opcode::Close => kill(),
                    _ => {}
                },
                // The client went (or broke the protocol): the shell goes too.
                Ok(None) | Err(_) => {
                    kill();
                    let status = (&mut waited).await;
                    drop(out);
                    for reader in readers {
                        reader.abort();
                    }
                    let _ = writer.await;
                    tracing::debug!(?status, "a shell ended with its client");
                    return;
                }
            },
        }
    };
    drop(stdin);
    // What it wrote last, then how it ended.
    let drained = async {
        for reader in &mut readers {
            let _ = reader.await;
        }
    };
    let _ = tokio::time::timeout(DRAIN_LIMIT, drained).await;
    for reader in readers {
        reader.abort();
    }
    let exit = match status {
        Ok(status) => ShellExit {
            exit_code: status
                .code()
                .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s)),
            error,
        },
        Err(e) => ShellExit { exit_code: None, error: Some(format!("waiting for the shell: {e}")) },
    };
    let exit = serde_json::to_vec(&exit).expect("serializable");
    let _ = out.send((Opcode::Binary, Channel::Exit.message(&exit))).await;
    let _ = out.send((Opcode::Close, Vec::new())).await;
    drop(out);
    let _ = writer.await;
}
