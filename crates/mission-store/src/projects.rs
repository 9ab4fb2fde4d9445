//! Projects and their members.
//!
//! A user's personal project is made with the user, in the same transaction
//! ([`Store::insert_user`]): its id is the user's, its name [`PERSONAL_MARK`] and the username,
//! its one member the user as a manager.

use chrono::{DateTime, Utc};
use mission_api::{Project, ProjectBudget, ProjectLimits, ProjectMember, ProjectRole};
use sqlx::{Connection, QueryBuilder};
use uuid::Uuid;

use super::audit::audited_write;
use super::jobs::FINAL_STATUSES;
use super::row::Columns;
use super::{Store, StoreError, conflict_on_duplicate, push_any_of, to_json, to_micros, with_conn};

/// What a project read selects: its row, the role of the viewer bound as `$1`, and its member
/// count; `FROM projects p` follows.
const PROJECT_SELECT: &str = "SELECT p.project_id, p.name, p.description, p.personal_of, p.created_at, \
    p.updated_at, (SELECT m.role FROM project_members m WHERE m.project_id = p.project_id AND m.user_id = $1) \
    AS role, (SELECT COUNT(*) FROM project_members m WHERE m.project_id = p.project_id) AS members";

/// A project's limits on a station, with the names the scheduler's pending reasons use.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsRecord {
    /// The project.
    pub project_id: Uuid,
    /// Its name.
    pub project_name: String,
    /// The station.
    pub station_id: Uuid,
    /// Its name.
    pub station_name: String,
    /// The limits.
    pub limits: ProjectLimits,
    /// When they were last set.
    pub updated_at: DateTime<Utc>,
}

/// A project's budget as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRecord {
    /// The project.
    pub project_id: Uuid,
    /// Its name.
    pub project_name: String,
    /// The budget.
    pub budget: ProjectBudget,
    /// When it was last set.
    pub updated_at: DateTime<Utc>,
}

/// What a project's jobs that ended in a period were charged, in the amounts a budget counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// CPUs times wall time, in seconds.
    pub cpu_seconds: f64,
    /// GPUs times wall time, in seconds.
    pub gpu_seconds: f64,
    /// Energy, in kWh.
    pub kwh: f64,
    /// Money, in the currency asked for.
    pub money: f64,
}

/// The mark that starts a personal project's name, and no other.
pub const PERSONAL_MARK: char = '~';

