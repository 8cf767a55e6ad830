"""GEOMETRY column values (4-byte SRID + WKB) rendered as WKT, the way MariaDB's ``ST_AsText`` prints them.

A MySQL/MariaDB geometry value as stored in a row (and so in a row event) is a little-endian uint32 SRID followed
by standard OGC WKB. Every WKB geometry (including each member of a collection) starts with its own byte-order
byte (0 = big-endian, 1 = little-endian), so the byte order is read per geometry, never assumed.

Output matches MariaDB 10.11's ``ST_AsText`` (checked against the server by ``tests/test_binlog_geometry.py``):

* ``POINT(1 2)``, ``LINESTRING(0 0,1 1)``, ``POLYGON((0 0,1 0,1 1,0 0),(...))``;
* ``MULTIPOINT(1 1,2 2)`` -- MariaDB prints no parentheses around the points (MySQL 8 prints ``((1 1),(2 2))``);
* ``MULTILINESTRING((...),(...))``, ``MULTIPOLYGON(((...)),((...)))``;
* ``GEOMETRYCOLLECTION(POINT(1 2),...)`` and ``GEOMETRYCOLLECTION EMPTY``; nested collections are supported.
* Numbers: the shortest digits that round-trip (David Gay's dtoa, as the server's ``my_gcvt``), in fixed notation
  unless the decimal exponent is above 15 (and the number has no fraction digits there) or below -14:
  ``1``, ``-0.25``, ``0.0000001``, ``123456789012345.6``, ``1e15``, ``1.2345678901234568e17``, ``1e-300``.
  Negative zero prints ``0`` and NaN/infinity print ``0``, as the server does.
* A zero-member LINESTRING/MULTI* (which the server itself refuses to build) prints ``<TYPE> EMPTY``.

Malformed input (short data, bad byte order, unknown type, counts running past the end, trailing bytes, a member of
the wrong type inside a MULTI* geometry) raises ``ValueError`` naming the problem and its byte offset.
"""

from __future__ import annotations

import struct

__all__ = ["format_coordinate", "gcvt_digits", "geometry_to_wkt"]

_U32 = (struct.Struct(">I"), struct.Struct("<I"))
_POINT = (struct.Struct(">dd"), struct.Struct("<dd"))
_SRID_SIZE = 4
_HEADER_SIZE = 5  # byte order + uint32 type

_POINT_T, _LINESTRING_T, _POLYGON_T = 1, 2, 3
_MULTIPOINT_T, _MULTILINESTRING_T, _MULTIPOLYGON_T, _COLLECTION_T = 4, 5, 6, 7
_NAMES = {
    _POINT_T: "POINT",
    _LINESTRING_T: "LINESTRING",
    _POLYGON_T: "POLYGON",
    _MULTIPOINT_T: "MULTIPOINT",
    _MULTILINESTRING_T: "MULTILINESTRING",
    _MULTIPOLYGON_T: "MULTIPOLYGON",
    _COLLECTION_T: "GEOMETRYCOLLECTION",
}
# The member type each MULTI* geometry allows.
_MEMBER = {_MULTIPOINT_T: _POINT_T, _MULTILINESTRING_T: _LINESTRING_T, _MULTIPOLYGON_T: _POLYGON_T}

# struct format objects for "n points" reads, cached per (byte order, count); struct's own cache is small.
_points_structs: dict[tuple[int, int], struct.Struct] = {}


def format_coordinate(x: float) -> str:
    """One coordinate as the server's ``my_gcvt`` prints it (see the module docstring)."""
    s = repr(x)
    # Fast path: repr() uses fixed notation for exponents -4..15, where the server does too, so below 1e15 the
    # only difference is repr's trailing ".0" on integral values.
    if "e" not in s and "n" not in s and -1e15 < x < 1e15:
        if s.endswith(".0"):
            s = s[:-2]
            return "0" if s == "-0" else s
        return s
    if x != x or x in (float("inf"), float("-inf")):
        return "0"  # dtoa reports overflow for NaN/infinity and my_gcvt then prints a bare 0
    return gcvt_digits(s)


def gcvt_digits(s: str) -> str:
    """Re-lay the shortest round-trip digits of ``repr()`` text (a finite float) in my_gcvt's fixed/exponent choice.

    Also the slow path of ``binlog.jsonb.format_double``, which adds the ``.0`` that MySQL's JSON text gives integers.
    """
    sign = ""
    if s[0] == "-":
        sign, s = "-", s[1:]
    mantissa, _, exp_text = s.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    decpt = len(whole) + (int(exp_text) if exp_text else 0)  # value = 0.DIGITS * 10**decpt
    stripped = digits.lstrip("0")
    decpt -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    if not digits:
        return "0"
    n = len(digits)
    # my_gcvt with a wide field: fixed notation when -14 <= decpt and (decpt <= 15 or there are fraction digits).
    if decpt >= -14 and (decpt <= 15 or n > decpt):
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt < n:
            return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        return f"{sign}{digits}{'0' * (decpt - n)}"
    exponent = decpt - 1
    head = digits[0] if n == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{head}e{exponent}"


