//! Brakes on guessing at the sign-in endpoints: a growing wait after failures (`/activate`
//! passwords and user codes) and a rate per client address (`/oauth/device/code`).
//!
//! One process keeps both in memory, with a bounded number of keys: an attacker who floods them
//! with new keys (addresses, usernames) makes the oldest be forgotten, not the server grow.
//! Replicas keep them in the database they share ([`Brakes::Shared`]), so a guesser gets no more
//! attempts for there being several replicas; the leader sweeps the stale ones.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::SignInLimits;
use mission_store::ClusterDb;

/// The first wait after the free failures; then it doubles.
const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The longest wait.
const LONGEST_WAIT: Duration = Duration::from_secs(15 * 60);

/// The window new device codes are counted in.
const CODE_WINDOW: Duration = Duration::from_secs(60);

/// The sign-in brakes: in this process's memory, or in the database replicas share.
#[derive(Debug)]
pub enum Brakes {
    /// One process.
    Process {
        /// Failed `/activate` attempts, per client address, user code and account.
        guesses: Backoff,
        /// New device codes per client address.
        new_codes: RateLimit,
    },
    /// Replicas.
    Shared {
        /// Their database.
        db: ClusterDb,
        /// The limits.
        limits: SignInLimits,
    },
}

impl Brakes {
    /// The brakes for `limits`, shared through `shared` when replicas share a database.
    pub fn new(limits: SignInLimits, shared: Option<ClusterDb>) -> Self {
        match shared {
            Some(db) => Self::Shared { db, limits },
            None => Self::Process {
                guesses: Backoff::new(limits.free_failures, FIRST_WAIT, LONGEST_WAIT),
                new_codes: RateLimit::new(limits.device_codes_per_minute, CODE_WINDOW),
            },
        }
    }

    /// `Err(how long to wait)` while any of `keys` is made to wait. (A database that fails
    /// holds nobody back: sign-in needs it anyway, and its failure is logged.)
    pub async fn check_guesses(&self, keys: &[String]) -> Result<(), Duration> {
        match self {
            Self::Process { guesses, .. } => guesses.check(keys, Instant::now()),
            Self::Shared { db, .. } => match db.brake_wait(keys).await {
                Ok(Some(wait)) => Err(wait),
                Ok(None) => Ok(()),
                Err(e) => {
                    tracing::error!("reading the sign-in brakes: {e}");
                    Ok(())
                }
            },
        }
    }

    /// Counts a failed attempt against each of `keys`.
    pub async fn guess_failed(&self, keys: &[String]) {
        match self {
            Self::Process { guesses, .. } => guesses.failed(keys, Instant::now()),
            Self::Shared { db, limits } => {
                for key in keys {
                    let wait = |count| wait_after(count, limits.free_failures, FIRST_WAIT, LONGEST_WAIT);
                    if let Err(e) = db.brake_failed(key, wait).await {
                        tracing::error!("counting a failed sign-in: {e}");
                    }
                }
            }
        }
    }

    /// Clears `key` (a right password for the account).
    pub async fn guess_succeeded(&self, key: &str) {
        match self {
            Self::Process { guesses, .. } => guesses.succeeded(key),
            Self::Shared { db, .. } => {
                if let Err(e) = db.brake_clear(key).await {
                    tracing::error!("clearing a sign-in brake: {e}");
                }
            }
        }
    }

    /// Counts a new device code for `key`; `Err(how long until the next)` past the rate.
    pub async fn new_code(&self, key: &str) -> Result<(), Duration> {
        match self {
            Self::Process { new_codes, .. } => new_codes.allow(key, Instant::now()),
            Self::Shared { db, limits } => {
                let key = format!("codes:{key}");
                match db.brake_rate(&key, limits.device_codes_per_minute, CODE_WINDOW).await {
                    Ok(allowed) => allowed,
                    Err(e) => {
                        tracing::error!("counting a new device code: {e}");
                        Ok(())
                    }
                }
            }
        }
    }
}

/// How long a key waits after its `count`th failure, the first `free` being free: `first`,
/// doubling, up to `longest`.
fn wait_after(count: u64, free: u32, first: Duration, longest: Duration) -> Option<Duration> {
    let past = count.checked_sub(u64::from(free))?.checked_sub(1)?;
    Some((first * 2u32.pow(past.min(20) as u32)).min(longest))
}

/// Most keys one table holds.
const MAX_KEYS: usize = 100_000;

/// Counts failures per key; after the first few, each failure makes the key wait, twice as long
/// as the time before, up to a cap. A success clears the key.
#[derive(Debug)]
pub struct Backoff {
    /// Failures without any wait.
    free: u32,
    /// The first wait; then it doubles.
    first: Duration,
    /// The longest wait.
    longest: Duration,
    entries: Mutex<HashMap<String, Failures>>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// No attempt until then.
    until: Instant,
    last: Instant,
}

