"""Per-table row decoders, generated as Python source once per column layout.

A rows event holds many rows of one table; interpreting each column's type for every row costs most of the decoding
time. Instead, the first rows event of a layout (column types, metadata, signedness, charsets, labels, and the set of
columns present in the row image(s)) gets a straight-line function that decodes all the rows of an event into
RowChange objects; later events of the same layout reuse it from a cache (``build_rows_decoder``).
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, cast

from binlog import values as _values
from binlog.changes import NOT_PRESENT, RowChange
from binlog.charsets import codec_for_charset
from binlog.constants import (
    KIND_DELETE,
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
from binlog.errors import BinlogError
from binlog.table import ColumnInfo, TableInfo
from binlog.values import DIG2BYTES

_INT_FORMATS: dict[int, tuple[int, str, str]] = {  # (size, signed struct code, unsigned struct code)
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
    "RC": RowChange,
    "NEW": object.__new__,
    "_flt": _values.float_text,
    "_dbl": _values.double_text,
    "_pf": struct.Struct("<f").pack,
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
    "_tsf": _values.timestamp_fast,
    "_dth": _values.datetime_hires_text,
    "_tmh": _values.time_hires_text,
    "_tsh": _values.timestamp_hires_text,
    "DAY": _values.DAY_TEXT,
    "SOD": _values.SECONDS_OF_DAY,
    "SB": _values.SIGNED_BYTE,
    "UB": _values.UNSIGNED_BYTE,
    "YEAR": _values.YEAR_TEXT,
    "DATE": _values.DATE_TEXT,
    "DT2T": _values.DATETIME2_TIME,
    "_t2": _values.whole_time2_text,
    "MS": _values.MINUTES_SECONDS,
    **{f"DT2B{fsp}": memo for fsp, memo in _values.DATETIME2_BYTES.items()},
}


class _Builder:
    """Accumulates the generated source and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}

    def const(self, value: object, prefix: str = "k") -> str:
        # Equal immutable values share a name; anything else only itself (two SET memos are equal while still
        # empty, yet hold the texts of different labels).
        immutable = isinstance(value, (tuple, str, bytes, int))
        for name, existing in self.consts.items():
            if existing is value or (immutable and type(existing) is type(value) and existing == value):
                return name
        name = f"{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def unpacker(self, fmt: str, order: str = "<") -> str:
        return self.const(struct.Struct(order + fmt).unpack_from, "u")


_UTF8_REPLACE = "{}.decode('utf-8', 'replace')"


def _text_convert(column: ColumnInfo) -> str | None:
    """The expression (with {} for the bytes) turning a string column's bytes into its value."""
    if column.charset is None:
        return "_text_or_bytes({})"
    codec, errors = codec_for_charset(column.charset)
    if not codec:
        return None
    return f"{{}}.decode({codec!r}, {errors!r})"


def fixed_size(column: ColumnInfo) -> int | None:
    """Bytes a value of the column takes in a row image, or None when it carries its own length."""
    t, meta = column.type_code, column.meta
    if t in _INT_FORMATS:
        return _INT_FORMATS[t][0]
    if t == MYSQL_TYPE_NEWDECIMAL:
        return _values.decimal_size(meta >> 8, meta & 0xFF)
    # The old temporal types: meta is the precision of MariaDB's hires forms (0 for the classic ones).
    if t == MYSQL_TYPE_TIMESTAMP:
        return 4 + _values.SEC_PART_BYTES[meta]
    if t == MYSQL_TYPE_DATETIME:
        return _values.DATETIME_HIRES_BYTES[meta]
    if t == MYSQL_TYPE_TIME:
        return _values.TIME_HIRES_BYTES[meta]
    return {
        MYSQL_TYPE_INT24: 3,
        MYSQL_TYPE_FLOAT: 4,
        MYSQL_TYPE_DOUBLE: 8,
        MYSQL_TYPE_YEAR: 1,
        MYSQL_TYPE_DATE: 3,
        MYSQL_TYPE_NEWDATE: 3,
        MYSQL_TYPE_TIMESTAMP2: 4 + (meta + 1) // 2,
        MYSQL_TYPE_DATETIME2: 5 + (meta + 1) // 2,
        MYSQL_TYPE_TIME2: 3 + (meta + 1) // 2,
        MYSQL_TYPE_BIT: ((meta & 0xFF) * 8 + (meta >> 8) + 7) // 8,
        MYSQL_TYPE_ENUM: meta,
        MYSQL_TYPE_SET: meta,
        MYSQL_TYPE_NULL: 0,
    }.get(t)


