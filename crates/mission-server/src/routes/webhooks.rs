//! The webhooks API: register, list, read, delete, and the deliveries of one.
//!
//! A user sees and manages their own webhooks (admins everyone's). The URL is a place the server
//! POSTs to, so users other than admins may register only URLs under the targets the server
//! allows (`--webhook-target`), the rule cargo-bay endpoints follow.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CreateWebhook, DeliveryStatus, Webhook, WebhookDelivery};
use url::Url;
use uuid::Uuid;

use super::extract::{ApiJson, QueryPairs, parse_id};
use crate::AppState;
use crate::audit::{self, Change};
use crate::auth::Principal;
use crate::domain::outbound_url;
use crate::error::{ApiError, ApiResult};
use crate::events::check_kind;
use mission_store::{self as store, WebhookRecord};

/// Webhooks one user may have.
pub const MAX_WEBHOOKS_PER_USER: u32 = 25;
/// Longest webhook URL, in bytes.
const MAX_URL_BYTES: usize = 2048;
/// Most mission ids, and most kinds, in one webhook's filter.
const MAX_FILTER_VALUES: usize = 100;
/// The bounds of a secret's length, in characters.
const SECRET_CHARS: std::ops::RangeInclusive<usize> = 16..=256;
/// Deliveries one listing answers by default, and at most.
const DELIVERIES_PAGE: (u32, u32) = (100, 1000);

/// Loads a webhook the caller may see, as a 404 otherwise.
async fn visible(app: &AppState, who: Principal, raw_id: &str) -> ApiResult<WebhookRecord> {
    let id = parse_id("webhook_id", raw_id)?;
    match app.store.webhook(id).await? {
        Some(record) if who.admin || record.webhook.user_id == who.user_id => Ok(record),
        _ => Err(ApiError::not_found("webhook", id)),
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
fn check_url(app: &AppState, who: Principal, raw: &str) -> ApiResult<String> {
    if raw.len() > MAX_URL_BYTES {
        return Err(ApiError::invalid_field("url", format!("longer than {MAX_URL_BYTES} bytes")));
    }
    let url = outbound_url("url", raw)?;
    if !who.admin && !app.config.webhook_targets.iter().any(|target| under(target, &url)) {
        return Err(ApiError::invalid_field(
            "url",
            format!(
                "{raw:?}: this server does not allow webhooks there; an admin can allow it with \
                 `mission server --webhook-target`"
            ),
        ));
    }
    Ok(url.to_string())
}

/// Registers a webhook. It gets the events its filter wants from now on, beginning with its own
/// `webhook.created` (when the filter wants that). Without a `secret` the server makes one and
/// answers it, this once.
#[utoipa::path(post, path = "/api/v1/webhooks", tag = "webhooks", request_body = CreateWebhook,
    responses((status = 201, body = Webhook), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn create(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(req): ApiJson<CreateWebhook>,
) -> ApiResult<(StatusCode, Json<Webhook>)> {
    let url = check_url(&app, who, &req.url)?;
    if req.all && !who.admin {
        return Err(ApiError::forbidden("only admins may have everyone's events delivered"));
    }
    for (field, count) in [("mission_ids", req.mission_ids.len()), ("kinds", req.kinds.len())] {
        if count > MAX_FILTER_VALUES {
            return Err(ApiError::invalid_field(field, format!("at most {MAX_FILTER_VALUES} values")));
        }
    }
    let kinds = req.kinds.iter().map(|kind| check_kind("kinds", kind)).collect::<ApiResult<Vec<_>>>()?;
    let (secret, made) = match req.secret {
        Some(secret) => {
            let printable = secret.bytes().all(|b| b.is_ascii_graphic());
            if !SECRET_CHARS.contains(&secret.len()) || !printable {
                return Err(ApiError::invalid_field(
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
        None => (crate::idp::random_secret(), true),
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
    Ok((StatusCode::CREATED, Json(webhook)))
}

/// Lists the caller's webhooks (everyone's, for admins), oldest first.
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "webhooks", responses((status = 200, body = [Webhook])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Webhook>>> {
    let owner = (!who.admin).then_some(who.user_id);
    Ok(Json(app.store.webhooks(owner).await?.into_iter().map(|r| r.webhook).collect()))
}

/// One webhook.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "webhook id")),
    responses((status = 200, body = Webhook), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Webhook>> {
    Ok(Json(visible(&app, who, &id).await?.webhook))
}

/// Deletes a webhook: nothing more is sent to it, and its deliveries are forgotten.
#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "webhook id")),
    responses((status = 204), (status = 404, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let webhook = visible(&app, who, &id).await?.webhook;
    let id = webhook.webhook_id;
    audit::note(who, Change::new("webhook.delete", "webhook", id).named(&webhook.url));
    if !app.store.delete_webhook(id).await? {
        return Err(ApiError::not_found("webhook", id));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The deliveries of a webhook, newest event first: `status` keeps those pending, delivered or
/// failed; `before` (an event number) pages back; `limit` (1 to 1000, default 100).
#[utoipa::path(get, path = "/api/v1/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "webhook id"),
        ("status" = Option<DeliveryStatus>, Query, description = "only deliveries with this status"),
        ("before" = Option<u64>, Query, description = "only events numbered below this"),
        ("limit" = Option<u32>, Query, description = "at most this many (1 to 1000, default 100)")),
    responses((status = 200, body = [WebhookDelivery]), (status = 404, body = mission_api::Problem)))]
pub async fn deliveries(
    State(app): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    QueryPairs(query): QueryPairs,
) -> ApiResult<Json<Vec<WebhookDelivery>>> {
    let (mut status, mut before, mut limit) = (None, None, DELIVERIES_PAGE.0);
    for (key, value) in &query {
        match key.as_str() {
            "status" => status = Some(value.parse().map_err(|e: String| ApiError::invalid_field(key, e))?),
            "before" => {
                let n = value
                    .parse()
                    .map_err(|_| ApiError::invalid_field(key, format!("expected an event number, got {value:?}")))?;
                before = Some(n);
            }
            "limit" => {
                limit = value.parse().ok().filter(|n| (1..=DELIVERIES_PAGE.1).contains(n)).ok_or_else(|| {
                    ApiError::invalid_field(key, format!("expected 1 to {}, got {value:?}", DELIVERIES_PAGE.1))
                })?;
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; filters are status, before, limit"
                )));
            }
        }
    }
    let webhook_id = visible(&app, who, &id).await?.webhook.webhook_id;
    Ok(Json(app.store.deliveries(webhook_id, status, before, limit).await?))
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
