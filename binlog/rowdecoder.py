"""Per-table row decoders, generated as Python source once per column layout.

A rows event holds many rows of one table; interpreting each column's type for every row costs most of the decoding
time. Instead, the first rows event of a layout (column types, metadata, signedness, charsets, labels, and the set of
columns present in the row image) gets a straight-line function that decodes one row image; later events of the
same layout reuse it from a cache. The generated function takes ``(buf, pos)`` and returns ``(values, next_pos)``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence

from binlog import values as _values
from binlog.changes import NOT_PRESENT
from binlog.charsets import codec_for_charset
from binlog.constants import (
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
from binlog.errors import BinlogError
from binlog.table import ColumnInfo

RowDecoder = Callable[[bytes, int], tuple[tuple, int]]

_INT_FORMATS = {
    MYSQL_TYPE_TINY: (1, "b", "B"),
    MYSQL_TYPE_SHORT: (2, "h", "H"),
    MYSQL_TYPE_LONG: (4, "i", "I"),
    MYSQL_TYPE_LONGLONG: (8, "q", "Q"),
}
_BLOB_LIKE = (
    MYSQL_TYPE_BLOB,
    MYSQL_TYPE_TINY_BLOB,
    MYSQL_TYPE_MEDIUM_BLOB,
    MYSQL_TYPE_LONG_BLOB,
    MYSQL_TYPE_GEOMETRY,
    MYSQL_TYPE_JSON,
)


def _json_text(data: bytes) -> str:
    from binlog.jsonb import decode_json  # imported on first use: the module is optional for MariaDB-only use

    return decode_json(data) if data else "null"


def _geometry_text(data: bytes) -> str:
    from binlog.geometry import geometry_to_wkt

    return geometry_to_wkt(data)


def _uncompress(data: bytes) -> bytes:
    """MariaDB compressed column: a header byte (0 = stored as is; else 0x80, bit 3 for raw deflate and the width of
    the big-endian original length in the low 3 bits), the length, the deflate stream."""
    if not data:
        return data
    header = data[0]
    if header == 0:
        return data[1:]
    width = header & 0x07
    # Bit 3 set: a raw deflate stream without the zlib wrapper (MariaDB's default); clear: zlib-wrapped.
    return zlib.decompress(data[1 + width :], -15 if header & 0x08 else 15)


_GLOBALS: dict[str, object] = {
    "NP": NOT_PRESENT,
    "_float": _values.format_float,
    "_double": _values.format_double,
    "_date": _values.date_text,
    "_ts": _values.timestamp_text,
    "_dt2": _values.datetime2_text,
    "_dtold": _values.datetime_old_text,
    "_tmold": _values.time_old_text,
    "_tm2": _values.time2_text,
    "_frac": _values.frac_usec,
    "_enum": _values.enum_text,
    "_set": _values.set_text,
    "_text_or_bytes": _values.text_or_bytes,
    "_json": _json_text,
    "_wkt": _geometry_text,
    "_uncompress": _uncompress,
    "_from": int.from_bytes,
}


class _Builder:
    """Accumulates the generated source and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}

    def const(self, value: object, prefix: str = "k") -> str:
        for name, existing in self.consts.items():
            if existing is value or (type(existing) is type(value) and existing == value):
                return name
        name = f"{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def unpacker(self, fmt: str) -> str:
        return self.const(struct.Struct("<" + fmt).unpack_from, "u")


def _length_prefixed(b: _Builder, var: str, width: int, ind: str, convert: str | None) -> None:
    if width == 1:
        b.lines.append(f"{ind}n = buf[p]; p += 1")
    elif width == 2:
        b.lines.append(f"{ind}n = buf[p] | buf[p + 1] << 8; p += 2")
    else:
        b.lines.append(f"{ind}n = _from(buf[p:p + {width}], 'little'); p += {width}")
    raw = "buf[p:p + n]"
    b.lines.append(f"{ind}{var} = {convert.format(raw) if convert else raw}; p += n")


