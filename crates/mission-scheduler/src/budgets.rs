//! Projects' budgets, as placement applies them.
//!
//! [`Budgets`] keeps, for each project with a budget, what it may spend per period and what it
//! spent in the current one ([`Spent`]): CPU-seconds and GPU-seconds, its jobs' CPUs (GPUs) times
//! their time on a landing zone, charged as each leaves its landing zone (`fair_share.rs`
//! measures it); and kWh and money, charged as each ends with what it was reckoned
//! ([`mission_api::energy`]). It is read from the store's ended jobs when the budget is loaded,
//! so a restart loses nothing; a new period starts from nothing.
//!
//! A job placed holds what it may spend: its CPUs (GPUs) times its time limit, or an hour without
//! one (Slurm's `GrpTRESMins` counts running jobs the same way), and the energy and money its
//! station's model gives for that (every CPU busy), until it leaves its landing zone and is
//! charged what it used. A job whose hold would take the project past its budget waits
//! ([`Budgets::refusal`]), so two jobs racing for the last of a budget never both start; once it
//! is spent, no job that needs what is spent starts until the next period (or a larger budget).
//! Running jobs finish.
//!
//! At 80% of any amount the project is warned once per period ([`Budgets::charge`] says so;
//! the scheduler writes a `project.budget_warning` event to each member).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mission_api::ProjectBudget;
use mission_store::{BudgetRecord, Spent};
use uuid::Uuid;

/// At this part of a budget its project is warned.
const WARN_AT: f64 = 0.8;

/// One project's budget and what it spent this period.
#[derive(Debug, Clone)]
struct Budget {
    project: String,
    budget: ProjectBudget,
    period_start: DateTime<Utc>,
    period_end: Option<DateTime<Utc>>,
    /// What it was charged this period.
    spent: Spent,
    /// What its placed jobs hold.
    held: Spent,
    /// Warned this period.
    warned: bool,
}

/// An amount a budget may set, as [`Budget::amounts`] lists them.
struct Amount<'a> {
    /// In words, plural: `CPU-hours`, `kWh`, `EUR`.
    what: &'a str,
    /// The budget's amount, in its own unit (hours, kWh, money).
    limit: f64,
    /// Its unit in [`Spent`]'s: 3,600 seconds to the hour, else 1.
    scale: f64,
    /// This amount of a [`Spent`].
    of: fn(&Spent) -> f64,
    /// Spending it all stops every job of the project (not only those that need GPUs).
    every_job: bool,
}

impl Budget {
    /// Starts the next period when `now` is past this one.
    fn roll(&mut self, now: DateTime<Utc>) {
        if self.period_end.is_some_and(|end| now >= end) {
            self.period_start = self.budget.period.start(now);
            self.period_end = self.budget.period.end(now);
            self.spent = Spent::default();
            self.warned = false;
        }
    }

    /// The amounts the budget sets (placement asks for each queued job of the project: nothing
    /// is allocated).
    fn amounts(&self) -> impl Iterator<Item = Amount<'_>> {
        let b = &self.budget;
        let amount = |what, limit: Option<f64>, scale, of, every_job| {
            limit.map(|limit| Amount { what, limit, scale, of, every_job })
        };
        let money = b.money.as_ref().map(|m| (m.currency.as_str(), m.amount));
        [
            amount("CPU-hours", b.cpu_hours, 3600.0, |s: &Spent| s.cpu_seconds, true),
            amount("GPU-hours", b.gpu_hours, 3600.0, |s: &Spent| s.gpu_seconds, false),
            amount("kWh", b.kwh, 1.0, |s: &Spent| s.kwh, true),
            amount(money.map_or("", |m| m.0), money.map(|m| m.1), 1.0, |s: &Spent| s.money, true),
        ]
        .into_iter()
        .flatten()
    }

    /// The largest part of any amount spent (0 where the budget sets none).
    fn part_spent(&self) -> f64 {
        let part = |a: &Amount| {
            let spent = (a.of)(&self.spent) / a.scale;
            if a.limit > 0.0 { spent / a.limit } else { f64::INFINITY }
        };
        self.amounts().map(|a| part(&a)).fold(0.0, f64::max)
    }

    /// What it spent by `now` (nothing, in a period after this one).
    fn spent_at(&self, now: DateTime<Utc>) -> Spent {
        if self.period_end.is_some_and(|end| now >= end) { Spent::default() } else { self.spent }
    }
}