impl Store {
    /// Adds a shared project; a taken name is a [`StoreError::Conflict`].
    pub async fn insert_project(
        &self,
        project_id: Uuid,
        name: &str,
        description: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let result = audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO projects (project_id, name, description, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4)",
            )
            .bind(project_id.to_string())
            .bind(name)
            .bind(description)
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        });
        conflict_on_duplicate(result, || format!("a project named {name:?} already exists"))
    }

    /// The project with this id, with `viewer`'s role in it.
    pub async fn project(&self, project_id: Uuid, viewer: Uuid) -> Result<Option<Project>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&format!("{PROJECT_SELECT} FROM projects p WHERE p.project_id = $2"))
                .bind(viewer.to_string())
                .bind(project_id.to_string())
                .fetch_optional(conn)
                .await?;
            row.as_ref().map(project_from_row).transpose()
        })
    }

    /// One page of projects by name, each with `viewer`'s role, plus whether more follow: every
    /// project when `all`, else those `viewer` is a member of.
    pub async fn projects(
        &self,
        viewer: Uuid,
        all: bool,
        page: u32,
        items: u32,
    ) -> Result<(Vec<Project>, bool), StoreError> {
        let filter =
            if all { "" } else { " WHERE p.project_id IN (SELECT project_id FROM project_members WHERE user_id = $1)" };
        let sql = format!("{PROJECT_SELECT} FROM projects p{filter} ORDER BY p.name LIMIT $2 OFFSET $3");
        with_conn!(self, reader, |conn| {
            let rows = sqlx::query(&sql)
                .bind(viewer.to_string())
                .bind(i64::from(items) + 1)
                .bind((i64::from(page) - 1) * i64::from(items))
                .fetch_all(conn)
                .await?;
            let has_more = rows.len() > items as usize;
            let projects = rows.iter().take(items as usize).map(project_from_row).collect::<Result<_, _>>()?;
            Ok((projects, has_more))
        })
    }

    /// Changes a project's name and description where given; false when it is gone. A taken
    /// name is a [`StoreError::Conflict`].
    pub async fn update_project(
        &self,
        project_id: Uuid,
        name: Option<&str>,
        description: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = audited_write!(self, |conn| {
            sqlx::query(
                "UPDATE projects SET name = COALESCE($1, name), description = COALESCE($2, description), \
                 updated_at = $3 WHERE project_id = $4",
            )
            .bind(name)
            .bind(description)
            .bind(to_micros(now))
            .bind(project_id.to_string())
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
        });
        match result {
            Ok(done) => Ok(done == 1),
            Err(e) => conflict_on_duplicate(Err::<(), _>(e), || format!("a project named {name:?} already exists"))
                .map(|()| false),
        }
    }

    /// How many missions the project holds and how many jobs charged to it have not ended.
    pub async fn project_holdings(&self, project_id: Uuid) -> Result<(u64, u64), StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(&format!(
                "SELECT (SELECT COUNT(*) FROM missions WHERE project_id = $1) AS missions, \
                 (SELECT COUNT(*) FROM jobs WHERE project_id = $1 AND status NOT IN {FINAL_STATUSES}) AS jobs"
            ))
            .bind(project_id.to_string())
            .fetch_one(conn)
            .await?;
            Ok((row.count("missions")?, row.count("jobs")?))
        })
    }

    /// Deletes a shared project with its memberships, if it holds no missions; true when it did.
    /// A personal project goes only with its user.
    pub async fn delete_project(&self, project_id: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query(
                "DELETE FROM projects WHERE project_id = $1 AND personal_of IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM missions WHERE project_id = $1)",
            )
            .bind(project_id.to_string())
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// `user`'s role in the project, if they are a member.
    pub async fn project_role(&self, project_id: Uuid, user: Uuid) -> Result<Option<ProjectRole>, StoreError> {
        let role: Option<String> = with_conn!(self, reader, |conn| {
            sqlx::query_scalar("SELECT role FROM project_members WHERE project_id = $1 AND user_id = $2")
                .bind(project_id.to_string())
                .bind(user.to_string())
                .fetch_optional(conn)
                .await?
        });
        role.map(|r| parse_role(&r)).transpose()
    }

    /// Makes `user` a member with `role`, or changes their role; a membership set so is kept
    /// whatever a group claim says ([`Store::sync_claimed_memberships`]).
    pub async fn set_project_member(
        &self,
        project_id: Uuid,
        user: Uuid,
        role: ProjectRole,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO project_members (project_id, user_id, role, added_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (project_id, user_id) DO UPDATE SET role = EXCLUDED.role, added_at = EXCLUDED.added_at, \
                 via_claim = FALSE",
            )
            .bind(project_id.to_string())
            .bind(user.to_string())
            .bind(role.as_str())
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// The names of the projects of `ids` there are.
    pub async fn project_names(&self, ids: &[Uuid]) -> Result<std::collections::HashMap<Uuid, String>, StoreError> {
        if ids.is_empty() {
            return Ok(std::collections::HashMap::new());
        }
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> = QueryBuilder::new("SELECT project_id, name FROM projects WHERE 1 = 1");
                push_any_of(&mut q, "project_id", ids.iter().map(Uuid::to_string));
                q.build().fetch_all(conn).await?
            };
            rows.iter().map(|r| Ok((r.uuid("project_id")?, r.text("name")?))).collect()
        })
    }

    /// Makes `user`'s memberships that follow a group claim those `claimed` (project names, with
    /// the role each gives), in one transaction: the shared projects of those names gain the user
    /// with that role (a membership set by hand stays as it was), and the memberships the claim
    /// gave in other projects end. Names of no shared project are passed over.
    pub async fn sync_claimed_memberships(
        &self,
        user: Uuid,
        claimed: &[(String, ProjectRole)],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let given = sqlx::query(
                "SELECT m.project_id, p.name FROM project_members m JOIN projects p USING (project_id) \
                 WHERE m.user_id = $1 AND m.via_claim = TRUE",
            )
            .bind(user.to_string())
            .fetch_all(&mut *tx)
            .await?;
            for row in &given {
                let name = row.text("name")?;
                if !claimed.iter().any(|(claimed, _)| *claimed == name) {
                    sqlx::query("DELETE FROM project_members WHERE project_id = $1 AND user_id = $2")
                        .bind(row.text("project_id")?)
                        .bind(user.to_string())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            for (name, role) in claimed {
                sqlx::query(
                    "INSERT INTO project_members (project_id, user_id, role, added_at, via_claim) \
                     SELECT project_id, $2, $3, $4, TRUE FROM projects WHERE name = $1 AND personal_of IS NULL \
                     ON CONFLICT (project_id, user_id) DO UPDATE SET role = EXCLUDED.role \
                     WHERE project_members.via_claim = TRUE",
                )
                .bind(name)
                .bind(user.to_string())
                .bind(role.as_str())
                .bind(to_micros(now))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The projects `user` manages (their personal project among them).
    pub async fn managed_projects(&self, user: Uuid) -> Result<Vec<Uuid>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = sqlx::query("SELECT project_id FROM project_members WHERE user_id = $1 AND role = 'manager'")
                .bind(user.to_string())
                .fetch_all(conn)
                .await?;
            rows.iter().map(|r| r.uuid("project_id")).collect()
        })
    }

    /// Removes a member; true when they were one.
    pub async fn remove_project_member(&self, project_id: Uuid, user: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM project_members WHERE project_id = $1 AND user_id = $2")
                .bind(project_id.to_string())
                .bind(user.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// The members of a project, by username.
    pub async fn project_members(&self, project_id: Uuid) -> Result<Vec<ProjectMember>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = sqlx::query(
                "SELECT m.user_id, u.username, m.role, m.added_at FROM project_members m \
                 JOIN users u ON u.user_id = m.user_id WHERE m.project_id = $1 ORDER BY u.username",
            )
            .bind(project_id.to_string())
            .fetch_all(conn)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(ProjectMember {
                        user_id: r.uuid("user_id")?,
                        username: r.text("username")?,
                        role: parse_role(&r.text("role")?)?,
                        added_at: r.time("added_at")?,
                    })
                })
                .collect()
        })
    }
}

