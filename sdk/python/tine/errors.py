"""Errors: every failure the daemon reports is a :class:`TineError` carrying
the API's error ``code`` and ``message``; each code has its own subclass
(:class:`NotFound`, :class:`Capacity`, ...), so callers can catch either."""

from __future__ import annotations

import json
from typing import Any, Mapping


class TineError(Exception):
    """A failure of a call to the daemon.

    ``code`` is the API's error code (``"not_found"``, ``"capacity"``, ...), or
    ``""`` when the daemon never answered (see :class:`TransportError`);
    ``status`` is the HTTP status (0 on an exec stream or without an answer);
    ``retry_after`` is the seconds the daemon asks to wait (capacity errors).
    """

    code: str = ""

    def __init__(self, message: str, *, code: str | None = None, status: int = 0,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"tine: {self.message} ({self.code})" if self.code else f"tine: {self.message}"


class TransportError(TineError):
    """The daemon could not be reached, or the connection broke mid-call."""


class InvalidArgument(TineError):
    """400: malformed JSON, an unknown field, a bad value or path."""
    code = "invalid_argument"


class Unauthorized(TineError):
    """401: TCP without the right bearer token."""
    code = "unauthorized"


class Forbidden(TineError):
    """403: the sandbox refuses the file operation (read-only, permissions)."""
    code = "forbidden"


class NotFound(TineError):
    """404: no such sandbox, file, function, script or route."""
    code = "not_found"


class MethodNotAllowed(TineError):
    """405: the path is a route, but not for this method."""
    code = "method_not_allowed"


class Conflict(TineError):
    """409: the sandbox is not running; the file exists; the directory is not empty."""
    code = "conflict"


class TooLarge(TineError):
    """413: the body or file is over the limit; the sandbox's disk is full."""
    code = "too_large"


class Capacity(TineError):
    """429: the host budget is spent; ``retry_after`` says when to retry."""
    code = "capacity"


class Internal(TineError):
    """500: the daemon failed."""
    code = "internal"


class Unsupported(TineError):
    """501: the host cannot do it (e.g. limits without cgroups)."""
    code = "unsupported"


class Unavailable(TineError):
    """503: the daemon is shutting down."""
    code = "unavailable"


_BY_CODE: dict[str, type[TineError]] = {
    c.code: c for c in (InvalidArgument, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict,
                        TooLarge, Capacity, Internal, Unsupported, Unavailable)
}


def error_for(code: str, message: str, *, status: int = 0,
              retry_after: float | None = None) -> TineError:
    """The :class:`TineError` subclass for an API error code (unknown codes
    give a plain :class:`TineError` that keeps the code)."""
    cls = _BY_CODE.get(code, TineError)
    return cls(message, code=code, status=status, retry_after=retry_after)


def error_from_response(status: int, reason: str, headers: Mapping[str, str],
                        body: bytes) -> TineError:
    """Build the error of a non-2xx answer from its status, headers and body
    (``{"code": ..., "message": ...}``; anything else is ``internal``)."""
    code, message = "internal", ""
    try:
        wire = json.loads(body)
        if isinstance(wire, dict) and wire.get("code"):
            code, message = str(wire["code"]), str(wire.get("message", ""))
    except ValueError:
        pass
    if not message:
        message = f"HTTP {status} {reason}: {body[:1024].decode('utf-8', 'replace').strip()}"
    retry_after: float | None = None
    ra = _header(headers, "Retry-After")
    if ra:
        try:
            retry_after = float(ra)
        except ValueError:
            pass
    return error_for(code, message, status=status, retry_after=retry_after)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


class ACIError(Exception):
    """A request a desktop's ACI session refused (docs/aci.md, "Errors"):
    ``code`` is bad_request, off_screen, unknown_key, invalid_text,
    no_window, too_large, timeout or internal, and ``message`` says why.
    The session goes on. Not a :class:`TineError`: the daemon's HTTP API
    did not fail, one request on the desktop did. ``reply`` is the whole
    reply (a step's results are in it), ``image`` its image if any."""

    def __init__(self, code: str, message: str, *, reply: dict[str, Any] | None = None,
                 image: bytes | None = None) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message
        self.reply: dict[str, Any] = reply or {}
        self.image = image

    def __str__(self) -> str:
        return f"aci: {self.message} ({self.code})"
