"""The compiled row decoders: row images read by ``binlog/_rows.c``, with the generated Python decoders behind them.

A table layout's row image becomes a list of operations, one per present column: how many bytes its value takes,
and how they become its text, either in C (integers, DECIMAL, FLOAT and DOUBLE in their common notation, the text of
a string column in its charset, binary strings) or through the tables and helpers the generated Python decoders use
(dates, times, ENUM, SET, JSON...), so both paths give the same values byte for byte. An event that the C code
cannot be sure of (a row image that runs past the event, a DECIMAL digit group out of range) is decoded again by the
Python decoder, which gives its values or its error exactly.

The module is built by ``python -m devtools.native`` (``scripts/bootstrap`` runs it). Without it, or with
``RELAY_NATIVE=0`` in the environment, every layout takes the Python decoders.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from binlog import values as _values
from binlog.changes import NOT_PRESENT, RowChange
from binlog.charsets import codec_for_charset
from binlog.constants import (
    KIND_DELETE,
    KIND_INSERT,
    KIND_UPDATE,
    MYSQL_TYPE_BIT,
    MYSQL_TYPE_BLOB,
    MYSQL_TYPE_BLOB_COMPRESSED,
    MYSQL_TYPE_DATE,
    MYSQL_TYPE_DATETIME,
    MYSQL_TYPE_DATETIME2,
    MYSQL_TYPE_DOUBLE,
    MYSQL_TYPE_ENUM,
    MYSQL_TYPE_FLOAT,
    MYSQL_TYPE_GEOMETRY,
    MYSQL_TYPE_INT24,
    MYSQL_TYPE_JSON,
    MYSQL_TYPE_LONG,
    MYSQL_TYPE_LONG_BLOB,
    MYSQL_TYPE_LONGLONG,
    MYSQL_TYPE_MEDIUM_BLOB,
    MYSQL_TYPE_NEWDATE,
    MYSQL_TYPE_NEWDECIMAL,
    MYSQL_TYPE_NULL,
    MYSQL_TYPE_SET,
    MYSQL_TYPE_SHORT,
    MYSQL_TYPE_STRING,
    MYSQL_TYPE_TIME,
    MYSQL_TYPE_TIME2,
    MYSQL_TYPE_TIMESTAMP,
    MYSQL_TYPE_TIMESTAMP2,
    MYSQL_TYPE_TINY,
    MYSQL_TYPE_TINY_BLOB,
    MYSQL_TYPE_VAR_STRING,
    MYSQL_TYPE_VARCHAR,
    MYSQL_TYPE_VARCHAR_COMPRESSED,
    MYSQL_TYPE_YEAR,
)
from binlog.native import load_compiled
from binlog.rowdecoder import fixed_size
from binlog.table import ColumnInfo

# The operations of binlog/_rows.c.
OP_INT, OP_TABLE_INT, OP_TEMPORAL, OP_DECIMAL, OP_FLOAT, OP_DOUBLE, OP_TIMESTAMP, OP_CALL = range(1, 9)
OP_VAR_TEXT, OP_VAR_BYTES, OP_VAR_CALL, OP_TIME2 = range(9, 13)

#: (index, nullable, operation, size, a, b, obj, obj2), as compile_image takes them.
Operation = tuple[int, bool, int, int, int, int, object, object]

_INT_SIZES = {MYSQL_TYPE_TINY: 1, MYSQL_TYPE_SHORT: 2, MYSQL_TYPE_INT24: 3, MYSQL_TYPE_LONG: 4, MYSQL_TYPE_LONGLONG: 8}
_BLOBS = (MYSQL_TYPE_BLOB, MYSQL_TYPE_TINY_BLOB, MYSQL_TYPE_MEDIUM_BLOB, MYSQL_TYPE_LONG_BLOB)


def _load() -> ModuleType | None:
    module = load_compiled("binlog._rows", Path(__file__).with_name("_rows.c"))
    if module is not None:
        module.configure(RowChange, NOT_PRESENT)
    return module


#: The compiled module, or None where it is not built or RELAY_NATIVE=0 turns it off.
native: ModuleType | None = _load()


def _json_text(data: bytes) -> str:
    from binlog.jsonb import decode_json  # on first use, as the generated decoders do

    return decode_json(data) if data else "null"


def _geometry_text(data: bytes) -> str:
    from binlog.geometry import geometry_to_wkt

    return geometry_to_wkt(data)


def _time2_whole(raw: bytes) -> str:
    """TIME(0) as the generated decoders write it (``rowdecoder._time2_of``)."""
    n = (raw[0] << 16 | raw[1] << 8 | raw[2]) - 8388608
    if 0 <= n < 98304:
        return _values.DATETIME2_TIME[n]
    if n > 0:
        return "%02d:%s" % (n >> 12 & 1023, _values.MINUTES_SECONDS[n & 4095])  # noqa: UP031
    return _values.whole_time2_text(n)


_read_u32 = struct.Struct("<I").unpack_from
_read_u64 = struct.Struct("<Q").unpack_from


def _fixed_operation(column: ColumnInfo, size: int) -> tuple[int, int, int, object, object]:
    """(operation, a, b, obj, obj2) of a fixed-size column, as the generated decoders read it."""
    t, meta = column.type_code, column.meta
    if t in _INT_SIZES:
        return OP_INT, int(column.unsigned), 0, None, None
    if t == MYSQL_TYPE_NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        if scale > precision:
            raise _Unsupported  # not written by a server: the Python decoders say what it gives
        return OP_DECIMAL, precision, scale, None, None
    if t == MYSQL_TYPE_FLOAT:
        return OP_FLOAT, 0, 0, _values.float_text, None
    if t == MYSQL_TYPE_DOUBLE:
        return OP_DOUBLE, 0, 0, _values.double_text, None
    if t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        return OP_TEMPORAL, 0, 0, _values.DATE_TEXT, None
    if t == MYSQL_TYPE_DATETIME2:
        return OP_TEMPORAL, 1, meta, _values.DATETIME2_BYTES[meta], None
    if t == MYSQL_TYPE_TIMESTAMP2:
        if meta == 0:
            return OP_TIMESTAMP, 0, 0, _values.DAY_TEXT, _values.SECONDS_OF_DAY
        return OP_CALL, 0, 0, lambda raw: _values.timestamp_text(
            int.from_bytes(raw[:4], "big"), _values.frac_usec(raw, 4, meta), meta), None  # fmt: skip
    if t == MYSQL_TYPE_TIME2:
        if meta == 0:
            return OP_TIME2, 0, 0, _values.DATETIME2_TIME, _time2_whole
        return OP_CALL, 0, 0, (lambda raw: _values.time2_text(raw, 0, meta)), None
    if t == MYSQL_TYPE_YEAR:
        return OP_TABLE_INT, 0, 0, _values.YEAR_TEXT, None
    if t == MYSQL_TYPE_ENUM:
        if meta == 1:
            return OP_TABLE_INT, 0, 0, _values.enum_table(column.enum_values), None
        labels = column.enum_values
        return OP_CALL, 0, 0, (lambda raw: _values.enum_text(int.from_bytes(raw, "little"), labels)), None
    if t == MYSQL_TYPE_SET:
        if meta in (1, 2):
            return OP_TABLE_INT, 0, 0, _values.set_memo(column.set_values), None
        labels = column.set_values
        return OP_CALL, 0, 0, (lambda raw: _values.set_text(int.from_bytes(raw, "little"), labels)), None
    if t == MYSQL_TYPE_BIT:
        if size == 1:
            return OP_TABLE_INT, 0, 0, _values.UNSIGNED_BYTE, None
        return OP_CALL, 0, 0, (lambda raw: str(int.from_bytes(raw, "big"))), None
    if t == MYSQL_TYPE_TIMESTAMP:
        if meta:
            return OP_CALL, 0, 0, (lambda raw: _values.timestamp_hires_text(raw, 0, meta)), None
        return OP_CALL, 0, 0, (lambda raw: _values.timestamp_fast(_read_u32(raw)[0])), None
    if t == MYSQL_TYPE_DATETIME:
        if meta:
            return OP_CALL, 0, 0, (lambda raw: _values.datetime_hires_text(raw, 0, meta)), None
        return OP_CALL, 0, 0, (lambda raw: _values.datetime_old_text(_read_u64(raw)[0])), None
    if t == MYSQL_TYPE_TIME:
        if meta:
            return OP_CALL, 0, 0, (lambda raw: _values.time_hires_text(raw, 0, meta)), None
        return OP_CALL, 0, 0, (lambda raw: _values.time_old_text(int.from_bytes(raw, "little", signed=True))), None
    if t == MYSQL_TYPE_NULL:
        return OP_CALL, 0, 0, (lambda raw: None), None
    raise _Unsupported


class _Unsupported(Exception):
    """A column the compiled decoder does not read: its layout takes the Python decoders."""


def _variable_operation(column: ColumnInfo) -> tuple[int, int, int, object, object]:
    """(operation, length bytes, padded length, obj, obj2) of a column whose value carries its own length."""
    t, meta = column.type_code, column.meta
    if t in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_STRING):
        width = 1 if meta < 256 else 2
        padded = meta if t == MYSQL_TYPE_STRING and column.charset == "binary" else 0
    elif t in _BLOBS or t in (MYSQL_TYPE_JSON, MYSQL_TYPE_GEOMETRY):
        width, padded = meta, 0
        if t == MYSQL_TYPE_JSON:
            return OP_VAR_CALL, width, 0, _json_text, None
        if t == MYSQL_TYPE_GEOMETRY or column.is_geometry:
            return OP_VAR_CALL, width, 0, _geometry_text, None
    elif t in (MYSQL_TYPE_VARCHAR_COMPRESSED, MYSQL_TYPE_BLOB_COMPRESSED):
        raise _Unsupported  # rare: the Python decoders uncompress them
    else:
        raise _Unsupported
    if not 1 <= width <= 4:
        raise _Unsupported
    if column.charset is None:
        return OP_VAR_CALL, width, 0, _values.text_or_bytes, None
    codec, errors = codec_for_charset(column.charset)
    if not codec:
        return OP_VAR_BYTES, width, padded, None, None
    return OP_VAR_TEXT, width, 0, codec, errors


def image_operations(columns: Sequence[ColumnInfo], present: int) -> list[Operation]:
    """The operations reading a row image with the columns ``present`` (a bitmap) of ``columns``."""
    operations: list[Operation] = []
    for index, column in enumerate(columns):
        if not present >> index & 1:
            continue
        size = fixed_size(column)
        if size is None:
            op, width, a, obj, obj2 = _variable_operation(column)
            operations.append((index, column.nullable, op, width, a, 0, obj, obj2))
        else:
            op, a, b, obj, obj2 = _fixed_operation(column, size)
            operations.append((index, column.nullable, op, size, a, b, obj, obj2))
    return operations


#: (buf, p, end, schema, table, names, file, pos, timestamp, gtid, info, first_row) -> (rows or lines, p)
Decoder = Callable[..., tuple[list[Any], int]]


def compiled_decoder(
    columns: Sequence[ColumnInfo], kind: int, present: int, present_after: int, fallback: Callable[[], Decoder],
    text: bool = False,
) -> Decoder | None:  # fmt: skip
    """A decoder of an event's rows by the compiled module, or None where it is not built or a column is not one
    it reads. ``text``: dump's lines instead of RowChange objects. ``fallback`` makes the Python decoder of the
    layout (on first need) for the events the compiled one hands back."""
    if native is None or kind not in (KIND_INSERT, KIND_UPDATE, KIND_DELETE):
        return None
    try:
        first = native.compile_image(len(columns), image_operations(columns, present))
        second = None
        if kind == KIND_UPDATE:
            second = native.compile_image(len(columns), image_operations(columns, present_after))
    except (_Unsupported, ValueError):  # ValueError: operations the compiled module refuses (odd metadata)
        return None
    decode_event = native.text_rows if text else native.decode_rows
    return cast(Decoder, functools.partial(decode_event, first, second, kind, _OnFirstUse(fallback)))


class _OnFirstUse:
    """The Python decoder of a layout, made when the compiled one first hands it an event (most layouts never)."""

    __slots__ = ("decoder", "make")

    def __init__(self, make: Callable[[], Decoder]) -> None:
        self.make = make
        self.decoder: Decoder | None = None

    def __call__(self, *event: Any) -> tuple[list[Any], int]:
        if self.decoder is None:
            self.decoder = self.make()
        return self.decoder(*event)