fn add(a: &mut Spent, b: &Spent) {
    a.cpu_seconds += b.cpu_seconds;
    a.gpu_seconds += b.gpu_seconds;
    a.kwh += b.kwh;
    a.money += b.money;
}

fn take_away(a: &mut Spent, b: &Spent) {
    a.cpu_seconds = (a.cpu_seconds - b.cpu_seconds).max(0.0);
    a.gpu_seconds = (a.gpu_seconds - b.gpu_seconds).max(0.0);
    a.kwh = (a.kwh - b.kwh).max(0.0);
    a.money = (a.money - b.money).max(0.0);
}

/// What a warning tells: the project, its budget and what it spent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Warning {
    pub project_id: Uuid,
    pub data: serde_json::Value,
}

/// Every project's budget; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    by_project: HashMap<Uuid, Budget>,
    /// What each placed job holds of its project's budget, where it has one or gets one while
    /// the job runs.
    holds: HashMap<Uuid, (Uuid, Spent)>,
}

impl Budgets {
    /// Sets (or replaces) a project's budget, `spent` in the period holding `now`. `warned`:
    /// whether a warning went out this period already (at a restart one did where 80% was
    /// passed); a budget set anew warns at once when it is passed.
    pub fn set(&mut self, record: BudgetRecord, spent: Spent, now: DateTime<Utc>, warned: bool) -> Option<Warning> {
        let budget = record.budget;
        let mut entry = Budget {
            project: record.project_name,
            period_start: budget.period.start(now),
            period_end: budget.period.end(now),
            budget,
            spent,
            held: Spent::default(),
            warned: false,
        };
        for (project, holds) in self.holds.values() {
            if *project == record.project_id {
                add(&mut entry.held, holds);
            }
        }
        let passed = entry.part_spent() >= WARN_AT;
        entry.warned = passed;
        self.by_project.insert(record.project_id, entry);
        (passed && !warned).then(|| self.warning(record.project_id, now))
    }

    /// Drops a project's budget.
    pub fn remove(&mut self, project: Uuid) {
        self.by_project.remove(&project);
    }

    /// Whether a project's budget counts energy or money (`Some`), and in which currency the
    /// money (`Some(Some(…))`): what its jobs' holds and charges of those are reckoned for.
    pub fn footprint_counted(&self, project: Uuid) -> Option<Option<&str>> {
        let budget = &self.by_project.get(&project)?.budget;
        let currency = budget.money.as_ref().map(|m| m.currency.as_str());
        (budget.kwh.is_some() || currency.is_some()).then_some(currency)
    }

    /// Why a job of `project` that may spend `needs` may not start at `now`: the budget it
    /// spent, or would pass, in words, and whether no job of the project may start (an amount
    /// every job spends is spent); `None` when it may.
    pub fn refusal(&self, project: Uuid, needs: Spent, now: DateTime<Utc>) -> Option<(String, bool)> {
        let entry = self.by_project.get(&project)?;
        // A new period has nothing spent in it yet.
        let spent = entry.spent_at(now);
        let when = entry.budget.period.words(entry.period_start.max(entry.budget.period.start(now)));
        for amount in entry.amounts() {
            let (spent, held, needs) = ((amount.of)(&spent), (amount.of)(&entry.held), (amount.of)(&needs));
            if needs <= 0.0 {
                continue;
            }
            let (limit, what) = (amount.limit * amount.scale, amount.what);
            let shown = |v: f64| format!("{:.2}", v / amount.scale);
            if spent >= limit {
                let why = format!("project {} spent its {} {what} {when}", entry.project, amount.limit);
                return Some((why, amount.every_job));
            }
            if spent + held + needs > limit {
                let why = format!(
                    "project {} has {} of its {} {what} left {when}, {} of them held by its running jobs; this \
                     job may use {} (its time limit, or an hour without one)",
                    entry.project,
                    shown(limit - spent),
                    amount.limit,
                    shown(held),
                    shown(needs)
                );
                return Some((why, false));
            }
        }
        None
    }

