"""The API's verbs without I/O, shared by the sync and asyncio clients.

Each verb is a function returning a :class:`Call`: the HTTP request to send
and how to turn a 2xx answer into a Python value. A transport (``client``'s
or ``aio``'s) sends the call and hands the answer to :meth:`Call.parse`; a
non-2xx answer becomes a :class:`~tine.errors.TineError` in
:func:`~tine.errors.error_from_response`. Adding a verb is a function here
plus a one-line method on each client (the desktops' ACI verbs, which go
over a WebSocket instead, are built the same way in :mod:`tine._aci`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Generic, Mapping, Sequence, TypeVar, Union

from . import models as m
from .models import from_json, to_json

T = TypeVar("T")

DEFAULT_SOCKET = "/run/tine/tine.sock"
"""Where ``tine serve`` listens unless told otherwise."""

USER_AGENT = "tine-python/0.1"

Body = Union[bytes, IO[bytes], None]
"""A request body: bytes, or a binary file object streamed in chunks."""


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon is: a unix ``socket`` path, or a TCP ``host`` and
    ``port`` (``tls`` for https) with a bearer ``token``."""
    socket: str | None = None
    host: str | None = None
    port: int = 80
    tls: bool = False
    token: str | None = None

    @property
    def host_header(self) -> str:
        """The Host header: a placeholder name on the unix socket."""
        return "tine" if self.socket else f"{self.host}:{self.port}"


def resolve_endpoint(socket: str | None = None, host: str | None = None,
                     token: str | None = None) -> Endpoint:
    """Pick the daemon as the Go client's ``FromEnv`` does, arguments first:
    ``host`` (or ``TINE_HOST``: host:port, or an http:// or https:// URL)
    with ``token`` (or ``TINE_TOKEN``, or the file ``TINE_TOKEN_FILE``
    names); else ``socket`` (or ``TINE_SOCKET``, or /run/tine/tine.sock).
    An explicit ``socket`` wins over ``TINE_HOST``."""
    if socket is None and host is None:
        host = os.environ.get("TINE_HOST") or None
    if host is None:
        return Endpoint(socket=socket or os.environ.get("TINE_SOCKET") or DEFAULT_SOCKET)
    if token is None:
        token = os.environ.get("TINE_TOKEN") or None
        token_file = os.environ.get("TINE_TOKEN_FILE")
        if token is None and token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
    u = urllib.parse.urlsplit(host if "://" in host else "http://" + host)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"TINE_HOST / host: want host:port or an http(s) URL, not {host!r}")
    tls = u.scheme == "https"
    return Endpoint(host=u.hostname, port=u.port or (443 if tls else 80), tls=tls, token=token)


@dataclass
class Call(Generic[T]):
    """One HTTP request and the parser of its 2xx answer's body. With a
    ``sink``, the transport writes the answer's body there as it arrives
    and ``parse`` gets ``b""``."""
    method: str
    path: str
    parse: Callable[[bytes], T]
    query: Mapping[str, str] | None = None
    body: Body = None
    content_type: str | None = None
    sink: IO[bytes] | None = None

    @property
    def target(self) -> str:
        """The request target: path and query string."""
        return self.path + ("?" + urllib.parse.urlencode(self.query) if self.query else "")

    def headers(self, ep: Endpoint) -> dict[str, str]:
        """The request's headers (without framing: Content-Length or
        Transfer-Encoding are the transport's)."""
        h = {"Host": ep.host_header, "User-Agent": USER_AGENT, "Accept": "*/*"}
        if self.content_type:
            h["Content-Type"] = self.content_type
        if ep.token:
            h["Authorization"] = "Bearer " + ep.token
        return h


# --- helpers -------------------------------------------------------------

def _json_body(obj: Any) -> bytes:
    return json.dumps(to_json(obj), separators=(",", ":")).encode()


def _none(_: bytes) -> None:
    return None


def _raw(b: bytes) -> bytes:
    return b


def _decode(cls: type[T]) -> Callable[[bytes], T]:
    return lambda b: from_json(cls, json.loads(b))


def _sandbox_path(sid: str, rest: str = "") -> str:
    return "/v1/sandboxes/" + urllib.parse.quote(sid, safe="") + rest


def _function_path(name: str) -> str:
    return "/v1/functions/" + urllib.parse.quote(name, safe="")


