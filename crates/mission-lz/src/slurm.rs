//! What the agent reads from Slurm, as plain functions over its commands' output: the nodes
//! (`sinfo`), from which a Slurm landing zone advertises its capacity, and the jobs (`squeue`),
//! with their states and pending reasons. The output formats are the ones these functions are
//! written for ([`SINFO_FORMAT`], [`SQUEUE_FORMAT`]); the tests read output captured from a real
//! Slurm (`fixtures/slurm-22.05`).

use mission_api::Resources;
use uuid::Uuid;

/// `sinfo -h -N -o` with this: node, CPUs, memory (MB), generic resources, state.
pub const SINFO_FORMAT: &str = "%N|%c|%m|%G|%T";

/// `squeue -h -o` with this: Slurm's job id, job name, state, reason.
pub const SQUEUE_FORMAT: &str = "%i|%j|%T|%r";

/// The prefix of the Slurm job name of each mission job (`mission-{job id}`), by which a
/// restarted agent finds its jobs again.
pub const JOB_NAME_PREFIX: &str = "mission-";

/// A line Slurm printed that does not have the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read Slurm's line {line:?}: {why}")]
pub struct ParseError {
    /// The line.
    pub line: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory in megabytes.
    pub memory_mb: u64,
    /// GPUs among its generic resources.
    pub gpus: u32,
    /// Slurm's state (`idle`, `mixed`, `allocated`, `down`, `drained`, …).
    pub state: String,
}

/// The nodes in `sinfo -h -N -o "%N|%c|%m|%G|%T"` output (a node in several partitions is listed
/// once).
pub fn parse_nodes(output: &str) -> Result<Vec<Node>, ParseError> {
    let mut nodes: Vec<Node> = Vec::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let fail = |why| ParseError { line: line.to_owned(), why };
        let fields: Vec<&str> = line.trim().split('|').collect();
        let [name, cpus, memory, gres, state] = fields[..] else { return Err(fail("expected 5 fields")) };
        let node = Node {
            name: name.to_owned(),
            cpus: cpus.parse().map_err(|_| fail("CPUs are not a number"))?,
            memory_mb: memory.parse().map_err(|_| fail("memory is not a number"))?,
            gpus: gpus_in(gres).ok_or_else(|| fail("unreadable generic resources"))?,
            state: state.to_owned(),
        };
        if !nodes.iter().any(|n| n.name == node.name) {
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// The GPUs in a `%G` field: `(null)`, `gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8`, ….
fn gpus_in(gres: &str) -> Option<u32> {
    if gres == "(null)" || gres.is_empty() {
        return Some(0);
    }
    let mut gpus = 0;
    for item in gres.split(',') {
        let item = item.split('(').next()?;
        let mut parts = item.split(':');
        if parts.next()? != "gpu" {
            continue;
        }
        gpus += parts.next_back()?.parse::<u32>().ok()?;
    }
    Some(gpus)
}

/// What a Slurm landing zone offers: its largest node that takes jobs (a job never spans nodes).
pub fn capacity(nodes: &[Node]) -> Option<Resources> {
    nodes
        .iter()
        .filter(|n| !["down", "drained", "draining", "fail", "inval"].iter().any(|s| n.state.starts_with(s)))
        .map(|n| Resources { cpu_count: n.cpus, memory_amount: n.memory_mb, gpu_count: n.gpus })
        .max_by_key(|r| (r.gpu_count, r.cpu_count, r.memory_amount))
}

/// A job's state in Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmState {
    /// Waiting in the queue.
    Pending,
    /// Running.
    Running,
    /// Ending (its processes being cleaned up).
    Completing,
    /// Ended with exit code 0.
    Completed,
    /// Ended with another exit code.
    Failed,
    /// Cancelled (`scancel`).
    Cancelled,
    /// Ran past its time limit.
    Timeout,
    /// Ran out of memory.
    OutOfMemory,
    /// Its node failed.
    NodeFail,
    /// A state this agent does not act on (`SUSPENDED`, `PREEMPTED`, …).
    Other(String),
}

impl SlurmState {
    fn parse(state: &str) -> Self {
        match state {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "COMPLETING" => Self::Completing,
            "COMPLETED" => Self::Completed,
            "FAILED" => Self::Failed,
            "CANCELLED" => Self::Cancelled,
            "TIMEOUT" => Self::Timeout,
            "OUT_OF_MEMORY" => Self::OutOfMemory,
            "NODE_FAIL" => Self::NodeFail,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the job has ended.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Cancelled | Self::Timeout | Self::OutOfMemory | Self::NodeFail
        )
    }
}

/// A job in `squeue -h -o "%i|%j|%T|%r"` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    /// Slurm's id.
    pub slurm_id: String,
    /// The mission job it runs, when its name is ours.
    pub job_id: Option<Uuid>,
    /// Its state.
    pub state: SlurmState,
    /// Why it waits (`Resources`, `Priority`, `QOSMaxJobsPerUserLimit`, …), or why it ended
    /// (`NonZeroExitCode`); `None` for Slurm's `None`.
    pub reason: Option<String>,
}