    /// A job of `project` was placed, holding `holds` of its budget until it leaves its landing
    /// zone ([`Budgets::charge`]). Kept for every placed job, so that a budget set while a
    /// project's jobs run counts what they hold ([`Budgets::set`]).
    pub fn hold(&mut self, job_id: Uuid, project: Uuid, holds: Spent) {
        self.holds.insert(job_id, (project, holds));
        let Some(entry) = self.by_project.get_mut(&project) else { return };
        add(&mut entry.held, &holds);
    }

    /// Every project with a budget, and the CPU-hours and GPU-hours it has left at `now` (of the
    /// amounts it sets; never less than none).
    pub fn left(&self, now: DateTime<Utc>) -> impl Iterator<Item = (Uuid, Option<f64>, Option<f64>)> + '_ {
        self.by_project.iter().map(move |(project, entry)| {
            let spent = entry.spent_at(now);
            let left = |hours: Option<f64>, seconds: f64| hours.map(|h| (h - seconds / 3600.0).max(0.0));
            (*project, left(entry.budget.cpu_hours, spent.cpu_seconds), left(entry.budget.gpu_hours, spent.gpu_seconds))
        })
    }

    /// Charges `project` what its job `job_id` used as it left its landing zone, or as it ended
    /// (its energy and money) at `now`, in place of what it held (see [`Charge`]): the warning
    /// to send, when this takes the project past 80% of its budget.
    pub fn charge(&mut self, job_id: Uuid, project: Uuid, used: Charge, now: DateTime<Utc>) -> Option<Warning> {
        let released = match self.holds.get_mut(&job_id) {
            Some((_, held)) => {
                let released = used.part_of(held);
                take_away(held, &released);
                if *held == Spent::default() {
                    self.holds.remove(&job_id);
                }
                released
            }
            None => Spent::default(),
        };
        let entry = self.by_project.get_mut(&project)?;
        take_away(&mut entry.held, &released);
        entry.roll(now);
        add(&mut entry.spent, &used.spent());
        if entry.warned || entry.part_spent() < WARN_AT {
            return None;
        }
        entry.warned = true;
        Some(self.warning(project, now))
    }

    fn warning(&self, project_id: Uuid, now: DateTime<Utc>) -> Warning {
        let entry = &self.by_project[&project_id];
        let hours = |seconds: f64| (seconds / 36.0).round() / 100.0;
        let data = serde_json::json!({
            "project_id": project_id,
            "project": entry.project,
            "period": entry.budget.period,
            "period_start": entry.period_start,
            "cpu_hours": entry.budget.cpu_hours,
            "gpu_hours": entry.budget.gpu_hours,
            "kwh": entry.budget.kwh,
            "money": entry.budget.money,
            "spent_cpu_hours": hours(entry.spent.cpu_seconds),
            "spent_gpu_hours": hours(entry.spent.gpu_seconds),
            "spent_kwh": (entry.spent.kwh * 1000.0).round() / 1000.0,
            "spent_money": entry.budget.money.as_ref().map(|_| (entry.spent.money * 100.0).round() / 100.0),
            "detail": format!(
                "project {} has spent {:.0}% of its budget {}",
                entry.project,
                (entry.part_spent() * 100.0).min(100.0).floor(),
                entry.budget.period.words(now)
            ),
        });
        Warning { project_id, data }
    }
}

/// What [`Budgets::charge`] charges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Charge {
    /// CPU-seconds and GPU-seconds, as a job leaves its landing zone.
    Time { cpu_seconds: f64, gpu_seconds: f64 },
    /// kWh and money (in the budget's currency), as a job ends.
    Footprint { kwh: f64, money: f64 },
}

impl Charge {
    fn spent(self) -> Spent {
        match self {
            Self::Time { cpu_seconds, gpu_seconds } => Spent { cpu_seconds, gpu_seconds, ..Spent::default() },
            Self::Footprint { kwh, money } => Spent { kwh, money, ..Spent::default() },
        }
    }

