"""Mission types, through the package against a real server."""

import dataclasses
import uuid

import pytest

import mission

SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"


def test_mission_types_are_listed_and_read_as_objects(client):
    types = client.list_mission_types()
    names = {t.name for t in types}
    assert {"shell", "python"} <= names
    shell = client.get_mission_type(uuid.UUID(SHELL))
    assert shell == client.get_mission_type(SHELL), "results compare by value"
    assert (shell.name, shell.resources.cpu_count) == ("shell", 1)
    assert dataclasses.asdict(shell)["resources"]["memory_amount"] == 1024
    settings = client.get_mission_type_settings_info(SHELL)
    assert "filename" in settings and "shell" in settings


def test_errors_are_the_packages_exceptions(client, server):
    with pytest.raises(mission.NotFound):
        client.get_mission_by_id(uuid.uuid4())
    with pytest.raises(mission.Invalid) as invalid:
        client.get_mission_by_id("not-a-uuid")
    assert "mission_id" in str(invalid.value)
    assert issubclass(mission.NotFound, mission.MissionError)
    stranger = mission.Client(server[0], access_token="forged")
    with pytest.raises(mission.Unauthorized):
        stranger.list_mission_types()
    unreachable = mission.Client("http://127.0.0.1:9", access_token="x")
    with pytest.raises(mission.TransportError):
        unreachable.list_mission_types()
