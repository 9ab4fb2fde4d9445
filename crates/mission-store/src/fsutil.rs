//! File helpers: everything the server writes is private to its user (dirs 0700, files 0600),
//! whatever the umask it was started with (`mission server` also sets its umask to 077 for what
//! libraries create).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Makes `dir` (and parents) a directory only its owner may enter: created 0700, or set to 0700
/// if it existed with another mode.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    make_private(dir, 0o700)
}

/// Makes the file at `path` readable only by its owner: created empty with mode 0600 if missing
/// (and `create`), or set to 0600 if it exists with another mode.
pub fn private_file(path: &Path, create: bool) -> std::io::Result<()> {
    if create {
        std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(path)?;
    }
    match make_private(path, 0o600) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Ok(()),
        other => other,
    }
}

fn make_private(path: &Path, mode: u32) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (temp file, fsync, rename) with mode 0600, so a crash
/// leaves either the old file or the new one and no other user can read it at any moment.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// The secret in the file at `path`, or, where there is none, a new one from `generate`, written
/// there (mode 0600). Several processes creating it at once (replicas sharing a key dir) end up
/// with the same secret: the new file is linked into place only if none is there yet, and a
/// process that finds one there already uses that one.
pub fn read_or_create_secret(
    path: &Path,
    generate: impl FnOnce() -> std::io::Result<Vec<u8>>,
) -> std::io::Result<Vec<u8>> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let secret = generate()?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("secret");
    let tmp = dir.join(format!(".{name}.new-{}", std::process::id()));
    write_private_file(&tmp, &secret)?;
    let linked = std::fs::hard_link(&tmp, path);
    std::fs::remove_file(&tmp)?;
    match linked {
        Ok(()) => Ok(secret),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read(path),
        Err(e) => Err(e),
    }
}

/// An exclusive lock on a data dir, held while a server runs on it (`flock` on `server.lock`,
/// which the kernel releases when the process ends, however it ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Why a data dir could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; its pid, if it wrote one.
    Held(Option<u32>),
    /// The lock file could not be opened or written.
    Io(std::io::Error),
}

impl DataDirLock {
    /// Locks `dir`, failing at once if another process has it, and records this process's pid in
    /// the lock file for the error the next one gets.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let path = dir.join("server.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(LockError::Io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).ok().and_then(|pid| pid.trim().parse().ok());
                return Err(LockError::Held(holder));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        file.set_len(0).map_err(LockError::Io)?;
        writeln!(file, "{}", std::process::id()).map_err(LockError::Io)?;
        Ok(Self { _file: file })
    }
}
