//! Where mission files' bytes live: object storage through the `object_store` crate.
//!
//! A [`FileStore`] is one object store: the server's default storage (the data dir's `files/`
//! folder), or a cargo bay's S3 bucket or server directory. A [`Location`] is the folder of one
//! mission's files in one of them, and the only code that turns a file path into an object key:
//! `missions/{mission_id}/{path}` in the default storage, `{prefix}/{source_path}/{path}` in a
//! cargo bay (see `cargo_bays`). Objects appear atomically (object_store writes a staging
//! file and renames it, S3 completes a multipart upload at once), so a reader sees the old content
//! or the new, never a torn file; the database row (see `routes/files.rs`) says which content a
//! file committed.

use std::sync::Arc;

use axum::body::Bytes;
use futures_util::{Stream, StreamExt};
use mission_api::paths::{MissionPath, is_staging_name};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload, WriteMultipart};
use uuid::Uuid;

/// How to reach an S3 bucket (a cargo bay's, or the default storage's).
pub struct S3Access<'a> {
    /// The bucket.
    pub bucket: &'a str,
    /// The region to sign for.
    pub region: &'a str,
    /// An S3-compatible server's URL; AWS when absent.
    pub endpoint: Option<&'a str>,
    /// Access key id, secret and session token; none: unsigned requests, never the server
    /// host's own AWS identity (instance metadata).
    pub credentials: Option<(String, String, Option<String>)>,
}

impl S3Access<'_> {
    /// The bucket's store. It fails fast: storage that does not answer must not hold a request
    /// for minutes.
    pub fn open(self) -> Result<object_store::aws::AmazonS3, object_store::Error> {
        use std::time::Duration;

        use object_store::{BackoffConfig, ClientOptions, RetryConfig};

        let retry =
            RetryConfig { backoff: BackoffConfig::default(), max_retries: 2, retry_timeout: Duration::from_secs(15) };
        let client =
            ClientOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(Duration::from_secs(300));
        let mut builder = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(self.bucket)
            .with_region(self.region)
            .with_retry(retry)
            .with_client_options(client);
        if let Some(endpoint) = self.endpoint {
            builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        builder = match self.credentials {
            Some((id, secret, token)) => {
                let builder = builder.with_access_key_id(id).with_secret_access_key(secret);
                match token {
                    Some(token) => builder.with_token(token),
                    None => builder,
                }
            }
            None => builder.with_skip_signature(true),
        };
        builder.build()
    }
}

/// Bodies up to this size are written with one `put`; larger ones as multipart uploads.
const SINGLE_PUT_BYTES: usize = 8 * 1024 * 1024;

/// Why writing an object failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The body grew past the allowance; nothing was written.
    #[error("the body is larger than {0} bytes")]
    TooLarge(u64),
    /// The client's body stream failed (a disconnect); nothing was written.
    #[error("the upload was interrupted: {0}")]
    Body(String),
    /// The object store failed.
    #[error("storage: {0}")]
    Storage(#[from] object_store::Error),
}

/// What a completed write produced.
#[derive(Debug, Clone)]
pub struct Written {
    /// Bytes written.
    pub size: u64,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
    /// The store's e_tag of the new object.
    pub e_tag: Option<String>,
}

/// A body taken in by [`FileStore::receive`], not yet visible.
pub struct Received {
    /// Bytes received.
    pub size: u64,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
    pending: Pending,
}

enum Pending {
    Small { store: Arc<dyn ObjectStore>, key: ObjectPath, bytes: Vec<u8> },
    Multipart(WriteMultipart),
}

impl Received {
    /// Gives the received content up: nothing becomes visible, and what was staged is removed.
    pub async fn abort(self) {
        if let Pending::Multipart(upload) = self.pending {
            let _ = upload.abort().await;
        }
    }

    /// Makes the object visible with the received content (one atomic step).
    pub async fn complete(self) -> Result<Written, WriteError> {
        let result = match self.pending {
            Pending::Small { store, key, bytes } => store.put(&key, PutPayload::from(bytes)).await?,
            Pending::Multipart(upload) => upload.finish().await?,
        };
        Ok(Written { size: self.size, sha256: self.sha256, e_tag: result.e_tag })
    }
}

/// Where one mission's files live: a store and a folder in it.
#[derive(Debug, Clone)]
pub struct Location {
    /// The store holding the files.
    pub files: FileStore,
    root: ObjectPath,
    /// Whether the folder belongs to the mission alone (the default storage), so that deleting
    /// the mission may remove the whole folder. In a cargo bay only the files the mission
    /// indexed are removed.
    pub owned_folder: bool,
}

