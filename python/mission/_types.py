"""The results of the SDK as Python objects: frozen dataclasses that compare by value, turn into
plain dicts with ``to_dict()`` (or ``dataclasses.asdict``), and are built from the service's JSON
by :func:`_build`. Ids are strings, times ``datetime`` objects."""

from __future__ import annotations

import dataclasses
import datetime
import html
import itertools
import json
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar

T = TypeVar("T")


def _time(value: Optional[str]) -> Optional[datetime.datetime]:
    if value is None:
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        # Before Python 3.11 fromisoformat takes neither "Z" nor more than six fraction digits.
        text = value.replace("Z", "+00:00")
        head, sep, tail = text.partition(".")
        if sep:
            digits = "".join(itertools.takewhile(str.isdigit, tail))
            text = f"{head}.{digits[:6]}{tail[len(digits):]}"
        return datetime.datetime.fromisoformat(text)


_PLAIN, _TIME, _ONE, _EACH = range(4)
_plans: Dict[type, List[Tuple[str, int, Any]]] = {}


def _plan(cls: type) -> List[Tuple[str, int, Any]]:
    """How to read each field of the dataclass ``cls``: as it is, as a time (a name ending in
    ``_at``, or ``metadata={"time": True}``), as one nested result (``metadata={"of": cls}``)
    or a list of them (``{"each": cls}``); worked out once."""
    plan = _plans.get(cls)
    if plan is None:
        plan = []
        for field in dataclasses.fields(cls):
            if field.name.endswith("_at") or field.name == "at" or field.metadata.get("time"):
                plan.append((field.name, _TIME, None))
            elif "of" in field.metadata:
                plan.append((field.name, _ONE, field.metadata["of"]))
            elif "each" in field.metadata:
                plan.append((field.name, _EACH, field.metadata["each"]))
            else:
                plan.append((field.name, _PLAIN, None))
        _plans[cls] = plan
    return plan


def _build(cls: Type[T], data: Dict[str, Any]) -> T:
    """An instance of the dataclass ``cls`` from the service's JSON object."""
    values = {}
    for name, kind, nested in _plan(cls):
        value = data.get(name)
        if value is not None and kind != _PLAIN:
            if kind == _TIME:
                value = _time(value)
            elif kind == _ONE:
                value = _build(nested, value)
            else:
                value = [_build(nested, v) for v in value]
        values[name] = value
    return cls(**values)


def _one(cls: Type[T], text: str) -> T:
    """The result ``cls`` from the native module's JSON."""
    return _build(cls, json.loads(text))


def _many(cls: Type[T], text: str) -> List[T]:
    """A list of results ``cls`` from the native module's JSON."""
    return [_build(cls, item) for item in json.loads(text)]


class _Record:
    """What every result can do."""

    def to_dict(self) -> Dict[str, Any]:
        """The result as plain dicts and lists (times stay ``datetime`` objects)."""
        fields: Dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        return fields


@dataclasses.dataclass(frozen=True)
class RetryPolicy(_Record):
    """How a job is tried again after it fails, as the same job: ``max_attempts`` in all (the
    first included, at most 20); ``on`` the failures that retry (``exit_code``,
    ``out_of_memory``, ``lost``, ``time_limit``; all by default); ``backoff`` seconds before
    the second attempt, doubled before each one after; after running out of memory the next
    attempt asks for ``memory_factor`` times the memory, up to ``max_memory`` megabytes."""

    max_attempts: int
    on: List[str] = dataclasses.field(default_factory=lambda: ["exit_code", "out_of_memory", "lost", "time_limit"])
    backoff: int = 0
    memory_factor: float = 1.5
    max_memory: Optional[int] = None

    def _request(self) -> Dict[str, Any]:
        """The policy as a run or mission request carries it."""
        return {name: value for name, value in dataclasses.asdict(self).items() if value is not None}