impl Store {
    /// Sets a project's limits on a station (checked by the caller), replacing any.
    pub async fn set_project_limits(
        &self,
        project_id: Uuid,
        station_id: Uuid,
        limits: &ProjectLimits,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO project_limits (project_id, station_id, limits, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (project_id, station_id) DO UPDATE SET limits = EXCLUDED.limits, \
                 updated_at = EXCLUDED.updated_at",
            )
            .bind(project_id.to_string())
            .bind(station_id.to_string())
            .bind(to_json(limits))
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Removes a project's limits on a station; true when it had some.
    pub async fn delete_project_limits(&self, project_id: Uuid, station_id: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM project_limits WHERE project_id = $1 AND station_id = $2")
                .bind(project_id.to_string())
                .bind(station_id.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// The limits of one project (of every project, for `None`), by project and station name.
    pub async fn project_limits(&self, project_id: Option<Uuid>) -> Result<Vec<LimitsRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = sqlx::query(
                "SELECT l.project_id, p.name AS project_name, l.station_id, s.name AS station_name, l.limits, \
                 l.updated_at FROM project_limits l JOIN projects p USING (project_id) \
                 JOIN stations s USING (station_id) WHERE CAST($1 AS TEXT) IS NULL OR l.project_id = $1 \
                 ORDER BY p.name, s.name",
            )
            .bind(project_id.map(|id| id.to_string()))
            .fetch_all(conn)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(LimitsRecord {
                        project_id: r.uuid("project_id")?,
                        project_name: r.text("project_name")?,
                        station_id: r.uuid("station_id")?,
                        station_name: r.text("station_name")?,
                        limits: r.json("limits")?,
                        updated_at: r.time("updated_at")?,
                    })
                })
                .collect()
        })
    }
}

