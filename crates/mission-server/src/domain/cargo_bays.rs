//! Cargo bays: list, add, read, delete.
//!
//! Everyone sees the default bay; a user sees and uses their own bays; admins see all and may add
//! `local` bays (a directory on this host), also on behalf of a user. A new bay is checked by
//! listing its prefix before it is saved, so wrong credentials or a missing bucket are a 400 at
//! once rather than a failure at the first upload.

use mission_api::{CargoBay, CargoBayKind, CreateCargoBay, DEFAULT_CARGO_BAY_ID};
use mission_store::{self as store, CargoBayRecord};
use uuid::Uuid;

use super::{DomainError, DomainResult, checked_name, outbound_url};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::audit::{self, Change};
use crate::domain::bay_storage::{CargoBays, Credentials, is_refusal, storage_segments};

/// Longest S3 credential field, in bytes (AWS session tokens run to a few KiB).
const MAX_SECRET_BYTES: usize = 8192;

/// A bay (not the default one) the caller may see: their own, or any for an admin; not found
/// otherwise.
async fn visible(app: &AppState, who: Principal, storage_id: Uuid) -> DomainResult<CargoBayRecord> {
    match app.store.cargo_bay(storage_id).await? {
        Some(record) if who.admin || record.bay.user_id == Some(who.user_id) => Ok(record),
        _ => Err(DomainError::not_found("cargo bay", storage_id)),
    }
}

/// The default bay and the caller's bays (every bay, for admins).
pub async fn list(app: &AppState, who: Principal) -> DomainResult<Vec<CargoBay>> {
    let owner = (!who.admin).then_some(who.user_id);
    let rows = app.store.cargo_bays(owner).await?;
    Ok(std::iter::once(CargoBays::default_bay()).chain(rows.into_iter().map(|r| r.bay)).collect())
}

/// One bay the caller may see (the default bay, for everyone).
pub async fn get(app: &AppState, who: Principal, storage_id: Uuid) -> DomainResult<CargoBay> {
    if storage_id == DEFAULT_CARGO_BAY_ID {
        return Ok(CargoBays::default_bay());
    }
    Ok(visible(app, who, storage_id).await?.bay)
}

/// Deletes a bay of the caller's (any, for an admin) that no mission names any more. Its
/// objects stay where they are.
pub async fn delete(app: &AppState, who: Principal, storage_id: Uuid) -> DomainResult<()> {
    if storage_id == DEFAULT_CARGO_BAY_ID {
        return Err(DomainError::Conflict(
            "the default cargo bay is the server's own storage and cannot be deleted".into(),
        ));
    }
    let record = visible(app, who, storage_id).await?;
    audit::note(who, Change::new("cargo_bay.delete", "cargo_bay", storage_id).named(&record.bay.name));
    if !app.store.delete_cargo_bay(storage_id).await? {
        return Err(DomainError::not_found("cargo bay", storage_id));
    }
    app.bays.forget(storage_id);
    Ok(())
}

