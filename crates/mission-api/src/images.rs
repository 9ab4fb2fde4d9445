//! Container images: archives that a mission's jobs run in.
//!
//! An image is an OCI or docker archive, as `podman save` or `docker save` writes it, uploaded
//! whole (`POST /api/v1/images?name=…`, the archive as the body) and stored by the service. Its
//! `digest` is the SHA-256 of the archive: landing zones keep the images they loaded by it.
//!
//! Where a site allows it, an image may instead be a reference into a container registry, pinned
//! by its manifest's digest (`registry.example.org/lab/solver@sha256:…`,
//! `POST /api/v1/images/references`): landing zones pull it from there themselves, and the
//! image's `digest` is that manifest digest. Users other than admins may name only the
//! registries the server allows (`mission server --image-registry`).
//!
//! Who sees an image ([`ImageVisibility`]): its owner; the members of its project; or everyone
//! (only admins publish an image to everyone). Names are an owner's own: a mission that names an
//! image finds the caller's own of that name first, then its project's, then a public one
//! ([`ImageRef`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The repository landing zones name the images they load in (`{AGENTS_REPOSITORY}-{agent}:{hex
/// digest}`): no archive may name an image there, and agents load archives without their names.
pub const AGENTS_REPOSITORY: &str = "localhost/mission-image";

/// The annotations of an OCI index's descriptors that name an image to Podman (containerd's is
/// read first); a docker archive names its images in its manifest's `RepoTags`.
pub const NAME_ANNOTATIONS: [&str; 2] = ["io.containerd.image.name", "org.opencontainers.image.ref.name"];

/// The most bytes of an image archive's `index.json` or `manifest.json` read (real ones hold a
/// few hundred).
pub const MAX_ARCHIVE_INDEX_BYTES: u64 = 1 << 20;

/// The longest image name.
pub const MAX_IMAGE_NAME: usize = 128;

/// Who sees an image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ImageVisibility {
    /// Its owner (and admins).
    #[default]
    Private,
    /// The members of its project.
    Project,
    /// Everyone; only admins publish images so.
    Public,
}

impl ImageVisibility {
    /// The name used on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Project => "project",
            Self::Public => "public",
        }
    }
}

impl std::fmt::Display for ImageVisibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ImageVisibility {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "private" => Ok(Self::Private),
            "project" => Ok(Self::Project),
            "public" => Ok(Self::Public),
            other => Err(format!("{other:?} is not an image visibility (private, project, public)")),
        }
    }
}

/// The kind of archive an image was uploaded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// An OCI image layout in a tar archive (`podman save --format oci-archive`).
    Oci,
    /// A docker archive (`docker save`, `podman save --format docker-archive`).
    Docker,
    /// A reference into a container registry ([`Image::reference`]), pulled by landing zones.
    Registry,
}

impl ImageFormat {
    /// The name used on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oci => "oci",
            Self::Docker => "docker",
            Self::Registry => "registry",
        }
    }
}

impl std::str::FromStr for ImageFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oci" => Ok(Self::Oci),
            "docker" => Ok(Self::Docker),
            "registry" => Ok(Self::Registry),
            other => Err(format!("{other:?} is not an image format (oci, docker, registry)")),
        }
    }
}

/// Where an uploaded image goes (`POST /api/v1/images`, as query parameters; the body is the
/// archive).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ImportImage {
    /// Its name (see [`check_image_name`]), unique among the caller's images.
    pub name: String,
    /// Who sees it (default: its owner).
    #[serde(default)]
    pub visibility: ImageVisibility,
    /// Its project (default: the caller's personal project); the caller must be a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
}

/// Registers an image that is a registry reference (`POST /api/v1/images/references`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterImageReference {
    /// Its name (see [`check_image_name`]), unique among the caller's images.
    pub name: String,
    /// The image in a registry, pinned by its manifest's digest:
    /// `HOST[:PORT]/PATH[:TAG]@sha256:HEX` (see [`RegistryReference`]).
    pub reference: String,
    /// Who sees it (default: its owner).
    #[serde(default)]
    pub visibility: ImageVisibility,
    /// Its project (default: the caller's personal project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<Uuid>,
}

/// A registry reference, read: `HOST[:PORT]/PATH[:TAG]@sha256:HEX`, the registry named
/// explicitly (a host with a dot or a port, or `localhost`), pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryReference<'a> {
    /// `HOST[:PORT]`.
    pub registry: &'a str,
    /// `sha256:HEX`.
    pub digest: &'a str,
}