def _text_convert(column: ColumnInfo) -> str | None:
    """The expression (with {} for the bytes) turning a string column's bytes into its value."""
    if column.charset is None:
        return "_text_or_bytes({})"
    codec, errors = codec_for_charset(column.charset)
    if not codec:
        return None
    return f"{{}}.decode({codec!r}, {errors!r})"


def _emit_value(b: _Builder, column: ColumnInfo, var: str, ind: str) -> None:
    t, meta = column.type_code, column.meta
    add = b.lines.append
    if t in _INT_FORMATS:
        size, signed, unsigned = _INT_FORMATS[t]
        u = b.unpacker(unsigned if column.unsigned else signed)
        add(f"{ind}{var} = str({u}(buf, p)[0]); p += {size}")
    elif t == MYSQL_TYPE_INT24:
        add(f"{ind}{var} = str(_from(buf[p:p + 3], 'little', signed={not column.unsigned})); p += 3")
    elif t == MYSQL_TYPE_FLOAT:
        add(f"{ind}{var} = _float({b.unpacker('f')}(buf, p)[0]); p += 4")
    elif t == MYSQL_TYPE_DOUBLE:
        add(f"{ind}{var} = _double({b.unpacker('d')}(buf, p)[0]); p += 8")
    elif t == MYSQL_TYPE_NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        dec = b.const(_values.decimal_decoder(precision, scale), "dec")
        add(f"{ind}{var} = {dec}(buf, p); p += {_values.decimal_size(precision, scale)}")
    elif t == MYSQL_TYPE_YEAR:
        add(f"{ind}n = buf[p]; p += 1; {var} = str(n + 1900) if n else '0000'")
    elif t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        add(f"{ind}{var} = _date(buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16); p += 3")
    elif t == MYSQL_TYPE_TIMESTAMP:
        add(f"{ind}{var} = _ts({b.unpacker('I')}(buf, p)[0], 0, 0); p += 4")
    elif t == MYSQL_TYPE_TIMESTAMP2:
        fsp = meta
        usec = f"_frac(buf, p + 4, {fsp})" if fsp else "0"
        add(f"{ind}{var} = _ts(_from(buf[p:p + 4], 'big'), {usec}, {fsp}); p += {4 + (fsp + 1) // 2}")
    elif t == MYSQL_TYPE_DATETIME2:
        fsp = meta
        usec = f"_frac(buf, p + 5, {fsp})" if fsp else "0"
        add(f"{ind}{var} = _dt2(_from(buf[p:p + 5], 'big') - 549755813888, {usec}, {fsp}); p += {5 + (fsp + 1) // 2}")
    elif t == MYSQL_TYPE_DATETIME:
        add(f"{ind}{var} = _dtold({b.unpacker('Q')}(buf, p)[0]); p += 8")
    elif t == MYSQL_TYPE_TIME:
        add(f"{ind}{var} = _tmold(_from(buf[p:p + 3], 'little', signed=True)); p += 3")
    elif t == MYSQL_TYPE_TIME2:
        add(f"{ind}{var} = _tm2(buf, p, {meta}); p += {_values.time2_size(meta)}")
    elif t == MYSQL_TYPE_BIT:
        nbytes = ((meta & 0xFF) * 8 + (meta >> 8) + 7) // 8
        add(f"{ind}{var} = str(_from(buf[p:p + {nbytes}], 'big')); p += {nbytes}")
    elif t == MYSQL_TYPE_ENUM:
        labels = b.const(column.enum_values, "labels")
        add(f"{ind}{var} = _enum(_from(buf[p:p + {meta}], 'little'), {labels}); p += {meta}")
    elif t == MYSQL_TYPE_SET:
        labels = b.const(column.set_values, "labels")
        add(f"{ind}{var} = _set(_from(buf[p:p + {meta}], 'little'), {labels}); p += {meta}")
    elif t in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_STRING):
        _length_prefixed(b, var, 1 if meta < 256 else 2, ind, _text_convert(column))
        if t == MYSQL_TYPE_STRING and column.charset == "binary" and meta:
            # BINARY(n) is stored without its trailing zero bytes; SELECT shows them.
            add(f"{ind}if n < {meta}: {var} = {var} + bytes({meta} - n)")
    elif t == MYSQL_TYPE_VARCHAR_COMPRESSED:
        convert = _text_convert(column)
        inner = "_uncompress({})"
        _length_prefixed(b, var, 1 if meta < 256 else 2, ind, convert.format(inner) if convert else inner)
    elif t == MYSQL_TYPE_BLOB_COMPRESSED:
        convert = _text_convert(column)
        inner = "_uncompress({})"
        _length_prefixed(b, var, meta, ind, convert.format(inner) if convert else inner)
    elif t in _BLOB_LIKE:
        if t == MYSQL_TYPE_JSON:
            convert: str | None = "_json({})"
        elif t == MYSQL_TYPE_GEOMETRY or column.is_geometry:
            convert = "_wkt({})"
        else:
            convert = _text_convert(column)
        _length_prefixed(b, var, meta, ind, convert)
    elif t == MYSQL_TYPE_NULL:
        add(f"{ind}{var} = None")
    else:
        raise BinlogError(f"column {column.name!r} has binlog type {t}, which this decoder cannot read")