def _json_call(method: str, path: str, parse: Callable[[bytes], T], body: Any = None,
               query: Mapping[str, str] | None = None) -> Call[T]:
    if body is None:
        return Call(method, path, parse, query=query)
    return Call(method, path, parse, query=query, body=_json_body(body),
                content_type="application/json")


# --- daemon --------------------------------------------------------------

def health() -> Call[dict[str, Any]]:
    """GET /v1/health."""
    return Call("GET", "/v1/health", json.loads)


def features() -> Call[list[dict[str, Any]]]:
    """GET /v1/features: the host's checks (as ``tine doctor``)."""
    return Call("GET", "/v1/features", lambda b: json.loads(b).get("checks") or [])


# --- sandboxes -----------------------------------------------------------

SpecLike = Union[m.SandboxSpec, Mapping[str, Any], None]


def create(spec: SpecLike = None) -> Call[m.Sandbox]:
    """POST /v1/sandboxes."""
    return _json_call("POST", "/v1/sandboxes", _decode(m.Sandbox), body=spec or {})


def list_sandboxes() -> Call[list[m.Sandbox]]:
    """GET /v1/sandboxes."""
    return Call("GET", "/v1/sandboxes",
                lambda b: [from_json(m.Sandbox, s) for s in json.loads(b).get("sandboxes") or []])


def get(sid: str) -> Call[m.Sandbox]:
    """GET /v1/sandboxes/{id}."""
    return Call("GET", _sandbox_path(sid), _decode(m.Sandbox))


def delete(sid: str) -> Call[None]:
    """DELETE /v1/sandboxes/{id}."""
    return Call("DELETE", _sandbox_path(sid), _none)


def set_network(sid: str, policy: Union[m.NetworkPolicy, Mapping[str, Any]]) -> Call[m.Network]:
    """PUT /v1/sandboxes/{id}/network."""
    return _json_call("PUT", _sandbox_path(sid) + "/network", _decode(m.Network), body=policy)


def exec_request(argv: Sequence[str], *, stdin: bytes | str | None = None,
                 env: Mapping[str, str] | Sequence[str] | None = None,
                 workdir: str | None = None, timeout: float | None = None,
                 max_output_bytes: int | None = None, tty: bool = False,
                 cols: int | None = None, rows: int | None = None) -> dict[str, Any]:
    """An exec request's JSON (``timeout`` in seconds; ``env`` a mapping or
    KEY=VALUE strings)."""
    if isinstance(argv, str):
        raise TypeError("argv is a list of strings, e.g. ['sh', '-c', 'echo hi']")
    req: dict[str, Any] = {"argv": list(argv)}
    if env:
        req["env"] = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else list(env)
    if workdir:
        req["workdir"] = workdir
    if stdin:
        req["stdin"] = base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode()
    if timeout:
        req["timeout_ms"] = max(1, round(timeout * 1000))
    if max_output_bytes:
        req["max_output_bytes"] = max_output_bytes
    if tty:
        req["tty"] = True
        if cols and rows:
            req["cols"], req["rows"] = cols, rows
    return req


def exec_(sid: str, request: dict[str, Any]) -> Call[m.ExecResult]:
    """POST /v1/sandboxes/{id}/exec (JSON mode)."""
    return _json_call("POST", _sandbox_path(sid, "/exec"), _decode(m.ExecResult), body=request)


def exec_ws_path(sid: str) -> str:
    """The exec stream's WebSocket route."""
    return _sandbox_path(sid, "/exec/ws")


# --- files ---------------------------------------------------------------

def read_file(sid: str, path: str, sink: IO[bytes] | None = None) -> Call[bytes]:
    """GET /v1/sandboxes/{id}/files."""
    return Call("GET", _sandbox_path(sid, "/files"), _raw, query={"path": path}, sink=sink)


def write_file(sid: str, path: str, data: bytes | str | IO[bytes], *, mode: int | None = None,
               uid: int | None = None, gid: int | None = None) -> Call[m.FileInfo]:
    """PUT /v1/sandboxes/{id}/files (``mode`` as an int, e.g. 0o755)."""
    q = {"path": path}
    if mode is not None:
        q["mode"] = format(mode, "o")
    if uid is not None:
        q["uid"] = str(uid)
    if gid is not None:
        q["gid"] = str(gid)
    body = data.encode() if isinstance(data, str) else data
    return Call("PUT", _sandbox_path(sid, "/files"), _decode(m.FileInfo), query=q, body=body,
                content_type="application/octet-stream")


