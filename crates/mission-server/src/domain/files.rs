//! Mission files: list, upload (streamed), delete. Downloads are the HTTP edge's alone
//! (`routes/files.rs`: a `Range`, an `ETag`).
//!
//! An upload first records an intent, then streams the body into the object (which changes only
//! when the whole body has arrived within the limits), then commits the file row and ends the
//! intent in one transaction. A crash between those steps leaves an intent that start-up
//! recovery (`routes::files::recover`) settles, so no torn file and no row without its content
//! survive. Whoever may read the mission lists its files; whoever may change it uploads and
//! deletes them.

use bytes::Bytes;
use futures_util::Stream;
use mission_api::FileListing;
use mission_api::paths::MissionPath;
use mission_store::{self as store, FileRecord, Intent, IntentKind, UploadUsage};
use uuid::Uuid;

use super::{DomainError, DomainResult, missions};
use crate::AppState;
use crate::config::FileLimits;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::domain::bay_storage::storage_error;
use crate::services::blobs::WriteError;

/// The files of a mission the caller may read, by path.
pub async fn list(app: &AppState, who: Principal, mission_id: Uuid) -> DomainResult<Vec<FileListing>> {
    let mission = missions::readable(app, who, mission_id).await?;
    let files = app.store.mission_files(mission.mission_id).await?;
    Ok(files.into_iter().map(FileListing::from).collect())
}

/// A file stored by [`upload`].
#[derive(Debug)]
pub struct Uploaded {
    /// The file as it is now.
    pub file: FileListing,
    /// Whether it replaced a file at its path (rather than creating one).
    pub replaced: bool,
}

/// Stores `body` as the file at `path` of a mission the caller may change (created or
/// replaced). `announced` is the size the request said it will send, if it did: what cannot fit
/// is refused before the body is read.
pub async fn upload<S, E>(
    app: &AppState,
    who: Principal,
    mission_id: Uuid,
    path: &MissionPath,
    announced: Option<u64>,
    body: S,
) -> DomainResult<Uploaded>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mission = missions::writable(app, who, mission_id).await?;
    if let Some(other) = app.store.path_conflict(mission.mission_id, path.as_str()).await? {
        return Err(DomainError::Conflict(if other.len() < path.as_str().len() {
            format!("{other} is a file, so it cannot be a folder of {path}")
        } else {
            format!("{path} is a folder (it holds {other}), so it cannot be a file")
        }));
    }
    let limits = app.config.file_limits;
    let usage = app.store.upload_usage(mission.mission_id, mission.user_id, path.as_str()).await?;
    let existing = usage.existing_size;
    // A first check before the body, to refuse at once what cannot fit.
    check_room(&limits, usage, announced.unwrap_or(0))?;

    let place = app.bays.source(&app.store, &mission).await?;
    let key = place.new_key(path).map_err(|e| DomainError::invalid("path", e.to_string()))?;
    let intent = Intent::new(IntentKind::Upload, mission.mission_id, path.as_str());
    app.store.begin_intent(&intent).await?;
    let allowance = limits.max_file_bytes.min(user_room(&limits, usage));
    let fail = |e: WriteError| match e {
        WriteError::TooLarge(_) => check_room(&limits, usage, allowance + 1).err().unwrap_or_else(|| {
            DomainError::TooLarge(format!("the file is larger than max_file_size = {} bytes", limits.max_file_bytes))
        }),
        WriteError::Body(detail) => DomainError::Rejected(format!("the upload did not complete: {detail}")),
        WriteError::Storage(e) => storage_error(&place, e),
    };
    let received = match place.files.receive(&key, body, allowance).await {
        Ok(r) => r,
        Err(e) => {
            app.store.drop_intent(intent.intent_id).await?;
            return Err(fail(e));
        }
    };
    // The check that counts: against what is committed and what other uploads in flight have
    // reserved, at once with this upload's reservation.
    let size = received.size;
    if let Err(refusal) =
        app.store.reserve_upload(intent.intent_id, mission.user_id, size, |now| check_room(&limits, now, size)).await?
    {
        received.abort().await;
        app.store.drop_intent(intent.intent_id).await?;
        return Err(refusal);
    }
    // Swap the object in and commit its row under the path's lock: the last upload to complete
    // is the one the row describes.
    let _guard = app.path_locks.lock(mission.mission_id, path.as_str()).await?;
    let written = match received.complete().await {
        Ok(w) => w,
        Err(e) => {
            app.store.drop_intent(intent.intent_id).await?;
            return Err(fail(e));
        }
    };
    let record = FileRecord {
        mission_id: mission.mission_id,
        path: path.to_string(),
        user_id: mission.user_id,
        size: written.size,
        sha256: written.sha256,
        e_tag: written.e_tag,
        modified_at: store::now(),
    };
    let change = Change::new("file.upload", "file", format!("{}/{path}", mission.mission_id)).named(path.as_str());
    let written = serde_json::json!({ "size": record.size, "sha256": record.sha256 });
    audit::note(who, change.in_project(mission.project_id).with(written));
    app.store.commit_file(intent.intent_id, &record).await?;
    Ok(Uploaded { file: FileListing::from(record), replaced: existing.is_some() })
}

