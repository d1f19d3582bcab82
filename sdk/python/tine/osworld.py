"""A tine provider for OSWorld's ``DesktopEnv`` (docs/osworld.md).

Each "VM" is a tine desktop made with ``osworld``: its guest serves
OSWorld's guest API on a port the daemon publishes, and Chromium's DevTools
on another. ``path_to_vm`` is the desktop's id. Register it in OSWorld with
the two edits docs/osworld.md shows, then::

    env = DesktopEnv(provider_name="tine", action_space="pyautogui")

:class:`TineProvider` and :class:`TineVMManager` follow OSWorld's
``desktop_env.providers.base`` interfaces (and subclass them when OSWorld is
importable). ``save_state`` snapshots the desktop (docs/snapshots.md) and
``revert_to_snapshot`` replaces it with a fork of that snapshot: a new
desktop id, which DesktopEnv takes as the new path.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from .client import Client
from .errors import NotFound

try:  # OSWorld's base classes, when OSWorld is on the path
    from desktop_env.providers.base import Provider as _Provider  # type: ignore
    from desktop_env.providers.base import VMManager as _VMManager  # type: ignore
except ImportError:  # pragma: no cover - OSWorld not installed
    _Provider = object  # type: ignore[assignment,misc]
    _VMManager = object  # type: ignore[assignment,misc]

START_TIMEOUT = 300.0
"""How long start_emulator waits for GET /screenshot to answer (OSWorld's
Docker provider waits as long)."""


def _client_factory(socket: str | None) -> Callable[[], Client]:
    return (lambda: Client(socket)) if socket else Client


class TineVMManager(_VMManager):  # type: ignore[misc,valid-type]
    """Makes desktops on demand: ``get_vm_path`` creates an OSWorld desktop
    of the screen size asked for and returns its id. The registry is this
    process's: desktops it made and which process occupies them."""

    def __init__(self, socket: str | None = None, memory_bytes: int = 2 << 30,
                 ttl_seconds: int | None = None, apps: list[list[str]] | None = None) -> None:
        self._client = _client_factory(socket)
        self.memory_bytes = memory_bytes
        self.ttl_seconds = ttl_seconds
        self.apps = apps
        self._lock = threading.Lock()
        self._vms: dict[str, int | None] = {}  # desktop id -> occupying pid

    def initialize_registry(self, **kwargs: Any) -> None:
        with self._lock:
            self._vms.clear()

    def add_vm(self, vm_path: str, **kwargs: Any) -> None:
        with self._lock:
            self._vms.setdefault(vm_path, None)

    def delete_vm(self, vm_path: str, **kwargs: Any) -> None:
        with self._lock:
            self._vms.pop(vm_path, None)

    def occupy_vm(self, vm_path: str, pid: int, **kwargs: Any) -> None:
        with self._lock:
            self._vms[vm_path] = pid

    def list_free_vms(self, **kwargs: Any) -> list[str]:
        with self._lock:
            return [p for p, pid in self._vms.items() if pid is None]

    def check_and_clean(self, **kwargs: Any) -> None:
        """Forget desktops that are gone."""
        with self._client() as c:
            live = {d.id for d in c.desktops()}
        with self._lock:
            for p in [p for p in self._vms if p not in live]:
                del self._vms[p]

    def get_vm_path(self, os_type: str = "Ubuntu", region: str | None = None,
                    screen_size: tuple[int, int] = (1920, 1080), **kwargs: Any) -> str:
        """A fresh OSWorld desktop of ``screen_size``; its id."""
        spec: dict[str, Any] = {"width": int(screen_size[0]), "height": int(screen_size[1]), "osworld": True,
                                "limits": {"memory_bytes": self.memory_bytes}}
        if self.ttl_seconds:
            spec["ttl_seconds"] = self.ttl_seconds
        if self.apps:
            spec["apps"] = self.apps
        with self._client() as c:
            d = c.create_desktop(spec)
        self.add_vm(d.id)
        return d.id


class TineProvider(_Provider):  # type: ignore[misc,valid-type]
    """OSWorld's provider interface over tine desktops."""

    def __init__(self, region: str | None = None, socket: str | None = None) -> None:
        self.region = region
        self._client = _client_factory(socket)
        self._snapshots: dict[tuple[str, str], str] = {}  # (desktop, name) -> snapshot id

    def _desktop(self, path_to_vm: str) -> Any:
        with self._client() as c:
            return c.desktop(path_to_vm)

    def start_emulator(self, path_to_vm: str, headless: bool = True, os_type: str | None = None,
                       *args: Any) -> None:
        """Desktops run from their creation: wait until the guest answers
        GET /screenshot, as OSWorld's providers do."""
        d = self._desktop(path_to_vm)
        if not d.osworld:
            raise ValueError(f"desktop {path_to_vm} was not made with osworld: it serves no OSWorld API")
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://{d.osworld}/screenshot", timeout=10) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"desktop {path_to_vm}'s OSWorld API did not answer in {START_TIMEOUT:.0f} s")
            time.sleep(0.2)

    def get_ip_address(self, path_to_vm: str) -> str:
        """``host:server:chromium:vnc:vlc`` as DesktopEnv splits it; tine
        desktops have no VNC or VLC port (0)."""
        d = self._desktop(path_to_vm)
        host, server = d.osworld.rsplit(":", 1)
        chromium = d.cdp.rsplit(":", 1)[1] if d.cdp else "0"
        return f"{host}:{server}:{chromium}:0:0"

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        """Snapshot the desktop under ``snapshot_name`` (it runs on)."""
        with self._client() as c:
            old = self._snapshots.pop((path_to_vm, snapshot_name), None)
            snap = c.snapshot(path_to_vm, name=f"osworld-{path_to_vm}-{snapshot_name}")
            self._snapshots[(path_to_vm, snapshot_name)] = snap.id
            if old:
                try:
                    c.delete_snapshot(old)
                except Exception:  # still forked from: kept
                    pass

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        """Replace the desktop with a fork of the snapshot saved as
        ``snapshot_name`` (or, when none was saved, with a fresh desktop like
        it); the new desktop's id, which DesktopEnv takes as the new path."""
        with self._client() as c:
            snap = self._snapshots.get((path_to_vm, snapshot_name))
            if snap:
                new = c.fork(snap).desktops[0]
            else:
                old = c.desktop(path_to_vm)
                new = c.create_desktop({"width": old.width, "height": old.height, "osworld": True,
                                        "limits": {"memory_bytes": old.spec.limits.memory_bytes
                                                   if old.spec and old.spec.limits else 2 << 30}})
            try:
                c.delete_desktop(path_to_vm)
            except NotFound:
                pass
        if snap:
            self._snapshots[(new.id, snapshot_name)] = snap
        return new.id

    def stop_emulator(self, path_to_vm: str, region: str | None = None, *args: Any) -> None:
        """Delete the desktop."""
        with self._client() as c:
            try:
                c.delete_desktop(path_to_vm)
            except NotFound:
                pass


def create_vm_manager_and_provider(region: str | None = None, use_proxy: bool = False,
                                   socket: str | None = None) -> tuple[TineVMManager, TineProvider]:
    """What OSWorld's ``create_vm_manager_and_provider`` returns for
    ``provider_name == "tine"``."""
    return TineVMManager(socket=socket), TineProvider(region, socket=socket)
