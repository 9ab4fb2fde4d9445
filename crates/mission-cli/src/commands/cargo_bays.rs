//! `mission cargo-bays`: the storage locations missions take input files from and send results to.

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use mission_client::{CargoBay, CargoBayKind, Client, CreateCargoBay, DEFAULT_CARGO_BAY_ID, Uuid};

use crate::output::Output;
use crate::session;

/// Manage cargo bays: S3 buckets (or, for admins, server directories) missions keep files in.
///
/// A mission names a bay with `mission missions create --source-storage BAY --source-path DIR`;
/// its files then live in the bay under that folder. The server's own storage is the bay
/// `default`.
#[derive(Debug, Subcommand)]
pub enum CargoBaysCommand {
    /// List the default bay and yours (every bay, for admins).
    List,
    /// Show one bay.
    Get {
        /// Name or id.
        bay: String,
    },
    /// Add a bay. The server lists it first, so wrong credentials fail here.
    ///
    /// S3: `mission cargo-bays create lab --bucket lab-data --prefix runs --region eu-west-1
    /// --access-key-id AKIA… --secret-access-key-stdin < secret.txt`.
    /// Local (admins): `mission cargo-bays create scratch --kind local --path /srv/scratch`.
    Create(CreateArgs),
    /// Delete a bay that no mission names any more (its objects stay where they are).
    Delete {
        /// Name or id.
        bay: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    S3,
    Local,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A name for the bay.
    name: String,
    /// What kind of storage.
    #[arg(long, value_enum, default_value = "s3")]
    kind: Kind,
    /// S3 bucket.
    #[arg(long, required_if_eq("kind", "s3"))]
    bucket: Option<String>,
    /// Key prefix inside the bucket.
    #[arg(long)]
    prefix: Option<String>,
    /// Endpoint URL of an S3-compatible server (default: AWS).
    #[arg(long)]
    endpoint: Option<String>,
    /// Region (default: us-east-1).
    #[arg(long)]
    region: Option<String>,
    /// Access key id; without one the bucket is read anonymously.
    #[arg(long, env = "MISSION_S3_ACCESS_KEY_ID")]
    access_key_id: Option<String>,
    /// Read the secret access key from standard input (or set MISSION_S3_SECRET_ACCESS_KEY).
    #[arg(long, requires = "access_key_id")]
    secret_access_key_stdin: bool,
    /// Directory on the server host (local bays).
    #[arg(long, required_if_eq("kind", "local"))]
    path: Option<String>,
    /// Admins: the id of the user the bay is for.
    #[arg(long)]
    user: Option<Uuid>,
}

/// The id of a bay given by id or name (`default` is the server's storage).
pub async fn resolve_bay(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let bays = client.list_cargo_bays().await?;
    let matches: Vec<&CargoBay> = bays.iter().filter(|b| b.name == given).collect();
    match matches.as_slice() {
        [bay] => Ok(bay.storage_id),
        [] => {
            let names: Vec<_> = bays.iter().map(|b| b.name.as_str()).collect();
            bail!("no cargo bay {given:?}; yours: {}", names.join(", "))
        }
        _ => bail!("several cargo bays are called {given:?}; name one by id"),
    }
}

fn describe(bay: &CargoBay) -> String {
    match bay.kind {
        CargoBayKind::Default => "the server's storage".to_owned(),
        CargoBayKind::Local => bay.path.clone().unwrap_or_default(),
        CargoBayKind::S3 => {
            let mut place = format!("s3://{}", bay.bucket.as_deref().unwrap_or(""));
            if let Some(prefix) = &bay.prefix {
                place = format!("{place}/{prefix}");
            }
            if let Some(endpoint) = &bay.endpoint {
                place = format!("{place} at {endpoint}");
            }
            place
        }
    }
}

fn secret_from(stdin: bool) -> anyhow::Result<Option<String>> {
    if stdin {
        let line = super::stdin_line("--secret-access-key-stdin", "secret access key")?;
        return Ok(Some(line.trim().to_owned()));
    }
    Ok(std::env::var("MISSION_S3_SECRET_ACCESS_KEY").ok().filter(|s| !s.is_empty()))
}

impl CargoBaysCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            CargoBaysCommand::List => {
                let bays = client.list_cargo_bays().await?;
                let rows = bays
                    .iter()
                    .map(|b| vec![b.name.clone(), b.kind.to_string(), b.storage_id.to_string(), describe(b)])
                    .collect();
                out.table(&bays, &["NAME", "KIND", "ID", "WHERE"], rows);
            }
            CargoBaysCommand::Get { bay } => {
                let bay = client.get_cargo_bay(resolve_bay(&client, &bay).await?).await?;
                let mut fields = vec![
                    ("name", bay.name.clone()),
                    ("kind", bay.kind.to_string()),
                    ("id", bay.storage_id.to_string()),
                    ("where", describe(&bay)),
                ];
                if let Some(region) = &bay.region {
                    fields.push(("region", region.clone()));
                }
                if let Some(owner) = bay.user_id {
                    fields.push(("owner", owner.to_string()));
                }
                fields.push(("credentials", if bay.has_credentials { "stored (encrypted)" } else { "none" }.into()));
                out.record(&bay, fields);
            }
            CargoBaysCommand::Create(args) => {
                let secret_access_key = secret_from(args.secret_access_key_stdin)?;
                if args.access_key_id.is_some() && secret_access_key.is_none() {
                    bail!(
                        "--access-key-id needs its secret: --secret-access-key-stdin or MISSION_S3_SECRET_ACCESS_KEY"
                    );
                }
                let kind = match args.kind {
                    Kind::S3 => CargoBayKind::S3,
                    Kind::Local => CargoBayKind::Local,
                };
                let request = CreateCargoBay {
                    bucket: args.bucket,
                    prefix: args.prefix,
                    endpoint: args.endpoint,
                    region: args.region,
                    access_key_id: args.access_key_id,
                    secret_access_key,
                    path: args.path,
                    user_id: args.user,
                    ..CreateCargoBay::new(args.name, kind)
                };
                let bay = client.create_cargo_bay(&request).await?;
                out.done(&bay, &format!("created cargo bay {} ({})", bay.storage_id, describe(&bay)));
            }
            CargoBaysCommand::Delete { bay } => {
                let id = resolve_bay(&client, &bay).await?;
                if id == DEFAULT_CARGO_BAY_ID {
                    bail!("the default cargo bay is the server's own storage and cannot be deleted");
                }
                if !client.delete_cargo_bay(id).await? {
                    bail!("no cargo bay {bay}");
                }
                out.done(&serde_json::json!({ "deleted": id }), &format!("deleted cargo bay {id}"));
            }
        }
        Ok(())
    }
}
