//! `mission jobs shell`: a shell, or a command, inside a running job, over the service.

use std::io::{IsTerminal, Write};

use mission_api::shell::{ShellQuery, TerminalSize};
use mission_client::{Client, ShellEvent, ShellInput, ShellOutput};
use tokio::io::AsyncReadExt;
use uuid::Uuid;

/// What `mission jobs shell` was asked.
#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// Job id (a running job of yours).
    job: Uuid,
    /// Run on a terminal even for a command (for programs that want one: top, vim).
    #[arg(long, short = 't', conflicts_with = "no_tty")]
    tty: bool,
    /// No terminal even for an interactive shell: input and output stay apart, as pipes.
    #[arg(long, short = 'T')]
    no_tty: bool,
    /// Of a job on several landing zones (`run --nodes`): the node to open it on, by rank.
    #[arg(long, value_name = "RANK")]
    node: Option<u32>,
    /// A command to run instead of a shell: its words joined with spaces and run by `sh -c`
    /// in the job's work dir, as ssh does.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the shell to its end; answers its exit code (255 when the connection was lost).
pub async fn run(client: &Client, args: ShellArgs) -> anyhow::Result<i32> {
    let command = (!args.command.is_empty()).then(|| args.command.join(" "));
    let tty = match (args.tty, args.no_tty) {
        (true, _) => true,
        (_, true) => false,
        _ => command.is_none() && std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
    };
    let size = tty.then(terminal_size).flatten();
    let (cols, rows) = (size.map(|s| s.cols), size.map(|s| s.rows));
    let query = ShellQuery { command, tty: Some(tty), cols, rows, node: args.node };
    let (input, output) = client.open_shell(args.job, &query).await?;
    Ok(relay(input, output, tty).await)
}

/// `mission lz-exec HOST COMMAND…`: runs COMMAND on the node HOST of the gang this runs in,
/// through this node's agent (see `mission_lz::gang`); answers its exit code (255 when it could
/// not run to its end, as ssh's).
pub async fn lz_exec(host: &str, command: Vec<String>) -> anyhow::Result<i32> {
    let socket = std::env::var_os(mission_lz::gang::EXEC_SOCKET_VARIABLE).ok_or_else(|| {
        anyhow::anyhow!(
            "not inside a job on several landing zones ({} is not set)",
            mission_lz::gang::EXEC_SOCKET_VARIABLE
        )
    })?;
    let hosts = std::env::var("MISSION_HOSTS").unwrap_or_default();
    let node = hosts
        .split(',')
        .position(|known| known == host)
        .ok_or_else(|| anyhow::anyhow!("{host} is not a node of this job (its nodes: {hosts})"))?;
    let stream = mission_lz::gang::request_exec(std::path::Path::new(&socket), node as u32, command.join(" "))
        .await
        .map_err(|e| anyhow::anyhow!("{host}: {e}"))?;
    let (input, output) = mission_client::shell_over(stream);
    Ok(relay(input, output, false).await)
}

/// Joins a shell to this process's stdin, stdout and stderr until it ends; answers its exit
/// code (255 when the connection was lost).
pub(crate) async fn relay(input: ShellInput, mut output: ShellOutput, tty: bool) -> i32 {
    // Keys go to the remote terminal as they are typed (^C included), until the guard goes.
    let raw = if tty && std::io::stdin().is_terminal() { RawMode::enter() } else { None };
    tokio::spawn(send_input(input, tty));

    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    loop {
        match output.next().await {
            Ok(Some(ShellEvent::Stdout(bytes))) => {
                let _ = stdout.write_all(&bytes).and_then(|()| stdout.flush());
            }
            Ok(Some(ShellEvent::Stderr(bytes))) => {
                let _ = stderr.write_all(&bytes).and_then(|()| stderr.flush());
            }
            Ok(Some(ShellEvent::Exit(exit))) => {
                drop(raw);
                if let Some(error) = exit.error {
                    eprintln!("mission: {error}");
                }
                break exit.exit_code.unwrap_or(255);
            }
            Ok(None) => {
                drop(raw);
                eprintln!("mission: the connection to the shell closed before it ended");
                break 255;
            }
            Err(e) => {
                drop(raw);
                eprintln!("mission: {e}");
                break 255;
            }
        }
    }
}

/// Sends what comes on stdin, and on a terminal its new sizes; ends a command's input at the
/// end of stdin.
async fn send_input(mut input: ShellInput, tty: bool) {
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    loop {
        tokio::select! {
            read = stdin.read(&mut buffer) => match read {
                Ok(0) | Err(_) => {
                    if !tty {
                        let _ = input.close().await;
                    }
                    // The output goes on; new sizes still come.
                    loop {
                        match &mut resized {
                            Some(signal) if tty => {
                                signal.recv().await;
                                if let Some(size) = terminal_size() {
                                    let _ = input.resize(size).await;
                                }
                            }
                            _ => std::future::pending::<()>().await,
                        }
                    }
                }
                Ok(n) => {
                    if input.write(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
            },
            Some(()) = async { match &mut resized { Some(signal) if tty => signal.recv().await, _ => None } } => {
                if let Some(size) = terminal_size() {
                    let _ = input.resize(size).await;
                }
            }
        }
    }
}

/// The size of the terminal on stdout, if it is one.
fn terminal_size() -> Option<TerminalSize> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    let size = TerminalSize { cols: size.ws_col, rows: size.ws_row };
    size.check().is_ok().then_some(size)
}

/// The terminal on stdin in raw mode, restored when dropped.
struct RawMode(rustix::termios::Termios);

impl RawMode {
    fn enter() -> Option<Self> {
        let saved = rustix::termios::tcgetattr(std::io::stdin()).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(Self(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &self.0);
    }
}