impl Location {
    /// The folder `root` (already validated segments) in `files`.
    pub fn new(files: FileStore, root: impl IntoIterator<Item = String>, owned_folder: bool) -> Self {
        Self { files, root: ObjectPath::from_iter(root), owned_folder }
    }

    /// The object key of a mission file.
    pub fn key(&self, path: &MissionPath) -> ObjectPath {
        path.segments().fold(self.root.clone(), |key, segment| key.child(segment))
    }

    /// The object key a new file at `path` is written to, where it is within
    /// [`MAX_OBJECT_KEY_BYTES`](mission_api::paths::MAX_OBJECT_KEY_BYTES) (S3 refuses longer ones).
    pub fn new_key(&self, path: &MissionPath) -> Result<ObjectPath, mission_api::paths::PathError> {
        let key = self.key(path);
        let key_bytes = key.as_ref().len();
        if key_bytes > mission_api::paths::MAX_OBJECT_KEY_BYTES {
            let folder_bytes = self.root.as_ref().len();
            return Err(mission_api::paths::PathError::KeyTooLong { folder_bytes, key_bytes });
        }
        Ok(key)
    }

    /// Deletes a mission file, and in a local store the folders its deletion left empty, up to
    /// (not including) this location's root: an empty folder must not stand where a later file
    /// of the same name goes (object stores have no folders; a disk does).
    pub async fn delete(&self, path: &MissionPath) -> Result<(), object_store::Error> {
        let key = self.key(path);
        self.files.delete(&key).await?;
        self.files.remove_empty_folders(&key, &self.root).await;
        Ok(())
    }
}

