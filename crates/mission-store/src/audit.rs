//! The audit trail: who changed what, written in the transaction of the change.
//!
//! A request's task runs in an audit scope ([`scope`], set up by the server for every request
//! with its request id). The route (or domain function) that makes a change notes it ([`note`]:
//! the actor, the action, the target and what changed, never a secret) just before it calls the
//! store, and the store writes the noted entries in the transaction of that write, and only if it
//! commits (`commit_audited!`, and `commit_with_events!` in `events.rs`).
//! A change that fails leaves no entry; an entry never tells of a change that was not made.
//! Changes the scheduler writes (jobs submitted or stopped, stations and landing zones removed)
//! carry their notes to its task ([`take`], then [`with_notes`] there, or in its batch).

use std::cell::RefCell;
use std::future::Future;

use chrono::{DateTime, Utc};
use mission_api::AuditEntry;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::row::Columns;
use super::{Store, StoreError, to_micros, with_conn};

tokio::task_local! {
    static NOTED: RefCell<Noted>;
}

/// What a scope noted: its request id, and the entries not written yet.
struct Noted {
    request_id: String,
    entries: Vec<AuditNote>,
}

/// Who makes a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    /// The user.
    pub user_id: Uuid,
    /// Whether they act as an administrator.
    pub admin: bool,
}

/// A change to note: what was done to which resource (see [`AuditEntry`]).
#[derive(Debug, Clone)]
pub struct Change {
    action: &'static str,
    target_kind: &'static str,
    target_id: String,
    target_name: Option<String>,
    project_id: Option<Uuid>,
    changes: serde_json::Value,
}

impl Change {
    /// `action` (`KIND.VERB`) done to the `target_kind` resource `target_id`.
    pub fn new(action: &'static str, target_kind: &'static str, target_id: impl ToString) -> Self {
        Self {
            action,
            target_kind,
            target_id: target_id.to_string(),
            target_name: None,
            project_id: None,
            changes: serde_json::Value::Object(serde_json::Map::new()),
        }
    }

    /// The target's name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.target_name = Some(name.into());
        self
    }

    /// The project the target belongs to: its managers see the entry.
    pub fn in_project(mut self, project_id: impl Into<Option<Uuid>>) -> Self {
        self.project_id = project_id.into();
        self
    }

    /// What changed: the fields given, without secrets (serialised; a value that is not an
    /// object is kept as `{"value": …}`).
    pub fn with(mut self, changes: impl serde::Serialize) -> Self {
        self.changes = match serde_json::to_value(changes) {
            Ok(serde_json::Value::Object(fields)) => serde_json::Value::Object(fields),
            Ok(serde_json::Value::Null) | Err(_) => serde_json::json!({}),
            Ok(other) => serde_json::json!({ "value": other }),
        };
        self
    }
}

/// A noted entry, as it is written (and as it travels to the scheduler's task).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AuditNote {
    at: i64,
    actor_id: Option<String>,
    actor_role: String,
    request_id: String,
    action: String,
    target_kind: String,
    target_id: String,
    target_name: Option<String>,
    project_id: Option<String>,
    /// JSON text.
    changes: String,
}

/// Runs `request` in an audit scope for the request `request_id`.
pub async fn scope<F: Future>(request_id: String, request: F) -> F::Output {
    NOTED.scope(RefCell::new(Noted { request_id, entries: Vec::new() }), request).await
}

/// Runs `write` in a scope that has `notes` noted already: in the scheduler's task, for the
/// changes a request handed it.
pub async fn with_notes<F: Future>(notes: Vec<AuditNote>, write: F) -> F::Output {
    NOTED.scope(RefCell::new(Noted { request_id: String::new(), entries: notes }), write).await
}

/// Notes `change` by `actor`, for the scope's next audited write; outside a scope (the
/// service's own work, tests of the store) nothing is noted.
pub fn note(actor: Actor, change: Change) {
    let _ = NOTED.try_with(|noted| {
        let mut noted = noted.borrow_mut();
        let entry = AuditNote {
            at: to_micros(super::now()),
            actor_id: Some(actor.user_id.to_string()),
            actor_role: if actor.admin { "admin" } else { "user" }.to_owned(),
            request_id: noted.request_id.clone(),
            action: change.action.to_owned(),
            target_kind: change.target_kind.to_owned(),
            target_id: change.target_id,
            target_name: change.target_name,
            project_id: change.project_id.map(|id| id.to_string()),
            changes: change.changes.to_string(),
        };
        noted.entries.push(entry);
    });
}

