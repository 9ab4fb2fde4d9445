//! The agent's own directories: where work dirs go by default, and directories only the
//! agent's user may use.

use std::path::PathBuf;

/// Where the work dirs of the agent whose data dir is `data_dir` go by default:
/// `/var/tmp/mission-lz-{uid}/{hash of the data dir}`, outside any data dir, and the same for
/// every start of that agent (so a restarted agent finds and removes what it left).
pub fn default_work_root(data_dir: &std::path::Path) -> PathBuf {
    let base = if std::path::Path::new("/var/tmp").is_dir() { PathBuf::from("/var/tmp") } else { std::env::temp_dir() };
    let absolute = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = ring::digest::digest(&ring::digest::SHA256, absolute.as_os_str().as_encoded_bytes());
    let name: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    base.join(format!("mission-lz-{}", rustix::process::geteuid().as_raw())).join(name)
}

/// Makes `path` (and missing parents) a directory with `mode`, owned by the agent's user, and
/// sets that mode on it if it existed already; a path that is a link or another user's is
/// refused.
pub(crate) fn private_dir(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(path)?;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(std::io::Error::other("not a directory of the agent's own user"));
    }
    if meta.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}
