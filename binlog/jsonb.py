"""MySQL's binary JSON format (the value of a JSON column in a MySQL 5.7/8.x row event) rendered as compact JSON text.

Layout (MySQL ``sql-common/json_binary.h``); all integers little-endian::

    doc          ::= type value
    type         ::= 0x00 small object | 0x01 large object | 0x02 small array | 0x03 large array
                   | 0x04 literal | 0x05 int16 | 0x06 uint16 | 0x07 int32 | 0x08 uint32
                   | 0x09 int64 | 0x0a uint64 | 0x0b double | 0x0c utf8mb4 string | 0x0f opaque
    object       ::= element-count size key-entry* value-entry* key* value*
    array        ::= element-count size value-entry* value*
    element-count, size, key-offset, value offset ::= uint16 (small) | uint32 (large)
    key-entry    ::= key-offset uint16-key-length
    value-entry  ::= type offset-or-inlined-value
    literal      ::= 0x00 null | 0x01 true | 0x02 false
    string       ::= data-length utf8mb4-bytes
    opaque       ::= mysql-field-type(uint8) data-length bytes
    data-length  ::= 1..5 bytes, 7 bits each, least significant first, high bit = "more bytes follow"

Offsets count from the first byte after the container's type byte. Literals, int16 and uint16 are stored inside the
value entry ("inlined"); a large container also inlines int32 and uint32.

Rendering follows MySQL 8's ``Json_wrapper::to_string`` except that the separators are compact (``,`` and ``:``
without the space MySQL adds):

* strings and keys escaped as MySQL's ``double_quote``: ``\\"``, ``\\\\``, ``\\b \\f \\n \\r \\t``, other control
  characters as ``\\u00xx``; everything else (``/``, DEL, non-ASCII) verbatim;
* doubles as MySQL's ``my_gcvt`` (shortest digits that round-trip; exponent form only above 1e15 for integral
  values or below 1e-15: ``1e20``, ``1.5e-16``, ``0.0001``) plus ``.0`` when that text has neither ``.`` nor
  ``e``, as MySQL 8 does to keep doubles apart from integers: ``2.5``, ``1.0``, ``-0.0``, ``1e20``;
* opaque DECIMAL as the exact decimal with its scale (``1.50``); DATE as ``"YYYY-MM-DD"``; TIME, DATETIME and
  TIMESTAMP always with six fraction digits, as MySQL prints them (``"10:00:00.000000"``,
  ``"2015-01-15 23:24:25.000000"``); opaque VAR_STRING as a plain string; any other opaque type as
  ``"base64:type<N>:<base64>"`` (MySQL's base64 breaks lines every 76 characters, which print as ``\\n``).
* an empty document (length 0, which MySQL writes for an empty JSON value) is ``null``.

Decoding is iterative (an explicit stack), so nesting depth is bounded by the data, not by Python's recursion limit.
Every offset and length is checked; malformed input raises ``ValueError`` naming the problem, type byte and offset
(offsets are positions in ``data``). Nested values must lie inside their parent, so a crafted document cannot loop.

``decode_json_diff`` decodes the partial-update diff vector (``binlog_row_value_options=PARTIAL_JSON``) into
operations; ``apply_json_diff`` applies a vector to the before image's document and renders the result as above.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Iterator
from json.encoder import encode_basestring  # C-accelerated; escapes exactly the characters MySQL escapes
from typing import Any, NamedTuple, Protocol, TypeAlias

from binlog.geometry import gcvt_digits

__all__ = ["ArrayCell", "apply_json_diff", "decode_json", "decode_json_diff", "format_double", "parse_json_path"]

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = (
    0x04,
    0x05,
    0x06,
    0x07,
    0x08,
    0x09,
    0x0A,
    0x0B,
    0x0C,
    0x0F,
)

# MySQL enum_field_types values that an opaque value may carry and that MySQL renders specially.
MYSQL_TYPE_TIMESTAMP = 7
MYSQL_TYPE_DATE = 10
MYSQL_TYPE_TIME = 11
MYSQL_TYPE_DATETIME = 12
MYSQL_TYPE_NEWDECIMAL = 246
MYSQL_TYPE_VAR_STRING = 253

_HDR = (struct.Struct("<HH"), struct.Struct("<II"))  # element count, size
_KEY = (struct.Struct("<HH"), struct.Struct("<IH"))  # key offset, key length
_VAL = (struct.Struct("<BH"), struct.Struct("<BI"))  # value type, offset or inlined value
_KEY_SIZE = (4, 6)
_VAL_SIZE = (3, 5)
_OFFSET_SIZE = (2, 4)
_SCALARS = {
    INT16: struct.Struct("<h"),
    UINT16: struct.Struct("<H"),
    INT32: struct.Struct("<i"),
    UINT32: struct.Struct("<I"),
    INT64: struct.Struct("<q"),
    UINT64: struct.Struct("<Q"),
    DOUBLE: struct.Struct("<d"),
}
_I16 = _SCALARS[INT16]
_I32 = _SCALARS[INT32]
_I64 = _SCALARS[INT64]
_LITERALS = ("null", "true", "false")
_TYPE_NAMES = {
    SMALL_OBJECT: "small object",
    LARGE_OBJECT: "large object",
    SMALL_ARRAY: "small array",
    LARGE_ARRAY: "large array",
    LITERAL: "literal",
    INT16: "int16",
    UINT16: "uint16",
    INT32: "int32",
    UINT32: "uint32",
    INT64: "int64",
    UINT64: "uint64",
    DOUBLE: "double",
    STRING: "string",
    OPAQUE: "opaque",
}
# Which value-entry types are stored in the entry itself, for small (index 0) and large (index 1) containers.
_INLINED = (frozenset((LITERAL, INT16, UINT16)), frozenset((LITERAL, INT16, UINT16, INT32, UINT32)))

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes used by 0..9 leftover decimal digits
_POW10 = tuple(10**i for i in range(10))


class _Container:
    """An open object or array while its members are being rendered."""

    __slots__ = ("base", "count", "index", "is_object", "large", "size")

    def __init__(self, is_object: bool, large: int, base: int, size: int, count: int) -> None:
        self.is_object = is_object
        self.large = large
        self.base = base
        self.size = size
        self.count = count
        self.index = 0


def decode_json(data: bytes | memoryview) -> str:
    """Render a MySQL binary JSON document (a JSON column value without its length prefix) as compact JSON."""
    buf = memoryview(data)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    end = len(buf)
    if end == 0:
        return "null"
    t = buf[0]
    if t > LARGE_ARRAY:
        if t == LITERAL:  # a top-level literal is one byte, not an inlined entry field
            if end < 2:
                raise ValueError("truncated JSON literal at offset 1")
            return _literal(buf[1], 1)
        return _scalar(buf, t, 1, end)
    out: list[str] = []
    _render_container(buf, t, 1, end, out)
    return "".join(out)


def _open(buf: memoryview, t: int, pos: int, limit: int) -> _Container:
    """Validate a container's header at ``pos`` (its bytes must end by ``limit``)."""
    large = t & 1
    is_object = t < SMALL_ARRAY
    if pos + 2 * _OFFSET_SIZE[large] > limit:
        raise ValueError(f"truncated JSON {_TYPE_NAMES[t]} header at offset {pos}")
    count, size = _HDR[large].unpack_from(buf, pos)
    if size > limit - pos:
        raise ValueError(f"JSON {_TYPE_NAMES[t]} at offset {pos} claims {size} bytes but only {limit - pos} remain")
    header = 2 * _OFFSET_SIZE[large] + count * (_VAL_SIZE[large] + (_KEY_SIZE[large] if is_object else 0))
    if header > size:
        raise ValueError(
            f"JSON {_TYPE_NAMES[t]} at offset {pos}: {count} elements do not fit in its size of {size} bytes"
        )
    return _Container(is_object, large, pos, size, count)


