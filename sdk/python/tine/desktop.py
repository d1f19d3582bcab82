"""Desktops: not in the SDK yet.

The daemon's desktop protocol is still being designed. When it lands, its
verbs go where every other verb goes: a function per route in
:mod:`tine._ops` returning a :class:`~tine._ops.Call` (with its models in
:mod:`tine.models`), a one-line method on :class:`tine.Client` and
:class:`tine.AsyncClient`, and, for a streamed display or input channel, a
stream class like :class:`tine.aio.ExecStream` over :mod:`tine._ws`.
Until then every entry point here raises :class:`NotImplementedError`.
"""

from __future__ import annotations

from typing import Any, NoReturn

MESSAGE = ("tine desktops are not supported by this SDK version yet: the daemon's desktop "
           "protocol is still being built; use sandboxes and exec for now")


def not_yet(verb: str = "desktops") -> NoReturn:
    """Raise the placeholder's :class:`NotImplementedError`."""
    raise NotImplementedError(f"{verb}: {MESSAGE}")


class Desktop:
    """Placeholder for a desktop session; constructing one raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        not_yet("Desktop")
