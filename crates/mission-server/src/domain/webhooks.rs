//! Webhooks: register, list, read, delete, and the deliveries of one.
//!
//! A user sees and manages their own webhooks (admins everyone's); anyone else's is not found.
//! The URL is a place the server POSTs to, so users other than admins may register only URLs
//! under the targets the server allows (`--webhook-target`), the rule cargo-bay endpoints follow.

use mission_api::{CreateWebhook, DeliveryStatus, Webhook, WebhookDelivery};
use mission_store::{self as store, WebhookRecord};
use url::Url;
use uuid::Uuid;

use super::{DomainError, DomainResult, outbound_url};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};

/// Webhooks one user may have.
pub const MAX_WEBHOOKS_PER_USER: u32 = 25;
/// Longest webhook URL, in bytes.
const MAX_URL_BYTES: usize = 2048;
/// Most mission ids, and most kinds, in one webhook's filter.
const MAX_FILTER_VALUES: usize = 100;
/// The bounds of a secret's length, in characters.
const SECRET_CHARS: std::ops::RangeInclusive<usize> = 16..=256;

/// A webhook the caller may see.
async fn visible(app: &AppState, who: Principal, webhook_id: Uuid) -> DomainResult<WebhookRecord> {
    match app.store.webhook(webhook_id).await? {
        Some(record) if who.admin || record.webhook.user_id == who.user_id => Ok(record),
        _ => Err(DomainError::not_found("webhook", webhook_id)),
    }
}

/// Whether `url` is `target` or below it: the same origin, and a path under the target's.
fn under(target: &Url, url: &Url) -> bool {
    let folder = target.path().trim_end_matches('/');
    target.scheme() == url.scheme()
        && target.host_str() == url.host_str()
        && target.port_or_known_default() == url.port_or_known_default()
        && (url.path() == folder || url.path().strip_prefix(folder).is_some_and(|rest| rest.starts_with('/')))
}

/// A webhook URL the caller may register, normalised.
fn check_url(app: &AppState, who: Principal, raw: &str) -> DomainResult<String> {
    if raw.len() > MAX_URL_BYTES {
        return Err(DomainError::invalid("url", format!("longer than {MAX_URL_BYTES} bytes")));
    }
    let url = outbound_url("url", raw)?;
    if !who.admin && !app.config.webhook_targets.iter().any(|target| under(target, &url)) {
        return Err(DomainError::invalid(
            "url",
            format!(
                "{raw:?}: this server does not allow webhooks there; an admin can allow it with \
                 `mission server --webhook-target`"
            ),
        ));
    }
    Ok(url.to_string())
}

/// Registers a webhook of the caller's. It gets the events its filter wants from now on,
/// beginning with its own `webhook.created` (when the filter wants that). Without a `secret` the
/// server makes one and answers it, this once.
pub async fn create(app: &AppState, who: Principal, req: CreateWebhook) -> DomainResult<Webhook> {
    let url = check_url(app, who, &req.url)?;
    if req.all && !who.admin {
        return Err(DomainError::Forbidden("only admins may have everyone's events delivered".into()));
    }
    for (field, count) in [("mission_ids", req.mission_ids.len()), ("kinds", req.kinds.len())] {
        if count > MAX_FILTER_VALUES {
            return Err(DomainError::invalid(field, format!("at most {MAX_FILTER_VALUES} values")));
        }
    }
    let kinds = req.kinds.iter().map(|kind| check_kind("kinds", kind)).collect::<DomainResult<Vec<_>>>()?;
    // Only missions the caller may read: an unknown one and another's are refused alike.
    for &mission_id in &req.mission_ids {
        match super::missions::readable(app, who, mission_id).await {
            Ok(_) => {}
            Err(DomainError::NotFound { .. }) => {
                return Err(DomainError::invalid("mission_ids", format!("no mission {mission_id} that you may read")));
            }
            Err(other) => return Err(other),
        }
    }
    let (secret, made) = match req.secret {
        Some(secret) => {
            let printable = secret.bytes().all(|b| b.is_ascii_graphic());
            if !SECRET_CHARS.contains(&secret.len()) || !printable {
                return Err(DomainError::invalid(
                    "secret",
                    format!(
                        "expected {} to {} printable ASCII characters without spaces",
                        SECRET_CHARS.start(),
                        SECRET_CHARS.end()
                    ),
                ));
            }
            (secret, false)
        }
        None => (crate::services::idp::random_secret(), true),
    };
    let webhook = Webhook {
        webhook_id: Uuid::new_v4(),
        user_id: who.user_id,
        url,
        mission_ids: req.mission_ids,
        kinds,
        all: req.all,
        created_at: store::now(),
        secret: None,
    };
    let sealed = app.sealing.seal(webhook.webhook_id, secret.as_bytes());
    // Its secret is not in it (sealed apart).
    audit::note(who, Change::new("webhook.create", "webhook", webhook.webhook_id).named(&webhook.url).with(&webhook));
    let mut webhook = app.store.insert_webhook(&webhook, &sealed, MAX_WEBHOOKS_PER_USER).await?.webhook;
    app.webhooks.created();
    webhook.secret = made.then_some(secret);
    Ok(webhook)
}

