"""tine's pyautogui: the public API of PyAutoGUI for programs running in a
tine desktop, written for tine (it is not PyAutoGUI's code).

Every mouse and keyboard call goes, with this module's PAUSE and FAILSAFE,
to the desktop's guest over its unix socket ($TINE_GUEST_SOCKET), which runs
it through XTEST with PyAutoGUI's semantics: the same code the guest's fast
path runs for plain OSWorld actions, so both give the same effects.
position(), size(), onScreen() and screenshot() ask the guest too.
"""

import collections
import contextlib
import http.client
import io
import json
import os
import socket
import time

__version__ = "0.9.54+tine"

PAUSE = 0.1
FAILSAFE = True
MINIMUM_DURATION = 0.1
MINIMUM_SLEEP = 0.05
DARWIN_CATCH_UP_TIME = 0.01

LEFT, MIDDLE, RIGHT, PRIMARY, SECONDARY = "left", "middle", "right", "primary", "secondary"

Point = collections.namedtuple("Point", "x y")
Size = collections.namedtuple("Size", "width height")


class PyAutoGUIException(Exception):
    """An error in a pyautogui call."""


class FailSafeException(PyAutoGUIException):
    """The pointer was in a corner of the screen with FAILSAFE on."""


class ImageNotFoundException(PyAutoGUIException):
    """Image location is not supported in tine's pyautogui."""


_EXCEPTIONS = {
    "TypeError": TypeError,
    "ValueError": ValueError,
    "AttributeError": AttributeError,
    "FailSafeException": FailSafeException,
    "PyAutoGUIException": PyAutoGUIException,
}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("guest", timeout=None)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


_conn = None


def _request(method, path, body=None):
    global _conn
    sock = os.environ.get("TINE_GUEST_SOCKET")
    if not sock:
        raise PyAutoGUIException("tine's pyautogui runs inside a tine desktop: TINE_GUEST_SOCKET is not set")
    for attempt in (0, 1):
        if _conn is None:
            _conn = _UnixConnection(sock)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            _conn.request(method, path, body=body, headers=headers)
            resp = _conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheader("Content-Type", ""), data
        except (ConnectionError, http.client.HTTPException, OSError):
            _conn.close()
            _conn = None
            if attempt:
                raise


def _info(all_=False):
    status, _, data = _request("GET", "/tine/pyautogui" + ("?all=1" if all_ else ""))
    out = json.loads(data)
    if "error" in out:
        raise PyAutoGUIException(out["error"]["message"])
    return out


class _Tween:
    """One of pyautogui's easing functions, passed by name to the guest."""

    def __init__(self, name):
        self.__name__ = name

    def __repr__(self):
        return "<function %s>" % self.__name__


def _wire(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, _Tween):
        return {"tween": v.__name__}
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, (tuple, list)):
        return [_wire(x) for x in v]
    if hasattr(v, "__index__"):
        return v.__index__()
    if hasattr(v, "__float__"):
        return float(v)
    if callable(v):
        raise PyAutoGUIException("tine's pyautogui takes only its own easing functions as tween, not %r" % (v,))
    raise TypeError("a %s is not a value pyautogui takes" % type(v).__name__)


def _forward(name):
    def call(*args, **kwargs):
        body = json.dumps({
            "fn": name,
            "args": [_wire(a) for a in args],
            "kwargs": {k: _wire(v) for k, v in kwargs.items()},
            "pause": float(PAUSE),
            "failsafe": bool(FAILSAFE),
        })
        status, _, data = _request("POST", "/tine/pyautogui", body)
        out = json.loads(data)
        err = out.get("error")
        if err:
            raise _EXCEPTIONS.get(err["type"], PyAutoGUIException)(err["message"])

    call.__name__ = call.__qualname__ = name
    call.__doc__ = "pyautogui.%s, run by the tine desktop's guest." % name
    return call


_meta = _info(all_=True)
KEYBOARD_KEYS = list(_meta["keys"])
KEY_NAMES = KEYBOARD_KEYS
for _name in _meta["functions"]:
    globals()[_name] = _forward(_name)
for _name in _meta["tweens"]:
    globals()[_name] = _Tween(_name)
del _name


def position(x=None, y=None):
    """The pointer's position, with x or y replaced when given."""
    p = _info()["position"]
    return Point(int(x) if x is not None else p[0], int(y) if y is not None else p[1])


def size():
    """The screen's size."""
    return Size(*_info()["size"])


resolution = size


def onScreen(x, y=None):
    """Whether (x, y) is on the screen."""
    if isinstance(x, (tuple, list)):
        x, y = x
    w, h = size()
    return 0 <= int(x) < w and 0 <= int(y) < h


def isValidKey(key):
    return key in KEYBOARD_KEYS


def sleep(seconds):
    time.sleep(seconds)


def countdown(seconds):
    for i in range(seconds, 0, -1):
        print(str(i), end=" ", flush=True)
        time.sleep(1)
    print()


@contextlib.contextmanager
def hold(keys, logScreenshot=None, _pause=True):
    """Hold keys down for the body of a with statement."""
    if isinstance(keys, str):
        keys = [keys]
    for k in keys:
        keyDown(k, _pause=False)  # noqa: F821 (forwarded above)
    try:
        yield
    finally:
        for k in keys:
            keyUp(k, _pause=False)  # noqa: F821
        if _pause and PAUSE:
            time.sleep(PAUSE)


def screenshot(imageFilename=None, region=None):
    """The screen (without the pointer) as a PIL image; needs PIL
    (Debian's python3-pil)."""
    status, ctype, data = _request("GET", "/tine/screenshot")
    if status != 200:
        raise PyAutoGUIException("screenshot failed: %s" % data.decode("utf-8", "replace"))
    try:
        from PIL import Image
    except ImportError as e:
        raise PyAutoGUIException("pyautogui.screenshot() needs PIL (Debian's python3-pil)") from e
    img = Image.open(io.BytesIO(data))
    img.load()
    if region is not None:
        left, top, width, height = region
        img = img.crop((left, top, left + width, top + height))
    if imageFilename is not None:
        img.save(imageFilename)
    return img


def pixel(x, y):
    """The (r, g, b) of the screen at (x, y); needs PIL."""
    return screenshot().convert("RGB").getpixel((int(x), int(y)))


def pixelMatchesColor(x, y, expectedRGBColor, tolerance=0):
    got = pixel(x, y)
    return all(abs(a - b) <= tolerance for a, b in zip(got, expectedRGBColor[:3]))


def _no_images(*args, **kwargs):
    raise ImageNotFoundException("locating images on the screen is not supported by tine's pyautogui")


locateOnScreen = locateCenterOnScreen = locateAllOnScreen = locate = locateAll = _no_images
