//! The projects pages: the viewer's projects, and one project with its members, what it holds
//! on each station against its limits (as bars), its budget spent this period, what its jobs
//! used a day over the last 30 days and by whom (as charts) and, for its managers and admins,
//! its latest audit entries. They read
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
    /// What its jobs used a day over the last [`CHART_DAYS`] days, one chart a measure.
    charts: Vec<Chart>,
    /// The charts' first and last days.
    chart_days: (chrono::NaiveDate, chrono::NaiveDate),
    /// The same days' use by user.
    users: Vec<UserUse>,
}

/// How many days of use a project's page draws, today's last.
const CHART_DAYS: usize = 30;

/// A chart of a measure a day, with its caption (its name and total).
struct Chart {
    caption: String,
    svg: String,
}

/// What one user's jobs charged to a project used over the charts' days.
struct UserUse {
    user: String,
    jobs: u64,
    cpu_hours_held: f64,
    gpu_hours: f64,
    energy_kwh: f64,
    co2e_kg: f64,
    /// Per currency, in words; `-` for nothing charged.
    cost: String,
    /// Its kWh a day, as a small chart.
    energy_chart: String,
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
        let part = |spent: f64, limit: Option<f64>| limit.filter(|l| *l > 0.0).map_or(0.0, |l| spent / l);
        let money = b.spent_money.as_ref().map_or(0.0, |m| m.amount);
        let most = part(b.spent_cpu_hours, b.budget.cpu_hours)
            .max(part(b.spent_gpu_hours, b.budget.gpu_hours))
            .max(part(b.spent_kwh, b.budget.kwh))
            .max(part(money, b.budget.money.as_ref().map(|m| m.amount)));
        (b.budget.period.words(b.period_start), (most * 100.0).clamp(0.0, 100.0) as u64)
    });
    let audit = if who.admin || project.role == Some(ProjectRole::Manager) {
        let filter = AuditFilter { project_id: Some(project_id), limit: AUDIT_SHOWN, ..Default::default() };
        let entries = crate::domain::audit::entries(&app, who, filter).await.map_err(ApiError::from)?;
        Some(entries.into_iter().map(audit_row).collect())
    } else {
        None
    };
    let (charts, chart_days, users) = usage_charts(&app, project_id).await.map_err(ApiError::from)?;
    let frame = Frame::new(&viewer, "projects");
    let shown = ProjectPage {
        frame,
        project,
        members,
        stations,
        budget,
        budget_period,
        budget_percent,
        audit,
        charts,
        chart_days,
        users,
    };
    Ok(page(StatusCode::OK, &shown))
}

/// What a project's jobs used a day over the last [`CHART_DAYS`] days (UTC, today's last), as
/// charts of CPU-hours, GPU-hours, kWh and CO2e, and by user. For those who may read the project.
#[allow(clippy::type_complexity)]
async fn usage_charts(
    app: &AppState,
    project_id: uuid::Uuid,
) -> Result<(Vec<Chart>, (chrono::NaiveDate, chrono::NaiveDate), Vec<UserUse>), mission_store::StoreError> {
    let today = mission_store::now().date_naive();
    let first = today - chrono::Days::new(CHART_DAYS as u64 - 1);
    let days: Vec<chrono::NaiveDate> = first.iter_days().take(CHART_DAYS).collect();
    let since = first.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc();
    let scope = mission_store::UsageScope::Project(project_id);
    let groups = app.store.usage_by(&mission_store::UsageGrouping::User, &scope, Some(since), None).await?;
    let per_day = |measure: fn(&mission_api::UsageDay) -> f64| -> Vec<f64> {
        let daily = groups.iter().flat_map(|g| &g.daily);
        let mut values = vec![0.0; days.len()];
        for d in daily {
            if let Some(i) = days.iter().position(|day| *day == d.day) {
                values[i] += measure(d);
            }
        }
        values
    };
    type Measure = fn(&mission_api::UsageDay) -> f64;
    let measures: [(&str, &str, &str, Measure); 4] = [
        ("chart-cpu", "CPU-hours held a day", "CPU-hours", |d| d.cpu_hours_held),
        ("chart-gpu", "GPU-hours held a day", "GPU-hours", |d| d.gpu_hours),
        ("chart-energy", "Energy a day", "kWh", |d| d.energy_kwh),
        ("chart-co2e", "CO2e a day", "kg CO2e", |d| d.co2e_g / 1000.0),
    ];
    let charts = measures
        .into_iter()
        .map(|(id, title, unit, measure)| {
            let values = per_day(measure);
            let total = super::charts::figure(values.iter().sum());
            Chart {
                caption: format!("{title}: {total} {unit} in all"),
                svg: super::charts::daily_bars(id, title, unit, &days, &values),
            }
        })
        .collect();
    let users = groups
        .iter()
        .enumerate()
        .map(|(i, g)| UserUse {
            user: g.group.clone().unwrap_or_else(|| "(deleted user)".to_owned()),
            jobs: g.jobs,
            cpu_hours_held: g.cpu_hours_held,
            gpu_hours: g.gpu_hours,
            energy_kwh: g.energy_kwh,
            co2e_kg: g.co2e_g / 1000.0,
            cost: if g.cost.is_empty() {
                "-".to_owned()
            } else {
                g.cost.iter().map(|c| format!("{} {:.2}", c.currency, c.amount)).collect::<Vec<_>>().join(", ")
            },
            energy_chart: {
                let kwh: Vec<f64> = days
                    .iter()
                    .map(|day| g.daily.iter().find(|d| d.day == *day).map_or(0.0, |d| d.energy_kwh))
                    .collect();
                let title = format!("{}'s energy a day", g.group.as_deref().unwrap_or("a deleted user"));
                super::charts::daily_bars(&format!("user-{i}-energy"), &title, "kWh", &days, &kwh)
            },
        })
        .collect();
    Ok((charts, (first, today), users))
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
