//! Jobs on several landing zones at once (gangs), end to end: three `mission lz` agents on this
//! machine, each with its own data dir and node address in the loopback range, on one station.

use mission_api::shell::ShellQuery;
use mission_client::{Client, JobResources, JobStatus, Launch, LogStream, ShellEvent, Uuid};
use mission_testkit::TestServer;

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission, wait_until};

/// The node addresses of the three agents, in the order they register.
const ADDRESSES: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];

/// Three agents on the local station, `node0` to `node2`, each advertising its loopback address.
async fn three_nodes(server: &TestServer, admin: &Client) -> Vec<Agent> {
    let mut agents = Vec::new();
    for (n, address) in ADDRESSES.iter().enumerate() {
        let name = format!("node{n}");
        agents.push(
            Agent::start_with(server, admin, local_station(), &name, TWO_CPUS, &["--node-address", address]).await,
        );
    }
    agents
}

/// How many processes on this machine run `sleep 613` (the failing gang's other nodes).
fn sleepers() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline.as_slice() == b"sleep\x00613\x00")
        .count()
}

fn gang(nodes: u32, launch: Option<Launch>) -> JobResources {
    JobResources { cpu_count: Some(1), nodes: Some(nodes), launch, ..Default::default() }
}

/// Every node of a gang runs the command, told its rank, the node count and the nodes'
/// addresses in rank order (as variables and as a hostfile), and what torchrun reads; each
/// node's output is kept apart and its results under its own folder; the job ends once all
/// nodes have, rank 0's exit its own.
#[tokio::test]
async fn every_node_of_a_gang_runs_knowing_its_rank_and_the_others() {
    let (server, admin) = cluster(|_| {}).await;
    let agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let script = "echo \"rank $MISSION_NODE_RANK of $MISSION_NNODES on $MISSION_HOSTS\"\n\
                  echo \"torchrun $MASTER_ADDR $MASTER_PORT $WORLD_SIZE $NODE_RANK\"\n\
                  cat \"$MISSION_HOSTFILE\"\n\
                  # The last node to finish is not rank 0: the job waits for it.\n\
                  [ \"$MISSION_NODE_RANK\" = 2 ] && sleep 2\n\
                  echo \"from rank $MISSION_NODE_RANK\" > whoami.txt\n";
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), gang(3, None)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let placed = done.gang.clone().expect("a gang").lz_ids;
    let mut distinct = placed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "one node per landing zone: {placed:?}");
    assert_eq!(done.lz_id, Some(placed[0]), "the job's landing zone is rank 0's");
    let agent_ids: Vec<Uuid> = agents.iter().map(|agent| agent.lz_id).collect();
    let hosts: Vec<&str> = placed.iter().map(|id| ADDRESSES[agent_ids.iter().position(|a| a == id).unwrap()]).collect();
    for rank in 0..3 {
        let out = alice.node_logs(job.job_id, rank, LogStream::Stdout).await.unwrap();
        assert!(out.contains(&format!("rank {rank} of 3 on {}", hosts.join(","))), "node {rank}: {out}");
        assert!(out.contains(&format!("torchrun {} ", hosts[0])), "node {rank}: {out}");
        assert!(out.contains(&format!(" 3 {rank}\n")), "node {rank}: {out}");
        let err = alice.node_logs(job.job_id, rank, LogStream::Stderr).await.unwrap();
        assert!(out.contains(&format!("{}\n", hosts.join("\n"))), "the hostfile, in rank order: {out}{err}");
    }
    let results = alice.list_job_results(job.job_id).await.unwrap();
    let paths: Vec<String> = results.iter().map(mission_client::FileListing::relative_path).collect();
    for path in ["whoami.txt", "node-1/whoami.txt", "node-2/whoami.txt", "mission-logs/node-2/stdout.log"] {
        assert!(paths.iter().any(|p| p == path), "{path} in {paths:?}");
    }
    let problem = alice.node_logs(job.job_id, 3, LogStream::Stdout).await.unwrap_err().to_string();
    assert!(problem.contains("node") && problem.contains("0 to 2"), "{problem}");
}

