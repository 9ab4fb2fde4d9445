"""Jobs, on the server's embedded landing zone, through the package."""

import datetime
import os
import time
import uuid

import pytest

import mission

SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"
LOCAL_STATION = "6d697373-696f-4e00-8000-000000000002"


def script_folder(tmp_path, script):
    """A mission folder holding `run.sh` with `script`."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_text(script)
    return src


def run_script(client, tmp_path, name, script):
    """A job of a new shell mission `name` running `script`, on the embedded landing zone."""
    return client.create_mission_and_run_job(name, script_folder(tmp_path, script), LOCAL_STATION,
                                             mission_type_id=SHELL, settings={"filename": "run.sh"})


def test_a_mission_runs_and_returns_its_logs_and_results(client, tmp_path):
    job = run_script(client, tmp_path, "py-job", 'echo "hello $1"\necho oops >&2\necho out > result.txt\n')
    assert job.status == "queued"
    done = client.wait_for_job(job.job_id, timeout=120)
    assert (done.status, done.exit_code) == ("completed", 0), done
    assert [t.status for t in done.history][0] == "queued"
    assert client.job_logs(job.job_id) == "hello \n"
    assert client.job_logs(job.job_id, stream="stderr") == "oops\n"
    assert client.download_job_results(job.job_id, tmp_path / "results").transferred >= 1
    assert (tmp_path / "results" / "result.txt").read_text() == "out\n"
    assert job.job_id in [j.job_id for j in client.list_jobs(mission_ids=[job.mission_id])]
    with pytest.raises(mission.Invalid):
        client.job_logs(job.job_id, stream="stdin")


def test_labels_find_a_job_and_change(client, tmp_path):
    first = run_script(client, tmp_path, "py-labels", "echo ran\n")
    labelled = client.run_job_on_station(first.mission_id, LOCAL_STATION, labels={"sweep": "lr", "seed": "3"})
    assert labelled.labels == {"sweep": "lr", "seed": "3"}
    assert first.labels == {}
    found = client.list_jobs(labels={"sweep": "lr", "seed": "3"})
    assert [j.job_id for j in found] == [labelled.job_id]
    assert client.list_jobs(labels={"sweep": "other"}) == []
    changed = client.set_job_labels(labelled.job_id, {"best": "yes"})
    assert changed.labels == {"best": "yes"}
    assert [j.job_id for j in client.list_jobs(labels={"best": "yes"})] == [labelled.job_id]
    with pytest.raises(mission.Invalid, match="labels.bad key"):
        client.set_job_labels(labelled.job_id, {"bad key": "x"})


def test_a_log_cap_keeps_the_head_and_the_tail(client, tmp_path):
    first = run_script(client, tmp_path, "py-log-cap", "seq 1 5000\n")
    job = client.run_job_on_station(first.mission_id, LOCAL_STATION, log_cap=2048)
    assert (job.log_cap, job.log_truncated) == (2048, False)
    done = client.wait_for_job(job.job_id, timeout=120)
    assert done.log_truncated, done
    output = "".join(f"{i}\n" for i in range(1, 5001))
    head, marker, tail = client.job_logs(job.job_id).partition("[mission: the log reached its cap of 2048 bytes")
    assert (head, tail[-512:]) == (output[:2048] + "\n", output[-512:])
    assert marker and not client.get_job(first.job_id).log_truncated
    with pytest.raises(mission.Invalid, match="log_cap"):
        client.run_job_on_station(first.mission_id, LOCAL_STATION, log_cap=10)


def test_a_wait_times_out_and_a_stop_ends_the_job(client, tmp_path):
    src = script_folder(tmp_path, "exec sleep 600\n")
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


def test_a_command_runs_inside_a_running_job(client, tmp_path):
    src = script_folder(tmp_path, "echo ready > marker.txt\nexec sleep 600\n")
    m = client.create_and_upload_mission("py-shell", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    job = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64, time_limit=5)
    deadline = time.monotonic() + 60
    while client.get_job(job.job_id).status != "running":
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(0.2)
    run = client.run_in_job(job.job_id, 'cat marker.txt; tr a-z A-Z; echo "$JOB_ID" >&2; exit 3', input=b"quiet\n")
    assert isinstance(run, mission.ShellRun)
    assert (run.exit_code, run.stdout, run.stderr.strip()) == (3, "ready\nQUIET\n", job.job_id), run
    client.stop_job(job.job_id)
    assert client.wait_for_job(job.job_id, timeout=60).status == "stopped"
    with pytest.raises(mission.Conflict) as ended:
        client.run_in_job(job.job_id, "true")
    assert "not running" in str(ended.value)


def test_a_follow_yields_output_as_it_is_written_and_ends_with_the_job(client, tmp_path):
    job = run_script(client, tmp_path, "py-follow", "for i in 1 2 3; do echo line $i; sleep 0.3; done\necho err >&2\nexit 3\n")
    follow = client.follow_job_logs(job.job_id)
    assert follow.status is None
    assert "".join(follow) == "line 1\nline 2\nline 3\n"
    assert follow.status == "failed"
    assert list(follow) == [], "an ended follow stays ended"
    assert "".join(client.follow_job_logs(job.job_id, stream="stderr")) == "err\n"
    assert client.get_job(job.job_id).exit_code == 3
    names = sorted(f.relative_path for f in client.list_job_results(job.job_id))
    assert names == ["mission-logs/stderr.log", "mission-logs/stdout.log"]


CHILD = """
import os, sys, time
import mission
client = mission.Client(os.environ["URL"], access_token=os.environ["TOKEN"])
print("waiting", flush=True)
started = time.monotonic()
try:
    client.wait_for_job(os.environ["JOB"])
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.2f}", flush=True)
    sys.exit(0)
