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
import itertools
import json
import os
import uuid
from typing import Any, Dict, Iterable, List, Optional, Union

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
    "FileListing",
    "Job",
    "JobTransition",
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


def _ids(values: Optional[Iterable[Id]]) -> List[str]:
    return [str(v) for v in values or []]


def _drop_none(fields: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in fields.items() if v is not None}


def _mission_json(
    name: Optional[str] = None,
    description: Optional[str] = None,
    source_storage_id: Optional[Id] = None,
    destination_storage_id: Optional[Id] = None,
    source_path: Optional[str] = None,
    destination_path: Optional[str] = None,
    mission_type_id: Optional[Id] = None,
    settings: Optional[Dict[str, str]] = None,
    public: Optional[bool] = None,
) -> str:
    """A mission's create or update request as JSON, without the fields not given."""
    return json.dumps(_drop_none({
        "name": name, "description": description, "source_storage_id": source_storage_id,
        "destination_storage_id": destination_storage_id, "source_path": source_path,
        "destination_path": destination_path, "mission_type_id": mission_type_id,
        "settings": settings, "public": public,
    }))


def _time(value: Optional[str]) -> Optional[datetime.datetime]:
    if value is None:
        return None
    # Python 3.9's fromisoformat takes neither "Z" nor more than six fraction digits.
    text = value.replace("Z", "+00:00")
    head, sep, tail = text.partition(".")
    if sep:
        digits = "".join(itertools.takewhile(str.isdigit, tail))
        text = f"{head}.{digits[:6]}{tail[len(digits):]}"
    return datetime.datetime.fromisoformat(text)


def _build(cls: Any, data: Dict[str, Any]) -> Any:
    """An instance of the dataclass ``cls`` from the service's JSON object."""
    values = {}
    for field in dataclasses.fields(cls):
        value = data.get(field.name)
        if field.name.endswith("_at"):
            value = _time(value)
        elif field.name == "at":
            value = _time(value)
        elif dataclasses.is_dataclass(field.metadata.get("of")) and value is not None:
            value = _build(field.metadata["of"], value)
        elif dataclasses.is_dataclass(field.metadata.get("each")) and value is not None:
            value = [_build(field.metadata["each"], v) for v in value]
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
class FileListing:
    """One file of a mission: ``path`` is its folder (``""`` at the top), ``name`` its name."""

    filename: str
    name: str
    path: str
    file_size: int
    modified_at: datetime.datetime
    sha256: str

    @property
    def relative_path(self) -> str:
        """Its path relative to the mission root."""
        return f"{self.path}/{self.name}" if self.path else self.name


@dataclasses.dataclass(frozen=True)
class JobTransition:
    """One step of a job's history."""

    status: str
    at: datetime.datetime
    detail: Optional[str]