/// A gang whose node 1 exits 3 ends `failed` at once, naming the node; the other nodes' programs
/// are stopped within seconds, and their landing zones take new work.
#[tokio::test]
async fn a_gang_fails_as_one_when_a_node_fails() {
    let (server, admin) = cluster(|_| {}).await;
    let _agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let script = "if [ \"$MISSION_NODE_RANK\" = 1 ]; then sleep 1; exit 3; fi\nsleep 613\n";
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), gang(3, None)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Failed, "{done:?}");
    let reason = done.reason.clone().unwrap_or_default();
    assert!(reason.contains("node 1 (landing zone node") && reason.contains("exit status 3"), "{reason}");
    wait_until("the other nodes' programs are gone", || async { sleepers() == 0 }).await;
    // Each landing zone holds two CPUs: a gang of three taking two on each starts only once the
    // failed gang's programs are gone from all of them.
    let next = alice
        .run_job_on_station(shell.mission_id, local_station(), JobResources { cpu_count: Some(2), ..gang(3, None) })
        .await
        .unwrap();
    wait_until("the next gang starts on the freed landing zones", || async {
        alice.get_job(next.job_id).await.unwrap().status >= JobStatus::Running
    })
    .await;
    // Its owner's shell opens on any node, by rank.
    for node in [2, 0] {
        let command = Some("echo \"node $MISSION_NODE_RANK\"".to_owned());
        let query = ShellQuery { command, tty: Some(false), node: Some(node), ..Default::default() };
        let (_input, mut output) = alice.open_shell(next.job_id, &query).await.unwrap();
        let mut said = Vec::new();
        while let Some(event) = output.next().await.unwrap() {
            match event {
                ShellEvent::Stdout(bytes) => said.extend(bytes),
                ShellEvent::Exit(exit) => {
                    assert_eq!(exit.exit_code, Some(0), "{exit:?}");
                    break;
                }
                ShellEvent::Stderr(_) => {}
            }
        }
        assert_eq!(String::from_utf8_lossy(&said), format!("node {node}\n"));
    }
    let query = ShellQuery { command: Some("true".into()), node: Some(3), ..Default::default() };
    let problem = alice.open_shell(next.job_id, &query).await.unwrap_err().to_string();
    assert!(problem.contains("0 to 2"), "{problem}");
    alice.stop_job(next.job_id).await.unwrap();
    let stopped = alice.wait_for_job(next.job_id).await.unwrap();
    assert_eq!(stopped.status, JobStatus::Stopped, "a stop stops every node: {stopped:?}");
}

/// `launch: first` runs the command on rank 0 alone, holding the other nodes for it, and ends
/// as rank 0 does. A gang larger than the station could ever hold is refused at submission.
#[tokio::test]
async fn a_gang_launched_first_runs_on_rank_zero_and_a_gang_too_large_is_refused() {
    let (server, admin) = cluster(|_| {}).await;
    let _agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let script = "echo \"rank $MISSION_NODE_RANK of $MISSION_NNODES\"\n";
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), gang(2, Some(Launch::First))).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(alice.node_logs(job.job_id, 0, LogStream::Stdout).await.unwrap(), "rank 0 of 2\n");
    assert_eq!(alice.node_logs(job.job_id, 1, LogStream::Stdout).await.unwrap(), "", "node 1 only held");

    let refused = alice.run_job_on_station(shell.mission_id, local_station(), gang(4, None)).await.unwrap_err();
    let said = refused.to_string();
    assert!(said.contains("nodes") && said.contains("3 landing zones"), "{said}");
    let refused = alice
        .run_job_on_station(shell.mission_id, local_station(), JobResources { cpu_count: Some(3), ..gang(2, None) })
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("could ever hold"), "{refused}");
}