def geometry_to_wkt(data: bytes | memoryview) -> str:
    """Render a geometry column value (SRID + WKB) as MariaDB's ``ST_AsText`` text."""
    buf = memoryview(data)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    end = len(buf)
    if end < _SRID_SIZE + _HEADER_SIZE:
        raise ValueError(f"geometry value too short: {end} bytes, need at least {_SRID_SIZE + _HEADER_SIZE}")
    out: list[str] = []
    # Open collections as remaining member counts: an explicit stack rather than recursion, so a (malformed or
    # merely silly) deeply nested GEOMETRYCOLLECTION cannot exhaust Python's recursion limit.
    open_collections: list[int] = []
    pos = _SRID_SIZE
    while True:
        le, gtype, pos = _header(buf, pos, end)
        if gtype == _COLLECTION_T:
            count, pos = _count(buf, pos, end, le, _HEADER_SIZE, "geometry collection")
            if count:
                out.append("GEOMETRYCOLLECTION(")
                open_collections.append(count)
                continue
            out.append("GEOMETRYCOLLECTION EMPTY")
        else:
            pos = _simple(buf, pos, end, le, gtype, out)
        # Close every collection whose last member this was; emit a separator before the next member.
        while open_collections:
            open_collections[-1] -= 1
            if open_collections[-1]:
                out.append(",")
                break
            open_collections.pop()
            out.append(")")
        else:
            break
    if pos != end:
        raise ValueError(f"{end - pos} unexpected trailing byte(s) after the geometry at offset {pos}")
    return "".join(out)


def _header(buf: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """Read a WKB header at ``pos``: (little-endian flag, geometry type, position after the header)."""
    if pos + _HEADER_SIZE > end:
        raise ValueError(f"truncated WKB header at offset {pos}: {end - pos} byte(s) left, need {_HEADER_SIZE}")
    order = buf[pos]
    if order > 1:
        raise ValueError(f"bad WKB byte order {order} at offset {pos} (expected 0 or 1)")
    gtype = _U32[order].unpack_from(buf, pos + 1)[0]
    if gtype not in _NAMES:
        raise ValueError(f"unsupported WKB geometry type {gtype} at offset {pos + 1}")
    return order, gtype, pos + _HEADER_SIZE


def _count(buf: memoryview, pos: int, end: int, le: int, min_item: int, what: str) -> tuple[int, int]:
    """Read a uint32 member count and check that that many members of at least ``min_item`` bytes can fit."""
    if pos + 4 > end:
        raise ValueError(f"truncated {what} count at offset {pos}")
    count = _U32[le].unpack_from(buf, pos)[0]
    if count * min_item > end - pos - 4:
        raise ValueError(f"{what} count {count} at offset {pos} runs past the end of the value ({end} bytes)")
    return count, pos + 4


def _points(buf: memoryview, pos: int, end: int, le: int, what: str) -> tuple[str, int]:
    """A counted point list as ``x y,x y,...`` (no parentheses) and the position after it."""
    count, pos = _count(buf, pos, end, le, 16, what)
    key = (le, count)
    unpacker = _points_structs.get(key)
    if unpacker is None:
        unpacker = struct.Struct(("<" if le else ">") + "d" * (2 * count))
        if count <= 64:
            _points_structs[key] = unpacker
    values = [format_coordinate(v) for v in unpacker.unpack_from(buf, pos)]
    text = ",".join([f"{values[i]} {values[i + 1]}" for i in range(0, len(values), 2)])
    return text, pos + 16 * count


def _point(buf: memoryview, pos: int, end: int, le: int) -> tuple[str, int]:
    if pos + 16 > end:
        raise ValueError(f"truncated point coordinates at offset {pos}")
    x, y = _POINT[le].unpack_from(buf, pos)
    return f"{format_coordinate(x)} {format_coordinate(y)}", pos + 16


def _polygon(buf: memoryview, pos: int, end: int, le: int) -> tuple[str, int]:
    """A polygon body as ``(ring),(ring)`` (without the outer parentheses)."""
    rings, pos = _count(buf, pos, end, le, 4, "polygon ring")
    parts = []
    for _ in range(rings):
        ring_pos = pos
        text, pos = _points(buf, pos, end, le, "polygon ring point")
        if not text:
            raise ValueError(f"polygon ring with no points at offset {ring_pos}")
        parts.append(f"({text})")
    return ",".join(parts), pos


def _simple(buf: memoryview, pos: int, end: int, le: int, gtype: int, out: list[str]) -> int:
    """Append the WKT of a non-collection geometry whose header ended at ``pos``; return the position after it."""
    name = _NAMES[gtype]
    if gtype == _POINT_T:
        text, pos = _point(buf, pos, end, le)
        out.append(f"POINT({text})")
        return pos
    if gtype == _LINESTRING_T:
        text, pos = _points(buf, pos, end, le, "linestring point")
    elif gtype == _POLYGON_T:
        text, pos = _polygon(buf, pos, end, le)
    else:
        member_type = _MEMBER[gtype]
        count, pos = _count(buf, pos, end, le, _HEADER_SIZE, f"{name.lower()} member")
        parts = []
        for _ in range(count):
            member_at = pos
            member_le, mtype, pos = _header(buf, pos, end)
            if mtype != member_type:
                raise ValueError(f"{_NAMES[mtype]} inside a {name} at offset {member_at}")
            if mtype == _POINT_T:
                part, pos = _point(buf, pos, end, member_le)
                parts.append(part)  # MariaDB: MULTIPOINT(1 1,2 2), no parentheses per point
            elif mtype == _LINESTRING_T:
                part, pos = _points(buf, pos, end, member_le, "linestring point")
                parts.append(f"({part})")
            else:
                part, pos = _polygon(buf, pos, end, member_le)
                parts.append(f"({part})")
        text = ",".join(parts)
    out.append(f"{name}({text})" if text else f"{name} EMPTY")
    return pos
