//! The retry-policy flags `mission run` and `mission missions create`/`update` share.

use clap::Args;
use mission_client::{RetryOn, RetryPolicy};

/// How a job is tried again after it fails: `--retry 3 --retry-on out_of_memory,lost
/// --memory-factor 2 --max-memory 16000`.
#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    /// Attempts in all, the first included (1: never again). A failed attempt puts the job back
    /// in the queue as the same job; `jobs get` shows each attempt in its history.
    #[arg(long = "retry", value_name = "ATTEMPTS")]
    max_attempts: Option<u32>,
    /// Which failures to try again, comma-separated: exit_code, out_of_memory, lost, time_limit
    /// (default: all).
    #[arg(long, value_name = "FAILURES", value_delimiter = ',', requires = "max_attempts")]
    retry_on: Vec<RetryOn>,
    /// Seconds to wait before the second attempt, doubled before each one after (default 0).
    #[arg(long, value_name = "SECONDS", requires = "max_attempts")]
    retry_backoff: Option<u32>,
    /// After running out of memory, ask for this many times the memory (default 1.5).
    #[arg(long, value_name = "FACTOR", requires = "max_attempts")]
    memory_factor: Option<f64>,
    /// The most memory, in MB, that a retry after running out of memory asks for.
    #[arg(long, value_name = "MB", requires = "max_attempts")]
    max_memory: Option<u64>,
}

impl RetryArgs {
    /// The policy the flags give, if `--retry` was given; the server checks it.
    pub fn policy(&self) -> Option<RetryPolicy> {
        let max_attempts = self.max_attempts?;
        let defaults: RetryPolicy =
            serde_json::from_value(serde_json::json!({ "max_attempts": max_attempts })).expect("a policy of defaults");
        Some(RetryPolicy {
            max_attempts,
            on: if self.retry_on.is_empty() { defaults.on } else { self.retry_on.clone() },
            backoff: self.retry_backoff.unwrap_or(defaults.backoff),
            memory_factor: self.memory_factor.unwrap_or(defaults.memory_factor),
            max_memory: self.max_memory,
        })
    }
}

/// A retry policy in words, for `jobs get` and `missions get`.
pub fn retry_text(policy: &RetryPolicy) -> String {
    let on: Vec<&str> = policy.on.iter().map(|on| on.as_str()).collect();
    let mut text = format!("up to {} attempts on {}", policy.max_attempts, on.join(", "));
    if policy.backoff > 0 {
        text.push_str(&format!(", {} s apart (doubling)", policy.backoff));
    }
    if policy.on.contains(&RetryOn::OutOfMemory) {
        text.push_str(&format!(", memory ×{} after running out", policy.memory_factor));
        if let Some(max) = policy.max_memory {
            text.push_str(&format!(" (at most {max} MB)"));
        }
    }
    text
}
