//! Reading the audit trail: admins read every entry, a project's managers the entries of its
//! resources, and nobody else any.

use mission_api::AuditEntry;
use mission_store::audit::AuditFilter;

use super::{DomainError, DomainResult};
use crate::AppState;
use crate::auth::Principal;

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
