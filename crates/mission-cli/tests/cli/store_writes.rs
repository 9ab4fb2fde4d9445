//! What one job's whole life costs the store, counted rather than timed (a count is stable where
//! a time is not): a real agent runs trivial jobs (`true`) one after another on an in-process
//! server, and every statement the server sends its database is seen as sqlx reports it (its
//! `sqlx::query` events: the statement's summary and the rows it changed). The writes of each
//! job's life, from its submission to its end, must stay within today's figures, on SQLite and
//! on PostgreSQL, and so must its reads on SQLite (on PostgreSQL, where transactions' locks and
//! notices are statements too, they are printed beside them). The writes that come on their own clock
//! (heartbeats, replicas' liveness, pruning) are left out.

use std::collections::BTreeMap;
use std::sync::Mutex;

use mission_client::JobResources;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission};

/// Statements seen, by their summary (a statement's first words, as sqlx gives them): how many,
/// and the rows they changed.
static SEEN: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// Counts the `sqlx::query` events into [`SEEN`]; nothing else is enabled.
struct Counter;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() == "sqlx::query"
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            summary: String,
            rows: u64,
        }
        impl Visit for Fields {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "summary" {
                    value.clone_into(&mut self.summary);
                }
            }
            fn record_u64(&mut self, field: &Field, value: u64) {
                if field.name() == "rows_affected" {
                    self.rows = value;
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "summary" {
                    self.summary = format!("{value:?}").trim_matches('"').to_owned();
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut seen = SEEN.lock().unwrap();
        let entry = seen.entry(fields.summary.trim_end_matches(" …").to_owned()).or_default();
        entry.0 += 1;
        entry.1 += fields.rows;
    }
}

/// What a stretch of the server's work sent its database: writes (statements, rows changed) and
/// reads (statements), and the statements by summary.
#[derive(Debug, Default)]
struct Tally {
    writes: u64,
    rows: u64,
    reads: u64,
    by_summary: BTreeMap<String, (u64, u64)>,
}

/// Whether a statement (by its summary) changes the database: an INSERT, UPDATE, DELETE, or a
/// script of them (SQLite's batch writes begin a transaction).
fn writes(summary: &str) -> bool {
    let first = summary.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
    matches!(first.as_str(), "insert" | "update" | "delete" | "begin" | "with" | "replace")
}

/// A write that comes on its own clock, not a job's: an agent's heartbeat, a replica saying it
/// is alive or sweeping its mail, and the periodic pruning of events, idempotency keys and
/// sign-in brakes.
fn clocked(summary: &str) -> bool {
    let summary = summary.to_ascii_lowercase();
    [
        "update landing_zones set last_seen_at",
        "insert into replicas",
        "delete from replica_mail",
        "delete from events",
        "delete from idempotency_keys",
        "delete from sign_in_brakes",
    ]
    .iter()
    .any(|prefix| summary.starts_with(prefix))
}

/// What was seen since `before` (a copy of [`SEEN`] then).
fn since(before: &BTreeMap<String, (u64, u64)>) -> Tally {
    let mut tally = Tally::default();
    for (summary, (count, rows)) in SEEN.lock().unwrap().iter() {
        let (was, was_rows) = before.get(summary).copied().unwrap_or_default();
        let (count, rows) = (count - was, rows - was_rows);
        if count == 0 || clocked(summary) {
            continue;
        }
        if writes(summary) {
            tally.writes += count;
            tally.rows += rows;
        } else {
            tally.reads += count;
        }
        tally.by_summary.insert(summary.clone(), (count, rows));
    }
    tally
}

/// Runs `jobs` trivial jobs one after another on a server on `database` (SQLite where `None`)
/// with a real agent, and answers each job's tally, from its submission to its end (the
/// client's wait for it, a long poll, among the reads).
async fn each_jobs_life(database: Option<mission_store::DatabaseUrl>, jobs: usize) -> Vec<Tally> {
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Counter));
    let (server, admin) = cluster(move |c| c.database_url = database.or(c.database_url.take())).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz", TWO_CPUS).await;
    let alice = &server.client;
    let shell = mission(alice, SHELL, &[("run.sh", "true\n")], &[]).await;
    // A first job warms what is cached once (the mission's files on the agent, prepared statements).
    let first = alice.run_job_on_station(shell.mission_id, local_station(), JobResources::default()).await.unwrap();
    alice.wait_for_job(first.job_id).await.unwrap();
    let mut tallies = Vec::new();
    for _ in 0..jobs {
        let before = SEEN.lock().unwrap().clone();
        let job = alice.run_job_on_station(shell.mission_id, local_station(), JobResources::default()).await.unwrap();
        let done = alice.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, mission_client::JobStatus::Completed, "{done:?}");
        tallies.push(since(&before));
    }
    tallies
}