/// One object store (the default storage or a cargo bay's).
#[derive(Debug, Clone)]
pub struct FileStore {
    store: Arc<dyn ObjectStore>,
    /// The folder behind a local store, for the clean-up of staging files.
    local_root: Option<std::path::PathBuf>,
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl FileStore {
    /// Storage in the local folder `root` (created if missing).
    pub fn local(root: &std::path::Path) -> std::io::Result<Self> {
        mission_store::fsutil::create_private_dir(root)?;
        let store = LocalFileSystem::new_with_prefix(root).map_err(std::io::Error::other)?;
        Ok(Self { store: Arc::new(store), local_root: Some(root.to_owned()) })
    }

    /// Storage in the existing local folder `root` (a `local` cargo bay).
    pub fn existing_local(root: &std::path::Path) -> Result<Self, object_store::Error> {
        let store = LocalFileSystem::new_with_prefix(root)?;
        Ok(Self { store: Arc::new(store), local_root: Some(root.to_owned()) })
    }

    /// Storage behind any object store (an S3 bucket).
    pub fn remote(store: Arc<dyn ObjectStore>) -> Self {
        Self { store, local_root: None }
    }

    /// The default storage in an S3 bucket, under its prefix.
    pub fn s3(storage: &crate::config::S3Storage) -> Result<Self, object_store::Error> {
        let credentials =
            storage.access_key_id.clone().zip(storage.secret_access_key.clone()).map(|(id, s)| (id, s, None));
        let access = S3Access {
            bucket: &storage.bucket,
            region: &storage.region,
            endpoint: storage.endpoint.as_deref(),
            credentials,
        };
        let bucket = access.open()?;
        Ok(if storage.prefix.is_empty() {
            Self::remote(Arc::new(bucket))
        } else {
            let prefix = ObjectPath::from(storage.prefix.as_str());
            Self::remote(Arc::new(object_store::prefix::PrefixStore::new(bucket, prefix)))
        })
    }

    /// Where the files of `mission_id` live in the default storage.
    pub fn default_location(&self, mission_id: Uuid) -> Location {
        Location { files: self.clone(), root: Self::mission_prefix(mission_id), owned_folder: true }
    }

    /// Checks that the store answers and lets us list `root` (a cargo bay's prefix).
    pub async fn probe(&self, root: &[String]) -> Result<(), object_store::Error> {
        let prefix = (!root.is_empty()).then(|| ObjectPath::from_iter(root.iter().cloned()));
        self.store.list_with_delimiter(prefix.as_ref()).await.map(|_| ())
    }

    /// Removes the staging files (`NAME#DIGITS`) of uploads that a killed server left behind in
    /// a local store; returns how many. Call only while no upload runs (at start-up).
    pub async fn remove_staging_files(&self) -> std::io::Result<usize> {
        let Some(root) = self.local_root.clone() else { return Ok(0) };
        tokio::task::spawn_blocking(move || {
            let mut removed = 0;
            let mut folders = vec![root];
            while let Some(folder) = folders.pop() {
                for entry in std::fs::read_dir(&folder)? {
                    let entry = entry?;
                    let kind = entry.file_type()?;
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    if kind.is_dir() {
                        folders.push(entry.path());
                    } else if is_staging_name(&name) {
                        std::fs::remove_file(entry.path())?;
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Removes the staging files (`NAME#DIGITS`) beside the object at `key` in a local store:
    /// what an interrupted upload of that object left. Unlike [`Self::remove_staging_files`]
    /// this touches nothing else, so it is safe in a local cargo bay, whose folder may hold
    /// people's own files. Returns how many.
    pub async fn remove_staging_files_of(&self, key: &ObjectPath) -> std::io::Result<usize> {
        let Some(root) = self.local_root.clone() else { return Ok(0) };
        let mut parts: Vec<String> = key.parts().map(|p| p.as_ref().to_owned()).collect();
        let Some(name) = parts.pop() else { return Ok(0) };
        tokio::task::spawn_blocking(move || {
            let folder = parts.iter().fold(root, |dir, part| dir.join(part));
            let entries = match std::fs::read_dir(&folder) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                Err(e) => return Err(e),
            };
            let mut removed = 0;
            for entry in entries {
                let entry = entry?;
                let file = entry.file_name();
                let file = file.to_string_lossy();
                let ours = file.strip_prefix(name.as_str()).is_some_and(|rest| rest.starts_with('#'));
                if ours && is_staging_name(&file) && entry.file_type()?.is_file() {
                    std::fs::remove_file(entry.path())?;
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// The folder holding a mission's files.
    fn mission_prefix(mission_id: Uuid) -> ObjectPath {
        ObjectPath::from_iter(["missions".to_owned(), mission_id.to_string()])
    }

    /// Streams `body` into the object at `key`, hashing as it goes. The object changes only if
    /// the whole body arrives within `max_bytes`; otherwise the previous content stays.
    pub async fn write<S, E>(&self, key: &ObjectPath, body: S, max_bytes: u64) -> Result<Written, WriteError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        self.receive(key, body, max_bytes).await?.complete().await
    }

    /// Takes in the whole body for `key` without making it visible yet: small bodies stay in
    /// memory, larger ones go to a multipart upload that is not completed. [`Received::complete`]
    /// then swaps the object in at once, so a caller can serialise just that moment.
    pub async fn receive<S, E>(&self, key: &ObjectPath, body: S, max_bytes: u64) -> Result<Received, WriteError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut body = body;
        let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
        let mut size: u64 = 0;
        let mut head: Vec<u8> = Vec::new();
        let mut multipart: Option<WriteMultipart> = None;
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    if let Some(upload) = multipart {
                        let _ = upload.abort().await;
                    }
                    return Err(WriteError::Body(e.to_string()));
                }
            };
            size += chunk.len() as u64;
            if size > max_bytes {
                if let Some(upload) = multipart {
                    let _ = upload.abort().await;
                }
                return Err(WriteError::TooLarge(max_bytes));
            }
            hasher.update(&chunk);
            match &mut multipart {
                Some(upload) => {
                    upload.wait_for_capacity(4).await?;
                    upload.write(&chunk);
                }
                None => {
                    head.extend_from_slice(&chunk);
                    if head.len() > SINGLE_PUT_BYTES {
                        let mut upload =
                            WriteMultipart::new_with_chunk_size(self.store.put_multipart(key).await?, SINGLE_PUT_BYTES);
                        upload.write(&std::mem::take(&mut head));
                        multipart = Some(upload);
                    }
                }
            }
        }
        let pending = match multipart {
            Some(upload) => Pending::Multipart(upload),
            None => Pending::Small { store: self.store.clone(), key: key.clone(), bytes: head },
        };
        Ok(Received { size, sha256: hex(hasher.finish().as_ref()), pending })
    }

    /// Reads an object, or the byte range `range` of it; with `if_match`, only while the
    /// object's e_tag is still that one (else `Error::Precondition`).
    pub async fn read(
        &self,
        key: &ObjectPath,
        range: Option<object_store::GetRange>,
        if_match: Option<String>,
    ) -> Result<object_store::GetResult, object_store::Error> {
        let options = object_store::GetOptions { range, if_match, ..Default::default() };
        self.store.get_opts(key, options).await
    }

    /// What the store says of the object at `key`.
    pub async fn head(&self, key: &ObjectPath) -> Result<object_store::ObjectMeta, object_store::Error> {
        self.store.head(key).await
    }

    /// What the store says of every object under the folder `prefix`.
    pub async fn list_meta(&self, prefix: &ObjectPath) -> Result<Vec<object_store::ObjectMeta>, object_store::Error> {
        self.store.list(Some(prefix)).collect::<Vec<_>>().await.into_iter().collect()
    }

    /// The object's e_tag, `None` when there is no object.
    pub async fn e_tag(&self, key: &ObjectPath) -> Result<Option<String>, object_store::Error> {
        match self.store.head(key).await {
            Ok(meta) => Ok(meta.e_tag),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Hashes an existing object: its size, SHA-256 and e_tag.
    pub async fn hash(&self, key: &ObjectPath) -> Result<Written, object_store::Error> {
        let result = self.store.get(key).await?;
        let e_tag = result.meta.e_tag.clone();
        let mut stream = result.into_stream();
        let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            hasher.update(&chunk);
        }
        Ok(Written { size, sha256: hex(hasher.finish().as_ref()), e_tag })
    }

    /// Deletes an object; a missing one is fine.
    pub async fn delete(&self, key: &ObjectPath) -> Result<(), object_store::Error> {
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes every file of a mission in the default storage, and its jobs' results there, with
    /// their folders (else every start would take the folder for an orphan mission's).
    pub async fn delete_mission(&self, mission_id: Uuid) -> Result<(), object_store::Error> {
        for prefix in [Self::mission_prefix(mission_id), Self::results_prefix(mission_id)] {
            let keys: Vec<_> = self.store.list(Some(&prefix)).map(|m| m.map(|m| m.location)).collect().await;
            for key in keys {
                self.delete(&key?).await?;
            }
            if let Some(folder) = self.local_folder(&prefix) {
                let io = |e: std::io::Error| object_store::Error::Generic { store: "local", source: Box::new(e) };
                let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&folder) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                });
                removed.await.map_err(|e| io(std::io::Error::other(e)))?.map_err(io)?;
            }
        }
        Ok(())
    }

    /// Where `key` lies on disk, for a local store.
    fn local_folder(&self, key: &ObjectPath) -> Option<std::path::PathBuf> {
        let root = self.local_root.clone()?;
        Some(key.parts().fold(root, |dir, part| dir.join(part.as_ref())))
    }

    /// In a local store: removes the folders above `key` that are empty, from the innermost up to
    /// (not including) `stop_at`; a folder that is not empty ends it. Nothing for other stores.
    pub async fn remove_empty_folders(&self, key: &ObjectPath, stop_at: &ObjectPath) {
        let (Some(file), Some(stop)) = (self.local_folder(key), self.local_folder(stop_at)) else { return };
        let _ = tokio::task::spawn_blocking(move || {
            let mut dir = file.parent().map(std::path::Path::to_path_buf);
            while let Some(folder) = dir {
                if folder == stop || !folder.starts_with(&stop) || std::fs::remove_dir(&folder).is_err() {
                    break;
                }
                dir = folder.parent().map(std::path::Path::to_path_buf);
            }
        })
        .await;
    }

    /// Where the results of a job of `mission_id` live in the default storage.
    pub fn default_results_location(&self, mission_id: Uuid, job_id: Uuid) -> Location {
        Location {
            files: self.clone(),
            root: Self::results_prefix(mission_id).child(job_id.to_string()),
            owned_folder: true,
        }
    }

    fn results_prefix(mission_id: Uuid) -> ObjectPath {
        ObjectPath::from_iter(["results".to_owned(), mission_id.to_string()])
    }

    /// The keys of every object under `prefix`.
    pub async fn list_keys(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, object_store::Error> {
        self.store.list(Some(prefix)).map(|m| m.map(|m| m.location)).collect::<Vec<_>>().await.into_iter().collect()
    }

    /// Ids of the missions that have a folder in this storage.
    pub async fn mission_folders(&self) -> Result<Vec<String>, object_store::Error> {
        let listing = self.store.list_with_delimiter(Some(&ObjectPath::from("missions"))).await?;
        Ok(listing.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect())
    }
}
