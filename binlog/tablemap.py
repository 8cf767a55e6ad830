"""TABLE_MAP events: the column layout of the table the following rows events change.

The event carries the binlog type and type metadata of each column, its nullability, and with
``binlog_row_metadata=MINIMAL|FULL`` optional metadata: signedness, charsets, and (FULL) names, ENUM/SET labels and the
primary key. What the optional metadata lacks is asked of the schema provider (information_schema).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from binlog.charsets import charset_of_collation, codec_for_charset
from binlog.constants import (
    COLUMN_CHARSET,
    COLUMN_NAME,
    COLUMN_VISIBILITY,
    DEFAULT_CHARSET,
    ENUM_AND_SET_COLUMN_CHARSET,
    ENUM_AND_SET_DEFAULT_CHARSET,
    ENUM_STR_VALUE,
    GEOMETRY_TYPE,
    MYSQL_TYPE_BIT,
    MYSQL_TYPE_BLOB,
    MYSQL_TYPE_BLOB_COMPRESSED,
    MYSQL_TYPE_DATETIME2,
    MYSQL_TYPE_DOUBLE,
    MYSQL_TYPE_ENUM,
    MYSQL_TYPE_FLOAT,
    MYSQL_TYPE_GEOMETRY,
    MYSQL_TYPE_JSON,
    MYSQL_TYPE_LONG_BLOB,
    MYSQL_TYPE_MEDIUM_BLOB,
    MYSQL_TYPE_NEWDECIMAL,
    MYSQL_TYPE_SET,
    MYSQL_TYPE_STRING,
    MYSQL_TYPE_TIME2,
    MYSQL_TYPE_TIMESTAMP2,
    MYSQL_TYPE_TINY_BLOB,
    MYSQL_TYPE_VAR_STRING,
    MYSQL_TYPE_VARCHAR,
    MYSQL_TYPE_VARCHAR_COMPRESSED,
    MYSQL_TYPE_YEAR,
    SET_STR_VALUE,
    SIGNEDNESS,
    SIMPLE_PRIMARY_KEY,
)
from binlog.errors import TruncatedEventError
from binlog.reader import lenenc_bytes, lenenc_int, need
from binlog.table import BLOB_TYPES, NUMERIC_TYPES, string_real_type

_ONE_BYTE_META = frozenset(
    {
        MYSQL_TYPE_FLOAT,
        MYSQL_TYPE_DOUBLE,
        MYSQL_TYPE_BLOB,
        MYSQL_TYPE_TINY_BLOB,
        MYSQL_TYPE_MEDIUM_BLOB,
        MYSQL_TYPE_LONG_BLOB,
        MYSQL_TYPE_GEOMETRY,
        MYSQL_TYPE_JSON,
        MYSQL_TYPE_TIMESTAMP2,
        MYSQL_TYPE_DATETIME2,
        MYSQL_TYPE_TIME2,
        MYSQL_TYPE_BLOB_COMPRESSED,
    }
)
_TWO_BYTE_META_LE = frozenset({MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR_COMPRESSED})
_TWO_BYTE_META_BE = frozenset(
    {MYSQL_TYPE_NEWDECIMAL, MYSQL_TYPE_BIT, MYSQL_TYPE_STRING, MYSQL_TYPE_ENUM, MYSQL_TYPE_SET}
)
# Columns the charset fields of the optional metadata count (MySQL's is_character_type on the real type).
_CHARACTER_TYPES = frozenset(
    {MYSQL_TYPE_STRING, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VARCHAR_COMPRESSED} | BLOB_TYPES
)


@dataclass(slots=True)
class OptionalMetadata:
    unsigned: list[bool] | None = None  # per column (False for non-numeric)
    charsets: list[str | None] | None = None  # per column: charset name of character/enum/set columns
    names: list[str] | None = None
    enum_values: dict[int, tuple[str, ...]] = field(default_factory=dict)  # by column index
    set_values: dict[int, tuple[str, ...]] = field(default_factory=dict)
    geometry_types: dict[int, int] = field(default_factory=dict)
    primary_key: list[int] | None = None
    visibility: list[bool] | None = None


@dataclass(slots=True)
class TableMap:
    """A decoded TABLE_MAP event (the binlog's facts only; names may still be missing)."""

    table_id: int
    schema: str
    table: str
    types: list[int]  # real types: CHAR/ENUM/SET unhidden from MYSQL_TYPE_STRING
    metas: list[int]  # per type: see rowdecoder (STRING: max byte length; ENUM/SET: pack length)
    nullable: list[bool]
    optional: OptionalMetadata | None
    flags: int = 0


def parse_table_map(body: bytes, post_header_len: int, *, mariadb: bool = False) -> TableMap:
    """Parse a TABLE_MAP event body (everything after the common header, without the checksum).

    ``mariadb``: the source is MariaDB, whose charset metadata also counts GEOMETRY columns as character columns.
    """
    if post_header_len == 6:
        need(body, 6, "TABLE_MAP post-header")
        table_id = int.from_bytes(body[0:4], "little")
        flags = int.from_bytes(body[4:6], "little")
    else:
        need(body, 8, "TABLE_MAP post-header")
        table_id = int.from_bytes(body[0:6], "little")
        flags = int.from_bytes(body[6:8], "little")
    pos = post_header_len
    try:
        schema_len = body[pos]
        schema = body[pos + 1 : pos + 1 + schema_len].decode("utf-8", "replace")
        pos += 1 + schema_len + 1  # trailing NUL
        table_len = body[pos]
        table = body[pos + 1 : pos + 1 + table_len].decode("utf-8", "replace")
        pos += 1 + table_len + 1
    except IndexError:
        raise TruncatedEventError("TABLE_MAP event ends inside its table name") from None
    count, pos = lenenc_int(body, pos)
    need(body, pos + count, "TABLE_MAP column types")
    raw_types = list(body[pos : pos + count])
    pos += count
    meta_len, pos = lenenc_int(body, pos)
    need(body, pos + meta_len, "TABLE_MAP column metadata")
    meta_end = pos + meta_len
    types: list[int] = []
    metas: list[int] = []
    for t in raw_types:
        if t in _ONE_BYTE_META:
            meta = body[pos]
            pos += 1
        elif t in _TWO_BYTE_META_LE:
            meta = body[pos] | body[pos + 1] << 8
            pos += 2
        elif t in _TWO_BYTE_META_BE:
            meta = body[pos] << 8 | body[pos + 1]
            pos += 2
        else:
            meta = 0
        if t == MYSQL_TYPE_STRING:
            real, length = string_real_type(meta)
            if real in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET):
                t, meta = real, meta & 0xFF  # pack length: bytes of the index / bitmask
            else:
                t, meta = real, length
        elif t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET):
            meta &= 0xFF
        _check_meta(schema, table, len(types), t, meta)
        types.append(t)
        metas.append(meta)
    if pos > meta_end:
        raise TruncatedEventError("TABLE_MAP metadata is shorter than its column types need")
    pos = meta_end
    null_len = (count + 7) // 8
    need(body, pos + null_len, "TABLE_MAP null bitmap")
    null_bits = int.from_bytes(body[pos : pos + null_len], "little")
    pos += null_len
    nullable = [bool(null_bits >> i & 1) for i in range(count)]
    optional = _parse_optional(body, pos, types, mariadb) if pos < len(body) else None
    return TableMap(table_id, schema, table, types, metas, nullable, optional, flags)


