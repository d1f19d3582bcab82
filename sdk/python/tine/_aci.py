"""The ACI (docs/aci.md) without I/O, shared by
:class:`tine.client.DesktopSession` (sync) and
:class:`tine.aio.DesktopSession` (asyncio): each verb is a function
returning an :class:`Op` (the request's JSON and the parser of its reply),
and :class:`Protocol` turns the bytes the daemon sends into replies matched
to their requests. The sessions only move bytes and wait.
"""

from __future__ import annotations

import base64
import json
import struct
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar, Union

from . import _ws as ws
from . import models as m
from .errors import ACIError, TransportError

T = TypeVar("T")
W = TypeVar("W")

MAX_MESSAGE = 256 << 20
"""The largest message a session accepts (a screenshot of a big screen)."""

MAX_QUEUED_FRAMES = 64
"""Screencast messages kept unread; past it they are dropped (a gap)."""

Image = Union[bytes, None]
Reply = dict[str, Any]


@dataclass
class Op(Generic[T]):
    """One ACI request (without its ``id``) and the parser of its reply and
    image; ``content`` (write_file's) makes it a binary message."""
    request: dict[str, Any]
    parse: Callable[[Reply, Image], T]
    content: bytes | None = None


def _req(op: str, **fields: Any) -> dict[str, Any]:
    return {"op": op, **{k: v for k, v in fields.items() if v is not None}}


def _none(rep: Reply, img: Image) -> None:
    return None


def _both(rep: Reply, img: Image) -> tuple[Reply, Image]:
    return rep, img


def _xy(v: Any) -> tuple[int, int]:
    return int(v[0]), int(v[1])


def _request_of(r: Mapping[str, Any] | Op[Any]) -> dict[str, Any]:
    return dict(r.request) if isinstance(r, Op) else dict(m.to_json(r))


# --- verbs ---------------------------------------------------------------

def do(request: Mapping[str, Any] | Op[Any]) -> Op[tuple[Reply, Image]]:
    """Any request as a dict (``{"op": "key", "keys": "Return"}``): the raw
    reply and image."""
    return Op(_request_of(request), _both)


def move(x: int, y: int) -> Op[None]:
    return Op(_req("move", x=x, y=y), _none)


def click(x: int, y: int, button: str | None = None, count: int | None = None) -> Op[None]:
    return Op(_req("click", x=x, y=y, button=button, count=count), _none)


def mouse_down(button: str | None = None, x: int | None = None, y: int | None = None) -> Op[None]:
    return Op(_req("mouse_down", button=button, x=x, y=y), _none)


def mouse_up(button: str | None = None, x: int | None = None, y: int | None = None) -> Op[None]:
    return Op(_req("mouse_up", button=button, x=x, y=y), _none)


def drag(path: Sequence[Sequence[int]], button: str | None = None) -> Op[None]:
    return Op(_req("drag", path=[[int(p[0]), int(p[1])] for p in path], button=button), _none)


def scroll(dx: int = 0, dy: int = 0, x: int | None = None, y: int | None = None) -> Op[None]:
    return Op(_req("scroll", dx=dx or None, dy=dy or None, x=x, y=y), _none)


def key(keys: str) -> Op[None]:
    return Op(_req("key", keys=keys), _none)


def key_down(keys: str) -> Op[None]:
    return Op(_req("key_down", keys=keys), _none)


def key_up(keys: str) -> Op[None]:
    return Op(_req("key_up", keys=keys), _none)


def type_(text: str, delay_ms: int | None = None) -> Op[None]:
    return Op(_req("type", text=text, delay_ms=delay_ms), _none)


def _windows(rep: Reply, img: Image) -> list[m.Window]:
    return [m.Window.from_wire(w) for w in rep.get("windows") or []]


def windows() -> Op[list[m.Window]]:
    return Op(_req("windows"), _windows)


def focus_window(window: int | m.Window) -> Op[None]:
    return Op(_req("focus_window", window=_window_id(window)), _none)


def close_window(window: int | m.Window) -> Op[None]:
    return Op(_req("close_window", window=_window_id(window)), _none)


def _window_id(w: int | m.Window) -> int:
    return w.id if isinstance(w, m.Window) else int(w)


def launch(argv: Sequence[str]) -> Op[int]:
    if isinstance(argv, str):
        raise TypeError("argv is a list of strings, e.g. ['xterm', '-e', 'top']")
    return Op(_req("launch", cmd=list(argv)), lambda rep, img: int(rep.get("pid") or 0))


def cursor() -> Op[tuple[int, int]]:
    return Op(_req("cursor"), lambda rep, img: _xy(rep.get("cursor") or (0, 0)))


