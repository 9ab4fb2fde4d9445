//! Reclaiming borrowed room end to end: a real `mission lz` agent, real jobs of two projects.

use std::time::Duration;

use mission_client::{JobStatus, LogStream, ProjectLimits, ResourceAmounts, RunJob, UpdateStation, Uuid};

use super::fair_share::Teams;
use super::jobs::{SHELL, local_station, mission, wait_until};

/// Says when it got `SIGTERM` and goes on: only the `SIGKILL` after the grace period ends it
/// early. Run in full it takes about three seconds.
const STUBBORN: &str =
    "trap 'echo got TERM' TERM\necho start\nfor i in $(seq 1 30); do sleep 0.1; done\necho ran to the end\n";

/// Bio (nominal 1 CPU, borrowing allowed) runs two jobs on a 2-CPU station; astro (nominal 1)
/// then submits one. Bio's newer job is sent `SIGTERM`, killed after the 1 s grace, put back in
/// line and run again once astro's job is done; nothing of bio's within its nominal is touched.
/// Where the station turns reclaiming off, astro's job just waits.
#[tokio::test]
async fn a_project_below_its_nominal_gets_borrowed_room_back_and_the_borrowed_job_runs_again() {
    let teams = Teams::start(|config| config.reclaim_grace = Duration::from_secs(1)).await;
    let Teams { root, bob, bio, astro, .. } = &teams;
    let (alice, bio, astro) = (&teams.server.client, *bio, *astro);
    let one_cpu =
        ProjectLimits { nominal: Some(ResourceAmounts { cpus: Some(1), ..Default::default() }), ..Default::default() };
    for project_id in [bio, astro] {
        root.set_project_limits(project_id, local_station(), &one_cpu).await.unwrap();
    }
    let station = |reclaim| UpdateStation { reclaim: Some(reclaim), ..Default::default() };
    root.update_station(local_station(), &station(false)).await.unwrap();

    let (theirs, ours) = (
        mission(alice, SHELL, &[("run.sh", STUBBORN)], &[]).await,
        mission(bob, SHELL, &[("run.sh", "echo done\n")], &[]).await,
    );
    let run = |project_id: Uuid| RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        project_id: Some(project_id),
        ..Default::default()
    };
    let nominal = alice.run_job(theirs.mission_id, &run(bio)).await.unwrap().job_id;
    let borrowed = alice.run_job(theirs.mission_id, &run(bio)).await.unwrap().job_id;
    for job_id in [nominal, borrowed] {
        wait_until("bio's jobs run", || async { alice.get_job(job_id).await.unwrap().status == JobStatus::Running })
            .await;
    }

    // Not reclaiming, the station keeps astro's job waiting for room.
    let astros = bob.run_job(ours.mission_id, &run(astro)).await.unwrap().job_id;
    wait_until("astro's job says it waits for room", || async {
        bob.get_job(astros).await.unwrap().pending_reason.is_some_and(|p| p.detail.contains("to be free"))
    })
    .await;
    assert_eq!(alice.get_job(borrowed).await.unwrap().status, JobStatus::Running);

    // Reclaiming: bio's borrowed job makes way, astro's runs, and bio's runs again after.
    let now = root.update_station(local_station(), &station(true)).await.unwrap();
    assert!(now.reclaim);
    wait_until("astro's job is done", || async { bob.get_job(astros).await.unwrap().status == JobStatus::Completed })
        .await;
    wait_until("bio's jobs are done", || async {
        let statuses = [alice.get_job(nominal).await.unwrap().status, alice.get_job(borrowed).await.unwrap().status];
        statuses.iter().all(|s| s.is_final())
    })
    .await;
    let (first, again) = (alice.get_job(nominal).await.unwrap(), alice.get_job(borrowed).await.unwrap());
    assert_eq!((first.status, again.status), (JobStatus::Completed, JobStatus::Completed));
    assert_eq!(again.attempt, 1, "a reclaim is not a failed attempt");
    let astro_done = bob.get_job(astros).await.unwrap().finished_at.unwrap();
    assert!(again.started_at.is_some_and(|at| at >= astro_done), "bio's borrowed job ran again after astro's");

    // Its history says why it queued again; its output shows SIGTERM, then the kill.
    let requeued =
        again.history.iter().find(|t| t.status == JobStatus::Queued && t.detail.is_some()).expect("requeued");
    let told = requeued.detail.as_deref().unwrap();
    assert!(told.starts_with("its room was reclaimed for project astro, below its nominal on station local"), "{told}");
    let out = alice.job_logs(borrowed, LogStream::Stdout).await.unwrap();
    assert_eq!(
        out, "start\ngot TERM\nstart\nran to the end\n",
        "SIGTERM, then SIGKILL after the grace; then a full run"
    );
    assert_eq!(alice.job_logs(nominal, LogStream::Stdout).await.unwrap(), "start\nran to the end\n");
}
