//! The audit trail: who changed what (admins: everything; a project's managers: its resources).

use mission_api::AuditPage;
use uuid::Uuid;

use crate::{Client, Error};

/// Which entries [`Client::audit`] reads. Readable from JSON (the Python package's form).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditQuery {
    /// Only changes by this user (id or username).
    pub actor: Option<String>,
    /// Only changes to this project's resources.
    pub project_id: Option<Uuid>,
    /// Only changes to this resource (its id).
    pub target: Option<String>,
    /// Only changes at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only changes before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries numbered below this (the next page: the last page's `next_before`).
    pub before: Option<u64>,
    /// Entries per page, 1 to 1000 (the server's default, 100, when absent).
    pub limit: Option<u32>,
}

impl AuditQuery {
    fn pairs(&self, format: &str) -> Vec<(&'static str, String)> {
        let time = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut pairs = vec![("format", format.to_owned())];
        pairs.extend(self.actor.clone().map(|a| ("actor", a)));
        pairs.extend(self.project_id.map(|p| ("project_id", p.to_string())));
        pairs.extend(self.target.clone().map(|t| ("target", t)));
        pairs.extend(self.since.map(|t| ("since", time(t))));
        pairs.extend(self.until.map(|t| ("until", time(t))));
        pairs.extend(self.before.map(|b| ("before", b.to_string())));
        pairs.extend(self.limit.map(|l| ("limit", l.to_string())));
        pairs
    }
}

impl Client {
    /// A page of the audit trail, newest first.
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditPage, Error> {
        self.get_json("/audit", &query.pairs("json")).await
    }

    /// Every entry matching `query` (its `before` and `limit` aside) as JSON lines, newest first.
    pub async fn audit_jsonl(&self, query: &AuditQuery) -> Result<String, Error> {
        let pairs: Vec<_> =
            query.pairs("jsonl").into_iter().filter(|(key, _)| !matches!(*key, "before" | "limit")).collect();
        let response =
            crate::client::check(self.send("/audit", |http, url| http.get(url).query(&pairs)).await?).await?;
        Ok(response.text().await?)
    }
}
