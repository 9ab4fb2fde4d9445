//! `mission projects`: projects and their members.

use anyhow::bail;
use clap::Subcommand;
use mission_client::{
    BudgetPeriod, BudgetStatus, Client, Cost, CreateProject, Project, ProjectBudget, ProjectLimits, ProjectRole,
    ResourceAmounts, StationLimits, UpdateProject, UsageReportQuery, Uuid,
};

use super::stations::resolve_station;

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
    /// Show a project's limits on each station and what it uses there; with a station and
    /// flags, set them (admins), replacing what was set; with --clear, remove them.
    ///
    /// A project is guaranteed its nominal CPUs, memory and GPUs on the station and may borrow
    /// idle room beyond them up to its borrowing limit; its jobs past a limit wait, saying which.
    /// When a project within its nominal CPUs waits for room that others borrowed, their
    /// borrowed jobs are stopped gracefully and put back in line at their old place (unless the
    /// station turns it off: mission stations update lab --reclaim false).
    ///
    ///   mission projects limits bio lab --cpus 8 --borrow-cpus 0    # 8 CPUs, never more
    ///   mission projects limits bio lab --cpus 8 --borrow-cpus 8 --max-queued 1000
    ///   mission projects limits bio                                 # what bio has and uses
    #[command(verbatim_doc_comment)]
    Limits(LimitsArgs),
    /// Show a project's budget and what it spent this period; with flags, set it (admins),
    /// replacing what was set; with --clear, remove it.
    ///
    /// A job is charged its CPUs (GPUs) times its wall time as it ends. At 80% the project's
    /// members get a project.budget_warning event; at 100% its jobs wait for the next period.
    ///
    ///   mission projects budget astro --cpu-hours 500 --period month
    ///   mission projects budget astro                   # spent this period
    #[command(verbatim_doc_comment)]
    Budget(BudgetArgs),
    /// What ended jobs used, per project, user or label value: all jobs for admins, the jobs
    /// of the projects you manage and your own for others.
    ///
    ///   mission projects usage                          # per project
    ///   mission projects usage --group-by user --since 2026-11-01
    ///   mission projects usage --group-by label:sweep --csv > sweeps.csv
    #[command(verbatim_doc_comment)]
    Usage(UsageArgs),
}

/// `mission projects usage`.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// project, user or label:KEY.
    #[arg(long, default_value = "project")]
    group_by: String,
    /// Only jobs that ended since: a time (2026-11-01, 2026-11-01T09:00:00Z) or an age (30d);
    /// each group then shows its kWh a day as a sparkline.
    #[arg(long, value_name = "TIME", value_parser = super::jobs::parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only jobs that ended before this time (or this long ago).
    #[arg(long, value_name = "TIME", value_parser = super::jobs::parse_since)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// Print the server's CSV (a header, then a row per group) instead of a table or JSON.
    #[arg(long)]
    csv: bool,
}

impl UsageArgs {
    async fn run(self, client: &Client, out: Output) -> anyhow::Result<()> {
        let query = UsageReportQuery { group_by: self.group_by, since: self.since, until: self.until };
        if self.csv {
            print!("{}", client.usage_report_csv(&query).await?);
            return Ok(());
        }
        let report = client.usage_report(&query).await?;
        let hours = |h: f64| format!("{h:.2}");
        // With --since, each group's kWh a day from then until --until (or today), as a sparkline.
        let days: Vec<chrono::NaiveDate> = match self.since {
            Some(since) => {
                let last = self.until.unwrap_or_else(chrono::Utc::now).date_naive();
                since.date_naive().iter_days().take_while(|day| *day <= last).take(3660).collect()
            }
            None => Vec::new(),
        };
        let rows = report
            .groups
            .iter()
            .map(|g| {
                let cost: Vec<String> = g.cost.iter().map(|c| format!("{} {:.2}", c.currency, c.amount)).collect();
                let mut row = vec![
                    g.group.clone().unwrap_or_else(|| "-".to_owned()),
                    g.jobs.to_string(),
                    hours(g.cpu_hours_held),
                    hours(g.cpu_hours),
                    hours(g.gpu_hours),
                    g.mean_cpu_efficiency.map_or_else(|| "-".to_owned(), |e| format!("{:.0}%", e * 100.0)),
                    format!("{:.3}", g.energy_kwh),
                    format!("{:.2}", g.co2e_g / 1000.0),
                    if cost.is_empty() { "-".to_owned() } else { cost.join(", ") },
                ];
                if !days.is_empty() {
                    let kwh: Vec<f64> = days
                        .iter()
                        .map(|day| g.daily.iter().find(|d| d.day == *day).map_or(0.0, |d| d.energy_kwh))
                        .collect();
                    row.push(crate::output::sparkline(&kwh, 40));
                }
                row
            })
            .collect();
        let group = report.group_by.to_uppercase();
        let mut heads =
            vec![group.as_str(), "JOBS", "CPU H HELD", "CPU H USED", "GPU H", "EFFICIENCY", "KWH", "CO2E KG", "COST"];
        if !days.is_empty() {
            heads.push("KWH A DAY");
        }
        out.table(&report, &heads, rows);
        Ok(())
    }
}

