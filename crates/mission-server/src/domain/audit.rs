//! The audit trail: noting the changes the domain makes (written by the store in the
//! transaction of the change, see `mission_store::audit`), reading it back (admins read every
//! entry, a project's managers the entries of its resources, and nobody else any), and pruning
//! entries past the retention.

use std::time::Duration;

use mission_api::AuditEntry;
use mission_store::audit::{Actor, AuditFilter};
use tokio_util::sync::CancellationToken;

pub use mission_store::audit::Change;

use super::{DomainError, DomainResult};
use crate::AppState;
use crate::domain::Principal;

/// How often entries past the retention window are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The entries matching `filter` that `who` may read, newest first.
pub async fn entries(app: &AppState, who: Principal, mut filter: AuditFilter) -> DomainResult<Vec<AuditEntry>> {
    if !who.admin {
        let managed = app.store.managed_projects(who.user_id).await?;
        if managed.is_empty() {
            return Err(DomainError::Forbidden(
                "only admins and the managers of a project may read the audit trail".into(),
            ));
        }
        if let Some(project) = filter.project_id.filter(|p| !managed.contains(p)) {
            return Err(DomainError::Forbidden(format!("you do not manage project {project}")));
        }
        filter.visible_projects = Some(managed);
    }
    Ok(app.store.audit_entries(&filter).await?)
}

/// Notes `change`, made by `who`, for the request's next audited write.
pub fn note(who: Principal, change: Change) {
    mission_store::audit::note(Actor { user_id: who.user_id, admin: who.admin }, change);
}

/// Removes entries older than `retention` every hour until `shutdown`.
pub async fn prune(store: mission_store::Store, retention: Duration, shutdown: CancellationToken) {
    let Ok(retention) = chrono::Duration::from_std(retention) else { return };
    let mut every = tokio::time::interval(PRUNE_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = every.tick() => {
                match store.prune_audit(mission_store::now() - retention).await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "removed audit entries past the retention"),
                    Err(e) => tracing::warn!("pruning the audit trail: {e}"),
                }
            }
        }
    }
}
