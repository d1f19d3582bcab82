"""The API's objects as dataclasses (the Go package ``api``'s types).

Answers are decoded leniently (unknown fields are ignored, so a newer daemon
does not break an older SDK); requests are encoded strictly, without the
fields left ``None`` (the daemon refuses unknown fields). Specs may be given
as these dataclasses or as plain dicts.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar, Union

T = TypeVar("T")


def to_json(obj: Any) -> Any:
    """Turn a dataclass (or a dict, list of them) into JSON values, dropping
    fields and keys whose value is ``None``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(v) for f in dataclasses.fields(obj)
                if (v := getattr(obj, f.name)) is not None}
    if isinstance(obj, Mapping):
        return {k: to_json(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def from_json(cls: type[T], data: Any) -> T:
    """Build dataclass ``cls`` from a decoded JSON object, recursing into
    fields typed as dataclasses, lists of them and datetimes."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: _convert(hints[k], v) for k, v in (data or {}).items() if k in known}
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(args[0], value) if len(args) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v) for v in value]
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_json(hint, value)
    if hint is datetime.datetime and isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    if hint is bytes and isinstance(value, str):
        return base64.b64decode(value)
    return value


# --- sandboxes -----------------------------------------------------------

@dataclass
class Limits:
    """A sandbox's resource limits."""
    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None


@dataclass
class Bind:
    """A host directory mounted into a sandbox."""
    source: str
    target: str
    read_only: bool | None = None


@dataclass
class Port:
    """A published port: host_ip:host_port on the host reaches port inside
    (docs/network.md); host_port 0 lets the kernel pick."""
    port: int
    host_ip: str | None = None
    host_port: int | None = None
    protocol: str | None = None  # tcp (default) or udp
    proxy: bool | None = None  # through the daemon's TCP listener (header Tine-Port: ID:PORT)


@dataclass
class Injection:
    """Headers tine's proxy adds to an egress sandbox's plain-HTTP requests
    for host (tls: sent on over HTTPS); the values never enter the sandbox."""
    host: str
    headers: dict[str, str]
    tls: bool | None = None


@dataclass
class NetworkPolicy:
    """An egress policy: HOST, *.DOMAIN, ADDRESS or CIDR, each with an
    optional :PORT; with any allow rule, everything else is refused."""
    allow: list[str] | None = None
    deny: list[str] | None = None


@dataclass
class Network:
    """A sandbox's network now: mode, address, policy, published ports."""
    mode: str = "loopback"
    address: str = ""
    resolver: str = ""
    allow: list[str] | None = None
    deny: list[str] | None = None
    ports: list[Port] | None = None


@dataclass
class SandboxSpec:
    """The body of a create; every field is optional (docs/api.md)."""
    rootfs: str | None = None
    image: str | None = None  # an OCI image as the root (docs/images.md)
    disk_bytes: int | None = None
    env: list[str] | None = None
    workdir: str | None = None
    hostname: str | None = None
    network: str | None = None  # none, loopback (default) or egress
    allow: list[str] | None = None
    deny: list[str] | None = None
    publish: list[Port] | None = None
    inject: list[Injection] | None = None
    seccomp: str | None = None
    binds: list[Bind] | None = None
    limits: Limits | None = None
    ttl_seconds: int | None = None
    idle_timeout_seconds: int | None = None


@dataclass
class Usage:
    """A sandbox's resource use, read from its cgroup."""
    memory_bytes: int = 0
    peak_memory_bytes: int = 0
    pids: int = 0
    cpu_time_ms: float = 0.0


@dataclass
class Sandbox:
    """A live sandbox as the daemon describes it."""
    id: str
    state: str  # running, stopping, exited
    pid: int = 0
    created_at: datetime.datetime | None = None
    expires_at: datetime.datetime | None = None
    last_active_at: datetime.datetime | None = None
    idle_expires_at: datetime.datetime | None = None
    execs: int = 0
    spec: SandboxSpec = field(default_factory=SandboxSpec)
    usage: Usage = field(default_factory=Usage)
    forked_from: str = ""  # the snapshot it was forked from, if any
    network: Network | None = None


# --- exec ----------------------------------------------------------------

@dataclass
class Timings:
    """An exec's wall-clock phases in milliseconds."""
    start: float = 0.0
    run: float = 0.0
    total: float = 0.0


@dataclass
class ExecExit:
    """How a command ended: ``exit_code`` follows the shell (128+N on signal
    N, 124 timeout, 137 oom, 127 not found, 126 not executable) and
    ``reason`` says which (exit, signal, oom, timeout, not-found,
    not-executable)."""
    exit_code: int
    reason: str
    signal: int | None = None
    timings_ms: Timings = field(default_factory=Timings)

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_code == 0


@dataclass
class ExecResult(ExecExit):
    """The answer of a JSON-mode exec: the exit and the captured output."""
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False


# --- files ---------------------------------------------------------------

@dataclass
class FileInfo:
    """A file inside a sandbox; ``type`` is file, dir, symlink or other and
    ``mode`` the permission bits (e.g. ``0o644``)."""
    path: str
    name: str
    type: str
    size: int = 0
    mode: int = 0
    mod_time: datetime.datetime | None = None
    uid: int = 0
    gid: int = 0
    link: str | None = None


# --- functions -----------------------------------------------------------

@dataclass
class FunctionLimits:
    """Per-request limits of a function."""
    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None
    timeout_seconds: float | None = None


@dataclass
class FunctionSpec:
    """A warm function (docs/functions.md). ``entry`` is a host path (its
    directory is visible read-only inside at /tine/fn)."""
    name: str
    runtime: str = "python"  # python, node or exec
    entry: str | None = None
    handler: str | None = None
    command: list[str] | None = None
    preload: list[str] | None = None
    python: str | None = None
    image: str | None = None  # an OCI image as the root (docs/images.md)
    requirements: str | None = None  # host path of a pip requirements file (with image)
    find_links: str | None = None  # host directory of the packages it installs
    index_url: str | None = None  # a PEP 503 index it installs from (egress: its host:port only)
    node: str | None = None
    network: str | None = None  # isolated (default), shared or egress
    allow: list[str] | None = None  # egress: as a sandbox's
    deny: list[str] | None = None
    concurrency: int | None = None
    cold_after_seconds: float | None = None
    limits: FunctionLimits | None = None


@dataclass
class Function:
    """A registered function; ``state`` is warm, warming or cold."""
    spec: FunctionSpec
    state: str
    pid: int | None = None
    calls: int = 0
    warm_ms: float | None = None


@dataclass
class InvocationError:
    """What a handler raised (type, message, traceback; line of a script's
    syntax error), or why the request failed."""
    type: str
    message: str
    traceback: str | None = None
    line: int | None = None


@dataclass
class InvocationTimings:
    """One request's phases in milliseconds (docs/functions.md)."""
    cold: bool = False
    warm_ms: float | None = None
    queue: float = 0.0
    dispatch: float = 0.0
    fork: float = 0.0
    admit: float = 0.0
    isolate: float = 0.0
    run: float = 0.0
    reply: float = 0.0
    total: float = 0.0
    throttled: bool = False


@dataclass
class Invocation:
    """The outcome of a function or script call. ``status`` is ok, error,
    timeout, oom or crashed: a handler's exception is not a Python error
    here but ``status == "error"`` with :attr:`error`. ``result`` is the
    handler's JSON value; ``result_bytes`` the decoded ``result_base64``
    (a handler that returned bytes; an exec function's stdout)."""
    status: str
    result: Any = None
    result_bytes: bytes | None = None
    error: InvocationError | None = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    exit_code: int | None = None
    timings: InvocationTimings = field(default_factory=InvocationTimings)

    @property
    def ok(self) -> bool:
        """Whether the handler returned normally."""
        return self.status == "ok"

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Invocation":
        """Decode the daemon's answer (``result_base64`` becomes bytes)."""
        data = dict(data)
        if "result_base64" in data:
            data["result_bytes"] = data.pop("result_base64")
        return from_json(cls, data)


@dataclass
class Script:
    """A registered pool script: its sha256 ``digest`` names it."""
    digest: str
    size: int = 0


# --- desktops ------------------------------------------------------------

@dataclass
class DesktopSpec:
    """The body of a desktop's create (every field optional): the screen's
    ``width`` and ``height`` (default 1280x800), ``apps`` (argvs started
    once the window manager is up; the create answers when each has mapped
    a window), the sandbox's ``limits`` (memory default 1 GiB), and
    ``ttl_seconds`` / ``idle_timeout_seconds`` as for sandboxes;
    ``osworld`` serves OSWorld's guest API (docs/osworld.md; implies
    ``a11y`` and ``cdp``), ``a11y`` starts the accessibility bus, ``cdp``
    publishes Chromium's DevTools port; ``memory_tier`` is accepted and
    ignored: every desktop is one memory snapshots can capture (its X
    server keeps the screen in a file, not in System V shared memory)."""
    width: int | None = None
    height: int | None = None
    apps: list[list[str]] | None = None
    osworld: bool | None = None
    a11y: bool | None = None
    cdp: bool | None = None
    image: str | None = None  # an OCI image with Xvfb, a window manager and the apps
    memory_tier: bool | None = None
    limits: Limits | None = None
    ttl_seconds: int | None = None
    idle_timeout_seconds: int | None = None


@dataclass
class Desktop(Sandbox):
    """A desktop: a sandbox (its ``id`` works with exec and the files
    routes) running Xvfb, a window manager and tine's guest; its screen's
    size, and how long it took to be ready."""
    width: int = 0
    height: int = 0
    ready_ms: float = 0.0
    osworld: str = ""
    """``host:port`` of its OSWorld guest API, when made with ``osworld``."""
    cdp: str = ""
    """``host:port`` of its Chromium DevTools port, with ``cdp`` or ``osworld``."""


@dataclass
class Welcome:
    """An ACI session's first message: the protocol ``version``, the
    guest's ``capabilities`` and the screen's size."""
    version: int = 0
    capabilities: list[str] = field(default_factory=list)
    width: int = 0
    height: int = 0
    type: str = "welcome"


@dataclass
class Window:
    """A top-level window of a desktop (``id`` for focus_window /
    close_window)."""
    id: int
    title: str = ""
    class_: str = ""  # the wire's "class"
    x: int = 0
    y: int = 0
    width: int = 0
    height: int = 0
    focused: bool = False
    instance: str = ""
    pid: int = 0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Window":
        data = dict(data)
        if "class" in data:
            data["class_"] = data.pop("class")
        return from_json(cls, data)


@dataclass
class Screenshot:
    """A screenshot: ``data`` is the encoded image (PNG or JPEG, per
    ``format``), empty when ``not_modified`` (the screen's ``frame_hash``
    equalled ``if_none_match``). ``frame_hash`` is a hash of the pixels
    after crop and scale: equal pictures have equal hashes."""
    frame_hash: str = ""
    width: int = 0
    height: int = 0
    format: str = ""
    not_modified: bool = False
    data: bytes = b""


@dataclass
class ActionError:
    """Why one of a step's actions failed (an ACI error ``code``)."""
    code: str
    message: str = ""


@dataclass
class ActionResult:
    """One step action's outcome: ``status`` ok, error or timeout."""
    status: str
    error: ActionError | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class StepResult:
    """A step's answer: each action's outcome in order, then the one
    observation asked for (``windows``, ``cursor``, ``screenshot``, else
    ``None``); :attr:`image` is the screenshot's bytes."""
    results: list[ActionResult] = field(default_factory=list)
    windows: list[Window] | None = None
    cursor: tuple[int, int] | None = None
    screenshot: Screenshot | None = None

    @property
    def image(self) -> bytes | None:
        """The observed screenshot's encoded bytes (``None`` if none was
        asked for; empty if not modified)."""
        return self.screenshot.data if self.screenshot is not None else None

    @property
    def ok(self) -> bool:
        """Whether every action succeeded."""
        return all(r.ok for r in self.results)


# --- snapshots -----------------------------------------------------------

@dataclass
class Snapshot:
    """An immutable capture of a sandbox or desktop (docs/snapshots.md):
    its ``tier`` (fs, memory), ``kind`` (sandbox, desktop: what its forks
    are), the ``source`` sandbox, the ``parent`` snapshot that sandbox was
    forked from, how many layers a fork stacks (``depth``), the bytes it
    added, how long the source was frozen, the ``processes`` the memory
    tier captured, and its live ``forks``."""
    id: str
    tier: str = "fs"
    kind: str = "sandbox"
    name: str = ""
    source: str = ""
    parent: str = ""
    created_at: datetime.datetime | None = None
    depth: int = 0
    bytes: int = 0
    paused_ms: float = 0.0
    processes: int = 0
    forks: int = 0


@dataclass
class ForkResult:
    """The answer to a fork: the snapshot forked and its replicas, as
    ``sandboxes`` or, for a desktop's snapshot, ``desktops``."""
    snapshot: Snapshot
    sandboxes: list[Sandbox] = field(default_factory=list)
    desktops: list[Desktop] = field(default_factory=list)
    fork_ms: float = 0.0

    @property
    def ids(self) -> list[str]:
        """Every replica's id."""
        return [s.id for s in self.sandboxes] + [d.id for d in self.desktops]


# --- code-interpreter sessions --------------------------------------------

@dataclass
class SessionSpec:
    """What a session starts with: ``language`` (python), ``env``
    (KEY=VALUE strings added to the sandbox's), ``workdir``, and
    ``forkable`` (the session can be forked live: ``Session.fork``)."""
    language: str | None = None
    env: list[str] | None = None
    workdir: str | None = None
    forkable: bool = False


@dataclass
class SessionInfo:
    """A session as the daemon describes it: ``state`` idle, busy or dead
    (``dead_reason`` says why), the cells run and queued, the
    interpreter's pid in the sandbox."""
    id: str
    sandbox_id: str = ""
    language: str = "python"
    state: str = "idle"
    dead_reason: str = ""
    execution_count: int = 0
    queued: int = 0
    pid: int = 0
    created_at: datetime.datetime | None = None
    spec: SessionSpec = field(default_factory=SessionSpec)


@dataclass
class SessionForkResult:
    """The answer to a live fork: ``sandboxes[i]`` holds ``sessions[i]``,
    each a copy of the forked session's state; ``snapshot`` is the id of
    the file-tier snapshot their files start from."""
    sandboxes: list[Sandbox] = field(default_factory=list)
    sessions: list[SessionInfo] = field(default_factory=list)
    snapshot: str = ""
    fork_ms: float = 0.0


@dataclass
class Result:
    """One rich result of a cell: ``data`` maps MIME types to the value
    (text as str, images base64, application/json a JSON value);
    ``is_main_result`` marks the value of the cell's last expression."""
    data: dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False

    @property
    def text(self) -> str | None:
        """The text/plain (the object's repr)."""
        return self.data.get("text/plain")

    @property
    def html(self) -> str | None:
        return self.data.get("text/html")

    @property
    def png(self) -> bytes | None:
        """The image/png, decoded."""
        v = self.data.get("image/png")
        return base64.b64decode(v) if v else None

    @property
    def json(self) -> Any:
        return self.data.get("application/json")


@dataclass
class CellError:
    """What a cell raised: ``name`` (the exception's type), ``value`` (its
    message) and the ``traceback``, starting at the user's code."""
    name: str
    value: str = ""
    traceback: str = ""


@dataclass
class Execution:
    """The whole result of a cell. ``status``: ok, error, interrupted,
    timeout, oom or dead; ``session_dead`` says why when the session did
    not survive it."""
    execution_count: int = 0
    status: str = "ok"
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    results: list[Result] = field(default_factory=list)
    error: CellError | None = None
    session_dead: str = ""
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def main(self) -> Result | None:
        """The value of the cell's last expression, if it had one."""
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> str | None:
        """The main result's text/plain: ``s.run("1 + 1").text == "2"``."""
        r = self.main
        return r.text if r else None
