//! Container images: import (the archive streamed in, size-limited, stored whole or not at all),
//! registry references ([`register_reference`]), list, get, delete, and how a mission or a run
//! request names one ([`resolve`]).
//!
//! An archive is stored in the service's default storage under `images/{image_id}`; its row is
//! written only once the object is whole, and removed before the object is, so a crash leaves at
//! worst an object without a row, which start-up removes ([`remove_orphans`]). Who sees an image:
//! its owner, the members of its project where it is a `project` image, everyone where it is
//! `public` (only admins publish so), and admins. Its owner and admins delete it, unless a job
//! that has not ended runs in it.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use mission_api::images::check_image_name;
use mission_api::{
    Image, ImageFormat, ImageRef, ImageVisibility, ImportImage, JobImage, RegisterImageReference, RegistryReference,
};
use object_store::path::Path as ObjectPath;
use uuid::Uuid;

use super::{DomainError, DomainResult, projects};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::domain::image_archive::ArchiveSniffer;
use crate::services::blobs::WriteError;

/// Where an image's archive lies in the default storage.
pub fn archive_key(image_id: Uuid) -> ObjectPath {
    ObjectPath::from(format!("images/{image_id}"))
}

/// Stores `body`, an OCI or docker archive, as a new image of the caller's. `announced` is the
/// size the request said it will send, if it did: what cannot fit is refused before the body is
/// read.
pub async fn import<S, E>(
    app: &AppState,
    who: Principal,
    request: ImportImage,
    announced: Option<u64>,
    body: S,
) -> DomainResult<Image>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let project_id = check_new(app, who, &request.name, request.visibility, request.project_id).await?;
    // Image archives count against their owner's bytes, with their files.
    let owner_room = app.config.file_limits.max_user_bytes;
    let over_owner = |used: u64| {
        DomainError::TooLarge(format!(
            "the image would take your files and images over max_user_bytes = {owner_room} bytes ({used} bytes in use)"
        ))
    };
    let used = app.store.owner_bytes(who.user_id).await?;
    let room = owner_room.saturating_sub(used);
    let max = app.config.max_image_bytes;
    let too_large = || DomainError::TooLarge(format!("the image is larger than max_image_size = {max} bytes"));
    if announced.is_some_and(|size| size > max) {
        return Err(too_large());
    }
    if announced.is_some_and(|size| size > room) {
        return Err(over_owner(used));
    }
    let image_id = Uuid::new_v4();
    let key = archive_key(image_id);
    let files = app.bays.default_store();
    let mut sniffer = ArchiveSniffer::default();
    // The upload stops at the first chunk that shows it is no image archive we take: what
    // follows is neither read nor stored.
    let body = body.map(|chunk| {
        let bytes = chunk.map_err(|e| e.to_string())?;
        sniffer.feed(&bytes);
        match sniffer.refusal() {
            Some(why) => Err(why.to_owned()),
            None => Ok(bytes),
        }
    });
    let received = files.receive(&key, body, max.min(room)).await;
    if let Some(why) = sniffer.refusal() {
        return Err(DomainError::Rejected(format!("the body is not an image archive: {why}")));
    }
    let received = received.map_err(|e| match e {
        WriteError::TooLarge(_) if room < max => over_owner(used),
        WriteError::TooLarge(_) => too_large(),
        WriteError::Body(detail) => DomainError::Rejected(format!("the upload did not complete: {detail}")),
        WriteError::Storage(e) => DomainError::internal(e),
    })?;
    let format = match sniffer.format() {
        Ok(format) => format,
        Err(why) => {
            received.abort().await;
            return Err(DomainError::Rejected(why));
        }
    };
    let written = received.complete().await.map_err(|e| DomainError::internal(format!("{e:?}")))?;
    let image = Image {
        image_id,
        name: request.name,
        digest: format!("sha256:{}", written.sha256),
        size: written.size,
        format,
        reference: None,
        visibility: request.visibility,
        owner_id: who.user_id,
        project_id,
        created_at: mission_store::now(),
    };
    let change = Change::new("image.import", "image", image_id).named(&image.name);
    let noted = serde_json::json!({ "digest": image.digest, "size": image.size, "visibility": image.visibility });
    audit::note(who, change.in_project(project_id).with(noted));
    match app.store.insert_image(&image, owner_room).await {
        Ok(Ok(())) => {}
        Ok(Err(used)) => {
            let _ = files.delete(&key).await;
            return Err(over_owner(used));
        }
        Err(e) => {
            let _ = files.delete(&key).await;
            return Err(e.into());
        }
    }
    Ok(image)
}

/// Checks a new image's name (free among the caller's), visibility and project (default: the
/// caller's personal project, which it answers).
async fn check_new(
    app: &AppState,
    who: Principal,
    name: &str,
    visibility: ImageVisibility,
    project_id: Option<Uuid>,
) -> DomainResult<Uuid> {
    check_image_name(name).map_err(|e| DomainError::invalid("name", e))?;
    if visibility == ImageVisibility::Public && !who.admin {
        return Err(DomainError::Forbidden("only admins publish images to everyone".into()));
    }
    let project_id = project_id.unwrap_or(who.user_id);
    projects::ensure_may_run(app, who, project_id, "project_id").await?;
    if app.store.images_named(Some(name), None).await?.iter().any(|i| i.owner_id == who.user_id) {
        return Err(DomainError::Conflict(format!("you have an image named {name:?} already")));
    }
    Ok(project_id)
}

