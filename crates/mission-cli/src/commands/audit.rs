//! `mission audit`: who changed what.

use mission_client::{AuditQuery, Client};

use crate::output::Output;
use crate::session;

/// Show the audit trail: every change made through the API, the console or the CLI, newest
/// first, with who made it (and as what), the request it came in and what changed (never a
/// secret). Admins see every entry, a project's managers the entries of its resources.
///
///   mission audit                                   # the latest 50
///   mission audit --actor alice --since 7d
///   mission audit --project bio --limit 200
///   mission audit --target 0b9e…                    # one resource's history
///   mission audit --since 2026-11-01 --jsonl > audit.jsonl   # every entry, for export
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct AuditArgs {
    /// Only changes by this user (username or id).
    #[arg(long)]
    actor: Option<String>,
    /// Only changes to this project's resources (name or id).
    #[arg(long)]
    project: Option<String>,
    /// Only changes to this resource (its id; a file's is MISSION_ID/PATH).
    #[arg(long)]
    target: Option<String>,
    /// Only changes since: a time (2026-11-01, 2026-11-01T09:00:00Z) or an age (7d).
    #[arg(long, value_name = "TIME", value_parser = super::jobs::parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only changes before this time (or this long ago).
    #[arg(long, value_name = "TIME", value_parser = super::jobs::parse_since)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// How many entries, newest first (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
    /// Print every matching entry as JSON lines, as the server exports them (--limit aside).
    #[arg(long)]
    jsonl: bool,
}

impl AuditArgs {
    /// Runs the command.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        let project_id = match &self.project {
            Some(project) => Some(super::projects::resolve_project(&client, project).await?),
            None => None,
        };
        let query = AuditQuery {
            actor: self.actor,
            project_id,
            target: self.target,
            since: self.since,
            until: self.until,
            before: None,
            limit: Some(self.limit),
        };
        if self.jsonl {
            print!("{}", client.audit_jsonl(&query).await?);
            return Ok(());
        }
        show(&client, &query, out).await
    }
}

async fn show(client: &Client, query: &AuditQuery, out: Output) -> anyhow::Result<()> {
    let page = client.audit(query).await?;
    let rows = page
        .entries
        .iter()
        .map(|e| {
            let actor = e.actor.clone().or_else(|| e.actor_id.map(|id| id.to_string())).unwrap_or_else(|| "-".into());
            let target = match &e.target_name {
                Some(name) => format!("{} {name}", e.target_kind),
                None => format!("{} {}", e.target_kind, e.target_id),
            };
            let changes =
                if e.changes.as_object().is_some_and(|o| o.is_empty()) { String::new() } else { e.changes.to_string() };
            vec![
                e.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                format!("{actor} ({})", e.actor_role),
                e.action.clone(),
                target,
                shorten(&changes, 60),
                e.request_id.clone(),
            ]
        })
        .collect();
    out.table(&page, &["AT (UTC)", "ACTOR", "ACTION", "TARGET", "CHANGES", "REQUEST"], rows);
    Ok(())
}

/// `text` cut to `most` characters, with an ellipsis where it was cut.
fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(most - 1).collect();
    cut.push('…');
    cut
}
