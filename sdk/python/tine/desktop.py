"""Desktops: a sandbox running Xvfb, a window manager, apps and tine's
guest, driven over the ACI, a WebSocket of JSON requests (docs/aci.md).

:meth:`tine.Client.create_desktop` (and ``desktops``, ``desktop``,
``delete_desktop``) manage them over HTTP like every verb (:mod:`tine._ops`);
:meth:`tine.Client.aci` opens a :class:`DesktopSession`,
:meth:`tine.AsyncClient.aci` an :class:`AsyncDesktopSession` (pipelined).
Both sessions share the protocol in :mod:`tine._aci`: each verb's request
and reply parsing is written once there; the sessions only move bytes.
:func:`tine.fleet.desktops` drives many desktops at once::

    with tine.Client() as c:
        d = c.create_desktop(apps=[["xterm"]])
        with c.aci(d.id) as s:
            s.type("ls /\\n")
            shot = s.screenshot()                 # shot.data: PNG bytes
        c.delete_desktop(d.id)

A request the desktop refuses raises :class:`ACIError` (``code``:
bad_request, off_screen, unknown_key, invalid_text, no_window, too_large,
timeout, internal); the session goes on.
"""

from __future__ import annotations

from ._aci import ToolAnswer, recommended_scale
from .aio import DesktopSession as AsyncDesktopSession
from .client import DesktopSession
from .errors import ACIError
from .models import (ActionError, ActionResult, Desktop, DesktopSpec, Screenshot, StepResult,
                     Welcome, Window)

__all__ = ["DesktopSession", "AsyncDesktopSession", "ACIError", "Desktop", "DesktopSpec", "ToolAnswer", "recommended_scale",
           "Welcome", "Window", "Screenshot", "StepResult", "ActionResult", "ActionError"]
