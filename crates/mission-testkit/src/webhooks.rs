//! [`Receiver`]: a webhook receiver on 127.0.0.1 with a free port, recording every request and
//! answering each with the status its rule gives.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use mission_client::webhook_signing::{SIGNATURE_HEADER, TIMESTAMP_HEADER, signed_content};

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its path.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
    /// When it arrived.
    pub at: SystemTime,
    /// The status the receiver answered.
    pub answered: u16,
}

impl Received {
    /// A header's value ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// Whether the signature header is the HMAC-SHA256 under `secret` of the timestamp header,
    /// a dot and the body, as the webhook documentation says a receiver checks it.
    pub fn signed_with(&self, secret: &str) -> bool {
        let Ok(timestamp) = self.header(TIMESTAMP_HEADER).parse::<i64>() else { return false };
        let Some(hex) = self.header(SIGNATURE_HEADER).strip_prefix("v1=") else { return false };
        let Some(signature) = (0..hex.len())
            .step_by(2)
            .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
            .collect::<Option<Vec<u8>>>()
        else {
            return false;
        };
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        ring::hmac::verify(&key, &signed_content(timestamp, &self.body), &signature).is_ok()
    }
}

/// Which status to answer: given the request's path and how many earlier requests carried its
/// `Mission-Webhook-Id`.
type Rule = dyn Fn(&str, usize) -> u16 + Send + Sync;

/// A webhook receiver; stops when dropped.
pub struct Receiver {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

#[derive(Clone)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    rule: Arc<Rule>,
}

async fn take(State(shared): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let mut received = shared.received.lock().unwrap();
    let id = headers.get("mission-webhook-id").cloned();
    let earlier =
        received.iter().filter(|r| id.is_some() && r.headers.get("mission-webhook-id") == id.as_ref()).count();
    let answered = (shared.rule)(uri.path(), earlier);
    received.push(Received { path: uri.path().to_owned(), headers, body, at: SystemTime::now(), answered });
    StatusCode::from_u16(answered).expect("a valid status")
}

impl Receiver {
    /// Starts a receiver answering as `rule` says.
    pub async fn start(rule: impl Fn(&str, usize) -> u16 + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared { received: received.clone(), rule: Arc::new(rule) };
        let app = axum::Router::new().fallback(take).with_state(shared);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(async { drop(stopped.await) }).await;
        });
        Self { url, received, _stop: stop }
    }

    /// What it got so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until `done` holds of what it got (failing after 60 s), and answers that.
    pub async fn wait_until(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let received = self.received();
            if done(&received) {
                return received;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}; got {received:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