/// Two 2-node gangs, each node taking a whole landing zone, submitted together on three: one
/// runs while the other waits holding nothing (at no sampled moment does a landing zone that
/// is not the running gang's have room taken), then the other runs; both complete.
#[tokio::test]
async fn two_gangs_on_three_landing_zones_are_never_half_placed() {
    let (server, admin) = cluster(|_| {}).await;
    let _agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let shell = mission(alice, SHELL, &[("run.sh", "sleep 1\n")], &[]).await;
    let whole = JobResources { cpu_count: Some(2), ..gang(2, None) };
    let mut jobs = Vec::new();
    for _ in 0..2 {
        jobs.push(alice.run_job_on_station(shell.mission_id, local_station(), whole).await.unwrap().job_id);
    }
    // What each job is and where, read twice around the landing zones' room so that the
    // samples compared are of one moment.
    let snapshot = || async {
        let mut seen = Vec::new();
        for job_id in &jobs {
            let job = alice.get_job(*job_id).await.unwrap();
            seen.push((job.status, job.gang.map(|gang| gang.lz_ids).unwrap_or_default()));
        }
        seen
    };
    let (mut samples, mut both_seen_waiting_or_running) = (0, false);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let before = snapshot().await;
        let lzs = admin.list_landing_zones(local_station()).await.unwrap();
        if snapshot().await != before {
            continue;
        }
        samples += 1;
        if before.iter().all(|(status, _)| status.is_final()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the gangs did not end: {before:?}");
        let placed: Vec<Uuid> = before
            .iter()
            .filter(|(status, _)| !status.is_final())
            .flat_map(|(_, lz_ids)| lz_ids.iter().copied())
            .collect();
        for (status, lz_ids) in &before {
            assert!(lz_ids.is_empty() || lz_ids.len() == 2, "a gang on all its nodes or none: {before:?}");
            both_seen_waiting_or_running |= *status == JobStatus::Queued && placed.len() == 2;
        }
        assert!(placed.len() <= 2, "one gang at a time fits: {before:?}");
        for lz in &lzs {
            let used = lz.in_use.cpu_count > 0;
            assert!(!used || placed.contains(&lz.lz_id), "{} holds room for no running gang: {before:?}", lz.name);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(both_seen_waiting_or_running, "one gang was seen waiting while the other ran ({samples} samples)");
    for job_id in jobs {
        let done = alice.get_job(job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    }
}

/// An allreduce over MPI's ranks, each saying which node it runs on and when it started.
const ALLREDUCE: &str = r#"
import os, time
started = time.time()
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
seen = comm.gather((os.environ.get("MISSION_NODE_RANK"), started), root=0)
if comm.Get_rank() == 0:
    nodes = sorted(node for node, _ in seen)
    skew = max(t for _, t in seen) - min(t for _, t in seen)
    print(f"sum {total} of {comm.Get_size()} ranks on nodes {','.join(nodes)} skew {skew:.3f}")
"#;

/// A 2-node `mpi4py` allreduce that Debian's `mpirun` starts through `mission lz-exec` (no ssh
/// between hosts): one rank on each node, both started within a second of each other, the sum
/// right. The job is launched on its first node only, as a batch script is.
#[tokio::test]
async fn mpirun_starts_ranks_on_the_other_nodes_through_lz_exec() {
    if std::process::Command::new("mpirun").arg("--version").output().is_err() {
        return mission_testkit::skip_unless_required(
            "MPI",
            "no mpirun (scripts/install-test-deps.sh installs openmpi-bin)",
        );
    }
    let (server, admin) = cluster(|_| {}).await;
    let _agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let script = "mpirun --allow-run-as-root --mca plm_rsh_agent 'mission lz-exec' --hostfile \"$MISSION_HOSTFILE\" \\\n\
                  --map-by node -np 2 --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \\\n\
                  /usr/bin/python3 allreduce.py\n";
    let shell = mission(alice, SHELL, &[("run.sh", script), ("allreduce.py", ALLREDUCE)], &[]).await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), gang(2, Some(Launch::First))).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    let out = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    let err = alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}\n{out}\n{err}");
    let line = out.lines().find(|line| line.starts_with("sum ")).unwrap_or_else(|| panic!("{out}\n{err}"));
    assert!(line.starts_with("sum 3 of 2 ranks on nodes 0,1 skew "), "{line}");
    eprintln!("{line}");
    let skew: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(skew < 1.0, "the ranks started {skew} s apart");
}

/// An agent killed mid-gang: its lease runs out, the gang ends (its other node stopped) and,
/// as it asked with `requeue`, runs again as its next attempt on the landing zones left, to
/// completion.
#[tokio::test]
async fn a_gang_whose_agent_is_killed_is_requeued_and_completes() {
    let (server, admin) = cluster(|config| config.lz_lease = std::time::Duration::from_secs(2)).await;
    let mut agents = three_nodes(&server, &admin).await;
    let alice = &server.client;
    let script =
        "if [ \"$MISSION_RESTART_COUNT\" = 0 ]; then sleep 617; fi\necho \"attempt $MISSION_RESTART_COUNT done\"\n";
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let request = mission_client::RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        nodes: Some(2),
        requeue: Some(true),
        ..Default::default()
    };
    let job = alice.run_job(shell.mission_id, &request).await.unwrap();
    wait_until("the gang runs", || async { alice.get_job(job.job_id).await.unwrap().status == JobStatus::Running })
        .await;
    let placed = alice.get_job(job.job_id).await.unwrap().gang.unwrap().lz_ids;
    let killed = agents.iter().position(|agent| agent.lz_id == placed[1]).unwrap();
    agents[killed].kill_hard().await;
    let done = tokio::time::timeout(std::time::Duration::from_secs(120), alice.wait_for_job(job.job_id))
        .await
        .expect("the gang ends")
        .unwrap();
    assert_eq!((done.status, done.attempt), (JobStatus::Completed, 2), "{done:?}");
    let requeued =
        done.history.iter().filter_map(|t| t.detail.as_deref()).find(|d| d.contains("requeued as attempt 2"));
    let requeued = requeued.unwrap_or_else(|| panic!("{:?}", done.history));
    assert!(requeued.starts_with("node 1: its landing zone went silent"), "{requeued}");
    let again = done.gang.unwrap().lz_ids;
    assert!(!again.contains(&placed[1]), "the second attempt runs where agents are: {again:?}");
    assert_eq!(alice.node_logs(job.job_id, 0, LogStream::Stdout).await.unwrap(), "attempt 1 done\n");
    // Back, the agent kills what the dead one left running.
    agents[killed].restart(&server).await;
}
