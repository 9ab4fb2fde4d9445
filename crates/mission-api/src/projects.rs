//! Projects: the teams that own missions and are charged for jobs.
//!
//! Every mission belongs to one project and every job is charged to one. Admins create projects
//! and name their members, each with a [`ProjectRole`]; a project's managers manage its members
//! too. Every user also has a **personal project** ([`Project::personal`]) whose id is the user's
//! own id and whose one member (a manager) is that user: it is where missions and jobs go that
//! name no project, so that nothing changes for people who never join one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a member of a project may do there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProjectRole {
    /// Reads the project.
    Viewer,
    /// Owns missions in the project and runs jobs charged to it.
    Member,
    /// A member who also manages the project's members and sees its usage and audit trail.
    Manager,
}

impl ProjectRole {
    /// The role as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Member => "member",
            Self::Manager => "manager",
        }
    }

    /// Whether the role may own missions in the project and charge jobs to it.
    pub fn may_run(self) -> bool {
        self >= Self::Member
    }
}

impl std::fmt::Display for ProjectRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ProjectRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Self::Viewer),
            "member" => Ok(Self::Member),
            "manager" => Ok(Self::Manager),
            other => Err(format!("unknown project role {other:?}; roles are viewer, member and manager")),
        }
    }
}

/// A project as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Project {
    /// Id that missions and run requests name in `project_id`.
    pub project_id: Uuid,
    /// Unique name. A personal project is named after its user, with a leading `~`.
    pub name: String,
    /// Free text.
    pub description: String,
    /// The user whose personal project this is (its id is theirs); absent for a shared project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal: Option<Uuid>,
    /// The caller's role in the project; absent when the caller is an admin who is no member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ProjectRole>,
    /// How many members it has.
    pub members: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its name or description last changed.
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/projects` (admins only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// Unique name, 1 to 256 characters, not starting with `~` (personal projects' mark).
    pub name: String,
    /// Free text; empty when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Body of `PATCH /api/v1/projects/{id}`: only the fields given change. Admins may rename a
/// project; its managers may change its description.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateProject {
    /// New name (admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One page of `GET /api/v1/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectPage {
    /// The projects on this page, by name.
    pub projects: Vec<Project>,
    /// Page number, from 1.
    pub page: u32,
    /// Page size asked for.
    pub items: u32,
    /// Whether a further page has projects.
    pub has_more: bool,
}

/// A member of a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectMember {
    /// The user.
    pub user_id: Uuid,
    /// The user's name.
    pub username: String,
    /// What they may do in the project.
    pub role: ProjectRole,
    /// When they were added (or their role last changed).
    pub added_at: DateTime<Utc>,
}

/// Body of `PUT /api/v1/projects/{id}/members/{user}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetProjectMember {
    /// The member's role.
    pub role: ProjectRole,
}
