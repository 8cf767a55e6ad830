"""Command line: ``python -m binlog dump|tail|check``."""

from __future__ import annotations

import argparse
import binascii
import contextlib
import functools
import itertools
import operator
import os
import re
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO, cast

from binlog import logs, values
from binlog.changes import NOT_PRESENT, Row, RowChange, Transaction
from binlog.charsets import codec_for_charset
from binlog.constants import (
    KIND_INSERT,
    KIND_NAMES,
    KIND_UPDATE,
    MYSQL_TYPE_BIT,
    MYSQL_TYPE_BLOB,
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
    MYSQL_TYPE_YEAR,
    PARTIAL_UPDATE_ROWS_EVENT,
)
from binlog.errors import BinlogError
from binlog.files import decode_files, opened, read_binlog_files
from binlog.nativerows import compiled_decoder
from binlog.parser import EventDecoder, _TableEntry
from binlog.position import Position
from binlog.rowdecoder import RowsDecoder, build_rows_decoder, fixed_size
from binlog.schema import InformationSchemaProvider, SchemaProvider
from binlog.table import ColumnInfo, TableInfo

if TYPE_CHECKING:
    from binlog.settings import SourceSettings

# The replica ids `tail` and `check` register with by default. A source keeps one dump per server id and drops the
# older one when a second replica registers with the same id, so these tools must never use the worker's id: the
# relay's configuration refuses a ReplicaServerID in this range, and each run takes its own id from the process id
# (two tails at once do not knock each other off either).
TOOL_SERVER_IDS = range(0xFE000000, 0xFF000000)


def tool_server_id(pid: int | None = None) -> int:
    """This process's replica id, in :data:`TOOL_SERVER_IDS`."""
    return TOOL_SERVER_IDS.start + (os.getpid() if pid is None else pid) % len(TOOL_SERVER_IDS)


_NoneType = type(None)
_NotPresentType = type(NOT_PRESENT)
_CACHE_LIMIT = 4096


def _text_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def _base64(value: bytes) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")  # what base64.b64encode does, one call less


# The characters below 256 that a str's repr shows as they are, inside single quotes: repr(s) == f"'{s}'" for any s
# made of them alone (the repr escapes a backslash, a character that is not printable, and a single quote unless it
# takes double quotes instead).
_PLAIN_LATIN1 = bytes(c for c in range(256) if chr(c).isprintable() and chr(c) not in "'\\")
# The UTF-8 bytes of the characters JSON (ensure_ascii=False) shows as they are, inside double quotes: all but the
# controls below 32, the double quote and the backslash (a character from 128 up is all bytes from 128 up).
_PLAIN_UTF8 = bytes(c for c in range(256) if c >= 32 and chr(c) not in '"\\')


def _needs_repr_escapes(joined: str) -> bool:
    try:  # a str of code points below 256 encodes as is (a copy); its bytes left after the deletion need escapes
        return bool(joined.encode("latin-1").translate(None, _PLAIN_LATIN1))
    except UnicodeEncodeError:
        return "'" in joined or "\\" in joined or not joined.isprintable()


def _needs_json_escapes(joined: str) -> bool:
    try:
        return bool(joined.encode("utf-8").translate(None, _PLAIN_UTF8))
    except UnicodeEncodeError:  # a lone surrogate: the encoder's own path decides
        return True


# An image format renders the images of one shape (the types of their values) and answers None for another shape
# (or, for JSON, for a value type it leaves to the json module).
ImageFormat = Callable[[Row], str | None]


def _getter(indices: list[int]) -> Callable[[Row], tuple[Any, ...]]:
    """``lambda row: tuple(row[i] for i in indices)``, in C when it can be (itemgetter of one index is no tuple)."""
    if len(indices) >= 2:
        return operator.itemgetter(*indices)
    if indices:
        index = indices[0]
        return lambda row: (row[index],)
    return lambda row: ()


def _image_format(columns: tuple[str, ...], shape: tuple[type, ...], as_json: bool = False) -> ImageFormat:
    """The function from an image whose values have the types ``shape`` to its text: ``name=value, ...`` (or, with
    ``as_json``, its JSON object as ``json.dumps(..., ensure_ascii=False)`` writes it).

    The names, the NULLs and the separators go into a %-template; the values left are str, bytes (``0x`` and their
    hex; in JSON, base64) or, in text only, anything else (:func:`_text_value`), taken from the image by one
    itemgetter. A column left out of the image (NOT_PRESENT) is left out of the text. The repr of a str is the str in
    single quotes unless it holds a quote, a backslash or a character that is not printable (and a JSON string the
    str in double quotes, unless it holds a double quote, a backslash or a control character); so when the values of
    a row hold none of those (one check over them all), one template renders the row without a repr (an escape) per
    value.

    It checks that an image has that shape as it goes (the NULLs and left-out columns where they were, the type of
    each bytes or other value, and str elsewhere, which the join checks), and returns None when one does not.
    """
    if len(shape) != len(columns):
        raise ValueError(f"{len(shape)} values for {len(columns)} columns")
    if as_json:
        import json
    width = len(shape)
    quoted: list[str] = []  # the template for values that need no escaping
    escaped: list[str] = []  # and the one for any values
    indices: list[int] = []
    absent_indices: list[int] = []
    converted: list[tuple[int, type, Callable[[Any], str]]] = []  # (position in the arguments, type, conversion)
    for i, (name, kind) in enumerate(zip(columns, shape, strict=True)):
        label = (json.dumps(name, ensure_ascii=False) + ": " if as_json else name + "=").replace("%", "%%")
        if kind is _NotPresentType or kind is _NoneType:
            absent_indices.append(i)
            if kind is _NoneType:
                quoted.append(label + ("null" if as_json else "NULL"))
                escaped.append(quoted[-1])
            continue
        if as_json:
            if kind is not str and kind is not bytes:
                return lambda image: None  # left to the json module
            quoted.append(label + '"%s"')
            escaped.append(label + "%s")  # the value through encode_basestring
            if kind is bytes:
                converted.append((len(indices), kind, _base64))
        elif kind is str:
            quoted.append(label + "'%s'")
            escaped.append(label + "%r")
        else:
            prefix = "0x" if kind is bytes else ""
            quoted.append(f"{label}{prefix}%s")
            escaped.append(f"{label}{prefix}%s")
            converted.append((len(indices), kind, bytes.hex if kind is bytes else _text_value))
        indices.append(i)
    plain, general = ", ".join(quoted), ", ".join(escaped)
    if as_json:
        plain, general = "{" + plain + "}", "{" + general + "}"
    get_values = _getter(indices)
    get_absent = _getter(absent_indices) if absent_indices else None
    absent = tuple(None if shape[i] is _NoneType else NOT_PRESENT for i in absent_indices)
    needs_escapes = _needs_json_escapes if as_json else _needs_repr_escapes

    def render(image: Row) -> str | None:
        if len(image) != width or (get_absent is not None and get_absent(image) != absent):
            return None
        args = get_values(image)
        if converted:
            values = list(args)
            for position, kind, convert in converted:
                value = values[position]
                if type(value) is not kind:
                    return None
                values[position] = convert(value)
            args = tuple(values)
        try:
            joined = "".join(args)
        except TypeError:  # a value that is not a str where the shape has one
            return None
        if not needs_escapes(joined):
            return plain % args
        if as_json:
            return general % tuple(map(_encode_json_string(), args))
        return general % args

    return render


