//! The projects pages: the viewer's projects, and one project with its members, what it holds
//! on each station against its limits (as bars), its budget spent this period and, for its
//! managers and admins, its latest audit entries. They read
//! through the projects domain layer, as the API does, so a page shows what the viewer may see.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{AuditEntry, BudgetStatus, Project, ProjectMember, ProjectRole, StationLimits};
use mission_store::audit::AuditFilter;

use super::session::Viewer;
use super::{Frame, PageError, PageResult, page};
use crate::AppState;
use crate::domain::projects;
use crate::http::error::ApiError;
use crate::http::routes::extract::parse_id;

/// Most projects the list shows.
const LISTED: u32 = 200;

#[derive(Template)]
#[template(path = "console/projects.html")]
struct ProjectsPage {
    frame: Frame,
    projects: Vec<Project>,
}

/// `GET /projects`: the viewer's projects (every project, for admins).
pub async fn list(State(app): State<AppState>, viewer: Viewer) -> PageResult {
    let (projects, _) = projects::list(&app, viewer.principal(), 1, LISTED).await.map_err(ApiError::from)?;
    Ok(page(StatusCode::OK, &ProjectsPage { frame: Frame::new(&viewer, "projects"), projects }))
}

/// One amount in use against a limit, as a bar.
struct Bar {
    label: &'static str,
    used: u64,
    /// Nominal plus what may be borrowed; `None` without a limit.
    most: Option<u64>,
    nominal: u64,
}

impl Bar {
    /// The bar's fill, as a part of 100 (full without a limit only when something is used).
    fn percent(&self) -> u64 {
        match self.most {
            Some(0) | None => 0,
            Some(most) => (self.used * 100 / most).min(100),
        }
    }

    /// The limit in words.
    fn limit(&self) -> String {
        match self.most {
            None if self.nominal == 0 => "no limit".to_owned(),
            None => format!("{} nominal, may borrow any", self.nominal),
            Some(most) if most == self.nominal => format!("{most}, may not borrow"),
            Some(most) => format!("{most} ({} nominal)", self.nominal),
        }
    }
}

/// A station's limits and use, as the project page shows them.
struct StationRow {
    limits: StationLimits,
    bars: Vec<Bar>,
}

#[derive(Template)]
#[template(path = "console/project.html")]
struct ProjectPage {
    frame: Frame,
    project: Project,
    members: Vec<ProjectMember>,
    stations: Vec<StationRow>,
    budget: Option<BudgetStatus>,
    /// The budget's period in words ("for November 2026").
    budget_period: String,
    /// The largest part of the budget spent, as a part of 100.
    budget_percent: u64,
    /// The latest changes to the project's resources, for its managers and admins (`None` for
    /// others, who may not read them).
    audit: Option<Vec<AuditRow>>,
}

/// An audit entry as the project page lists it.
struct AuditRow {
    entry: AuditEntry,
    /// Who, in words.
    actor: String,
    /// What changed, as compact JSON (empty when nothing more is said).
    changes: String,
}

/// How many of a project's latest audit entries its page shows.
const AUDIT_SHOWN: u32 = 20;

/// `GET /projects/{id}`: one project.
pub async fn show(State(app): State<AppState>, viewer: Viewer, Path(id): Path<String>) -> PageResult {
    let who = viewer.principal();
    let project_id = parse_id("project_id", &id)?;
    let project = projects::visible(&app, who, project_id).await.map_err(ApiError::from)?;
    let members = projects::members(&app, who, project_id).await.map_err(ApiError::from)?;
    let limits = projects::limits(&app, who, project_id).await.map_err(ApiError::from)?;
    let budget = match projects::budget(&app, who, project_id).await.map_err(ApiError::from) {
        Ok(budget) => Some(budget),
        Err(e) if e.status() == StatusCode::NOT_FOUND => None,
        Err(e) => return Err(PageError::from(e)),
    };
    let stations = limits.into_iter().map(|limits| StationRow { bars: bars(&limits), limits }).collect();
    let (budget_period, budget_percent) = budget.as_ref().map_or((String::new(), 0), |b| {
        let part = |spent: f64, hours: Option<f64>| hours.filter(|h| *h > 0.0).map_or(0.0, |h| spent / h);
        let most = part(b.spent_cpu_hours, b.budget.cpu_hours).max(part(b.spent_gpu_hours, b.budget.gpu_hours));
        (b.budget.period.words(b.period_start), (most * 100.0).clamp(0.0, 100.0) as u64)
    });
    let audit = if who.admin || project.role == Some(ProjectRole::Manager) {
        let filter = AuditFilter { project_id: Some(project_id), limit: AUDIT_SHOWN, ..Default::default() };
        let entries = crate::domain::audit::entries(&app, who, filter).await.map_err(ApiError::from)?;
        Some(entries.into_iter().map(audit_row).collect())
    } else {
        None
    };
    let frame = Frame::new(&viewer, "projects");
    let shown = ProjectPage { frame, project, members, stations, budget, budget_period, budget_percent, audit };
    Ok(page(StatusCode::OK, &shown))
}

fn audit_row(entry: AuditEntry) -> AuditRow {
    let actor = entry.actor.clone().or_else(|| entry.actor_id.map(|id| id.to_string())).unwrap_or_default();
    let said = entry.changes.as_object().is_some_and(|fields| !fields.is_empty());
    let changes = if said { entry.changes.to_string() } else { String::new() };
    AuditRow { entry, actor, changes }
}

/// The bars of a station's limits: CPUs, memory and GPUs in use against nominal plus borrowing.
fn bars(l: &StationLimits) -> Vec<Bar> {
    let (most_cpus, most_memory, most_gpus) = l.limits.ceiling();
    let nominal = l.limits.nominal.unwrap_or_default();
    vec![
        Bar { label: "CPUs", used: l.in_use.cpus, most: most_cpus, nominal: nominal.cpus.map_or(0, u64::from) },
        Bar {
            label: "Memory (MB)",
            used: l.in_use.memory_mb,
            most: most_memory,
            nominal: nominal.memory_mb.unwrap_or(0),
        },
        Bar { label: "GPUs", used: l.in_use.gpus, most: most_gpus, nominal: nominal.gpus.map_or(0, u64::from) },
    ]
}