def stat(sid: str, path: str) -> Call[m.FileInfo]:
    """GET /v1/sandboxes/{id}/files/stat."""
    return Call("GET", _sandbox_path(sid, "/files/stat"), _decode(m.FileInfo), query={"path": path})


def list_dir(sid: str, path: str) -> Call[list[m.FileInfo]]:
    """GET /v1/sandboxes/{id}/files/list."""
    return Call("GET", _sandbox_path(sid, "/files/list"),
                lambda b: [from_json(m.FileInfo, e) for e in json.loads(b).get("entries") or []],
                query={"path": path})


def mkdir(sid: str, path: str, *, mode: int | None = None, parents: bool = False,
          uid: int | None = None, gid: int | None = None) -> Call[m.FileInfo]:
    """POST /v1/sandboxes/{id}/files/mkdir."""
    req = {"path": path, "mode": mode, "parents": parents or None, "uid": uid, "gid": gid}
    return _json_call("POST", _sandbox_path(sid, "/files/mkdir"), _decode(m.FileInfo), body=req)


def remove(sid: str, path: str, *, recursive: bool = False) -> Call[None]:
    """DELETE /v1/sandboxes/{id}/files."""
    q = {"path": path, **({"recursive": "true"} if recursive else {})}
    return Call("DELETE", _sandbox_path(sid, "/files"), _none, query=q)


def download_archive(sid: str, path: str, sink: IO[bytes] | None = None) -> Call[bytes]:
    """GET /v1/sandboxes/{id}/files/archive (a tar stream)."""
    return Call("GET", _sandbox_path(sid, "/files/archive"), _raw, query={"path": path}, sink=sink)


def upload_archive(sid: str, path: str, tar: bytes | IO[bytes]) -> Call[None]:
    """PUT /v1/sandboxes/{id}/files/archive."""
    return Call("PUT", _sandbox_path(sid, "/files/archive"), _none, query={"path": path},
                body=tar, content_type="application/x-tar")


# --- functions and scripts -----------------------------------------------

FunctionSpecLike = Union[m.FunctionSpec, Mapping[str, Any]]


def put_function(spec: FunctionSpecLike) -> Call[m.Function]:
    """PUT /v1/functions/{name}."""
    name = spec.name if isinstance(spec, m.FunctionSpec) else spec.get("name")
    if not name:
        raise ValueError("a function spec needs a name")
    return _json_call("PUT", _function_path(name), _decode(m.Function), body=spec)


def functions() -> Call[list[m.Function]]:
    """GET /v1/functions."""
    return Call("GET", "/v1/functions", lambda b: [from_json(m.Function, f) for f in json.loads(b) or []])


def function(name: str) -> Call[m.Function]:
    """GET /v1/functions/{name}."""
    return Call("GET", _function_path(name), _decode(m.Function))


def delete_function(name: str) -> Call[None]:
    """DELETE /v1/functions/{name}."""
    return Call("DELETE", _function_path(name), _none)


def _invoke(path: str, payload: Any, raw: bool) -> Call[m.Invocation]:
    parse = lambda b: m.Invocation.from_wire(json.loads(b))  # noqa: E731
    if raw:
        return Call("POST", path, parse, body=bytes(payload), content_type="application/octet-stream")
    return Call("POST", path, parse, body=json.dumps(payload).encode(), content_type="application/json")


def invoke(name: str, payload: Any = None) -> Call[m.Invocation]:
    """POST /v1/functions/{name}/invoke with a JSON payload."""
    return _invoke(_function_path(name) + "/invoke", payload, raw=False)


def invoke_raw(name: str, data: bytes) -> Call[m.Invocation]:
    """POST /v1/functions/{name}/invoke with raw bytes."""
    return _invoke(_function_path(name) + "/invoke", data, raw=True)


def put_script(src: str | bytes) -> Call[str]:
    """PUT /v1/scripts; the answer's digest."""
    body = src.encode() if isinstance(src, str) else src
    return Call("PUT", "/v1/scripts", lambda b: str(json.loads(b)["digest"]), body=body,
                content_type="text/x-python")