def _check_meta(schema: str, table: str, index: int, type_code: int, meta: int) -> None:
    """Refuse metadata that no server writes and that would give a column no defined size: a length prefix of more
    than 4 bytes, a fractional precision over 6, a DECIMAL beyond 65 digits or with more fraction digits than
    digits (MariaDB allows 38 of them)."""
    bad = False
    if type_code in BLOB_TYPES or type_code in (MYSQL_TYPE_GEOMETRY, MYSQL_TYPE_JSON):
        bad = not 1 <= meta <= 4
    elif type_code in (MYSQL_TYPE_DATETIME2, MYSQL_TYPE_TIMESTAMP2, MYSQL_TYPE_TIME2):
        bad = meta > 6
    elif type_code == MYSQL_TYPE_NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        bad = not (1 <= precision <= 65 and scale <= min(precision, 38))
    if bad:
        raise TruncatedEventError(
            f"TABLE_MAP of {schema}.{table}: column {index + 1} has type {type_code} with metadata {meta:#x}, which "
            "no server writes"
        )


def _msb_bits(data: bytes, count: int) -> list[bool]:
    return [bool(data[i >> 3] >> (7 - (i & 7)) & 1) if (i >> 3) < len(data) else False for i in range(count)]


def _charset_field(value: bytes, indexes: list[int], default_style: bool) -> dict[int, str]:
    """DEFAULT_CHARSET style (default collation + exceptions) or COLUMN_CHARSET style (one per column)."""
    out: dict[int, str] = {}
    pos = 0
    if default_style:
        default, pos = lenenc_int(value, 0)
        for index in indexes:
            out[index] = charset_of_collation(default)
        while pos < len(value):
            nth, pos = lenenc_int(value, pos)
            collation, pos = lenenc_int(value, pos)
            if nth < len(indexes):
                out[indexes[nth]] = charset_of_collation(collation)
    else:
        for index in indexes:
            if pos >= len(value):
                break
            collation, pos = lenenc_int(value, pos)
            out[index] = charset_of_collation(collation)
    return out