def _inlined(buf: memoryview, vt: int, field: int, entry_at: int) -> str:
    """The text of a value stored in its value entry (at ``entry_at``; ``field`` is the entry's offset field)."""
    if vt == LITERAL:
        return _literal(buf[entry_at + 1], entry_at + 1)
    if vt == INT16:
        return str(_I16.unpack_from(buf, entry_at + 1)[0])
    if vt == INT32:
        return str(_I32.unpack_from(buf, entry_at + 1)[0])
    if vt == UINT16:  # little-endian, so the low 16 bits of either field width
        return str(field & 0xFFFF)
    return str(field)  # UINT32, inlined in large containers only


def _outside(entry_at: int, vt: int, value_at: int, base: int, size: int) -> ValueError:
    return ValueError(
        f"JSON value entry at offset {entry_at} (type 0x{vt:02x}) points to offset {value_at}, "
        f"outside its container at {base}..{base + size}"
    )


def _render_container(buf: memoryview, t: int, pos: int, limit: int, out: list[str]) -> None:
    append = out.append
    frame = _open(buf, t, pos, limit)
    append("{" if frame.is_object else "[")
    stack: list[_Container] = []
    while True:
        large = frame.large
        base = frame.base
        size = frame.size
        count = frame.count
        i = frame.index
        val_struct = _VAL[large]
        val_size = _VAL_SIZE[large]
        inlined = _INLINED[large]
        offsets = 2 * _OFFSET_SIZE[large]
        if frame.is_object:
            key_struct = _KEY[large]
            key_size = _KEY_SIZE[large]
            entries = base + offsets + count * key_size
        else:
            entries = base + offsets
        header_end = entries + count * val_size
        descend = None
        while i < count:
            if i:
                append(",")
            if frame.is_object:
                key_at = base + offsets + i * key_size
                key_off, key_len = key_struct.unpack_from(buf, key_at)
                if key_off + key_len > size or base + key_off < header_end:
                    raise ValueError(f"JSON object key entry at offset {key_at} points outside its object")
                append(_string(buf, base + key_off, key_len, key_at))
                append(":")
            entry_at = entries + i * val_size
            vt, field = val_struct.unpack_from(buf, entry_at)
            i += 1
            if vt in inlined:
                append(_inlined(buf, vt, field, entry_at))
                continue
            value_at = base + field
            if field >= size or value_at < header_end:
                raise _outside(entry_at, vt, value_at, base, size)
            if vt <= LARGE_ARRAY:
                descend = (vt, value_at)
                break
            append(_scalar(buf, vt, value_at, base + size, entry_at))
        if descend is not None:
            frame.index = i
            stack.append(frame)
            vt, value_at = descend
            frame = _open(buf, vt, value_at, base + size)
            append("{" if frame.is_object else "[")
            continue
        append("}" if frame.is_object else "]")
        if not stack:
            return
        frame = stack.pop()


