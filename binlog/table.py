"""TableInfo and ColumnInfo: what the stream knows about the table of a rows event."""

from __future__ import annotations

from dataclasses import dataclass, field

from binlog.charsets import max_bytes_per_char
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
    MYSQL_TYPE_LONGLONG,
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
    MYSQL_TYPE_VAR_STRING,
    MYSQL_TYPE_VARCHAR,
    MYSQL_TYPE_VARCHAR_COMPRESSED,
    MYSQL_TYPE_YEAR,
)

# Types whose signedness the SIGNEDNESS optional metadata covers (MySQL's is_numeric_type()).
NUMERIC_TYPES = frozenset(
    {
        MYSQL_TYPE_TINY,
        MYSQL_TYPE_SHORT,
        MYSQL_TYPE_INT24,
        MYSQL_TYPE_LONG,
        MYSQL_TYPE_LONGLONG,
        MYSQL_TYPE_NEWDECIMAL,
        MYSQL_TYPE_FLOAT,
        MYSQL_TYPE_DOUBLE,
    }
)
STRING_TYPES = frozenset({MYSQL_TYPE_STRING, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VARCHAR_COMPRESSED})
BLOB_TYPES = frozenset({MYSQL_TYPE_BLOB, MYSQL_TYPE_BLOB_COMPRESSED, 249, 250, 251})


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One column as the binlog (and, where it lacks them, information_schema) describes it.

    ``type_code`` is the binlog type (for CHAR/ENUM/SET the real type hidden in the STRING metadata), ``meta`` its
    TABLE_MAP metadata, ``charset`` the character set name for text columns ("binary" for binary strings, None for
    non-text), ``enum_values``/``set_values`` the labels.
    """

    name: str
    type_code: int
    type_name: str
    unsigned: bool = False
    charset: str | None = None
    nullable: bool = True
    meta: int = 0
    enum_values: tuple[str, ...] = ()
    set_values: tuple[str, ...] = ()
    is_json: bool = False
    is_geometry: bool = False


@dataclass(frozen=True, slots=True)
class TableInfo:
    schema: str
    table: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...] = ()
    names: tuple[str, ...] = field(default=(), compare=False)
    names_known: bool = True  # False when the names are the @1, @2... fallback

    def __post_init__(self) -> None:
        if not self.names:
            object.__setattr__(self, "names", tuple(c.name for c in self.columns))

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.names


def string_real_type(meta: int) -> tuple[int, int]:
    """(real type, max byte length) of a MYSQL_TYPE_STRING column from its 2-byte metadata (byte0 << 8 | byte1).

    CHAR lengths above 255 hide their two high bits, inverted, in bits 4-5 of the real-type byte.
    """
    byte0, byte1 = meta >> 8, meta & 0xFF
    if byte0 and (byte0 & 0x30) != 0x30:
        return byte0 | 0x30, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return (byte0 or MYSQL_TYPE_STRING), byte1


# The SQL names of types whose name needs no metadata: numbers take " unsigned", temporal types take "(fsp)".
_NUMERIC_NAMES = {
    MYSQL_TYPE_TINY: "tinyint",
    MYSQL_TYPE_SHORT: "smallint",
    MYSQL_TYPE_INT24: "mediumint",
    MYSQL_TYPE_LONG: "int",
    MYSQL_TYPE_LONGLONG: "bigint",
    MYSQL_TYPE_FLOAT: "float",
    MYSQL_TYPE_DOUBLE: "double",
}
_FRACTIONAL_NAMES = {
    MYSQL_TYPE_TIME: "time",
    MYSQL_TYPE_TIME2: "time",
    MYSQL_TYPE_DATETIME: "datetime",
    MYSQL_TYPE_DATETIME2: "datetime",
    MYSQL_TYPE_TIMESTAMP: "timestamp",
    MYSQL_TYPE_TIMESTAMP2: "timestamp",
}
_PLAIN_NAMES = {
    MYSQL_TYPE_YEAR: "year",
    MYSQL_TYPE_DATE: "date",
    MYSQL_TYPE_NEWDATE: "date",
    MYSQL_TYPE_JSON: "json",
    MYSQL_TYPE_GEOMETRY: "geometry",
    MYSQL_TYPE_ENUM: "enum",
    MYSQL_TYPE_SET: "set",
}


def derived_type_name(type_code: int, meta: int, unsigned: bool, charset: str | None) -> str:
    """A SQL type name (as information_schema's COLUMN_TYPE would say it) from binlog facts alone."""
    suffix = " unsigned" if unsigned else ""
    if type_code in _NUMERIC_NAMES:
        return _NUMERIC_NAMES[type_code] + suffix
    if type_code == MYSQL_TYPE_NEWDECIMAL:
        return f"decimal({meta >> 8},{meta & 0xFF})" + suffix
    if type_code in _FRACTIONAL_NAMES:
        name = _FRACTIONAL_NAMES[type_code]
        return f"{name}({meta})" if meta else name
    if type_code in _PLAIN_NAMES:
        return _PLAIN_NAMES[type_code]
    if type_code == MYSQL_TYPE_BIT:
        return f"bit({(meta & 0xFF) * 8 + (meta >> 8)})"
    binary = charset == "binary"
    if type_code in (MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR_COMPRESSED):
        return f"varbinary({meta})" if binary else f"varchar({meta // max_bytes_per_char(charset)})"
    if type_code == MYSQL_TYPE_STRING:
        return f"binary({meta})" if binary else f"char({meta // max_bytes_per_char(charset)})"
    if type_code in BLOB_TYPES:
        prefix = {1: "tiny", 2: "", 3: "medium", 4: "long"}.get(meta, "")
        return prefix + ("blob" if binary else "text")
    return f"type{type_code}"


# The escapes of MySQL's string literals: an escaped character stands for itself unless named here. \% and \_ keep
# their backslash (they are escapes in LIKE patterns only).
STRING_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "Z": "\x1a", "b": "\b", "%": "\\%", "_": "\\_"}


def parse_enum_labels(column_type: str) -> tuple[str, ...]:
    """Labels of ``enum('a','b''c','d,e')`` / ``set(...)`` as information_schema's COLUMN_TYPE writes them: quotes
    doubled, and a backslash, NUL, newline and carriage return escaped with a backslash (``binlog.ddl`` writes them
    the same way)."""
    start = column_type.find("(")
    if start < 0:
        return ()
    labels: list[str] = []
    i, text = start + 1, column_type
    while i < len(text) and text[i] == "'":
        i += 1
        chunk: list[str] = []
        while i < len(text):
            ch = text[i]
            if ch == "'":
                if i + 1 < len(text) and text[i + 1] == "'":
                    chunk.append("'")
                    i += 2
                    continue
                i += 1
                break
            if ch == "\\" and i + 1 < len(text):
                chunk.append(STRING_ESCAPES.get(text[i + 1], text[i + 1]))
                i += 2
                continue
            chunk.append(ch)
            i += 1
        labels.append("".join(chunk))
        if i < len(text) and text[i] == ",":
            i += 1
    return tuple(labels)