/// `mission projects budget`.
#[derive(Debug, clap::Args)]
pub struct BudgetArgs {
    /// Name or id.
    project: String,
    /// CPU-hours per period.
    #[arg(long)]
    cpu_hours: Option<f64>,
    /// GPU-hours per period.
    #[arg(long)]
    gpu_hours: Option<f64>,
    /// kWh per period, as jobs are reckoned (the PUE included).
    #[arg(long)]
    kwh: Option<f64>,
    /// Money per period, in --currency (jobs charged in another currency do not count).
    #[arg(long, value_name = "AMOUNT", requires = "currency")]
    money: Option<f64>,
    /// The currency of --money: an ISO 4217 code (EUR, USD, CHF).
    #[arg(long, value_name = "CODE", requires = "money")]
    currency: Option<String>,
    /// How long the amounts last: week (from Monday, UTC), month or total.
    #[arg(long, value_parser = parse_period, default_value = "month")]
    period: BudgetPeriod,
    /// Remove the budget.
    #[arg(long, conflicts_with_all = ["cpu_hours", "gpu_hours", "kwh", "money"])]
    clear: bool,
}

fn parse_period(given: &str) -> Result<BudgetPeriod, String> {
    serde_json::from_value(serde_json::Value::String(given.to_owned()))
        .map_err(|_| format!("{given:?} is not a period: week, month or total"))
}

impl BudgetArgs {
    async fn run(self, client: &Client, out: Output) -> anyhow::Result<()> {
        let project_id = resolve_project(client, &self.project).await?;
        if self.clear {
            if !client.delete_project_budget(project_id).await? {
                bail!("project {} has no budget", self.project);
            }
            out.done(&serde_json::json!({ "cleared": project_id }), &format!("removed the budget of {}", self.project));
            return Ok(());
        }
        if self.cpu_hours.is_none() && self.gpu_hours.is_none() && self.kwh.is_none() && self.money.is_none() {
            match client.project_budget(project_id).await? {
                Some(status) => out.done(&status, &budget_words(&self.project, &status)),
                None => out.done(&serde_json::Value::Null, &format!("project {} has no budget", self.project)),
            }
            return Ok(());
        }
        let money = self.money.zip(self.currency).map(|(amount, currency)| Cost { amount, currency });
        let budget = ProjectBudget {
            cpu_hours: self.cpu_hours,
            gpu_hours: self.gpu_hours,
            kwh: self.kwh,
            money,
            period: self.period,
        };
        let status = client.set_project_budget(project_id, &budget).await?;
        out.done(&status, &budget_words(&self.project, &status));
        Ok(())
    }
}

/// A budget and what was spent against it, in words.
fn budget_words(project: &str, status: &BudgetStatus) -> String {
    let against = |spent: f64, hours: Option<f64>, what: &str| match hours {
        Some(hours) if hours > 0.0 => {
            format!("{spent:.1} of {hours} {what} ({:.0}%)", (spent / hours * 100.0).floor())
        }
        Some(hours) => format!("{spent:.1} of {hours} {what}"),
        None => format!("{spent:.1} {what} (no limit)"),
    };
    let period = status.budget.period.words(status.period_start);
    let ends = status.period_end.map_or(String::new(), |end| format!("; the period ends {}", end.format("%Y-%m-%d")));
    let mut amounts = vec![
        against(status.spent_cpu_hours, status.budget.cpu_hours, "CPU-hours"),
        against(status.spent_gpu_hours, status.budget.gpu_hours, "GPU-hours"),
    ];
    if status.budget.kwh.is_some() {
        amounts.push(against(status.spent_kwh, status.budget.kwh, "kWh"));
    }
    if let (Some(spent), Some(money)) = (&status.spent_money, &status.budget.money) {
        amounts.push(against(spent.amount, Some(money.amount), &money.currency));
    }
    let last = amounts.pop().expect("two at least");
    format!("project {project} spent {} and {last} {period}{ends}", amounts.join(", "))
}

