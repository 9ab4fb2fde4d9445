//! `mission types`: the mission-type catalogue.

use anyhow::bail;
use clap::Subcommand;
use mission_client::{Client, Uuid};

use crate::output::Output;
use crate::session;

/// Browse mission types (shell, python, r, julia, command) and the settings they take.
#[derive(Debug, Subcommand)]
pub enum TypesCommand {
    /// List the mission types.
    List,
    /// Show one mission type: settings, command template, resource defaults.
    Get {
        /// Name (e.g. python) or id.
        mission_type: String,
    },
    /// Show the settings a mission of this type takes and what each expects.
    Settings {
        /// Name (e.g. python) or id.
        mission_type: String,
    },
}

/// The id of a mission type given by id or name.
pub async fn resolve_type(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let types = client.list_mission_types().await?;
    match types.iter().find(|t| t.name.eq_ignore_ascii_case(given)) {
        Some(t) => Ok(t.id),
        None => {
            let names: Vec<_> = types.iter().map(|t| t.name.as_str()).collect();
            bail!("no mission type {given:?}; known types: {}", names.join(", "))
        }
    }
}

impl TypesCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            TypesCommand::List => {
                let types = client.list_mission_types().await?;
                let rows = types
                    .iter()
                    .map(|t| vec![t.name.clone(), t.version.clone(), t.id.to_string(), t.description.clone()])
                    .collect();
                out.table(&types, &["NAME", "VERSION", "ID", "DESCRIPTION"], rows);
            }
            TypesCommand::Get { mission_type } => {
                let t = client.get_mission_type(resolve_type(&client, &mission_type).await?).await?;
                let mut fields = vec![
                    ("name", t.name.clone()),
                    ("version", t.version.clone()),
                    ("id", t.id.to_string()),
                    ("description", t.description.clone()),
                    ("command", t.command.join(" ")),
                    (
                        "resources",
                        format!(
                            "{} CPU, {} MB, {} GPU",
                            t.resources.cpu_count, t.resources.memory_amount, t.resources.gpu_count
                        ),
                    ),
                ];
                if let Some(minutes) = t.resources.time_limit {
                    fields.push(("time limit", format!("{minutes} min")));
                }
                fields.extend(t.settings.iter().map(|(k, v)| ("setting", format!("{k}: {v}"))));
                out.record(&t, fields);
            }
            TypesCommand::Settings { mission_type } => {
                let settings =
                    client.get_mission_type_settings_info(resolve_type(&client, &mission_type).await?).await?;
                let rows = settings.iter().map(|(k, v)| vec![k.clone(), v.clone()]).collect();
                out.table(&settings, &["SETTING", "EXPECTS"], rows);
            }
        }
        Ok(())
    }
}
