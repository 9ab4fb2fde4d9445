"""Jobs, on the server's embedded landing zone, through the package."""

import pytest

import mission

SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"
LOCAL_STATION = "6d697373-696f-4e00-8000-000000000002"


def test_a_mission_runs_and_returns_its_logs_and_results(client, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_text('echo "hello $1"\necho oops >&2\necho out > result.txt\n')
    job = client.create_mission_and_run_job("py-job", src, LOCAL_STATION, mission_type_id=SHELL,
                                            settings={"filename": "run.sh"})
    assert job.status == "queued"
    done = client.wait_for_job(job.job_id, timeout=120)
    assert (done.status, done.exit_code) == ("completed", 0), done
    assert [t.status for t in done.history][0] == "queued"
    assert client.job_logs(job.job_id) == "hello \n"
    assert client.job_logs(job.job_id, stream="stderr") == "oops\n"
    assert client.download_job_results(job.job_id, tmp_path / "results") >= 1
    assert (tmp_path / "results" / "result.txt").read_text() == "out\n"
    assert job.job_id in [j.job_id for j in client.list_jobs(mission_ids=[job.mission_id])]
    with pytest.raises(mission.Invalid):
        client.job_logs(job.job_id, stream="stdin")


def test_a_wait_times_out_and_a_stop_ends_the_job(client, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_text("exec sleep 600\n")
    m = client.create_and_upload_mission("py-sleep", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    job = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64, time_limit=5)
    assert (job.cpu_count, job.memory_amount, job.time_limit) == (1, 64, 5)
    with pytest.raises(TimeoutError):
        client.wait_for_job(job.job_id, timeout=0.5)
    client.stop_job(job.job_id)
    assert client.wait_for_job(job.job_id, timeout=60).status == "stopped"
    with pytest.raises(mission.Invalid) as invalid:
        client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=0)
    assert "cpu_count" in str(invalid.value)