# The format each table's last before (after) image had, by its column names (the tuple its rows share, checked by
# identity), tried first; then the formats by column names, value types and form. Both bounded: a table's shapes are
# at most 2 ** columns.
_LastFormats = dict[int, tuple[tuple[str, ...], ImageFormat]]
_last_before: _LastFormats = {}
_last_after: _LastFormats = {}
_last_json_before: _LastFormats = {}
_last_json_after: _LastFormats = {}
_image_formats: dict[tuple[tuple[str, ...], tuple[type, ...], bool], ImageFormat] = {}


def _format_image(
    columns: tuple[str, ...], image: Row, last_formats: _LastFormats, as_json: bool = False
) -> str | None:
    """The text (JSON) of an image; None for a JSON image with a value the json module must write."""
    last = last_formats.get(id(columns))
    if last is not None and last[0] is columns:
        text = last[1](image)
        if text is not None:
            return text
    key = (columns, tuple(map(type, image)), as_json)
    render = _image_formats.get(key)
    if render is None:
        if len(_image_formats) >= _CACHE_LIMIT:
            _image_formats.clear()
        render = _image_formats[key] = _image_format(*key)
    if len(last_formats) >= _CACHE_LIMIT:
        last_formats.clear()
    last_formats[id(columns)] = (columns, render)
    text = render(image)
    if text is None and not as_json:  # not expected: the format of this very shape
        return ", ".join(
            f"{name}={_text_value(v)}" for name, v in zip(columns, image, strict=True) if v is not NOT_PRESENT
        )
    return text


def change_as_text(change: RowChange) -> str:
    """``file:pos#row gtid kind schema.table [before: name=value, ...] [after: name=value, ...]``: a str in its
    repr, bytes in hex after ``0x``, NULL for None; a column left out of a partial image is left out."""
    line = f"{change.file}:{change.pos}#{change.row} {change.gtid or '-'} {change.kind_name} {change.schema}."
    line += change.table
    before = change.before
    if before is not None:
        line += " before: " + str(_format_image(change.columns, before, _last_before))
    after = change.after
    if after is not None:
        line += " after: " + str(_format_image(change.columns, after, _last_after))
    return line


@functools.cache
def _json_encode() -> Callable[[object], str]:
    """``json.dumps(..., ensure_ascii=False)`` builds a new encoder on each call; one encoder of the same settings
    serves all (without the check for circular references, which only changes the error a circular object would
    raise: a row change has none). Made on first use: ``dump``'s text needs no json."""
    import json

    return json.JSONEncoder(ensure_ascii=False, check_circular=False).encode


@functools.cache
def _encode_json_string() -> Callable[[str], str]:
    """What that encoder does to a str."""
    import json

    return json.encoder.encode_basestring


_JSON_HEAD = '{"file": "%s", "pos": %s, "row": %s, "timestamp": %s, "gtid": "%s", "schema": "%s", "table": "%s", '


def _json_image(change: RowChange, image: Row | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _base64(v) if isinstance(v, bytes) else v for name, v in zip(change.columns, image, strict=True)
            if v is not NOT_PRESENT}  # fmt: skip


def _change_as_json_object(change: RowChange) -> str:
    return _json_encode()(
        {
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
            "timestamp": change.timestamp,
            "gtid": change.gtid,
            "schema": change.schema,
            "table": change.table,
            "type": change.kind_name,
            "before": _json_image(change, change.before),
            "after": _json_image(change, change.after),
        }
    )


def change_as_json(change: RowChange) -> str:
    """The change as one JSON object, as ``json.dumps(..., ensure_ascii=False)`` writes it (bytes in base64)."""
    file, gtid, schema, table = change.file, change.gtid, change.schema, change.table
    pos, row, timestamp = change.pos, change.row, change.timestamp
    if type(pos) is not int or type(row) is not int or type(timestamp) is not int:
        return _change_as_json_object(change)
    try:
        if _needs_json_escapes(file + gtid + schema + table):
            return _change_as_json_object(change)
    except TypeError:  # a str field that is not a str
        return _change_as_json_object(change)
    before, after = change.before, change.after
    before_text = "null" if before is None else _format_image(change.columns, before, _last_json_before, True)
    after_text = "null" if after is None else _format_image(change.columns, after, _last_json_after, True)
    if before_text is None or after_text is None:
        return _change_as_json_object(change)
    head = _JSON_HEAD % (file, pos, row, timestamp, gtid, schema, table)
    return f'{head}"type": "{change.kind_name}", "before": {before_text}, "after": {after_text}}}'


# -- dump's text, straight from the row images ------------------------------------------------------------------------
# `dump` prints each row change as a line and nothing else, so it does not build RowChange objects and value tuples
# to render them value by value afterwards: per table layout (and rows event kind and present columns) it generates
# a function that reads an event's rows straight into the parts of their lines. Numbers go into a line as they are
# read (an int is its own text), strings through their repr (a str's repr is its text), bytes as their hex. A row
# without NULLs is one f-string; a row with NULLs takes a %-template of its pattern of NULLs, which writes NULL where
# a value is NULL and swallows that argument ("%.0s"). The texts are those of the generic path (rowdecoder's values
# through change_as_text), byte for byte; a layout with a column these functions do not read (compressed columns,
# the NULL type) takes that generic path.

