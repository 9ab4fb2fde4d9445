//! Webhook deliveries: a router follows the event log like any stream and records, for every
//! event a webhook wants, a pending delivery (`store/webhooks.rs`); a sender claims the due ones
//! and POSTs them, signed (see [`mission_api::webhooks`] for what a receiver gets), trying a
//! failed one again after 1, 2, 4 … times the first wait until its attempts run out.
//!
//! Every replica runs both. Routing is idempotent (one delivery per webhook and event, and the
//! cursor only moves forward) and a sender claims a delivery before it tries it, so replicas
//! share the work without sending anything twice at once. A replica that stops mid-attempt leaves
//! a claim that runs out, and another tries again: a delivery arrives at least once, and its
//! `Mission-Webhook-Id` lets the receiver drop repeats.

use std::sync::Arc;
use std::time::Duration;

use mission_api::webhooks::{DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signed_content};
use mission_api::{DeliveryStatus, Webhook};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::WebhookAttempts;
use crate::services::events::{EventHub, Followed, Watch};
use crate::services::sealing::SealingKey;
use mission_store::{AttemptOutcome, DueDelivery, NewDelivery, Store, StoreError, now};

/// How often the sender looks for due deliveries without being woken.
const POLL: Duration = Duration::from_secs(1);
/// Attempts one replica makes at once.
const SENDERS: usize = 32;
/// How long a claim outlasts the attempt's timeout.
const CLAIM_MARGIN: Duration = Duration::from_secs(30);
/// The longest wait between two attempts.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);
/// How long the router lets the cursor lag while events flow that no webhook wants.
const SAVE_CURSOR_EVERY: Duration = Duration::from_secs(10);
/// How often a router with no webhook to route to looks for one another replica created.
const IDLE_POLL: Duration = Duration::from_secs(2);
/// How long the router waits before it tries again after the database failed it.
const RETRY_STORE: Duration = Duration::from_secs(1);

/// Routes events to webhooks and delivers them.
#[derive(Debug)]
pub struct Webhooks {
    store: Store,
    key: Arc<SealingKey>,
    http: reqwest::Client,
    attempts: WebhookAttempts,
    /// Woken when deliveries were added or an attempt ended.
    due: Notify,
    /// Woken when a webhook was created here: an idle router routes again.
    created: Notify,
}

/// A webhook as the router matches events against it.
#[derive(Debug)]
struct Route {
    webhook_id: Uuid,
    since_seq: u64,
    watch: Watch,
}

impl Webhooks {
    /// Deliveries from `store`'s webhooks, whose secrets `key` sealed, tried as `attempts` says.
    pub fn new(store: Store, key: Arc<SealingKey>, attempts: WebhookAttempts) -> Arc<Self> {
        let http = reqwest::Client::builder()
            // A redirect would take the POST to a URL nobody checked against the targets allowed.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(attempts.timeout)
            .user_agent(concat!("mission-server/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the TLS backend loads");
        Arc::new(Self { store, key, http, attempts, due: Notify::new(), created: Notify::new() })
    }

    /// A webhook was created on this replica: the router starts routing at once (another
    /// replica's new webhook it finds within two seconds).
    pub fn created(&self) {
        self.created.notify_one();
    }

    /// Routes the events `hub` hands out and sends the deliveries until `shutdown`.
    pub async fn run(self: Arc<Self>, hub: Arc<EventHub>, shutdown: CancellationToken) {
        tokio::join!(self.route(&hub, &shutdown), self.clone().send(&shutdown));
    }

    /// The routes of every webhook.
    async fn routes(&self) -> Result<Vec<Route>, StoreError> {
        let records = self.store.webhooks(None).await?;
        Ok(records
            .into_iter()
            .map(|r| {
                let Webhook { webhook_id, user_id, mission_ids, kinds, all, .. } = r.webhook;
                let watch = Watch { user_id: (!all).then_some(user_id), mission_ids, kinds, job_ids: Vec::new() };
                Route { webhook_id, since_seq: r.since_seq, watch }
            })
            .collect())
    }

    /// Runs `op` until it succeeds; `None` when `shutdown` comes first.
    async fn retrying<T, F: Future<Output = Result<T, StoreError>>>(
        shutdown: &CancellationToken,
        what: &str,
        mut op: impl FnMut() -> F,
    ) -> Option<T> {
        loop {
            match op().await {
                Ok(done) => return Some(done),
                Err(e) => tracing::warn!("webhooks: {what}: {e}"),
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY_STORE) => {}
                () = shutdown.cancelled() => return None,
            }
        }
    }