def screen() -> Op[tuple[int, int]]:
    return Op(_req("screen"), lambda rep, img: (int(rep.get("width") or 0), int(rep.get("height") or 0)))


def wait(ms: int) -> Op[None]:
    return Op(_req("wait", ms=ms), _none)


def _exec_result(rep: Reply, img: Image) -> m.ExecResult:
    return m.from_json(m.ExecResult, rep.get("exec") or {})


def exec_(argv: Sequence[str], stdin: bytes | str | None = None, timeout: float | None = None) -> Op[m.ExecResult]:
    if isinstance(argv, str):
        raise TypeError("argv is a list of strings, e.g. ['ls', '-l']")
    if isinstance(stdin, str):
        stdin = stdin.encode()
    b64 = base64.b64encode(stdin).decode() if stdin else None
    ms = max(1, round(timeout * 1000)) if timeout else None
    return Op(_req("exec", cmd=list(argv), stdin=b64, timeout_ms=ms), _exec_result)


def read_file(path: str) -> Op[bytes]:
    return Op(_req("read_file", file=path), lambda rep, img: img or b"")


def write_file(path: str, data: bytes | str, mode: int | None = None) -> Op[None]:
    if isinstance(data, str):
        data = data.encode()
    return Op(_req("write_file", file=path, mode=mode), _none, bytes(data))


def screenshot_options(format: str | None = None, quality: int | None = None,
                       max_long_edge: int | None = None, region: Sequence[int] | None = None,
                       cursor: bool | None = None, if_none_match: str | None = None) -> dict[str, Any]:
    """A screenshot's options as the wire has them (also a step's ``observe["screenshot"]``)."""
    return {k: v for k, v in (("format", format), ("quality", quality),
                              ("max_long_edge", max_long_edge),
                              ("region", list(region) if region is not None else None),
                              ("cursor", cursor or None), ("if_none_match", if_none_match))
            if v is not None}


def _screenshot(rep: Reply, img: Image) -> m.Screenshot:
    return m.Screenshot(frame_hash=rep.get("frame_hash", ""), width=rep.get("width", 0),
                        height=rep.get("height", 0), format=rep.get("format", ""),
                        not_modified=bool(rep.get("not_modified")), data=img or b"")


def screenshot(**options: Any) -> Op[m.Screenshot]:
    """``options``: see :func:`screenshot_options`."""
    return screenshot_with(screenshot_options(**options))


def screenshot_with(options: Mapping[str, Any]) -> Op[m.Screenshot]:
    """A screenshot with its options as the wire has them."""
    return Op(_req("screenshot", screenshot=dict(options)), _screenshot)


def _step(observe: Mapping[str, Any]) -> Callable[[Reply, Image], m.StepResult]:
    def parse(rep: Reply, img: Image) -> m.StepResult:
        return m.StepResult(
            results=[m.from_json(m.ActionResult, r) for r in rep.get("results") or []],
            windows=_windows(rep, img) if observe.get("windows") else None,
            cursor=_xy(rep["cursor"]) if rep.get("cursor") else None,
            screenshot=_screenshot(rep, img) if "frame_hash" in rep else None)
    return parse


def step(actions: Sequence[Mapping[str, Any] | Op[Any]],
         observe: Mapping[str, Any] | None = None) -> Op[m.StepResult]:
    """Actions (request dicts, or ops built here) run in order, then one
    observation: ``{"screenshot": {...}, "windows": True, "cursor": True,
    "settle_ms": 50}``."""
    acts = [_request_of(a) for a in actions]
    for a in acts:
        a.pop("id", None)
    obs = dict(m.to_json(observe)) if observe else {}
    return Op(_req("step", actions=acts, observe=obs or None), _step(obs))


def screencast_start(fps: int | None = None, format: str | None = None, quality: int | None = None,
                     max_long_edge: int | None = None, delta: bool | None = None,
                     keyframe_interval_ms: int | None = None, cursor: bool | None = None,
                     poll: bool | None = None) -> Op[Reply]:
    opts = {k: v for k, v in (("fps", fps), ("format", format), ("quality", quality),
                              ("max_long_edge", max_long_edge), ("delta", delta or None),
                              ("keyframe_interval_ms", keyframe_interval_ms),
                              ("cursor", cursor or None), ("poll", poll or None)) if v is not None}
    return Op(_req("screencast_start", screencast=opts), lambda rep, img: rep)


def screencast_stop() -> Op[None]:
    return Op(_req("screencast_stop"), _none)


def screencast_keyframe() -> Op[None]:
    return Op(_req("screencast_keyframe"), _none)


# --- computer-use tools, recording, accessibility -------------------------

