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

/// CPUs, memory and GPUs, as a project's limits on a station count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourceAmounts {
    /// CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::jobs::whole_number")]
    pub cpus: Option<u32>,
    /// Memory in megabytes.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::jobs::whole_number")]
    pub memory_mb: Option<u64>,
    /// GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::jobs::whole_number")]
    pub gpus: Option<u32>,
}

/// What a project may hold on one station: body of `PUT /api/v1/projects/{id}/limits/{station_id}`
/// (admins only). A station without limits for a project lets it use any free room.
///
/// The project is guaranteed `nominal` (an absent amount: none of it) and may borrow idle room
/// beyond it up to `borrowing_limit` more (absent: no limit; an absent amount: no limit of it;
/// `0`: none). Its jobs that would go past either wait, their pending reason naming the limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProjectLimits {
    /// Its weight against other projects in fair-share order (default 1; more than 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 1_000_000))]
    pub share: Option<f64>,
    /// What it is guaranteed on the station.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal: Option<ResourceAmounts>,
    /// How much idle room beyond `nominal` it may borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<ResourceAmounts>,
    /// The most of its jobs placed on the station's landing zones at once.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::jobs::whole_number")]
    pub max_running_jobs: Option<u32>,
    /// The most of its jobs queued on the station; a submission past it is refused (409).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::jobs::whole_number")]
    pub max_queued_jobs: Option<u32>,
}

impl ProjectLimits {
    /// The most of each resource the project may hold: nominal plus borrowing, `None` where
    /// it may borrow without limit.
    pub fn ceiling(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let nominal = self.nominal.unwrap_or_default();
        let Some(borrow) = self.borrowing_limit else { return (None, None, None) };
        let add = |n: Option<u64>, b: Option<u64>| b.map(|b| n.unwrap_or(0) + b);
        (
            add(nominal.cpus.map(u64::from), borrow.cpus.map(u64::from)),
            add(nominal.memory_mb, borrow.memory_mb),
            add(nominal.gpus.map(u64::from), borrow.gpus.map(u64::from)),
        )
    }
}

/// What a project holds on a station now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourcesInUse {
    /// CPUs its unfinished placed jobs hold.
    pub cpus: u64,
    /// Megabytes they hold.
    pub memory_mb: u64,
    /// GPUs they hold.
    pub gpus: u64,
    /// Its jobs placed on landing zones and not ended.
    pub running_jobs: u64,
    /// Its jobs queued.
    pub queued_jobs: u64,
}

/// A project's limits on one station and what it uses there: an entry of
/// `GET /api/v1/projects/{id}/limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StationLimits {
    /// The station.
    pub station_id: Uuid,
    /// Its name.
    pub station_name: String,
    /// The limits.
    pub limits: ProjectLimits,
    /// What the project holds there now.
    pub in_use: ResourcesInUse,
    /// When the limits were last set; absent where the project has none there (only use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
}

/// How long a project's budget lasts before it starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    /// A week, from Monday 00:00 UTC.
    Week,
    /// A calendar month, from the 1st 00:00 UTC.
    Month,
    /// All time: the budget never starts again.
    Total,
}

impl BudgetPeriod {
    /// The period as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Week => "week",
            Self::Month => "month",
            Self::Total => "total",
        }
    }

    /// When the period holding `at` began (the epoch for `total`).
    pub fn start(self, at: DateTime<Utc>) -> DateTime<Utc> {
        use chrono::{Datelike, TimeZone};
        let midnight = |date: chrono::NaiveDate| Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).expect("midnight"));
        match self {
            Self::Week => midnight(at.date_naive() - chrono::Days::new(u64::from(at.weekday().num_days_from_monday()))),
            Self::Month => midnight(at.date_naive().with_day(1).expect("every month has a 1st")),
            Self::Total => DateTime::UNIX_EPOCH,
        }
    }

    /// When the period holding `at` ends (`None` for `total`).
    pub fn end(self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = self.start(at);
        match self {
            Self::Week => Some(start + chrono::Days::new(7)),
            Self::Month => Some(start + chrono::Months::new(1)),
            Self::Total => None,
        }
    }

    /// The period holding `at` in words, for pending reasons: "for November 2026", "for the week
    /// of 23 November 2026", "in total".
    pub fn words(self, at: DateTime<Utc>) -> String {
        match self {
            Self::Week => format!("for the week of {}", self.start(at).format("%-d %B %Y")),
            Self::Month => format!("for {}", at.format("%B %Y")),
            Self::Total => "in total".to_owned(),
        }
    }
}

/// What a project may spend per period: body of `PUT /api/v1/projects/{id}/budget` (admins).
/// A job is charged its CPUs (and GPUs) times its wall time as it ends (Slurm's rule), and the
/// energy and money it was reckoned (see [`crate::energy`]), in the period it ends in. At 80% of
/// any amount a `project.budget_warning` event goes to the project's members; at 100% none of its
/// jobs start until the next period (running ones finish).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProjectBudget {
    /// CPU-hours per period; absent: no limit on CPUs (with no amount at all, what is spent is
    /// tracked and nothing stops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000_000_000_i64))]
    pub cpu_hours: Option<f64>,
    /// GPU-hours per period; absent: no limit on GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000_000_000_i64))]
    pub gpu_hours: Option<f64>,
    /// Energy per period, in kWh as jobs are reckoned it (the PUE included); absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000_000_000_i64))]
    pub kwh: Option<f64>,
    /// Money per period, in one currency: jobs charged in another (on a station whose prices are
    /// in another) do not count against it; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<crate::Cost>,
    /// How long the amounts last.
    pub period: BudgetPeriod,
}

/// A project's budget and what it spent this period: answer of `GET /api/v1/projects/{id}/budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetStatus {
    /// The project.
    pub project_id: Uuid,
    /// The budget.
    pub budget: ProjectBudget,
    /// When this period began.
    pub period_start: DateTime<Utc>,
    /// When it ends (absent for `total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_end: Option<DateTime<Utc>>,
    /// CPU-hours its jobs that ended this period were charged.
    pub spent_cpu_hours: f64,
    /// GPU-hours they were charged.
    pub spent_gpu_hours: f64,
    /// kWh they were reckoned.
    #[serde(default)]
    pub spent_kwh: f64,
    /// Money they were charged in the budget's currency, where it sets an amount of money.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_money: Option<crate::Cost>,
    /// When the budget was last set.
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_periods_start_on_mondays_and_firsts() {
        let at = DateTime::parse_from_rfc3339("2026-11-27T05:28:00Z").unwrap().with_timezone(&Utc);
        let day = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert_eq!(BudgetPeriod::Week.start(at), day("2026-11-23T00:00:00Z"));
        assert_eq!(BudgetPeriod::Week.end(at), Some(day("2026-11-30T00:00:00Z")));
        assert_eq!(BudgetPeriod::Month.start(at), day("2026-11-01T00:00:00Z"));
        assert_eq!(BudgetPeriod::Month.end(at), Some(day("2026-12-01T00:00:00Z")));
        assert_eq!(BudgetPeriod::Total.end(at), None);
        assert_eq!(BudgetPeriod::Month.words(at), "for November 2026");
        assert_eq!(BudgetPeriod::Week.words(at), "for the week of 23 November 2026");
        // A Monday starts its own week.
        assert_eq!(BudgetPeriod::Week.start(day("2026-11-23T00:00:00Z")), day("2026-11-23T00:00:00Z"));
    }
}