def _literal(value: int, at: int) -> str:
    if value > 2:
        raise ValueError(f"bad JSON literal value 0x{value:02x} at offset {at}")
    return _LITERALS[value]


def _scalar(buf: memoryview, t: int, pos: int, limit: int, entry_at: int | None = None) -> str:
    """Render a non-container value stored at ``pos`` (which must end by ``limit``)."""
    unpacker = _SCALARS.get(t)
    if unpacker is not None:
        if pos + unpacker.size > limit:
            raise ValueError(f"truncated JSON {_TYPE_NAMES[t]} (type 0x{t:02x}) at offset {pos}")
        value = unpacker.unpack_from(buf, pos)[0]
        return format_double(value) if t == DOUBLE else str(value)
    if t == STRING:
        length, start = _varlen(buf, pos, limit, t)
        return _string(buf, start, length, pos)
    if t == OPAQUE:
        if pos >= limit:
            raise ValueError(f"truncated JSON opaque value (type 0x0f) at offset {pos}")
        field_type = buf[pos]
        length, start = _varlen(buf, pos + 1, limit, t)
        return _opaque(buf, field_type, start, length, pos)
    if t == LITERAL:
        if pos >= limit:
            raise ValueError(f"truncated JSON literal at offset {pos}")
        return _literal(buf[pos], pos)
    where = f"value entry at offset {entry_at}" if entry_at is not None else f"offset {pos - 1}"
    raise ValueError(f"unknown JSON value type 0x{t:02x} at {where}")