# The text of a TIMESTAMP to the minute ("YYYY-MM-DD hh:mm:"), by minutes since the epoch: the rows of a binlog come
# in time order, so the minutes of its timestamps repeat where their seconds seldom do.
_TIMESTAMP_MINUTES: values.Memo[int] = values.Memo(
    lambda minute: values.DAY_TEXT[minute // 1440] + "%02d:%02d:" % divmod(minute % 1440, 60)  # noqa: UP031
)
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(60))
# Whether minute << 6 | second (the low 12 bits of a TIME2 value) is a time of day's: a TIME2 under 24 hours whose
# minute or second is out of range shows as "" (see values.whole_time2_text).
_CLOCK = tuple(minute_second >> 6 < 60 and minute_second & 63 < 60 for minute_second in range(4096))
_HOURS = tuple(f"{hours:02d}:" for hours in range(1024))  # a TIME2's hours, "hh:" (10 bits)
_NEGATIVE_HOURS = tuple("-" + hours for hours in _HOURS)


def _json_text(data: bytes) -> str:
    from binlog.jsonb import decode_json  # on first use, as the row decoders do

    return decode_json(data) if data else "null"


def _geometry_text(data: bytes) -> str:
    from binlog.geometry import geometry_to_wkt

    return geometry_to_wkt(data)


def _text_or_bytes_text(data: bytes) -> str:
    """A string of unknown charset as the generic path shows it: text if it is valid UTF-8, else bytes."""
    value = values.text_or_bytes(data)
    return repr(value) if isinstance(value, str) else "0x" + value.hex()


def _head(file: str, pos: int, gtid: str, schema: str, table: str, kind: str) -> str:
    """The template of the start of an event's lines, up to its first image; the row number is its one argument."""
    return f"{file}:{pos}#".replace("%", "%%") + "%d " + f"{gtid or '-'} {kind} {schema}.{table}".replace("%", "%%")


_TEXT_GLOBALS: dict[str, object] = {
    "_from": int.from_bytes,
    "_pf": struct.Struct("<f").pack,
    "_flt": values.float_text,
    "_dbl": values.double_text,
    "_ts": values.timestamp_text,
    "_tsf": values.timestamp_fast,
    "_tsh": values.timestamp_hires_text,
    "_dtold": values.datetime_old_text,
    "_dth": values.datetime_hires_text,
    "_tmold": values.time_old_text,
    "_tmh": values.time_hires_text,
    "_tm2": values.time2_text,
    "_frac": values.frac_usec,
    "_tob": _text_or_bytes_text,
    "_json": _json_text,
    "_wkt": _geometry_text,
    "_head": _head,
    "SB": values.SIGNED_BYTE,
    "YEAR": values.YEAR_TEXT,
    "DATE": values.DATE_TEXT,
    "TSM": _TIMESTAMP_MINUTES,
    "TWO": _TWO_DIGITS,
    "MS": values.MINUTES_SECONDS,
    "CLOCK": _CLOCK,
    "HH": _HOURS,
    "NHH": _NEGATIVE_HOURS,
    **{f"DT2B{fsp}": memo for fsp, memo in values.DATETIME2_BYTES.items()},
}

_BLOB_TYPES = (MYSQL_TYPE_BLOB, MYSQL_TYPE_TINY_BLOB, MYSQL_TYPE_MEDIUM_BLOB, MYSQL_TYPE_LONG_BLOB,
               MYSQL_TYPE_GEOMETRY, MYSQL_TYPE_JSON)  # fmt: skip
_INT_CODES = {MYSQL_TYPE_SHORT: "hH", MYSQL_TYPE_LONG: "iI", MYSQL_TYPE_LONGLONG: "qQ"}  # signed, unsigned
_BIT_CODES = {1: ("", "B"), 2: (">", "H"), 4: (">", "I"), 8: (">", "Q")}
# Types whose text costs much more than comparing their bytes: an UPDATE's after image keeps the before image's text
# of such a column when its bytes did not change.
_COSTLY = (MYSQL_TYPE_FLOAT, MYSQL_TYPE_DOUBLE, MYSQL_TYPE_NEWDECIMAL)


class _Unsupported(Exception):
    """A column the text decoders do not read: its layout takes the generic path."""


class _Source:
    """The generated function's lines and the constants they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}
        self.unpackers: dict[str, str] = {}  # struct format → the name of its unpack_from

    def const(self, value: object, prefix: str = "k") -> str:
        for name, existing in self.consts.items():
            if existing is value:
                return name
        name = f"{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def unpacker(self, codes: str, order: str) -> str:
        fmt = order + codes
        if fmt not in self.unpackers:
            self.unpackers[fmt] = self.const(struct.Struct(fmt).unpack_from, "u")
        return self.unpackers[fmt]


def _label(name: str) -> str:
    return name.replace("%", "%%") + "="


# The reprs of ENUM and SET texts by (type, size, labels): one table or memo for all the columns with those labels.
_LabelTexts = tuple[str, ...] | values.Memo[int]
_LABEL_TEXTS: dict[tuple[int, int, tuple[str, ...]], _LabelTexts] = {}


def _label_texts(column: ColumnInfo) -> _LabelTexts:
    """The reprs of an ENUM's labels by index, or of a SET's texts by bits."""
    labels = column.enum_values if column.type_code == MYSQL_TYPE_ENUM else column.set_values
    key = (column.type_code, column.meta, labels)
    texts = _LABEL_TEXTS.get(key)
    if texts is None:
        if len(_LABEL_TEXTS) >= _CACHE_LIMIT:
            _LABEL_TEXTS.clear()
        if column.type_code == MYSQL_TYPE_SET:
            texts = values.Memo(lambda bits: repr(values.set_text(bits, labels)), 65536)
        elif column.meta == 1:
            texts = tuple(repr(text) for text in values.enum_table(labels))
        else:
            texts = values.Memo(lambda index: repr(values.enum_text(index, labels)), 65536)
        _LABEL_TEXTS[key] = texts
    return texts


def _struct_form(column: ColumnInfo) -> tuple[str, str]:
    """(byte order, struct codes) reading the column's value into its variable (two, the second h<var>, when
    ``_two_parts``), or ("", "") when it has no such form. The order is "" for single bytes and byte strings, which
    read alike in either order (so they join a run of either)."""
    t, meta = column.type_code, column.meta
    if t in (MYSQL_TYPE_TINY, MYSQL_TYPE_YEAR):
        return "", "B"
    if t in _INT_CODES:
        return "<", _INT_CODES[t][column.unsigned]
    if t == MYSQL_TYPE_INT24:
        return "<", "HB" if column.unsigned else "Hb"  # the low 16 bits, then the (signed) high byte
    if t == MYSQL_TYPE_FLOAT:
        return "<", "f"
    if t == MYSQL_TYPE_DOUBLE:
        return "<", "d"
    if t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        return "", "3s"  # the key of DATE_TEXT
    if t == MYSQL_TYPE_TIME2 and meta == 0:
        return ">", "BH"  # the high byte, then the low 16 bits
    if t == MYSQL_TYPE_DATETIME2:
        return "", f"{5 + (meta + 1) // 2}s"  # the key of DATETIME2_BYTES
    if t == MYSQL_TYPE_TIMESTAMP2 and meta == 0:
        return ">", "I"
    if t == MYSQL_TYPE_TIMESTAMP and meta == 0:
        return "<", "I"
    if t == MYSQL_TYPE_DATETIME and meta == 0:
        return "<", "Q"
    if t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET) and meta in (1, 2):
        return ("", "B") if meta == 1 else ("<", "H")
    if t == MYSQL_TYPE_BIT:
        return _BIT_CODES.get(fixed_size(column) or 0, ("", ""))
    return "", ""


def _two_parts(column: ColumnInfo) -> bool:
    """Whether ``_struct_form`` reads the column in two parts."""
    return column.type_code == MYSQL_TYPE_INT24 or (column.type_code == MYSQL_TYPE_TIME2 and column.meta == 0)


def _piece(column: ColumnInfo) -> str:
    """The template's conversion for a fixed-size column's text (ENUM and SET texts are kept as their reprs)."""
    return "%s" if column.type_code in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET) else "'%s'"


def _labels_table(b: _Source, column: ColumnInfo) -> str:
    """The name of the constant mapping an ENUM index or SET bits to its label text's repr."""
    return b.const(_label_texts(column), "labels")


