//! A landing zone's part of a job on several (a gang): what its process is told of the others,
//! how it starts processes on them, and what runs on a node that only holds room for rank 0 to
//! start processes on.
//!
//! Every node's process gets its rank and the nodes' addresses in the variables MPI launchers,
//! `torchrun` and scripts read ([`prepare`]), and a hostfile with one address per line, in the
//! job's log folder of its work dir (never uploaded as a result).
//!
//! MPI's launchers start ranks on other hosts with ssh, which sites rarely allow between
//! compute hosts; a gang's processes use `mission lz-exec HOST COMMAND…` instead, which asks
//! this agent, over a socket in the same folder (only the job's user can reach it: the work dir
//! is theirs alone), to open a shell in HOST's part of the job through the server
//! ([`serve_exec`]): the command runs there as the job's user, in its sandbox, cgroup and work
//! dir, its output and exit code coming back as ssh's would.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mission_api::JOB_LOGS_FOLDER;
use mission_api::lz::{Assignment, GangNode};
use mission_api::shell::ShellQuery;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

use crate::client::LzClient;

/// The variable naming the socket `mission lz-exec` asks its agent at.
pub const EXEC_SOCKET_VARIABLE: &str = "MISSION_EXEC_SOCKET";

/// The longest request line `mission lz-exec` sends its agent.
const MAX_REQUEST_BYTES: u64 = 16 * 1024;

/// The port `torchrun`'s rendezvous and other launchers meet on at rank 0's host: one of
/// 10,000 from 20000, picked by the job's id, so that two gangs sharing hosts rarely meet.
pub(crate) fn master_port(job: &Assignment) -> u16 {
    20_000 + (job.job_id.as_u128() % 10_000) as u16
}

/// Where a node's hostfile is written in its work dir `dir`.
pub fn hostfile(dir: &Path) -> PathBuf {
    dir.join(JOB_LOGS_FOLDER).join("hostfile")
}

/// A node's part of a gang, made ready in its work dir before its program starts.
pub struct Prepared {
    /// The variables its program gets.
    pub env: Vec<(&'static str, String)>,
    /// The socket `mission lz-exec` connects to, for [`serve_exec`].
    pub exec: UnixListener,
}

/// Writes the hostfile of `node` into the work dir `dir` (a file the job's user may read, not
/// follow a link to write), opens its exec socket there, and answers the variables its process
/// gets: `MISSION_NODE_RANK`, `MISSION_NNODES`, `MISSION_HOSTS`, `MISSION_HOSTFILE`,
/// `MISSION_EXEC_SOCKET`, and `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and `NODE_RANK` for
/// `torchrun`.
pub fn prepare(job: &Assignment, node: &GangNode, dir: &Path) -> std::io::Result<Prepared> {
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
    let socket = folder.join("exec.sock");
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let exec = UnixListener::bind(&socket)?;
    // The job's user connects (a socket needs write permission); the work dir keeps others out.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))?;
    let master = node.hosts.first().cloned().unwrap_or_default();
    let env = vec![
        ("MISSION_NODE_RANK", node.rank.to_string()),
        ("MISSION_NNODES", node.nodes.to_string()),
        ("MISSION_HOSTS", node.hosts.join(",")),
        ("MISSION_HOSTFILE", path.display().to_string()),
        (EXEC_SOCKET_VARIABLE, socket.display().to_string()),
        ("MASTER_ADDR", master),
        ("MASTER_PORT", master_port(job).to_string()),
        ("WORLD_SIZE", node.nodes.to_string()),
        ("NODE_RANK", node.rank.to_string()),
    ];
    Ok(Prepared { env, exec })
}

/// What `mission lz-exec` asks its agent, as one line of JSON.
#[derive(Debug, Serialize, Deserialize)]
struct ExecRequest {
    /// The node, by rank.
    node: u32,
    /// The command line, run by `sh -c` in that node's work dir.
    command: String,
}

/// Takes the requests of a node's program on its exec socket until dropped (as the job's part
/// ends here).
pub struct ExecGate(tokio::task::AbortHandle);

impl Drop for ExecGate {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `job_id`'s exec socket: each connection sends one request line (JSON: the node and
/// the command), and the agent answers `ok` and joins the connection to the shell it opened
/// through the server (the caller then speaks the shell's WebSocket), or answers `error: …` and
/// closes it.
pub fn serve_exec(listener: UnixListener, client: Arc<LzClient>, job_id: Uuid) -> std::io::Result<ExecGate> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(listener)?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(exec_one(stream, client.clone(), job_id));
        }
    });
    Ok(ExecGate(task.abort_handle()))
}

/// Answers one `mission lz-exec`.
async fn exec_one(stream: tokio::net::UnixStream, client: Arc<LzClient>, job_id: Uuid) {
    let mut stream = tokio::io::BufReader::new(stream);
    let mut line = Vec::new();
    let read = (&mut stream).take(MAX_REQUEST_BYTES).read_until(b'\n', &mut line).await;
    let request: Result<ExecRequest, String> = match read {
        Ok(_) => serde_json::from_slice(&line).map_err(|e| format!("a malformed request: {e}")),
        Err(e) => Err(e.to_string()),
    };
    let opened = match request {
        Ok(request) => {
            let query = ShellQuery {
                command: Some(request.command),
                tty: Some(false),
                node: Some(request.node),
                ..ShellQuery::default()
            };
            client.node_shell(job_id, &query).await.map_err(|e| e.to_string())
        }
        Err(e) => Err(e),
    };
    match opened {
        Ok(upgraded) => {
            if stream.get_mut().write_all(b"ok\n").await.is_err() {
                return;
            }
            // The caller waits for the answer before it speaks: nothing of it is buffered.
            let mut local = stream.into_inner();
            let mut remote = upgraded;
            let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
        }
        Err(e) => {
            let _ = stream.get_mut().write_all(format!("error: {e}\n").as_bytes()).await;
        }
    }
}

/// `mission lz-exec`'s side: asks the agent at `socket` to run `command` on node `node` of the
/// job; answers the connection, which then carries the shell's WebSocket, or why it could not.
pub async fn request_exec(socket: &Path, node: u32, command: String) -> Result<tokio::net::UnixStream, String> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("the landing zone's agent at {}: {e}", socket.display()))?;
    let mut line = serde_json::to_vec(&ExecRequest { node, command }).expect("serializable");
    line.push(b'\n');
    stream.write_all(&line).await.map_err(|e| format!("asking the agent: {e}"))?;
    // Read a byte at a time: what follows the answer is the shell's, not this reader's.
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while answer.len() < MAX_REQUEST_BYTES as usize {
        match stream.read(&mut byte).await {
            Ok(0) | Err(_) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => answer.push(byte[0]),
        }
    }
    match String::from_utf8_lossy(&answer).as_ref() {
        "ok" => Ok(stream),
        "" => Err("the agent closed the connection without an answer".into()),
        said => Err(said.strip_prefix("error: ").unwrap_or(said).to_owned()),
    }
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
            prepare(&job, &node(1), dir.path()).unwrap().env.into_iter().collect();
        assert!(std::path::Path::new(&env["MISSION_EXEC_SOCKET"]).exists());
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
