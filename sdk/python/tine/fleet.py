"""Run many sandboxes or calls concurrently on one event loop.

``fleet.map`` runs a coroutine function over items with at most ``limit``
at once; ``fleet.sandboxes`` creates N sandboxes, runs a coroutine in each
and deletes them; ``fleet.desktops`` does the same with desktops, each
with its ACI session open; ``fleet.invoke`` calls a function with many
payloads; ``fleet.forks`` forks N replicas of one golden snapshot and runs a
coroutine in each, ``fleet.desktop_forks`` the same with an ACI session open
on each replica, all of them sharing one frame cache (:mod:`tine.frames`).
``fleet.fork_each`` and ``fleet.fork_each_desktop`` are their sync twins,
for :class:`tine.Client`, a thread per replica.
Each returns a :class:`Results`: one :class:`Outcome` per item, in order,
holding a value or the exception it raised (one failure does not stop the
others)::

    async with tine.AsyncClient() as c:
        async def job(c, sb, i):
            return (await c.exec(sb.id, ["sh", "-c", f"echo {i}"])).stdout
        res = await fleet.sandboxes(c, 5, job, limit=5)
        print(res.values())          # raises an ExceptionGroup if any failed
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, Iterable, List, TypeVar, Union

from . import _ops as ops
from . import client as _sync
from . import models as m
from .aio import AsyncClient, DesktopSession
from .errors import Capacity
from .frames import FrameCache

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Outcome(Generic[T, R]):
    """One item's result: ``value``, or the ``error`` it raised."""
    index: int
    item: T
    value: R | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Results(List[Outcome[T, R]]):
    """The outcomes, in the items' order."""

    @property
    def errors(self) -> list[BaseException]:
        """The exceptions raised, in order."""
        return [o.error for o in self if o.error is not None]

    def values(self) -> list[R]:
        """Every value; an :class:`ExceptionGroup` of the failures if any failed."""
        errs = [e for e in self.errors if isinstance(e, Exception)]
        if errs:
            raise ExceptionGroup(f"{len(errs)} of {len(self)} failed", errs)
        return [o.value for o in self]  # type: ignore[misc]


async def map(fn: Callable[[T], Awaitable[R]], items: Iterable[T], *, limit: int = 8) -> Results[T, R]:
    """Await ``fn(item)`` for every item, at most ``limit`` at once."""
    sem = asyncio.Semaphore(max(1, limit))
    outcomes: Results[T, R] = Results(Outcome(i, it) for i, it in enumerate(items))

    async def one(o: Outcome[T, R]) -> None:
        async with sem:
            try:
                o.value = await fn(o.item)
            except Exception as e:  # collected, not raised: the others go on
                o.error = e

    await asyncio.gather(*(one(o) for o in outcomes))
    return outcomes


async def create_with_retry(client: AsyncClient, spec: ops.SpecLike = None, *,
                            attempts: int = 20) -> m.Sandbox:
    """Create a sandbox, waiting out :class:`~tine.errors.Capacity` answers
    (as ``retry_after`` says, at least 0.1 s) up to ``attempts`` times."""
    return await retry_capacity(lambda: client.create(spec), attempts=attempts)


async def retry_capacity(create: Callable[[], Awaitable[R]], *, attempts: int = 20) -> R:
    """Await ``create()``, again while it raises :class:`~tine.errors.Capacity`
    (as ``retry_after`` says, at least 0.1 s), up to ``attempts`` times."""
    for i in range(attempts):
        try:
            return await create()
        except Capacity as e:
            if i == attempts - 1:
                raise
            await asyncio.sleep(max(0.1, min(e.retry_after or 1.0, 30.0)))
    raise AssertionError("unreachable")