def invoke_script(digest: str, payload: Any = None, *, raw: bool = False) -> Call[m.Invocation]:
    """POST /v1/scripts/{digest}/invoke (JSON payload, or bytes with ``raw``)."""
    return _invoke("/v1/scripts/" + urllib.parse.quote(digest, safe="") + "/invoke", payload, raw)


# --- desktops ------------------------------------------------------------

DesktopSpecLike = Union[m.DesktopSpec, Mapping[str, Any], None]


def _desktop_path(did: str, rest: str = "") -> str:
    return "/v1/desktops/" + urllib.parse.quote(did, safe="") + rest


def desktop_spec(spec: DesktopSpecLike = None, *, width: int | None = None,
                 height: int | None = None, apps: Sequence[Sequence[str]] | None = None,
                 limits: m.Limits | Mapping[str, Any] | None = None,
                 ttl_seconds: int | None = None,
                 idle_timeout_seconds: int | None = None) -> dict[str, Any]:
    """A desktop create's JSON: ``spec`` (a :class:`~tine.models.DesktopSpec`
    or a dict) with the keyword arguments given laid over it."""
    body: dict[str, Any] = dict(to_json(spec) or {})
    if apps is not None:
        if any(isinstance(a, str) for a in apps):
            raise TypeError("apps is a list of argvs, e.g. [['xterm'], ['xclock', '-digital']]")
        body["apps"] = [list(a) for a in apps]
    for k, v in (("width", width), ("height", height), ("limits", limits),
                 ("ttl_seconds", ttl_seconds), ("idle_timeout_seconds", idle_timeout_seconds)):
        if v is not None:
            body[k] = to_json(v)
    return body


def create_desktop(body: Mapping[str, Any]) -> Call[m.Desktop]:
    """POST /v1/desktops (``body`` from :func:`desktop_spec`)."""
    return _json_call("POST", "/v1/desktops", _decode(m.Desktop), body=body)


def list_desktops() -> Call[list[m.Desktop]]:
    """GET /v1/desktops."""
    return Call("GET", "/v1/desktops", lambda b: [from_json(m.Desktop, d) for d in json.loads(b) or []])


def get_desktop(did: str) -> Call[m.Desktop]:
    """GET /v1/desktops/{id}."""
    return Call("GET", _desktop_path(did), _decode(m.Desktop))


def delete_desktop(did: str) -> Call[None]:
    """DELETE /v1/desktops/{id}."""
    return Call("DELETE", _desktop_path(did), _none)


# --- snapshots -----------------------------------------------------------

def snapshot(sid: str, *, tier: str | None = None, name: str | None = None) -> Call[m.Snapshot]:
    """POST /v1/sandboxes/{id}/snapshots."""
    body = {k: v for k, v in (("tier", tier), ("name", name)) if v is not None}
    return _json_call("POST", _sandbox_path(sid, "/snapshots"), _decode(m.Snapshot), body=body)


def list_snapshots() -> Call[list[m.Snapshot]]:
    """GET /v1/snapshots."""
    return Call("GET", "/v1/snapshots",
                lambda b: [from_json(m.Snapshot, s) for s in json.loads(b).get("snapshots") or []])


def get_snapshot(snap: str) -> Call[m.Snapshot]:
    """GET /v1/snapshots/{sid}."""
    return Call("GET", _snapshot_path(snap), _decode(m.Snapshot))


def delete_snapshot(snap: str) -> Call[None]:
    """DELETE /v1/snapshots/{sid}."""
    return Call("DELETE", _snapshot_path(snap), _none)


def fork_body(count: int = 1, *, tier: str | None = None, limits: Any = None,
              ttl_seconds: int | None = None, idle_timeout_seconds: int | None = None,
              env: Mapping[str, str] | Sequence[str] | None = None,
              hostname: str | None = None) -> dict[str, Any]:
    """A fork request's body (the fields left out take the source's)."""
    body: dict[str, Any] = {"count": count}
    for k, v in (("tier", tier), ("limits", limits), ("ttl_seconds", ttl_seconds),
                 ("idle_timeout_seconds", idle_timeout_seconds), ("hostname", hostname)):
        if v is not None:
            body[k] = to_json(v)
    if env is not None:
        body["env"] = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else list(env)
    return body


