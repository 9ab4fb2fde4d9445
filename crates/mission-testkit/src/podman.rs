//! The names `mission lz` agents give the images they load into this host's Podman storage
//! (`localhost/mission-image-{agent}:{hex digest}`), for tests and benchmarks that run or tidy
//! them.

use std::process::Command;

/// `podman` with the global flags the landing zones give it on this host: cgroupfs, and runc on
/// cgroup v1 hosts (crun refuses their hybrid hierarchies).
pub fn podman_command() -> Command {
    let mut command = Command::new("podman");
    command.args(["--cgroup-manager", "cgroupfs"]);
    if !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        command.args(["--runtime", "runc"]);
    }
    command
}

/// Every name an agent gave the image of archive digest `hex` (without `sha256:`).
pub fn podman_names_of(hex: &str) -> Vec<String> {
    let Ok(out) = podman_command().args(["images", "--format", "{{.Repository}}:{{.Tag}}"]).output() else {
        return Vec::new();
    };
    let tag = format!(":{hex}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|name| name.starts_with("localhost/mission-image") && name.ends_with(&tag))
        .map(str::to_owned)
        .collect()
}

/// Removes those names, never the image: tests load the same content under other digests, and
/// removing an image while another test's agent names it takes the new name with it.
pub fn forget_podman_image(hex: &str) {
    for name in podman_names_of(hex) {
        let _ = podman_command().args(["untag", &name, &name]).output();
    }
}
