//! Projects and their members (see [`mission_api::projects`]).
//!
//! Who may do what: admins create, rename and delete projects and see every one; a project's
//! members (any role) see it and its members; its managers (and admins) change its
//! description and its members. A project someone may not see is a 404 to them, never
//! revealing that it exists. A personal project is its user's alone: it keeps its name, its one
//! member and its life (it goes only with its user).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use mission_api::{
    BudgetStatus, CreateProject, Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectRole, ResourcesInUse,
    StationLimits, UpdateProject, UsageReport,
};
use mission_store::{PERSONAL_MARK, UsageGrouping, UsageScope};
use uuid::Uuid;

use super::{DomainError, DomainResult, check_description, checked_name};
use serde_json::json;

use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};

/// Creates a shared project (admins only).
pub async fn create(app: &AppState, who: Principal, req: CreateProject) -> DomainResult<Project> {
    if !who.admin {
        return Err(DomainError::Forbidden("only admins may create projects".into()));
    }
    let name = shared_name(&req.name)?;
    let description = req.description.unwrap_or_default();
    check_description(&description)?;
    let project_id = Uuid::new_v4();
    let change = Change::new("project.create", "project", project_id).named(&name).in_project(project_id);
    audit::note(who, change.with(json!({ "name": name, "description": description })));
    app.store.insert_project(project_id, &name, &description, mission_store::now()).await?;
    visible(app, who, project_id).await
}

/// One page of the projects the caller is a member of (every project, for an admin), by name.
pub async fn list(app: &AppState, who: Principal, page: u32, items: u32) -> DomainResult<(Vec<Project>, bool)> {
    Ok(app.store.projects(who.user_id, who.admin, page, items).await?)
}

