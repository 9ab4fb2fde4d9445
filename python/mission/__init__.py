"""Mission Compute Service for Python: the client interface of the service over its Rust SDK.

    import mission
    client = mission.Client()            # the session `mission login` saved
    client = mission.Client.login("https://mission.example.org")   # or sign in here
    for t in client.list_mission_types():
        print(t.name, t.version)

Results are Python objects with attributes that compare by value and turn into plain dicts
(``to_dict()``); ids are strings, and any id argument takes a ``str`` or a ``uuid.UUID``;
datetimes are ``datetime`` objects. Errors are :class:`MissionError` and its subclasses, never a
bare ``RuntimeError``. Blocking calls release the GIL while they wait, and Ctrl-C interrupts
them promptly.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, TypeVar, Union

from . import _progress
from ._auth import AuthSdk, Prompt
from ._native import (
    Conflict,
    Forbidden,
    Invalid,
    LogFollower as LogFollow,
    MissionError,
    NativeClient,
    NotFound,
    ServerError,
    SignInError,
    TransportError,
    Unauthorized,
)
from ._types import (
    AuditEntry,
    AuditPage,
    CargoBay,
    DeviceCode,
    FileListing,
    Image,
    Job,
    JobGang,
    WarningSignal,
    JobImage,
    JobSession,
    JobTransition,
    Cost,
    EnergyPart,
    EnergyParts,
    JobUsage,
    PendingReason,
    QueuePosition,
    JobArray,
    RetryPolicy,
    LandingZone,
    Mission,
    MissionType,
    MissionTypeSummary,
    RegisteredLandingZone,
    ResourceDefaults,
    Resources,
    Project,
    ProjectMember,
    ResourcesInUse,
    StationLimits,
    BudgetStatus,
    UsageDay,
    UsageGroup,
    UsageReport,
    Station,
    StationMember,
    Tokens,
    ShellRun,
    TransferSummary,
    UsageSummary,
    User,
    Webhook,
    WebhookDelivery,
    _many,
    _one,
)

__all__ = [
    "AuditEntry",
    "AuditPage",
    "AuthSdk",
    "Client",
    "LogFollow",
    "CargoBay",
    "DeviceCode",
    "FileListing",
    "Image",
    "Job",
    "JobGang",
    "WarningSignal",
    "JobImage",
    "JobSession",
    "JobTransition",
    "Cost",
    "EnergyPart",
    "EnergyParts",
    "JobUsage",
    "LandingZone",
    "PendingReason",
    "QueuePosition",
    "RetryPolicy",
    "JobArray",
    "Mission",
    "MissionType",
    "MissionTypeSummary",
    "RegisteredLandingZone",
    "ResourceDefaults",
    "Resources",
    "Project",
    "ProjectMember",
    "ResourcesInUse",
    "StationLimits",
    "BudgetStatus",
    "UsageDay",
    "UsageGroup",
    "UsageReport",
    "Station",
    "StationMember",
    "Tokens",
    "ShellRun",
    "TransferSummary",
    "UsageSummary",
    "User",
    "Webhook",
    "WebhookDelivery",
    "verify_webhook",
    "MissionError",
    "NotFound",
    "Unauthorized",
    "SignInError",
    "Forbidden",
    "Invalid",
    "Conflict",
    "ServerError",
    "TransportError",
]

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")

Id = Union[str, uuid.UUID]


def _id(value: Id) -> str:
    return str(value)


def verify_webhook(secret: str, timestamp: str, body: bytes, signature: str, tolerance: float = 300) -> bool:
    """Whether a webhook delivery is genuine: ``signature`` (the ``Mission-Webhook-Signature``
    header, ``v1=HEX``) is the HMAC-SHA256 under ``secret`` of ``timestamp`` (the
    ``Mission-Webhook-Timestamp`` header), a dot and ``body`` as it arrived, and the timestamp is
    within ``tolerance`` seconds of this machine's clock (so a captured delivery cannot be
    replayed later)."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(time.time() - sent) > tolerance or not signature.startswith("v1="):
        return False
    expected = hmac.new(secret.encode(), f"{sent}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature[3:])


def _ids(values: Optional[Iterable[Id]]) -> List[str]:
    return [str(v) for v in values or []]


def _drop_none(fields: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in fields.items() if v is not None}


def _utc(time: Optional[datetime.datetime]) -> Optional[str]:
    """A time in ISO form for the native module, a naive one taken as UTC."""
    if time is None:
        return None
    if time.tzinfo is None:
        time = time.replace(tzinfo=datetime.timezone.utc)
    return time.isoformat()


def _usage_query(group_by: str, since: Optional[datetime.datetime], until: Optional[datetime.datetime]) -> str:
    """The native module's query for a usage report."""
    return json.dumps(_drop_none({"group_by": group_by, "since": _utc(since), "until": _utc(until)}))


def _audit_query(actor: Optional[str], project_id: Optional[Id], target: Optional[str],
                 since: Optional[datetime.datetime], until: Optional[datetime.datetime]) -> Dict[str, Any]:
    """The native module's query for the audit trail, without the bounds not given."""
    project = _id(project_id) if project_id is not None else None
    return _drop_none({"actor": actor, "project_id": project, "target": target, "since": _utc(since),
                       "until": _utc(until)})


def _run_json(station_id: Id, lz_id: Optional[Id], retry: Optional[RetryPolicy],
              options: Dict[str, Any]) -> Dict[str, Any]:
    """A run request, without the options not given."""
    return _drop_none({"station_id": station_id, "lz_id": lz_id, **options,
                       "retry": retry._request() if retry is not None else None})


def _session(kind: Optional[str], idle_timeout: Optional[int]) -> Optional[Dict[str, Any]]:
    """A run request's session, when one is asked for."""
    if kind is None:
        if idle_timeout is not None:
            raise ValueError("idle_timeout is for sessions: give session= too")
        return None
    return _drop_none({"kind": kind, "idle_timeout": idle_timeout})


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
    labels: Optional[Dict[str, str]] = None,
    retry: Optional[RetryPolicy] = None,
    project_id: Optional[Id] = None,
    image: Optional[str] = None,
) -> str:
    """A mission's create or update request as JSON, without the fields not given."""
    return json.dumps(_drop_none({
        "name": name, "description": description, "source_storage_id": source_storage_id,
        "destination_storage_id": destination_storage_id, "source_path": source_path,
        "destination_path": destination_path, "mission_type_id": mission_type_id,
        "settings": settings, "public": public, "labels": labels,
        "retry": retry._request() if retry is not None else None, "project_id": project_id, "image": image,
    }))


