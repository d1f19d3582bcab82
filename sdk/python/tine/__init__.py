"""tine: the Python SDK of tine's daemon (``tine serve``).

:class:`Client` (sync) and :class:`AsyncClient` (asyncio) speak the daemon's
HTTP API (api/openapi.yaml) over its unix socket or over TCP with a bearer
token: sandboxes, exec (captured, or streamed over a WebSocket with
``exec_stream``), files, warm functions and pool scripts, and desktops
driven over the ACI (:mod:`tine.desktop`), stateful Python sessions
(:mod:`tine.session`). :mod:`tine.fleet` runs many at
once. Every failure the daemon reports is a
:class:`TineError` carrying the API's error code.
"""

from . import desktop, fleet, frames
from .frames import FrameCache
from ._ops import DEFAULT_SOCKET
from .aio import AsyncClient
from .aio import DesktopSession as AsyncDesktopSession
from .aio import ExecStream as AsyncExecStream
from .client import Client, DesktopSession, ExecStream
from .session import AsyncSession, Session
from .errors import (ACIError, Capacity, Conflict, Forbidden, Internal, InvalidArgument,
                     MethodNotAllowed, NotFound,
                     TineError, TooLarge, TransportError, Unauthorized, Unavailable, Unsupported)
from .models import (ActionError, ActionResult, Bind, Desktop, DesktopSpec, ExecExit,
                     ExecResult, FileInfo, Function, FunctionLimits, FunctionSpec, Invocation, InvocationError, InvocationTimings, Limits,
                     ForkResult, Injection, Network, NetworkPolicy, Port, Sandbox, SandboxSpec, Screenshot,
                     Script, Snapshot, StepResult, Timings, Usage, Welcome, Window, SessionSpec, SessionInfo,
                     Result, CellError, Execution)

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "ExecStream", "AsyncExecStream", "fleet", "frames", "FrameCache", "DEFAULT_SOCKET",
    "desktop", "DesktopSession", "AsyncDesktopSession", "ACIError", "Desktop", "DesktopSpec",
    "Welcome", "Window", "Screenshot", "StepResult", "ActionResult", "ActionError",
    "TineError", "TransportError", "InvalidArgument", "Unauthorized", "Forbidden", "NotFound",
    "MethodNotAllowed", "Conflict", "TooLarge", "Capacity", "Internal", "Unsupported", "Unavailable",
    "Sandbox", "SandboxSpec", "Limits", "Bind", "Usage", "Port", "Injection", "Network", "NetworkPolicy", "ExecResult", "ExecExit", "Timings",
    "FileInfo", "FunctionSpec", "FunctionLimits", "Function", "Invocation", "InvocationError",
    "InvocationTimings", "Script", "Snapshot", "ForkResult",
    "Session", "AsyncSession", "SessionSpec", "SessionInfo", "Result", "CellError", "Execution",
]
