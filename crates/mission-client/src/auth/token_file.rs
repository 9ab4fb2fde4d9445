//! The token file (spec §5, "Stored token information"): a JSON object with `refresh_token` and
//! `expires_in`, the latter a local timestamp `%Y-%m-%d %H:%M:%S.%f`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Local, NaiveDateTime, TimeZone};
use serde::{Deserialize, Serialize};

use crate::Error;

/// strftime format of `expires_in` in the file (chrono spells `%.6f` for the spec's `.%f`).
pub const EXPIRY_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.6f";

/// Name of the default token file in the home directory.
pub const DEFAULT_TOKEN_FILE_NAME: &str = ".mission";

/// The file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredToken {
    /// The refresh token.
    pub refresh_token: String,
    /// Local time the access token obtained with it expires, `%Y-%m-%d %H:%M:%S.%f`.
    pub expires_in: String,
}

impl StoredToken {
    /// The record for `refresh_token` with an access token expiring at `expires_at`.
    pub fn new(refresh_token: &str, expires_at: DateTime<Local>) -> Self {
        Self { refresh_token: refresh_token.to_owned(), expires_in: expires_at.format(EXPIRY_FORMAT).to_string() }
    }

    /// `expires_in` read back as a time, if it parses.
    pub fn expires_at(&self) -> Option<DateTime<Local>> {
        let naive = NaiveDateTime::parse_from_str(&self.expires_in, EXPIRY_FORMAT).ok()?;
        Local.from_local_datetime(&naive).earliest()
    }
}

/// The default token file: `~/.mission`.
pub fn default_token_file() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(DEFAULT_TOKEN_FILE_NAME)
}

/// Reads the token file; `Ok(None)` when it does not exist.
pub fn read(path: &Path) -> Result<Option<StoredToken>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::TokenFile {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::TokenFile { path: path.to_owned(), source }),
    }
}

/// Writes the token file atomically (temp file in the same folder, fsync, rename) with mode 0600,
/// so a crash never leaves a torn file and no other user can read the token at any moment.
pub fn write(path: &Path, token: &StoredToken) -> Result<(), Error> {
    let bytes = serde_json::to_vec_pretty(token).expect("the token record serialises");
    write_private(path, &bytes, true).map_err(|source| Error::TokenFile { path: path.to_owned(), source })
}

/// Writes `bytes` to `path` whole or not at all: to a temp file of mode 0600 in the same folder
/// (synced first where `sync`), renamed over `path`; the temp file is removed on failure.
pub fn write_private(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("token");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            if sync { file.sync_all() } else { Ok(()) }
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Removes the token file, and the access token cached beside it; a missing file is fine.
pub fn remove(path: &Path) -> Result<(), Error> {
    super::session_cache::remove(path);
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::TokenFile { path: path.to_owned(), source: e })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn round_trips_with_the_spec_format_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tok");
        let at = Local.with_ymd_and_hms(2026, 11, 23, 9, 5, 7).unwrap() + chrono::Duration::microseconds(42);
        let token = StoredToken::new("r-1", at);
        assert_eq!(token.expires_in, "2026-11-23 09:05:07.000042");
        write(&path, &token).unwrap();
        assert_eq!(read(&path).unwrap().unwrap(), token);
        assert_eq!(token.expires_at().unwrap(), at);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        remove(&path).unwrap();
        assert_eq!(read(&path).unwrap(), None);
    }
}