def _fixed(b: _Builder, column: ColumnInfo, off: int, var: str) -> list[str]:
    """Statements setting ``var`` to the text of a fixed-size value that starts ``off`` bytes after ``p``."""
    if _struct_code(column)[1]:
        return [_read(b, [(column, var)], off), *_from_struct(b, column, var, off)]
    prelude, expression = _unstructured(b, column, off)
    return [*prelude, f"{var} = {expression}"]


def _unstructured(b: _Builder, column: ColumnInfo, off: int) -> tuple[list[str], str]:
    """(statements, expression) reading a fixed-size value that ``_struct_code`` has no form for."""

    def at(k: int) -> str:
        return "p" if off + k == 0 else f"p + {off + k}"

    t, meta = column.type_code, column.meta
    if t == MYSQL_TYPE_NEWDECIMAL:
        return _decimal(b, meta >> 8, meta & 0xFF, at(0))
    if t == MYSQL_TYPE_TIMESTAMP:
        if meta:  # MariaDB hires (precision from information_schema)
            return [], f"_tsh(buf, {at(0)}, {meta})"
        return [], f"_tsf({b.unpacker('I')}(buf, {at(0)})[0])"
    if t == MYSQL_TYPE_TIMESTAMP2:  # with a fraction (TIMESTAMP(0) has a struct code)
        return [], f"_ts(_from(buf[{at(0)}:{at(4)}], 'big'), _frac(buf, {at(4)}, {meta}), {meta})"
    if t == MYSQL_TYPE_DATETIME:
        if meta:
            return [], f"_dth(buf, {at(0)}, {meta})"
        return [], f"_dtold({b.unpacker('Q')}(buf, {at(0)})[0])"
    if t == MYSQL_TYPE_TIME:
        if meta:
            return [], f"_tmh(buf, {at(0)}, {meta})"
        return [], f"_tmold(_from(buf[{at(0)}:{at(3)}], 'little', signed=True))"
    if t == MYSQL_TYPE_TIME2:  # with a fraction
        return [], f"_tm2(buf, {at(0)}, {meta})"
    if t == MYSQL_TYPE_BIT:
        nbytes = ((meta & 0xFF) * 8 + (meta >> 8) + 7) // 8
        return [], f"str(_from(buf[{at(0)}:{at(nbytes)}], 'big'))"
    if t == MYSQL_TYPE_ENUM:
        return [], f"_enum(_from(buf[{at(0)}:{at(meta)}], 'little'), {b.const(column.enum_values, 'labels')})"
    if t == MYSQL_TYPE_SET:
        return [], f"_set(_from(buf[{at(0)}:{at(meta)}], 'little'), {b.const(column.set_values, 'labels')})"
    if t == MYSQL_TYPE_NULL:
        return [], "None"
    raise BinlogError(f"column {column.name!r} has binlog type {t}, which this decoder cannot read")


_STRUCT_BY_BYTES = {1: ("B",), 2: ("H",), 3: ("B", "H"), 4: ("I",)}