    /// The amounts of `held` this charges in place of: leaving its landing zone, a job lets go
    /// of its whole hold (a job that ends without figures, a lost one, is reckoned no energy);
    /// its footprint takes the place of its energy and money, where they are still held.
    fn part_of(self, held: &Spent) -> Spent {
        match self {
            Self::Time { .. } => *held,
            Self::Footprint { .. } => Spent { kwh: held.kwh, money: held.money, ..Spent::default() },
        }
    }
}

#[cfg(test)]
mod tests {
    use mission_api::BudgetPeriod;

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// CPU-seconds and GPU-seconds.
    fn time(cpu_seconds: f64, gpu_seconds: f64) -> Spent {
        Spent { cpu_seconds, gpu_seconds, ..Spent::default() }
    }

    fn used(cpu_seconds: f64, gpu_seconds: f64) -> Charge {
        Charge::Time { cpu_seconds, gpu_seconds }
    }

    fn hours(cpu_hours: Option<f64>, gpu_hours: Option<f64>, period: BudgetPeriod) -> ProjectBudget {
        ProjectBudget { cpu_hours, gpu_hours, kwh: None, money: None, period }
    }

    #[test]
    fn a_budget_warns_once_at_80_percent_stops_at_100_and_starts_again_next_period() {
        let project = Uuid::from_u128(1);
        let record = BudgetRecord {
            project_id: project,
            project_name: "astro".into(),
            budget: hours(Some(10.0), Some(1.0), BudgetPeriod::Month),
            updated_at: at("2026-11-01T00:00:00Z"),
        };
        let mut budgets = Budgets::default();
        let now = at("2026-11-27T10:00:00Z");
        assert_eq!(budgets.set(record.clone(), time(7.0 * 3600.0, 0.0), now, false), None, "70% is no warning yet");
        let (hour, job) = (time(3600.0, 0.0), Uuid::from_u128(10));
        assert_eq!(budgets.refusal(project, hour, now), None);
        // A job that may run an hour holds it: another that may, has 3 hours, one held, left.
        budgets.hold(job, project, hour);
        assert_eq!(budgets.refusal(project, time(2.0 * 3600.0, 0.0), now), None);
        assert_eq!(
            budgets.refusal(project, time(2.5 * 3600.0, 0.0), now).unwrap().0,
            "project astro has 3.00 of its 10 CPU-hours left for November 2026, 1.00 of them held by its running \
             jobs; this job may use 2.50 (its time limit, or an hour without one)"
        );
        let warning = budgets.charge(job, project, used(3600.0, 0.0), now).expect("80%");
        assert_eq!(warning.data["spent_cpu_hours"], 8.0);
        assert_eq!(warning.data["detail"], "project astro has spent 80% of its budget for November 2026");
        assert_eq!(budgets.charge(job, project, used(1800.0, 0.0), now), None, "once a period");
        assert_eq!(budgets.refusal(project, hour, now), None, "8.5 of 10 hours");
        budgets.charge(job, project, used(5400.0, 0.0), now);
        assert_eq!(
            budgets.refusal(project, time(1.0, 0.0), now).unwrap(),
            ("project astro spent its 10 CPU-hours for November 2026".to_owned(), true)
        );
        // December: nothing spent, nothing refused.
        let december = at("2026-12-01T00:00:01Z");
        assert_eq!(budgets.refusal(project, hour, december), None);
        // GPU-hours spent stop GPU jobs only.
        assert!(budgets.charge(job, project, used(0.0, 3600.0), december).is_some());
        assert_eq!(
            budgets.refusal(project, time(3600.0, 3600.0), december).unwrap(),
            ("project astro spent its 1 GPU-hours for December 2026".to_owned(), false)
        );
        assert_eq!(budgets.refusal(project, hour, december), None);
        // Set anew past 80%: a warning at once, unless one went out already (a restart).
        assert!(budgets.set(record.clone(), time(9.0 * 3600.0, 0.0), now, false).is_some());
        assert!(budgets.set(record, time(9.0 * 3600.0, 0.0), now, true).is_none());
        assert_eq!(budgets.left(now).collect::<Vec<_>>(), [(project, Some(1.0), Some(1.0))]);
        budgets.remove(project);
        assert_eq!(budgets.refusal(project, time(3600.0, 3600.0), now), None);
    }

