"""Table snapshot rows read with plain SELECTs, turned into exactly the values the binlog decoder gives.

A client's queue can hold rows of a table snapshot (the table's current rows, read in primary-key chunks over an
ordinary PyMySQL connection) next to row changes decoded from the binlog. A client applying its queue must not be
able to tell them apart: for the same data, a snapshot row and the ``after`` image of an INSERT hold the same values,
of the same Python types (str, bytes for binary strings, None for NULL).

How the SELECT text is made to agree with the decoder (``binlog.rowdecoder``, ``binlog.values``):

* The connection asks for no character set conversion of results (``character_set_results = NULL``) and no Python
  conversion (``use_unicode=False``, no decoders), so every value arrives as the bytes the server stores or prints.
  Text columns are then decoded here with the very codec and error handler the decoder uses for the column's
  charset (``binlog.charsets``), so latin1's cp1252 holes, single-byte charsets without a Python codec, UCS-2/UTF-16/
  UTF-32 and bytes a codec rejects come out as the decoder's str, whatever the server's own conversion would do.
* TIMESTAMP: the decoder renders the stored epoch seconds in UTC, so the session's time zone is UTC.
* CHAR: the binlog carries CHAR values without trailing spaces; ``PAD_CHAR_TO_FULL_LENGTH`` would add them back,
  so the session's sql_mode is cleared (which also drops ``NO_BACKSLASH_ESCAPES``, which PyMySQL's quoting of
  parameters, e.g. chunk bounds, cannot work under).
* FLOAT/DOUBLE: SELECT prints FLOAT with 6 significant digits and ``FLOAT(M,D)``/``DOUBLE(M,D)``/ZEROFILL with their
  own layout; ``CAST(col AS DOUBLE)`` prints the stored value (a FLOAT widened exactly) in the shortest digits that
  read back to it, which are parsed and packed into the 4 or 8 stored bytes and rendered by the decoder's own
  ``float_text``/``double_text``.
* ZEROFILL integers and DECIMALs: SELECT pads with zeros, the decoder does not; the zeros are stripped.
* BIT: SELECT gives the stored big-endian bytes, the decoder their unsigned integer.
* YEAR(2): SELECT prints two digits, the decoder the full year ("0000" for the zero year); ``YEAR(col)`` gives the
  full year, and 1900 for the zero year (1900 itself is not a YEAR value). YEAR(4) is shown as the decoder shows
  it, and MySQL, which has no YEAR(2), is not asked for YEAR() of a YEAR.
* GEOMETRY (every spatial type): SELECT gives the stored SRID + WKB, rendered by the decoder's ``geometry_to_wkt``.
* INET4, INET6, UUID: the binlog holds their fixed-size binary form, which the decoder keeps as bytes; SELECT prints
  text, ``CAST(col AS BINARY(n))`` gives the binary form.
* JSON: MariaDB stores it as LONGTEXT, decoded as text like any utf8mb4 column.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from binlog.charsets import codec_for_charset
from binlog.geometry import geometry_to_wkt
from binlog.schema import SchemaColumn
from binlog.schemamodel import GEOMETRY_TYPES
from binlog.values import double_text, float_text

__all__ = ["SESSION_STATEMENTS", "connect_kwargs", "row_converter", "select_expressions"]

Value = str | bytes | None
RowConverter = Callable[[Sequence[object]], tuple[Value, ...]]


def connect_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``pymysql.connect`` of a snapshot connection (host, user and the like come from the
    caller): every value comes back as the server's bytes, unconverted, for ``row_converter`` to turn into the
    decoder's values. Parameters (chunk bounds) are still quoted as usual, so the encoders stay."""
    from pymysql.converters import encoders

    return {
        "charset": "utf8mb4",  # statements and identifiers; results are not converted (SESSION_STATEMENTS)
        "use_unicode": False,
        "conv": dict(encoders),  # no decoders: numbers, dates and text all stay bytes
    }


