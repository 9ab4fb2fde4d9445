//! The signed-in user.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A user of the service, as `GET /api/v1/me` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct User {
    /// The user's id; missions carry it as `user_id`.
    pub user_id: Uuid,
    /// Login name for built-in accounts, the provider's `sub` for external ones.
    pub username: String,
    /// Whether the user may see and change everything.
    pub admin: bool,
    /// When the account was created or first seen.
    pub created_at: DateTime<Utc>,
}
