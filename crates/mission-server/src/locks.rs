//! [`PathLocks`]: one async lock per mission file, held only for the moment an upload's object is
//! swapped in and its row committed (or a file deleted), so that concurrent writers of one path
//! commit in the order their objects appeared and the row always describes the object.
//!
//! The locks are in-process: several server replicas on one database would need a database lock
//! instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

/// One file: its mission and path.
type FileKey = (Uuid, String);

/// Lock table keyed by file; entries go away when nobody holds or waits for them.
#[derive(Debug, Default)]
pub struct PathLocks {
    table: Mutex<HashMap<FileKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one path's lock; dropping it releases the lock and tidies the table.
pub struct PathGuard<'a> {
    locks: &'a PathLocks,
    key: FileKey,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl PathLocks {
    /// Waits for and takes the lock of `path` in `mission_id`.
    pub async fn lock(&self, mission_id: Uuid, path: &str) -> PathGuard<'_> {
        let key = (mission_id, path.to_owned());
        let mutex = self.table.lock().expect("lock table").entry(key.clone()).or_default().clone();
        let guard = mutex.lock_owned().await;
        PathGuard { locks: self, key, guard: Some(guard) }
    }
}

impl Drop for PathGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut table = self.locks.table.lock().expect("lock table");
        // Only the table holds it now: no one else holds or waits.
        if table.get(&self.key).is_some_and(|m| Arc::strong_count(m) == 1) {
            table.remove(&self.key);
        }
    }
}
