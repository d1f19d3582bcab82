"""A frame cache shared by the ACI sessions of a fleet (Shinken §10).

Replicas forked from one golden snapshot show the same screen until their
paths part. With one :class:`FrameCache` shared by their sessions
(``session.share_frames(cache)``, or the fleet helpers'
``frames=`` argument), a screenshot first asks the guest for the frame's
hash alone (``if_none_match: "*"``, docs/aci.md: no image, nothing
encoded); when another session already fetched that frame, the image comes
from the cache, else it is fetched once, kept, and handed to every session
that asked for it meanwhile. N replicas observing one screen cost one
image, not N; where every screen differs, each costs its image and a probe
(one more round trip and capture than a plain screenshot).

The cache is safe across threads (the sync client) and tasks (asyncio);
the session code drives it: :meth:`FrameCache.answer` says what a probe's
answer needs, a :class:`Flight` is a fetch another session makes, a
:class:`Lead` the fetch the caller makes.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Mapping, Union

from . import models as m

ANY_FRAME = "*"
"""``if_none_match`` that matches any frame: the answer is its hash alone."""

DEFAULT_MAX_BYTES = 64 << 20

_Key = tuple[str, str, str, int, int, int]


@dataclass
class FrameCacheStats:
    """What a cache did: images a guest sent (``fetched``), screenshots
    answered from the cache instead (``shared``) and the image bytes those
    did not send (``saved_bytes``); images held now (``frames``, ``bytes``)."""
    fetched: int = 0
    shared: int = 0
    saved_bytes: int = 0
    frames: int = 0
    bytes: int = 0


class Flight:
    """A fetch of one frame under way; waiters wake when it lands."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def wait(self, timeout: float | None = None) -> None:
        """Block until the fetch landed (sync sessions)."""
        self._done.wait(timeout)

    async def wait_async(self) -> None:
        """Await the fetch landing (asyncio sessions)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._done.is_set():
                return
            self._waiters.append((loop, fut))
        await fut

    def _finish(self) -> None:
        with self._lock:
            self._done.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))


class Lead:
    """The caller fetches the frame: :meth:`land` the fetched screenshot
    (it returns the screenshot to hand back), or :meth:`abandon` on error."""

    def __init__(self, cache: "FrameCache", key: _Key, welcome: m.Welcome, options: Mapping[str, Any]) -> None:
        self._cache, self._key, self._welcome, self._options = cache, key, welcome, options

    def land(self, shot: m.Screenshot) -> m.Screenshot:
        got = key_of(self._welcome, self._options, shot)
        self._cache._land(got, shot.data or None, fetched=True)
        if got != self._key:  # the screen moved since the probe
            self._cache._land(self._key, None, fetched=False)
        return shot

    def abandon(self) -> None:
        self._cache._land(self._key, None, fetched=False)


def key_of(welcome: m.Welcome, options: Mapping[str, Any], shot: m.Screenshot) -> _Key:
    """What names an encoded image: its pixels (hash and size) and how it
    was encoded."""
    if shot.format == "jpeg":
        return (shot.frame_hash, "jpeg", getattr(welcome, "jpeg", "") or "",
                int(options.get("quality") or 80), shot.width, shot.height)
    return (shot.frame_hash, shot.format, "", 0, shot.width, shot.height)


def probe_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A screenshot's options asking for the hash alone."""
    return {**options, "if_none_match": ANY_FRAME}


def fetch_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A screenshot's options asking for the image."""
    return {k: v for k, v in options.items() if k != "if_none_match"}


class FrameCache:
    """Images by frame hash, at most ``max_bytes`` of them (least recently
    used dropped first), shared by many ACI sessions."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes if max_bytes > 0 else DEFAULT_MAX_BYTES
        self._lock = threading.Lock()
        self._images: OrderedDict[_Key, bytes] = OrderedDict()
        self._size = 0
        self._flights: dict[_Key, Flight] = {}
        self._stats = FrameCacheStats()

    @property
    def stats(self) -> FrameCacheStats:
        with self._lock:
            return replace(self._stats, frames=len(self._images), bytes=self._size)

    def answer(self, welcome: m.Welcome, options: Mapping[str, Any],
               shot: m.Screenshot) -> Union[m.Screenshot, Flight, Lead]:
        """What the answer ``shot`` to a probe (asked with
        :func:`probe_options` of ``options``) needs: the screenshot to hand
        back, a :class:`Flight` to wait for (then ask again), or a
        :class:`Lead`: fetch with :func:`fetch_options` and land it."""
        if not shot.not_modified:  # a guest without frame_probe sent the image
            if shot.data:
                self._land(key_of(welcome, options, shot), shot.data, fetched=True)
            return shot
        if options.get("if_none_match") and options["if_none_match"] == shot.frame_hash:
            return shot  # the caller has this frame: not_modified, as asked
        key = key_of(welcome, options, shot)
        with self._lock:
            img = self._images.get(key)
            if img is not None:
                self._images.move_to_end(key, last=False)
                self._stats.shared += 1
                self._stats.saved_bytes += len(img)
                return replace(shot, not_modified=False, data=img)
            flight = self._flights.get(key)
            if flight is not None:
                return flight
            self._flights[key] = Flight()
        return Lead(self, key, welcome, options)

    def _land(self, key: _Key, img: bytes | None, fetched: bool) -> None:
        with self._lock:
            flight = self._flights.pop(key, None)
            if img is not None:
                if fetched:
                    self._stats.fetched += 1
                if key not in self._images and len(img) <= self.max_bytes:
                    self._images[key] = img
                    self._images.move_to_end(key, last=False)
                    self._size += len(img)
                    while self._size > self.max_bytes:
                        _, old = self._images.popitem(last=True)
                        self._size -= len(old)
        if flight is not None:
            flight._finish()