def _varlen(buf: memoryview, pos: int, limit: int, t: int) -> tuple[int, int]:
    """Read a data-length (up to 5 bytes of 7 bits) at ``pos``; check the data fits. Returns (length, data start)."""
    length = 0
    for i in range(5):
        if pos + i >= limit:
            raise ValueError(f"truncated length of JSON {_TYPE_NAMES[t]} at offset {pos}")
        byte = buf[pos + i]
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            start = pos + i + 1
            if length > 0xFFFFFFFF or start + length > limit:
                raise ValueError(
                    f"JSON {_TYPE_NAMES[t]} at offset {pos} has length {length} but only {limit - start} bytes remain"
                )
            return length, start
    raise ValueError(f"JSON {_TYPE_NAMES[t]} length at offset {pos} is longer than 5 bytes")


def _string(buf: memoryview, start: int, length: int, at: int) -> str:
    try:
        text = str(buf[start : start + length], "utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"JSON string at offset {at} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    return encode_basestring(text)


def format_double(value: float) -> str:
    """A JSON double as MySQL 8 prints it: ``my_gcvt`` text, plus ``.0`` if it has neither ``.`` nor ``e``."""
    s = repr(value)
    # repr() and my_gcvt agree on the fixed notation for |x| in [1e-4, 1e15); repr always keeps a ".".
    if "e" not in s and "n" not in s and -1e15 < value < 1e15:
        return s
    if value != value or value in (float("inf"), float("-inf")):
        return "0.0"  # MySQL's dtoa reports overflow for NaN/infinity and my_gcvt prints 0 (never stored by MySQL)
    text = gcvt_digits(s)
    return text if "." in text or "e" in text else text + ".0"


def _opaque(buf: memoryview, field_type: int, start: int, length: int, at: int) -> str:
    if field_type == MYSQL_TYPE_NEWDECIMAL:
        return _decimal(buf, start, length, at)
    if field_type in (MYSQL_TYPE_DATE, MYSQL_TYPE_TIME, MYSQL_TYPE_DATETIME, MYSQL_TYPE_TIMESTAMP):
        if length != 8:
            raise ValueError(f"JSON opaque temporal (field type {field_type}) at offset {at} has {length} bytes, not 8")
        return _temporal(_I64.unpack_from(buf, start)[0], field_type, at)
    if field_type == MYSQL_TYPE_VAR_STRING:  # MySQL prints these as plain strings
        return _string(buf, start, length, at)
    encoded = base64.b64encode(buf[start : start + length]).decode("ascii")
    if len(encoded) > 76:  # MySQL's base64_encode starts a new line every 76 characters
        encoded = "\\n".join([encoded[i : i + 76] for i in range(0, len(encoded), 76)])
    return f'"base64:type{field_type}:{encoded}"'


def _decimal(buf: memoryview, start: int, length: int, at: int) -> str:
    """An opaque DECIMAL: precision byte, scale byte, then MySQL's packed decimal (decimal2bin) -> exact text."""
    if length < 2:
        raise ValueError(f"JSON opaque DECIMAL at offset {at} is too short ({length} bytes)")
    precision, scale = buf[start], buf[start + 1]
    if not 1 <= precision <= 65 or scale > 30 or scale > precision:
        raise ValueError(f"JSON opaque DECIMAL at offset {at} has bad precision/scale {precision},{scale}")
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    lead = _DIG2BYTES[intg0x]
    tail = _DIG2BYTES[frac0x]
    size = lead + 4 * intg0 + 4 * frac0 + tail
    if length - 2 < size:
        raise ValueError(
            f"JSON opaque DECIMAL({precision},{scale}) at offset {at} needs {size} bytes, has {length - 2}"
        )
    raw = bytearray(buf[start + 2 : start + 2 + size])
    negative = not raw[0] & 0x80  # the sign bit is stored flipped; negative values have every bit inverted
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(raw.translate(_INVERT))
    pos = 0
    integer = 0
    if lead:
        integer = int.from_bytes(raw[:lead], "big")
        if integer >= _POW10[intg0x]:
            raise ValueError(f"JSON opaque DECIMAL at offset {at}: bad leading digit group {integer}")
        pos = lead
    for _ in range(intg0):
        group = int.from_bytes(raw[pos : pos + 4], "big")
        if group > 999_999_999:
            raise ValueError(f"JSON opaque DECIMAL at offset {at}: bad digit group {group}")
        integer = integer * 1_000_000_000 + group
        pos += 4
    parts = []
    for _ in range(frac0):
        group = int.from_bytes(raw[pos : pos + 4], "big")
        if group > 999_999_999:
            raise ValueError(f"JSON opaque DECIMAL at offset {at}: bad digit group {group}")
        parts.append(f"{group:09d}")
        pos += 4
    if tail:
        group = int.from_bytes(raw[pos : pos + tail], "big")
        if group >= _POW10[frac0x]:
            raise ValueError(f"JSON opaque DECIMAL at offset {at}: bad trailing digit group {group}")
        parts.append(f"{group:0{frac0x}d}")
    text = str(integer)
    if scale:
        text = f"{text}.{''.join(parts)}"
    elif integer == 0:
        negative = False  # MySQL's bin2decimal makes a digitless zero positive
    return f"-{text}" if negative else text


_INVERT = bytes(255 - i for i in range(256))


def _temporal(packed: int, field_type: int, at: int) -> str:
    """MySQL's packed 64-bit temporal (TIME_to_longlong_*_packed) as MySQL's JSON prints it (6 fraction digits)."""
    negative = packed < 0
    if negative:
        packed = -packed
    frac = packed & 0xFFFFFF  # low 24 bits: microseconds
    if frac > 999_999:
        raise ValueError(f"JSON opaque temporal at offset {at} has bad microseconds {frac}")
    whole = packed >> 24
    if field_type == MYSQL_TYPE_TIME:
        hour = (whole >> 12) & 0x3FF
        return f'"{"-" if negative else ""}{hour:02d}:{(whole >> 6) & 0x3F:02d}:{whole & 0x3F:02d}.{frac:06d}"'
    if negative:
        raise ValueError(f"JSON opaque date/datetime at offset {at} is negative")
    ymd = whole >> 17
    ym = ymd >> 5
    date = f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 0x1F:02d}"
    if field_type == MYSQL_TYPE_DATE:
        return f'"{date}"'
    hms = whole & 0x1FFFF
    return f'"{date} {hms >> 12:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{frac:06d}"'


