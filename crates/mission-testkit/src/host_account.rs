//! A real account of this host, made for a test or benchmark with `useradd` (as root) and removed
//! with its home when dropped: what batch jobs, which run as their user's own account, run as.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A host account and its home.
pub struct HostAccount {
    /// Its user name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its home directory, owned by it.
    pub home: PathBuf,
}

impl HostAccount {
    /// A new account named `PREFIX` and 8 hex digits, with a home in `/home` and bash.
    pub fn create(prefix: &str) -> Self {
        let name = format!("{prefix}{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let made = std::process::Command::new("useradd").args(["-m", "-s", "/bin/bash", &name]).status();
        assert!(made.is_ok_and(|status| status.success()), "useradd {name}");
        let home = PathBuf::from(format!("/home/{name}"));
        let meta = std::fs::metadata(&home).unwrap();
        Self { name, uid: meta.uid(), gid: meta.gid(), home }
    }
}

impl Drop for HostAccount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel").args(["-r", "-f", &self.name]).output();
    }
}