@dataclasses.dataclass(frozen=True)
class Mission(_Record):
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
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)
    retry: Optional[RetryPolicy] = dataclasses.field(default=None, metadata={"of": RetryPolicy})
    project_id: Optional[str] = None
    #: The container image its jobs run in (a name or ``sha256:`` digest), if it names one.
    image: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Image(_Record):
    """A container image that missions' jobs run in: an OCI or docker archive stored by the
    service, by ``digest`` (``sha256:`` and the archive's SHA-256)."""

    image_id: str
    name: str
    digest: str
    size: int
    format: str
    visibility: str
    owner_id: str
    project_id: str
    created_at: datetime.datetime
    #: For an image landing zones pull from a registry: its reference.
    reference: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class JobImage(_Record):
    """The image a job runs in, as resolved when it was submitted."""

    image_id: str
    digest: str
    reference: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class JobSession(_Record):
    """The interactive session a job is: ``kind`` (``web``, ``jupyter``, ``vscode``), its
    ``idle_timeout`` in minutes, and, once its app answers and while it runs, the ``url`` only its
    owner can open."""

    kind: str
    idle_timeout: Optional[int] = None
    url: Optional[str] = None
    ready_at: Optional[datetime.datetime] = None


@dataclasses.dataclass(frozen=True)
class JobGang(_Record):
    """What a job on several landing zones at once asked for and got: ``nodes`` landing zones,
    its command started on each (``launch`` ``each``) or on the first only (``first``), and,
    once placed, ``lz_ids``, the landing zones in rank order."""

    nodes: int
    launch: str = "each"
    lz_ids: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class WarningSignal(_Record):
    """The signal a job gets ``seconds`` before it is ended (``main_only``: its main process
    alone)."""

    signal: str
    seconds: int
    main_only: bool = False


@dataclasses.dataclass(frozen=True)
class FileListing(_Record):
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
class JobTransition(_Record):
    """One step of a job's history."""

    status: str
    at: datetime.datetime
    detail: Optional[str]


@dataclasses.dataclass(frozen=True)
class Cost(_Record):
    """An amount of money in a currency (an ISO 4217 code such as ``EUR``)."""

    amount: float
    currency: str


@dataclasses.dataclass(frozen=True)
class EnergyPart(_Record):
    """One part of a job's energy in watt-hours (before the PUE), and where it came from:
    ``model`` (the station's settings), ``rapl``, ``gpu_counter``, ``gpu_power_samples`` or
    ``slurm`` (measured)."""

    wh: float
    source: str


@dataclasses.dataclass(frozen=True)
class EnergyParts(_Record):
    """A job's energy by part: its processors', memory's and GPUs'."""

    cpu: Optional[EnergyPart] = dataclasses.field(default=None, metadata={"of": EnergyPart})
    memory: Optional[EnergyPart] = dataclasses.field(default=None, metadata={"of": EnergyPart})
    gpu: Optional[EnergyPart] = dataclasses.field(default=None, metadata={"of": EnergyPart})


@dataclasses.dataclass(frozen=True)
class JobUsage(_Record):
    """What a job used, as its landing zone measured it: seconds of wall and CPU time, CPU time
    over the CPUs it held times its wall time, and its peak memory in megabytes; and what it
    cost by its station's settings as it ended: kWh, grams of CO2e, and money where the station
    has prices; ``energy_parts`` says which parts of its energy were measured and which
    modelled."""

    wall_time: float
    cpu_time: Optional[float] = None
    cpu_efficiency: Optional[float] = None
    peak_memory: Optional[int] = None
    energy_kwh: Optional[float] = None
    co2e_g: Optional[float] = None
    cost: Optional[Cost] = dataclasses.field(default=None, metadata={"of": Cost})
    energy_parts: Optional[EnergyParts] = dataclasses.field(default=None, metadata={"of": EnergyParts})


@dataclasses.dataclass(frozen=True)
class PendingReason(_Record):
    """Why a job has not started yet: ``kind`` is one of no_landing_zone, resources, priority,
    dependency, quota, batch_system, backoff, held; ``detail`` says it in words (which landing zone, which
    resources, which job, how many jobs ahead)."""

    kind: str
    detail: str


@dataclasses.dataclass(frozen=True)
class QueuePosition(_Record):
    """Where a queued job stands in line, 1 being first: ``station`` among the queued jobs of its
    station, ``own`` among its user's queued jobs there (its own sub-queue); counted when read."""

    station: int
    own: int


@dataclasses.dataclass(frozen=True)
class JobArray(_Record):
    """A job array and how far its elements got (``Client.get_job_array``); ``failed`` counts
    lost ones too, ``running`` those placed and not ended."""

    array_id: str
    mission_id: str
    size: int
    queued: int
    running: int
    completed: int
    failed: int
    stopped: int
    #: Its number: its first element's.
    number: int = 0