# Partial JSON updates (binlog_row_value_options=PARTIAL_JSON): in a PARTIAL_UPDATE_ROWS event the after image of a
# JSON column may hold a diff vector instead of the document (MySQL sql/json_diff.cc, Json_diff_vector::write_binary).
# After its 4-byte length (stripped by the row decoder, as for a full document) it is a sequence of:
#     operation(uint8: 0 REPLACE, 1 INSERT, 2 REMOVE) path-length(packed integer) path(utf8 JSON path, e.g. $.a[1])
#     [value-length(packed integer) value(binary JSON)]   -- absent for REMOVE
JSON_DIFF_OPERATIONS = ("REPLACE", "INSERT", "REMOVE")
_REPLACE, _INSERT, _REMOVE = 0, 1, 2


def _iter_json_diff(data: bytes | memoryview) -> Iterator[tuple[int, str, memoryview | None]]:
    """The diffs of a vector as (operation code, path text, binary JSON value or None for REMOVE)."""
    buf = memoryview(data)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    end = len(buf)
    pos = 0
    while pos < end:
        op = buf[pos]
        if op >= len(JSON_DIFF_OPERATIONS):
            raise ValueError(f"bad JSON diff operation {op} at offset {pos}")
        path_len, pos = _packed_length(buf, pos + 1, end, "path")
        try:
            path = str(buf[pos : pos + path_len], "utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"JSON diff path at offset {pos} is not valid UTF-8") from None
        pos += path_len
        value = None
        if op != _REMOVE:
            value_len, pos = _packed_length(buf, pos, end, "value")
            value = buf[pos : pos + value_len]
            pos += value_len
        yield op, path, value


def decode_json_diff(data: bytes | memoryview) -> list[tuple[str, str, str | None]]:
    """Decode a partial-JSON diff vector into ``(operation, path, value as JSON text or None)`` tuples, in order."""
    return [
        (JSON_DIFF_OPERATIONS[op], path, None if value is None else decode_json(value))
        for op, path, value in _iter_json_diff(data)
    ]


def _packed_length(buf: memoryview, pos: int, end: int, what: str) -> tuple[int, int]:
    """A MySQL packed integer (net_field_length) length at ``pos``, checked to fit; returns (length, next pos)."""
    if pos >= end:
        raise ValueError(f"truncated JSON diff {what} length at offset {pos}")
    first = buf[pos]
    if first < 251:
        length, start = first, pos + 1
    elif first == 251:
        raise ValueError(f"NULL JSON diff {what} length at offset {pos}")
    else:
        width = {252: 2, 253: 3, 254: 8}[first]
        if pos + 1 + width > end:
            raise ValueError(f"truncated JSON diff {what} length at offset {pos}")
        length, start = int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width
    if start + length > end:
        raise ValueError(f"JSON diff {what} at offset {start} has length {length} but only {end - start} bytes remain")
    return length, start


# -- JSON paths ---------------------------------------------------------------------------------------------------
# A diff's path is what MySQL's Json_path::to_string writes: ``$`` then legs, each ``.name`` (the name double-quoted,
# with JSON escapes, unless it is an ECMAScript identifier: ``$."a b"``, ``$."1st"``) or ``[N]``, ``[last]``,
# ``[last-N]``. Wildcards, ``**`` and ranges never occur in a diff (they do not name one place) and are refused.


class ArrayCell(NamedTuple):
    """An array leg: ``offset`` from the start, or from the end (``last`` is 0 from the end) if ``from_end``."""

    offset: int  # not ``index``, which would hide tuple.index
    from_end: bool = False

    def position(self, length: int) -> tuple[int, bool]:
        """(position in an array of ``length``, whether it is inside it), as MySQL's Json_array_index computes them:
        a position past the end is clamped to the end (where INSERT appends), one before the start to 0."""
        if self.from_end:
            return (length - self.offset - 1 if self.offset < length else 0), self.offset < length
        return min(self.offset, length), self.offset < length


PathLeg = str | ArrayCell
_CELL = re.compile(r"\s*(?:([0-9]+)|last\s*(?:-\s*([0-9]+))?)\s*\Z")


def parse_json_path(path: str) -> list[PathLeg]:
    """The legs of a JSON path as a diff writes it: member names (``str``) and ``ArrayCell`` s."""
    n = len(path)
    i = _skip_spaces(path, 0)
    if i >= n or path[i] != "$":
        raise ValueError(f"JSON path {path!r} does not start with $")
    i += 1
    legs: list[PathLeg] = []
    while (i := _skip_spaces(path, i)) < n:
        if path[i] == ".":
            i = _skip_spaces(path, i + 1)
            if i < n and path[i] == '"':
                j = i + 1
                while j < n and path[j] != '"':
                    j += 2 if path[j] == "\\" else 1
                if j >= n:
                    raise ValueError(f"JSON path {path!r}: unterminated quoted member name")
                try:
                    legs.append(json.loads(path[i : j + 1]))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"JSON path {path!r}: bad quoted member name ({exc.msg})") from None
                i = j + 1
            else:
                j = i
                while j < n and path[j] not in ".[" and not path[j].isspace():
                    j += 1
                name = path[i:j]
                if not name or "*" in name:
                    raise ValueError(f"JSON path {path!r}: a diff path names one member, not {name or 'nothing'!r}")
                legs.append(name)
                i = j
        elif path[i] == "[":
            j = path.find("]", i)
            cell = _CELL.match(path, i + 1, j) if j > 0 else None
            if cell is None:
                leg = path[i : j + 1] if j > 0 else path[i:]
                raise ValueError(f"JSON path {path!r}: a diff path names one array cell, not {leg!r}")
            if cell[1] is not None:
                legs.append(ArrayCell(int(cell[1])))
            else:
                legs.append(ArrayCell(int(cell[2] or 0), from_end=True))
            i = j + 1
        else:
            raise ValueError(f"JSON path {path!r}: unexpected {path[i]!r} at offset {i}")
    return legs


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


