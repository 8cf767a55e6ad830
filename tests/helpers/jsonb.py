"""A MySQL binary JSON encoder for the tests, written from MySQL's ``json_binary.h`` layout (type byte, element
count, size, key entries, value entries, inlining rules) independently of ``binlog.jsonb``; the packed formats of
opaque values; the entries of a partial-JSON diff vector (``binlog_row_value_options=PARTIAL_JSON``)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from decimal import Decimal, localcontext


@dataclass(frozen=True)
class Typed:
    """Force a scalar's binary type (e.g. a uint16 for a small positive number, as a JSON uint would be)."""

    type: int
    value: object


@dataclass(frozen=True)
class Opaque:
    field_type: int
    data: bytes


class TooBig(Exception):
    pass


SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0, 1, 2, 3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = 4, 5, 6, 7, 8, 9, 10, 11, 12, 15
SCALAR_FORMATS = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q", DOUBLE: "<d"}


def varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def int_type(v: int) -> int:
    """The type MySQL picks for a JSON integer: the smallest signed type, uint64 only above int64."""
    if -(2**15) <= v < 2**15:
        return INT16
    if -(2**31) <= v < 2**31:
        return INT32
    if -(2**63) <= v < 2**63:
        return INT64
    return UINT64


def scalar(value: object) -> tuple[int, bytes]:
    """(type, value bytes) of a non-container value."""
    if value is None or isinstance(value, bool):
        return LITERAL, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, Typed):
        return value.type, struct.pack(SCALAR_FORMATS[value.type], value.value)
    if isinstance(value, int):
        t = int_type(value)
        return t, struct.pack(SCALAR_FORMATS[t], value)
    if isinstance(value, float):
        return DOUBLE, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return STRING, varlen(len(raw)) + raw
    if isinstance(value, Opaque):
        return OPAQUE, bytes([value.field_type]) + varlen(len(value.data)) + value.data
    raise TypeError(value)


def inlined(t: int, large: bool) -> bool:
    return t in (LITERAL, INT16, UINT16) or (large and t in (INT32, UINT32))


def _container(value: dict | list, large: bool, force_large: bool) -> bytes:
    """Object or array body (without its type byte) in the small or large layout."""
    is_object = isinstance(value, dict)
    if is_object:
        # MySQL stores object keys sorted by length, then by bytes.
        keys = sorted((k.encode("utf-8") for k in value), key=lambda b: (len(b), b))
        values = [value[k.decode("utf-8")] for k in keys]
    else:
        keys, values = [], list(value)
    n = len(values)
    off = "<I" if large else "<H"
    offset_size = 4 if large else 2
    header = 2 * offset_size + n * ((offset_size + 2) if is_object else 0) + n * (1 + offset_size)
    key_entries = bytearray()
    value_entries = bytearray()
    tail = bytearray()
    position = header
    for k in keys:
        key_entries += struct.pack(off + "H", position, len(k))
        tail += k
        position += len(k)
    for v in values:
        t, body = encode_value(v, force_large)
        if inlined(t, large):
            field = body + b"\0" * (offset_size - len(body)) if t != LITERAL else body + b"\0" * (offset_size - 1)
            value_entries += bytes([t]) + field
        else:
            value_entries += bytes([t]) + struct.pack(off, position)
            tail += body
            position += len(body)
    if not large and position > 0xFFFF:
        raise TooBig
    return struct.pack(off + off[1], n, position) + key_entries + value_entries + tail


def container(value: dict | list, large: bool, force_large: bool) -> bytes:
    try:
        return _container(value, large, force_large)
    except struct.error:  # an offset above 65535 in the small layout
        if large:
            raise
        raise TooBig from None


def encode_value(value: object, force_large: bool = False) -> tuple[int, bytes]:
    if isinstance(value, dict | list):
        base = SMALL_OBJECT if isinstance(value, dict) else SMALL_ARRAY
        if not force_large:
            try:
                return base, container(value, False, force_large)
            except TooBig:
                pass
        return base + 1, container(value, True, force_large)
    return scalar(value)


def encode(value: object, force_large: bool = False) -> bytes:
    t, body = encode_value(value, force_large)
    return bytes([t]) + body


def expected_text(value: object) -> str:
    """What decode_json must print for a document of plain ints/strings/bools/None/containers (keys MySQL-sorted)."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{expected_text(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(expected_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


# MySQL packed formats for opaque values, written from the documented layouts.


def decimal_bin(text: str, precision: int, scale: int) -> bytes:
    """decimal2bin: 9 digits per 4 bytes, leftover digits in 1-4 bytes, sign bit flipped, negatives inverted."""
    dig2bytes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    with localcontext() as ctx:
        ctx.prec = 100
        d = Decimal(text)
        negative = d.is_signed()
        digits = f"{abs(d):.{scale}f}"
    whole, _, frac = digits.partition(".")
    intg = precision - scale
    whole = whole.lstrip("0").rjust(intg, "0")
    assert len(whole) == intg, (text, precision, scale)
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(whole[:lead]).to_bytes(dig2bytes[lead], "big")
    for i in range(lead, intg, 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9 :]).to_bytes(dig2bytes[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def opaque_decimal(text: str, precision: int, scale: int) -> Opaque:
    return Opaque(246, bytes([precision, scale]) + decimal_bin(text, precision, scale))


def packed_datetime(y, mo, d, h=0, mi=0, s=0, us=0) -> int:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return (((ymd << 17) | hms) << 24) + us


def packed_time(h, mi, s, us=0, negative=False) -> int:
    v = (((h << 12) | (mi << 6) | s) << 24) + us
    return -v if negative else v


def opaque_temporal(field_type: int, packed: int) -> Opaque:
    return Opaque(field_type, struct.pack("<q", packed))


# Partial JSON diff vectors: operation, packed path length, path, packed value length, value.


def diff_entry(op: int, path: str, value: object = None, *, long_lengths: bool = False) -> bytes:
    def packed(n: int) -> bytes:
        return b"\xfc" + struct.pack("<H", n) if long_lengths or n >= 251 else bytes([n])

    raw = path.encode()
    out = bytes([op]) + packed(len(raw)) + raw
    if op != 2:
        doc = encode(value)
        out += packed(len(doc)) + doc
    return out