/// Takes the entries noted and not written yet (to hand them to the scheduler).
pub fn take() -> Vec<AuditNote> {
    NOTED.try_with(|noted| std::mem::take(&mut noted.borrow_mut().entries)).unwrap_or_default()
}

/// The entries taken, as the JSON array the insert statements read.
pub(super) fn notes_json(notes: &[AuditNote]) -> String {
    serde_json::to_string(notes).expect("notes serialise")
}

/// [`SQLITE_APPEND_AUDIT`] from the parameter given (`"?"` in a script of several statements).
macro_rules! sqlite_append_audit {
    ($parameter:literal) => {
        concat!(
            "INSERT INTO audit_log (at, actor_id, actor_role, request_id, action, target_kind, target_id, \
             target_name, project_id, changes) \
             SELECT a.value ->> 'at', a.value ->> 'actor_id', a.value ->> 'actor_role', a.value ->> 'request_id', \
             a.value ->> 'action', a.value ->> 'target_kind', a.value ->> 'target_id', a.value ->> 'target_name', \
             a.value ->> 'project_id', a.value ->> 'changes' FROM json_each(",
            $parameter,
            ") AS a ORDER BY a.key"
        )
    };
}
pub(super) use sqlite_append_audit;

/// Appends the JSON array `$1` of [`AuditNote`]s (SQLite).
pub(super) const SQLITE_APPEND_AUDIT: &str = sqlite_append_audit!("$1");

/// [`SQLITE_APPEND_AUDIT`] on PostgreSQL.
pub(super) const POSTGRES_APPEND_AUDIT: &str = "INSERT INTO audit_log (at, actor_id, actor_role, request_id, \
    action, target_kind, target_id, target_name, project_id, changes) \
    SELECT (a ->> 'at')::bigint, a ->> 'actor_id', a ->> 'actor_role', a ->> 'request_id', a ->> 'action', \
    a ->> 'target_kind', a ->> 'target_id', a ->> 'target_name', a ->> 'project_id', a ->> 'changes' \
    FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS batch (a, k) ORDER BY k";

/// Writes the entries noted in this scope on `$tx`, a transaction of `$store` that has made its
/// change, and commits it: how an audited change is written.
macro_rules! commit_audited {
    ($store:expr, $tx:expr) => {{
        $crate::audit::append_audit!($store, $tx);
        $tx.commit().await?;
    }};
}
pub(super) use commit_audited;

/// Writes the entries noted in this scope on `$tx` (see [`commit_audited`]); nothing where none
/// are.
macro_rules! append_audit {
    ($store:expr, $tx:expr) => {{
        let notes = $crate::audit::take();
        if !notes.is_empty() {
            use $crate::audit as a;
            sqlx::query($store.dialect(a::SQLITE_APPEND_AUDIT, a::POSTGRES_APPEND_AUDIT))
                .bind(a::notes_json(&notes))
                .execute(&mut *$tx)
                .await?;
        }
    }};
}
pub(super) use append_audit;

/// Which entries to read.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only this user's changes.
    pub actor_id: Option<Uuid>,
    /// Only changes to resources of this project.
    pub project_id: Option<Uuid>,
    /// Only changes to this resource (its id).
    pub target_id: Option<String>,
    /// Only changes at or after.
    pub since: Option<DateTime<Utc>>,
    /// Only changes before.
    pub until: Option<DateTime<Utc>>,
    /// Only entries numbered below (the next page, newest first).
    pub before: Option<u64>,
    /// Only entries of these projects (a manager's); every entry when `None`.
    pub visible_projects: Option<Vec<Uuid>>,
    /// At most this many.
    pub limit: u32,
}

const AUDIT_COLUMNS: &str = "a.seq, a.at, a.actor_id, u.username, a.actor_role, a.request_id, a.action, \
    a.target_kind, a.target_id, a.target_name, a.project_id, a.changes";

