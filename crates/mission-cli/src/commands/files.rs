//! `mission files`: upload, list, download and delete a mission's files.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use mission_client::{DEFAULT_CONCURRENCY, TransferOptions, TransferSummary, Uuid};

use crate::output::Output;
use crate::progress::TransferBar;
use crate::session;

/// Move files into and out of missions. Uploads skip files the mission already has with the
/// same content, so re-running an upload of an unchanged tree is nearly free.
#[derive(Debug, Subcommand)]
pub enum FilesCommand {
    /// Upload a file (to the top level, or to --rename) or a directory (its contents to the top
    /// level, subfolders as subfolders).
    Upload {
        /// Mission id.
        mission: Uuid,
        /// File or directory to upload.
        path: PathBuf,
        /// Path inside the mission for a single file, e.g. config/params.yaml.
        #[arg(long)]
        rename: Option<String>,
        #[command(flatten)]
        transfer: TransferArgs,
    },
    /// List a mission's files.
    List {
        /// Mission id.
        mission: Uuid,
    },
    /// Download a mission's files (all, or one file or folder) into a directory.
    Download {
        /// Mission id.
        mission: Uuid,
        /// A file or folder of the mission (default: everything).
        path: Option<String>,
        /// Directory to write into (created if needed).
        #[arg(long, short = 'o', default_value = ".")]
        output: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
    },
    /// Delete a file of a mission.
    Delete {
        /// Mission id.
        mission: Uuid,
        /// The file's path relative to the mission root.
        path: String,
    },
}

/// How a transfer runs.
#[derive(Debug, Clone, Copy, Args)]
pub struct TransferArgs {
    /// Print one line per file.
    #[arg(long, short)]
    pub verbose: bool,
    /// Files transferred at once.
    #[arg(long, env = "MISSION_TRANSFER_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub concurrency: usize,
}

impl Default for TransferArgs {
    fn default() -> Self {
        Self { verbose: false, concurrency: DEFAULT_CONCURRENCY }
    }
}

impl TransferArgs {
    /// The SDK options, with a progress bar labelled `what` on a terminal.
    pub fn options(self, what: &'static str) -> TransferOptions {
        TransferOptions {
            verbose: self.verbose,
            concurrency: self.concurrency,
            observer: TransferBar::for_terminal(what),
        }
    }
}

/// Uploads `path` to `mission` with a progress bar on a terminal.
pub async fn upload(
    client: &mission_client::Client,
    mission: Uuid,
    path: &std::path::Path,
    rename: Option<&str>,
    transfer: TransferArgs,
) -> anyhow::Result<TransferSummary> {
    let options = transfer.options("upload");
    match client.upload_with(mission, path, rename, &options).await? {
        Some(summary) => Ok(summary),
        None => bail!("no mission {mission}"),
    }
}

impl FilesCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            FilesCommand::Upload { mission, path, rename, transfer } => {
                let summary = upload(&client, mission, &path, rename.as_deref(), transfer).await?;
                out.done(
                    &serde_json::json!({"uploaded": summary.transferred, "unchanged": summary.skipped, "bytes": summary.bytes}),
                    &format!(
                        "Uploaded {} file(s), {} bytes; {} unchanged.",
                        summary.transferred, summary.bytes, summary.skipped
                    ),
                );
            }
            FilesCommand::List { mission } => {
                let files = client.get_mission_files(mission).await?;
                let rows = files
                    .iter()
                    .map(|f| {
                        vec![
                            f.relative_path(),
                            f.file_size.to_string(),
                            f.modified_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                            f.sha256.chars().take(12).collect(),
                        ]
                    })
                    .collect();
                out.table(&files, &["PATH", "BYTES", "MODIFIED", "SHA256"], rows);
            }
            FilesCommand::Download { mission, path, output, transfer } => {
                let options = transfer.options("download");
                let summary = client.download_with(mission, path.as_deref(), &output, &options).await?;
                report_download(out, &summary, &output);
            }
            FilesCommand::Delete { mission, path } => {
                if !client.delete_file(mission, &path).await? {
                    bail!("mission {mission} has no file {path:?}");
                }
                out.done(&serde_json::json!({"deleted": path}), &format!("Deleted {path}."));
            }
        }
        Ok(())
    }
}

/// Prints what a download did.
pub fn report_download(out: Output, summary: &mission_client::TransferSummary, dest: &std::path::Path) {
    out.done(
        &serde_json::json!({"downloaded": summary.transferred, "unchanged": summary.skipped, "bytes": summary.bytes}),
        &format!(
            "Downloaded {} file(s), {} bytes, into {}; {} unchanged.",
            summary.transferred,
            summary.bytes,
            dest.display(),
            summary.skipped
        ),
    );
}
