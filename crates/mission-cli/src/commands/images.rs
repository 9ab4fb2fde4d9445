//! `mission images`: container images that missions' jobs run in.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use mission_client::{Image, ImageVisibility, ImportImage, RegisterImageReference, Uuid};

use crate::output::Output;
use crate::progress::TransferBar;
use crate::session;

/// The subcommands of `mission images` (its help is on `Command::Images`).
#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Import an image: an OCI or docker archive, as `podman save` or `docker save` writes it
    /// (not compressed).
    Import {
        /// The archive.
        archive: PathBuf,
        #[command(flatten)]
        new: NewImage,
    },
    /// Register an image that landing zones pull from a container registry themselves, pinned
    /// by its manifest's digest: `HOST[:PORT]/PATH[:TAG]@sha256:HEX`, in a registry the server
    /// allows (`mission server --image-registry`; admins may name any).
    Add {
        /// The reference.
        reference: String,
        #[command(flatten)]
        new: NewImage,
    },
    /// List the images you see (every one, for admins).
    List,
    /// Show one image.
    Get {
        /// Its id.
        image: Uuid,
    },
    /// Delete an image of yours (any, for admins); refused while a job that has not ended runs
    /// in it.
    Delete {
        /// Its id.
        image: Uuid,
    },
}

/// What a new image is called and who sees it (`import` and `add` alike).
#[derive(Debug, Args)]
pub struct NewImage {
    /// Its name, unique among your images (`solver:2.1`, `lab/python`).
    #[arg(long)]
    name: String,
    /// Who sees it: you (private), the members of its project, or everyone (public: admins).
    #[arg(long, value_enum, default_value_t = Visibility::Private)]
    visibility: Visibility,
    /// Its project (default: your personal project).
    #[arg(long)]
    project: Option<Uuid>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Visibility {
    Private,
    Project,
    Public,
}

impl From<Visibility> for ImageVisibility {
    fn from(visibility: Visibility) -> Self {
        match visibility {
            Visibility::Private => Self::Private,
            Visibility::Project => Self::Project,
            Visibility::Public => Self::Public,
        }
    }
}

/// `bytes` in the largest binary unit that keeps it readable.
fn size_text(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut value, mut unit) = (bytes as f64, 0);
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", units[unit]) }
}

/// The short form of a digest, as container engines print image ids.
fn short_digest(image: &Image) -> String {
    image.digest.trim_start_matches("sha256:").chars().take(12).collect()
}

impl ImagesCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            ImagesCommand::Import { archive, new } => {
                let request =
                    ImportImage { name: new.name, visibility: new.visibility.into(), project_id: new.project };
                let image = client.import_image(&archive, &request, TransferBar::for_terminal("import")).await?;
                let message = format!(
                    "imported image {} ({}, {} archive, {}) as {}",
                    image.name,
                    size_text(image.size),
                    image.format.as_str(),
                    image.digest,
                    image.image_id
                );
                out.done(&image, &message);
            }
            ImagesCommand::Add { reference, new } => {
                let visibility = new.visibility.into();
                let request = RegisterImageReference { name: new.name, reference, visibility, project_id: new.project };
                let image = client.register_image_reference(&request).await?;
                let message = format!("added image {} ({}) as {}", image.name, image.digest, image.image_id);
                out.done(&image, &message);
            }
            ImagesCommand::List => {
                let images = client.list_images().await?;
                let rows = images
                    .iter()
                    .map(|i| {
                        vec![
                            i.image_id.to_string(),
                            i.name.clone(),
                            short_digest(i),
                            if i.reference.is_some() { "(registry)".to_owned() } else { size_text(i.size) },
                            i.visibility.to_string(),
                            i.created_at.format("%Y-%m-%d %H:%M").to_string(),
                        ]
                    })
                    .collect();
                out.table(&images, &["ID", "NAME", "DIGEST", "SIZE", "VISIBILITY", "IMPORTED"], rows);
            }
            ImagesCommand::Get { image } => {
                let image = client.get_image(image).await?;
                let fields = vec![
                    ("id", image.image_id.to_string()),
                    ("name", image.name.clone()),
                    ("digest", image.digest.clone()),
                    ("size", format!("{} ({} bytes)", size_text(image.size), image.size)),
                    ("format", image.format.as_str().to_owned()),
                    ("reference", image.reference.clone().unwrap_or_else(|| "-".into())),
                    ("visibility", image.visibility.to_string()),
                    ("project", image.project_id.to_string()),
                    ("owner", image.owner_id.to_string()),
                    ("imported", image.created_at.to_rfc3339()),
                ];
                out.record(&image, fields);
            }
            ImagesCommand::Delete { image } => {
                if !client.delete_image(image).await? {
                    bail!("no image {image}");
                }
                out.done(&serde_json::json!({ "deleted": image }), &format!("deleted image {image}"));
            }
        }
        Ok(())
    }
}