/// The jobs in `squeue -h -o "%i|%j|%T|%r"` output.
pub fn parse_queue(output: &str) -> Result<Vec<QueuedJob>, ParseError> {
    output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.trim().splitn(4, '|').collect();
            let [slurm_id, name, state, reason] = fields[..] else {
                return Err(ParseError { line: line.to_owned(), why: "expected 4 fields" });
            };
            Ok(QueuedJob {
                slurm_id: slurm_id.to_owned(),
                job_id: name.strip_prefix(JOB_NAME_PREFIX).and_then(|id| Uuid::parse_str(id).ok()),
                state: SlurmState::parse(state),
                reason: (reason != "None").then(|| reason.to_owned()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/slurm-22.05");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
    }

    #[test]
    fn the_captured_node_is_read_and_offered_whole() {
        let nodes = parse_nodes(&fixture("sinfo-nodes.txt")).unwrap();
        assert_eq!(nodes, [Node { name: "vm".into(), cpus: 2, memory_mb: 23593, gpus: 0, state: "idle".into() }]);
        assert_eq!(capacity(&nodes), Some(Resources { cpu_count: 2, memory_amount: 23593, gpu_count: 0 }));
    }

    #[test]
    fn gpus_are_counted_from_generic_resources_and_down_nodes_offer_nothing() {
        let output = "a|64|512000|gpu:a100:4(S:0-1)|mixed\nb|128|1024000|(null)|idle\n\
                      c|32|256000|gpu:2,shard:8|down*\na|64|512000|gpu:a100:4(S:0-1)|mixed\n";
        let nodes = parse_nodes(output).unwrap();
        assert_eq!(nodes.iter().map(|n| (n.name.as_str(), n.gpus)).collect::<Vec<_>>(), [("a", 4), ("b", 0), ("c", 2)]);
        assert_eq!(capacity(&nodes), Some(Resources { cpu_count: 64, memory_amount: 512000, gpu_count: 4 }));
        assert!(parse_nodes("a|x|1|(null)|idle").is_err());
        assert!(parse_nodes("a|1|1|gpu:many|idle").is_err());
    }

    #[test]
    fn pending_reasons_and_final_states_are_read_from_squeue() {
        let pending = parse_queue(&fixture("squeue-pending.txt")).unwrap();
        let read: Vec<_> =
            pending.iter().map(|j| (j.slurm_id.as_str(), j.state.clone(), j.reason.as_deref())).collect();
        assert_eq!(
            read,
            [
                ("3", SlurmState::Pending, Some("Resources")),
                ("4", SlurmState::Pending, Some("Priority")),
                ("2", SlurmState::Running, None),
            ]
        );
        let all = parse_queue(&fixture("squeue-all.txt")).unwrap();
        let states: Vec<_> = all.iter().map(|j| (j.slurm_id.as_str(), j.state.clone())).collect();
        assert_eq!(
            states,
            [
                ("2", SlurmState::Cancelled),
                ("4", SlurmState::Cancelled),
                ("1", SlurmState::Completed),
                ("3", SlurmState::Completed),
                ("5", SlurmState::Failed),
            ]
        );
        assert!(all.iter().all(|j| j.state.is_final()));
        assert_eq!(all[4].reason.as_deref(), Some("NonZeroExitCode"));
    }

    #[test]
    fn our_jobs_are_known_by_their_names() {
        let id = Uuid::new_v4();
        let output = format!("17|{JOB_NAME_PREFIX}{id}|RUNNING|None\n18|someone-else|PENDING|QOSMaxJobsPerUserLimit\n");
        let jobs = parse_queue(&output).unwrap();
        assert_eq!(jobs[0].job_id, Some(id));
        assert_eq!((jobs[1].job_id, jobs[1].reason.as_deref()), (None, Some("QOSMaxJobsPerUserLimit")));
        assert!(parse_queue("17|only three|RUNNING").is_err());
    }
}
