//! The job shell ([`mission_api::shell`]): a shell, or a command, in a running job of yours,
//! over a WebSocket through the service.

use mission_api::shell::{Channel, MAX_MESSAGE_BYTES, ShellExit, ShellQuery, TerminalSize};
use mission_tunnel::websocket::{self, Opcode, Role};
use reqwest::StatusCode;
use uuid::Uuid;

use crate::client::{Client, check};
use crate::error::Error;

/// A connection a shell's WebSocket runs over: the service's upgraded HTTP connection, or (for
/// `mission lz-exec`) a landing zone agent's socket that leads to it.
pub trait ShellTransport: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> ShellTransport for T {}

type Transport = Box<dyn ShellTransport>;

/// What a shell sends: input, the end of input, and its terminal's size.
pub struct ShellInput(websocket::Writer<tokio::io::WriteHalf<Transport>>);

/// What a shell answers, message by message.
pub struct ShellOutput(websocket::Reader<tokio::io::ReadHalf<Transport>>);

impl std::fmt::Debug for ShellInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShellInput")
    }
}

impl std::fmt::Debug for ShellOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShellOutput")
    }
}

/// The two sides of a shell whose WebSocket (past its handshake) runs over `transport`, as the
/// client's.
pub fn shell_over(transport: impl ShellTransport) -> (ShellInput, ShellOutput) {
    let transport: Transport = Box::new(transport);
    let (reader, writer) = websocket::split(transport, Role::Client, MAX_MESSAGE_BYTES);
    (ShellInput(writer), ShellOutput(reader))
}

/// One message from a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellEvent {
    /// Bytes of its output (all of it, on a terminal).
    Stdout(Vec<u8>),
    /// Bytes of its error output.
    Stderr(Vec<u8>),
    /// How it ended: the last message.
    Exit(ShellExit),
}

impl Client {
    /// Opens a shell (or runs `query.command`) in `job_id`, a running job of the caller's, as
    /// its user in its sandbox. The server records each opening (a `shell.opened` event and an
    /// audit entry).
    pub async fn open_shell(&self, job_id: Uuid, query: &ShellQuery) -> Result<(ShellInput, ShellOutput), Error> {
        let key = websocket::new_key();
        let response = self
            .send_once(&format!("/jobs/{job_id}/shell"), |http, url| {
                http.get(url)
                    .query(query)
                    .header("Connection", "Upgrade")
                    .header("Upgrade", "websocket")
                    .header("Sec-WebSocket-Version", "13")
                    .header("Sec-WebSocket-Key", &key)
            })
            .await?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            check(response).await?;
            return Err(Error::Protocol("the service did not open a WebSocket to the shell".into()));
        }
        let accept = response.headers().get("sec-websocket-accept").and_then(|v| v.to_str().ok());
        if accept != Some(websocket::accept_key(&key).as_str()) {
            return Err(Error::Protocol("the shell's WebSocket handshake answered the wrong key".into()));
        }
        Ok(shell_over(response.upgrade().await?))
    }
}

/// What [`Client::run_in_job`] collected of a command's run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShellRun {
    /// Its exit code (128 + a signal that killed it); `None` when it could not run to its end.
    pub exit_code: Option<i32>,
    /// Its output.
    pub stdout: Vec<u8>,
    /// Its error output.
    pub stderr: Vec<u8>,
    /// Why it could not run to its end, if it could not.
    pub error: Option<String>,
}

impl Client {
    /// Runs `command` (a command line, run by `sh -c` in the job's work dir) in `job_id`, a
    /// running job of the caller's, without a terminal, with `input` on its stdin, and collects
    /// its output and exit code.
    pub async fn run_in_job(&self, job_id: Uuid, command: &str, input: &[u8]) -> Result<ShellRun, Error> {
        let query = ShellQuery { command: Some(command.to_owned()), tty: Some(false), ..ShellQuery::default() };
        let (mut to_shell, mut output) = self.open_shell(job_id, &query).await?;
        // A command that ends without reading its input leaves the rest unsent; how it ended
        // comes on the output either way.
        let feed = async move {
            for chunk in input.chunks(64 * 1024) {
                if to_shell.write(chunk).await.is_err() {
                    break;
                }
            }
            let _ = to_shell.close().await;
            // Held open until the output ends: dropping it would close the connection.
            std::future::pending::<()>().await
        };
        let collect = async {
            let mut run = ShellRun::default();
            loop {
                match output.next().await? {
                    Some(ShellEvent::Stdout(bytes)) => run.stdout.extend(bytes),
                    Some(ShellEvent::Stderr(bytes)) => run.stderr.extend(bytes),
                    Some(ShellEvent::Exit(exit)) => {
                        (run.exit_code, run.error) = (exit.exit_code, exit.error);
                        return Ok(run);
                    }
                    None => {
                        run.error = Some("the connection to the shell closed before it ended".into());
                        return Ok(run);
                    }
                }
            }
        };
        tokio::select! {
            run = collect => run,
            () = feed => unreachable!("input is held open until the output ends"),
        }
    }
}

impl ShellInput {
    /// Sends `bytes` to the shell's input.
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.0.send(Opcode::Binary, &Channel::Stdin.message(bytes)).await
    }

    /// Ends the input of a command without a terminal (as closing a pipe does).
    pub async fn close(&mut self) -> std::io::Result<()> {
        self.0.send(Opcode::Binary, &Channel::Stdin.message(&[])).await
    }

    /// Tells the shell its terminal's new size.
    pub async fn resize(&mut self, size: TerminalSize) -> std::io::Result<()> {
        let size = serde_json::to_vec(&size).expect("serializable");
        self.0.send(Opcode::Binary, &Channel::Resize.message(&size)).await
    }

    /// Ends the shell (it is killed).
    pub async fn hang_up(mut self) -> std::io::Result<()> {
        self.0.close(websocket::CLOSE_NORMAL, "").await
    }
}

impl ShellOutput {
    /// The shell's next message; `None` once it closed the connection.
    pub async fn next(&mut self) -> Result<Option<ShellEvent>, Error> {
        loop {
            let message = self.0.receive().await.map_err(|e| Error::Protocol(format!("the shell's WebSocket: {e}")))?;
            let Some(message) = message else { return Ok(None) };
            match message.opcode {
                Opcode::Close => return Ok(None),
                Opcode::Binary => match Channel::of(&message.payload) {
                    Some((Channel::Stdout, bytes)) => return Ok(Some(ShellEvent::Stdout(bytes.to_vec()))),
                    Some((Channel::Stderr, bytes)) => return Ok(Some(ShellEvent::Stderr(bytes.to_vec()))),
                    Some((Channel::Exit, exit)) => {
                        let exit = serde_json::from_slice(exit)
                            .map_err(|e| Error::Protocol(format!("the shell's exit message: {e}")))?;
                        return Ok(Some(ShellEvent::Exit(exit)));
                    }
                    _ => continue,
                },
                _ => continue,
            }
        }
    }
}
