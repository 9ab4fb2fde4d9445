//! A landing zone's part of a job on several (a gang): what its process is told of the others,
//! and what runs on a node that only holds room for rank 0 to start processes on.
//!
//! Every node's process gets its rank and the nodes' addresses in the variables MPI launchers,
//! `torchrun` and scripts read ([`environment`]), and a hostfile with one address per line, in
//! the job's log folder of its work dir (never uploaded as a result).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use mission_api::JOB_LOGS_FOLDER;
use mission_api::lz::{Assignment, GangNode};

/// The port `torchrun`'s rendezvous and other launchers meet on at rank 0's host: one of
/// 10,000 from 20000, picked by the job's id, so that two gangs sharing hosts rarely meet.
fn master_port(job: &Assignment) -> u16 {
    20_000 + (job.job_id.as_u128() % 10_000) as u16
}

/// Where a node's hostfile is written in its work dir `dir`.
pub fn hostfile(dir: &Path) -> PathBuf {
    dir.join(JOB_LOGS_FOLDER).join("hostfile")
}

/// Writes the hostfile of `node` into the work dir `dir` (a file the job's user may read, not
/// follow a link to write) and answers the variables its process gets: `MISSION_NODE_RANK`,
/// `MISSION_NNODES`, `MISSION_HOSTS`, `MISSION_HOSTFILE`, and `MASTER_ADDR`, `MASTER_PORT`,
/// `WORLD_SIZE` and `NODE_RANK` for `torchrun`.
pub fn environment(job: &Assignment, node: &GangNode, dir: &Path) -> std::io::Result<Vec<(&'static str, String)>> {
    let path = hostfile(dir);
    let folder = path.parent().expect("in the log folder");
    match std::fs::DirBuilder::new().mode(0o755).create(folder) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    // Readable by the job's user whatever the agent's umask; the folder is the agent's.
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.write_all(node.hosts.iter().map(|host| format!("{host}\n")).collect::<String>().as_bytes())?;
    let master = node.hosts.first().cloned().unwrap_or_default();
    Ok(vec![
        ("MISSION_NODE_RANK", node.rank.to_string()),
        ("MISSION_NNODES", node.nodes.to_string()),
        ("MISSION_HOSTS", node.hosts.join(",")),
        ("MISSION_HOSTFILE", path.display().to_string()),
        ("MASTER_ADDR", master),
        ("MASTER_PORT", master_port(job).to_string()),
        ("WORLD_SIZE", node.nodes.to_string()),
        ("NODE_RANK", node.rank.to_string()),
    ])
}

/// The command a node runs: the job's, or, on a node held for rank 0 (`launch: first`), one
/// that waits until the gang ends.
pub fn command(job: &Assignment) -> Vec<String> {
    match &job.node {
        Some(node) if !node.runs_command() => vec!["sleep".into(), "infinity".into()],
        _ => job.command.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rank: u32) -> GangNode {
        GangNode {
            nodes: 3,
            rank,
            hosts: vec!["127.0.0.2".into(), "127.0.0.3".into(), "127.0.0.4".into()],
            launch: mission_api::Launch::First,
        }
    }

    #[test]
    fn every_node_learns_its_rank_and_the_hosts_in_rank_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut job: Assignment = serde_json::from_value(serde_json::json!({
            "job_id": uuid::Uuid::new_v4(),
            "mission_id": uuid::Uuid::new_v4(),
            "command": ["python3", "train.py"],
            "cpu_count": 1,
            "memory_amount": 64,
            "gpu_indices": [],
            "files": [],
        }))
        .unwrap();
        job.node = Some(node(1));
        let env: std::collections::HashMap<_, _> =
            environment(&job, &node(1), dir.path()).unwrap().into_iter().collect();
        assert_eq!(env["MISSION_NODE_RANK"], "1");
        assert_eq!(env["MISSION_NNODES"], "3");
        assert_eq!(env["MISSION_HOSTS"], "127.0.0.2,127.0.0.3,127.0.0.4");
        assert_eq!(env["MASTER_ADDR"], "127.0.0.2");
        assert_eq!(env["WORLD_SIZE"], "3");
        assert_eq!(env["NODE_RANK"], "1");
        let hostfile = std::fs::read_to_string(&env["MISSION_HOSTFILE"]).unwrap();
        assert_eq!(hostfile, "127.0.0.2\n127.0.0.3\n127.0.0.4\n");
        // Only rank 0 runs the command of a job launched on the first node.
        assert_eq!(command(&job), ["sleep", "infinity"]);
        job.node = Some(node(0));
        assert_eq!(command(&job), job.command);
    }
}