/// `mission projects limits`.
#[derive(Debug, clap::Args)]
pub struct LimitsArgs {
    /// Name or id.
    project: String,
    /// The station (name or id) to set or clear the limits on.
    station: Option<String>,
    /// CPUs guaranteed (nominal).
    #[arg(long, requires = "station")]
    cpus: Option<u32>,
    /// Megabytes of memory guaranteed.
    #[arg(long, requires = "station")]
    memory: Option<u64>,
    /// GPUs guaranteed.
    #[arg(long, requires = "station")]
    gpus: Option<u32>,
    /// CPUs it may borrow beyond the nominal (0: none; absent: no limit).
    #[arg(long, requires = "station")]
    borrow_cpus: Option<u32>,
    /// Megabytes it may borrow beyond the nominal.
    #[arg(long, requires = "station")]
    borrow_memory: Option<u64>,
    /// GPUs it may borrow beyond the nominal.
    #[arg(long, requires = "station")]
    borrow_gpus: Option<u32>,
    /// Its fair-share weight (default 1).
    #[arg(long, requires = "station")]
    share: Option<f64>,
    /// The most of its jobs running at once.
    #[arg(long, requires = "station")]
    max_running: Option<u32>,
    /// The most of its jobs queued; submissions past it are refused.
    #[arg(long, requires = "station")]
    max_queued: Option<u32>,
    /// Remove its limits on the station.
    #[arg(long, requires = "station", conflicts_with_all = ["cpus", "memory", "gpus", "borrow_cpus", "borrow_memory", "borrow_gpus", "share", "max_running", "max_queued"])]
    clear: bool,
}

impl LimitsArgs {
    /// The limits the flags give.
    fn limits(&self) -> ProjectLimits {
        let amounts = |cpus: Option<u32>, memory_mb: Option<u64>, gpus: Option<u32>| {
            (cpus.is_some() || memory_mb.is_some() || gpus.is_some()).then_some(ResourceAmounts {
                cpus,
                memory_mb,
                gpus,
            })
        };
        ProjectLimits {
            share: self.share,
            nominal: amounts(self.cpus, self.memory, self.gpus),
            borrowing_limit: amounts(self.borrow_cpus, self.borrow_memory, self.borrow_gpus),
            max_running_jobs: self.max_running,
            max_queued_jobs: self.max_queued,
        }
    }

    async fn run(self, client: &Client, out: Output) -> anyhow::Result<()> {
        let project_id = resolve_project(client, &self.project).await?;
        let Some(station) = &self.station else {
            let all = client.project_limits(project_id).await?;
            let rows = all.iter().map(limits_row).collect();
            let heads = ["STATION", "CPUS", "MEMORY MB", "GPUS", "RUNNING", "QUEUED", "SHARE"];
            out.table(&all, &heads, rows);
            return Ok(());
        };
        let station_id = resolve_station(client, station).await?;
        if self.clear {
            if !client.delete_project_limits(project_id, station_id).await? {
                bail!("project {} has no limits on station {station}", self.project);
            }
            let message = format!("removed the limits of {} on {station}", self.project);
            out.done(&serde_json::json!({ "cleared": station_id }), &message);
            return Ok(());
        }
        let limits = self.limits();
        if limits == ProjectLimits::default() {
            bail!("nothing to set: give --cpus, --borrow-cpus, --max-running, … (or --clear to remove them)");
        }
        let set = client.set_project_limits(project_id, station_id, &limits).await?;
        out.done(&set, &format!("set the limits of {} on {station}", self.project));
        Ok(())
    }
}

/// One row of the limits table: what is in use against each limit, as `USED/NOMINAL+BORROW`.
fn limits_row(l: &StationLimits) -> Vec<String> {
    let (nominal, borrow) = (l.limits.nominal.unwrap_or_default(), l.limits.borrowing_limit);
    let against = |used: u64, nominal: Option<u64>, borrow: Option<Option<u64>>| {
        let borrow = match borrow {
            None | Some(None) => "+any".to_owned(),
            Some(Some(0)) => String::new(),
            Some(Some(b)) => format!("+{b}"),
        };
        format!("{used}/{}{borrow}", nominal.unwrap_or(0))
    };
    let cap = |n: Option<u32>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    vec![
        l.station_name.clone(),
        against(l.in_use.cpus, nominal.cpus.map(u64::from), borrow.map(|b| b.cpus.map(u64::from))),
        against(l.in_use.memory_mb, nominal.memory_mb, borrow.map(|b| b.memory_mb)),
        against(l.in_use.gpus, nominal.gpus.map(u64::from), borrow.map(|b| b.gpus.map(u64::from))),
        format!("{}/{}", l.in_use.running_jobs, cap(l.limits.max_running_jobs)),
        format!("{}/{}", l.in_use.queued_jobs, cap(l.limits.max_queued_jobs)),
        l.limits.share.unwrap_or(1.0).to_string(),
    ]
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
            ProjectsCommand::Limits(args) => args.run(&client, out).await?,
            ProjectsCommand::Budget(args) => args.run(&client, out).await?,
            ProjectsCommand::Usage(args) => args.run(&client, out).await?,
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
