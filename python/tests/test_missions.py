"""Missions and their files, through the package against a real server."""

import dataclasses
import datetime
import uuid

import pytest

import mission

SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"


def test_missions_are_created_listed_changed_and_deleted(client):
    created = client.create_mission("py-crud", description="from Python", mission_type_id=uuid.UUID(SHELL),
                                    settings={"filename": "run.sh"})
    assert (created.name, created.description, created.public, created.archived) == ("py-crud", "from Python", False, False)
    assert isinstance(created.created_at, datetime.datetime) and created.created_at.tzinfo is not None
    assert client.get_mission_by_id(created.mission_id) == created
    assert dataclasses.asdict(created)["settings"] == {"filename": "run.sh"}
    listed = client.list_missions(names=["py-crud"])
    assert [m.mission_id for m in listed] == [created.mission_id]
    assert client.list_missions(mission_ids=[uuid.uuid4()]) == []
    assert client.update_mission(created.mission_id, description="changed") is True
    assert client.update_mission(uuid.uuid4(), name="nobody's") is False
    with_args = client.update_mission_args(created.mission_id, ["--seed", "7"])
    assert (with_args.description, with_args.args) == ("changed", ["--seed", "7"])
    with pytest.raises(mission.Invalid) as invalid:
        client.create_mission("")
    assert "name" in str(invalid.value)
    assert (invalid.value.status, invalid.value.detail) == (400, str(invalid.value))
    client.delete_mission_by_id(created.mission_id)
    with pytest.raises(mission.NotFound):
        client.get_mission_by_id(created.mission_id)


def test_labels_find_a_mission_and_change(client):
    labelled = client.create_mission("py-labelled", labels={"project": "climate", "stage": "draft"})
    plain = client.create_mission("py-unlabelled")
    assert (labelled.labels, plain.labels) == ({"project": "climate", "stage": "draft"}, {})
    found = client.list_missions(labels={"project": "climate", "stage": "draft"})
    assert [m.mission_id for m in found] == [labelled.mission_id]
    assert client.list_missions(labels={"project": "ocean"}) == []
    assert client.update_mission(labelled.mission_id, labels={"project": "ocean"}) is True
    assert client.get_mission_by_id(labelled.mission_id).labels == {"project": "ocean"}
    assert [m.mission_id for m in client.list_missions(labels={"project": "ocean"})] == [labelled.mission_id]
    with pytest.raises(mission.Invalid, match="labels.bad key"):
        client.create_mission("py-bad-label", labels={"bad key": "x"})
    assert client.list_missions(names=["py-bad-label"]) == []


def test_upload_places_files_and_folders_as_the_rules_say(client, tmp_path):
    folder = tmp_path / "inputs"
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "top.txt").write_text("top")
    (folder / "sub" / "deeper" / "leaf.txt").write_text("leaf")
    single = tmp_path / "params.yaml"
    single.write_text("a: 1\n")
    m = client.create_mission("py-upload")
    assert client.upload(m.mission_id, str(folder)) is True
    assert client.upload(m.mission_id, single, rename="config/params.yaml") is True
    assert client.upload(m.mission_id, single) is True
    paths = sorted(f.relative_path for f in client.get_mission_files(m.mission_id))
    assert paths == ["config/params.yaml", "params.yaml", "sub/deeper/leaf.txt", "top.txt"]
    sizes = {f.relative_path: f.file_size for f in client.get_mission_files(m.mission_id)}
    assert sizes["top.txt"] == 3
    assert client.upload(uuid.uuid4(), single) is False, "False when the mission does not exist"
    assert client.delete_file(m.mission_id, "sub/deeper/leaf.txt") is True
    assert client.delete_file(m.mission_id, "sub/deeper/leaf.txt") is False
    with pytest.raises(mission.Invalid):
        client.delete_file(m.mission_id, "../escape")
    made = client.create_and_upload_mission("py-made", folder, public=True)
    assert made.public is True
    assert sorted(f.relative_path for f in client.get_mission_files(made.mission_id)) == [
        "sub/deeper/leaf.txt", "top.txt"]


