//! [`PathLocks`]: one lock per mission file, held only for the moment an upload's object is
//! swapped in and its row committed (or a file deleted), so that concurrent writers of one path
//! commit in the order their objects appeared and the row always describes the object.
//!
//! In one process the locks are async mutexes in a table. Replicas on a shared database lock in
//! the database instead (a transaction-scoped advisory lock per file, see
//! [`mission_store::ClusterDb::lock_path`]), so writers on different replicas wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use mission_store::{ClusterDb, PathLock, StoreError};

/// One file: its mission and path.
type FileKey = (Uuid, String);

/// The locks of mission files.
#[derive(Debug)]
pub struct PathLocks {
    scope: Scope,
}

#[derive(Debug)]
enum Scope {
    /// One process: a lock table keyed by file; entries go away when nobody holds or waits.
    Process(Mutex<HashMap<FileKey, Arc<tokio::sync::Mutex<()>>>>),
    /// Replicas: locks in the shared database.
    Database(ClusterDb),
}

/// Holds one path's lock; dropping it releases the lock.
pub enum PathGuard<'a> {
    /// A lock of this process's table (tidied on drop).
    Process {
        /// The table.
        locks: &'a PathLocks,
        /// The file.
        key: FileKey,
        /// The lock.
        guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    },
    /// A lock in the database, held while this lives.
    Database {
        /// The lock.
        _lock: PathLock,
    },
}

impl PathLocks {
    /// Locks in this process, or in `cluster`'s database where replicas share one.
    pub fn new(cluster: Option<ClusterDb>) -> Self {
        let scope = match cluster {
            Some(db) => Scope::Database(db),
            None => Scope::Process(Mutex::default()),
        };
        Self { scope }
    }

    /// Waits for and takes the lock of `path` in `mission_id`.
    pub async fn lock(&self, mission_id: Uuid, path: &str) -> Result<PathGuard<'_>, StoreError> {
        match &self.scope {
            Scope::Process(table) => {
                let key = (mission_id, path.to_owned());
                let mutex = table.lock().expect("lock table").entry(key.clone()).or_default().clone();
                let guard = mutex.lock_owned().await;
                Ok(PathGuard::Process { locks: self, key, guard: Some(guard) })
            }
            Scope::Database(db) => Ok(PathGuard::Database { _lock: db.lock_path(mission_id, path).await? }),
        }
    }
}

impl Drop for PathGuard<'_> {
    fn drop(&mut self) {
        let PathGuard::Process { locks, key, guard } = self else { return };
        drop(guard.take());
        let Scope::Process(table) = &locks.scope else { return };
        let mut table = table.lock().expect("lock table");
        // Only the table holds it now: no one else holds or waits.
        if table.get(key).is_some_and(|m| Arc::strong_count(m) == 1) {
            table.remove(key);
        }
    }
}