# -- applying diffs ----------------------------------------------------------------------------------------------
# The document becomes a tree only along the paths the diffs touch: a node is rendered JSON text (a scalar, or any
# value no diff looks into), an unexpanded container (_Raw, still binary, rendered by the ordinary renderer), or an
# expanded one (dict for objects, list for arrays, of nodes). A 1 MB document with one changed member costs one
# expansion per level of that member's path, not a parse of the whole document.


class _Raw:
    """A container still in binary form: its type byte and where its bytes lie in ``buf``."""

    __slots__ = ("buf", "limit", "pos", "t")

    def __init__(self, buf: memoryview, t: int, pos: int, limit: int) -> None:
        self.buf = buf
        self.t = t
        self.pos = pos
        self.limit = limit


_Node: TypeAlias = "str | _Raw | dict[str, _Node] | list[_Node]"


class _Holder(Protocol):
    """An expanded object (slots: member names) or array (slots: indexes), the holder of a node a diff reaches."""

    # Any: an object takes only names and an array only indexes, which one parameter type cannot say.
    def __getitem__(self, slot: Any, /) -> _Node: ...

    def __setitem__(self, slot: Any, node: _Node, /) -> None: ...


def _document_node(data: bytes | memoryview) -> _Node:
    """A binary JSON document (a column value or a diff's value) as a node."""
    buf = memoryview(data)
    if buf.ndim != 1 or buf.itemsize != 1:
        buf = buf.cast("B")
    if len(buf) and buf[0] <= LARGE_ARRAY:
        return _Raw(buf, buf[0], 1, len(buf))
    return decode_json(buf)