def _from_struct(b: _Source, column: ColumnInfo, var: str, off: int) -> list[str]:
    """Statements turning what ``_struct_form`` read into ``var`` (``off`` bytes after p) into its argument."""
    t, meta = column.type_code, column.meta
    raw = f"buf[p + {off}:p + {off + (fixed_size(column) or 0)}]"
    if t == MYSQL_TYPE_FLOAT:  # 6 significant digits that read back to the same single, else float_text
        return [f"ft = '%.6g' % {var}",
                f"{var} = ft if {var} and 'e' not in ft and _pf(float(ft)) == {raw} else _flt({raw})"]  # fmt: skip
    if t == MYSQL_TYPE_DOUBLE:  # repr's fixed notation, else double_text
        return [f"ft = repr({var})",
                f"{var} = (ft[:-2] if ft[-2:] == '.0' else ft) if 'e' not in ft and -1e15 < {var} < 1e15 "
                f"else _dbl({raw})"]  # fmt: skip
    if t == MYSQL_TYPE_TINY:
        return [] if column.unsigned else [f"{var} = SB[{var}]"]
    if t == MYSQL_TYPE_INT24:
        return [f"{var} = {var} | h{var} << 16"]
    if t in (MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE):
        return [f"{var} = DATE[{var}]"]
    if t == MYSQL_TYPE_TIME2:  # whole_time2_text, inline
        v = var
        return [f"{v} = ({v} << 16 | h{v}) - 8388608",
                f"{v} = (HH[{v} >> 12 & 1023] + MS[{v} & 4095] if {v} >= 98304 or CLOCK[{v} & 4095] else '') "
                f"if {v} >= 0 else NHH[-{v} >> 12 & 1023] + MS[-{v} & 4095]"]  # fmt: skip
    if t == MYSQL_TYPE_DATETIME2:
        return [f"{var} = DT2B{meta}[{var}]"]
    if t == MYSQL_TYPE_TIMESTAMP2:
        return [f"{var} = TSM[{var} // 60] + TWO[{var} % 60] if {var} else '0000-00-00 00:00:00'"]
    if t == MYSQL_TYPE_TIMESTAMP:
        return [f"{var} = _tsf({var})"]
    if t == MYSQL_TYPE_DATETIME:
        return [f"{var} = _dtold({var})"]
    if t == MYSQL_TYPE_YEAR:
        return [f"{var} = YEAR[{var}]"]
    if t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET):
        return [f"{var} = {_labels_table(b, column)}[{var}]"]
    return []  # the integers and BIT: the number is its text


def _read(b: _Source, run: list[tuple[ColumnInfo, str]], off: int) -> str:
    """The statement reading consecutive columns of one byte order into their variables, ``off`` bytes after p; a
    lone byte or byte string without a struct call."""
    forms = [_struct_form(column) for column, _var in run]
    order = next((o for o, _codes in forms if o), "<")
    codes = "".join(c for _o, c in forms)
    targets = ", ".join(f"{var}, h{var}" if _two_parts(c) else var for c, var in run)
    at = "p" if off == 0 else f"p + {off}"
    if len(run) > 1 or _two_parts(run[0][0]):
        return f"{targets} = {b.unpacker(codes, order)}(buf, {at})"
    if codes == "B":
        return f"{targets} = buf[{at}]"
    if codes.endswith("s"):
        return f"{targets} = buf[{at}:p + {off + int(codes[:-1])}]"
    return f"{targets} = {b.unpacker(codes, order)}(buf, {at})[0]"


@functools.cache
def _fractions(scale: int) -> tuple[str, ...]:
    """The texts of a DECIMAL's fraction of up to 4 digits (".5", ".05"...), by its value."""
    return tuple(f".{i:0{scale}d}" for i in range(10**scale))


