//! Webhooks: URLs the server POSTs a user's [events](crate::events) to, as they happen.
//!
//! A user registers a URL with a filter (the same `mission_ids` and `kinds` as the event stream)
//! and a secret. Each event the filter wants, from the webhook's creation on, becomes one
//! [`WebhookDelivery`]: its [`Event`](crate::Event) as the JSON body of a POST, with these
//! headers:
//!
//! - `Mission-Webhook-Id`: the delivery's id, the same on every attempt (receivers drop repeats
//!   by it: a delivery may arrive more than once, never not at all while it is retried);
//! - `Mission-Webhook-Timestamp`: the attempt's time, in seconds since the Unix epoch;
//! - `Mission-Webhook-Signature`: `v1=` and the lowercase hex HMAC-SHA256, keyed with the
//!   webhook's secret, of [`signed_content`]: the timestamp, a dot, and the body's bytes;
//! - `Mission-Event`: the event's kind.
//!
//! A receiver checks the signature against the body as it came, and refuses timestamps far from
//! its clock (five minutes, say) so that a captured delivery cannot be replayed later.
//! Deliveries go out side by side and may arrive out of order: the event's `seq` orders them.
//!
//! Any 2xx answer delivers; anything else (another status, a redirect, no answer within the
//! server's timeout) fails the attempt, and the delivery is tried again later, each wait twice
//! the one before, until the server's attempts run out.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Header: the delivery's id.
pub const DELIVERY_HEADER: &str = "Mission-Webhook-Id";
/// Header: when the attempt was signed, in seconds since the Unix epoch.
pub const TIMESTAMP_HEADER: &str = "Mission-Webhook-Timestamp";
/// Header: `v1=` and the hex HMAC-SHA256 of [`signed_content`].
pub const SIGNATURE_HEADER: &str = "Mission-Webhook-Signature";
/// Header: the event's kind.
pub const EVENT_HEADER: &str = "Mission-Event";

/// The bytes a delivery's signature covers: `{timestamp}.{body}`.
pub fn signed_content(timestamp: i64, body: &[u8]) -> Vec<u8> {
    [format!("{timestamp}.").as_bytes(), body].concat()
}

/// Registers a webhook (`POST /api/v1/webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateWebhook {
    /// Where to POST events: an http(s) URL without credentials or fragment. Users other than
    /// admins may name only URLs under the targets the server allows (`--webhook-target`).
    pub url: String,
    /// The key of the signatures: 16 to 256 printable ASCII characters. The server makes one
    /// (and answers it once) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Only these missions' events (any of them; all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mission_ids: Vec<Uuid>,
    /// Only these kinds, exactly or as a prefix before a dot (`job` is every `job.*`; all when
    /// empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Everyone's events, not only the caller's (admins only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// A webhook as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Webhook {
    /// Its id.
    pub webhook_id: Uuid,
    /// Its owner.
    pub user_id: Uuid,
    /// Where events go.
    pub url: String,
    /// Only these missions' events (all when empty).
    pub mission_ids: Vec<Uuid>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<String>,
    /// Everyone's events.
    pub all: bool,
    /// When it was registered; it gets the events after that.
    pub created_at: DateTime<Utc>,
    /// The secret the server made, in the answer to the registration that asked for one; never
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not delivered yet: its next attempt is due at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed; it will not be tried again.
    Failed,
}

impl DeliveryStatus {
    /// The name used on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DeliveryStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(Self::Pending),
            "delivered" => Ok(Self::Delivered),
            "failed" => Ok(Self::Failed),
            other => Err(format!("{other:?} is not a delivery status (pending, delivered, failed)")),
        }
    }
}

/// One event on its way to one webhook (`GET /api/v1/webhooks/{id}/deliveries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookDelivery {
    /// Its id: the `Mission-Webhook-Id` header of every attempt.
    pub delivery_id: Uuid,
    /// The webhook.
    pub webhook_id: Uuid,
    /// The event's number.
    pub event_seq: u64,
    /// The event's kind.
    pub event_kind: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempts: u32,
    /// The HTTP status of the last answer, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_status: Option<u16>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the event became this delivery.
    pub created_at: DateTime<Utc>,
    /// When it is tried next, while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When it was delivered, or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}