def _expand(raw: _Raw) -> dict[str, _Node] | list[_Node]:
    """A container's members as nodes (nested containers stay raw), with the checks ``_render_container`` makes."""
    buf = raw.buf
    frame = _open(buf, raw.t, raw.pos, raw.limit)
    large, base, size, count = frame.large, frame.base, frame.size, frame.count
    offsets = 2 * _OFFSET_SIZE[large]
    key_size = _KEY_SIZE[large] if frame.is_object else 0
    entries = base + offsets + count * key_size
    header_end = entries + count * _VAL_SIZE[large]
    values: list[_Node] = []
    keys: list[str] = []
    for i in range(count):
        if frame.is_object:
            key_at = base + offsets + i * key_size
            key_off, key_len = _KEY[large].unpack_from(buf, key_at)
            if key_off + key_len > size or base + key_off < header_end:
                raise ValueError(f"JSON object key entry at offset {key_at} points outside its object")
            try:
                keys.append(str(buf[base + key_off : base + key_off + key_len], "utf-8"))
            except UnicodeDecodeError as exc:
                raise ValueError(f"JSON object key at offset {key_at} is not valid UTF-8: {exc.reason}") from None
        entry_at = entries + i * _VAL_SIZE[large]
        vt, field = _VAL[large].unpack_from(buf, entry_at)
        if vt in _INLINED[large]:
            values.append(_inlined(buf, vt, field, entry_at))
            continue
        value_at = base + field
        if field >= size or value_at < header_end:
            raise _outside(entry_at, vt, value_at, base, size)
        if vt <= LARGE_ARRAY:
            values.append(_Raw(buf, vt, value_at, base + size))
        else:
            values.append(_scalar(buf, vt, value_at, base + size, entry_at))
    return dict(zip(keys, values, strict=True)) if frame.is_object else values


def _container_at(holder: _Holder, slot: str | int) -> _Node:
    """The node in ``holder[slot]``, expanded in place first if it is a raw container."""
    node = holder[slot]
    if isinstance(node, _Raw):
        node = holder[slot] = _expand(node)
    return node


def _seek(root: list[_Node], legs: list[PathLeg]) -> tuple[_Holder, str | int] | None:
    """(container, key or index) of the value at ``legs``, or None if there is none (no auto-wrapping, as MySQL's
    seek_exact_path)."""
    holder: _Holder = root
    slot: str | int = 0
    for leg in legs:
        node = _container_at(holder, slot)
        if isinstance(leg, str):
            if not isinstance(node, dict) or leg not in node:
                return None
            holder, slot = node, leg
        else:
            if not isinstance(node, list):
                return None
            index, inside = leg.position(len(node))
            if not inside:
                return None
            holder, slot = node, index
    return holder, slot