@dataclass
class ToolAnswer:
    """What a computer-use action answers with: the screenshot the tool
    loop sends back (at the model's scale), or, for Anthropic's
    cursor_position, ``output`` ("X=..,Y=..") and ``cursor``."""
    screenshot: m.Screenshot | None
    output: str = ""
    cursor: tuple[int, int] | None = None

    def anthropic_tool_result(self, tool_use_id: str) -> dict[str, Any]:
        """The ``tool_result`` content block answering ``tool_use_id``."""
        if self.screenshot is None:
            return {"type": "tool_result", "tool_use_id": tool_use_id, "content": self.output}
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": [{
            "type": "image", "source": {"type": "base64", "media_type": "image/" + self.screenshot.format,
                                        "data": base64.b64encode(self.screenshot.data).decode()}}]}

    def openai_call_output(self, call_id: str) -> dict[str, Any]:
        """The ``computer_call_output`` item answering ``call_id``."""
        shot = self.screenshot
        if shot is None:
            raise ValueError("this answer carries no screenshot")
        return {"type": "computer_call_output", "call_id": call_id, "output": {
            "type": "computer_screenshot",
            "image_url": "data:image/%s;base64,%s" % (shot.format, base64.b64encode(shot.data).decode())}}


def recommended_scale(width: int, height: int) -> list[int] | None:
    """The screen Anthropic's reference implementation shows the model for
    a width x height screen: XGA 1024x768, WXGA 1280x800 or FWXGA
    1366x768, the first within 0.02 of its aspect ratio and smaller; None
    (the real screen) when none is. Pass it as ``scale``."""
    ratio = width / height
    for tw, th in ((1024, 768), (1280, 800), (1366, 768)):
        if abs(tw / th - ratio) < 0.02 and tw < width:
            return [tw, th]
    return None


def _tool_answer(rep: Reply, img: Image) -> ToolAnswer:
    return ToolAnswer(screenshot=_screenshot(rep, img) if img is not None else None,
                      output=rep.get("output", ""), cursor=_xy(rep["cursor"]) if rep.get("cursor") else None)


def _tool(op: str, action: Any, scale: Sequence[int] | None, screenshot: Mapping[str, Any] | None) -> Op[ToolAnswer]:
    return Op(_req(op, input=m.to_json(action), scale=list(scale) if scale else None,
                   screenshot=dict(screenshot) if screenshot else None), _tool_answer)


def anthropic(tool_input: Mapping[str, Any], scale: Sequence[int] | None = None,
              screenshot: Mapping[str, Any] | None = None) -> Op[ToolAnswer]:
    """An Anthropic computer tool_use's ``input`` as the model emitted it,
    in coordinates of a ``scale`` [w, h] screen (default the real one)."""
    return _tool("anthropic", tool_input, scale, screenshot)


def openai(action: Any, scale: Sequence[int] | None = None,
           screenshot: Mapping[str, Any] | None = None) -> Op[ToolAnswer]:
    """An OpenAI computer_call's ``action``, a list of actions, or the whole
    computer_call (``action`` or ``actions``)."""
    return _tool("openai", action, scale, screenshot)


def record_start(fps: int | None = None, cursor: bool = False) -> Op[None]:
    return Op(_req("record_start", fps=fps, format="mp4", screenshot={"cursor": True} if cursor else None), _none)


def _recording(rep: Reply, img: Image) -> bytes:
    return img or b""


def record_stop() -> Op[bytes]:
    return Op(_req("record_stop"), _recording)


def accessibility(filter: str | None = None, format: str | None = None) -> Op[Any]:
    """The accessibility tree: compact nodes (dicts: role, name, text,
    states, bounds, children), or OSWorld's XML string with format="xml"."""
    def parse(rep: Reply, img: Image) -> Any:
        return rep.get("xml", "") if format == "xml" else rep.get("tree") or []
    return Op(_req("accessibility", filter=filter, format=format), parse)


# --- the protocol ----------------------------------------------------------

def check(rep: Reply, img: Image) -> None:
    """Raise the reply's :class:`~tine.errors.ACIError` if it was refused."""
    err = rep.get("error")
    if err or not rep.get("ok", False):
        err = err or {}
        raise ACIError(str(err.get("code") or "internal"), str(err.get("message") or "request failed"),
                       reply=rep, image=img)


def finish(op: Op[T], rep: Reply, img: Image) -> T:
    """The value of ``op``'s reply, or its error raised."""
    check(rep, img)
    return op.parse(rep, img)


