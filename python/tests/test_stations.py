"""Stations, landing zones, cargo bays and the signed-in user, through the package."""

import uuid

import pytest

import mission

LOCAL_STATION = "6d697373-696f-4e00-8000-000000000002"


def test_stations_members_and_landing_zones(client):
    assert client.whoami().username == "admin"
    assert LOCAL_STATION in [s.station_id for s in client.list_stations()]
    local = client.get_station(LOCAL_STATION)
    zones = client.list_landing_zones(LOCAL_STATION)
    assert zones and zones[0].station_id == local.station_id
    assert any(z.online and z.resources.cpu_count == 2 for z in zones), zones

    station = client.create_station("py-station", description="from Python")
    assert (station.name, station.description, station.open) == ("py-station", "from Python", False)
    assert station.reclaim is True
    changed = client.update_station(station.station_id, reclaim=False, open=True)
    assert (changed.description, changed.open, changed.reclaim) == ("from Python", True, False)
    assert client.get_station(station.station_id) == changed
    with pytest.raises(mission.Invalid):
        client.update_station(station.station_id, description="a\0b")
    client.add_station_member(station.station_id, "admin")
    assert [m.username for m in client.station_members(station.station_id)] == ["admin"]
    registered = client.register_landing_zone(station.station_id, "py-lz")
    assert registered.token and registered.token not in repr(registered)
    assert registered.landing_zone.online is False
    assert [z.name for z in client.list_landing_zones(station.station_id)] == ["py-lz"]
    assert client.remove_landing_zone(station.station_id, registered.landing_zone.lz_id) is True
    assert client.remove_landing_zone(station.station_id, registered.landing_zone.lz_id) is False
    assert client.remove_station_member(station.station_id, "admin") is True
    assert client.delete_station(station.station_id) is True
    with pytest.raises(mission.NotFound):
        client.get_station(station.station_id)
    assert client.delete_station(uuid.uuid4()) is False


def test_cargo_bays(client, tmp_path):
    kinds = [b.kind for b in client.list_cargo_bays()]
    assert kinds[0] == "default"
    bay = client.create_cargo_bay("py-local", kind="local", path=str(tmp_path))
    assert (bay.kind, bay.path, bay.has_credentials) == ("local", str(tmp_path), False)
    assert client.get_cargo_bay(bay.storage_id) == bay
    used = client.create_mission("py-bay", source_storage_id=bay.storage_id, source_path="")
    with pytest.raises(mission.Conflict):
        client.delete_cargo_bay(bay.storage_id)
    client.delete_mission_by_id(used.mission_id)
    assert client.delete_cargo_bay(bay.storage_id) is True
    assert client.delete_cargo_bay(bay.storage_id) is False
    with pytest.raises(mission.Invalid):
        client.create_cargo_bay("py-s3", kind="s3")
