//! `mission`: the one binary of Mission Compute Service — the server (`mission server`) and the
//! landing-zone agent (`mission lz`) and the command-line client over the Rust SDK (`login`,
//! `missions`, `run`, `jobs`, …).

// Doc comments here are clap help texts, where bare URLs read best.
#![allow(rustdoc::bare_urls)]

mod commands;
mod config_file;
mod manual;
mod output;
mod progress;
mod session;
mod slurm;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use commands::auth::LoginCommand;
use commands::cargo_bays::CargoBaysCommand;
use commands::files::FilesCommand;
use commands::images::ImagesCommand;
use commands::jobs::{JobsCommand, RunCommand};
use commands::lz::LzCommand;
use commands::missions::MissionsCommand;
use commands::projects::ProjectsCommand;
use commands::server::ServerCommand;
use commands::stations::StationsCommand;
use commands::types::TypesCommand;
use commands::webhooks::WebhooksCommand;
use output::Output;

/// Mission Compute Service: put input files and settings into missions and run them as jobs.
///
/// Start a server with `mission server`, sign in with `mission login --server URL`, then manage
/// missions with `mission missions …`, their files with `mission files …` and the storage they
/// live in with `mission cargo-bays …`; run them with `mission run MISSION --follow` and watch
/// jobs with `mission jobs …`. Compute hosts join with `mission lz`.
#[derive(Debug, Parser)]
#[command(name = "mission", version, propagate_version = true)]
struct Cli {
    /// Server URL (default: the one remembered by `mission login`). A service run as several
    /// replicas may be named by all their URLs, comma-separated: requests that cannot connect to
    /// one go to the next.
    #[arg(long, global = true, env = "MISSION_SERVER")]
    server: Option<String>,
    /// Print JSON instead of tables, for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Write log lines as text, or as JSON objects, one per line, for log shippers (each
    /// request's lines carry its request id, as the X-Request-Id header of its answer does).
    #[arg(long, global = true, env = "MISSION_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// What `mission slurm-commands` does.
#[derive(Debug, Subcommand)]
enum SlurmCommandsCommand {
    /// Link each Slurm command to this executable in DIR (put DIR on your PATH).
    Install {
        /// The directory (made if missing).
        dir: std::path::PathBuf,
        /// Replace files of those names already there.
        #[arg(long)]
        force: bool,
        /// What the links point to, as written (default: this executable's absolute path):
        /// `../mission` makes links that move with the folder they are in.
        #[arg(long, value_name = "PATH")]
        link_to: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    Server(Box<ServerCommand>),
    Lz(LzCommand),
    /// Sign in with the OAuth device flow.
    Login(LoginCommand),
    /// Sign out and revoke the stored token.
    Logout,
    /// Show who you are signed in as.
    Whoami,
    /// Print a fresh access token for clients that take a bearer token (GA4GH TES engines such
    /// as Snakemake's TES executor, curl). It lasts the server's access-token lifetime (an hour
    /// by default); `--json` adds when it expires.
    Token,
    /// Manage missions.
    #[command(subcommand)]
    Missions(MissionsCommand),
    /// Upload, list, download and delete mission files.
    #[command(subcommand)]
    Files(FilesCommand),
    /// Manage cargo bays (S3 buckets and server directories for mission files).
    #[command(subcommand)]
    CargoBays(CargoBaysCommand),
    /// Run a mission as a job.
    Run(RunCommand),
    /// Inspect, follow, stop and download jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Manage stations, their members and landing zones.
    #[command(subcommand)]
    Stations(StationsCommand),
    /// Manage projects (the teams missions belong to and jobs are charged to) and their members.
    #[command(subcommand)]
    Projects(ProjectsCommand),
    /// Show who changed what (admins; a project's managers for its resources).
    Audit(commands::audit::AuditArgs),
    /// Browse mission types.
    #[command(subcommand)]
    Types(TypesCommand),
    /// Have your events POSTed to a URL as they happen, signed.
    ///
    /// Each delivery is an event (a job's transition, a mission or its files changed) as JSON,
    /// with the headers `Mission-Webhook-Id` (the same on every attempt: drop repeats by it),
    /// `Mission-Webhook-Timestamp` and `Mission-Webhook-Signature: v1=HEX`, the HMAC-SHA256
    /// under the webhook's secret of `TIMESTAMP.BODY`. A receiver answers 2xx; anything else is
    /// tried again later, each wait twice the last, until the server's attempts run out.
    ///
    ///   mission webhooks create https://hooks.example.org/jobs --kind job.completed --kind job.failed
    ///   mission webhooks deliveries WEBHOOK --status failed
    #[command(subcommand, verbatim_doc_comment)]
    Webhooks(WebhooksCommand),
    /// Import and manage container images that missions' jobs run in.
    ///
    /// An image is an OCI or docker archive, as `podman save` or `docker save` writes it. A
    /// mission names one (`mission missions create --image NAME`) or a run does
    /// (`mission run MISSION --image NAME`); its jobs then run in it on landing zones that take
    /// images (`mission stations lzs` says which).
    ///
    ///   podman save --format oci-archive -o solver.tar localhost/solver:2.1
    ///   mission images import solver.tar --name solver:2.1
    ///   mission run MISSION --image solver:2.1 --follow
    #[command(subcommand, verbatim_doc_comment)]
    Images(ImagesCommand),
    /// Slurm's commands (sbatch, srun, squeue, sacct, scancel, scontrol, sinfo, sacctmgr) spoken here.
    ///
    /// Invoked under one of those names, `mission` reads that command's options and prints what
    /// it prints, as your saved `mission login` session: workflow tools that run jobs through
    /// Slurm's commands run them on this service unchanged. Batch jobs run in the directory they
    /// were submitted from, as your own account, on landing zones that share it.
    ///
    ///   mission slurm-commands install ~/.local/bin
    ///   sbatch --wrap 'hostname' && squeue --me
    #[command(subcommand, verbatim_doc_comment)]
    SlurmCommands(SlurmCommandsCommand),
    /// Joins stdin and stdout to a port of this host's loopback: how a Slurm landing zone's
    /// agent reaches a session's app on a node (it runs this with `srun`). Not for people.
    #[command(hide = true)]
    LzRelay {
        /// The port.
        port: u16,
        /// Only say whether the port answers (exit 0) or not (exit 1).
        #[arg(long)]
        probe: bool,
    },
    /// Run a command on another node of this job, as ssh would (for MPI launchers)
    ///
    /// In a job on several landing zones (`mission run --nodes N`), the command's words are
    /// joined with spaces and run by `sh -c` in that node's part of the job (its user, sandbox,
    /// cgroup and work dir), its output and exit code coming back. For MPI launchers, instead
    /// of ssh between hosts:
    ///
    ///   mpirun --mca plm_rsh_agent "mission lz-exec" --hostfile "$MISSION_HOSTFILE" ./app
    ///   mpiexec -launcher rsh -launcher-exec "mission lz-exec" -f "$MISSION_HOSTFILE" ./app
    ///
    /// HOST is a node's address as MISSION_HOSTS lists it. It works only inside such a job.
    #[command(verbatim_doc_comment)]
    LzExec {
        /// The node, by its address in MISSION_HOSTS.
        host: String,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Print shell completions for `mission` to standard output.
    ///
    ///   mission completions bash > /etc/bash_completion.d/mission
    ///   mission completions zsh > ~/.zfunc/_mission
    ///   mission completions fish > ~/.config/fish/completions/mission.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages of `mission` and of each of its commands into a folder.
    ///
    /// One page per command, named as `man` finds them (mission.1, mission-jobs-list.1, …):
    ///
    ///   mission man-pages /usr/local/share/man/man1
    ///   mission man-pages ./man/man1 && man -M ./man mission-run
    #[command(verbatim_doc_comment)]
    ManPages {
        /// The folder (made if missing).
        dir: std::path::PathBuf,
    },
    /// Print the guide's command-line reference (Markdown): every command's `--help`.
    #[command(hide = true)]
    CliReference,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// `TIME LEVEL target: message fields`, in colour on a terminal only.
    Text,
    /// `{"timestamp":…,"level":…,"fields":{"message":…},"target":…,"span":…,"spans":[…]}`.
    Json,
}

fn init_logging(server: bool, format: LogFormat) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = if server { LevelFilter::INFO } else { LevelFilter::WARN };
    let filter = std::env::var("MISSION_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(default));
    // Colour only on a terminal: a log file or journal gets plain text (`grep ' ERROR '` works).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.with_ansi(ansi).boxed(),
        LogFormat::Json => layer.json().with_current_span(true).with_span_list(false).boxed(),
    };
    tracing_subscriber::registry().with(layer).with(filter).init();
}

/// This `mission`'s version.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Tells the user, once for each server version, that the server is newer than this `mission`
/// (a newer minor or major version: its new features are missing here).
fn warn_once_if_the_server_is_newer() {
    use mission_api::versions::parse;
    let Some(server) = mission_client::version::server_version_seen() else { return };
    let (Some(theirs), Some(ours)) = (parse(&server), parse(VERSION)) else { return };
    if (theirs.0, theirs.1) <= (ours.0, ours.1) {
        return;
    }
    let Ok(mut config) = session::load_config() else { return };
    if config.warned_server_version.as_deref() == Some(server.as_str()) {
        return;
    }
    eprintln!(
        "warning: the server runs Mission Compute Service {server}, newer than this mission ({VERSION}): \
         what it added is missing here; upgrade mission (said once for this version)"
    );
    config.warned_server_version = Some(server);
    let _ = session::save_config(&config);
}

fn main() -> ExitCode {
    // A landing zone starts each job through this same executable under another name.
    mission_lz::sandbox::spawner::run_if_invoked();
    // Invoked as `sbatch`, `squeue`, …: a Slurm command, read as Slurm reads it.
    if let Some(command) = slurm::invoked_as() {
        return slurm::main(command);
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime").block_on(run())
}

async fn run() -> ExitCode {
    mission_client::version::identify_as("mission-cli", VERSION);
    // Built once: the config file's keys and `--print-config` read its subcommands' arguments.
    let mut command = Cli::command();
    command.build();
    let applied = match config_file::apply(&command, std::env::args_os().collect()) {
        Ok(applied) => applied,
        Err(why) => {
            eprintln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    let matches = command.try_get_matches_from_mut(&applied.argv).unwrap_or_else(|e| e.exit());
    if let Some(printed) = config_file::print_config_requested(&command, &matches, &applied) {
        print!("{printed}");
        return ExitCode::SUCCESS;
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let daemon = matches!(cli.command, Command::Server(_) | Command::Lz(_));
    if daemon {
        // What the server and agent write is theirs alone, whatever umask they were started with
        // (their own code sets private modes; this covers what libraries create).
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    }
    init_logging(daemon, cli.log_format);
    let out = Output { json: cli.json };
    let server = cli.server.as_deref();
    let result = match cli.command {
        Command::Server(cmd) => cmd.run().await,
        Command::Lz(cmd) => cmd.run(server).await,
        Command::Login(cmd) => cmd.run(server, out).await,
        Command::Logout => commands::auth::logout(server, out).await,
        Command::Whoami => commands::auth::whoami(server, out).await,
        Command::Token => commands::auth::token(server, out).await,
        Command::Missions(cmd) => cmd.run(server, out).await,
        Command::Files(cmd) => cmd.run(server, out).await,
        Command::CargoBays(cmd) => cmd.run(server, out).await,
        Command::Run(cmd) => cmd.run(server, out).await,
        Command::Jobs(cmd) => cmd.run(server, out).await,
        Command::Stations(cmd) => cmd.run(server, out).await,
        Command::Projects(cmd) => cmd.run(server, out).await,
        Command::Audit(args) => args.run(server, out).await,
        Command::Types(cmd) => cmd.run(server, out).await,
        Command::Webhooks(cmd) => cmd.run(server, out).await,
        Command::Images(cmd) => cmd.run(server, out).await,
        Command::SlurmCommands(SlurmCommandsCommand::Install { dir, force, link_to }) => {
            match slurm::install(&dir, link_to.as_deref(), force) {
                Ok(made) => {
                    for link in made {
                        println!("{}", link.display());
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Command::LzRelay { port, probe: true } => {
            return if mission_lz::relay::probe(port).await { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        Command::LzRelay { port, probe: false } => {
            return match mission_lz::relay::relay(port).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mission lz-relay: 127.0.0.1:{port}: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::LzExec { host, command } => {
            return match commands::shell::lz_exec(&host, command).await {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(255)),
                Err(e) => {
                    eprintln!("mission lz-exec: {e:#}");
                    ExitCode::from(255)
                }
            };
        }
        Command::ManPages { dir } => manual::write_man_pages(Cli::command(), &dir)
            .map(|pages| println!("Wrote {} man pages to {}", pages.len(), dir.display()))
            .map_err(|e| anyhow::anyhow!("writing man pages to {}: {e}", dir.display())),
        Command::CliReference => {
            print!("{}", manual::cli_reference(Cli::command()));
            Ok(())
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mission", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script).map_err(Into::into)
        }
    };
    if !daemon {
        warn_once_if_the_server_is_newer();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let reason: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", reason.join(": "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