impl<'a> RegistryReference<'a> {
    /// Reads `text`, or says what is wrong with it.
    pub fn parse(text: &'a str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("{text:?} is not a registry reference pinned by digest: {why}"));
        let Some((name, digest)) = text.split_once('@') else {
            return bad("it needs @sha256:… (a tag alone may change)");
        };
        if !matches!(ImageRef::parse(digest), Ok(ImageRef::Digest(_))) {
            return bad("the part after @ is not sha256: and 64 lowercase hex digits");
        }
        let Some((registry, path)) = name.split_once('/') else { return bad("it names no registry host") };
        let explicit = registry.contains('.') || registry.contains(':') || registry == "localhost";
        let host_ok = registry.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !explicit || !host_ok || registry.is_empty() {
            return bad("it must start with the registry's host (with a dot or a port, or localhost)");
        }
        let path_ok = !path.is_empty()
            && path.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b))
            && text.len() <= 512;
        if !path_ok {
            return bad("its repository path may hold lowercase letters, digits, and . _ - / : (tag)");
        }
        Ok(Self { registry, digest })
    }
}

/// An image as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Image {
    /// Its id.
    pub image_id: Uuid,
    /// Its name, unique among its owner's images.
    pub name: String,
    /// `sha256:` and the hex SHA-256 of its archive.
    pub digest: String,
    /// The archive's size in bytes.
    pub size: u64,
    /// The kind of archive, or `registry`.
    pub format: ImageFormat,
    /// For a registry image: the reference landing zones pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Who sees it.
    pub visibility: ImageVisibility,
    /// Who uploaded it.
    pub owner_id: Uuid,
    /// Its project.
    pub project_id: Uuid,
    /// When it was uploaded.
    pub created_at: DateTime<Utc>,
}

/// The network a station's containers get ([`crate::Station::container_network`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ContainerNetwork {
    /// The host's own network.
    #[default]
    Host,
    /// None: only loopback inside the container.
    None,
}

impl ContainerNetwork {
    /// The name used on the wire, in the CLI and by container engines.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::None => "none",
        }
    }

    /// The stricter of two settings (a landing zone may allow less than its station).
    pub fn within(self, cap: Self) -> Self {
        if self == Self::None || cap == Self::None { Self::None } else { Self::Host }
    }
}

impl std::fmt::Display for ContainerNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ContainerNetwork {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "host" => Ok(Self::Host),
            "none" => Ok(Self::None),
            other => Err(format!("{other:?} is not a container network (host, none)")),
        }
    }
}

/// How a mission or a run names its image: by name, or by `sha256:` digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef<'a> {
    /// An image's name.
    Name(&'a str),
    /// `sha256:` and 64 hex digits, lowercase.
    Digest(&'a str),
}

impl<'a> ImageRef<'a> {
    /// Reads how an image is named; a `sha256:` prefix makes it a digest.
    pub fn parse(text: &'a str) -> Result<Self, String> {
        match text.strip_prefix("sha256:") {
            Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
                Ok(Self::Digest(text))
            }
            Some(_) => Err(format!("{text:?} is not an image digest: `sha256:` and 64 lowercase hex digits")),
            None => check_image_name(text).map(|()| Self::Name(text)),
        }
    }
}

/// Checks an image's name: 1 to [`MAX_IMAGE_NAME`] characters of ASCII letters, digits, and
/// `.`, `_`, `-`, `:`, `/`, starting with a letter or digit (`python:3.12`, `lab/solver`).
pub fn check_image_name(name: &str) -> Result<(), String> {
    let first_ok = name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    let rest_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b));
    if !first_ok || !rest_ok || name.len() > MAX_IMAGE_NAME || name.starts_with("sha256:") {
        return Err(format!(
            "{name:?} is not an image name: 1 to {MAX_IMAGE_NAME} ASCII letters, digits, `.`, `_`, `-`, `:` or \
             `/`, starting with a letter or digit, and not `sha256:`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_references_name_their_registry_and_are_pinned_by_digest() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let good = format!("registry.example.org/lab/solver:2.1@{digest}");
        assert_eq!(
            RegistryReference::parse(&good),
            Ok(RegistryReference { registry: "registry.example.org", digest: &digest })
        );
        let local = format!("127.0.0.1:5000/debian@{digest}");
        assert_eq!(RegistryReference::parse(&local).unwrap().registry, "127.0.0.1:5000");
        for bad in [
            "registry.example.org/lab/solver:2.1".to_owned(),
            format!("debian@{digest}"),
            format!("library/debian@{digest}"),
            format!("registry.example.org/Lab@{digest}"),
            "registry.example.org/lab@sha256:12".to_owned(),
        ] {
            assert!(RegistryReference::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_and_digests_are_told_apart_and_checked() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(ImageRef::parse(&digest), Ok(ImageRef::Digest(&digest)));
        assert_eq!(ImageRef::parse("python:3.12"), Ok(ImageRef::Name("python:3.12")));
        assert_eq!(ImageRef::parse("lab/solver-2"), Ok(ImageRef::Name("lab/solver-2")));
        for bad in ["", "-x", "a b", "../etc", "sha256:12", &format!("sha256:{}", "AB".repeat(32)), &"a".repeat(129)] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ImageRef::parse("../etc").unwrap_err().contains("not an image name"));
    }
}
