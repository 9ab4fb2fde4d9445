"""Mission Compute Service for Python: the client interface of the service over its Rust SDK.

    import mission
    client = mission.Client("http://127.0.0.1:8080", access_token="…")
    for t in client.list_mission_types():
        print(t.name, t.version)

Results are Python objects with attributes that compare by value and turn into plain dicts
(``dataclasses.asdict``); ids are strings, and any id argument takes a ``str`` or a
``uuid.UUID``; datetimes are ``datetime`` objects. Errors are :class:`MissionError` and its
subclasses, never a bare ``RuntimeError``. Blocking calls release the GIL while they wait, and
Ctrl-C interrupts them promptly.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from typing import Any, Dict, List, Optional, Union

from ._native import (
    Conflict,
    Forbidden,
    Invalid,
    MissionError,
    NativeClient,
    NotFound,
    ServerError,
    TransportError,
    Unauthorized,
)

__all__ = [
    "Client",
    "Mission",
    "MissionType",
    "MissionTypeSummary",
    "ResourceDefaults",
    "MissionError",
    "NotFound",
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "Conflict",
    "ServerError",
    "TransportError",
]

Id = Union[str, uuid.UUID]


def _id(value: Id) -> str:
    return str(value)


def _time(value: Optional[str]) -> Optional[datetime.datetime]:
    if value is None:
        return None
    # Python 3.9's fromisoformat takes neither "Z" nor more than six fraction digits.
    text = value.replace("Z", "+00:00")
    head, sep, tail = text.partition(".")
    if sep:
        digits = "".join(c for c in tail if c.isdigit())
        text = f"{head}.{digits[:6]}{tail[len(digits):]}"
    return datetime.datetime.fromisoformat(text)


def _build(cls: Any, data: Dict[str, Any]) -> Any:
    """An instance of the dataclass ``cls`` from the service's JSON object."""
    values = {}
    for field in dataclasses.fields(cls):
        value = data.get(field.name)
        if field.name.endswith("_at"):
            value = _time(value)
        elif dataclasses.is_dataclass(field.metadata.get("of")) and value is not None:
            value = _build(field.metadata["of"], value)
        values[field.name] = value
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class Mission:
    """A mission: input files, settings and arguments that jobs run from."""

    mission_id: str
    name: str
    description: str
    mission_type_id: Optional[str]
    source_storage_id: Optional[str]
    destination_storage_id: Optional[str]
    source_path: Optional[str]
    destination_path: Optional[str]
    settings: Dict[str, str]
    public: bool
    archived: bool
    args: List[str]
    user_id: str
    created_at: datetime.datetime
    updated_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class MissionTypeSummary:
    """A mission type, as ``list_mission_types`` lists it."""

    id: str
    name: str
    version: str
    description: str


@dataclasses.dataclass(frozen=True)
class ResourceDefaults:
    """Resources a job of a mission type gets when its request leaves them out."""

    cpu_count: int
    memory_amount: int
    gpu_count: int
    time_limit: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class MissionType:
    """A mission type in detail: its settings and the command its jobs run."""

    id: str
    name: str
    version: str
    description: str
    settings: Dict[str, str]
    command: List[str]
    resources: ResourceDefaults = dataclasses.field(metadata={"of": ResourceDefaults})


class Client:
    """A signed-in connection to a Mission Compute server.

    ``server_url`` names the server (several replicas of one service: comma-separated);
    ``access_token`` is a bearer token for it.
    """

    def __init__(self, server_url: str, access_token: str) -> None:
        self._native = NativeClient(server_url, access_token)

    @property
    def server_url(self) -> str:
        """The server's URL(s)."""
        return self._native.base_urls()

    def get_mission_by_id(self, mission_id: Id) -> Mission:
        """The mission ``mission_id``; :class:`NotFound` when it does not exist or is not yours."""
        return _build(Mission, json.loads(self._native.get_mission_by_id(_id(mission_id))))

    def list_mission_types(self) -> List[MissionTypeSummary]:
        """The mission types of the catalogue."""
        return [_build(MissionTypeSummary, t) for t in json.loads(self._native.list_mission_types())]

    def get_mission_type(self, mission_type_id: Id) -> MissionType:
        """A mission type in detail."""
        return _build(MissionType, json.loads(self._native.get_mission_type(_id(mission_type_id))))

    def get_mission_type_settings_info(self, mission_type_id: Id) -> Dict[str, str]:
        """Setting name → the expected type or options, for missions of that type."""
        return json.loads(self._native.get_mission_type_settings_info(_id(mission_type_id)))
