//! `mission missions`: create, list, show, change and delete missions.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use mission_client::{Client, CreateMission, ListMissions, Mission, UpdateMission, Uuid};

use super::cargo_bays::resolve_bay;
use super::labels::{apply_label_changes, labels_text, parse_label_arg};
use super::projects::{project_names, resolve_optional_project, resolve_project};
use super::retries::{RetryArgs, retry_text};
use super::types::resolve_type;
use crate::output::Output;
use crate::session;

/// Manage missions: input files, settings of a mission type, and arguments.
#[derive(Debug, Subcommand)]
pub enum MissionsCommand {
    /// List the missions you can see (yours and public ones), newest first.
    List(ListArgs),
    /// Show one mission.
    Get {
        /// Mission id.
        mission: Uuid,
    },
    /// Create a mission.
    Create(CreateArgs),
    /// Change a mission's fields (only those given change).
    Update(UpdateArgs),
    /// Set a mission's labels: `missions label ID project=climate stage=draft`. Each key=value sets
    /// that label; `key-` removes it; other labels stay.
    Label {
        /// Mission id.
        mission: Uuid,
        /// Labels to set (key=value) or remove (key-).
        #[arg(required = true, value_name = "KEY=VALUE|KEY-")]
        changes: Vec<String>,
    },
    /// Replace a mission's arguments: `mission missions args ID -- --steps 100`.
    Args {
        /// Mission id.
        mission: Uuid,
        /// The arguments, in order (none clears them).
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Delete a mission.
    Delete {
        /// Mission id.
        mission: Uuid,
    },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only missions with this exact name (repeatable).
    #[arg(long = "name")]
    names: Vec<String>,
    /// Only this mission id (repeatable).
    #[arg(long = "id")]
    ids: Vec<Uuid>,
    /// Only missions of this owner id (repeatable).
    #[arg(long = "user")]
    users: Vec<Uuid>,
    /// Every mission of this project of yours, whoever owns it; by name or id (repeatable).
    #[arg(long = "project")]
    projects: Vec<String>,
    /// Only missions of this type, by name or id (repeatable).
    #[arg(long = "type")]
    types: Vec<String>,
    /// Only archived (true) or unarchived (false) missions.
    #[arg(long)]
    archived: Option<bool>,
    /// Only missions with this label, as key=value (repeat: missions with all of them).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label_arg)]
    labels: Vec<(String, String)>,
    /// Page number, from 1.
    #[arg(long, default_value_t = 1)]
    page: u32,
    /// Missions per page (at most 200).
    #[arg(long, default_value_t = 25)]
    items: u32,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Name of the mission.
    #[arg(long)]
    name: String,
    /// Description.
    #[arg(long)]
    description: Option<String>,
    /// Mission type, by name (shell, python, r, julia, command) or id.
    #[arg(long = "type")]
    mission_type: Option<String>,
    /// A setting of the mission type, NAME=VALUE (repeatable); see `mission types settings TYPE`.
    #[arg(long = "setting", value_name = "NAME=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// List the mission as public (readable by every user).
    #[arg(long)]
    public: bool,
    /// A label to find the mission by later (`missions list --label`), as key=value; repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label_arg)]
    labels: Vec<(String, String)>,
    #[command(flatten)]
    storage: StorageArgs,
    /// The default retry policy of the mission's jobs (a run's own flags replace it).
    #[command(flatten)]
    retry: RetryArgs,
    /// The container image its jobs run in (a name or `sha256:` digest, see `mission images`).
    #[arg(long)]
    image: Option<String>,
    /// Upload this directory's contents to the new mission.
    #[arg(long, value_name = "DIR")]
    upload: Option<std::path::PathBuf>,
    /// The project (name or id) it belongs to and its jobs are charged to; default: your
    /// personal project. See `mission projects list`.
    #[arg(long)]
    project: Option<String>,
}

/// Where a mission's files come from and its results go.
#[derive(Debug, Args)]
pub struct StorageArgs {
    /// Cargo bay (name or id) holding the input files; see `mission cargo-bays list`.
    #[arg(long)]
    source_storage: Option<String>,
    /// Root folder in the source cargo bay.
    #[arg(long)]
    source_path: Option<String>,
    /// Cargo bay (name or id) receiving results.
    #[arg(long)]
    destination_storage: Option<String>,
    /// Root folder in the destination cargo bay.
    #[arg(long)]
    destination_path: Option<String>,
}

impl StorageArgs {
    async fn source_id(&self, client: &Client) -> anyhow::Result<Option<Uuid>> {
        Ok(match &self.source_storage {
            Some(bay) => Some(resolve_bay(client, bay).await?),
            None => None,
        })
    }