print("the wait ended by itself", flush=True)
sys.exit(1)
"""


def test_ctrl_c_interrupts_a_wait_promptly(client, server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    job = run_script(client, tmp_path, "py-ctrl-c", "exec sleep 600\n")
    url, token = server
    # A suite started in the background (`cmd &` without job control) ignores SIGINT, and an
    # ignored SIGINT is inherited: the child gets the default back, as a terminal's process has.
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "URL": url, "TOKEN": token, "JOB": job.job_id},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline() == "waiting\n"
        time.sleep(1)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=10) == 0
        said = child.stdout.read()
        assert said.startswith("interrupted after "), said
    finally:
        child.kill()
        child.stdout.close()
        client.stop_job(job.job_id)


def test_calls_from_other_threads_go_on_while_one_waits(client, tmp_path):
    import threading
    import time

    job = run_script(client, tmp_path, "py-threads", "sleep 5\n")
    waited = {}
    waiter = threading.Thread(target=lambda: waited.update(job=client.wait_for_job(job.job_id, timeout=60)))
    waiter.start()
    time.sleep(0.2)
    calls = 0
    while waiter.is_alive() and calls < 20:
        client.get_job(job.job_id)
        calls += 1
    still_waiting = waiter.is_alive()
    waiter.join(timeout=60)
    assert calls == 20 and still_waiting, f"only {calls} calls went through while another thread waited"
    assert waited["job"].status == "completed"


def test_a_finished_job_says_what_it_used_and_the_summary_counts_it(client, tmp_path):
    before = datetime.datetime.now(datetime.timezone.utc)
    job = run_script(client, tmp_path, "py-usage", "echo used\n")
    done = client.wait_for_job(job.job_id, timeout=120)
    assert isinstance(done.usage, mission.JobUsage), done
    assert done.usage.wall_time >= 0
    # What it cost, reckoned by the station's settings as it ended (no prices by default).
    assert done.usage.energy_kwh is not None and done.usage.energy_kwh >= 0, done.usage
    assert done.usage.co2e_g is not None and done.usage.cost is None, done.usage
    # Each part says where it came from: no GPU, so the GPUs' is the model's (0 of them).
    parts = done.usage.energy_parts
    assert isinstance(parts, mission.EnergyParts) and isinstance(parts.cpu, mission.EnergyPart), done.usage
    assert parts.cpu.source in ("model", "rapl") and (parts.gpu.wh, parts.gpu.source) == (0.0, "model"), parts
    summary = client.job_usage(mission_ids=[job.mission_id], since=before)
    assert isinstance(summary, mission.UsageSummary)
    assert summary.jobs == 1
    assert client.job_usage(since=datetime.datetime.now() + datetime.timedelta(days=1)).jobs == 0
    with pytest.raises(mission.Invalid, match="UUID"):
        client.job_usage(mission_ids=["not-an-id"])


def test_a_job_waits_for_its_dependencies_and_says_why(client, tmp_path):
    src = script_folder(tmp_path, "exec sleep 600\n")
    m = client.create_and_upload_mission("py-deps", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    first = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64)
    waiting = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64,
                                        after_ok=[first.job_id])
    assert waiting.after_ok == [first.job_id] and waiting.after_any == []
    reason = client.get_job(waiting.job_id).pending_reason
    assert isinstance(reason, mission.PendingReason)
    assert (reason.kind, reason.detail) == ("dependency", f"waiting for job {first.job_id} to complete")
    client.stop_job(first.job_id)
    failed = client.wait_for_job(waiting.job_id, timeout=60)
    assert (failed.status, failed.pending_reason) == ("failed", None)
    assert failed.reason == f"the job it waited for, {first.job_id}, ended stopped"
    with pytest.raises(mission.Invalid, match="after_any"):
        client.run_job_on_station(m.mission_id, LOCAL_STATION, after_any=[str(uuid.uuid4())])


def test_a_failing_job_is_retried_and_failed_jobs_rerun(client, tmp_path):
    src = script_folder(tmp_path, "echo attempt >&2\nexit 3\n")
    default = mission.RetryPolicy(2, on=["exit_code"])
    m = client.create_and_upload_mission("py-retry", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    assert client.update_mission(m.mission_id, retry=default)
    assert client.get_mission_by_id(m.mission_id).retry == default
    job = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64)
    assert (job.retry, job.attempt, job.rerun_of) == (default, 1, None)
    done = client.wait_for_job(job.job_id, timeout=60)
    assert (done.status, done.attempt, done.exit_code) == ("failed", 2, 3)
    assert client.job_logs(job.job_id, "stderr") == "attempt\nattempt\n"
    retried = [t.detail for t in done.history if t.status == "queued" and t.detail]
    assert retried == ["attempt 1 of 2 failed (exit status 3); attempt 2"]
    # The run's own policy replaces the mission's.
    once = client.run_job_on_station(m.mission_id, LOCAL_STATION, cpu_count=1, memory_amount=64,
                                     retry=mission.RetryPolicy(1))
    assert client.wait_for_job(once.job_id, timeout=60).attempt == 1
    reruns = client.rerun_failed_jobs(m.mission_id)
    assert [j.rerun_of for j in reruns] == [job.job_id, once.job_id]
    again = client.rerun_job(job.job_id)
    assert again.rerun_of == job.job_id and again.status == "queued"
    with pytest.raises(mission.Invalid, match="retry.memory_factor"):
        client.run_job_on_station(m.mission_id, LOCAL_STATION, retry=mission.RetryPolicy(2, memory_factor=0.5))
    for j in [*reruns, again]:
        client.wait_for_job(j.job_id, timeout=60)


def test_a_gang_asks_for_nodes_and_one_larger_than_the_station_is_refused(client, tmp_path):
    mission_ = client.create_and_upload_mission("py-gang", script_folder(tmp_path, 'echo "rank $MISSION_NODE_RANK"\n'),
                                                mission_type_id=SHELL, settings={"filename": "run.sh"})
    # The embedded landing zone is the station's only one: two nodes are more than it could hold.
    with pytest.raises(mission.Invalid, match="nodes.*has 1 landing zones"):
        client.run_job_on_station(mission_.mission_id, LOCAL_STATION, cpu_count=1, nodes=2, launch="first")
    job = client.run_job_on_station(mission_.mission_id, LOCAL_STATION, cpu_count=1, nodes=1)
    assert job.gang is None
    done = client.wait_for_job(job.job_id, timeout=120)
    assert done.status == "completed", done
    assert client.job_logs(job.job_id, node=0) == "rank \n", "a job of one node is no gang"
    with pytest.raises(mission.Invalid, match="node"):
        client.job_logs(job.job_id, node=1)


def test_a_job_array_runs_one_job_per_index(client, tmp_path):
    src = script_folder(tmp_path, 'echo "$MISSION_ARRAY_INDEX $*"\n')
    m = client.create_and_upload_mission("py-array", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    array = client.run_job_array(m.mission_id, LOCAL_STATION, range="1-10", arguments=["--seed", "{}"],
                                 cpu_count=1, memory_amount=32)
    assert isinstance(array, mission.JobArray) and array.size == 10
    jobs = client.list_jobs(array_ids=[array.array_id], items=50)
    assert sorted(j.array_index for j in jobs) == list(range(1, 11))
    for job in jobs:
        client.wait_for_job(job.job_id, timeout=60)
    done = client.get_job_array(array.array_id)
    assert (done.completed, done.queued, done.running) == (10, 0, 0)
    assert client.job_logs(jobs[0].job_id) == f"{jobs[0].array_index} --seed {jobs[0].array_index}\n"
    sets = client.run_job_array(m.mission_id, LOCAL_STATION, argument_sets=[["a"], ["b"]], cpu_count=1)
    assert client.stop_job_array(sets.array_id).size == 2
    with pytest.raises(mission.Invalid, match="range"):
        client.run_job_array(m.mission_id, LOCAL_STATION, range="9-1")


def test_a_job_runs_in_an_imported_image(client, tmp_path):
    archive = os.environ.get("MISSION_TEST_IMAGE")
    if archive is None:
        assert "MISSION_REQUIRE_PODMAN" not in os.environ, "MISSION_TEST_IMAGE names no image archive"
        pytest.skip("MISSION_TEST_IMAGE names no image archive (scripts/install-test-deps.sh builds one)")
    name = f"py-debian-{uuid.uuid4().hex[:8]}"
    image = client.import_image(archive, name)
    assert (image.name, image.format, image.visibility) == (name, "oci", "private")
    assert image.digest.startswith("sha256:") and image.size == os.path.getsize(archive)
    assert image in client.list_images()
    assert client.get_image(image.image_id) == image

    m = client.create_mission("py-in-image", mission_type_id=SHELL, settings={"filename": "run.sh"}, image=name)
    assert m.image == name
    client.upload(m.mission_id, script_folder(tmp_path, "cat /etc/debian_version\n") / "run.sh")
    job = client.run_job_on_station(m.mission_id, LOCAL_STATION, memory_amount=256)
    assert job.image == mission.JobImage(image_id=image.image_id, digest=image.digest)
    done = client.wait_for_job(job.job_id, timeout=120)
    assert done.status == "completed", (done, client.job_logs(job.job_id, stream="stderr"))
    assert client.job_logs(job.job_id).startswith("12.")
    with pytest.raises(mission.Invalid, match="no image"):
        client.run_job_on_station(m.mission_id, LOCAL_STATION, image="no-such-image")
    assert client.delete_image(image.image_id)
    assert not client.delete_image(image.image_id)


def test_a_registry_image_is_registered_pinned_by_digest(client):
    digest = "sha256:" + "ab" * 32
    reference = f"registry.example.org/lab/solver:2.1@{digest}"
    image = client.register_image_reference(reference, f"py-remote-{uuid.uuid4().hex[:8]}")
    assert (image.format, image.digest, image.reference, image.size) == ("registry", digest, reference, 0)
    with pytest.raises(mission.Invalid, match="needs @sha256"):
        client.register_image_reference("registry.example.org/lab/solver:2.1", "py-tagged")
    assert client.delete_image(image.image_id)


def test_a_web_session_opens_at_its_url_for_its_owner(client, server, tmp_path):
    import urllib.error
    import urllib.request
    app = ("import http.server, os\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n"
           "        body = f'hello from {self.path}'.encode()\n"
           "        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()\n"
           "        self.wfile.write(body)\n"
           "http.server.HTTPServer(('127.0.0.1', int(os.environ['MISSION_SESSION_PORT'])), H).serve_forever()\n")
    src = script_folder(tmp_path, "exec python3 app.py\n")
    (src / "app.py").write_text(app)
    m = client.create_and_upload_mission("py-session", src, mission_type_id=SHELL, settings={"filename": "run.sh"})
    with pytest.raises(ValueError, match="session"):
        client.run_job_on_station(m.mission_id, LOCAL_STATION, idle_timeout=5)
    job = client.run_job_on_station(m.mission_id, LOCAL_STATION, session="web", idle_timeout=30)
    assert (job.session.kind, job.session.idle_timeout, job.session.url) == ("web", 30, None)
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=60)
    while client.get_job(job.job_id).session.url is None:
        assert datetime.datetime.now() < deadline, "the session answers within a minute"
        time.sleep(0.1)
    url = client.get_job(job.job_id).session.url
    _, token = server
    request = urllib.request.Request(url + "notebook?x=1", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.read() == b"hello from /notebook?x=1"
    client.stop_job(job.job_id)
    assert client.wait_for_job(job.job_id, timeout=60).status == "stopped"
    with pytest.raises(urllib.error.HTTPError) as gone:
        urllib.request.urlopen(request, timeout=10)
    assert gone.value.code == 410