impl Store {
    /// The entries matching `filter`, newest first.
    pub async fn audit_entries(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> = QueryBuilder::new(format!(
                    "SELECT {AUDIT_COLUMNS} FROM audit_log AS a LEFT JOIN users AS u ON u.user_id = a.actor_id \
                     WHERE 1 = 1"
                ));
                if let Some(actor) = filter.actor_id {
                    q.push(" AND a.actor_id = ").push_bind(actor.to_string());
                }
                if let Some(project) = filter.project_id {
                    q.push(" AND a.project_id = ").push_bind(project.to_string());
                }
                if let Some(target) = &filter.target_id {
                    q.push(" AND a.target_id = ").push_bind(target.clone());
                }
                if let Some(since) = filter.since {
                    q.push(" AND a.at >= ").push_bind(to_micros(since));
                }
                if let Some(until) = filter.until {
                    q.push(" AND a.at < ").push_bind(to_micros(until));
                }
                if let Some(before) = filter.before {
                    q.push(" AND a.seq < ").push_bind(i64::try_from(before).unwrap_or(i64::MAX));
                }
                if let Some(projects) = &filter.visible_projects {
                    q.push(" AND a.project_id IN (");
                    let mut list = q.separated(", ");
                    // An empty list matches nothing.
                    list.push_bind(String::new());
                    for project in projects {
                        list.push_bind(project.to_string());
                    }
                    q.push(")");
                }
                q.push(" ORDER BY a.seq DESC LIMIT ").push_bind(i64::from(filter.limit));
                q.build().fetch_all(conn).await?
            };
            rows.iter().map(entry_from_row).collect()
        })
    }

    /// Removes the entries of changes made before `before`; answers how many.
    pub async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        with_conn!(self, writer, |conn| {
            Ok(sqlx::query("DELETE FROM audit_log WHERE at < $1")
                .bind(to_micros(before))
                .execute(conn)
                .await?
                .rows_affected())
        })
    }
}

fn entry_from_row(r: &impl Columns) -> Result<AuditEntry, StoreError> {
    let changes = r.text("changes")?;
    Ok(AuditEntry {
        seq: r.count("seq")?,
        at: r.time("at")?,
        actor_id: r.opt_uuid("actor_id")?,
        actor: r.opt_text("username")?,
        actor_role: r.text("actor_role")?,
        request_id: r.text("request_id")?,
        action: r.text("action")?,
        target_kind: r.text("target_kind")?,
        target_id: r.text("target_id")?,
        target_name: r.opt_text("target_name")?,
        project_id: r.opt_uuid("project_id")?,
        changes: serde_json::from_str(&changes)
            .map_err(|e| StoreError::Corrupt(format!("the changes of audit entry: {e}")))?,
    })
}

/// A write of `$store`, `$body` (a `Result`) made with `$conn`, in one transaction with the
/// entries noted in this scope: both commit if `$body` made a change ([`Written`]); where it
/// failed neither does, and where it changed nothing (no such row) the entries are dropped.
macro_rules! audited_write {
    ($store:expr, |$conn:ident| $body:expr) => {
        $crate::with_conn!($store, writer, |connection| {
            let mut tx = sqlx::Connection::begin(&mut *connection).await?;
            let written = {
                let $conn = &mut *tx;
                $body
            };
            if $crate::audit::Written::changed(&written) {
                $crate::audit::commit_audited!($store, tx);
            } else if written.is_ok() {
                $crate::audit::take();
                tx.commit().await?;
            }
            written
        })
    };
}

/// What an audited write answers, and whether that says it changed something.
pub(super) trait Written {
    /// Whether the write made a change.
    fn changed(&self) -> bool;
}

impl<E> Written for Result<(), E> {
    fn changed(&self) -> bool {
        self.is_ok()
    }
}

/// Whether the row was there to change.
impl<E> Written for Result<bool, E> {
    fn changed(&self) -> bool {
        matches!(self, Ok(true))
    }
}

/// How many rows were changed.
impl<E> Written for Result<u64, E> {
    fn changed(&self) -> bool {
        matches!(self, Ok(rows) if *rows > 0)
    }
}
pub(super) use audited_write;