/// The caller's webhooks (everyone's, for admins), oldest first.
pub async fn list(app: &AppState, who: Principal) -> DomainResult<Vec<Webhook>> {
    let owner = (!who.admin).then_some(who.user_id);
    Ok(app.store.webhooks(owner).await?.into_iter().map(|r| r.webhook).collect())
}

/// One webhook the caller may see.
pub async fn get(app: &AppState, who: Principal, webhook_id: Uuid) -> DomainResult<Webhook> {
    Ok(visible(app, who, webhook_id).await?.webhook)
}

/// Deletes a webhook the caller may see: nothing more is sent to it, and its deliveries are
/// forgotten.
pub async fn delete(app: &AppState, who: Principal, webhook_id: Uuid) -> DomainResult<()> {
    let webhook = visible(app, who, webhook_id).await?.webhook;
    audit::note(who, Change::new("webhook.delete", "webhook", webhook_id).named(&webhook.url));
    if !app.store.delete_webhook(webhook_id).await? {
        return Err(DomainError::not_found("webhook", webhook_id));
    }
    Ok(())
}

/// The deliveries of a webhook the caller may see, newest event first: only those with
/// `status`, only events numbered below `before`, at most `limit`.
pub async fn deliveries(
    app: &AppState,
    who: Principal,
    webhook_id: Uuid,
    status: Option<DeliveryStatus>,
    before: Option<u64>,
    limit: u32,
) -> DomainResult<Vec<WebhookDelivery>> {
    let webhook_id = visible(app, who, webhook_id).await?.webhook.webhook_id;
    Ok(app.store.deliveries(webhook_id, status, before, limit).await?)
}

/// Longest kind filter, in bytes.
const MAX_KIND_BYTES: usize = 64;

/// Checks a kind filter given as `field`: lowercase letters, dots and underscores.
pub fn check_kind(field: &str, kind: &str) -> DomainResult<String> {
    let valid = !kind.is_empty()
        && kind.len() <= MAX_KIND_BYTES
        && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_');
    if !valid {
        return Err(DomainError::invalid(
            field,
            format!(
                "expected a kind such as job, job.completed or mission.created (lowercase letters, dots, \
                 underscores; at most {MAX_KIND_BYTES} bytes), got {kind:?}"
            ),
        ));
    }
    Ok(kind.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_under_a_target_by_origin_and_whole_path_segments() {
        let target = Url::parse("http://127.0.0.1:8080/hooks/").unwrap();
        let is_under = |url: &str| under(&target, &Url::parse(url).unwrap());
        assert!(is_under("http://127.0.0.1:8080/hooks"));
        assert!(is_under("http://127.0.0.1:8080/hooks/a/b?token=1"));
        assert!(!is_under("http://127.0.0.1:8080/hooksmith"));
        assert!(!is_under("http://127.0.0.1:8081/hooks/a"));
        assert!(!is_under("https://127.0.0.1:8080/hooks/a"));
        assert!(!is_under("http://127.0.0.2:8080/hooks/a"));
        assert!(!is_under("http://127.0.0.1:8080/"));
        let origin = Url::parse("https://example.org").unwrap();
        assert!(under(&origin, &Url::parse("https://example.org:443/any/path").unwrap()));
        assert!(!under(&origin, &Url::parse("https://example.org.evil.net/").unwrap()));
    }
}
