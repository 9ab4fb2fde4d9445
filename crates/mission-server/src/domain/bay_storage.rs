//! Cargo bays on the server side: sealing their credentials, opening their object stores, and
//! deciding where a mission's files live.
//!
//! Credentials are sealed ([`crate::services::sealing`]) bound to the bay's id, so the database alone (a
//! backup, a dump) reveals no secret. Opened stores are cached per bay.
//!
//! A mission whose `source_storage_id` names a bay keeps its files under
//! `{bay prefix}/{source_path}/` there (`{bay prefix}/missions/{mission_id}/` without a
//! `source_path`); otherwise under `missions/{mission_id}/` in the default storage. The database
//! stays the index of a mission's files wherever their bytes are.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use mission_api::paths::MissionPath;
use mission_api::{CargoBay, CargoBayKind, DEFAULT_CARGO_BAY_ID, Mission};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{DomainError, DomainResult};
use crate::services::blobs::{FileStore, Location, S3Access};
use crate::services::sealing::SealingKey;
use mission_store::{CargoBayRecord, Store};

pub use crate::config::DEFAULT_REGION;

/// The secrets of an S3 bay, as sealed into the database.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("access_key_id", &self.access_key_id).finish_non_exhaustive()
    }
}

/// The default storage, the cargo bays' opened stores, and the sealing key.
pub struct CargoBays {
    default: FileStore,
    key: Arc<SealingKey>,
    opened: Mutex<HashMap<Uuid, FileStore>>,
}

impl std::fmt::Debug for CargoBays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CargoBays").field("default", &self.default).finish_non_exhaustive()
    }
}

impl CargoBays {
    /// The bays over `default`, sealing credentials with `key`.
    pub fn new(key: Arc<SealingKey>, default: FileStore) -> Self {
        Self { default, key, opened: Mutex::default() }
    }

    /// The server's default storage.
    pub fn default_store(&self) -> &FileStore {
        &self.default
    }

    /// The default bay as the API lists it.
    pub fn default_bay() -> CargoBay {
        Self::bare_bay(DEFAULT_CARGO_BAY_ID, "default".to_owned(), CargoBayKind::Default, None, None)
    }

