//! `mission webhooks`: URLs the server POSTs your events to, signed, and how their deliveries went.

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use mission_client::{CreateWebhook, DeliveryStatus, ListDeliveries, Uuid, Webhook};

use crate::output::Output;
use crate::session;

/// The subcommands of `mission webhooks` (its help is on `Command::Webhooks`).
#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// List your webhooks (everyone's, for admins).
    List,
    /// Show one webhook.
    Get {
        /// Its id.
        webhook: Uuid,
    },
    /// Register a webhook; it gets the events its filter wants from now on.
    ///
    /// Without --secret-stdin the server makes a secret and prints it, this once.
    Create(CreateArgs),
    /// Delete a webhook: nothing more is sent to it.
    Delete {
        /// Its id.
        webhook: Uuid,
    },
    /// List a webhook's deliveries, newest event first.
    Deliveries {
        /// Its id.
        webhook: Uuid,
        /// Only those pending, delivered or failed.
        #[arg(long, value_enum)]
        status: Option<Status>,
        /// Only events numbered below this (page back with the last number shown).
        #[arg(long)]
        before: Option<u64>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Status {
    Pending,
    Delivered,
    Failed,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Where to POST events: an http(s) URL. Unless you are an admin, it must be under a target
    /// the server allows (`mission server --webhook-target`).
    url: String,
    /// Only this mission's events (repeat for several).
    #[arg(long = "mission")]
    missions: Vec<Uuid>,
    /// Only events of this kind, exactly or as a prefix before a dot: `job` is every job
    /// transition, `job.failed` one (repeat for several).
    #[arg(long = "kind")]
    kinds: Vec<String>,
    /// Read the secret (16 to 256 printable characters) from standard input.
    #[arg(long)]
    secret_stdin: bool,
    /// Admins: everyone's events, not only yours.
    #[arg(long)]
    all: bool,
}

fn filter_text(webhook: &Webhook) -> String {
    let mut parts = Vec::new();
    if webhook.all {
        parts.push("everyone's".to_owned());
    }
    if !webhook.kinds.is_empty() {
        parts.push(webhook.kinds.join(","));
    }
    if !webhook.mission_ids.is_empty() {
        let missions: Vec<String> = webhook.mission_ids.iter().map(Uuid::to_string).collect();
        parts.push(format!("missions {}", missions.join(",")));
    }
    if parts.is_empty() { "all your events".to_owned() } else { parts.join("; ") }
}

impl WebhooksCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            WebhooksCommand::List => {
                let webhooks = client.list_webhooks().await?;
                let rows =
                    webhooks.iter().map(|w| vec![w.webhook_id.to_string(), w.url.clone(), filter_text(w)]).collect();
                out.table(&webhooks, &["ID", "URL", "EVENTS"], rows);
            }
            WebhooksCommand::Get { webhook } => {
                let webhook = client.get_webhook(webhook).await?;
                let fields = vec![
                    ("id", webhook.webhook_id.to_string()),
                    ("url", webhook.url.clone()),
                    ("events", filter_text(&webhook)),
                    ("owner", webhook.user_id.to_string()),
                    ("created", webhook.created_at.to_rfc3339()),
                ];
                out.record(&webhook, fields);
            }
            WebhooksCommand::Create(args) => {
                let secret =
                    if args.secret_stdin { Some(super::stdin_line("--secret-stdin", "secret")?) } else { None };
                let request = CreateWebhook {
                    url: args.url,
                    secret,
                    mission_ids: args.missions,
                    kinds: args.kinds,
                    all: args.all,
                };
                let webhook = client.create_webhook(&request).await?;
                let mut message = format!("created webhook {} ({})", webhook.webhook_id, filter_text(&webhook));
                if let Some(secret) = &webhook.secret {
                    message.push_str(&format!("\nsecret (shown this once; keep it to check signatures): {secret}"));
                }
                out.done(&webhook, &message);
            }
            WebhooksCommand::Delete { webhook } => {
                if !client.delete_webhook(webhook).await? {
                    bail!("no webhook {webhook}");
                }
                out.done(&serde_json::json!({ "deleted": webhook }), &format!("deleted webhook {webhook}"));
            }
            WebhooksCommand::Deliveries { webhook, status, before, limit } => {
                let status = status.map(|s| match s {
                    Status::Pending => DeliveryStatus::Pending,
                    Status::Delivered => DeliveryStatus::Delivered,
                    Status::Failed => DeliveryStatus::Failed,
                });
                let which = ListDeliveries { status, before, limit: Some(limit) };
                let deliveries = client.webhook_deliveries(webhook, &which).await?;
                let rows = deliveries
                    .iter()
                    .map(|d| {
                        let answer = match (&d.last_error, d.response_status) {
                            (Some(error), _) => error.clone(),
                            (None, Some(status)) => format!("HTTP {status}"),
                            (None, None) => String::new(),
                        };
                        let next = d.next_attempt_at.map(|t| t.to_rfc3339()).unwrap_or_default();
                        vec![
                            d.event_seq.to_string(),
                            d.event_kind.clone(),
                            d.status.to_string(),
                            d.attempts.to_string(),
                            answer,
                            next,
                        ]
                    })
                    .collect();
                out.table(&deliveries, &["EVENT", "KIND", "STATUS", "ATTEMPTS", "LAST ANSWER", "NEXT ATTEMPT"], rows);
            }
        }
        Ok(())
    }
}
