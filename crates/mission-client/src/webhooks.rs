//! Webhooks: register URLs the server POSTs the caller's events to, signed, and see how their
//! deliveries went. [`mission_api::webhooks`] says what a receiver gets and how it checks the
//! signature.

use mission_api::{CreateWebhook, DeliveryStatus, Webhook, WebhookDelivery};
use reqwest::Method;
use uuid::Uuid;

use crate::{Client, Error};

/// Which deliveries of a webhook to list ([`Client::webhook_deliveries`]). Readable from JSON,
/// fields left out taking their defaults (for the Python package).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListDeliveries {
    /// Only those with this status.
    pub status: Option<DeliveryStatus>,
    /// Only those of events numbered below this (the next page back).
    pub before: Option<u64>,
    /// At most this many (the server's default, 100, when absent; at most 1000).
    pub limit: Option<u32>,
}

impl Client {
    /// Registers a webhook. Without a `secret` in `request` the server makes one, answered in
    /// [`Webhook::secret`] this once.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::CreateWebhook;
    /// let request = CreateWebhook {
    ///     url: "https://hooks.example.org/mission".into(),
    ///     kinds: vec!["job.completed".into(), "job.failed".into()],
    ///     ..Default::default()
    /// };
    /// let webhook = client.create_webhook(&request).await?;
    /// println!("keep this secret: {}", webhook.secret.unwrap_or_default());
    /// # Ok(()) }
    /// ```
    pub async fn create_webhook(&self, request: &CreateWebhook) -> Result<Webhook, Error> {
        self.send_json(Method::POST, "/webhooks", request).await
    }

    /// The caller's webhooks (everyone's, for an admin), oldest first.
    pub async fn list_webhooks(&self) -> Result<Vec<Webhook>, Error> {
        self.get_json("/webhooks", &[]).await
    }

    /// One webhook; [`Error::NotFound`] when it does not exist or is not the caller's.
    pub async fn get_webhook(&self, webhook_id: Uuid) -> Result<Webhook, Error> {
        self.get_json(&format!("/webhooks/{webhook_id}"), &[]).await
    }

    /// Deletes a webhook and forgets its deliveries; `Ok(false)` when there is no such webhook
    /// of the caller's.
    pub async fn delete_webhook(&self, webhook_id: Uuid) -> Result<bool, Error> {
        self.delete_found(&format!("/webhooks/{webhook_id}")).await
    }

    /// A webhook's deliveries, newest event first.
    pub async fn webhook_deliveries(
        &self,
        webhook_id: Uuid,
        which: &ListDeliveries,
    ) -> Result<Vec<WebhookDelivery>, Error> {
        let mut query = Vec::new();
        if let Some(status) = which.status {
            query.push(("status", status.to_string()));
        }
        if let Some(before) = which.before {
            query.push(("before", before.to_string()));
        }
        if let Some(limit) = which.limit {
            query.push(("limit", limit.to_string()));
        }
        self.get_json(&format!("/webhooks/{webhook_id}/deliveries"), &query).await
    }
}