@dataclasses.dataclass(frozen=True)
class UsageSummary(_Record):
    """What your ended jobs used, summed (``Client.job_usage``)."""

    jobs: int
    wall_hours: float
    cpu_hours: float
    cpu_hours_held: float
    mean_cpu_efficiency: Optional[float]
    over_requested_memory: int
    energy_kwh: float = 0.0
    co2e_g: float = 0.0


@dataclasses.dataclass(frozen=True)
class Job(_Record):
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
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)
    log_cap: Optional[int] = None
    log_truncated: bool = False
    after_ok: List[str] = dataclasses.field(default_factory=list)
    after_any: List[str] = dataclasses.field(default_factory=list)
    after_not_ok: List[str] = dataclasses.field(default_factory=list)
    pending_reason: Optional[PendingReason] = dataclasses.field(default=None, metadata={"of": PendingReason})
    position: Optional[QueuePosition] = dataclasses.field(default=None, metadata={"of": QueuePosition})
    usage: Optional[JobUsage] = dataclasses.field(default=None, metadata={"of": JobUsage})
    retry: Optional[RetryPolicy] = dataclasses.field(default=None, metadata={"of": RetryPolicy})
    #: The container image it runs in, if it runs in one.
    image: Optional[JobImage] = dataclasses.field(default=None, metadata={"of": JobImage})
    attempt: int = 1
    rerun_of: Optional[str] = None
    array_id: Optional[str] = None
    array_index: Optional[int] = None
    #: Its number: unique in the service, given in submission order.
    number: int = 0
    #: The number of its array (its first element's), if it is an element of one.
    array_number: Optional[int] = None
    project_id: Optional[str] = None
    #: The interactive session it is, if it is one.
    session: Optional[JobSession] = dataclasses.field(default=None, metadata={"of": JobSession})
    #: The landing zones it runs on at once, if it asked for more than one.
    gang: Optional[JobGang] = dataclasses.field(default=None, metadata={"of": JobGang})
    #: The signal it gets before it is ended, if it asked for one.
    signal: Optional[WarningSignal] = dataclasses.field(default=None, metadata={"of": WarningSignal})
    #: It goes back in line when its time limit, a reclaim or a node's failure ends it.
    requeue: bool = False


@dataclasses.dataclass(frozen=True)
class MissionTypeSummary(_Record):
    """A mission type, as ``list_mission_types`` lists it."""

    id: str
    name: str
    version: str
    description: str


@dataclasses.dataclass(frozen=True)
class ResourceDefaults(_Record):
    """Resources a job of a mission type gets when its request leaves them out."""

    cpu_count: int
    memory_amount: int
    gpu_count: int
    time_limit: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class MissionType(_Record):
    """A mission type in detail: its settings and the command its jobs run."""

    id: str
    name: str
    version: str
    description: str
    settings: Dict[str, str]
    command: List[str]
    resources: ResourceDefaults = dataclasses.field(metadata={"of": ResourceDefaults})


@dataclasses.dataclass(frozen=True)
class User(_Record):
    """A user of the service."""

    user_id: str
    username: str
    admin: bool
    created_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class ShellRun(_Record):
    """How a command run in a job ended: its exit code (128 + a signal that killed it; ``None``
    when it could not run to its end, ``error`` then saying why) and its output."""

    exit_code: Optional[int]
    stdout: str
    stderr: str
    error: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TransferSummary(_Record):
    """What a download did: files moved, files left alone (same content already there), bytes moved."""

    transferred: int
    skipped: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class Station(_Record):
    """A station: a group of landing zones that jobs run on. ``open`` stations take every user's
    jobs; ``reclaim`` ones give projects below their nominal limits the room others borrowed."""

    station_id: str
    name: str
    description: str
    owner_id: Optional[str]
    open: bool
    created_at: datetime.datetime
    #: Whether jobs borrowing room beyond their project's nominal here are stopped and put back
    #: in line when a project below its nominal needs the room.
    reclaim: bool = True


@dataclasses.dataclass(frozen=True)
class StationMember(_Record):
    """A user who may run jobs on a station."""

    user_id: str
    username: str
    added_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Project(_Record):
    """A project: the team missions belong to and jobs are charged to. ``personal`` is the user
    whose personal project it is (its id is theirs); ``role`` yours in it (``viewer``, ``member``
    or ``manager``; ``None`` for an admin outside it)."""

    project_id: str
    name: str
    description: str
    members: int
    created_at: datetime.datetime
    updated_at: datetime.datetime
    personal: Optional[str] = None
    role: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ResourcesInUse(_Record):
    """What a project holds on a station: CPUs, megabytes and GPUs of its running jobs, and
    how many of its jobs run and wait."""

    cpus: int
    memory_mb: int
    gpus: int
    running_jobs: int
    queued_jobs: int