/// Adds a bay after checking that it answers (by listing its prefix).
pub async fn create(app: &AppState, who: Principal, req: CreateCargoBay) -> DomainResult<CargoBay> {
    let name = checked_name(&req.name)?;
    let owner = match req.user_id {
        None => who.user_id,
        Some(user) if user == who.user_id => user,
        Some(_) if !who.admin => {
            return Err(DomainError::Forbidden("only admins may add cargo bays for other users".into()));
        }
        Some(user) => {
            app.store
                .user_by_id(user)
                .await?
                .ok_or_else(|| DomainError::invalid("user_id", format!("no user {user}")))?;
            user
        }
    };
    let storage_id = Uuid::new_v4();
    let mut bay = CargoBays::bare_bay(storage_id, name, req.kind, Some(owner), Some(store::now()));
    let mut sealed_credentials = None;
    let mut prefix = Vec::new();
    match req.kind {
        CargoBayKind::Default => {
            return Err(DomainError::invalid(
                "kind",
                format!("the default cargo bay ({DEFAULT_CARGO_BAY_ID}) always exists; add \"s3\" or \"local\" bays"),
            ));
        }
        CargoBayKind::Local => {
            if !who.admin {
                return Err(DomainError::Forbidden(
                    "only admins may add local cargo bays (a directory on the server host)".into(),
                ));
            }
            for (field, given) in [
                ("bucket", req.bucket.is_some()),
                ("prefix", req.prefix.is_some()),
                ("endpoint", req.endpoint.is_some()),
                ("region", req.region.is_some()),
                ("access_key_id", req.access_key_id.is_some()),
                ("secret_access_key", req.secret_access_key.is_some()),
                ("session_token", req.session_token.is_some()),
            ] {
                if given {
                    return Err(DomainError::invalid(field, "applies to s3 cargo bays only"));
                }
            }
            bay.path = Some(check_local_dir(req.path.as_deref())?);
        }
        CargoBayKind::S3 => {
            if req.path.is_some() {
                return Err(DomainError::invalid("path", "applies to local cargo bays only; s3 bays take a prefix"));
            }
            bay.bucket = Some(check_bucket(req.bucket.as_deref())?);
            prefix = storage_segments("prefix", req.prefix.as_deref())?;
            bay.prefix = (!prefix.is_empty()).then(|| prefix.join("/"));
            bay.region = req.region.as_deref().map(check_region).transpose()?;
            bay.endpoint = req.endpoint.as_deref().map(|e| check_endpoint(app, who, e)).transpose()?;
            let credentials = match (req.access_key_id, req.secret_access_key, req.session_token) {
                (None, None, None) => None,
                (Some(access_key_id), Some(secret_access_key), session_token) => {
                    for (field, value) in [
                        ("access_key_id", Some(&access_key_id)),
                        ("secret_access_key", Some(&secret_access_key)),
                        ("session_token", session_token.as_ref()),
                    ] {
                        if value.is_some_and(|v| {
                            v.is_empty() || v.len() > MAX_SECRET_BYTES || v.chars().any(char::is_control)
                        }) {
                            return Err(DomainError::invalid(
                                field,
                                format!("must be 1 to {MAX_SECRET_BYTES} bytes without control characters"),
                            ));
                        }
                    }
                    Some(Credentials { access_key_id, secret_access_key, session_token })
                }
                (None, _, _) => {
                    return Err(DomainError::invalid("access_key_id", "a secret or token needs its access_key_id"));
                }
                (Some(_), None, _) => {
                    return Err(DomainError::invalid("secret_access_key", "access_key_id needs its secret_access_key"));
                }
            };
            sealed_credentials = credentials.as_ref().map(|c| app.bays.seal(storage_id, c));
            bay.has_credentials = credentials.is_some();
        }
    }
    let record = CargoBayRecord { bay, sealed_credentials };
    let files = app.bays.open(&record)?;
    if let Err(e) = files.probe(&prefix).await {
        app.bays.forget(storage_id);
        let hint =
            if is_refusal(&e) { "the storage refused the credentials" } else { "the storage could not be listed" };
        return Err(DomainError::Rejected(format!("cargo bay check failed, {hint}: {e}")));
    }
    // The bay as answered: its credentials are never in it.
    let change = Change::new("cargo_bay.create", "cargo_bay", storage_id).named(&record.bay.name);
    audit::note(who, change.with(&record.bay));
    app.store.insert_cargo_bay(&record).await?;
    Ok(record.bay)
}

fn check_local_dir(path: Option<&str>) -> DomainResult<String> {
    let path = path.ok_or_else(|| DomainError::invalid("path", "a local cargo bay needs a directory"))?;
    let dir = std::path::Path::new(path);
    if !dir.is_absolute() {
        return Err(DomainError::invalid("path", format!("{path:?} is not an absolute path")));
    }
    let real = dir.canonicalize().map_err(|e| DomainError::invalid("path", format!("{path:?}: {e}")))?;
    if !real.is_dir() {
        return Err(DomainError::invalid("path", format!("{path:?} is not a directory")));
    }
    real.to_str().map(str::to_owned).ok_or_else(|| DomainError::invalid("path", format!("{path:?} is not valid UTF-8")))
}

/// S3 bucket names: 3–63 lower-case letters, digits, dots and hyphens, starting and ending with a
/// letter or digit.
fn check_bucket(bucket: Option<&str>) -> DomainResult<String> {
    let bucket = bucket.ok_or_else(|| DomainError::invalid("bucket", "an s3 cargo bay needs a bucket"))?;
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && edge_ok(bucket.chars().next())
        && edge_ok(bucket.chars().last());
    if !valid {
        return Err(DomainError::invalid(
            "bucket",
            format!("{bucket:?} is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-')"),
        ));
    }
    Ok(bucket.to_owned())
}

fn check_region(region: &str) -> DomainResult<String> {
    if region.is_empty() || region.len() > 64 || !region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(DomainError::invalid("region", format!("{region:?} is not a region name")));
    }
    Ok(region.to_owned())
}

/// An endpoint is an http(s) URL without credentials, query or fragment; users other than
/// admins may name only the ones the server allows.
fn check_endpoint(app: &AppState, who: Principal, endpoint: &str) -> DomainResult<String> {
    let url = outbound_url("endpoint", endpoint)?;
    let bad = |why: &str| DomainError::invalid("endpoint", format!("{endpoint:?}: {why}"));
    if url.query().is_some() {
        return Err(bad("must not carry a query"));
    }
    let normalised = url.as_str().trim_end_matches('/').to_owned();
    let allowed = app.config.s3_endpoints.iter().any(|a| a.as_str().trim_end_matches('/') == normalised);
    if !who.admin && !allowed {
        return Err(bad("this server does not allow it; an admin can allow it with `mission server --s3-endpoint`"));
    }
    Ok(normalised)
}
