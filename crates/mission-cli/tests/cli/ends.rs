//! A warning before the end, and requeue: a job told (Slurm's `--signal`) ahead of its time
//! limit writes a checkpoint, is put back in line when the limit ends it (`--requeue`), and its
//! next attempt resumes from the checkpoint, end to end on a real agent.

use mission_client::{JobStatus, LogStream, RunJob};

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission};

/// `--signal USR1@10 --time 1 --requeue`: the job gets USR1 ten seconds before its limit and
/// writes a checkpoint; the limit ends it and puts it back in line; its second attempt gets the
/// checkpoint as an input, knows it is a restart, and completes.
#[tokio::test]
async fn a_warned_job_checkpoints_is_requeued_at_its_time_limit_and_resumes() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz", TWO_CPUS).await;
    let alice = &server.client;
    let script = r#"if [ -f checkpoint.txt ]; then
  echo "attempt $MISSION_RESTART_COUNT resumed from $(cat checkpoint.txt)"
  exit 0
fi
echo "attempt $MISSION_RESTART_COUNT started at $(date +%s)"
trap 'echo "step 42" > checkpoint.txt; echo "warned at $(date +%s)"' USR1
while true; do sleep 1 & wait $!; done
"#;
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let request = RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        time_limit: Some(1),
        signal: Some("USR1@10".into()),
        requeue: Some(true),
        ..Default::default()
    };
    let job = alice.run_job(shell.mission_id, &request).await.unwrap();
    assert_eq!(job.signal.as_ref().map(ToString::to_string).as_deref(), Some("USR1@10"));
    let done = tokio::time::timeout(std::time::Duration::from_secs(240), alice.wait_for_job(job.job_id))
        .await
        .expect("the job ends within its two attempts")
        .unwrap();
    let out = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}\n{out}");
    assert_eq!(done.attempt, 2, "{done:?}");
    let second = |text: &str, word: &str| -> i64 {
        let line = text.lines().find(|line| line.contains(word)).unwrap_or_else(|| panic!("{word} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let warned_after = second(&out, "warned at") - second(&out, "started at");
    assert!((45..=55).contains(&warned_after), "USR1 came {warned_after} s after the start, not 50:\n{out}");
    assert!(out.contains("attempt 0 started"), "{out}");
    assert!(out.contains("attempt 1 resumed from step 42"), "{out}");
    let requeued = done.history.iter().filter_map(|t| t.detail.as_deref()).any(|d| d.contains("requeued as attempt 2"));
    assert!(requeued, "{:?}", done.history);

    // A bad signal is refused, naming the field.
    let bad = RunJob { signal: Some("KILL@10".into()), ..request };
    let refused = alice.run_job(shell.mission_id, &bad).await.unwrap_err().to_string();
    assert!(refused.contains("signal"), "{refused}");
}