def _key_order(key: str) -> tuple[int, bytes]:
    """MySQL's order of object keys (Json_key_comparator): shorter UTF-8 first, then bytewise."""
    raw = key.encode("utf-8")
    return len(raw), raw


def _insert_member(obj: dict[str, _Node], key: str, value: _Node) -> None:
    """Add a member where MySQL's sorted object puts it (the other members keep their order)."""
    items = list(obj.items())
    order = _key_order(key)
    at = next((i for i, (k, _v) in enumerate(items) if _key_order(k) > order), len(items))
    items.insert(at, (key, value))
    obj.clear()
    obj.update(items)


def _apply_one(root: list[_Node], op: int, path: str, value: memoryview | None) -> None:
    """One diff, as MySQL's apply_json_diffs applies it; a diff MySQL would reject raises ValueError."""
    legs = parse_json_path(path)
    name = JSON_DIFF_OPERATIONS[op]
    if not legs:
        raise ValueError(f"JSON diff {name} {path}: a diff cannot change the whole document")
    if op == _REPLACE and value is not None:
        found = _seek(root, legs)
        if found is None:
            raise ValueError(f"JSON diff REPLACE {path}: no value there in the before image")
        holder, slot = found
        holder[slot] = _document_node(value)
        return
    found = _seek(root, legs[:-1])
    parent = None if found is None else _container_at(*found)
    last = legs[-1]
    if op == _INSERT and value is not None:
        if isinstance(parent, dict) and isinstance(last, str):
            if last in parent:
                raise ValueError(f"JSON diff INSERT {path}: the member already exists in the before image")
            _insert_member(parent, last, _document_node(value))
            return
        if isinstance(parent, list) and isinstance(last, ArrayCell):
            parent.insert(last.position(len(parent))[0], _document_node(value))
            return
        raise ValueError(f"JSON diff INSERT {path}: no object or array to insert into in the before image")
    # REMOVE, the one operation without a value (_iter_json_diff reads one for each other operation)
    if isinstance(parent, dict) and isinstance(last, str) and last in parent:
        del parent[last]
        return
    if isinstance(parent, list) and isinstance(last, ArrayCell):
        index, inside = last.position(len(parent))
        if inside:
            del parent[index]
            return
    raise ValueError(f"JSON diff REMOVE {path}: no value there in the before image")


def _render_node(node: _Node) -> str:
    """JSON text of a node, in decode_json's form (iterative: expanded levels are as deep as the diff paths)."""
    out: list[str] = []
    work: list[_Node] = [node]
    while work:
        item = work.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, _Raw):
            _render_container(item.buf, item.t, item.pos, item.limit, out)
        elif isinstance(item, dict):
            pieces: list[_Node] = ["{"]
            for i, (key, value) in enumerate(item.items()):
                pieces.append(("," if i else "") + encode_basestring(key) + ":")
                pieces.append(value)
            pieces.append("}")
            work.extend(reversed(pieces))
        else:
            pieces = ["["]
            for i, value in enumerate(item):
                if i:
                    pieces.append(",")
                pieces.append(value)
            pieces.append("]")
            work.extend(reversed(pieces))
    return "".join(out)


def apply_json_diff(before: bytes | memoryview, diff: bytes | memoryview) -> str:
    """The JSON text of a document after a diff vector: ``before`` is the binary JSON document of the before image,
    ``diff`` the vector (without its 4-byte length). The result reads exactly as ``decode_json`` would render the
    document MySQL stores (a new object member goes where MySQL's key order puts it).

    Raises ValueError for malformed input and for a diff MySQL itself rejects: a REPLACE or REMOVE of a value that
    is not there, an INSERT of a member that exists or into something that is not a container, a path to ``$``.
    """
    root: list[_Node] = [_document_node(before)]
    for op, path, value in _iter_json_diff(diff):
        _apply_one(root, op, path, value)
    return _render_node(root[0])