async def sandboxes(client: AsyncClient, n: int,
                    fn: Callable[[AsyncClient, m.Sandbox, int], Awaitable[R]], *,
                    spec: ops.SpecLike = None, limit: int = 8,
                    keep: bool = False) -> Results[int, R]:
    """Create ``n`` sandboxes (at most ``limit`` alive at once, retrying on
    capacity), await ``fn(client, sandbox, i)`` in each, and delete each
    when its ``fn`` is done (unless ``keep``)."""

    async def one(i: int) -> R:
        sb = await create_with_retry(client, spec)
        try:
            return await fn(client, sb, i)
        finally:
            if not keep:
                await asyncio.shield(_delete_quietly(client, sb.id))

    return await map(one, range(n), limit=limit)


async def _delete_quietly(client: AsyncClient, sid: str, desktop: bool = False) -> None:
    try:
        await (client.delete_desktop(sid) if desktop else client.delete(sid))
    except Exception:
        pass  # already gone (expired, or the daemon went away)


async def desktops(client: AsyncClient, n: int,
                   fn: Callable[[DesktopSession, m.Desktop], Awaitable[R]], *,
                   spec: ops.DesktopSpecLike = None, limit: int = 4,
                   keep: bool = False) -> Results[int, R]:
    """Create ``n`` desktops from ``spec`` (at most ``limit`` alive at once,
    retrying on capacity), open an ACI session on each, await
    ``fn(session, desktop)``, then close the session and delete the
    desktop (unless ``keep``), also when ``fn`` raised. The outcomes'
    items are the indexes 0..n-1."""

    async def one(i: int) -> R:
        d = await retry_capacity(lambda: client.create_desktop(spec))
        try:
            s = await client.aci(d.id)
            try:
                return await fn(s, d)
            finally:
                await asyncio.shield(s.close())
        finally:
            if not keep:
                await asyncio.shield(_delete_quietly(client, d.id, desktop=True))

    return await map(one, range(n), limit=limit)


async def forks(client: AsyncClient, snapshot_id: str, n: int,
                fn: Callable[[AsyncClient, m.Sandbox, int], Awaitable[R]], *,
                batch: int = 8, keep: bool = False, **fork_opts: Any) -> Results[int, R]:
    """The RL/eval shape: fork ``n`` replicas of one golden snapshot, in
    batches of ``batch`` (each batch all or none, retried on capacity),
    await ``fn(client, replica, i)`` in each, and delete each replica when
    its ``fn`` is done (unless ``keep``). ``fork_opts`` go to the fork
    (limits, ttl_seconds, idle_timeout_seconds, env). A desktop's snapshot
    forks into desktops, passed to ``fn`` the same way (open their ACI with
    ``client.aci(replica.id)``)."""
    sem = asyncio.Semaphore(max(1, batch))

    async def run_batch(start: int, k: int) -> list[Outcome[int, R]]:
        res = await retry_capacity(lambda: client.fork(snapshot_id, k, **fork_opts))
        replicas: list[m.Sandbox] = [*res.sandboxes, *res.desktops]

        async def one(j: int, r: m.Sandbox) -> Outcome[int, R]:
            o: Outcome[int, R] = Outcome(start + j, start + j)
            try:
                o.value = await fn(client, r, start + j)
            except Exception as e:  # collected, not raised: the others go on
                o.error = e
            finally:
                if not keep:
                    await asyncio.shield(_delete_quietly(client, r.id, desktop=bool(res.desktops)))
            return o

        async with sem:
            return list(await asyncio.gather(*(one(j, r) for j, r in enumerate(replicas))))

    starts = range(0, n, max(1, batch))
    done = await asyncio.gather(*(run_batch(s0, min(batch, n - s0)) for s0 in starts), return_exceptions=True)
    out: Results[int, R] = Results()
    for s0, b in zip(starts, done):
        if isinstance(b, BaseException):  # the batch's fork itself failed
            out.extend(Outcome(i, i, error=b) for i in range(s0, min(s0 + batch, n)))
        else:
            out.extend(b)
    return out


def _cache(frames: Union[FrameCache, bool, None]) -> FrameCache | None:
    return FrameCache() if frames is True else (frames or None)


