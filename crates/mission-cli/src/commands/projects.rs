//! `mission projects`: projects and their members.

use anyhow::bail;
use clap::Subcommand;
use mission_client::{Client, CreateProject, Project, ProjectRole, UpdateProject, Uuid};

use crate::output::Output;
use crate::session;

/// Manage projects: the teams that own missions and are charged for jobs.
///
/// Everyone has a personal project, `~USERNAME`, where missions and jobs go that name no
/// other. Admins create shared projects and add members; a project's managers add members
/// too. Members (role `member` or `manager`) own missions in a project and run jobs charged to
/// it (`mission missions create --project NAME`, `mission run --project NAME`); viewers read.
#[derive(Debug, Subcommand)]
pub enum ProjectsCommand {
    /// List your projects (all, for admins).
    List,
    /// Show a project and its members.
    Get {
        /// Name or id.
        project: String,
    },
    /// Create a shared project (admins).
    Create {
        /// Unique name (not starting with `~`).
        name: String,
        /// Free text.
        #[arg(long)]
        description: Option<String>,
    },
    /// Rename a project (admins) or change its description (its managers too).
    Update {
        /// Name or id.
        project: String,
        /// New name.
        #[arg(long)]
        name: Option<String>,
        /// New description.
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a shared project that holds no missions and no unfinished jobs (admins).
    Delete {
        /// Name or id.
        project: String,
    },
    /// List a project's members and their roles.
    Members {
        /// Name or id.
        project: String,
    },
    /// Add a member to a project, or change their role.
    AddMember {
        /// Name or id.
        project: String,
        /// Username or user id.
        user: String,
        /// viewer (reads), member (owns missions, runs jobs) or manager (also manages members).
        #[arg(long, default_value = "member", value_parser = parse_role)]
        role: ProjectRole,
    },
    /// Take a user out of a project.
    RemoveMember {
        /// Name or id.
        project: String,
        /// Username or user id.
        user: String,
    },
}

fn parse_role(given: &str) -> Result<ProjectRole, String> {
    given.parse()
}

/// Most projects one page lists.
const PAGE: u32 = 200;

/// The id of a project given by id or name, among those the caller sees.
pub async fn resolve_project(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(given) {
        return Ok(id);
    }
    let projects = all_projects(client).await?;
    match projects.iter().find(|p| p.name == given) {
        Some(p) => Ok(p.project_id),
        None => {
            let names: Vec<_> = projects.iter().map(|p| p.name.as_str()).collect();
            bail!("no project {given:?} of yours; yours: {}", names.join(", "))
        }
    }
}

/// [`resolve_project`] of a flag that may be absent.
pub async fn resolve_optional_project(client: &Client, given: Option<&str>) -> anyhow::Result<Option<Uuid>> {
    match given {
        Some(given) => Ok(Some(resolve_project(client, given).await?)),
        None => Ok(None),
    }
}

/// The names of the projects the caller sees, for PROJECT columns.
pub struct ProjectNames(std::collections::HashMap<Uuid, String>);

impl ProjectNames {
    /// The project's name, or its id where the caller does not see it.
    pub fn name(&self, project_id: Uuid) -> String {
        self.0.get(&project_id).cloned().unwrap_or_else(|| project_id.to_string())
    }
}

/// The names of the caller's projects (every project's, for an admin).
pub async fn project_names(client: &Client) -> anyhow::Result<ProjectNames> {
    Ok(ProjectNames(all_projects(client).await?.into_iter().map(|p| (p.project_id, p.name)).collect()))
}

async fn all_projects(client: &Client) -> anyhow::Result<Vec<Project>> {
    let mut projects = Vec::new();
    for page in 1.. {
        let listed = client.list_projects(page, PAGE).await?;
        projects.extend(listed.projects);
        if !listed.has_more {
            break;
        }
    }
    Ok(projects)
}

/// A project's role column: the caller's role, or `-` for an admin outside it.
fn role(project: &Project) -> String {
    project.role.map_or_else(|| "-".to_owned(), |r| r.to_string())
}

impl ProjectsCommand {
    /// Runs the subcommand.
    pub async fn run(self, server: Option<&str>, out: Output) -> anyhow::Result<()> {
        let client = session::connect(server).await?;
        match self {
            ProjectsCommand::List => {
                let projects = all_projects(&client).await?;
                let rows = projects
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.project_id.to_string(),
                            role(p),
                            p.members.to_string(),
                            p.description.clone(),
                        ]
                    })
                    .collect();
                out.table(&projects, &["NAME", "ID", "YOUR ROLE", "MEMBERS", "DESCRIPTION"], rows);
            }
            ProjectsCommand::Get { project } => show(&client, &project, out).await?,
            ProjectsCommand::Create { name, description } => {
                let project = client.create_project(&CreateProject { name, description }).await?;
                out.done(&project, &format!("created project {} ({})", project.name, project.project_id));
            }
            ProjectsCommand::Update { project, name, description } => {
                let id = resolve_project(&client, &project).await?;
                let project = client.update_project(id, &UpdateProject { name, description }).await?;
                out.done(&project, &format!("updated project {}", project.name));
            }
            ProjectsCommand::Delete { project } => {
                let id = resolve_project(&client, &project).await?;
                if !client.delete_project(id).await? {
                    bail!("no project {project}");
                }
                out.done(&serde_json::json!({ "deleted": id }), &format!("deleted project {project}"));
            }
            ProjectsCommand::Members { project } => {
                let members = client.project_members(resolve_project(&client, &project).await?).await?;
                let rows = members
                    .iter()
                    .map(|m| {
                        let added = m.added_at.format("%Y-%m-%d").to_string();
                        vec![m.username.clone(), m.user_id.to_string(), m.role.to_string(), added]
                    })
                    .collect();
                out.table(&members, &["USER", "ID", "ROLE", "ADDED"], rows);
            }
            ProjectsCommand::AddMember { project, user, role } => {
                let member = client.set_project_member(resolve_project(&client, &project).await?, &user, role).await?;
                out.done(&member, &format!("{} is a {} of {project}", member.username, member.role));
            }
            ProjectsCommand::RemoveMember { project, user } => {
                if !client.remove_project_member(resolve_project(&client, &project).await?, &user).await? {
                    bail!("{user} is not a member of {project}");
                }
                out.done(&serde_json::json!({ "removed": user }), &format!("removed {user} from {project}"));
            }
        }
        Ok(())
    }
}

/// `mission projects get`: the project, then its members.
async fn show(client: &Client, given: &str, out: Output) -> anyhow::Result<()> {
    let project = client.get_project(resolve_project(client, given).await?).await?;
    let members = client.project_members(project.project_id).await?;
    if out.json {
        out.done(&serde_json::json!({ "project": project, "members": members }), "");
        return Ok(());
    }
    let kind = if project.personal.is_some() { "personal" } else { "shared" };
    out.record(
        &project,
        vec![
            ("name", project.name.clone()),
            ("id", project.project_id.to_string()),
            ("kind", kind.to_owned()),
            ("your role", role(&project)),
            ("description", project.description.clone()),
        ],
    );
    println!();
    let rows = members.iter().map(|m| vec![m.username.clone(), m.role.to_string()]).collect();
    out.table(&members, &["MEMBER", "ROLE"], rows);
    Ok(())
}
