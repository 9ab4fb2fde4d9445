//! The webhooks API: register, list, read, delete, and the deliveries of one, over
//! [`crate::domain::webhooks`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mission_api::{CreateWebhook, DeliveryStatus, Webhook, WebhookDelivery};

use super::extract::{ApiJson, QueryPairs, parse_id};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::webhooks;
use crate::http::error::{ApiError, ApiResult};

/// Deliveries one listing answers by default, and at most.
pub(super) const DELIVERIES_PAGE: (u32, u32) = (100, 1000);

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
    Ok((StatusCode::CREATED, Json(webhooks::create(&app, who, req).await?)))
}

/// Lists the caller's webhooks (everyone's, for admins), oldest first.
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "webhooks", responses((status = 200, body = [Webhook])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Webhook>>> {
    Ok(Json(webhooks::list(&app, who).await?))
}

/// One webhook.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "webhook id")),
    responses((status = 200, body = Webhook), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Webhook>> {
    Ok(Json(webhooks::get(&app, who, parse_id("webhook_id", &id)?).await?))
}

/// Deletes a webhook: nothing more is sent to it, and its deliveries are forgotten.
#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "webhook id")),
    responses((status = 204), (status = 404, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    webhooks::delete(&app, who, parse_id("webhook_id", &id)?).await?;
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
    let webhook_id = parse_id("webhook_id", &id)?;
    Ok(Json(webhooks::deliveries(&app, who, webhook_id, status, before, limit).await?))
}
