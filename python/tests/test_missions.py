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
    client.delete_mission_by_id(created.mission_id)
    with pytest.raises(mission.NotFound):
        client.get_mission_by_id(created.mission_id)


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