def _decimal(b: _Builder, precision: int, scale: int, at: str) -> tuple[list[str], str]:
    """DECIMAL read with one big-endian struct call, one field per digit group (3-byte groups as a byte and a
    short). A set top bit of the first field means positive; negative values have every bit inverted."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    # Each part: (digit-group value expression, weight); integer parts first, most significant first.
    fmt: list[str] = []
    fields: list[tuple[str, int]] = []  # (name, bits)

    def part(nbytes: int) -> str:
        names = []
        for code in _STRUCT_BY_BYTES[nbytes]:
            name = f"d{len(fields)}"
            fields.append((name, 8 if code == "B" else 16 if code == "H" else 32))
            fmt.append(code)
            names.append(name)
        return names[0] if len(names) == 1 else f"({names[0]} << 16 | {names[1]})"

    int_parts: list[str] = []
    if intg0x:
        int_parts.append(part(DIG2BYTES[intg0x]))
    int_parts += [part(4) for _ in range(intg0)]
    frac_parts = [part(4) for _ in range(frac0)]
    if frac0x:
        frac_parts.append(part(DIG2BYTES[frac0x]))
    if not fields:
        return [], "'0'"
    count = len(int_parts)
    integer = (
        " + ".join(
            f"{expr} * {10 ** (9 * (count - 1 - i))}" if i < count - 1 else expr for i, expr in enumerate(int_parts)
        )
        or "0"
    )
    weights = [10 ** (9 * (frac0 - 1 - j) + frac0x) for j in range(frac0)] + ([1] if frac0x else [])
    fraction = " + ".join(expr if w == 1 else f"{expr} * {w}" for expr, w in zip(frac_parts, weights, strict=True))
    if scale == 0:
        text = f"str({integer})"
    elif scale <= 4:
        table = b.const(tuple(f".{i:0{scale}d}" for i in range(10**scale)), "frac")
        text = f"str({integer}) + {table}[{fraction}]"
    else:
        text = f"str({integer}) + '.%0{scale}d' % ({fraction})"
    first, first_bits = fields[0]
    sign = 1 << (first_bits - 1)
    names = ", ".join(name for name, _bits in fields) + ("," if len(fields) == 1 else "")
    unpack = b.const(struct.Struct(">" + "".join(fmt)).unpack_from, "ds")
    invert = "; ".join(f"{name} ^= {((1 << bits) - 1) ^ (sign if name == first else 0)}" for name, bits in fields)
    nonzero = " or ".join(name for name, _bits in fields)
    return [
        f"{names} = {unpack}(buf, {at})",
        f"if {first} & {sign}: {first} ^= {sign}; d = {text}",
        f"else: {invert}; d = ('-' if {nonzero} else '') + {text}",
    ], "d"


def _emit_variable(b: _Builder, column: ColumnInfo, var: str, ind: str) -> None:
    """A value with its own length prefix: strings, BLOB/TEXT, JSON, GEOMETRY."""
    t, meta = column.type_code, column.meta
    padded_binary = 0
    if t in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_STRING):
        width, convert = (1 if meta < 256 else 2), _text_convert(column)
        if t == MYSQL_TYPE_STRING and column.charset == "binary":
            padded_binary = meta  # BINARY(n) is stored without its trailing zero bytes; SELECT shows them.
    elif t in (MYSQL_TYPE_VARCHAR_COMPRESSED, MYSQL_TYPE_BLOB_COMPRESSED):
        width = (1 if meta < 256 else 2) if t == MYSQL_TYPE_VARCHAR_COMPRESSED else meta
        text = _text_convert(column)
        convert = text.format("_uncompress({})") if text else "_uncompress({})"
    elif t in _BLOB_LIKE:
        width = meta
        if t == MYSQL_TYPE_JSON:
            convert = "_json({})"
        elif t == MYSQL_TYPE_GEOMETRY or column.is_geometry:
            convert = "_wkt({})"
        else:
            convert = _text_convert(column)
    else:
        raise BinlogError(f"column {column.name!r} has binlog type {t}, which this decoder cannot read")
    if width == 1:
        length = "buf[p]"
    elif width == 2:
        length = "(buf[p] | buf[p + 1] << 8)"
    else:
        length = f"_from(buf[p:p + {width}], 'little')"
    # n = end of the value relative to p
    raw = f"buf[p + {width}:p + n]"
    b.lines.append(f"{ind}n = {length} + {width}")
    if convert == _UTF8_REPLACE:
        # Valid UTF-8 (nearly always) decodes faster with the default arguments; the rest is decoded again.
        b.lines += [
            f"{ind}try: {var} = {raw}.decode()",
            f"{ind}except UnicodeDecodeError: {var} = {convert.format(raw)}",
        ]
        b.lines.append(f"{ind}p += n")
    else:
        b.lines.append(f"{ind}{var} = {convert.format(raw) if convert else raw}; p += n")
    if padded_binary:
        b.lines.append(f"{ind}if n - {width} < {padded_binary}: {var} += bytes({padded_binary + width} - n)")


def _struct_code(column: ColumnInfo) -> tuple[str, str]:
    """(byte order, struct codes) reading the column's value into one variable (two for ``_TWO_PARTS``, the second
    named ``h<var>``), or ("", "") when it has no such form. The byte order is "<", ">", or "" for single bytes and
    byte strings, which read alike in either (so they join a run of either)."""
    t, meta = column.type_code, column.meta
    if t == MYSQL_TYPE_TINY:
        return "", "B"  # the raw byte, turned into text through SIGNED_BYTE/UNSIGNED_BYTE
    if t in _INT_FORMATS:
        _size, signed, unsigned = _INT_FORMATS[t]
        return "<", unsigned if column.unsigned else signed
    if t == MYSQL_TYPE_INT24:
        return "<", "HB" if column.unsigned else "Hb"  # low 16 bits, then the (signed) high byte
    if t in (MYSQL_TYPE_FLOAT, MYSQL_TYPE_DOUBLE):
        return "<", "f" if t == MYSQL_TYPE_FLOAT else "d"
    if t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        return "", "3s"  # the key of DATE_TEXT
    if t == MYSQL_TYPE_DATETIME2:
        return "", f"{5 + (meta + 1) // 2}s"  # the key of DATETIME2_BYTES
    if t == MYSQL_TYPE_TIMESTAMP2 and meta == 0:
        return ">", "I"
    if t == MYSQL_TYPE_TIME2 and meta == 0:
        return ">", "BH"
    if t == MYSQL_TYPE_YEAR or (t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET) and meta == 1):
        return "", "B"
    if t == MYSQL_TYPE_SET and meta == 2:
        return "<", "H"
    if t == MYSQL_TYPE_BIT and fixed_size(column) == 1:
        return "", "B"
    return "", ""


#: Types that ``_struct_code`` reads in two parts.
_TWO_PARTS = (MYSQL_TYPE_INT24, MYSQL_TYPE_TIME2)


def _from_struct(b: _Builder, column: ColumnInfo, var: str, off: int) -> list[str]:
    """Statements turning what ``_struct_code`` read into ``var`` (from ``off`` bytes after p) into its text."""
    t, meta = column.type_code, column.meta
    if t == MYSQL_TYPE_FLOAT:
        # Inline for the common case, 6 significant digits that read back to the same single; else float_text.
        raw = f"buf[p + {off}:p + {off + 4}]"
        return [
            f"ft = '%.6g' % {var}",
            f"{var} = ft if {var} and 'e' not in ft and _pf(float(ft)) == {raw} else _flt({raw})",
        ]
    if t == MYSQL_TYPE_DOUBLE:
        # Inline for repr's fixed notation; else double_text.
        raw = f"buf[p + {off}:p + {off + 8}]"
        return [
            f"ft = repr({var})",
            f"{var} = (ft[:-2] if ft[-2:] == '.0' else ft) if 'e' not in ft and -1e15 < {var} < 1e15 else _dbl({raw})",
        ]
    if t == MYSQL_TYPE_INT24:
        return [f"{var} = str({var} | h{var} << 16)"]
    if t == MYSQL_TYPE_TINY:
        return [f"{var} = {'UB' if column.unsigned else 'SB'}[{var}]"]
    if t in _INT_FORMATS:
        return [f"{var} = str({var})"]
    if t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        return [f"{var} = DATE[{var}]"]
    if t == MYSQL_TYPE_DATETIME2:
        return [f"{var} = DT2B{meta}[{var}]"]
    if t == MYSQL_TYPE_TIMESTAMP2:
        return [f"{var} = DAY[{var} // 86400] + SOD[{var} % 86400] if {var} else '0000-00-00 00:00:00'"]
    if t == MYSQL_TYPE_TIME2:
        return [f"{var} = ({var} << 16 | h{var}) - 8388608", f"{var} = {_time2_of(var)}"]
    if t == MYSQL_TYPE_YEAR:
        return [f"{var} = YEAR[{var}]"]
    if t == MYSQL_TYPE_ENUM:
        return [f"{var} = {b.const(_values.enum_table(column.enum_values), 'enum')}[{var}]"]
    if t == MYSQL_TYPE_SET:
        return [f"{var} = {b.const(_values.set_memo(column.set_values), 'set')}[{var}]"]
    return [f"{var} = UB[{var}]"]  # BIT(1..8)


def _read(b: _Builder, columns: list[tuple[ColumnInfo, str]], off: int) -> str:
    """The statement reading consecutive columns of one byte order (see ``_struct_code``) into their variables,
    from ``off`` bytes after p; a lone byte or byte string is read without a struct call."""
    order = next((o for o, _codes in map(_struct_code, (c for c, _var in columns)) if o), "<")
    codes = "".join(_struct_code(c)[1] for c, _var in columns)
    targets = ", ".join(f"{var}, h{var}" if c.type_code in _TWO_PARTS else var for c, var in columns)
    at = "p" if off == 0 else f"p + {off}"
    if len(columns) > 1 or columns[0][0].type_code in _TWO_PARTS:
        return f"{targets} = {b.unpacker(codes, order)}(buf, {at})"
    if codes == "B":
        return f"{targets} = buf[{at}]"
    if codes.endswith("s"):
        return f"{targets} = buf[{at}:p + {off + int(codes[:-1])}]"
    return f"{targets} = {b.unpacker(codes, order)}(buf, {at})[0]"


def _time2_of(n: str) -> str:
    """The text of a whole TIME2 value ``n`` (offset removed): times of day from the DATETIME2 table, longer ones
    formatted inline, negative ones by ``whole_time2_text``."""
    return f"DT2T[{n}] if 0 <= {n} < 98304 else '%02d:%s' % ({n} >> 12 & 1023, MS[{n} & 4095]) if {n} > 0 else _t2({n})"


#: Types whose text costs much more than comparing their bytes: an UPDATE's after image keeps the before image's
#: text of such a column when its bytes did not change (see ``_emit_fixed_block``).
_COSTLY_FIXED = (MYSQL_TYPE_FLOAT, MYSQL_TYPE_DOUBLE, MYSQL_TYPE_NEWDECIMAL)


def _emit_fixed_block(
    b: _Builder, block: list[tuple[int, int, ColumnInfo]], ind: str, before: tuple[str, str] | None = None
) -> None:
    """Straight-line code for consecutive fixed-size values known not to be NULL, at constant offsets from p.

    ``before`` = (start, condition) in an UPDATE's after image: the same block of the before image starts at
    ``start`` and was read at the same offsets when ``condition`` holds; a costly column whose bytes are the same
    there keeps the before value (still in its variable).
    """
    off = 0
    i = 0
    while i < len(block):
        # Consecutive values of one byte order (bytes and byte strings go with either) come out of one struct call;
        # in an after image, not the costly ones: their variables still hold the before image's text, kept if their
        # bytes did not change.
        j, order = i, ""
        while j < len(block) and not (before and block[j][2].type_code in _COSTLY_FIXED):
            column_order, codes = _struct_code(block[j][2])
            if not codes or (column_order and order and column_order != order):
                break
            order, j = order or column_order, j + 1
        if j > i:
            run = [(column, f"v{index}") for _bit, index, column in block[i:j]]
            b.lines.append(ind + _read(b, run, off))
            for column, var in run:
                b.lines.extend(ind + line for line in _from_struct(b, column, var, off))
                off += fixed_size(column) or 0
            i = j
            continue
        _bit, index, column = block[i]
        statements = _fixed(b, column, off, f"v{index}")
        size = fixed_size(column) or 0
        if before is not None and column.type_code in _COSTLY_FIXED and size:
            start, condition = before
            changed = f"buf[p + {off}:p + {off + size}] != buf[{start} + {off}:{start} + {off + size}]"
            b.lines.append(f"{ind}if {condition + ' or ' if condition else ''}{changed}:")
            b.lines.extend(ind + "    " + line for line in statements)
        else:
            b.lines.extend(ind + line for line in statements)
        off += size
        i += 1
    if off:
        b.lines.append(f"{ind}p += {off}")


def _layout_key(column: ColumnInfo) -> tuple[object, ...]:
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


def _emit_image(b: _Builder, columns: tuple[ColumnInfo, ...], present: int, ind: str, role: str = "") -> str:
    """Statements decoding one row image into v0, v1...; returns the text of the tuple of the row's values.

    ``role`` "before"/"after" marks the two images of an UPDATE with the same columns: the before image notes where
    each block of fixed-size columns starts, and the after image keeps the before values of a block whose bytes (and
    NULLs) did not change instead of decoding it again (most updates change a few columns only).
    """
    present_indexes = [i for i in range(len(columns)) if present >> i & 1]
    null_bytes = (len(present_indexes) + 7) // 8
    any_nullable = any(columns[i].nullable for i in present_indexes)
    deeper, deepest = ind + "    ", ind + "        "
    if any_nullable:
        if null_bytes == 1:
            b.lines.append(f"{ind}nb = buf[p]; p += 1")
        else:
            b.lines.append(f"{ind}nb = _from(buf[p:p + {null_bytes}], 'little'); p += {null_bytes}")
        if role == "before":
            b.lines.append(f"{ind}nbb = nb")
    elif null_bytes:
        b.lines.append(f"{ind}p += {null_bytes}")
    block_number = 0
    # Group the image into blocks of consecutive fixed-size columns and single variable-size ones.
    items = [(bit, index, columns[index]) for bit, index in enumerate(present_indexes)]
    k = 0
    while k < len(items):
        bit, index, column = items[k]
        if fixed_size(column) is None:
            var = f"v{index}"
            if column.nullable:
                b.lines += [f"{ind}if nb & {1 << bit}:", f"{deeper}{var} = None", f"{ind}else:"]
                _emit_variable(b, column, var, deeper)
            else:
                _emit_variable(b, column, var, ind)
            k += 1
            continue
        end = k
        while end < len(items) and fixed_size(items[end][2]) is not None:
            end += 1
        block = items[k:end]
        mask = sum(1 << bit for bit, _index, column in block if column.nullable)
        size = sum(fixed_size(column) or 0 for _bit, _index, column in block)
        start = f"s{block_number}"
        block_number += 1
        if role == "before" and size:
            b.lines.append(f"{ind}{start} = p")
        if not mask:
            if role == "after" and size:
                b.lines += [f"{ind}if buf[p:p + {size}] == buf[{start}:{start} + {size}]:", f"{deeper}p += {size}"]
                b.lines.append(f"{ind}else:")
                _emit_fixed_block(b, block, deeper, (start, ""))
            else:
                _emit_fixed_block(b, block, ind)
        else:
            # The common case, no NULL in the block, reads it at constant offsets; otherwise column by column.
            b.lines.append(f"{ind}if not nb & {mask}:")
            if role == "after" and size:
                same = f"not nbb & {mask} and buf[p:p + {size}] == buf[{start}:{start} + {size}]"
                b.lines += [f"{deeper}if {same}:", f"{deepest}p += {size}", f"{deeper}else:"]
                _emit_fixed_block(b, block, deepest, (start, f"nbb & {mask}"))
            else:
                _emit_fixed_block(b, block, deeper)
            b.lines.append(f"{ind}else:")
            for bit, index, column in block:
                statements = [*_fixed(b, column, 0, f"v{index}"), f"p += {fixed_size(column) or 0}"]
                if column.nullable:
                    b.lines += [f"{deeper}if nb & {1 << bit}:", f"{deepest}v{index} = None", f"{deeper}else:"]
                    b.lines.extend(deepest + line for line in statements)
                else:
                    b.lines.extend(deeper + line for line in statements)
        k = end
    names = [f"v{index}" if present >> index & 1 else "NP" for index in range(len(columns))]
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _compile(b: _Builder, name: str, label: str) -> RowsDecoder:
    source = "\n".join(b.lines)
    namespace: dict[str, Any] = dict(_GLOBALS)  # the generated functions, which a type checker cannot see
    namespace.update(b.consts)
    exec(compile(source, label, "exec"), namespace)
    function = namespace[name]
    function.source = source  # kept for debugging and tests
    return cast(RowsDecoder, function)


# (buf, p, end, schema, table, names, file, pos, timestamp, gtid, info, first_row) -> (changes, p)
RowsDecoder = Callable[
    [bytes, int, int, str, str, tuple[str, ...], str, int, int, str, TableInfo, int], tuple[list[RowChange], int]
]
_ROWS_DECODERS: dict[tuple[tuple[tuple[object, ...], ...], int, int, int], RowsDecoder] = {}


def build_rows_decoder(columns: Sequence[ColumnInfo], kind: int, present: int, present_after: int = 0) -> RowsDecoder:
    """A decoder of all the rows of one rows event, building the RowChange of each (one loop, no call per row).

    ``kind`` is KIND_INSERT, KIND_UPDATE (two images per row: ``present`` and ``present_after``) or KIND_DELETE.
    """
    key = (tuple(_layout_key(c) for c in columns), kind, present, present_after)
    decoder = _ROWS_DECODERS.get(key)
    if decoder is None:
        if len(_ROWS_DECODERS) >= 4096:
            _ROWS_DECODERS.clear()
        from binlog.nativerows import compiled_decoder  # it builds on this module's helpers

        python = functools.partial(_generate_rows, tuple(columns), kind, present, present_after)
        compiled = compiled_decoder(columns, kind, present, present_after, python)
        decoder = _ROWS_DECODERS[key] = cast(RowsDecoder, compiled) if compiled else python()
    return decoder


def build_python_rows_decoder(
    columns: Sequence[ColumnInfo], kind: int, present: int, present_after: int = 0
) -> RowsDecoder:
    """The generated Python decoder of a layout, whether or not the compiled one reads it (tests compare the two)."""
    return _generate_rows(tuple(columns), kind, present, present_after)


def _generate_rows(columns: tuple[ColumnInfo, ...], kind: int, present: int, present_after: int) -> RowsDecoder:
    b = _Builder()
    b.lines += [
        "def decode_rows(buf, p, end, schema, table, names, file, pos, timestamp, gtid, info, row):",
        "    out = []",
        "    append = out.append",
        "    while p < end:",
    ]
    same_columns = kind == KIND_UPDATE and present == present_after
    first = _emit_image(b, columns, present, "        ", "before" if same_columns else "")
    if kind == KIND_UPDATE:
        b.lines.append(f"        before = {first}")
        after = _emit_image(b, columns, present_after, "        ", "after" if same_columns else "")
        before_text, after_text = "before", after
    elif kind == KIND_DELETE:
        before_text, after_text = first, "None"
    else:
        before_text, after_text = "None", first
    # RowChange filled slot by slot: cheaper than a call to its __init__ for every row.
    b.lines += [
        "        c = NEW(RC)",
        "        c.schema = schema; c.table = table; c.kind = " + str(kind) + "; c.columns = names",
        f"        c.before = {before_text}",
        f"        c.after = {after_text}",
        "        c.file = file; c.pos = pos; c.row = row; c.timestamp = timestamp; c.gtid = gtid; c.table_info = info",
        "        append(c)",
        "        row += 1",
        "    return out, p",
    ]
    return _compile(b, "decode_rows", f"<rows decoder {len(columns)} columns>")