    async fn destination_id(&self, client: &Client) -> anyhow::Result<Option<Uuid>> {
        Ok(match &self.destination_storage {
            Some(bay) => Some(resolve_bay(client, bay).await?),
            None => None,
        })
    }
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// Mission id.
    mission: Uuid,
    /// New name.
    #[arg(long)]
    name: Option<String>,
    /// New description.
    #[arg(long)]
    description: Option<String>,
    /// Replace the settings with these NAME=VALUE pairs (repeatable).
    #[arg(long = "setting", value_name = "NAME=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Archive the mission.
    #[arg(long, conflicts_with = "unarchive")]
    archive: bool,
    /// Restore an archived mission.
    #[arg(long)]
    unarchive: bool,
    #[command(flatten)]
    storage: StorageArgs,
    /// A new default retry policy of its jobs (`--retry 1`: none).
    #[command(flatten)]
    retry: RetryArgs,
    /// Move it to another project (name or id) you may run jobs in; jobs already started stay
    /// charged where they were.
    #[arg(long)]
    project: Option<String>,
    /// A new container image for its jobs (a name or `sha256:` digest); `""`: none.
    #[arg(long)]
    image: Option<String>,
}

fn parse_setting(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {raw:?}")),
    }
}

fn settings_map(pairs: Vec<(String, String)>) -> Option<BTreeMap<String, String>> {
    (!pairs.is_empty()).then(|| pairs.into_iter().collect())
}

fn show(out: Output, m: &Mission) {
    let settings: Vec<String> = m.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.record(
        m,
        vec![
            ("id", m.mission_id.to_string()),
            ("name", m.name.clone()),
            ("description", m.description.clone()),
            ("type", m.mission_type_id.map(|t| t.to_string()).unwrap_or_default()),
            ("settings", settings.join(" ")),
            ("args", m.args.join(" ")),
            ("public", m.public.to_string()),
            ("archived", m.archived.to_string()),
            ("labels", labels_text(&m.labels)),
            ("retry", m.retry.as_ref().map(retry_text).unwrap_or_else(|| "-".into())),
            ("image", m.image.clone().unwrap_or_else(|| "-".into())),
            ("owner", m.user_id.to_string()),
            ("project", m.project_id.to_string()),
            ("created", m.created_at.to_rfc3339()),
            ("updated", m.updated_at.to_rfc3339()),
        ],
    );
}

