"""How a row change's columns are kept in the store: one compact JSON text per change.

``{"c": [names], "b": [before values] | null, "a": [after values] | null}``. A value is a JSON string, ``null`` for
SQL NULL, ``{"x": "<base64>"}`` for binary data, or ``{"m": 1}`` for a column missing from a partial (MINIMAL or
NOBLOB) row image. Text is kept as JSON escapes (``ensure_ascii``) so that any string, even one with unpaired
surrogates from a badly encoded source column, round-trips through PostgreSQL's text type.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from binlog.changes import NOT_PRESENT

Value = str | bytes | None


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
    # Most images hold only text and NULLs: encode them as they are, converting only when something else is there.
    if all(value is None or type(value) is str for value in values):
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


def encode(columns: Sequence[str], before: Sequence[Any] | None, after: Sequence[Any] | None) -> str:
    return f'{{"c":{_names_text(columns)},"b":{_image_text(before)},"a":{_image_text(after)}}}'


def _decode_value(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if "x" in value:
        return base64.b64decode(value["x"])
    return MISSING


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    before: Value | _Missing
    after: Value | _Missing


def decode(data: str) -> list[Column]:
    """The columns of a stored change; ``before``/``after`` are MISSING for an insert's before or a delete's after."""
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
