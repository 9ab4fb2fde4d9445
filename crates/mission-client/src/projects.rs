//! Projects and their members: list, create, read, change, delete; add, change and remove
//! members; their limits on stations and their budgets.

use mission_api::{
    BudgetStatus, CreateProject, Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectPage, ProjectRole,
    SetProjectMember, StationLimits, UpdateProject,
};
use reqwest::Method;
use uuid::Uuid;

use mission_api::paths::encode_segment;

use crate::{Client, Error};

impl Client {
    /// The projects the caller is a member of (every project, for an admin), by name: the
    /// page `page` (from 1) of `items` (1 to 200).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// for project in client.list_projects(1, 100).await?.projects {
    ///     println!("{} {} {:?}", project.project_id, project.name, project.role);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_projects(&self, page: u32, items: u32) -> Result<ProjectPage, Error> {
        self.get_json("/projects", &[("page", page.to_string()), ("items", items.to_string())]).await
    }

    /// One project; [`Error::NotFound`] when it does not exist or the caller is no member.
    pub async fn get_project(&self, project_id: Uuid) -> Result<Project, Error> {
        self.get_json(&format!("/projects/{project_id}"), &[]).await
    }

    /// Creates a shared project (admins only).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::CreateProject;
    /// let bio = client.create_project(&CreateProject { name: "bio".into(), description: None }).await?;
    /// client.set_project_member(bio.project_id, "ada", mission_client::ProjectRole::Manager).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_project(&self, request: &CreateProject) -> Result<Project, Error> {
        self.send_json(Method::POST, "/projects", request).await
    }

    /// Renames a project (admins) or changes its description (its managers too).
    pub async fn update_project(&self, project_id: Uuid, changes: &UpdateProject) -> Result<Project, Error> {
        self.send_json(Method::PATCH, &format!("/projects/{project_id}"), changes).await
    }

    /// Deletes a shared project that holds no missions and no unfinished jobs (admins only);
    /// `Ok(false)` when there is no such project.
    pub async fn delete_project(&self, project_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/projects/{project_id}")).await
    }

    /// The members of a project, with their roles.
    pub async fn project_members(&self, project_id: Uuid) -> Result<Vec<ProjectMember>, Error> {
        self.get_json(&format!("/projects/{project_id}/members"), &[]).await
    }

    /// Makes a user (by id or username) a member with `role`, or changes their role.
    pub async fn set_project_member(
        &self,
        project_id: Uuid,
        user: &str,
        role: ProjectRole,
    ) -> Result<ProjectMember, Error> {
        let path = format!("/projects/{project_id}/members/{}", encode_segment(user));
        self.send_json(Method::PUT, &path, &SetProjectMember { role }).await
    }

    /// Removes a member; `Ok(false)` when they were not one.
    pub async fn remove_project_member(&self, project_id: Uuid, user: &str) -> Result<bool, Error> {
        self.delete_found(&format!("/projects/{project_id}/members/{}", encode_segment(user))).await
    }

    /// A project's limits on each station that has some, with what it holds and has queued
    /// there (and the stations where it has jobs without limits).
    pub async fn project_limits(&self, project_id: Uuid) -> Result<Vec<StationLimits>, Error> {
        self.get_json(&format!("/projects/{project_id}/limits"), &[]).await
    }

    /// Sets what a project may hold on a station (admins only), replacing what was set.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, bio: uuid::Uuid, lab: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::{ProjectLimits, ResourceAmounts};
    /// let four_cpus = ResourceAmounts { cpus: Some(4), ..Default::default() };
    /// let no_more = ResourceAmounts { cpus: Some(0), ..Default::default() };
    /// let limits = ProjectLimits { nominal: Some(four_cpus), borrowing_limit: Some(no_more), ..Default::default() };
    /// client.set_project_limits(bio, lab, &limits).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_project_limits(
        &self,
        project_id: Uuid,
        station_id: Uuid,
        limits: &ProjectLimits,
    ) -> Result<StationLimits, Error> {
        self.send_json(Method::PUT, &format!("/projects/{project_id}/limits/{station_id}"), limits).await
    }

    /// Removes a project's limits on a station (admins only); `Ok(false)` when it had none.
    pub async fn delete_project_limits(&self, project_id: Uuid, station_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/projects/{project_id}/limits/{station_id}")).await
    }

    /// A project's budget and what it spent this period; `Ok(None)` when it has none.
    pub async fn project_budget(&self, project_id: Uuid) -> Result<Option<BudgetStatus>, Error> {
        match self.get_json(&format!("/projects/{project_id}/budget"), &[]).await {
            Ok(status) => Ok(Some(status)),
            Err(Error::NotFound(_)) if self.get_project(project_id).await.is_ok() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets what a project may spend per period (admins only), replacing what was set.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, astro: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::{BudgetPeriod, Cost, ProjectBudget};
    /// let money = Cost { amount: 1200.0, currency: "EUR".into() };
    /// let budget = ProjectBudget {
    ///     cpu_hours: Some(500.0),
    ///     gpu_hours: None,
    ///     kwh: Some(800.0),
    ///     money: Some(money),
    ///     period: BudgetPeriod::Month,
    /// };
    /// let status = client.set_project_budget(astro, &budget).await?;
    /// println!("{:.1} of 500 CPU-hours and {:.1} of 800 kWh spent this month", status.spent_cpu_hours, status.spent_kwh);
    /// # Ok(()) }
    /// ```
    pub async fn set_project_budget(&self, project_id: Uuid, budget: &ProjectBudget) -> Result<BudgetStatus, Error> {
        self.send_json(Method::PUT, &format!("/projects/{project_id}/budget"), budget).await
    }

    /// Removes a project's budget (admins only); `Ok(false)` when it had none.
    pub async fn delete_project_budget(&self, project_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/projects/{project_id}/budget")).await
    }
}