    /// A bay with no kind-specific settings (no bucket, prefix, endpoint, region, path or
    /// credentials yet).
    pub fn bare_bay(
        storage_id: Uuid,
        name: String,
        kind: CargoBayKind,
        user_id: Option<Uuid>,
        created_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> CargoBay {
        CargoBay {
            storage_id,
            name,
            kind,
            user_id,
            bucket: None,
            prefix: None,
            endpoint: None,
            region: None,
            path: None,
            has_credentials: false,
            created_at,
        }
    }

    /// Seals `credentials` for the bay `storage_id`.
    pub fn seal(&self, storage_id: Uuid, credentials: &Credentials) -> Vec<u8> {
        self.key.seal(storage_id, &serde_json::to_vec(credentials).expect("strings serialise"))
    }

    fn unseal(&self, storage_id: Uuid, sealed: &[u8]) -> DomainResult<Credentials> {
        let plain = self.key.unseal(storage_id, sealed);
        plain.and_then(|plain| serde_json::from_slice(&plain).ok()).ok_or_else(|| {
            DomainError::internal(format!("the credentials of cargo bay {storage_id} cannot be unsealed"))
        })
    }

    /// The object store behind a bay (opened once, then cached).
    pub fn open(&self, record: &CargoBayRecord) -> DomainResult<FileStore> {
        let id = record.bay.storage_id;
        if let Some(store) = self.opened.lock().expect("not poisoned").get(&id) {
            return Ok(store.clone());
        }
        let credentials = record.sealed_credentials.as_deref().map(|s| self.unseal(id, s)).transpose()?;
        let store = open_store(&record.bay, credentials)?;
        self.opened.lock().expect("not poisoned").insert(id, store.clone());
        Ok(store)
    }

    /// Drops a deleted bay's store from the cache.
    pub fn forget(&self, storage_id: Uuid) {
        self.opened.lock().expect("not poisoned").remove(&storage_id);
    }

    /// Where the input files of `mission` live.
    pub async fn source(&self, store: &Store, mission: &Mission) -> DomainResult<Location> {
        let Some(bay) = named_bay(store, mission.source_storage_id, "source").await? else {
            return Ok(self.default.default_location(mission.mission_id));
        };
        let mut root = storage_segments("prefix", bay.bay.prefix.as_deref())?;
        match mission.source_path.as_deref().filter(|p| !p.trim_matches('/').is_empty()) {
            Some(path) => root.extend(storage_segments("source_path", Some(path))?),
            None => root.extend(["missions".to_owned(), mission.mission_id.to_string()]),
        }
        Ok(Location::new(self.open(&bay)?, root, false))
    }

    /// Where the results of `job_id` go: `{prefix}/{destination_path}/{job_id}` in the mission's
    /// destination bay (`{prefix}/missions/{mission}/jobs/{job_id}` without a destination path),
    /// or the default storage.
    pub async fn results(&self, store: &Store, mission: &Mission, job_id: Uuid) -> DomainResult<Location> {
        let Some(bay) = named_bay(store, mission.destination_storage_id, "destination").await? else {
            return Ok(self.default.default_results_location(mission.mission_id, job_id));
        };
        let mut root = storage_segments("prefix", bay.bay.prefix.as_deref())?;
        match mission.destination_path.as_deref().filter(|p| !p.trim_matches('/').is_empty()) {
            Some(path) => root.extend(storage_segments("destination_path", Some(path))?),
            None => root.extend(["missions".to_owned(), mission.mission_id.to_string(), "jobs".to_owned()]),
        }
        root.push(job_id.to_string());
        Ok(Location::new(self.open(&bay)?, root, false))
    }
}

/// The bay a mission names as its `role` (source or destination); `None` for the default storage.
async fn named_bay(store: &Store, id: Option<Uuid>, role: &str) -> DomainResult<Option<CargoBayRecord>> {
    match id {
        None => Ok(None),
        Some(id) if id == DEFAULT_CARGO_BAY_ID => Ok(None),
        Some(id) => match store.cargo_bay(id).await? {
            Some(bay) => Ok(Some(bay)),
            None => Err(DomainError::Conflict(format!("the mission's {role} cargo bay {id} no longer exists"))),
        },
    }
}

/// The segments of a storage path (a bay's prefix, a mission's source path): the same rule as
/// file paths, leading and trailing `/` allowed.
pub fn storage_segments(field: &str, path: Option<&str>) -> DomainResult<Vec<String>> {
    match path.map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
        None => Ok(Vec::new()),
        Some(p) => MissionPath::parse(p)
            .map(|p| p.segments().map(str::to_owned).collect())
            .map_err(|e| DomainError::invalid(field, format!("{p:?}: {e}"))),
    }
}

/// Opens the object store of an `s3` or `local` bay.
fn open_store(bay: &CargoBay, credentials: Option<Credentials>) -> DomainResult<FileStore> {
    match bay.kind {
        CargoBayKind::Default => Err(DomainError::internal("the default bay has no row")),
        CargoBayKind::Local => {
            let path = bay.path.as_deref().ok_or_else(|| DomainError::internal("local bay without a path"))?;
            FileStore::existing_local(Path::new(path)).map_err(|e| {
                DomainError::Storage(format!("cargo bay {} ({path}) cannot be opened: {e}", bay.storage_id))
            })
        }
        CargoBayKind::S3 => {
            let bucket = bay.bucket.as_deref().ok_or_else(|| DomainError::internal("s3 bay without a bucket"))?;
            let access = S3Access {
                bucket,
                region: bay.region.as_deref().unwrap_or(DEFAULT_REGION),
                endpoint: bay.endpoint.as_deref(),
                credentials: credentials.map(|c| (c.access_key_id, c.secret_access_key, c.session_token)),
            };
            let store =
                access.open().map_err(|e| DomainError::Rejected(format!("the S3 settings do not work: {e}")))?;
            Ok(FileStore::remote(Arc::new(store)))
        }
    }
}

/// The error for a failure of a cargo bay's storage: the bay refused or did not answer (502),
/// naming the bay and the store's own words.
pub fn storage_error(location: &Location, e: object_store::Error) -> DomainError {
    if location.owned_folder {
        return DomainError::internal(e);
    }
    if is_refusal(&e) {
        DomainError::Storage(format!("the cargo bay refused access (check its credentials): {e}"))
    } else {
        DomainError::Storage(format!("the cargo bay failed: {e}"))
    }
}

/// Whether the storage refused our credentials (401 or 403). object_store reports that as its
/// own error kinds for some operations and as a generic error with the status in the message
/// for others (listing), and keeps the status-carrying error type private; hence the text.
pub fn is_refusal(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => true,
        e => {
            let text = e.to_string();
            text.contains("403 Forbidden") || text.contains("401 Unauthorized")
        }
    }
}