async def desktop_forks(client: AsyncClient, snapshot_id: str, n: int,
                        fn: Callable[[DesktopSession, m.Sandbox, int], Awaitable[R]], *,
                        batch: int = 8, frames: Union[FrameCache, bool, None] = True,
                        keep: bool = False, **fork_opts: Any) -> Results[int, R]:
    """:func:`forks` for a desktop's snapshot: await ``fn(session,
    replica, i)`` with an ACI session open on each replica (closed after).
    Every session shares ``frames`` (default ``True``: a new
    :class:`~tine.frames.FrameCache` for this fleet; ``None``: none), so a
    screen another replica already fetched costs its hash, not its image."""
    cache = _cache(frames)

    async def job(c: AsyncClient, r: m.Sandbox, i: int) -> R:
        s = await c.aci(r.id)
        try:
            s.share_frames(cache)
            return await fn(s, r, i)
        finally:
            await asyncio.shield(s.close())

    return await forks(client, snapshot_id, n, job, batch=batch, keep=keep, **fork_opts)


def _retry_capacity_sync(create: Callable[[], R], attempts: int = 20) -> R:
    for i in range(attempts):
        try:
            return create()
        except Capacity as e:
            if i == attempts - 1:
                raise
            time.sleep(max(0.1, min(e.retry_after or 1.0, 30.0)))
    raise AssertionError("unreachable")


def fork_each(client: "_sync.Client", snapshot_id: str, n: int,
              fn: Callable[["_sync.Client", m.Sandbox, int], R], *,
              batch: int = 8, keep: bool = False, **fork_opts: Any) -> Results[int, R]:
    """The sync twin of :func:`forks`: fork ``n`` replicas of a snapshot
    in batches of ``batch`` (each all or none, retried on capacity), call
    ``fn(client, replica, i)`` for the replicas of a batch at once, a
    thread each, and delete each replica when its ``fn`` returned (unless
    ``keep``). ``fork_opts`` go to the fork."""
    batch = max(1, batch)
    out: Results[int, R] = Results()
    with ThreadPoolExecutor(max_workers=batch) as pool:
        for start in range(0, n, batch):
            k = min(batch, n - start)
            try:
                res = _retry_capacity_sync(lambda: client.fork(snapshot_id, k, **fork_opts))
            except Exception as e:  # the batch's fork itself failed
                out.extend(Outcome(i, i, error=e) for i in range(start, start + k))
                continue
            desktops = bool(res.desktops)
            replicas: list[m.Sandbox] = [*res.sandboxes, *res.desktops]

            def one(j: int, r: m.Sandbox) -> Outcome[int, R]:
                o: Outcome[int, R] = Outcome(start + j, start + j)
                try:
                    o.value = fn(client, r, start + j)
                except Exception as e:  # collected, not raised: the others go on
                    o.error = e
                finally:
                    if not keep:
                        try:
                            (client.delete_desktop if desktops else client.delete)(r.id)
                        except Exception:
                            pass  # already gone
                return o

            out.extend(pool.map(lambda jr: one(*jr), enumerate(replicas)))
    return out


def fork_each_desktop(client: "_sync.Client", snapshot_id: str, n: int,
                      fn: Callable[["_sync.DesktopSession", m.Sandbox, int], R], *,
                      batch: int = 8, frames: Union[FrameCache, bool, None] = True,
                      keep: bool = False, **fork_opts: Any) -> Results[int, R]:
    """The sync twin of :func:`desktop_forks`: ``fn(session, replica,
    i)`` with an ACI session open on each replica, every session sharing
    ``frames``."""
    cache = _cache(frames)

    def job(c: "_sync.Client", r: m.Sandbox, i: int) -> R:
        with c.aci(r.id) as s:
            s.share_frames(cache)
            return fn(s, r, i)

    return fork_each(client, snapshot_id, n, job, batch=batch, keep=keep, **fork_opts)


async def invoke(client: AsyncClient, name: str, payloads: Iterable[Any], *,
                 limit: int = 8) -> Results[Any, m.Invocation]:
    """Call function ``name`` once per payload, at most ``limit`` at once."""
    return await map(lambda p: client.invoke(name, p), payloads, limit=limit)
