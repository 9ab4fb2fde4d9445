//! The error body of every API failure: RFC 9457 `application/problem+json`.

use serde::{Deserialize, Serialize};

/// Content type of [`Problem`] bodies.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem document.
///
/// `kind` (serialised as `type`) is stable and meant for programs: for example
/// `urn:mission:problem:not-found`. `detail` is for people and names the offending field or value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// Stable identifier of the kind of error, a URN.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind of error, the same for every occurrence.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong this time, naming the field or limit involved.
    #[serde(default)]
    pub detail: String,
    /// The request field at fault, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{} ({})", self.title, self.status)
        } else {
            write!(f, "{} ({}): {}", self.title, self.status, self.detail)
        }
    }
}