impl MissionsCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            MissionsCommand::List(args) => {
                let mut mission_type_ids = Vec::new();
                for t in &args.types {
                    mission_type_ids.push(resolve_type(&client, t).await?);
                }
                let mut project_ids = Vec::new();
                for project in &args.projects {
                    project_ids.push(resolve_project(&client, project).await?);
                }
                let options = ListMissions {
                    project_ids,
                    mission_ids: args.ids,
                    names: args.names,
                    user_ids: args.users,
                    page: args.page,
                    items: args.items,
                    mission_type_ids,
                    archived: args.archived,
                    labels: args.labels,
                };
                let page = client.list_missions_page(&options).await?;
                let projects = project_names(&client).await?;
                let rows = page
                    .missions
                    .iter()
                    .map(|m| {
                        let mut flags = Vec::new();
                        if m.public {
                            flags.push("public");
                        }
                        if m.archived {
                            flags.push("archived");
                        }
                        vec![
                            m.mission_id.to_string(),
                            m.name.clone(),
                            projects.name(m.project_id),
                            flags.join(","),
                            labels_text(&m.labels),
                            m.created_at.format("%Y-%m-%d %H:%M").to_string(),
                        ]
                    })
                    .collect();
                out.table(&page.missions, &["ID", "NAME", "PROJECT", "FLAGS", "LABELS", "CREATED"], rows);
                if page.has_more && !out.json {
                    eprintln!("(more on page {}: --page {})", page.page + 1, page.page + 1);
                }
            }
            MissionsCommand::Get { mission } => show(out, &client.get_mission_by_id(mission).await?),
            MissionsCommand::Create(args) => {
                let mission_type_id = match &args.mission_type {
                    Some(t) => Some(resolve_type(&client, t).await?),
                    None => None,
                };
                let request = CreateMission {
                    name: args.name,
                    description: args.description,
                    source_storage_id: args.storage.source_id(&client).await?,
                    destination_storage_id: args.storage.destination_id(&client).await?,
                    source_path: args.storage.source_path,
                    destination_path: args.storage.destination_path,
                    mission_type_id,
                    settings: settings_map(args.settings),
                    public: Some(args.public),
                    labels: args.labels.into_iter().collect(),
                    retry: args.retry.policy(),
                    project_id: resolve_optional_project(&client, args.project.as_deref()).await?,
                    image: args.image,
                };
                if let Some(dir) = &args.upload
                    && !dir.is_dir()
                {
                    bail!("--upload {}: not a directory", dir.display());
                }
                let mission = client.create_mission(&request).await?;
                let mut message = format!("Created mission {} ({}).", mission.mission_id, mission.name);
                if let Some(dir) = &args.upload {
                    let summary =
                        super::files::upload(&client, mission.mission_id, dir, None, Default::default()).await?;
                    message.push_str(&format!(" Uploaded {} file(s), {} bytes.", summary.transferred, summary.bytes));
                }
                out.done(&mission, &message);
            }
            MissionsCommand::Update(args) => {
                let changes = UpdateMission {
                    name: args.name,
                    description: args.description,
                    source_storage_id: args.storage.source_id(&client).await?,
                    destination_storage_id: args.storage.destination_id(&client).await?,
                    source_path: args.storage.source_path,
                    destination_path: args.storage.destination_path,
                    settings: settings_map(args.settings),
                    archived: if args.archive {
                        Some(true)
                    } else if args.unarchive {
                        Some(false)
                    } else {
                        None
                    },
                    labels: None,
                    retry: args.retry.policy(),
                    project_id: resolve_optional_project(&client, args.project.as_deref()).await?,
                    image: args.image,
                    args: None,
                };
                if changes == UpdateMission::default() {
                    bail!(
                        "nothing to change: give at least one of --name, --description, --setting, --archive, --retry, --project, --image, …"
                    );
                }
                if !client.update_mission(args.mission, &changes).await? {
                    bail!("no mission {}", args.mission);
                }
                let mission = client.get_mission_by_id(args.mission).await?;
                out.done(&mission, &format!("Updated mission {}.", mission.mission_id));
            }
            MissionsCommand::Label { mission, changes } => {
                let mut labels = client.get_mission_by_id(mission).await?.labels;
                apply_label_changes(&mut labels, changes)?;
                let mission = client.set_mission_labels(mission, &labels).await?;
                out.done(&mission, &format!("mission {} labels: {}", mission.mission_id, labels_text(&mission.labels)));
            }
            MissionsCommand::Args { mission, args } => {
                let updated = client.update_mission_args(mission, &args).await?;
                out.done(&updated, &format!("Mission {} now has {} argument(s).", mission, updated.args.len()));
            }
            MissionsCommand::Delete { mission } => {
                client.delete_mission_by_id(mission).await.with_context(|| format!("deleting mission {mission}"))?;
                out.done(&serde_json::json!({"deleted": mission}), &format!("Deleted mission {mission}."));
            }
        }
        Ok(())
    }
}