    /// Turns the events webhooks want into deliveries, in order, from where routing stopped.
    /// While there is no webhook the log is not followed at all (with no stream open either, the
    /// event hub then reads nothing); a webhook's events begin at its own `webhook.created`, so
    /// routing starts again there.
    async fn route(&self, hub: &EventHub, shutdown: &CancellationToken) {
        let Some(mut saved) = Self::retrying(shutdown, "reading the cursor", || self.store.webhook_cursor()).await
        else {
            return;
        };
        loop {
            let Some(mut routes) = Self::retrying(shutdown, "reading webhooks", || self.routes()).await else { return };
            let Some(first) = routes.iter().map(|r| r.since_seq).min() else {
                tokio::select! {
                    () = self.created.notified() => {}
                    () = tokio::time::sleep(IDLE_POLL) => {}
                    () = shutdown.cancelled() => return,
                }
                continue;
            };
            saved = saved.max(first.saturating_sub(1));
            let Some((mut follower, gap)) =
                Self::retrying(shutdown, "following events", || hub.follow(Watch::default(), Some(saved))).await
            else {
                return;
            };
            if let Some(oldest) = gap {
                tracing::warn!(
                    "webhooks: events after {saved} and before {oldest} were removed before they were routed"
                );
            }
            let mut routed = saved;
            let mut saved_at = tokio::time::Instant::now();
            // Until the last webhook is gone, or following fails (the log is then read again
            // from the last saved point).
            let followed = loop {
                let next = tokio::select! {
                    next = follower.next(SAVE_CURSOR_EVERY) => next,
                    () = shutdown.cancelled() => return,
                };
                let batch = match next {
                    Some(Followed::Events(batch)) => batch,
                    Some(Followed::Idle) => Vec::new(),
                    None => break false,
                };
                let mut deliveries = Vec::new();
                for live in &batch {
                    let event = &live.event;
                    if event.kind.starts_with("webhook.") {
                        // The log says where a webhook begins and ends: the list is read again at
                        // that point of it.
                        let Some(now_routes) = Self::retrying(shutdown, "reading webhooks", || self.routes()).await
                        else {
                            return;
                        };
                        routes = now_routes;
                    }
                    for route in &routes {
                        if event.seq >= route.since_seq && route.watch.wants(event) {
                            deliveries.push(NewDelivery {
                                webhook_id: route.webhook_id,
                                event_seq: event.seq,
                                event_kind: event.kind.clone(),
                                body: live.json.clone(),
                            });
                        }
                    }
                    routed = event.seq;
                }
                let lagging = routed > saved && saved_at.elapsed() >= SAVE_CURSOR_EVERY;
                if !deliveries.is_empty() || lagging || routes.is_empty() {
                    let added = || self.store.add_deliveries(&deliveries, routed, now());
                    if Self::retrying(shutdown, "recording deliveries", added).await.is_none() {
                        return;
                    }
                    (saved, saved_at) = (routed, tokio::time::Instant::now());
                    if !deliveries.is_empty() {
                        self.due.notify_one();
                    }
                }
                if routes.is_empty() {
                    break true;
                }
            };
            if !followed {
                tokio::select! {
                    () = tokio::time::sleep(RETRY_STORE) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    }

    /// Claims due deliveries and makes their attempts, [`SENDERS`] at a time.
    async fn send(self: Arc<Self>, shutdown: &CancellationToken) {
        let permits = Arc::new(Semaphore::new(SENDERS));
        // Dropped with the loop: attempts under way stop with the server, and their claims run
        // out for another replica (or the next start) to try again.
        let mut attempts = JoinSet::new();
        loop {
            while attempts.try_join_next().is_some() {}
            let now = now();
            let wait = match self.store.next_delivery_due().await {
                Ok(Some(at)) if at <= now => Duration::ZERO,
                Ok(Some(at)) => (at - now).to_std().unwrap_or_default().min(POLL),
                Ok(None) => POLL,
                Err(e) => {
                    tracing::warn!("webhooks: looking for due deliveries: {e}");
                    POLL
                }
            };
            if wait.is_zero() {
                let first = tokio::select! {
                    permit = permits.clone().acquire_owned() => permit.expect("never closed"),
                    () = shutdown.cancelled() => return,
                };
                let limit = 1 + permits.available_permits() as u32;
                let until = now + self.attempts.timeout + CLAIM_MARGIN;
                match self.store.claim_deliveries(now, until, limit).await {
                    Ok(claimed) if !claimed.is_empty() => {
                        let mut first = Some(first);
                        for delivery in claimed {
                            let permit = first.take().unwrap_or_else(|| {
                                permits.clone().try_acquire_owned().expect("only this loop takes permits")
                            });
                            attempts.spawn(self.clone().attempt(delivery, permit));
                        }
                        continue;
                    }
                    // Another replica was quicker.
                    Ok(_) => {}
                    Err(e) => tracing::warn!("webhooks: claiming deliveries: {e}"),
                }
            }
            tokio::select! {
                () = self.due.notified() => {}
                () = tokio::time::sleep(wait.max(Duration::from_millis(100))) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// Makes one attempt at `delivery` and records how it ended.
    async fn attempt(self: Arc<Self>, delivery: DueDelivery, _permit: OwnedSemaphorePermit) {
        let made = delivery.attempts + 1;
        let result = match self.key.unseal(delivery.webhook_id, &delivery.sealed_secret) {
            Some(secret) => self.post(&delivery, &secret).await,
            None => Err((None, "the webhook's secret cannot be unsealed (was the server's key replaced?)".into())),
        };
        let outcome = match result {
            Ok(status) => AttemptOutcome {
                status: DeliveryStatus::Delivered,
                response_status: Some(status),
                error: None,
                next_attempt_at: None,
            },
            Err((response_status, error)) => {
                let last = made >= self.attempts.max_attempts;
                AttemptOutcome {
                    status: if last { DeliveryStatus::Failed } else { DeliveryStatus::Pending },
                    response_status,
                    error: Some(error),
                    next_attempt_at: (!last).then(|| now() + retry_wait(self.attempts.first_retry, made)),
                }
            }
        };
        if let Err(e) = self.store.finish_delivery_attempt(delivery.delivery_id, &outcome, now()).await {
            // Its claim runs out and it is tried again.
            tracing::warn!("webhooks: recording an attempt at delivery {}: {e}", delivery.delivery_id);
        }
        self.due.notify_one();
    }

    /// POSTs `delivery`, signed with `secret`: the receiver's status when it is 2xx; otherwise
    /// the status, if there was one, and what went wrong.
    async fn post(&self, delivery: &DueDelivery, secret: &[u8]) -> Result<u16, (Option<u16>, String)> {
        let timestamp = now().timestamp();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
        let signature = ring::hmac::sign(&key, &signed_content(timestamp, delivery.body.as_bytes()));
        let answer = self
            .http
            .post(&delivery.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(DELIVERY_HEADER, delivery.delivery_id.to_string())
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, format!("v1={}", crate::services::blobs::hex(signature.as_ref())))
            .header(EVENT_HEADER, &delivery.event_kind)
            .body(delivery.body.clone())
            .send()
            .await;
        match answer {
            Ok(answer) if answer.status().is_success() => Ok(answer.status().as_u16()),
            Ok(answer) if answer.status().is_redirection() => {
                Err((Some(answer.status().as_u16()), format!("HTTP {}: redirects are not followed", answer.status())))
            }
            Ok(answer) => Err((Some(answer.status().as_u16()), format!("HTTP {}", answer.status()))),
            Err(e) if e.is_timeout() => {
                Err((None, format!("no answer within {} s", self.attempts.timeout.as_secs_f64())))
            }
            Err(e) => Err((None, root_cause(&e))),
        }
    }
}

/// The wait after `failed` attempts: `first`, then twice the wait before, up to an hour.
fn retry_wait(first: Duration, failed: u32) -> Duration {
    first.saturating_mul(1 << failed.saturating_sub(1).min(20)).min(MAX_RETRY_WAIT)
}

/// The innermost cause of `e` (the connection refused, the name not found), which says more than
/// reqwest's "error sending request".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = cause.to_string();
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_an_hour() {
        let first = Duration::from_secs(5);
        let waits: Vec<u64> = (1..=12).map(|failed| retry_wait(first, failed).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]);
        assert_eq!(retry_wait(first, 0), first);
        assert_eq!(retry_wait(first, u32::MAX), MAX_RETRY_WAIT);
    }
}
