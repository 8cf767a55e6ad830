"""How a row change's columns are kept in the store: one ASCII text per change, in one of two forms.

* **Record form** (what :func:`encode` writes): ``W`` then the base64 of the change's columns exactly as a FETCH
  record carries them (ColumnCount, then Name, Flags, Before, After per column: clientproto/records.py), then, when
  some values are binary, ``:`` and their places (``b3`` the before value of column 3, ``a0`` the after value of
  column 0, comma-separated). The columns are encoded once here, by the worker, and every FETCH of the change serves
  them as they are: rendering a record is then a base64 decode instead of a JSON decode and a loop over the columns
  (about four times cheaper; bench/serve.py). The places of binary values keep text and binary data apart for
  :func:`decode` (the wire form carries bytes only).
* **JSON form** (stores written before the record form, and the rare change whose text is not valid UTF-8):
  ``{"c": [names], "b": [before values] | null, "a": [after values] | null}``. A value is a JSON string, ``null``
  for SQL NULL, ``{"x": "<base64>"}`` for binary data, or ``{"m": 1}`` for a column missing from a partial (MINIMAL
  or NOBLOB) row image. Text is kept as JSON escapes (``ensure_ascii``), so any string, even one with unpaired
  surrogates from a badly encoded source column, round-trips through PostgreSQL's text type.

Both forms are ASCII, so either survives any store's text type, and both decode to the same columns.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from binlog.changes import NOT_PRESENT
from clientproto import ABSENT, decode_columns, encode_images
from clientproto.records import InValue, record_text

Value = str | bytes | None
#: A column as the clientproto encoders take it: (name, before, after).
WireColumn = tuple[str, InValue, InValue]

#: The first character of the record form (a JSON form starts with ``{``).
RECORD_FORM = "W"


class _Missing:
    """A column that the row image did not carry (shown as absent, never as NULL)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING = _Missing()


# -- encoding -----------------------------------------------------------------------------------------------------


def encode(columns: Sequence[str], before: Sequence[Any] | None, after: Sequence[Any] | None) -> str:
    """A change's columns in the record form; in the JSON form when some text is not valid UTF-8."""
    text = record_text(RECORD_FORM, columns, before, after)  # the compiled path, for images of text and NULLs
    if text is not None:
        return text
    try:
        return _encode_record_form(columns, before, after)
    except UnicodeEncodeError:  # lone surrogates in a name or a value: only the JSON form keeps them as they are
        return encode_json(columns, before, after)


_PLAIN_TYPES = frozenset({str, type(None)})


def _plain(values: Sequence[Any]) -> bool:
    """Only text and NULLs (checked by type, in C: this runs for every image the worker stores)."""
    return _PLAIN_TYPES.issuperset(map(type, values))


def _wire_image(values: Sequence[Any], side: str, binary: list[str]) -> list[Any]:
    """An image's values as clientproto's encoder takes them, noting where the binary ones are."""
    out: list[Any] = []
    for index, value in enumerate(values):
        if value is None or type(value) is str:
            out.append(value)
        elif isinstance(value, bytes | bytearray | memoryview):
            out.append(bytes(value))
            binary.append(f"{side}{index}")
        elif value is NOT_PRESENT or value is MISSING:
            out.append(ABSENT)
        else:
            out.append(str(value))
    return out


def _encode_record_form(columns: Sequence[str], before: Sequence[Any] | None, after: Sequence[Any] | None) -> str:
    binary: list[str] = []
    # Most images hold only text and NULLs: they go to the encoder as they are.
    if before is not None and not _plain(before):
        before = _wire_image(before, "b", binary)
    if after is not None and not _plain(after):
        after = _wire_image(after, "a", binary)
    text = RECORD_FORM + binascii.b2a_base64(encode_images(columns, before, after), newline=False).decode("ascii")
    return f"{text}:{','.join(binary)}" if binary else text


def _encode_value(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"x": base64.b64encode(value).decode("ascii")}
    if value is NOT_PRESENT or value is MISSING:
        return {"m": 1}
    return str(value)


_dumps = json.JSONEncoder(separators=(",", ":")).encode
_names_cache: dict[tuple[str, ...], str] = {}


def _image_text(values: Sequence[Any] | None) -> str:
    if values is None:
        return "null"
    if _plain(values):
        return _dumps(values if type(values) is list else list(values))
    return _dumps([_encode_value(value) for value in values])