    #[test]
    fn a_budget_set_while_jobs_run_counts_what_they_hold() {
        let project = Uuid::from_u128(1);
        let mut budgets = Budgets::default();
        let now = at("2026-11-27T10:00:00Z");
        // Placed before the project has a budget: two jobs that may run an hour each.
        budgets.hold(Uuid::from_u128(10), project, time(3600.0, 0.0));
        budgets.hold(Uuid::from_u128(11), project, time(3600.0, 0.0));
        let record = BudgetRecord {
            project_id: project,
            project_name: "astro".into(),
            budget: hours(Some(3.0), None, BudgetPeriod::Total),
            updated_at: now,
        };
        budgets.set(record, time(0.0, 0.0), now, false);
        assert_eq!(budgets.refusal(project, time(3600.0, 0.0), now), None, "1 of 3 hours is free");
        assert!(budgets.refusal(project, time(2.0 * 3600.0, 0.0), now).unwrap().0.contains("2.00 of them held"));
        // One ends having used half its hour: its hold goes, its use is spent.
        budgets.charge(Uuid::from_u128(10), project, used(1800.0, 0.0), now);
        assert_eq!(budgets.refusal(project, time(1.5 * 3600.0, 0.0), now), None, "0.5 spent, 1 held, 1.5 free");
    }

    /// Energy and money are held as jobs start (their model's figure for their time) and charged
    /// as they end; spending either stops every job, and money in another currency is not counted.
    #[test]
    fn a_budget_in_kwh_and_money_warns_and_stops_every_job() {
        let project = Uuid::from_u128(1);
        let money = mission_api::Cost { amount: 10.0, currency: "EUR".into() };
        let budget = ProjectBudget { kwh: Some(2.0), money: Some(money), ..hours(None, None, BudgetPeriod::Month) };
        let record = BudgetRecord {
            project_id: project,
            project_name: "astro".into(),
            budget,
            updated_at: at("2026-11-01T00:00:00Z"),
        };
        let mut budgets = Budgets::default();
        let now = at("2026-11-27T10:00:00Z");
        assert_eq!(budgets.footprint_counted(project), None, "no budget yet");
        budgets.set(record, Spent { kwh: 1.0, money: 2.0, ..Spent::default() }, now, false);
        assert_eq!(budgets.footprint_counted(project), Some(Some("EUR")));
        let job = Uuid::from_u128(10);
        let needs = Spent { kwh: 0.5, money: 1.0, ..time(3600.0, 0.0) };
        assert_eq!(budgets.refusal(project, needs, now), None, "1.5 of 2 kWh with it");
        budgets.hold(job, project, needs);
        assert_eq!(
            budgets.refusal(project, Spent { kwh: 0.6, ..needs }, now).unwrap().0,
            "project astro has 1.00 of its 2 kWh left for November 2026, 0.50 of them held by its running jobs; this \
             job may use 0.60 (its time limit, or an hour without one)"
        );
        // It ends having drawn 0.7 kWh and cost EUR 6: 85% of the energy, 80% of the money.
        let warning = budgets.charge(job, project, Charge::Footprint { kwh: 0.7, money: 6.0 }, now).expect("past 80%");
        assert_eq!((warning.data["spent_kwh"].as_f64(), warning.data["spent_money"].as_f64()), (Some(1.7), Some(8.0)));
        assert_eq!(warning.data["detail"], "project astro has spent 85% of its budget for November 2026");
        // Leaving its landing zone lets go of the rest of its hold.
        assert_eq!(budgets.charge(job, project, used(1800.0, 0.0), now), None);
        assert_eq!(budgets.refusal(project, Spent { kwh: 0.3, ..Spent::default() }, now), None, "1.7 + 0.3 of 2");
        // Money spent stops every job, whatever it needs.
        budgets.charge(Uuid::from_u128(11), project, Charge::Footprint { kwh: 0.0, money: 2.5 }, now);
        assert_eq!(
            budgets.refusal(project, Spent { money: 0.01, ..time(1.0, 0.0) }, now).unwrap(),
            ("project astro spent its 10 EUR for November 2026".to_owned(), true)
        );
    }
}
