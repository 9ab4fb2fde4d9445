//! Mission files as the API lists them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Metadata of one file of a mission (spec "FileListing").
///
/// `path` is the file's folder relative to the mission root (`""` at the top level) and
/// `filename` its base name, so joining `path` and `filename` (or `name`, the same value, which
/// the spec's deletion example reads) gives the file's relative path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileListing {
    /// Base name of the file.
    pub filename: String,
    /// The same as `filename`, for clients that read `name`.
    pub name: String,
    /// Folder of the file relative to the mission root; `""` at the top level.
    pub path: String,
    /// Size in bytes.
    pub file_size: u64,
    /// When the file's current content was uploaded.
    pub modified_at: DateTime<Utc>,
    /// SHA-256 of the content, lower-case hex; also the file's `ETag`.
    pub sha256: String,
}

impl FileListing {
    /// The file's path relative to the mission root, `path/filename`.
    ///
    /// ```
    /// # use mission_api::FileListing;
    /// let f = FileListing { filename: "a.csv".into(), name: "a.csv".into(), path: "data/raw".into(),
    ///     file_size: 1, modified_at: chrono::Utc::now(), sha256: String::new() };
    /// assert_eq!(f.relative_path(), "data/raw/a.csv");
    /// ```
    pub fn relative_path(&self) -> String {
        if self.path.is_empty() { self.filename.clone() } else { format!("{}/{}", self.path, self.filename) }
    }
}