/// Prints the tallies and checks each against the ceilings: statements that write, rows, and
/// (where given) statements that read.
fn check(store: &str, tallies: &[Tally], (most_writes, most_rows): (u64, u64), most_reads: Option<u64>) {
    for (n, tally) in tallies.iter().enumerate() {
        println!("{store}, job {n}: {} writes, {} rows, {} reads", tally.writes, tally.rows, tally.reads);
        for (summary, (count, rows)) in &tally.by_summary {
            println!("  {count:>3} × {summary} ({rows} rows)");
        }
    }
    for tally in tallies {
        assert!(tally.writes > 0 && tally.rows > 0, "no writes seen: is the counter the global subscriber?");
        assert!(
            tally.writes <= most_writes && tally.rows <= most_rows,
            "one job's life on {store} wrote more than today's {most_writes} statements and {most_rows} rows: \
             {tally:#?}"
        );
        if let Some(most_reads) = most_reads {
            assert!(
                tally.reads <= most_reads,
                "one job's life on {store} read more than today's {most_reads}: {tally:#?}"
            );
        }
    }
}

#[tokio::test]
async fn one_jobs_life_writes_no_more_than_it_did_on_sqlite() {
    let tallies = each_jobs_life(None, 5).await;
    check("SQLite", &tallies, SQLITE_CEILING, Some(SQLITE_READS_CEILING));
}

#[tokio::test]
async fn one_jobs_life_writes_no_more_than_it_did_on_postgres() {
    let Some(database) = mission_testkit::PostgresDatabase::create().await else { return };
    let tallies = each_jobs_life(Some(database.url.clone()), 5).await;
    check("PostgreSQL", &tallies, POSTGRES_CEILING, None);
}

/// Today's figures for one job's life (statements that write, rows changed), where its six
/// moves (queued, assigned, staging, running, uploading, completed) fall into anything from two
/// to six of the scheduler's batch writes, as the agent's reports happen to arrive: the ceiling
/// is the figure with every move in a batch of its own. Measured (2026-11-29) with two or three
/// batches: SQLite 4-5 statements, 21-22 rows; PostgreSQL 16 statements, 19 rows.
///
/// SQLite: the submission's idempotency key (an insert, an update) and one script per batch;
/// rows as sqlx reports them, 17 a job and one per batch (sqlite3_changes() after each statement
/// of a script, which repeats the last count after BEGIN and COMMIT), so 2 + 6 and 2 + 17 + 6.
const SQLITE_CEILING: (u64, u64) = (8, 25);
/// The reads of one job's life on SQLite, its client waiting for its end: 9 measured
/// (2026-11-29; 14-15 before placement read its facts in one query and the event hub took the
/// scheduler's events from its commits): the submission's mission and station, the placement's
/// facts, the ending's jobs, and the client's wait (the event log's bounds and a read of it, the
/// job's row and history twice). One over it for a wait that polls once more.
const SQLITE_READS_CEILING: u64 = 10;
/// PostgreSQL: the idempotency key's two statements, the audit entry, the job's insert, and per
/// batch its history, its two event inserts and the job's update (4 + 4 × 6 statements); rows:
/// 6 history, 6 events, the audit entry, the key's two, the insert and one update per batch
/// (16 + 6).
const POSTGRES_CEILING: (u64, u64) = (28, 22);