/// A project the caller may see: a member's (any role), or any for an admin.
pub async fn visible(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Project> {
    match app.store.project(project_id, who.user_id).await? {
        Some(project) if who.admin || project.role.is_some() => Ok(project),
        _ => Err(DomainError::not_found("project", project_id)),
    }
}

/// A project the caller manages: 404 if they cannot see it, 403 if they only belong to it.
async fn managed(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Project> {
    let project = visible(app, who, project_id).await?;
    if who.admin || project.role == Some(ProjectRole::Manager) {
        Ok(project)
    } else {
        Err(DomainError::Forbidden(format!("only a manager of project {} or an admin may change it", project.name)))
    }
}

/// Changes a project's name (admins only) or description (its managers too).
pub async fn update(app: &AppState, who: Principal, project_id: Uuid, req: UpdateProject) -> DomainResult<Project> {
    let project = managed(app, who, project_id).await?;
    let name = match &req.name {
        Some(_) if !who.admin => return Err(DomainError::Forbidden("only admins may rename a project".into())),
        Some(_) if project.personal.is_some() => {
            return Err(DomainError::Conflict(format!(
                "{} is a personal project and keeps its user's name",
                project.name
            )));
        }
        Some(name) => Some(shared_name(name)?),
        None => None,
    };
    if let Some(description) = &req.description {
        check_description(description)?;
    }
    let now = mission_store::now();
    let change = Change::new("project.update", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(&req));
    if !app.store.update_project(project_id, name.as_deref(), req.description.as_deref(), now).await? {
        return Err(DomainError::not_found("project", project_id));
    }
    visible(app, who, project_id).await
}

/// Deletes a shared project that holds no missions and has no unfinished jobs (admins only).
/// Ended jobs keep its id, so what it used stays accounted.
pub async fn delete(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<()> {
    let project = visible(app, who, project_id).await?;
    if !who.admin {
        return Err(DomainError::Forbidden("only admins may delete projects".into()));
    }
    if project.personal.is_some() {
        return Err(DomainError::Conflict(format!(
            "{} is a personal project: it goes only with its user",
            project.name
        )));
    }
    let (missions, jobs) = app.store.project_holdings(project_id).await?;
    if missions > 0 || jobs > 0 {
        return Err(DomainError::Conflict(format!(
            "project {} holds {missions} mission(s) and {jobs} job(s) that have not ended; move the missions to \
             another project and let the jobs end first",
            project.name
        )));
    }
    let change = Change::new("project.delete", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change);
    if app.store.delete_project(project_id).await? {
        Ok(())
    } else {
        // A mission moved in after the count: the store kept the project.
        Err(DomainError::Conflict(format!("project {} gained a mission meanwhile; try again", project.name)))
    }
}

/// The members of a project the caller may see, by username.
pub async fn members(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Vec<ProjectMember>> {
    visible(app, who, project_id).await?;
    Ok(app.store.project_members(project_id).await?)
}

/// Makes `user` a member of a shared project with `role`, or changes their role (its managers
/// and admins).
pub async fn set_member(
    app: &AppState,
    who: Principal,
    project_id: Uuid,
    user: Uuid,
    role: ProjectRole,
) -> DomainResult<ProjectMember> {
    let project = shared_and_managed(app, who, project_id).await?;
    let change = Change::new("project.member.set", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(json!({ "user_id": user, "role": role })));
    app.store.set_project_member(project.project_id, user, role, mission_store::now()).await?;
    let members = app.store.project_members(project_id).await?;
    members.into_iter().find(|m| m.user_id == user).ok_or_else(|| DomainError::not_found("project", project_id))
}

/// Removes a member of a shared project (its managers and admins).
pub async fn remove_member(app: &AppState, who: Principal, project_id: Uuid, user: Uuid) -> DomainResult<()> {
    let project = shared_and_managed(app, who, project_id).await?;
    let change =
        Change::new("project.member.remove", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(json!({ "user_id": user })));
    if app.store.remove_project_member(project.project_id, user).await? {
        Ok(())
    } else {
        Err(DomainError::not_found("member of the project", user))
    }
}

async fn shared_and_managed(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Project> {
    let project = managed(app, who, project_id).await?;
    if project.personal.is_some() {
        return Err(DomainError::Conflict(format!(
            "{} is a personal project: its one member is its user; create a shared project to work with others",
            project.name
        )));
    }
    Ok(project)
}

/// `who`'s role in a project (a personal project's user is its manager), if any.
pub async fn role(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Option<ProjectRole>> {
    if project_id == who.user_id {
        return Ok(Some(ProjectRole::Manager));
    }
    Ok(app.store.project_role(project_id, who.user_id).await?)
}

/// Refuses anyone but an admin to `act`.
fn admins_only(who: Principal, act: &str) -> DomainResult<()> {
    if who.admin { Ok(()) } else { Err(DomainError::Forbidden(format!("only admins {act}"))) }
}

/// The largest share a project may have.
pub const MAX_SHARE: f64 = 1_000_000.0;

/// Sets a project's limits on a station (admins only), replacing any; placement applies them
/// from its next pass. Answers the limits with what the project holds there now.
pub async fn set_limits(
    app: &AppState,
    who: Principal,
    project_id: Uuid,
    station_id: Uuid,
    limits: ProjectLimits,
) -> DomainResult<StationLimits> {
    let project = visible(app, who, project_id).await?;
    admins_only(who, "set a project's limits")?;
    if app.store.station(station_id).await?.is_none() {
        return Err(DomainError::not_found("station", station_id));
    }
    if let Some(share) = limits.share
        && !(share > 0.0 && share <= MAX_SHARE)
    {
        return Err(DomainError::invalid("share", format!("a weight above 0, at most {MAX_SHARE}")));
    }
    let change = Change::new("project.limits.set", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(json!({ "station_id": station_id, "limits": limits })));
    app.store.set_project_limits(project_id, station_id, &limits, mission_store::now()).await?;
    app.scheduler.limits_changed(project_id, station_id).await?;
    let all = limits_and_use(app, project_id).await?;
    all.into_iter().find(|l| l.station_id == station_id).ok_or_else(|| DomainError::not_found("project", project_id))
}

/// Removes a project's limits on a station (admins only): it may then use any free room there.
pub async fn delete_limits(app: &AppState, who: Principal, project_id: Uuid, station_id: Uuid) -> DomainResult<()> {
    let project = visible(app, who, project_id).await?;
    admins_only(who, "set a project's limits")?;
    let change =
        Change::new("project.limits.delete", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(json!({ "station_id": station_id })));
    if !app.store.delete_project_limits(project_id, station_id).await? {
        return Err(DomainError::not_found("limits of the project on station", station_id));
    }
    app.scheduler.limits_changed(project_id, station_id).await?;
    Ok(())
}

/// The largest budget, in CPU- or GPU-hours per period.
pub const MAX_BUDGET_HOURS: f64 = 1e12;

/// Sets a project's budget (admins only), replacing any; placement applies it from its next
/// pass, and its members are warned at once where 80% of it is spent already.
pub async fn set_budget(
    app: &AppState,
    who: Principal,
    project_id: Uuid,
    budget: ProjectBudget,
) -> DomainResult<BudgetStatus> {
    let project = visible(app, who, project_id).await?;
    admins_only(who, "set a project's budget")?;
    let amounts = [
        ("cpu_hours", budget.cpu_hours, "hours"),
        ("gpu_hours", budget.gpu_hours, "hours"),
        ("kwh", budget.kwh, "kWh"),
        ("money.amount", budget.money.as_ref().map(|m| m.amount), "an amount"),
    ];
    for (field, amount, what) in amounts {
        if let Some(amount) = amount
            && !(0.0..=MAX_BUDGET_HOURS).contains(&amount)
        {
            return Err(DomainError::invalid(field, format!("{what} from 0 to {MAX_BUDGET_HOURS}")));
        }
    }
    if let Some(money) = &budget.money
        && !mission_api::energy::is_currency(&money.currency)
    {
        return Err(DomainError::invalid(
            "money.currency",
            format!("an ISO 4217 code such as EUR, not {:?}", money.currency),
        ));
    }
    let change = Change::new("project.budget.set", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change.with(budget.clone()));
    app.store.set_project_budget(project_id, &budget, mission_store::now()).await?;
    app.scheduler.budget_changed(project_id).await?;
    budget_status(app, project_id).await?.ok_or_else(|| DomainError::not_found("project", project_id))
}

/// Removes a project's budget (admins only).
pub async fn delete_budget(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<()> {
    let project = visible(app, who, project_id).await?;
    admins_only(who, "set a project's budget")?;
    let change =
        Change::new("project.budget.delete", "project", project_id).named(&project.name).in_project(project_id);
    audit::note(who, change);
    if !app.store.delete_project_budget(project_id).await? {
        return Err(DomainError::not_found("budget of the project", project_id));
    }
    app.scheduler.budget_changed(project_id).await?;
    Ok(())
}

/// A project's budget and what it spent this period, for its members and admins.
pub async fn budget(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<BudgetStatus> {
    visible(app, who, project_id).await?;
    budget_status(app, project_id).await?.ok_or_else(|| DomainError::not_found("budget of the project", project_id))
}

async fn budget_status(app: &AppState, project_id: Uuid) -> DomainResult<Option<BudgetStatus>> {
    let Some(record) = app.store.project_budgets(Some(project_id)).await?.pop() else { return Ok(None) };
    let now = mission_store::now();
    let period_start = record.budget.period.start(now);
    let currency = record.budget.money.as_ref().map(|m| m.currency.clone());
    let spent = app.store.project_spent(project_id, period_start, currency.as_deref()).await?;
    Ok(Some(BudgetStatus {
        project_id,
        period_start,
        period_end: record.budget.period.end(now),
        budget: record.budget,
        spent_cpu_hours: spent.cpu_seconds / 3600.0,
        spent_gpu_hours: spent.gpu_seconds / 3600.0,
        spent_kwh: spent.kwh,
        spent_money: currency.map(|currency| mission_api::Cost { amount: spent.money, currency }),
        updated_at: record.updated_at,
    }))
}

/// What the ended jobs `who` may see used, grouped by `group_by` (`project`, `user` or
/// `label:KEY`), ended from `since` until before `until`: every job for an admin; their own and
/// those charged to the projects they manage for others.
pub async fn usage(
    app: &AppState,
    who: Principal,
    group_by: &str,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> DomainResult<UsageReport> {
    let grouping = match group_by {
        "project" => UsageGrouping::Project,
        "user" => UsageGrouping::User,
        other => match other.strip_prefix("label:") {
            Some(key) => {
                mission_api::labels::check_label_key(key)
                    .map_err(|e| DomainError::invalid("group_by", e.to_string()))?;
                UsageGrouping::Label(key.to_owned())
            }
            None => return Err(DomainError::invalid("group_by", "project, user or label:KEY")),
        },
    };
    let scope = if who.admin {
        UsageScope::All
    } else {
        UsageScope::Own { user_id: who.user_id, managed: app.store.managed_projects(who.user_id).await? }
    };
    let groups = app.store.usage_by(&grouping, &scope, since, until).await?;
    Ok(UsageReport { group_by: group_by.to_owned(), since, until, groups })
}

/// A project's limits on each station that has some, and what it holds and has queued there,
/// with the stations where it holds or queues jobs without limits; by station name.
pub async fn limits(app: &AppState, who: Principal, project_id: Uuid) -> DomainResult<Vec<StationLimits>> {
    visible(app, who, project_id).await?;
    limits_and_use(app, project_id).await
}

/// [`limits`], the caller's right to see them checked already.
async fn limits_and_use(app: &AppState, project_id: Uuid) -> DomainResult<Vec<StationLimits>> {
    let mut usage: BTreeMap<Uuid, ResourcesInUse> =
        app.scheduler.project_usage(project_id).await?.into_iter().collect();
    let mut all = Vec::new();
    for record in app.store.project_limits(Some(project_id)).await? {
        all.push(StationLimits {
            station_id: record.station_id,
            station_name: record.station_name,
            limits: record.limits,
            in_use: usage.remove(&record.station_id).unwrap_or_default(),
            updated_at: Some(record.updated_at),
        });
    }
    for (station_id, in_use) in usage {
        let Some(station) = app.store.station(station_id).await? else { continue };
        let limits = ProjectLimits::default();
        all.push(StationLimits { station_id, station_name: station.name, limits, in_use, updated_at: None });
    }
    all.sort_by(|a, b| a.station_name.cmp(&b.station_name));
    Ok(all)
}

/// Checks that `who` may own missions in `project_id` and charge jobs to it, the request's
/// `field` naming it: their personal project, one they are a member or manager of, or any for
/// an admin. A project they may not see is a 400 that does not say whether it exists; a
/// viewer's a 403.
pub async fn ensure_may_run(app: &AppState, who: Principal, project_id: Uuid, field: &'static str) -> DomainResult<()> {
    let unknown = || DomainError::invalid(field, format!("no project {project_id} that you may run jobs in"));
    match role(app, who, project_id).await? {
        Some(role) if role.may_run() => Ok(()),
        _ if who.admin => match app.store.project(project_id, who.user_id).await? {
            Some(_) => Ok(()),
            None => Err(unknown()),
        },
        Some(role) => Err(DomainError::Forbidden(format!(
            "you are a {role} of project {project_id}: only its members and managers own missions and run jobs in it"
        ))),
        None => Err(unknown()),
    }
}

/// Checks that `who` is a member (any role) of every project in `project_ids`, the request's
/// `field` naming them (admins see every project).
pub async fn ensure_member_of_each(
    app: &AppState,
    who: Principal,
    project_ids: &[Uuid],
    field: &'static str,
) -> DomainResult<()> {
    for project_id in project_ids {
        if !who.admin && role(app, who, *project_id).await?.is_none() {
            return Err(DomainError::invalid(field, format!("no project {project_id} of yours")));
        }
    }
    Ok(())
}

/// A shared project's name: a name, not starting with [`PERSONAL_MARK`].
fn shared_name(name: &str) -> DomainResult<String> {
    let name = checked_name(name)?;
    if name.starts_with(PERSONAL_MARK) {
        return Err(DomainError::invalid(
            "name",
            format!("{PERSONAL_MARK} starts only the names of personal projects"),
        ));
    }
    Ok(name)
}