def _decimal(b: _Source, precision: int, scale: int, at: str, var: str) -> list[str]:
    """DECIMAL read with one big-endian struct call, one field per digit group (3-byte groups as a byte and a
    short). A set top bit of the first field means positive; negative values have every bit inverted."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    fmt: list[str] = []
    fields: list[tuple[str, int]] = []  # (name, bits)

    def part(nbytes: int) -> str:
        names = []
        for code in {1: "B", 2: "H", 3: "BH", 4: "I"}[nbytes]:
            name = f"d{len(fields)}"
            fields.append((name, {"B": 8, "H": 16, "I": 32}[code]))
            fmt.append(code)
            names.append(name)
        return names[0] if len(names) == 1 else f"({names[0]} << 16 | {names[1]})"

    int_parts: list[str] = []
    if intg0x:
        int_parts.append(part(values.DIG2BYTES[intg0x]))
    int_parts += [part(4) for _ in range(intg0)]
    frac_parts = [part(4) for _ in range(frac0)]
    if frac0x:
        frac_parts.append(part(values.DIG2BYTES[frac0x]))
    if not fields:
        return [f"{var} = '0'"]
    count = len(int_parts)
    integer = " + ".join(
        f"{expr} * {10 ** (9 * (count - 1 - i))}" if i < count - 1 else expr for i, expr in enumerate(int_parts)
    ) or "0"  # fmt: skip
    weights = [10 ** (9 * (frac0 - 1 - j) + frac0x) for j in range(frac0)] + ([1] if frac0x else [])
    fraction = " + ".join(expr if w == 1 else f"{expr} * {w}" for expr, w in zip(frac_parts, weights, strict=True))
    if scale == 0:
        text = f"str({integer})"
    elif scale <= 4:
        table = b.const(_fractions(scale), "frac")
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
        f"if {first} & {sign}: {first} ^= {sign}; {var} = {text}",
        f"else: {invert}; {var} = ('-' if {nonzero} else '') + {text}",
    ]


def _fixed(b: _Source, column: ColumnInfo, off: int, var: str) -> list[str]:
    """Statements setting ``var`` to the argument of a fixed-size value ``off`` bytes after p."""
    if _struct_form(column)[1]:
        return [_read(b, [(column, var)], off), *_from_struct(b, column, var, off)]
    t, meta = column.type_code, column.meta

    def at(k: int) -> str:
        return "p" if off + k == 0 else f"p + {off + k}"

    if t == MYSQL_TYPE_NEWDECIMAL:
        return _decimal(b, meta >> 8, meta & 0xFF, at(0), var)
    if t == MYSQL_TYPE_TIMESTAMP:  # MariaDB's hires TIMESTAMP (precision from information_schema)
        return [f"{var} = _tsh(buf, {at(0)}, {meta})"]
    if t == MYSQL_TYPE_TIMESTAMP2:  # with a fraction
        return [f"{var} = _ts(_from(buf[{at(0)}:{at(4)}], 'big'), _frac(buf, {at(4)}, {meta}), {meta})"]
    if t == MYSQL_TYPE_DATETIME:
        return [f"{var} = _dth(buf, {at(0)}, {meta})"]
    if t == MYSQL_TYPE_TIME:
        if meta:
            return [f"{var} = _tmh(buf, {at(0)}, {meta})"]
        return [f"{var} = _tmold(_from(buf[{at(0)}:{at(3)}], 'little', signed=True))"]
    if t == MYSQL_TYPE_TIME2:
        return [f"{var} = _tm2(buf, {at(0)}, {meta})"]
    if t == MYSQL_TYPE_BIT:
        return [f"{var} = _from(buf[{at(0)}:{at(fixed_size(column) or 0)}], 'big')"]
    if t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET):
        return [f"{var} = {_labels_table(b, column)}[_from(buf[{at(0)}:{at(meta)}], 'little')]"]
    raise _Unsupported(column.name)


def _variable(b: _Source, column: ColumnInfo, var: str, ind: str) -> str:
    """Statements for a value with its own length prefix (strings, BLOB/TEXT, JSON, GEOMETRY); returns the piece."""
    t, meta = column.type_code, column.meta
    padded = 0
    if t in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_STRING):
        width, form = (1 if meta < 256 else 2), "text"
        if t == MYSQL_TYPE_STRING and column.charset == "binary":
            padded = meta  # BINARY(n) is stored without its trailing zero bytes; SELECT shows them.
    elif t in _BLOB_TYPES:
        width = meta
        form = "json" if t == MYSQL_TYPE_JSON else "wkt" if t == MYSQL_TYPE_GEOMETRY or column.is_geometry else "text"
    else:
        raise _Unsupported(column.name)
    if width == 1:
        length = "buf[p]"
    elif width == 2:
        length = "(buf[p] | buf[p + 1] << 8)"
    else:
        length = f"_from(buf[p:p + {width}], 'little')"
    raw = f"buf[p + {width}:p + n]"
    lines = [f"n = {length} + {width}"]
    piece = "%r"
    if form == "json":
        lines.append(f"{var} = _json({raw})")
    elif form == "wkt":
        lines.append(f"{var} = _wkt({raw})")
    elif column.charset is None:
        lines.append(f"{var} = _tob({raw})")
        piece = "%s"
    else:
        codec, errors = codec_for_charset(column.charset)
        if not codec:
            piece = "0x%s"
            if padded:
                lines += [f"{var} = {raw}", f"if n - {width} < {padded}: {var} += bytes({padded + width} - n)",
                          f"{var} = {var}.hex()"]  # fmt: skip
            else:
                lines.append(f"{var} = {raw}.hex()")
        elif codec == "utf-8" and errors == "replace":
            # Valid UTF-8 (nearly always) decodes faster with the default arguments; the rest is decoded again.
            lines += [f"try: {var} = {raw}.decode()",
                      f"except UnicodeDecodeError: {var} = {raw}.decode('utf-8', 'replace')"]  # fmt: skip
        else:
            lines.append(f"{var} = {raw}.decode({codec!r}, {errors!r})")
    lines.append("p += n")
    b.lines += [ind + line for line in lines]
    return piece


def _fixed_block(
    b: _Source, block: list[tuple[int, int, ColumnInfo]], ind: str, prefix: str, keep: tuple[str, str] | None = None
) -> None:
    """Straight-line code for consecutive fixed-size values known not to be NULL, at constant offsets from p.

    ``keep`` = (start, condition) in an UPDATE's after image: the same block of the before image starts at ``start``
    and was read at the same offsets unless ``condition`` holds; a costly column whose bytes are the same there takes
    the before image's text.
    """
    off = 0
    i = 0
    while i < len(block):
        j, order = i, ""
        while j < len(block) and not (keep and block[j][2].type_code in _COSTLY):
            column_order, codes = _struct_form(block[j][2])
            if not codes or (column_order and order and column_order != order):
                break
            order, j = order or column_order, j + 1
        if j > i:
            run = [(column, f"{prefix}{index}") for _bit, index, column in block[i:j]]
            b.lines.append(ind + _read(b, run, off))
            for column, var in run:
                b.lines += [ind + line for line in _from_struct(b, column, var, off)]
                off += fixed_size(column) or 0
            i = j
            continue
        _bit, index, column = block[i]
        statements = _fixed(b, column, off, f"{prefix}{index}")
        size = fixed_size(column) or 0
        if keep is not None and column.type_code in _COSTLY and size:
            start, condition = keep
            changed = f"buf[p + {off}:p + {off + size}] != buf[{start} + {off}:{start} + {off + size}]"
            b.lines.append(f"{ind}if {condition + ' or ' if condition else ''}{changed}:")
            b.lines += [ind + "    " + line for line in statements]
            b.lines.append(f"{ind}else: {prefix}{index} = v{index}")
        else:
            b.lines += [ind + line for line in statements]
        off += size
        i += 1
    if off:
        b.lines.append(f"{ind}p += {off}")


# One column of an image in the line: (bit in the image's null bitmap, "name=", conversion, nullable).
_Entry = tuple[int, str, str, bool]


def _image(
    b: _Source, columns: tuple[ColumnInfo, ...], names: tuple[str, ...], present: int, prefix: str, nulls: str,
    role: str = "",
) -> tuple[list[str], list[_Entry], int]:  # fmt: skip
    """Statements decoding one row image into the variables ``prefix``0, 1... (its null bitmap into ``nulls``).

    Returns the variables in the image's order, its template entries and the mask of its null bitmap's nullable
    columns. ``role`` "before"/"after" marks the two images of an UPDATE with the same columns: the before image
    notes where each block of fixed-size columns starts, and the after image takes the before texts of a block whose
    bytes (and NULLs) did not change instead of decoding it again (most updates change a few columns only).
    """
    ind, deeper, deepest = " " * 8, " " * 12, " " * 16
    indexes = [i for i in range(len(columns)) if present >> i & 1]
    items = [(bit, index, columns[index]) for bit, index in enumerate(indexes)]
    null_bytes = (len(indexes) + 7) // 8
    mask = sum(1 << bit for bit, _index, column in items if column.nullable)
    if mask:
        if null_bytes == 1:
            b.lines.append(f"{ind}{nulls} = buf[p]; p += 1")
        else:
            b.lines.append(f"{ind}{nulls} = _from(buf[p:p + {null_bytes}], 'little'); p += {null_bytes}")
    elif null_bytes:
        b.lines.append(f"{ind}p += {null_bytes}")
    pieces: dict[int, str] = {}
    block_number = 0
    k = 0
    while k < len(items):
        bit, index, column = items[k]
        if fixed_size(column) is None:
            var = f"{prefix}{index}"
            if column.nullable:
                b.lines += [f"{ind}if {nulls} & {1 << bit}:", f"{deeper}{var} = None", f"{ind}else:"]
                pieces[index] = _variable(b, column, var, deeper)
            else:
                pieces[index] = _variable(b, column, var, ind)
            k += 1
            continue
        end = k
        while end < len(items) and fixed_size(items[end][2]) is not None:
            end += 1
        block = items[k:end]
        for _bit, index, column in block:
            pieces[index] = _piece(column)
        block_mask = sum(1 << bit for bit, _index, column in block if column.nullable)
        size = sum(fixed_size(column) or 0 for _bit, _index, column in block)
        start = f"s{block_number}"
        block_number += 1
        keep = "; ".join(f"{prefix}{index} = v{index}" for _bit, index, _column in block)
        if role == "before" and size:
            b.lines.append(f"{ind}{start} = p")
        if not block_mask:
            if role == "after" and size:
                b.lines += [f"{ind}if buf[p:p + {size}] == buf[{start}:{start} + {size}]:",
                            f"{deeper}{keep}; p += {size}", f"{ind}else:"]  # fmt: skip
                _fixed_block(b, block, deeper, prefix, (start, ""))
            else:
                _fixed_block(b, block, ind, prefix)
        else:
            # The common case, no NULL in the block, reads it at constant offsets; otherwise column by column.
            b.lines.append(f"{ind}if not {nulls} & {block_mask}:")
            if role == "after" and size:
                same = f"not nb & {block_mask} and buf[p:p + {size}] == buf[{start}:{start} + {size}]"
                b.lines += [f"{deeper}if {same}:", f"{deepest}{keep}; p += {size}", f"{deeper}else:"]
                _fixed_block(b, block, deepest, prefix, (start, f"nb & {block_mask}"))
            else:
                _fixed_block(b, block, deeper, prefix)
            b.lines.append(f"{ind}else:")
            for bit, index, column in block:
                var = f"{prefix}{index}"
                statements = [*_fixed(b, column, 0, var), f"p += {fixed_size(column) or 0}"]
                if column.nullable:
                    b.lines += [f"{deeper}if {nulls} & {1 << bit}:", f"{deepest}{var} = None", f"{deeper}else:"]
                    b.lines += [deepest + line for line in statements]
                else:
                    b.lines += [deeper + line for line in statements]
        k = end
    entries = [(bit, _label(names[index]), pieces[index], column.nullable) for bit, index, column in items]
    return [f"{prefix}{index}" for index in indexes], entries, mask


def _fstring_parts(template: str, var: str) -> list[tuple[bool, str]]:
    """A column's part of a line template (its one conversion of ``var``) as f-string parts: (is an expression,
    text)."""
    parts: list[tuple[bool, str]] = []
    for literal, conversion in re.findall(r"((?:[^%]|%%)*)(%[sr]|$)", template):
        if literal:
            parts.append((False, literal.replace("%%", "%")))
        if conversion:
            parts.append((True, var + ("!r" if conversion == "%r" else "")))
    return parts


def _fstring(parts: list[tuple[bool, str]], names: Iterator[int] | None = None) -> tuple[list[str], str]:
    """(statements, expression) joining literal texts and expressions, each part (is an expression, text), by
    f-strings of at most 30 parts: a longer one compiles to a list and a join, which costs more than joining the
    texts of shorter ones. The statements set x0, x1... (``names`` numbers them)."""
    names = itertools.count() if names is None else names
    merged: list[tuple[bool, str]] = []
    for is_expression, text in parts:
        if merged and not is_expression and not merged[-1][0]:
            merged[-1] = (False, merged[-1][1] + text)
        else:
            merged.append((is_expression, text))

    def fstring(chunk: list[tuple[bool, str]]) -> str:
        return "f" + repr("".join("{" + text + "}" if is_expression else text.replace("{", "{{").replace("}", "}}")
                                  for is_expression, text in chunk))  # fmt: skip

    if len(merged) <= 30:
        return [], fstring(merged)
    chunks = [(f"x{next(names)}", merged[start : start + 30]) for start in range(0, len(merged), 30)]
    more, expression = _fstring([(True, name) for name, _chunk in chunks], names)
    return [f"{name} = {fstring(chunk)}" for name, chunk in chunks] + more, expression


def _image_template(entries: list[_Entry], nulls: int) -> str:
    """An image's part of the line template for the NULLs ``nulls``: a NULL swallows its argument."""
    return ", ".join(
        label + ("NULL%.0s" if nullable and nulls >> bit & 1 else piece) for bit, label, piece, nullable in entries
    )


