//! Prometheus metrics: request counts by route and status, and a latency histogram per route.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::AppState;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Default)]
struct RouteStats {
    by_status: BTreeMap<u16, u64>,
    /// Counts per bucket (not cumulative); the last slot is +Inf.
    buckets: [u64; BUCKETS.len() + 1],
    sum_seconds: f64,
    count: u64,
}

/// Request metrics of the server.
#[derive(Default)]
pub struct Metrics {
    routes: Mutex<BTreeMap<(String, String), RouteStats>>,
}

impl Metrics {
    fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut routes = self.routes.lock().expect("metrics lock");
        let stats = routes.entry((method.to_owned(), route.to_owned())).or_default();
        *stats.by_status.entry(status).or_default() += 1;
        let slot = BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(BUCKETS.len());
        stats.buckets[slot] += 1;
        stats.sum_seconds += seconds;
        stats.count += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let routes = self.routes.lock().expect("metrics lock");
        let mut out = String::new();
        out.push_str("# HELP mission_http_requests_total HTTP requests handled, by route and status.\n");
        out.push_str("# TYPE mission_http_requests_total counter\n");
        for ((method, route), stats) in routes.iter() {
            for (status, n) in &stats.by_status {
                let _ = writeln!(
                    out,
                    "mission_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP mission_http_request_duration_seconds Time to produce a response, by route.\n");
        out.push_str("# TYPE mission_http_request_duration_seconds histogram\n");
        for ((method, route), stats) in routes.iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(stats.buckets.iter()) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "mission_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ =
                writeln!(out, "mission_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", stats.count);
            let _ = writeln!(out, "mission_http_request_duration_seconds_sum{{{labels}}} {}", stats.sum_seconds);
            let _ = writeln!(out, "mission_http_request_duration_seconds_count{{{labels}}} {}", stats.count);
        }
        out
    }
}

/// The `method` label: a standard method's name, or `other` (clients may invent methods; each
/// new label would grow the server's memory and `/metrics` for good).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Middleware recording every request under its route template (never the raw path, so ids do
/// not explode the label set) and a bounded method label; requests no route matched share the
/// route `unmatched`.
pub async fn track(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(request).await;
    app.metrics.record(method, &route, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}
