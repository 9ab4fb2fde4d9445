//! Cargo bays: the storage locations a mission's input files come from and its results go to.
//!
//! Every server has the [default cargo bay](DEFAULT_CARGO_BAY_ID), its own storage, used when a
//! mission names none. Users add `s3` bays (a bucket on AWS or any S3-compatible server); admins
//! may add `local` bays (a directory on the server host), for themselves or for a user. A bay
//! belongs to one user, and only that user's missions may name it. Secrets go in with
//! [`CreateCargoBay`] and never come back out: [`CargoBay`] says only whether a bay has them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Id of the server's default storage. A mission naming it (or no bay at all) keeps its files
/// there.
pub const DEFAULT_CARGO_BAY_ID: Uuid = Uuid::from_u128(0x6d697373_696f_4e00_8000_000000000001);

/// What kind of storage a cargo bay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CargoBayKind {
    /// The server's own storage.
    Default,
    /// An S3 bucket (AWS or S3-compatible), optionally under a key prefix.
    S3,
    /// A directory on the server host.
    Local,
}

impl CargoBayKind {
    /// The name used on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::S3 => "s3",
            Self::Local => "local",
        }
    }
}

impl std::fmt::Display for CargoBayKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cargo bay as the API returns it. Credentials are never returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CargoBay {
    /// The id missions name in `source_storage_id` / `destination_storage_id`.
    pub storage_id: Uuid,
    /// A name for people.
    pub name: String,
    /// What kind of storage it is.
    pub kind: CargoBayKind,
    /// The owner; absent for the default bay, which everyone may use.
    pub user_id: Option<Uuid>,
    /// S3: the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// S3: the key prefix every object of this bay lives under (no leading or trailing `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// S3: the endpoint URL of an S3-compatible server; AWS when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// S3: the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Local: the directory on the server host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Whether the bay holds credentials (they are kept encrypted and never returned).
    pub has_credentials: bool,
    /// When the bay was added; absent for the default bay.
    pub created_at: Option<DateTime<Utc>>,
}

/// Body of `POST /api/v1/cargo-bays`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateCargoBay {
    /// A name for people.
    pub name: String,
    /// `s3` or `local` (admins only).
    pub kind: CargoBayKind,
    /// S3: the bucket (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// S3: a key prefix to keep this bay's objects under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// S3: endpoint URL of an S3-compatible server; AWS when absent. Non-admins may name only the
    /// endpoints the server allows (`mission server --s3-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// S3: the region (`us-east-1` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// S3: access key id; without one the bucket is read anonymously (a public bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// S3: the secret access key that goes with `access_key_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// S3: a session token for temporary credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
    /// Local: an absolute path to an existing directory on the server host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Admins only: the user the bay is for (the caller when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<Uuid>,
}

impl CreateCargoBay {
    /// A request with only `name` and `kind` set.
    pub fn new(name: impl Into<String>, kind: CargoBayKind) -> Self {
        Self {
            name: name.into(),
            kind,
            bucket: None,
            prefix: None,
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            path: None,
            user_id: None,
        }
    }
}