impl Backoff {
    /// A brake that lets `free` failures pass, then waits `first`, doubling up to `longest`.
    pub fn new(free: u32, first: Duration, longest: Duration) -> Self {
        Self { free, first, longest, entries: Mutex::new(HashMap::new()) }
    }

    /// `Err(how long to wait)` while any of `keys` is made to wait.
    pub fn check(&self, keys: &[String], now: Instant) -> Result<(), Duration> {
        let entries = self.entries.lock().expect("not poisoned");
        let wait = keys.iter().filter_map(|k| entries.get(k)).map(|f| f.until.saturating_duration_since(now)).max();
        match wait {
            Some(wait) if !wait.is_zero() => Err(wait),
            _ => Ok(()),
        }
    }

    /// Counts a failure against each of `keys`.
    pub fn failed(&self, keys: &[String], now: Instant) {
        let mut entries = self.entries.lock().expect("not poisoned");
        for key in keys {
            if !entries.contains_key(key) {
                make_room(&mut entries, |f| now.saturating_duration_since(f.last) > self.longest);
            }
            let entry = entries.entry(key.clone()).or_insert(Failures { count: 0, until: now, last: now });
            entry.count = entry.count.saturating_add(1);
            entry.last = now;
            if let Some(wait) = wait_after(u64::from(entry.count), self.free, self.first, self.longest) {
                entry.until = now + wait;
            }
        }
    }

    /// Clears `key` (a right password for the account).
    pub fn succeeded(&self, key: &str) {
        self.entries.lock().expect("not poisoned").remove(key);
    }
}

/// At most `max` events per key in each window of `window`.
#[derive(Debug)]
pub struct RateLimit {
    max: u32,
    window: Duration,
    entries: Mutex<HashMap<String, (Instant, u32)>>,
}

impl RateLimit {
    /// A limit of `max` per `window`.
    pub fn new(max: u32, window: Duration) -> Self {
        Self { max, window, entries: Mutex::new(HashMap::new()) }
    }

    /// Counts an event for `key`; `Err(how long until the next is allowed)` past the limit.
    pub fn allow(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut entries = self.entries.lock().expect("not poisoned");
        if !entries.contains_key(key) {
            make_room(&mut entries, |(start, _)| now.saturating_duration_since(*start) >= self.window);
        }
        let (start, count) = entries.entry(key.to_owned()).or_insert((now, 0));
        if now.saturating_duration_since(*start) >= self.window {
            (*start, *count) = (now, 0);
        }
        if *count >= self.max {
            return Err(self.window.saturating_sub(now.saturating_duration_since(*start)));
        }
        *count += 1;
        Ok(())
    }
}

/// Before a new key goes in: at the bound, drops the entries that are `stale`, and if that is
/// not enough, all of them.
fn make_room<V>(entries: &mut HashMap<String, V>, stale: impl Fn(&V) -> bool) {
    if entries.len() >= MAX_KEYS {
        entries.retain(|_, v| !stale(v));
        if entries.len() >= MAX_KEYS {
            entries.clear();
        }
    }
}

/// Whole seconds to tell a person to wait (at least 1).
pub fn seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_past_the_free_ones_wait_longer_each_time_until_a_success() {
        let brake = Backoff::new(2, Duration::from_secs(1), Duration::from_secs(5));
        let keys = ["user:alice".to_owned()];
        let t = Instant::now();
        brake.failed(&keys, t);
        brake.failed(&keys, t);
        assert_eq!(brake.check(&keys, t), Ok(()));
        brake.failed(&keys, t);
        assert_eq!(brake.check(&keys, t), Err(Duration::from_secs(1)));
        assert_eq!(brake.check(&keys, t + Duration::from_secs(1)), Ok(()));
        brake.failed(&keys, t);
        brake.failed(&keys, t);
        assert_eq!(brake.check(&keys, t), Err(Duration::from_secs(4)));
        brake.failed(&keys, t);
        assert_eq!(brake.check(&keys, t), Err(Duration::from_secs(5)), "capped");
        // Another key is not held up; a success clears.
        assert_eq!(brake.check(&["user:bob".to_owned()], t), Ok(()));
        brake.succeeded("user:alice");
        assert_eq!(brake.check(&keys, t), Ok(()));
    }

    #[test]
    fn a_rate_allows_its_maximum_per_window() {
        let limit = RateLimit::new(3, Duration::from_secs(60));
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(limit.allow("addr:1", t), Ok(()));
        }
        assert_eq!(limit.allow("addr:1", t + Duration::from_secs(20)), Err(Duration::from_secs(40)));
        assert_eq!(limit.allow("addr:2", t), Ok(()));
        assert_eq!(limit.allow("addr:1", t + Duration::from_secs(60)), Ok(()));
    }

    #[test]
    fn the_tables_stay_bounded() {
        let limit = RateLimit::new(1, Duration::from_secs(60));
        let t = Instant::now();
        for i in 0..MAX_KEYS + 10 {
            let _ = limit.allow(&format!("addr:{i}"), t);
        }
        assert!(limit.entries.lock().unwrap().len() <= MAX_KEYS);
    }
}