def _str_values(value: bytes, indexes: list[int]) -> dict[int, tuple[bytes, ...]]:
    out: dict[int, tuple[bytes, ...]] = {}
    pos = 0
    for index in indexes:
        if pos >= len(value):
            break
        n, pos = lenenc_int(value, pos)
        labels = []
        for _ in range(n):
            raw, pos = lenenc_bytes(value, pos)
            labels.append(raw)
        out[index] = tuple(labels)
    return out


def _parse_optional(body: bytes, pos: int, types: list[int], mariadb: bool) -> OptionalMetadata:
    count = len(types)
    # MariaDB gives YEAR a signedness bit too (its YEAR is an integer field); MySQL's is_numeric_type() leaves it out.
    numeric_types = NUMERIC_TYPES | {MYSQL_TYPE_YEAR} if mariadb else NUMERIC_TYPES
    numeric = [i for i, t in enumerate(types) if t in numeric_types]
    character_types = _CHARACTER_TYPES | {MYSQL_TYPE_GEOMETRY} if mariadb else _CHARACTER_TYPES
    character = [i for i, t in enumerate(types) if t in character_types]
    enum_set = [i for i, t in enumerate(types) if t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET)]
    enums = [i for i, t in enumerate(types) if t == MYSQL_TYPE_ENUM]
    sets = [i for i, t in enumerate(types) if t == MYSQL_TYPE_SET]
    geometries = [i for i, t in enumerate(types) if t == MYSQL_TYPE_GEOMETRY]
    meta = OptionalMetadata()
    charsets: dict[int, str] = {}
    seen_charset = False
    enum_labels: dict[int, tuple[bytes, ...]] = {}  # decoded at the end, when every charset field has been read
    set_labels: dict[int, tuple[bytes, ...]] = {}
    while pos < len(body):
        field_type = body[pos]
        length, pos = lenenc_int(body, pos + 1)
        need(body, pos + length, "TABLE_MAP optional metadata")
        value = bytes(body[pos : pos + length])
        pos += length
        if field_type == SIGNEDNESS:
            flags = _msb_bits(value, len(numeric))
            meta.unsigned = [False] * count
            for index, flag in zip(numeric, flags, strict=True):
                meta.unsigned[index] = flag and types[index] != MYSQL_TYPE_YEAR  # its bit is read, never shown
        elif field_type in (DEFAULT_CHARSET, COLUMN_CHARSET):
            charsets.update(_charset_field(value, character, field_type == DEFAULT_CHARSET))
            seen_charset = True
        elif field_type in (ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET):
            charsets.update(_charset_field(value, enum_set, field_type == ENUM_AND_SET_DEFAULT_CHARSET))
            seen_charset = True
        elif field_type == COLUMN_NAME:
            names: list[str] = []
            p = 0
            while p < len(value) and len(names) < count:
                raw, p = lenenc_bytes(value, p)
                names.append(raw.decode("utf-8", "replace"))
            meta.names = names
        elif field_type == ENUM_STR_VALUE:
            enum_labels = _str_values(value, enums)
        elif field_type == SET_STR_VALUE:
            set_labels = _str_values(value, sets)
        elif field_type == GEOMETRY_TYPE:
            p = 0
            for index in geometries:
                if p >= len(value):
                    break
                meta.geometry_types[index], p = lenenc_int(value, p)
        elif field_type == SIMPLE_PRIMARY_KEY:
            keys: list[int] = []
            p = 0
            while p < len(value):
                key, p = lenenc_int(value, p)
                keys.append(key)
            meta.primary_key = keys
        elif field_type == 9:  # PRIMARY_KEY_WITH_PREFIX: (index, prefix length) pairs
            keys = []
            p = 0
            while p < len(value):
                key, p = lenenc_int(value, p)
                _prefix, p = lenenc_int(value, p)
                keys.append(key)
            meta.primary_key = keys
        elif field_type == COLUMN_VISIBILITY:
            meta.visibility = _msb_bits(value, count)
        # Unknown fields are skipped by their length: newer servers add fields.
    if seen_charset:
        meta.charsets = [charsets.get(i) for i in range(count)]
    # Labels are in their column's charset, which the (later) ENUM_AND_SET charset fields give.
    meta.enum_values = _decoded_labels(enum_labels, charsets)
    meta.set_values = _decoded_labels(set_labels, charsets)
    return meta


def _decoded_labels(labels: dict[int, tuple[bytes, ...]], charsets: dict[int, str]) -> dict[int, tuple[str, ...]]:
    decoded: dict[int, tuple[str, ...]] = {}
    for index, raw_labels in labels.items():
        codec, errors = codec_for_charset(charsets.get(index, "utf8mb4"))
        decoded[index] = tuple(x.decode(codec or "utf-8", errors or "replace") for x in raw_labels)
    return decoded