def _names_text(columns: Sequence[str]) -> str:
    """The column names' JSON, computed once per table layout (every row of a table shares its names)."""
    key = columns if type(columns) is tuple else tuple(columns)
    text = _names_cache.get(key)
    if text is None:
        if len(_names_cache) > 10_000:
            _names_cache.clear()
        text = _names_cache[key] = _dumps(list(key))
    return text


def encode_json(columns: Sequence[str], before: Sequence[Any] | None, after: Sequence[Any] | None) -> str:
    """The JSON form (read and written by earlier versions; :func:`encode` falls back to it)."""
    return f'{{"c":{_names_text(columns)},"b":{_image_text(before)},"a":{_image_text(after)}}}'


# -- decoding -----------------------------------------------------------------------------------------------------


def record_columns(data: str) -> bytes | None:
    """The FETCH record's column bytes of a change in the record form (ColumnCount onwards); None for the JSON
    form. The hot path of FETCH."""
    if data[:1] != RECORD_FORM:
        return None
    end = data.find(":")
    return binascii.a2b_base64(data[1:] if end < 0 else data[1:end])


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    before: Value | _Missing
    after: Value | _Missing


def decode(data: str) -> list[Column]:
    """The columns of a stored change; ``before``/``after`` are MISSING for an insert's before or a delete's after."""
    raw = record_columns(data)
    if raw is None:
        return _decode_json(data)
    end = data.find(":")
    binary = frozenset(data[end + 1 :].split(",")) if end >= 0 else frozenset()
    return [
        Column(
            column.name,
            _decoded(column.before, "b", index, binary),
            _decoded(column.after, "a", index, binary),
        )
        for index, column in enumerate(decode_columns(raw))
    ]


def _decoded(wire: object, side: str, index: int, binary: frozenset[str]) -> Value | _Missing:
    if wire is ABSENT:
        return MISSING
    if wire is None or (binary and f"{side}{index}" in binary):
        return wire  # type: ignore[return-value]
    return wire.decode("utf-8")  # type: ignore[attr-defined]  # strict: encode() wrote valid UTF-8 only here


def _decode_value(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if "x" in value:
        return base64.b64decode(value["x"])
    return MISSING


def _decode_json(data: str) -> list[Column]:
    parsed = json.loads(data)
    names = parsed["c"]
    before = parsed["b"]
    after = parsed["a"]
    return [
        Column(
            name,
            MISSING if before is None else _decode_value(before[index]),
            MISSING if after is None else _decode_value(after[index]),
        )
        for index, name in enumerate(names)
    ]


def text_of(value: Value | _Missing, *, null: str = "NULL") -> str:
    """A value as the legacy protocol shows it: NULL as the text ``NULL``, missing as empty, bytes as they are."""
    if value is None:
        return null
    if value is MISSING:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value  # type: ignore[return-value]


# -- into the wire's column tuples ------------------------------------------------------------------------------


def _text_bytes(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        # A badly encoded source column can leave lone surrogates in the stored text: send their raw bytes back
        # (surrogateescape) or, failing that, their UTF-8-like form, rather than failing the whole delivery.
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")


def _wire_value(value: object) -> InValue:
    if value is None:
        return None
    if type(value) is str:
        return _text_bytes(value)
    if isinstance(value, dict):
        if "x" in value:
            return base64.b64decode(value["x"])
        return ABSENT  # {"m": 1}: left out of a partial row image
    return _text_bytes(str(value))


def wire_columns(data: str) -> list[WireColumn]:
    """The (name, before, after) tuples of a stored change as the clientproto encoders take them, in ordinal order:
    bytes for a value, None for SQL NULL, ABSENT for an image the event does not carry or a column a partial row
    image left out (POLL, POLLV2, and FETCH of a change kept in the JSON form)."""
    raw = record_columns(data)
    if raw is not None:
        return decode_columns(raw)  # type: ignore[return-value]
    parsed = json.loads(data)
    names: list[str] = parsed["c"]
    before = parsed["b"]
    after = parsed["a"]
    if before is None:
        return [(name, ABSENT, _wire_value(value)) for name, value in zip(names, after or (), strict=False)]
    if after is None:
        return [(name, _wire_value(value), ABSENT) for name, value in zip(names, before, strict=False)]
    return [(name, _wire_value(b), _wire_value(a)) for name, b, a in zip(names, before, after, strict=False)]