@dataclasses.dataclass(frozen=True)
class Job:
    """A run of a mission on a station: ``status`` is one of queued, assigned, staging, running,
    uploading, completed, failed, stopped, lost."""

    job_id: str
    mission_id: str
    user_id: str
    station_id: str
    requested_lz_id: Optional[str]
    lz_id: Optional[str]
    status: str
    cpu_count: int
    memory_amount: int
    gpu_count: int
    gpu_indices: List[int]
    command: List[str]
    exit_code: Optional[int]
    reason: Optional[str]
    limits: Optional[str]
    history: List[JobTransition] = dataclasses.field(metadata={"each": JobTransition})
    created_at: Optional[datetime.datetime] = None
    started_at: Optional[datetime.datetime] = None
    finished_at: Optional[datetime.datetime] = None
    time_limit: Optional[int] = None


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

    # Missions

    def list_missions(
        self,
        mission_ids: Optional[List[Id]] = None,
        names: Optional[List[str]] = None,
        user_ids: Optional[List[Id]] = None,
        page: int = 1,
        items: int = 25,
        mission_type_ids: Optional[List[Id]] = None,
        archived: Optional[bool] = None,
    ) -> List[Mission]:
        """The missions you may read (your own and public ones), newest first, one page."""
        query = {
            "mission_ids": _ids(mission_ids),
            "names": list(names or []),
            "user_ids": _ids(user_ids),
            "page": page,
            "items": items,
            "mission_type_ids": _ids(mission_type_ids),
            "archived": archived,
        }
        return [_build(Mission, m) for m in json.loads(self._native.list_missions(json.dumps(query)))]

    def get_mission_by_id(self, mission_id: Id) -> Mission:
        """The mission ``mission_id``; :class:`NotFound` when it does not exist or is not yours."""
        return _build(Mission, json.loads(self._native.get_mission_by_id(_id(mission_id))))

    def create_mission(
        self,
        name: str,
        description: str = "",
        source_storage_id: Optional[Id] = None,
        destination_storage_id: Optional[Id] = None,
        source_path: Optional[str] = None,
        destination_path: Optional[str] = None,
        mission_type_id: Optional[Id] = None,
        settings: Optional[Dict[str, str]] = None,
        public: bool = False,
    ) -> Mission:
        """A new mission of yours."""
        request = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, mission_type_id, settings, public)
        return _build(Mission, json.loads(self._native.create_mission(request)))

    def update_mission(
        self,
        mission_id: Id,
        name: Optional[str] = None,
        description: Optional[str] = None,
        source_storage_id: Optional[Id] = None,
        destination_storage_id: Optional[Id] = None,
        source_path: Optional[str] = None,
        destination_path: Optional[str] = None,
        settings: Optional[Dict[str, str]] = None,
    ) -> bool:
        """Changes the fields given; ``False`` when the mission does not exist."""
        changes = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, settings=settings)
        return self._native.update_mission(_id(mission_id), changes)

    def update_mission_args(self, mission_id: Id, arg: List[str]) -> Mission:
        """Sets the mission's arguments (what jobs get after the type's command)."""
        return _build(Mission, json.loads(self._native.update_mission_args(_id(mission_id), list(arg))))

    def delete_mission_by_id(self, mission_id: Id) -> None:
        """Deletes the mission and its files."""
        self._native.delete_mission_by_id(_id(mission_id))

    # Files

    def upload(
        self, mission_id: Id, payload: Union[str, "os.PathLike[str]"], rename: Optional[str] = None, verbose: bool = False
    ) -> bool:
        """Uploads a file (to the top of the mission, or to ``rename``) or a folder's contents
        (its first level at the top, subfolders as subfolders); files already there with the same
        content are skipped. ``False`` when the mission does not exist."""
        return self._native.upload(_id(mission_id), os.fspath(payload), rename, verbose)

    def get_mission_files(self, mission_id: Id) -> List[FileListing]:
        """The mission's files."""
        return [_build(FileListing, f) for f in json.loads(self._native.get_mission_files(_id(mission_id)))]

    def delete_file(self, mission_id: Id, file_path: str) -> bool:
        """Deletes a file by its path relative to the mission root; ``False`` when there was none."""
        return self._native.delete_file(_id(mission_id), file_path)

    def create_and_upload_mission(
        self,
        name: str,
        directory: Union[str, "os.PathLike[str]"],
        description: str = "",
        source_storage_id: Optional[Id] = None,
        destination_storage_id: Optional[Id] = None,
        source_path: Optional[str] = None,
        destination_path: Optional[str] = None,
        mission_type_id: Optional[Id] = None,
        settings: Optional[Dict[str, str]] = None,
        public: bool = False,
    ) -> Mission:
        """Creates a mission and uploads the contents of ``directory`` to it, in one call."""
        request = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, mission_type_id, settings, public)
        created = self._native.create_and_upload_mission(request, os.fspath(directory))
        return _build(Mission, json.loads(created))

    # Jobs

    def run_job_on_station(
        self,
        mission_id: Id,
        station_id: Id,
        cpu_count: Optional[int] = None,
        memory_amount: Optional[int] = None,
        gpu_count: Optional[int] = None,
        time_limit: Optional[int] = None,
    ) -> Job:
        """Starts a job of the mission on a station; absent resources come from the mission
        type's defaults (memory in megabytes, the time limit in minutes)."""
        return self._run(mission_id, station_id, None, cpu_count, memory_amount, gpu_count, time_limit)

    def run_job_on_lz(
        self,
        mission_id: Id,
        station_id: Id,
        lz_id: Id,
        cpu_count: Optional[int] = None,
        memory_amount: Optional[int] = None,
        gpu_count: Optional[int] = None,
        time_limit: Optional[int] = None,
    ) -> Job:
        """Starts a job of the mission on one landing zone of a station."""
        return self._run(mission_id, station_id, lz_id, cpu_count, memory_amount, gpu_count, time_limit)

    def _run(self, mission_id: Id, station_id: Id, lz_id: Optional[Id], cpu_count: Optional[int],
             memory_amount: Optional[int], gpu_count: Optional[int], time_limit: Optional[int]) -> Job:
        run = _drop_none({"station_id": station_id, "lz_id": lz_id, "cpu_count": cpu_count,
                          "memory_amount": memory_amount, "gpu_count": gpu_count, "time_limit": time_limit})
        return _build(Job, json.loads(self._native.run_job(_id(mission_id), json.dumps(run))))

    def create_mission_and_run_job(
        self,
        name: str,
        directory: Union[str, "os.PathLike[str]"],
        station_id: Id,
        lz_id: Optional[Id] = None,
        description: str = "",
        source_storage_id: Optional[Id] = None,
        destination_storage_id: Optional[Id] = None,
        source_path: Optional[str] = None,
        destination_path: Optional[str] = None,
        mission_type_id: Optional[Id] = None,
        settings: Optional[Dict[str, str]] = None,
        public: bool = False,
    ) -> Job:
        """Creates a mission, uploads ``directory`` to it and starts a job on the station (or on
        the landing zone ``lz_id``)."""
        request = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, mission_type_id, settings, public)
        started = self._native.create_mission_and_run_job(
            request, os.fspath(directory), _id(station_id), None if lz_id is None else _id(lz_id))
        return _build(Job, json.loads(started))

    def get_job(self, job_id: Id) -> Job:
        """A job, with its history."""
        return _build(Job, json.loads(self._native.get_job(_id(job_id))))

    def list_jobs(
        self,
        mission_ids: Optional[List[Id]] = None,
        station_ids: Optional[List[Id]] = None,
        statuses: Optional[List[str]] = None,
        page: int = 1,
        items: int = 25,
    ) -> List[Job]:
        """Your jobs, newest first, one page."""
        query = {"mission_ids": _ids(mission_ids), "station_ids": _ids(station_ids),
                 "statuses": list(statuses or []), "page": page, "items": items}
        return [_build(Job, j) for j in json.loads(self._native.list_jobs(json.dumps(query)))]

    def stop_job(self, job_id: Id) -> Job:
        """Stops a job: dequeued, or its processes killed."""
        return _build(Job, json.loads(self._native.stop_job(_id(job_id))))

    def wait_for_job(self, job_id: Id, timeout: Optional[float] = None) -> Job:
        """Waits until the job ends and answers it; ``TimeoutError`` after ``timeout`` seconds."""
        return _build(Job, json.loads(self._native.wait_for_job(_id(job_id), timeout)))

    def job_logs(self, job_id: Id, stream: str = "stdout") -> str:
        """What the job wrote to ``stream`` (``"stdout"`` or ``"stderr"``) so far."""
        return self._native.job_logs(_id(job_id), stream)

    def download_job_results(self, job_id: Id, dest_dir: Union[str, "os.PathLike[str]"]) -> int:
        """Downloads the job's results (its new or changed files and its logs) into ``dest_dir``;
        answers how many files it holds."""
        return self._native.download_job_results(_id(job_id), os.fspath(dest_dir))

    # Mission types

    def list_mission_types(self) -> List[MissionTypeSummary]:
        """The mission types of the catalogue."""
        return [_build(MissionTypeSummary, t) for t in json.loads(self._native.list_mission_types())]

    def get_mission_type(self, mission_type_id: Id) -> MissionType:
        """A mission type in detail."""
        return _build(MissionType, json.loads(self._native.get_mission_type(_id(mission_type_id))))

    def get_mission_type_settings_info(self, mission_type_id: Id) -> Dict[str, str]:
        """Setting name → the expected type or options, for missions of that type."""
        return json.loads(self._native.get_mission_type_settings_info(_id(mission_type_id)))