#: Run once on a new snapshot connection, before any chunk is read (see the module docstring for why each).
SESSION_STATEMENTS: tuple[str, ...] = (
    "SET SESSION character_set_results = NULL",
    "SET SESSION time_zone = '+00:00'",
    "SET SESSION sql_mode = ''",
)


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- per-column plans -------------------------------------------------------------------------------------------------

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_DECIMALS = frozenset({"decimal", "numeric", "dec", "fixed"})
_TEMPORALS = frozenset({"date", "datetime", "timestamp", "time"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"})
_LABELS = frozenset({"enum", "set"})
_BINARIES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_FIXED_BINARY_SIZES = {"inet4": 4, "inet6": 16, "uuid": 16}  # MariaDB's data type plugins

_pack_f = struct.Struct("<f").pack
_pack_d = struct.Struct("<d").pack


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _codec(codec: str, errors: str) -> Callable[[bytes], str]:
    def decode(raw: bytes) -> str:
        return raw.decode(codec, errors)

    return decode


def _float(raw: bytes) -> str:
    return float_text(_pack_f(float(raw)))


def _double(raw: bytes) -> str:
    return double_text(_pack_d(float(raw)))


def _bit(raw: bytes) -> str:
    return str(int.from_bytes(raw, "big"))


def _unpadded_integer(raw: bytes) -> str:
    return (raw.lstrip(b"0") or b"0").decode()


def _unpadded_decimal(raw: bytes) -> str:
    # ZEROFILL implies UNSIGNED: no sign to keep. "00000.500" -> "0.500", "00042.000" -> "42.000".
    text = raw.lstrip(b"0")
    if not text or text.startswith(b"."):
        text = b"0" + text
    return text.decode()


def _full_year(raw: bytes) -> str:
    return "0000" if raw == b"1900" else raw.decode()


def _geometry(raw: bytes) -> str:
    return geometry_to_wkt(raw)


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """How one column is selected and turned into the decoder's value.

    ``convert`` is None for bytes kept as they are; ``fast_utf8`` marks columns whose bytes are UTF-8 text (or
    ASCII: numbers, dates), which the row converter decodes inline and strictly, falling back to ``convert`` (the
    decoder's ``errors="replace"``) for a row where that fails.
    """

    expression: str
    convert: Callable[[bytes], str] | None
    fast_utf8: bool = False


def _text_plan(column: SchemaColumn, quoted: str, *, labels: bool) -> ColumnPlan:
    # The decoder's charset of a string column: the TABLE_MAP's, or information_schema's (``binlog.schema``), which
    # name the same charset; a text column without one is utf8mb4 there too.
    codec, errors = codec_for_charset(column.charset or "utf8mb4")
    if not codec:
        if not labels:
            return ColumnPlan(quoted, None)  # a binary string: bytes, as the decoder keeps them
        codec, errors = "utf-8", "replace"  # ENUM/SET labels are always text (``binlog.tablemap``)
    if codec == "utf-8" and errors == "replace":
        return ColumnPlan(quoted, _utf8, fast_utf8=True)
    return ColumnPlan(quoted, _codec(codec, errors))


def column_plan(column: SchemaColumn) -> ColumnPlan:
    """The SELECT expression and the conversion of one column, from its information_schema description."""
    data_type = column.data_type.lower()
    column_type = column.column_type.lower()
    quoted = quote_identifier(column.name)
    zerofill = "zerofill" in column_type
    if data_type in _INTEGERS:
        return ColumnPlan(quoted, _unpadded_integer) if zerofill else ColumnPlan(quoted, _utf8, fast_utf8=True)
    if data_type in _DECIMALS:
        return ColumnPlan(quoted, _unpadded_decimal) if zerofill else ColumnPlan(quoted, _utf8, fast_utf8=True)
    if data_type in ("float", "double", "real", "double precision"):
        # information_schema calls a FLOAT(p) with p > 24 "double", and so does the binlog.
        single = data_type == "float"
        return ColumnPlan(f"CAST({quoted} AS DOUBLE)", _float if single else _double)
    if data_type in _TEMPORALS:
        return ColumnPlan(quoted, _utf8, fast_utf8=True)
    if data_type == "year":
        if column_type.startswith("year(2)"):
            return ColumnPlan(f"YEAR({quoted})", _full_year)
        return ColumnPlan(quoted, _utf8, fast_utf8=True)
    if data_type == "bit":
        return ColumnPlan(quoted, _bit)
    if data_type in _TEXTS:
        return _text_plan(column, quoted, labels=False)
    if data_type in _LABELS:
        return _text_plan(column, quoted, labels=True)
    if data_type in _BINARIES:
        return ColumnPlan(quoted, None)
    if data_type in GEOMETRY_TYPES:
        return ColumnPlan(quoted, _geometry)
    if data_type in _FIXED_BINARY_SIZES:
        return ColumnPlan(f"CAST({quoted} AS BINARY({_FIXED_BINARY_SIZES[data_type]}))", None)
    raise ValueError(
        f"column {column.name!r} has type {column.column_type!r}, whose snapshot value is not known to equal the "
        "binlog decoder's"
    )


# -- the API ----------------------------------------------------------------------------------------------------------


def select_expressions(columns: Sequence[SchemaColumn]) -> list[str]:
    """The SELECT list, one SQL expression per column in order (identifiers quoted with backticks, `` doubled).

    Expressions carry no alias, so that a WHERE or ORDER BY of the chunk query that names a column means the
    column itself (an ORDER BY would prefer an alias, and a CAST orders differently from a UUID, say).
    """
    return [column_plan(column).expression for column in columns]


def row_converter(columns: Sequence[SchemaColumn]) -> RowConverter:
    """Turns one fetched row (from a cursor of connect_kwargs() executing select_expressions) into exactly the value
    tuple the binlog decoder produces for that row (the `after` image of an INSERT)."""
    plans = [column_plan(column) for column in columns]
    converters = [plan.convert for plan in plans]

    def careful(row: Sequence[object]) -> tuple[Value, ...]:
        """Every column through its converter: the path of rows with bytes that are not valid UTF-8."""
        if len(row) != len(converters):
            raise ValueError(f"row has {len(row)} values, the table {len(converters)} columns")
        return tuple(
            None if value is None else convert(cast(bytes, value)) if convert else cast(bytes, value)
            for convert, value in zip(converters, row, strict=True)
        )

    if not plans:
        return careful
    # One straight-line function per table: unpack the row, decode the UTF-8 columns with bytes.decode() (its
    # defaults are the fastest decode there is), call the converter of the others; a row with invalid UTF-8 goes
    # through ``careful``, which decodes it as the decoder does.
    names = [f"v{i}" for i in range(len(plans))]
    items = []
    namespace: dict[str, Any] = {"careful": careful}
    for i, (plan, var) in enumerate(zip(plans, names, strict=True)):
        if plan.convert is None:
            items.append(var)
        elif plan.fast_utf8:
            items.append(f"None if {var} is None else {var}.decode()")
        else:
            namespace[f"c{i}"] = plan.convert
            items.append(f"None if {var} is None else c{i}({var})")
    source = "\n".join(
        [
            "def convert(row):",
            "    try:",
            f"        {', '.join(names)}, = row",
            f"        return ({', '.join(items)},)",
            "    except UnicodeDecodeError:",
            "        return careful(row)",
        ]
    )
    exec(compile(source, f"<snapshot row converter {len(plans)} columns>", "exec"), namespace)
    return cast(RowConverter, namespace["convert"])