class Recorder:
    """A progress reporter that keeps what it was told."""

    def __init__(self):
        self.calls = []

    def update(self, files_done, files, bytes_done, total):
        self.calls.append((files_done, files, bytes_done, total))


def test_verbose_transfers_print_a_line_per_file_and_report_progress(client, tmp_path, capsys):
    folder = tmp_path / "inputs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("aaaa")
    (folder / "sub" / "b.bin").write_bytes(b"\0" * 3000)
    m = client.create_mission("py-verbose")
    progress = Recorder()
    assert client.upload(m.mission_id, folder, verbose=True, progress=progress) is True
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == ["uploaded a.txt (4 bytes)", "uploaded sub/b.bin (3000 bytes)"]
    assert progress.calls[-1] == (2, 2, 3004, 3004)

    client.upload(m.mission_id, folder, verbose=True, progress=False)
    assert sorted(capsys.readouterr().out.splitlines()) == ["unchanged a.txt (4 bytes)", "unchanged sub/b.bin (3000 bytes)"]

    copy = tmp_path / "copy"
    summary = client.download(m.mission_id, copy, verbose=True)
    assert (summary.transferred, summary.skipped, summary.bytes) == (2, 0, 3004)
    assert (copy / "sub" / "b.bin").read_bytes() == b"\0" * 3000
    assert sorted(capsys.readouterr().out.splitlines()) == ["downloaded a.txt (4 bytes)", "downloaded sub/b.bin (3000 bytes)"]
    assert client.download(m.mission_id, copy).to_dict() == {"transferred": 0, "skipped": 2, "bytes": 0}
    only = client.download(m.mission_id, tmp_path / "only", path="sub")
    assert only.transferred == 1 and (tmp_path / "only" / "sub" / "b.bin").exists()
    assert client.download_file(m.mission_id, "a.txt", tmp_path / "one.txt") == 4
    assert (tmp_path / "one.txt").read_text() == "aaaa"
    with pytest.raises(mission.NotFound):
        client.download_file(m.mission_id, "missing.txt", tmp_path / "missing.txt")
    assert not (tmp_path / "missing.txt").exists()
    with pytest.raises(TypeError):
        client.upload(m.mission_id, folder, progress="loud")


def test_a_terminal_progress_bar_draws_after_half_a_second():
    from mission._progress import ProgressBar
    import io
    import time

    stream = io.StringIO()
    bar = ProgressBar("uploading", stream=stream)
    bar.update(0, 10, 0, 2_000_000)
    assert stream.getvalue() == "", "quiet for the first half second"
    bar.started = time.monotonic() - 1
    bar.update(5, 10, 1_000_000, 2_000_000)
    bar.close()
    assert stream.getvalue() == "\ruploading [############............]  50%  5/10 files  1.0 MB/2.0 MB\n"


LARGE_UPLOAD = """
import os, resource, sys
import mission
client = mission.Client(os.environ["URL"], access_token=os.environ["TOKEN"])
path = sys.argv[1]
with open(path, "wb") as f:
    block = os.urandom(1 << 20)
    for _ in range(100):
        f.write(block)
m = client.create_mission("py-large")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert client.upload(m.mission_id, path, progress=False)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
[listed] = client.get_mission_files(m.mission_id)
print(listed.file_size, before, after)
"""


def test_a_100_mb_upload_keeps_memory_flat(server, tmp_path):
    import os
    import subprocess
    import sys

    url, token = server
    out = subprocess.run([sys.executable, "-c", LARGE_UPLOAD, str(tmp_path / "large.bin")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "URL": url, "TOKEN": token})
    assert out.returncode == 0, out.stderr
    size, before, after = map(int, out.stdout.split())
    assert size == 100 << 20
    # ru_maxrss is in KiB on Linux: the upload may add buffers, never the file.
    assert after - before < 32 * 1024, f"peak RSS grew by {(after - before) / 1024:.0f} MiB"
