"""Screencasts (docs/aci.md, "Screencast"): :class:`Compositor` rebuilds
whole frames from a stream's messages, and :func:`decode_png` reads the
PNGs a guest writes, with no dependencies. JPEG streams need Pillow
(``pip install pillow``) to decode; PNG streams need nothing.

A frame is packed RGB, ``width * height * 3`` bytes, row after row.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Compositor", "SequenceGap", "decode_png", "decode_image"]


class SequenceGap(Exception):
    """A delta that does not follow the last message applied: one was
    lost (the client dropped it); the picture is stale until a keyframe."""


def decode_image(fmt: str, data: bytes) -> tuple[int, int, bytes]:
    """An encoded tile as ``(width, height, rgb)``."""
    if fmt == "png":
        return decode_png(data)
    try:
        from PIL import Image  # type: ignore[import-not-found]
    except ImportError:
        raise RuntimeError("decoding a JPEG screencast needs Pillow (pip install pillow); "
                           "or stream format='png', which needs nothing") from None
    img = Image.open(io.BytesIO(data)).convert("RGB")
    return img.width, img.height, img.tobytes()


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """A non-interlaced 8-bit RGB or RGBA PNG as ``(width, height, rgb)``
    (alpha dropped)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        n, kind = struct.unpack_from("!I4s", data, pos)
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = struct.unpack("!IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if ihdr is None:
        raise ValueError("PNG without IHDR")
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"PNG of depth {depth}, colour type {ctype}, interlace {interlace}: "
                         "only 8-bit RGB/RGBA, not interlaced")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    if len(raw) < h * (stride + 1):
        raise ValueError("PNG data is short")
    out = bytearray(h * stride)
    prev = bytes(stride)
    lo7 = int.from_bytes(b"\x7f" * stride, "little")
    hi1 = int.from_bytes(b"\x80" * stride, "little")
    for y in range(h):
        f = raw[y * (stride + 1)]
        row = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        if f == 0:
            cur = row
        elif f == 2:  # Up, bytewise a+b in one big-integer sum (no carries across bytes)
            a, b = int.from_bytes(row, "little"), int.from_bytes(prev, "little")
            cur = (((a & lo7) + (b & lo7)) ^ ((a ^ b) & hi1)).to_bytes(stride, "little")
        else:
            cur = _unfilter(f, bytearray(row), prev, bpp)
        out[y * stride:(y + 1) * stride] = cur
        prev = bytes(cur)
    if bpp == 4:
        rgb = bytearray(w * h * 3)
        rgb[0::3], rgb[1::3], rgb[2::3] = out[0::4], out[1::4], out[2::4]
        return w, h, bytes(rgb)
    return w, h, bytes(out)


def _unfilter(f: int, row: bytearray, prev: bytes, bpp: int) -> bytes:
    """Sub, Average and Paeth, byte by byte (the guest writes Up)."""
    for i in range(len(row)):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        if f == 1:
            row[i] = (row[i] + a) & 0xFF
        elif f == 3:
            row[i] = (row[i] + ((a + b) >> 1)) & 0xFF
        elif f == 4:
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            row[i] = (row[i] + pred) & 0xFF
        else:
            raise ValueError(f"PNG filter type {f}")
    return bytes(row)


@dataclass
class Compositor:
    """The picture a stream shows: apply each message in order; ``rgb``
    is the whole frame after the last one (``None`` before the first
    keyframe). ``frame_hash`` is the guest's hash of its picture then
    (a PNG stream's composite is exactly that picture)."""
    width: int = 0
    height: int = 0
    rgb: bytearray | None = None
    seq: int = 0
    frame_hash: str = ""
    messages: int = field(default=0, repr=False)

    def apply(self, header: dict[str, Any], payload: bytes) -> None:
        """Draw one message (its JSON header, and the images after it).
        A delta out of sequence raises :class:`SequenceGap` and changes nothing."""
        seq, kind = int(header["seq"]), header["kind"]
        if kind != "key" and (self.rgb is None or seq != self.seq + 1):
            raise SequenceGap(f"delta {seq} after {self.seq}: ask for a keyframe")
        w, h = int(header["width"]), int(header["height"])
        if kind == "key" and (self.rgb is None or (w, h) != (self.width, self.height)):
            self.width, self.height, self.rgb = w, h, bytearray(w * h * 3)
        assert self.rgb is not None
        off = 0
        for r in header.get("rects") or []:
            n = int(r["bytes"])
            if off + n > len(payload):
                raise ValueError(f"message {seq}: rectangle images run past its {len(payload)} bytes")
            tw, th, px = decode_image(header["format"], payload[off:off + n])
            off += n
            x, y = int(r["x"]), int(r["y"])
            if (tw, th) != (int(r["w"]), int(r["h"])) or x + tw > self.width or y + th > self.height:
                raise ValueError(f"message {seq}: a {tw}x{th} tile at {x},{y} does not fit")
            for row in range(th):
                d = ((y + row) * self.width + x) * 3
                self.rgb[d:d + tw * 3] = px[row * tw * 3:(row + 1) * tw * 3]
        self.seq, self.frame_hash = seq, str(header.get("frame_hash", ""))
        self.messages += 1