TextRows = Callable[
    [bytes, int, int, str, str, tuple[str, ...], str, int, int, str, TableInfo, int], tuple[list[str], int]
]


def _generate_text_rows(info: TableInfo, kind: int, present: int, present_after: int) -> TextRows:
    b = _Source()
    same = kind == KIND_UPDATE and present == present_after
    # Each image: (label, its variables, its template entries, the mask of its nullable columns' null bits, the
    # variable of its null bitmap, where its bits go in a row's pattern of NULLs).
    images: list[tuple[str, list[str], list[_Entry], int, str, int]] = []

    def image(label: str, columns_present: int, prefix: str, nulls: str, role: str, shift: int) -> None:
        variables, entries, mask = _image(b, info.columns, info.names, columns_present, prefix, nulls, role)
        images.append((label, variables, entries, mask, nulls, shift))

    image("after" if kind == KIND_INSERT else "before", present, "v", "nb", "before" if same else "", 0)
    if kind == KIND_UPDATE:
        image("after", present_after, "w", "na", "after" if same else "", (len(images[0][2]) + 7) // 8 * 8)
    decode = b.lines
    nullable = [(nulls, mask, shift) for _label, _vars, _entries, mask, nulls, shift in images if mask]
    # A row without NULLs (nearly all of them) is built by f-strings: its constant parts joined with its values in
    # one step, without the parsing and buffer growing of a %-format.
    parts: list[tuple[bool, str]] = [(True, "head"), (True, "row"), (True, "middle")]
    for label, variables, entries, _mask, _nulls, _shift in images:
        parts.append((False, f" {label}: "))
        for number, ((_bit, label_text, piece, _nullable), var) in enumerate(zip(entries, variables, strict=True)):
            parts += _fstring_parts(("" if number == 0 else ", ") + label_text + piece, var)
    statements, line = _fstring(parts)
    b.lines = [
        "def text_rows(buf, p, end, schema, table, names, file, pos, timestamp, gtid, info, row):",
        "    out = []",
        "    append = out.append",
        "    head = f'{file}:{pos}#'",
        f"    middle = f\" {{gtid or '-'}} {KIND_NAMES[kind]} {{schema}}.{{table}}\"",
    ]
    if not nullable:
        b.lines += [
            "    while p < end:",
            *decode,
            *("        " + statement for statement in statements),
            f"        append({line})",
        ]
    else:
        # A row with NULLs takes the %-template of its pattern of NULLs (its null bits of the nullable columns, the
        # after image's above the before image's), built once per event from the pattern's image templates.
        def template(pattern: int) -> str:
            return "".join(f" {label}: " + _image_template(entries, pattern >> shift)
                           for label, _vars, entries, _mask, _nulls, shift in images)  # fmt: skip

        templates = b.const(values.Memo(template, 4096), "img")
        key = " | ".join(f"({nulls} & {mask}) << {shift}" if shift else f"{nulls} & {mask}"
                         for nulls, mask, shift in nullable)  # fmt: skip
        if len(nullable) == 2 and nullable[0][1] == nullable[1][1]:
            no_nulls = f"not (nb | na) & {nullable[0][1]}"
        else:
            no_nulls = " and ".join(f"not {nulls} & {mask}" for nulls, mask, _shift in nullable)
        arguments = ", ".join(["row", *(var for image in images for var in image[1])])
        b.lines += [
            f"    pre = _head(file, pos, gtid, schema, table, {KIND_NAMES[kind]!r})",
            "    full = {}",
            "    while p < end:",
            *decode,
            f"        if {no_nulls}:",
            *("            " + statement for statement in statements),
            f"            append({line})",
            "        else:",
            f"            k = {key}",
            "            t = full.get(k)",
            "            if t is None:",
            f"                t = full[k] = pre + {templates}[k]",
            f"            append(t % ({arguments}))",
        ]
    b.lines += ["        row += 1", "    return out, p"]
    source = "\n".join(b.lines)
    namespace: dict[str, Any] = {**_TEXT_GLOBALS, **b.consts}
    exec(compile(source, f"<text rows {info.schema}.{info.table}>", "exec"), namespace)
    function = namespace["text_rows"]
    function.source = source  # kept for debugging and tests
    return cast(TextRows, function)


def _lines_of(decode: RowsDecoder) -> RowsDecoder:
    """A row decoder's changes as their lines: the generic path of a layout the text decoders do not read."""

    def lines(*args: Any) -> tuple[list[RowChange], int]:
        changes, p = decode(*args)
        return cast(list[RowChange], list(map(change_as_text, changes))), p

    return lines


_TEXT_DECODERS: dict[tuple[TableInfo, int, int, int], RowsDecoder] = {}


def text_rows_decoder(info: TableInfo, kind: int, present: int, present_after: int = 0) -> RowsDecoder:
    """A decoder of all the rows of one rows event into their lines (as ``change_as_text`` writes them), with the
    signature of a ``RowsDecoder`` (the lines stand where the RowChange objects would)."""
    key = (info, kind, present, present_after)
    decoder = _TEXT_DECODERS.get(key)
    if decoder is None:
        if len(_TEXT_DECODERS) >= _CACHE_LIMIT:
            _TEXT_DECODERS.clear()
        python = functools.partial(python_text_rows_decoder, info, kind, present, present_after)
        compiled = compiled_decoder(info.columns, kind, present, present_after, python, text=True)
        decoder = _TEXT_DECODERS[key] = cast(RowsDecoder, compiled) if compiled else python()
    return decoder


def python_text_rows_decoder(info: TableInfo, kind: int, present: int, present_after: int = 0) -> RowsDecoder:
    """The generated Python text decoder of a layout (the generic path where it does not read a column)."""
    try:
        return cast(RowsDecoder, _generate_text_rows(info, kind, present, present_after))
    except _Unsupported:
        return _lines_of(build_rows_decoder(info.columns, kind, present, present_after))


class _TextTableEntry(_TableEntry):
    """A TABLE_MAP whose rows events decode into text lines."""

    __slots__ = ()

    def rows_decoder(self, kind: int, present: int, present_after: int) -> RowsDecoder:
        key = (kind, present, present_after)
        decoder = self.decoders.get(key)
        if decoder is None:
            decoder = self.decoders[key] = text_rows_decoder(self.info, kind, present, present_after)
        return decoder

    def partial_update_decoder(self, present: int, present_after: int) -> RowsDecoder:
        key = (PARTIAL_UPDATE_ROWS_EVENT, present, present_after)
        decoder = self.decoders.get(key)
        if decoder is None:
            from binlog.partialrows import build_partial_update_decoder

            decoder = build_partial_update_decoder(self.info.columns, present, present_after)
            decoder = self.decoders[key] = _lines_of(decoder)
        return decoder


class _TextTables(dict[int, _TableEntry]):
    """An event decoder's tables by id, each entry stored as its text twin (one twin per entry, kept while the
    decoder keeps the entry's TABLE_MAP in its cache)."""

    __slots__ = ("twins",)

    def __init__(self) -> None:
        super().__init__()
        self.twins: dict[int, tuple[_TableEntry, _TextTableEntry]] = {}

    def __setitem__(self, table_id: int, entry: _TableEntry) -> None:
        pair = self.twins.get(id(entry))
        if pair is None or pair[0] is not entry:
            if len(self.twins) > 10000:
                self.twins.clear()
            pair = self.twins[id(entry)] = (entry, _TextTableEntry(entry.map, entry.info))
        super().__setitem__(table_id, pair[1])


class _TextEventDecoder(EventDecoder):
    """The event decoder of ``dump``'s text: the same events, positions and transactions as ``read_binlog_files``
    reads, each row change as its line instead of a RowChange."""

    def __init__(self, schema_provider: SchemaProvider | None) -> None:
        super().__init__(schema_provider)
        self.tables = _TextTables()


def text_lines(
    paths: Iterable[str], *, schema_provider: SchemaProvider | None = None, start: int = 4
) -> Iterator[list[str]]:
    """The lines of the row changes in binlog files, one list per transaction, as ``change_as_text`` writes each
    change that ``read_binlog_files`` reads."""
    for trx in decode_files(_TextEventDecoder(schema_provider), opened(paths), start=start):
        lines = trx.changes or trx.prepared  # an XA transaction's rows are shown where the binlog has them
        if lines:
            yield cast(list[str], lines)


def print_changes(transactions: Iterable[Transaction], out: TextIO, as_json: bool, flush: bool = True) -> int:
    """Write each row change as a line, one write per transaction; with ``flush``, flushed after each transaction
    (``tail`` shows each as it commits; ``dump`` of files leaves the buffering to the stream)."""
    count = 0
    render = change_as_json if as_json else change_as_text
    for trx in transactions:
        changes = trx.changes or trx.prepared  # an XA transaction's rows are shown at its XA PREPARE, as in the binlog
        if changes:
            out.write("\n".join(map(render, changes)) + "\n")
            if flush:
                out.flush()
            count += len(changes)
    return count


def _settings(args: argparse.Namespace) -> SourceSettings:
    from binlog.settings import SourceSettings

    return SourceSettings(
        host=args.host,
        port=args.port,
        user=args.user,
        password=args.password,
        server_id=args.server_id if args.server_id is not None else tool_server_id(),
        heartbeat_seconds=args.heartbeat,
    )


def _add_connection_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--host", default="127.0.0.1" if not required else None, required=required)
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument(
        "--server-id",
        type=int,
        default=None,
        help=f"replica id to register with (default: {TOOL_SERVER_IDS.start:#x} + the process id, an id the relay "
        "worker never uses)",
    )
    parser.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat period in seconds")


def _cmd_dump(args: argparse.Namespace) -> int:
    provider: SchemaProvider | None = None
    if args.host and args.follow_ddl:
        # The schema read now stands for the start of the first file; each DDL in the files is applied to it.
        from binlog.schemahistory import SchemaHistory, pymysql_query, read_model

        query, close = pymysql_query(_settings(args).schema_connect_args())
        try:
            model = read_model(query)
        finally:
            close()
        history = SchemaHistory()
        history.set_baseline(model, Position(os.path.basename(args.files[0]), args.start_position))
        provider = history
    elif args.host:
        provider = InformationSchemaProvider(_settings(args).schema_connect_args())
    if args.json:
        transactions = read_binlog_files(args.files, schema_provider=provider, start=args.start_position)
        print_changes(transactions, sys.stdout, True, flush=False)
        return 0
    write = sys.stdout.write
    for lines in text_lines(args.files, schema_provider=provider, start=args.start_position):
        write("\n".join(lines))
        write("\n")
    return 0


def _stream(args: argparse.Namespace) -> Iterator[Transaction]:
    from binlog.stream import BinlogStream

    start = None
    if args.start_file or args.gtid:
        start = Position(args.start_file or "", args.start_position, args.gtid or "")
    stream = BinlogStream(_settings(args), start, blocking=not args.stop_at_end)
    try:
        for trx in stream:
            yield trx
            stream.confirm(trx.position)
    finally:
        stream.close()


def _cmd_tail(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        print_changes(_stream(args), sys.stdout, args.json)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from binlog.check import cascading_foreign_keys, preflight, summary  # on use: pymysql and ssl, which dump needs not

    settings = _settings(args)
    problems = preflight(settings)
    for line in problems:
        print(line)
    if not problems:
        info = summary(settings)
        print("OK: " + ", ".join(f"{k}={v}" for k, v in info.items()))
        for line in cascading_foreign_keys(settings.schema_connect_args()):
            print(f"note: the changes this foreign key makes are not in the binlog: {line}")
    return 1 if problems else 0


def _setup_logging() -> None:
    import logging

    from binlog.logformat import OneLineFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dump = sub.add_parser("dump", help="print the row changes in binlog files")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--json", action="store_true", help="one JSON object per row change")
    dump.add_argument("--start-position", type=int, default=4, help="start at this position of the first file")
    dump.add_argument(
        "--follow-ddl",
        action="store_true",
        help="with --host: read the schema once, take it as the schema at the start of the first file, and apply "
        "each DDL statement in the files to it (column names of their own time; @1, @2... where a TABLE_MAP "
        "disagrees)",
    )
    _add_connection_arguments(dump, required=False)
    dump.set_defaults(host=None, func=_cmd_dump)

    tail = sub.add_parser("tail", help="stream row changes from a server")
    _add_connection_arguments(tail, required=False)
    tail.add_argument("--json", action="store_true")
    tail.add_argument("--start-file", help="binlog file to start at (default: the current position)")
    tail.add_argument("--start-position", type=int, default=4)
    tail.add_argument("--gtid", help="GTID state to start after (MariaDB 0-1-42 / MySQL uuid:1-42)")
    tail.add_argument("--stop-at-end", action="store_true", help="stop at the end of the binlog instead of waiting")
    tail.set_defaults(func=_cmd_tail)

    check = sub.add_parser("check", help="preflight: what the source lacks, one line each")
    _add_connection_arguments(check, required=False)
    check.set_defaults(func=_cmd_check)

    args = parser.parse_args(argv)
    if args.host:
        _setup_logging()  # the connection and schema modules log through loggers of their own
    else:  # a dump of files: decoding them seldom has anything to say, and importing logging costs
        logs.setup_on_first_use(_setup_logging)
    command: Callable[[argparse.Namespace], int] = args.func
    try:
        return command(args)
    except BinlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
