//! The access token a signed-in program last got, kept beside the token file (`FILE.session`,
//! mode 0600), so that a command run while it is valid signs in without asking the server
//! anything: no `auth-config` request, no refresh, no write of the token file. What makes a
//! Slurm command (`sbatch`, `squeue`) a few milliseconds instead of a few round trips and an
//! fsync. The token file keeps the refresh token in the spec's format; this cache is tied to
//! that refresh token by its SHA-256, and to the server and provider it was got from, so a new
//! sign-in, another server or another client id never finds a stale one. A cache that cannot be
//! read or written is only a miss.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Local};
use serde::{Deserialize, Serialize};

use super::{DeviceAuth, Tokens};

/// What the cache holds.
#[derive(Serialize, Deserialize)]
struct CachedSession {
    /// The service's URL(s), as the client normalised them.
    server: String,
    auth_url: String,
    client_id: String,
    audience: String,
    /// Hex SHA-256 of the refresh token the access token was got with.
    refresh_token_sha256: String,
    access_token: String,
    expires_at: DateTime<Local>,
}

/// The cache file of `token_file`.
fn path_of(token_file: &Path) -> PathBuf {
    let mut name = token_file.as_os_str().to_owned();
    name.push(".session");
    PathBuf::from(name)
}

/// The hex SHA-256 of `text`: how the caches beside the token file name the refresh token they
/// belong to, without keeping it.
pub fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A session for `server` from the cache of `token_file`, whose refresh token is
/// `refresh_token`: the provider to renew it with (its prompt `like` says) and the tokens,
/// valid for longer than `margin` still. `client_id` and `audience`, where the caller asks for
/// particular ones, must be the cached session's.
pub(crate) fn read(
    token_file: &Path,
    server: &str,
    refresh_token: &str,
    client_id: Option<&str>,
    audience: Option<&str>,
    margin: chrono::TimeDelta,
) -> Option<(DeviceAuth, Tokens)> {
    let bytes = std::fs::read(path_of(token_file)).ok()?;
    let cached: CachedSession = serde_json::from_slice(&bytes).ok()?;
    let fits = cached.server == server
        && cached.refresh_token_sha256 == sha256_hex(refresh_token)
        && cached.expires_at - Local::now() > margin
        && client_id.is_none_or(|id| id == cached.client_id)
        && audience.filter(|a| !a.is_empty()).is_none_or(|a| a == cached.audience);
    if !fits {
        return None;
    }
    let auth = DeviceAuth::new(&cached.auth_url, &cached.audience)
        .client_id(&cached.client_id)
        .token_file(token_file.to_path_buf());
    let tokens = Tokens {
        access_token: cached.access_token,
        refresh_token: refresh_token.to_owned(),
        expires_at: cached.expires_at,
    };
    Some((auth, tokens))
}

/// Keeps `tokens`, got from `auth` for `server`, in the cache of `auth`'s token file (if it has
/// one). Written aside and renamed, so a reader never sees half of it; not synced: a cache lost
/// in a crash is a miss.
pub(crate) fn write(auth: &DeviceAuth, server: &str, tokens: &Tokens) {
    let Some(token_file) = auth.token_file_path() else { return };
    let cached = CachedSession {
        server: server.to_owned(),
        auth_url: auth.auth_url.clone(),
        client_id: auth.client_id.clone(),
        audience: auth.audience.clone(),
        refresh_token_sha256: sha256_hex(&tokens.refresh_token),
        access_token: tokens.access_token.clone(),
        expires_at: tokens.expires_at,
    };
    let bytes = serde_json::to_vec(&cached).expect("the cache serialises");
    let _ = super::token_file::write_private(&path_of(token_file), &bytes, false);
}

/// Forgets the cache of `token_file` (at sign-out, with the token file).
pub(crate) fn remove(token_file: &Path) {
    let _ = std::fs::remove_file(path_of(token_file));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_cached_session_is_found_only_for_its_refresh_token_server_and_time() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        let auth = DeviceAuth::new("http://127.0.0.1:9/", "https://api").client_id("cli").token_file(file.clone());
        let margin = chrono::TimeDelta::seconds(60);
        let tokens = Tokens {
            access_token: "access".into(),
            refresh_token: "refresh".into(),
            expires_at: Local::now() + chrono::TimeDelta::minutes(10),
        };
        write(&auth, "http://a", &tokens);
        let mode = std::fs::metadata(path_of(&file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (found, got) = read(&file, "http://a", "refresh", None, None, margin).expect("a hit");
        assert_eq!((got.access_token.as_str(), found.auth_url()), ("access", "http://127.0.0.1:9"));
        assert!(read(&file, "http://b", "refresh", None, None, margin).is_none(), "another server");
        assert!(read(&file, "http://a", "another", None, None, margin).is_none(), "a new sign-in");
        assert!(read(&file, "http://a", "refresh", Some("other"), None, margin).is_none(), "another client");
        assert!(read(&file, "http://a", "refresh", None, None, chrono::TimeDelta::hours(1)).is_none(), "expiring");
        remove(&file);
        assert!(read(&file, "http://a", "refresh", None, None, margin).is_none(), "removed");
    }
}