/// Registers an image that landing zones pull from a registry: a reference pinned by digest,
/// into a registry the server allows (any, for an admin).
pub async fn register_reference(
    app: &AppState,
    who: Principal,
    request: RegisterImageReference,
) -> DomainResult<Image> {
    let reference = RegistryReference::parse(&request.reference).map_err(|e| DomainError::invalid("reference", e))?;
    if !who.admin && !app.config.image_registries.iter().any(|allowed| allowed == reference.registry) {
        return Err(DomainError::invalid(
            "reference",
            format!(
                "the server does not allow registry {:?} (mission server --image-registry; admins may name any)",
                reference.registry
            ),
        ));
    }
    let digest = reference.digest.to_owned();
    let project_id = check_new(app, who, &request.name, request.visibility, request.project_id).await?;
    let image = Image {
        image_id: Uuid::new_v4(),
        name: request.name,
        digest,
        size: 0,
        format: ImageFormat::Registry,
        reference: Some(request.reference),
        visibility: request.visibility,
        owner_id: who.user_id,
        project_id,
        created_at: mission_store::now(),
    };
    let change = Change::new("image.register", "image", image.image_id).named(&image.name);
    let noted = serde_json::json!({ "reference": image.reference, "visibility": image.visibility });
    audit::note(who, change.in_project(project_id).with(noted));
    // A registry's image holds none of the service's bytes.
    app.store.insert_image(&image, u64::MAX).await?.map_err(|_| DomainError::internal("no room for no bytes"))?;
    Ok(image)
}

/// Whether `who` sees `image`.
async fn sees(app: &AppState, who: Principal, image: &Image) -> DomainResult<bool> {
    Ok(who.admin
        || image.owner_id == who.user_id
        || image.visibility == ImageVisibility::Public
        || (image.visibility == ImageVisibility::Project
            && projects::role(app, who, image.project_id).await?.is_some()))
}

/// The images the caller sees (every one, for an admin), by name.
pub async fn list(app: &AppState, who: Principal) -> DomainResult<Vec<Image>> {
    Ok(app.store.images(who.user_id, who.admin).await?)
}

/// An image the caller sees, by id.
pub async fn get(app: &AppState, who: Principal, image_id: Uuid) -> DomainResult<Image> {
    match app.store.image(image_id).await? {
        Some(image) if sees(app, who, &image).await? => Ok(image),
        _ => Err(DomainError::not_found("image", image_id)),
    }
}

/// Deletes an image of the caller's (any, for an admin): its row, then its archive.
pub async fn delete(app: &AppState, who: Principal, image_id: Uuid) -> DomainResult<()> {
    let image = get(app, who, image_id).await?;
    if image.owner_id != who.user_id && !who.admin {
        return Err(DomainError::Forbidden("only an image's owner and admins delete it".into()));
    }
    let change = Change::new("image.delete", "image", image_id).named(&image.name);
    audit::note(who, change.in_project(image.project_id));
    if !app.store.delete_image(image_id).await? {
        return Err(DomainError::not_found("image", image_id));
    }
    if image.reference.is_none() {
        app.bays.default_store().delete(&archive_key(image_id)).await.map_err(DomainError::internal)?;
    }
    Ok(())
}

/// The image `reference` names for `who` (a request's `field`): by digest, any image of it they
/// see; by name, their own of that name, else one of a project of theirs, else a public one.
pub async fn resolve(app: &AppState, who: Principal, field: &'static str, reference: &str) -> DomainResult<JobImage> {
    let parsed = ImageRef::parse(reference).map_err(|e| DomainError::invalid(field, e))?;
    let (name, digest) = match parsed {
        ImageRef::Name(name) => (Some(name), None),
        ImageRef::Digest(digest) => (None, Some(digest)),
    };
    let mut seen = Vec::new();
    for image in app.store.images_named(name, digest).await? {
        if sees(app, who, &image).await? {
            seen.push(image);
        }
    }
    // Own first, then a project's, then public ones: the first tier that has one decides.
    let tier = |image: &Image| match image.visibility {
        _ if image.owner_id == who.user_id => 0,
        ImageVisibility::Project | ImageVisibility::Private => 1,
        ImageVisibility::Public => 2,
    };
    let best = seen.iter().map(tier).min();
    let chosen: Vec<&Image> = seen.iter().filter(|i| Some(tier(i)) == best).collect();
    match chosen.as_slice() {
        [] => Err(DomainError::invalid(field, format!("no image {reference:?} that you see"))),
        [image] => Ok(job_image(image)),
        [first, ..] if digest.is_some() => Ok(job_image(first)),
        several => Err(DomainError::Conflict(format!(
            "{} images named {reference:?} are visible to you ({}); name one by its digest",
            several.len(),
            several.iter().map(|i| i.digest.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Removes the archives of images that have no row (a crash between the object and its row);
/// answers how many. Call only while no import runs (at start-up, without replicas).
pub async fn remove_orphans(
    store: &mission_store::Store,
    files: &crate::services::blobs::FileStore,
) -> DomainResult<usize> {
    let known: std::collections::HashSet<Uuid> = store.image_ids().await?.into_iter().collect();
    let listed = files.list_keys(&ObjectPath::from("images")).await.map_err(DomainError::internal)?;
    let mut removed = 0;
    for key in listed {
        let orphan = key.filename().and_then(|name| Uuid::parse_str(name).ok()).is_none_or(|id| !known.contains(&id));
        if orphan && files.delete(&key).await.is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// What a job carries of its image.
fn job_image(image: &Image) -> JobImage {
    JobImage { image_id: image.image_id, digest: image.digest.clone(), reference: image.reference.clone() }
}