def _with_progress(progress: Any, title: str, call: Callable[[Any], T]) -> T:
    """Runs ``call(reporter)`` with a progress reporter, closing a bar afterwards."""
    reporter = _progress.reporter(progress, title)
    try:
        return call(reporter)
    finally:
        if isinstance(reporter, _progress.ProgressBar):
            reporter.close()


class Client:
    """A signed-in connection to a Mission Compute server.

    ``Client()`` uses the session ``mission login`` saved (its server and token file) and keeps
    it fresh; ``Client(server_url)`` the same session on another URL of that server;
    ``Client(server_url, access_token=...)`` a token you got elsewhere (it is not renewed).
    :meth:`Client.login` signs in. ``server_url`` may name several replicas of one service,
    comma-separated.
    """

    def __init__(self, server_url: Optional[str] = None, access_token: Optional[str] = None) -> None:
        if access_token is None:
            self._native = NativeClient.from_saved_session(server_url)
        else:
            self._native = NativeClient(server_url, access_token)

    @classmethod
    def login(
        cls,
        server_url: Optional[str] = None,
        client_id: Optional[str] = None,
        audience: Optional[str] = None,
        token_file: Optional[PathLike] = None,
        prompt: Prompt = None,
    ) -> "Client":
        """Signs in to ``server_url`` (see :class:`AuthSdk` for the parameters): refreshes with the
        token file's refresh token when there is one, runs the device flow otherwise. With the
        default token file the server is remembered too, so ``Client()`` works afterwards as
        after ``mission login``. The client renews its access token by itself."""
        auth = AuthSdk(server_url, client_id, audience, token_file, prompt)
        client = cls.__new__(cls)
        client._native = NativeClient.login(auth._native)
        if token_file is None:
            auth._native.remember_server()
        return client

    @property
    def server_url(self) -> str:
        """The server's URL(s)."""
        return self._native.base_urls()

    @property
    def tokens(self) -> Optional[Tokens]:
        """The session's current tokens when it renews them (after :meth:`login` or from a saved
        session), else ``None``."""
        text = self._native.tokens()
        return None if text is None else _one(Tokens, text)

    def logout(self) -> None:
        """Ends the session: revokes its refresh token and removes its token file."""
        self._native.logout()

    def whoami(self) -> User:
        """The signed-in user."""
        return _one(User, self._native.whoami())

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
        labels: Optional[Dict[str, str]] = None,
        project_ids: Optional[List[Id]] = None,
    ) -> List[Mission]:
        """The missions you may read (your own and public ones), newest first, one page; with
        ``labels``, only missions with every one of them; with ``project_ids`` (projects of
        yours), every mission of those projects, whoever owns it."""
        query = {
            "mission_ids": _ids(mission_ids),
            "names": list(names or []),
            "user_ids": _ids(user_ids),
            "project_ids": _ids(project_ids),
            "page": page,
            "items": items,
            "mission_type_ids": _ids(mission_type_ids),
            "archived": archived,
            "labels": sorted((labels or {}).items()),
        }
        return _many(Mission, self._native.list_missions(json.dumps(query)))

    def get_mission_by_id(self, mission_id: Id) -> Mission:
        """The mission ``mission_id``; :class:`NotFound` when it does not exist or is not yours."""
        return _one(Mission, self._native.get_mission_by_id(_id(mission_id)))

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
        labels: Optional[Dict[str, str]] = None,
        retry: Optional[RetryPolicy] = None,
        project_id: Optional[Id] = None,
        image: Optional[str] = None,
    ) -> Mission:
        """A new mission of yours; ``labels`` (``key`` to ``value``) find it again with
        ``list_missions(labels=…)``; ``retry`` is the default policy of its jobs. It belongs to
        ``project_id`` (one you are a member of; your personal project by default), which its
        jobs are charged to. Its jobs run in the container ``image`` (a name or ``sha256:``
        digest of an image you see; see :meth:`import_image`) where it names one."""
        request = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, mission_type_id, settings, public, labels, retry, project_id,
                                image)
        return _one(Mission, self._native.create_mission(request))

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
        labels: Optional[Dict[str, str]] = None,
        retry: Optional[RetryPolicy] = None,
        project_id: Optional[Id] = None,
        image: Optional[str] = None,
    ) -> bool:
        """Changes the fields given (``labels`` replaces them all; ``retry`` is the new default
        policy of its jobs, ``RetryPolicy(1)`` none; ``project_id`` moves it to another project
        of yours; ``image`` the image its jobs run in, ``""`` none); ``False`` when the mission
        does not exist."""
        changes = _mission_json(name, description, source_storage_id, destination_storage_id, source_path,
                                destination_path, settings=settings, labels=labels, retry=retry,
                                project_id=project_id, image=image)
        return self._native.update_mission(_id(mission_id), changes)

    def update_mission_args(self, mission_id: Id, arg: List[str]) -> Mission:
        """Sets the mission's arguments (what jobs get after the type's command)."""
        return _one(Mission, self._native.update_mission_args(_id(mission_id), list(arg)))

    def delete_mission_by_id(self, mission_id: Id) -> None:
        """Deletes the mission and its files."""
        self._native.delete_mission_by_id(_id(mission_id))

    # Files

    def upload(
        self,
        mission_id: Id,
        payload: PathLike,
        rename: Optional[str] = None,
        verbose: bool = False,
        progress: Any = None,
    ) -> bool:
        """Uploads a file (to the top of the mission, or to ``rename``) or a folder's contents
        (its first level at the top, subfolders as subfolders); files already there with the same
        content are skipped. ``False`` when the mission does not exist. ``verbose`` prints one
        line per file; ``progress`` shows a bar (by default when attached to a terminal or a
        notebook; ``False`` for none, or an object with ``update(files_done, files, bytes_done,
        bytes)``)."""
        return _with_progress(progress, "uploading", lambda reporter: self._native.upload(
            _id(mission_id), os.fspath(payload), rename, verbose, reporter))

    def get_mission_files(self, mission_id: Id) -> List[FileListing]:
        """The mission's files."""
        return _many(FileListing, self._native.get_mission_files(_id(mission_id)))

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
        return _one(Mission, created)

    # Jobs

    def run_job_on_station(
        self,
        mission_id: Id,
        station_id: Id,
        cpu_count: Optional[int] = None,
        memory_amount: Optional[int] = None,
        gpu_count: Optional[int] = None,
        time_limit: Optional[int] = None,
        labels: Optional[Dict[str, str]] = None,
        log_cap: Optional[int] = None,
        after_ok: Optional[List[Id]] = None,
        after_any: Optional[List[Id]] = None,
        retry: Optional[RetryPolicy] = None,
        project_id: Optional[Id] = None,
        image: Optional[str] = None,
        session: Optional[str] = None,
        idle_timeout: Optional[int] = None,
        nodes: Optional[int] = None,
        launch: Optional[str] = None,
        signal: Optional[str] = None,
        requeue: Optional[bool] = None,
    ) -> Job:
        """Starts a job of the mission on a station; absent resources come from the mission
        type's defaults (memory in megabytes, the time limit in minutes). ``labels`` (``key`` to
        ``value``) find the job again with ``list_jobs(labels=…)``. ``log_cap`` is the most bytes
        of each output stream kept (at least 1024, at most the server's cap, the default): past
        it, only the last quarter-cap bytes are kept, after a marker line, and the job says
        ``log_truncated``. The job starts only once your jobs ``after_ok`` have completed and
        your jobs ``after_any`` have ended; should one of ``after_ok`` end any other way, it
        fails without running, its ``reason`` naming that job. While it waits, its
        ``pending_reason`` says why. ``retry`` (default: the mission's) tries it again after it
        fails, as the same job, its ``attempt`` counting. The job is charged to ``project_id``
        (one you are a member of; the mission's by default). It runs in the container ``image``
        (default: the mission's, if it names one). With ``session`` (``web``, ``jupyter``,
        ``vscode``) it is an interactive session: once its app answers, ``job.session.url`` is
        where you open it; ``idle_timeout`` (minutes) ends it after that long without a request.
        With ``nodes`` it runs on that many landing zones of the station at once (a gang for MPI
        or distributed training), each holding the resources above; ``launch`` ``"first"`` runs
        the command on the first node only, the others held for it (default ``"each"``: on
        every node). Each node's output is ``job_logs(job_id, node=n)``. ``signal`` (Slurm's
        ``"[B:]SIG@SECONDS"``, e.g. ``"USR1@60"``) is sent that long before the time limit, and
        before a reclaim ends the job; with ``requeue=True`` its time limit, a reclaim or a node's
        failure puts it back in line, its results so far the next attempt's inputs, and
        ``MISSION_RESTART_COUNT`` saying which attempt it is (0 first)."""
        return self._run(mission_id, station_id, None, cpu_count=cpu_count, memory_amount=memory_amount,
                         gpu_count=gpu_count, time_limit=time_limit, labels=labels, log_cap=log_cap,
                         after_ok=_ids(after_ok), after_any=_ids(after_any), retry=retry, project_id=project_id,
                         image=image, session=_session(session, idle_timeout), nodes=nodes, launch=launch,
                         signal=signal, requeue=requeue)

    def run_job_on_lz(
        self,
        mission_id: Id,
        station_id: Id,
        lz_id: Id,
        cpu_count: Optional[int] = None,
        memory_amount: Optional[int] = None,
        gpu_count: Optional[int] = None,
        time_limit: Optional[int] = None,
        labels: Optional[Dict[str, str]] = None,
        log_cap: Optional[int] = None,
        after_ok: Optional[List[Id]] = None,
        after_any: Optional[List[Id]] = None,
        retry: Optional[RetryPolicy] = None,
        project_id: Optional[Id] = None,
        image: Optional[str] = None,
        session: Optional[str] = None,
        idle_timeout: Optional[int] = None,
    ) -> Job:
        """Starts a job of the mission on one landing zone of a station (the options are
        ``run_job_on_station``'s)."""
        return self._run(mission_id, station_id, lz_id, cpu_count=cpu_count, memory_amount=memory_amount,
                         gpu_count=gpu_count, time_limit=time_limit, labels=labels, log_cap=log_cap,
                         after_ok=_ids(after_ok), after_any=_ids(after_any), retry=retry, project_id=project_id,
                         image=image, session=_session(session, idle_timeout))

    def _run(self, mission_id: Id, station_id: Id, lz_id: Optional[Id], retry: Optional[RetryPolicy],
             **options: object) -> Job:
        return _one(Job, self._native.run_job(_id(mission_id), json.dumps(_run_json(station_id, lz_id, retry, options))))

    def run_job_array(
        self,
        mission_id: Id,
        station_id: Id,
        range: Optional[str] = None,
        arguments: Optional[List[str]] = None,
        argument_sets: Optional[List[List[str]]] = None,
        lz_id: Optional[Id] = None,
        retry: Optional[RetryPolicy] = None,
        **options: Any,
    ) -> JobArray:
        """Starts a job array: one job per index of ``range`` (``"1-100"``), its ``arguments``
        with ``{}`` replaced by the index, or one per list of ``argument_sets`` (indices from 0);
        each finds its index in ``MISSION_ARRAY_INDEX``. ``options`` are ``run_job_on_station``'s.
        Answers the array; ``list_jobs(array_ids=[…])`` lists its jobs."""
        request = {"run": _run_json(station_id, lz_id, retry, options), "range": range,
                   "arguments": list(arguments or []), "argument_sets": [list(s) for s in argument_sets or []]}
        return _one(JobArray, self._native.run_job_array(_id(mission_id), json.dumps(_drop_none(request))))

    def get_job_array(self, array_id: Id) -> JobArray:
        """How far a job array's elements got."""
        return _one(JobArray, self._native.get_job_array(_id(array_id)))

    def stop_job_array(self, array_id: Id) -> JobArray:
        """Stops every element of a job array that has not ended; answers the array after."""
        return _one(JobArray, self._native.stop_job_array(_id(array_id)))

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
        return _one(Job, started)

    def get_job(self, job_id: Id) -> Job:
        """A job, with its history."""
        return _one(Job, self._native.get_job(_id(job_id)))

    def list_jobs(
        self,
        mission_ids: Optional[List[Id]] = None,
        station_ids: Optional[List[Id]] = None,
        statuses: Optional[List[str]] = None,
        page: int = 1,
        items: int = 25,
        labels: Optional[Dict[str, str]] = None,
        array_ids: Optional[List[Id]] = None,
        project_ids: Optional[List[Id]] = None,
    ) -> List[Job]:
        """Your jobs, newest first, one page; with ``labels``, only jobs with every one of them;
        with ``array_ids``, only elements of those job arrays; with ``project_ids`` (projects of
        yours), every job charged to them, whoever started it."""
        query = {"mission_ids": _ids(mission_ids), "station_ids": _ids(station_ids), "array_ids": _ids(array_ids),
                 "project_ids": _ids(project_ids),
                 "statuses": list(statuses or []), "labels": sorted((labels or {}).items()),
                 "page": page, "items": items}
        return _many(Job, self._native.list_jobs(json.dumps(query)))

    def job_usage(self, mission_ids: Optional[List[Id]] = None,
                  since: Optional[datetime.datetime] = None) -> UsageSummary:
        """What your ended jobs used, summed: count, wall and CPU hours, CPU-hours held, mean CPU
        efficiency, and how many asked for more than twice the memory they used at their peak.
        ``since`` (a time; naive ones are UTC) counts only jobs that ended at or after it."""
        query = _drop_none({"mission_ids": _ids(mission_ids), "since": _utc(since)})
        return _one(UsageSummary, self._native.job_usage(json.dumps(query)))

    def usage(self, group_by: str = "project", since: Optional[datetime.datetime] = None,
              until: Optional[datetime.datetime] = None) -> UsageReport:
        """What the ended jobs you may see used, per ``group_by`` (``project``, ``user`` or
        ``label:KEY``): every job for an admin, the jobs of the projects you manage and your own
        for others. ``since`` and ``until`` (naive times are UTC) bound when they ended."""
        return _one(UsageReport, self._native.usage_report(_usage_query(group_by, since, until)))

    def usage_csv(self, group_by: str = "project", since: Optional[datetime.datetime] = None,
                  until: Optional[datetime.datetime] = None) -> str:
        """:meth:`usage` as the server writes it in CSV: a header (``project,project_id,jobs,…``)
        and a row per group."""
        return self._native.usage_report_csv(_usage_query(group_by, since, until))

    def audit(
        self,
        actor: Optional[str] = None,
        project_id: Optional[Id] = None,
        target: Optional[str] = None,
        since: Optional[datetime.datetime] = None,
        until: Optional[datetime.datetime] = None,
        before: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> AuditPage:
        """A page of the audit trail, newest first: every change for an admin, the changes to
        the resources of the projects you manage for others. ``actor`` is a username or id,
        ``target`` a resource's id; ``since`` and ``until`` (naive times are UTC) bound when;
        ``before`` (a page's ``next_before``) and ``limit`` (1 to 1000) page."""
        query = _audit_query(actor, project_id, target, since, until)
        query.update(_drop_none({"before": before, "limit": limit}))
        return _one(AuditPage, self._native.audit(json.dumps(query)))

    def audit_jsonl(
        self,
        actor: Optional[str] = None,
        project_id: Optional[Id] = None,
        target: Optional[str] = None,
        since: Optional[datetime.datetime] = None,
        until: Optional[datetime.datetime] = None,
    ) -> str:
        """Every entry :meth:`audit` would page through, as the server exports them: JSON lines,
        newest first."""
        return self._native.audit_jsonl(json.dumps(_audit_query(actor, project_id, target, since, until)))

    def set_job_labels(self, job_id: Id, labels: Dict[str, str]) -> Job:
        """Replaces a job's labels (all of them) and answers the job."""
        return _one(Job, self._native.set_job_labels(_id(job_id), json.dumps(labels)))

    def stop_job(self, job_id: Id) -> Job:
        """Stops a job: dequeued, or its processes killed."""
        return _one(Job, self._native.stop_job(_id(job_id)))

    def rerun_job(self, job_id: Id) -> Job:
        """Starts an ended job again as a new job (the same mission, command, resources, labels
        and retry policy), whose ``rerun_of`` names this one."""
        return _one(Job, self._native.rerun_job(_id(job_id)))

    def rerun_failed_jobs(self, mission_id: Id) -> List[Job]:
        """Starts again every job of the mission that failed or was lost and was not rerun yet,
        leaving completed ones alone; answers the new jobs, oldest first."""
        return _many(Job, self._native.rerun_failed_jobs(_id(mission_id)))

    def wait_for_job(self, job_id: Id, timeout: Optional[float] = None) -> Job:
        """Waits until the job ends and answers it; ``TimeoutError`` after ``timeout`` seconds."""
        return _one(Job, self._native.wait_for_job(_id(job_id), timeout))

    def run_in_job(self, job_id: Id, command: str, input: bytes = b"") -> ShellRun:
        """Runs ``command`` (a command line, run by ``sh -c`` in the job's work dir) inside a
        running job of yours, as its user in its sandbox, with ``input`` on its stdin; answers
        how it ended and what it wrote. The service audits each run (``mission jobs shell``
        opens an interactive shell the same way).

            run = client.run_in_job(job.job_id, "nvidia-smi --query-gpu=utilization.gpu --format=csv")
            print(run.exit_code, run.stdout)
        """
        return _one(ShellRun, self._native.run_in_job(_id(job_id), command, input))

    def job_logs(self, job_id: Id, stream: str = "stdout", node: int = 0) -> str:
        """What the job wrote to ``stream`` (``"stdout"`` or ``"stderr"``) so far; of a job on
        several landing zones, what its node ``node`` (by rank) wrote."""
        return self._native.job_logs(_id(job_id), stream, node)

    def follow_job_logs(self, job_id: Id, stream: str = "stdout") -> LogFollow:
        """The job's output on ``stream`` from its start, piece by piece as it is written, until
        the job ends; then the iteration stops and the follow's ``status`` holds the job's final
        status.

            follow = client.follow_job_logs(job.job_id)
            for text in follow:
                print(text, end="")
            print("ended", follow.status)
        """
        return self._native.follow_job_logs(_id(job_id), stream)

    def list_job_results(self, job_id: Id) -> List[FileListing]:
        """The job's results: its new or changed files and its logs under ``mission-logs/``."""
        return _many(FileListing, self._native.list_job_results(_id(job_id)))

    def download_job_results(
        self, job_id: Id, dest_dir: PathLike, verbose: bool = False, progress: Any = None
    ) -> TransferSummary:
        """Downloads the job's results into ``dest_dir`` (created if needed), each file checked by
        its SHA-256; files already there with the same content are skipped."""
        return _one(TransferSummary, _with_progress(progress, "downloading", lambda reporter: self._native.download_job_results(
            _id(job_id), os.fspath(dest_dir), verbose, reporter)))

    def download(
        self,
        mission_id: Id,
        dest_dir: PathLike,
        path: Optional[str] = None,
        verbose: bool = False,
        progress: Any = None,
    ) -> TransferSummary:
        """Mirrors the mission's files (or those under ``path``, a file or a folder) into
        ``dest_dir``, skipping files already there with the same content."""
        return _one(TransferSummary, _with_progress(progress, "downloading", lambda reporter: self._native.download(
            _id(mission_id), os.fspath(dest_dir), path, verbose, reporter)))

    def download_file(self, mission_id: Id, file_path: str, dest: PathLike) -> int:
        """Downloads one file of the mission to ``dest`` (never left half-written); answers its size."""
        return self._native.download_file(_id(mission_id), file_path, os.fspath(dest))

    # Mission types

    def list_mission_types(self) -> List[MissionTypeSummary]:
        """The mission types of the catalogue."""
        return _many(MissionTypeSummary, self._native.list_mission_types())

    def get_mission_type(self, mission_type_id: Id) -> MissionType:
        """A mission type in detail."""
        return _one(MissionType, self._native.get_mission_type(_id(mission_type_id)))

    def get_mission_type_settings_info(self, mission_type_id: Id) -> Dict[str, str]:
        """Setting name → the expected type or options, for missions of that type."""
        info: Dict[str, str] = json.loads(self._native.get_mission_type_settings_info(_id(mission_type_id)))
        return info

    # Projects

    def list_projects(self, page: int = 1, items: int = 25) -> List[Project]:
        """The projects you are a member of (every project, for an admin), by name: page
        ``page`` (from 1) of ``items`` (1 to 200)."""
        page_json = json.loads(self._native.list_projects(page, items))
        return _many(Project, json.dumps(page_json["projects"]))

    def get_project(self, project_id: Id) -> Project:
        """One project; :class:`NotFound` when it does not exist or you are no member."""
        return _one(Project, self._native.get_project(_id(project_id)))

    def create_project(self, name: str, description: Optional[str] = None) -> Project:
        """Creates a shared project (admins only); its name may not start with ``~``."""
        request = json.dumps(_drop_none({"name": name, "description": description}))
        return _one(Project, self._native.create_project(request))

    def update_project(self, project_id: Id, name: Optional[str] = None,
                       description: Optional[str] = None) -> Project:
        """Renames a project (admins) or changes its description (its managers too)."""
        changes = json.dumps(_drop_none({"name": name, "description": description}))
        return _one(Project, self._native.update_project(_id(project_id), changes))

    def delete_project(self, project_id: Id) -> bool:
        """Deletes a shared project that holds no missions and no unfinished jobs (admins only);
        ``False`` when there is no such project."""
        return self._native.delete_project(_id(project_id))

    def project_members(self, project_id: Id) -> List[ProjectMember]:
        """The members of a project and their roles."""
        return _many(ProjectMember, self._native.project_members(_id(project_id)))

    def set_project_member(self, project_id: Id, user: str, role: str = "member") -> ProjectMember:
        """Makes a user (username or id) a member with ``role`` (``viewer``, ``member`` or
        ``manager``), or changes their role (a project's managers and admins)."""
        return _one(ProjectMember, self._native.set_project_member(_id(project_id), str(user), role))

    def remove_project_member(self, project_id: Id, user: str) -> bool:
        """Takes a user out of a project; ``False`` when they were no member."""
        return self._native.remove_project_member(_id(project_id), str(user))

    def project_limits(self, project_id: Id) -> List[StationLimits]:
        """A project's limits on each station that has some, and what it uses there."""
        return _many(StationLimits, self._native.project_limits(_id(project_id)))

    def set_project_limits(
        self,
        project_id: Id,
        station_id: Id,
        nominal: Optional[Dict[str, int]] = None,
        borrowing_limit: Optional[Dict[str, int]] = None,
        share: Optional[float] = None,
        max_running_jobs: Optional[int] = None,
        max_queued_jobs: Optional[int] = None,
    ) -> StationLimits:
        """Sets what a project may hold on a station (admins only), replacing what was set:
        ``nominal`` is guaranteed and ``borrowing_limit`` more may be borrowed (each
        ``{"cpus": …, "memory_mb": …, "gpus": …}``; no ``borrowing_limit``: no limit; ``0``:
        none). Jobs past a limit wait, saying which; submissions past ``max_queued_jobs`` fail."""
        limits = json.dumps(_drop_none({"nominal": nominal, "borrowing_limit": borrowing_limit, "share": share,
                                        "max_running_jobs": max_running_jobs, "max_queued_jobs": max_queued_jobs}))
        return _one(StationLimits, self._native.set_project_limits(_id(project_id), _id(station_id), limits))

    def delete_project_limits(self, project_id: Id, station_id: Id) -> bool:
        """Removes a project's limits on a station (admins only); ``False`` when it had none."""
        return self._native.delete_project_limits(_id(project_id), _id(station_id))

    def project_budget(self, project_id: Id) -> Optional[BudgetStatus]:
        """A project's budget and what it spent this period; ``None`` when it has none."""
        got = self._native.project_budget(_id(project_id))
        return None if got is None else _one(BudgetStatus, got)

    def set_project_budget(
        self,
        project_id: Id,
        cpu_hours: Optional[float] = None,
        gpu_hours: Optional[float] = None,
        period: str = "month",
        kwh: Optional[float] = None,
        money: Optional[Cost] = None,
    ) -> BudgetStatus:
        """Sets what a project may spend per ``period`` (``week``, ``month`` or ``total``;
        admins only): a job is charged its CPUs (GPUs) times its wall time as it ends, and the
        kWh and money it was reckoned (``money`` counts jobs charged in its currency only). At
        80% of any amount the project's members get a ``project.budget_warning`` event; at 100%
        its jobs wait for the next period."""
        amounts: Dict[str, Any] = {"cpu_hours": cpu_hours, "gpu_hours": gpu_hours, "kwh": kwh, "period": period}
        if money is not None:
            amounts["money"] = {"amount": money.amount, "currency": money.currency}
        budget = json.dumps(_drop_none(amounts))
        return _one(BudgetStatus, self._native.set_project_budget(_id(project_id), budget))

    def delete_project_budget(self, project_id: Id) -> bool:
        """Removes a project's budget (admins only); ``False`` when it had none."""
        return self._native.delete_project_budget(_id(project_id))

    def list_stations(self) -> List[Station]:
        """The stations you may run jobs on (every station, for an admin)."""
        return _many(Station, self._native.list_stations())

    def get_station(self, station_id: Id) -> Station:
        """One station; :class:`NotFound` when it does not exist or you may not use it."""
        return _one(Station, self._native.get_station(_id(station_id)))

    def create_station(
        self,
        name: str,
        description: Optional[str] = None,
        open: Optional[bool] = None,
        owner_id: Optional[Id] = None,
        reclaim: Optional[bool] = None,
    ) -> Station:
        """Creates a station (admins only); an ``open`` station takes every user's jobs, and one
        that does not ``reclaim`` never stops borrowed jobs for a project below its nominal."""
        request = _drop_none(
            {"name": name, "description": description, "open": open, "owner_id": owner_id, "reclaim": reclaim}
        )
        return _one(Station, self._native.create_station(json.dumps(request)))

    def update_station(
        self,
        station_id: Id,
        description: Optional[str] = None,
        open: Optional[bool] = None,
        reclaim: Optional[bool] = None,
    ) -> Station:
        """Changes what is given of a station's description, access and reclaiming (its owner or
        an admin); answers the station as it is now."""
        request = _drop_none({"description": description, "open": open, "reclaim": reclaim})
        return _one(Station, self._native.update_station(_id(station_id), json.dumps(request)))

    def delete_station(self, station_id: Id) -> bool:
        """Deletes a station with its members and landing zones (admins only); ``False`` when
        there was none."""
        return self._native.delete_station(_id(station_id))

    def station_members(self, station_id: Id) -> List[StationMember]:
        """The members of a station (its owner and admins may ask)."""
        return _many(StationMember, self._native.station_members(_id(station_id)))

    def add_station_member(self, station_id: Id, user: str) -> None:
        """Adds a member by user id or username."""
        self._native.add_station_member(_id(station_id), str(user))

    def remove_station_member(self, station_id: Id, user: str) -> bool:
        """Removes a member; ``False`` when they were not one."""
        return self._native.remove_station_member(_id(station_id), str(user))

    def list_landing_zones(self, station_id: Id) -> List[LandingZone]:
        """The landing zones of a station, with whether they are online and what they offer."""
        return _many(LandingZone, self._native.list_landing_zones(_id(station_id)))

    def register_landing_zone(
        self, station_id: Id, name: str, cluster_account: Optional[str] = None
    ) -> RegisteredLandingZone:
        """Registers a landing zone; the answer holds the agent token for ``mission lz``, shown
        this once. ``cluster_account`` is the Slurm account of a gateway."""
        request = _drop_none({"name": name, "cluster_account": cluster_account})
        registered = self._native.register_landing_zone(_id(station_id), json.dumps(request))
        return _one(RegisteredLandingZone, registered)

    def remove_landing_zone(self, station_id: Id, lz_id: Id) -> bool:
        """Removes a landing zone; ``False`` when the station has none by that id."""
        return self._native.remove_landing_zone(_id(station_id), _id(lz_id))

    # Cargo bays

    def list_cargo_bays(self) -> List[CargoBay]:
        """The server's default bay and yours (every bay, for an admin)."""
        return _many(CargoBay, self._native.list_cargo_bays())

    def get_cargo_bay(self, storage_id: Id) -> CargoBay:
        """One bay; :class:`NotFound` when it does not exist or is not yours."""
        return _one(CargoBay, self._native.get_cargo_bay(_id(storage_id)))

    def create_cargo_bay(
        self,
        name: str,
        kind: str = "s3",
        bucket: Optional[str] = None,
        prefix: Optional[str] = None,
        endpoint: Optional[str] = None,
        region: Optional[str] = None,
        access_key_id: Optional[str] = None,
        secret_access_key: Optional[str] = None,
        session_token: Optional[str] = None,
        path: Optional[str] = None,
        user_id: Optional[Id] = None,
    ) -> CargoBay:
        """Adds a bay: ``kind="s3"`` with a ``bucket`` (and credentials, else read anonymously), or
        ``kind="local"`` with a server ``path`` (admins only). The server checks it can list it
        first. Secrets are stored encrypted and never returned."""
        request = _drop_none({
            "name": name, "kind": kind, "bucket": bucket, "prefix": prefix, "endpoint": endpoint, "region": region,
            "access_key_id": access_key_id, "secret_access_key": secret_access_key,
            "session_token": session_token, "path": path, "user_id": user_id,
        })
        return _one(CargoBay, self._native.create_cargo_bay(json.dumps(request)))

    def delete_cargo_bay(self, storage_id: Id) -> bool:
        """Deletes a bay (not its objects); ``False`` when there was none of yours; :class:`Conflict`
        while missions still name it."""
        return self._native.delete_cargo_bay(_id(storage_id))

    # Webhooks

    def create_webhook(
        self,
        url: str,
        secret: Optional[str] = None,
        mission_ids: Sequence[Id] = (),
        kinds: Sequence[str] = (),
        all: bool = False,
    ) -> Webhook:
        """Registers a URL the server POSTs your events to from now on, signed with ``secret`` (16
        to 256 printable characters; without one the server makes one, returned in
        :attr:`Webhook.secret` this once). ``mission_ids`` and ``kinds`` (``"job"`` is every job
        transition) narrow the events; ``all`` (admins) is everyone's. Unless you are an admin, the
        URL must be under a target the server allows. Check deliveries with
        :func:`verify_webhook`."""
        request = _drop_none({
            "url": url, "secret": secret, "mission_ids": [_id(m) for m in mission_ids], "kinds": list(kinds),
            "all": all,
        })
        return _one(Webhook, self._native.create_webhook(json.dumps(request)))

    def import_image(
        self,
        archive: Union[str, "os.PathLike[str]"],
        name: str,
        visibility: str = "private",
        project_id: Optional[Id] = None,
        progress: Any = None,
    ) -> Image:
        """Imports a container image that missions' jobs run in: ``archive`` is an OCI or docker
        archive (as ``podman save`` or ``docker save`` writes it, not compressed), streamed to the
        service. ``name`` is unique among your images; ``visibility`` is ``"private"``,
        ``"project"`` (the members of ``project_id``, your personal project by default, see it)
        or ``"public"`` (admins). ``progress`` as for :meth:`upload`."""
        request = json.dumps(_drop_none({"name": name, "visibility": visibility,
                                         "project_id": _id(project_id) if project_id is not None else None}))
        path = os.fspath(archive)
        return _with_progress(progress, "import", lambda reporter: _one(
            Image, self._native.import_image(path, request, reporter)))

    def register_image_reference(
        self,
        reference: str,
        name: str,
        visibility: str = "private",
        project_id: Optional[Id] = None,
    ) -> Image:
        """Registers an image that landing zones pull from a container registry themselves:
        ``reference`` is ``HOST[:PORT]/PATH[:TAG]@sha256:HEX``, pinned by its manifest's digest,
        in a registry the server allows (admins may name any). The rest as for
        :meth:`import_image`."""
        request = json.dumps(_drop_none({"name": name, "reference": reference, "visibility": visibility,
                                         "project_id": _id(project_id) if project_id is not None else None}))
        return _one(Image, self._native.register_image_reference(request))

    def list_images(self) -> List[Image]:
        """The images you see (every one, for an admin), by name."""
        return _many(Image, self._native.list_images())

    def get_image(self, image_id: Id) -> Image:
        """One image; :class:`NotFound` when there is none you see."""
        return _one(Image, self._native.get_image(_id(image_id)))

    def delete_image(self, image_id: Id) -> bool:
        """Deletes an image of yours (any, for an admin), unless a job that has not ended runs in
        it; ``False`` when there is none you see."""
        return self._native.delete_image(_id(image_id))

    def list_webhooks(self) -> List[Webhook]:
        """Your webhooks (everyone's, for an admin), oldest first."""
        return _many(Webhook, self._native.list_webhooks())

    def get_webhook(self, webhook_id: Id) -> Webhook:
        """One webhook; :class:`NotFound` when it does not exist or is not yours."""
        return _one(Webhook, self._native.get_webhook(_id(webhook_id)))

    def delete_webhook(self, webhook_id: Id) -> bool:
        """Deletes a webhook: nothing more is sent to it. ``False`` when there was none of yours."""
        return self._native.delete_webhook(_id(webhook_id))

    def webhook_deliveries(
        self,
        webhook_id: Id,
        status: Optional[str] = None,
        before: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> List[WebhookDelivery]:
        """A webhook's deliveries, newest event first: only those ``"pending"``, ``"delivered"`` or
        ``"failed"`` with ``status``; only events numbered below ``before``; at most ``limit``
        (100 by default, 1000 at most)."""
        query = _drop_none({"status": status, "before": before, "limit": limit})
        return _many(WebhookDelivery, self._native.webhook_deliveries(_id(webhook_id), json.dumps(query)))