class Pending(Generic[W]):
    """Requests awaiting replies, oldest first. The guest answers in
    order, so a reply without a usable id (``0``: the guest could not
    read the request's) belongs to the oldest; a known id is popped; an
    unknown one (its waiter gave up) is dropped."""

    def __init__(self) -> None:
        self._w: OrderedDict[int, W] = OrderedDict()

    def __len__(self) -> int:
        return len(self._w)

    def add(self, rid: int, waiter: W) -> None:
        self._w[rid] = waiter

    def discard(self, rid: int) -> None:
        if rid in self._w:
            del self._w[rid]

    def pop(self, rid: int) -> W | None:
        if rid == 0 and self._w:
            return self._w.popitem(last=False)[1]
        return self._w.pop(rid) if rid in self._w else None

    def drain(self) -> list[W]:
        out = list(self._w.values())
        self._w.clear()
        return out


class Protocol:
    """One session's state: the request ids, and the receiving side. Feed
    :meth:`receive` the daemon's bytes: the first message sets
    :attr:`welcome`; the rest come out as ``(id, reply, image)``, with
    bytes to send back (pongs, the close). Once :attr:`done`,
    :attr:`error` says why the session ended."""

    def __init__(self) -> None:
        self._dec = ws.Decoder(MAX_MESSAGE)
        self._next = 0
        self.welcome: m.Welcome | None = None
        self.frames: deque[tuple[Reply, bytes]] = deque()
        """Screencast messages (header, images) not yet read."""
        self.frames_lost = 0
        self.received = 0
        """Bytes of the messages the guest sent (replies, images, frames)."""
        self.done = False
        self.error: TransportError | None = None

    def encode(self, request: Mapping[str, Any], content: bytes | None = None) -> tuple[int, bytes]:
        """Give ``request`` the next id; its frame (binary, the header and
        then ``content``, when there is content)."""
        self._next += 1
        req = {**request, "id": self._next}
        head = json.dumps(req, separators=(",", ":"), ensure_ascii=False).encode()
        if content is None:
            return self._next, ws.encode(ws.TEXT, head)
        return self._next, ws.encode(ws.BINARY, struct.pack("!I", len(head)) + head + content)

    def receive(self, data: bytes) -> tuple[list[tuple[int, Reply, Image]], bytes]:
        out: list[tuple[int, Reply, Image]] = []
        back = b""
        if self.done:
            return out, back
        if not data:
            return out, self._fail("the ACI session ended (the connection closed)")
        try:
            msgs = self._dec.feed(data)
        except ws.ProtocolError as e:
            return out, self._fail(f"aci: {e}")
        for op, payload in msgs:
            if self.done:
                break
            if op == ws.PING:
                back += ws.encode(ws.PONG, payload)
            elif op == ws.CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                why = payload[2:].decode("utf-8", "replace")
                back += self._fail(f"the ACI session was closed by the daemon ({code}{': ' + why if why else ''})")
            elif op in (ws.TEXT, ws.BINARY):
                self.received += len(payload)
                try:
                    rep, img = self._decode(op, payload)
                except (ValueError, struct.error) as e:
                    back += self._fail(f"aci: malformed reply: {e}")
                    break
                if self.welcome is None:
                    if rep.get("type") != "welcome":
                        back += self._fail(f"aci: expected a welcome, got {payload[:200]!r}")
                        break
                    self.welcome = m.from_json(m.Welcome, rep)
                    continue
                if rep.get("type") == "frame":
                    if len(self.frames) >= MAX_QUEUED_FRAMES:  # nobody reads them: drop, not grow
                        self.frames_lost += len(self.frames)
                        self.frames.clear()
                    self.frames.append((rep, img or b""))
                    continue
                out.append((int(rep.get("id") or 0), rep, img))
        return out, back

    @staticmethod
    def _decode(op: int, payload: bytes) -> tuple[Reply, Image]:
        if op == ws.TEXT:
            head, img = payload, None
        else:
            if len(payload) < 4:
                raise ValueError("binary reply shorter than its length")
            (n,) = struct.unpack_from("!I", payload)
            if n > len(payload) - 4:
                raise ValueError("binary reply's header overruns it")
            head, img = payload[4:4 + n], payload[4 + n:]
        rep = json.loads(head)
        if not isinstance(rep, dict):
            raise ValueError("a reply is a JSON object")
        return rep, img

    def _fail(self, why: str) -> bytes:
        if not self.done:
            self.done, self.error = True, TransportError(why)
        return ws.encode_close(1000)

    def ended(self) -> TransportError:
        """Why the session is over (for requests that can no longer be answered)."""
        return self.error or TransportError("the ACI session is closed")

    def abort(self, why: str) -> bytes:
        """End the session with ``why`` as its error; the close frame to send."""
        return self._fail(why)

    def close(self) -> bytes:
        """Mark the session closed by the client; the close frame to send."""
        if self.done:
            return b""
        self.done, self.error = True, TransportError("the ACI session is closed")
        return ws.encode_close(1000)