def fork(snap: str, body: Mapping[str, Any]) -> Call[m.ForkResult]:
    """POST /v1/snapshots/{sid}/fork (``body`` from :func:`fork_body`)."""
    return _json_call("POST", _snapshot_path(snap, "/fork"), _decode(m.ForkResult), body=body)


def fork_sandbox(sid: str, body: Mapping[str, Any]) -> Call[m.ForkResult]:
    """POST /v1/sandboxes/{id}/fork: snapshot, then fork."""
    return _json_call("POST", _sandbox_path(sid, "/fork"), _decode(m.ForkResult), body=body)


def _snapshot_path(snap: str, rest: str = "") -> str:
    return "/v1/snapshots/" + urllib.parse.quote(snap, safe="") + rest


def aci_ws_path(did: str) -> str:
    """The ACI session's WebSocket route (docs/aci.md)."""
    return _desktop_path(did, "/aci")


# --- code-interpreter sessions --------------------------------------------

def _session_path(sid: str, session: str = "", rest: str = "") -> str:
    tail = "/sessions" + ("/" + urllib.parse.quote(session, safe="") if session else "")
    return _sandbox_path(sid, tail + rest)


def session_spec(env: Mapping[str, str] | Sequence[str] | None = None,
                 workdir: str | None = None, language: str | None = None,
                 forkable: bool = False) -> dict[str, Any]:
    """A session's create body."""
    body: dict[str, Any] = {}
    if forkable:
        body["forkable"] = True
    if language:
        body["language"] = language
    if env:
        body["env"] = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else list(env)
    if workdir:
        body["workdir"] = workdir
    return body


def create_session(sid: str, body: Mapping[str, Any]) -> Call[m.SessionInfo]:
    """POST /v1/sandboxes/{id}/sessions."""
    return _json_call("POST", _session_path(sid), _decode(m.SessionInfo), body=dict(body) or {})


def list_sessions(sid: str) -> Call[list[m.SessionInfo]]:
    """GET /v1/sandboxes/{id}/sessions."""
    return Call("GET", _session_path(sid),
                lambda b: [from_json(m.SessionInfo, s) for s in json.loads(b).get("sessions") or []])


def get_session(sid: str, session: str) -> Call[m.SessionInfo]:
    """GET /v1/sandboxes/{id}/sessions/{sid}."""
    return Call("GET", _session_path(sid, session), _decode(m.SessionInfo))


def delete_session(sid: str, session: str) -> Call[None]:
    """DELETE /v1/sandboxes/{id}/sessions/{sid}."""
    return Call("DELETE", _session_path(sid, session), _none)


def cell_request(code: str, timeout: float | None = None) -> dict[str, Any]:
    """A cell's body (``timeout`` in seconds)."""
    if not isinstance(code, str):
        raise TypeError("code is a str of Python source")
    req: dict[str, Any] = {"code": code}
    if timeout:
        req["timeout_ms"] = max(1, round(timeout * 1000))
    return req


def run_cell(sid: str, session: str, req: Mapping[str, Any]) -> Call[m.Execution]:
    """POST /v1/sandboxes/{id}/sessions/{sid}/run."""
    return _json_call("POST", _session_path(sid, session, "/run"), _decode(m.Execution), body=req)


def run_cell_ws_path(sid: str, session: str) -> str:
    """The streamed cell's WebSocket route."""
    return _session_path(sid, session, "/run/ws")


def interrupt_session(sid: str, session: str) -> Call[m.SessionInfo]:
    """POST /v1/sandboxes/{id}/sessions/{sid}/interrupt."""
    return Call("POST", _session_path(sid, session, "/interrupt"), _decode(m.SessionInfo))


def fork_session(sid: str, session: str, count: int) -> Call[m.SessionForkResult]:
    """POST /v1/sandboxes/{id}/sessions/{sid}/fork."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"fork count {count!r}: want an int of at least 1")
    return _json_call("POST", _session_path(sid, session, "/fork"), _decode(m.SessionForkResult), body={"count": count})


def restart_session(sid: str, session: str) -> Call[m.SessionInfo]:
    """POST /v1/sandboxes/{id}/sessions/{sid}/restart."""
    return Call("POST", _session_path(sid, session, "/restart"), _decode(m.SessionInfo))