impl Store {
    /// Sets a project's budget (checked by the caller), replacing any.
    pub async fn set_project_budget(
        &self,
        project_id: Uuid,
        budget: &ProjectBudget,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        audited_write!(self, |conn| {
            sqlx::query(
                "INSERT INTO project_budgets (project_id, budget, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (project_id) DO UPDATE SET budget = EXCLUDED.budget, updated_at = EXCLUDED.updated_at",
            )
            .bind(project_id.to_string())
            .bind(to_json(budget))
            .bind(to_micros(now))
            .execute(conn)
            .await
            .map(drop)
        })?;
        Ok(())
    }

    /// Removes a project's budget; true when it had one.
    pub async fn delete_project_budget(&self, project_id: Uuid) -> Result<bool, StoreError> {
        let done = audited_write!(self, |conn| {
            sqlx::query("DELETE FROM project_budgets WHERE project_id = $1")
                .bind(project_id.to_string())
                .execute(conn)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// The budget of one project (of every project, for `None`).
    pub async fn project_budgets(&self, project_id: Option<Uuid>) -> Result<Vec<BudgetRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = sqlx::query(
                "SELECT b.project_id, p.name AS project_name, b.budget, b.updated_at FROM project_budgets b \
                 JOIN projects p USING (project_id) WHERE CAST($1 AS TEXT) IS NULL OR b.project_id = $1 ORDER BY p.name",
            )
            .bind(project_id.map(|id| id.to_string()))
            .fetch_all(conn)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(BudgetRecord {
                        project_id: r.uuid("project_id")?,
                        project_name: r.text("project_name")?,
                        budget: r.json("budget")?,
                        updated_at: r.time("updated_at")?,
                    })
                })
                .collect()
        })
    }

    /// What the jobs charged to `project_id` that ended at `since` or later were charged: their
    /// CPUs (GPUs) times their wall time, or where an agent did not report one the time between
    /// start and end; their energy; and their cost in `currency` (costs in others not counted).
    pub async fn project_spent(
        &self,
        project_id: Uuid,
        since: DateTime<Utc>,
        currency: Option<&str>,
    ) -> Result<Spent, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = sqlx::query(
                "SELECT SUM(cpu_count * w) AS cpu, SUM(gpu_count * w) AS gpu, SUM(energy_kwh) AS kwh, \
                 SUM(CASE WHEN currency = $3 THEN cost END) AS money FROM (SELECT cpu_count, gpu_count, \
                 COALESCE(wall_time, (finished_at - started_at) / 1000000.0, 0.0) AS w, energy_kwh, cost, currency \
                 FROM jobs WHERE project_id = $1 AND finished_at >= $2) AS ended",
            )
            .bind(project_id.to_string())
            .bind(to_micros(since))
            .bind(currency)
            .fetch_one(conn)
            .await?;
            Ok(Spent {
                cpu_seconds: row.opt_real("cpu")?.unwrap_or(0.0),
                gpu_seconds: row.opt_real("gpu")?.unwrap_or(0.0),
                kwh: row.opt_real("kwh")?.unwrap_or(0.0),
                money: row.opt_real("money")?.unwrap_or(0.0),
            })
        })
    }
}

fn parse_role(role: &str) -> Result<ProjectRole, StoreError> {
    role.parse().map_err(|_| StoreError::Corrupt(format!("project role {role:?}")))
}

fn project_from_row(r: &impl Columns) -> Result<Project, StoreError> {
    Ok(Project {
        project_id: r.uuid("project_id")?,
        name: r.text("name")?,
        description: r.text("description")?,
        personal: r.opt_uuid("personal_of")?,
        role: r.opt_text("role")?.map(|role| parse_role(&role)).transpose()?,
        members: r.count("members")?,
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
    })
}
