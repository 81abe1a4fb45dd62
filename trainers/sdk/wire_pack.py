"""Per-token values on the wire, packed (`trainers.sdk.wire` re-exports these: the shapes' `halves` and
`octets` fields). Plain Python."""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Iterable

# Per-token values travel packed, not as JSON numbers: base64 of little-endian IEEE half floats
# ("halves", 2 bytes a token: a log-prob of -12.34 is 6-7 JSON characters, 2.7 base64 ones) or of
# unsigned bytes ("octets"). A missing value is NaN. A half float keeps 3 significant digits and tops out
# at ±65504 (larger values are clipped to it).
HALF_MAX = 65504.0


def pack_halves(values: Iterable[float | None]) -> str:
    """Half floats as base64 (None and non-finite values: NaN; beyond ±65504: clipped)."""
    clean = [math.nan if v is None or v != v else max(-HALF_MAX, min(HALF_MAX, float(v))) for v in values]
    return base64.b64encode(struct.pack(f"<{len(clean)}e", *clean)).decode("ascii")


def unpack_halves(text: str) -> list[float | None]:
    """The values `pack_halves` packed (NaN: None)."""
    raw = base64.b64decode(text)
    return [None if v != v else v for v in struct.unpack(f"<{len(raw) // 2}e", raw)]


def pack_octets(values: Iterable[int]) -> str:
    """Small non-negative integers (each clipped to 0–255) as base64, one byte each."""
    return base64.b64encode(bytes(max(0, min(255, int(v))) for v in values)).decode("ascii")


def unpack_octets(text: str) -> list[int]:
    return list(base64.b64decode(text))


def packed_length(text: str, width: int) -> int | None:
    """How many `width`-byte entries a packed array holds; None when it is not valid base64 of whole
    entries."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    return None if len(raw) % width else len(raw) // width