def _layout_key(column: ColumnInfo) -> tuple:
    return (
        column.type_code,
        column.meta,
        column.unsigned,
        column.charset,
        column.nullable,
        column.enum_values,
        column.set_values,
        column.is_json,
        column.is_geometry,
    )


_DECODERS: dict[tuple, RowDecoder] = {}


def build_row_decoder(columns: Sequence[ColumnInfo], present: int) -> RowDecoder:
    """A decoder for one row image of ``columns`` where bit i of ``present`` says column i is in the image.

    Cached on the layout alone (names do not change how a row is read), so tables of one shape share a decoder.
    """
    key = (tuple(_layout_key(c) for c in columns), present)
    decoder = _DECODERS.get(key)
    if decoder is None:
        if len(_DECODERS) >= 4096:
            _DECODERS.clear()
        decoder = _DECODERS[key] = _generate(tuple(columns), present)
    return decoder


def _generate(columns: tuple[ColumnInfo, ...], present: int) -> RowDecoder:
    b = _Builder()
    present_indexes = [i for i in range(len(columns)) if present >> i & 1]
    null_bytes = (len(present_indexes) + 7) // 8
    any_nullable = any(columns[i].nullable for i in present_indexes)
    b.lines.append("def decode_row(buf, p):")
    if any_nullable:
        if null_bytes == 1:
            b.lines.append("    nb = buf[p]; p += 1")
        else:
            b.lines.append(f"    nb = _from(buf[p:p + {null_bytes}], 'little'); p += {null_bytes}")
    elif null_bytes:
        b.lines.append(f"    p += {null_bytes}")
    names: list[str] = []
    for bit, index in enumerate(present_indexes):
        column = columns[index]
        var = f"v{index}"
        if column.nullable:
            b.lines.append(f"    if nb & {1 << bit}:")
            b.lines.append(f"        {var} = None")
            b.lines.append("    else:")
            _emit_value(b, column, var, "        ")
        else:
            _emit_value(b, column, var, "    ")
    for index in range(len(columns)):
        names.append(f"v{index}" if present >> index & 1 else "NP")
    tuple_text = ", ".join(names) + ("," if len(names) == 1 else "")
    b.lines.append(f"    return ({tuple_text}), p")
    source = "\n".join(b.lines)
    namespace: dict[str, object] = dict(_GLOBALS)
    namespace.update(b.consts)
    exec(compile(source, f"<row decoder {len(columns)} columns>", "exec"), namespace)
    decoder = namespace["decode_row"]
    decoder.source = source  # type: ignore[attr-defined]  # kept for debugging and tests
    return decoder  # type: ignore[return-value]