@dataclasses.dataclass(frozen=True)
class StationLimits(_Record):
    """A project's limits on one station (``limits``: ``share``, ``nominal`` and
    ``borrowing_limit`` as ``{"cpus", "memory_mb", "gpus"}``, ``max_running_jobs``,
    ``max_queued_jobs``, each absent when not set) and what it uses there."""

    station_id: str
    station_name: str
    limits: Dict[str, Any]
    in_use: ResourcesInUse = dataclasses.field(metadata={"of": ResourcesInUse})
    updated_at: Optional[datetime.datetime] = None


@dataclasses.dataclass(frozen=True)
class UsageDay(_Record):
    """What the ended jobs of a group used on one day (UTC)."""

    #: The day, as YYYY-MM-DD.
    day: str
    jobs: int
    cpu_hours_held: float
    gpu_hours: float
    energy_kwh: float
    co2e_g: float


@dataclasses.dataclass(frozen=True)
class UsageGroup(_Record):
    """What the ended jobs of one group used: ``group`` is a project's or user's name or a
    label's value (``None`` for jobs without the label), ``id`` the project's or user's id."""

    group: Optional[str]
    jobs: int
    wall_hours: float
    cpu_hours: float
    cpu_hours_held: float
    gpu_hours: float
    memory_gb_hours: float
    mean_cpu_efficiency: Optional[float] = None
    id: Optional[str] = None
    energy_kwh: float = 0.0
    co2e_g: float = 0.0
    #: What they were charged, one amount per currency (``None``: nothing charged).
    cost: Optional[List[Cost]] = dataclasses.field(default=None, metadata={"each": Cost})
    #: With ``since``: their use per day that one of them ended.
    daily: Optional[List[UsageDay]] = dataclasses.field(default=None, metadata={"each": UsageDay})


@dataclasses.dataclass(frozen=True)
class UsageReport(_Record):
    """What the ended jobs you may see used, per group (``group_by``: ``project``, ``user`` or
    ``label:KEY``)."""

    group_by: str
    groups: List[UsageGroup] = dataclasses.field(metadata={"each": UsageGroup})
    since: Optional[datetime.datetime] = dataclasses.field(default=None, metadata={"time": True})
    until: Optional[datetime.datetime] = dataclasses.field(default=None, metadata={"time": True})


@dataclasses.dataclass(frozen=True)
class AuditEntry(_Record):
    """One change, as the audit trail recorded it: who (``actor``, ``actor_role``: ``admin`` or
    ``user``), in which request (``request_id``), what (``action`` such as ``job.stop``) to which
    resource (``target_kind``, ``target_id``, ``target_name``) of which project, and what changed
    (``changes``: the fields given, never a secret)."""

    seq: int
    at: datetime.datetime
    actor_id: Optional[str]
    actor: Optional[str]
    actor_role: str
    request_id: str
    action: str
    target_kind: str
    target_id: str
    changes: Dict[str, Any]
    target_name: Optional[str] = None
    project_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class AuditPage(_Record):
    """A page of the audit trail, newest first; pass ``next_before`` as ``before`` for the next."""

    entries: List[AuditEntry] = dataclasses.field(metadata={"each": AuditEntry})
    next_before: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class BudgetStatus(_Record):
    """A project's budget (``budget``: ``cpu_hours``, ``gpu_hours``, ``kwh`` and ``money``
    (``amount`` and ``currency``), each absent when not limited, and ``period``: ``week``,
    ``month`` or ``total``) and what its jobs that ended this period were charged."""

    project_id: str
    budget: Dict[str, Any]
    period_start: datetime.datetime = dataclasses.field(metadata={"time": True})
    spent_cpu_hours: float
    spent_gpu_hours: float
    updated_at: datetime.datetime
    period_end: Optional[datetime.datetime] = dataclasses.field(default=None, metadata={"time": True})
    spent_kwh: float = 0.0
    spent_money: Optional[Cost] = dataclasses.field(default=None, metadata={"of": Cost})