/// Whether a file of `size` bytes fits under the limits, given `usage`; the refusal naming the
/// limit it would exceed otherwise.
fn check_room(limits: &FileLimits, usage: UploadUsage, size: u64) -> DomainResult<()> {
    if usage.existing_size.is_none() && usage.mission_files >= limits.max_files_per_mission {
        return Err(DomainError::TooLarge(format!(
            "the mission already holds max_files_per_mission = {} files",
            limits.max_files_per_mission
        )));
    }
    if size > limits.max_file_bytes {
        return Err(DomainError::TooLarge(format!(
            "the file is larger than max_file_size = {} bytes",
            limits.max_file_bytes
        )));
    }
    if size > user_room(limits, usage) {
        let used = used_bytes(usage);
        return Err(DomainError::TooLarge(format!(
            "the owner's files would exceed max_user_bytes = {} bytes ({used} bytes in use)",
            limits.max_user_bytes
        )));
    }
    Ok(())
}

/// Bytes the owner's files may still grow by with this upload (the file it replaces counts as
/// gone).
fn user_room(limits: &FileLimits, usage: UploadUsage) -> u64 {
    limits.max_user_bytes.saturating_sub(used_bytes(usage))
}

/// The owner's bytes besides the file this upload replaces.
fn used_bytes(usage: UploadUsage) -> u64 {
    usage.user_bytes.saturating_sub(usage.existing_size.unwrap_or(0))
}

/// Deletes the file at `path` of a mission the caller may change.
pub async fn delete(app: &AppState, who: Principal, mission_id: Uuid, path: &MissionPath) -> DomainResult<()> {
    let mission = missions::writable(app, who, mission_id).await?;
    if app.store.mission_file(mission.mission_id, path.as_str()).await?.is_none() {
        return Err(DomainError::not_found("file", format!("{path} in mission {}", mission.mission_id)));
    }
    let place = app.bays.source(&app.store, &mission).await?;
    let _guard = app.path_locks.lock(mission.mission_id, path.as_str()).await?;
    let intent = Intent::new(IntentKind::Delete, mission.mission_id, path.as_str());
    app.store.begin_intent(&intent).await?;
    let change = Change::new("file.delete", "file", format!("{}/{path}", mission.mission_id)).named(path.as_str());
    audit::note(who, change.in_project(mission.project_id));
    // Row first, object second: a crash in between leaves an intent, never a row without content.
    app.store.delete_file_row(mission.mission_id, path.as_str()).await?;
    place.delete(path).await.map_err(|e| storage_error(&place, e))?;
    app.store.drop_intent(intent.intent_id).await?;
    Ok(())
}