@dataclasses.dataclass(frozen=True)
class ProjectMember(_Record):
    """A member of a project with their role: ``viewer`` reads, ``member`` owns missions and
    runs jobs, ``manager`` also manages members."""

    user_id: str
    username: str
    role: str
    added_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Resources(_Record):
    """CPUs, memory (megabytes) and GPUs."""

    cpu_count: int
    memory_amount: int
    gpu_count: int


@dataclasses.dataclass(frozen=True)
class LandingZone(_Record):
    """A compute host (or cluster gateway) of a station; ``resources`` is what it offers when online,
    ``in_use`` what its unfinished jobs hold."""

    lz_id: str
    station_id: str
    name: str
    online: bool
    resources: Optional[Resources] = dataclasses.field(metadata={"of": Resources})
    last_seen_at: Optional[datetime.datetime]
    created_at: datetime.datetime
    cluster_account: Optional[str] = None
    pilot_of: Optional[str] = None
    in_use: Optional[Resources] = dataclasses.field(default=None, metadata={"of": Resources})


@dataclasses.dataclass(frozen=True)
class RegisteredLandingZone(_Record):
    """A landing zone just registered, with the agent token that is shown this once."""

    landing_zone: LandingZone = dataclasses.field(metadata={"of": LandingZone})
    token: str

    def __repr__(self) -> str:
        return f"RegisteredLandingZone(landing_zone={self.landing_zone!r}, token=<hidden>)"


@dataclasses.dataclass(frozen=True)
class CargoBay(_Record):
    """A storage location missions read from and write to: the server's ``default`` bay, an ``s3``
    bucket or a ``local`` directory. Secrets are never returned; ``has_credentials`` says whether
    there are any."""

    storage_id: str
    name: str
    kind: str
    user_id: Optional[str]
    has_credentials: bool
    created_at: Optional[datetime.datetime]
    bucket: Optional[str] = None
    prefix: Optional[str] = None
    endpoint: Optional[str] = None
    region: Optional[str] = None
    path: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Webhook(_Record):
    """A URL the server POSTs your events to, signed. ``secret`` is set only in the answer to a
    registration that asked the server to make one."""

    webhook_id: str
    user_id: str
    url: str
    mission_ids: List[str]
    kinds: List[str]
    all: bool
    created_at: datetime.datetime
    secret: Optional[str] = None

    def __repr__(self) -> str:
        secret = "<hidden>" if self.secret else "None"
        return f"Webhook(webhook_id={self.webhook_id!r}, url={self.url!r}, kinds={self.kinds!r}, secret={secret})"


@dataclasses.dataclass(frozen=True)
class WebhookDelivery(_Record):
    """One event on its way to one webhook: ``pending`` (tried again at ``next_attempt_at``),
    ``delivered`` or ``failed``, with the last answer."""

    delivery_id: str
    webhook_id: str
    event_seq: int
    event_kind: str
    status: str
    attempts: int
    created_at: datetime.datetime
    response_status: Optional[int] = None
    last_error: Optional[str] = None
    next_attempt_at: Optional[datetime.datetime] = None
    finished_at: Optional[datetime.datetime] = None


@dataclasses.dataclass(frozen=True)
class Tokens(_Record):
    """A signed-in session's tokens; the access token expires at ``expires_at``."""

    access_token: str
    refresh_token: str
    expires_at: datetime.datetime

    def __repr__(self) -> str:
        return f"Tokens(access_token=<hidden>, refresh_token=<hidden>, expires_at={self.expires_at!r})"


@dataclasses.dataclass(frozen=True)
class DeviceCode(_Record):
    """What the device flow asks the user to do: open ``verification_uri`` and enter ``user_code``
    (or open ``verification_uri_complete``, which has it filled in). Shows as a link and the code
    in a notebook."""

    verification_uri: str
    user_code: str
    verification_uri_complete: Optional[str] = None
    expires_in: Optional[int] = None

    def __str__(self) -> str:
        return f"To sign in, open {self.verification_uri} and enter the code {self.user_code}"

    def _repr_html_(self) -> str:
        link = html.escape(self.verification_uri_complete or self.verification_uri, quote=True)
        code = html.escape(self.user_code)
        minutes = f" within {self.expires_in // 60} minutes" if self.expires_in else ""
        return (f'<div class="mission-sign-in"><p>To sign in, open <a href="{link}" target="_blank" '
                f'rel="noopener">{html.escape(self.verification_uri)}</a> and confirm the code{minutes}:</p>'
                f'<p style="font-size:1.6em;font-family:monospace;letter-spacing:0.1em">{code}</p></div>')
