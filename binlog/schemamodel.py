"""The relay's own model of the source's tables, and how a TABLE_MAP is checked against it.

``information_schema`` describes a table as it is *now*; a reader that lags behind DDL needs the table as it was when
a rows event was written. ``binlog.ddl`` applies each DDL statement of the stream to a ``SchemaModel``, and
``binlog.schemahistory`` keeps the versions that result, each valid from the binlog position of its statement.

A column is described as information_schema.COLUMNS would describe it (DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME,
IS_NULLABLE), so the model can be compared with the server and handed to ``TableResolver`` as a ``SchemaTable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

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
from binlog.schema import SYSTEM_TIME_COLUMNS, SchemaColumn, SchemaTable, shown_labels_may_be_mangled
from binlog.table import parse_enum_labels
from binlog.tablemap import TableMap


@dataclass(frozen=True, slots=True)
class Column:
    """One column, in information_schema's terms (``charset`` None for non-text columns and binary strings).

    ``labels_uncertain``: an ENUM/SET column whose labels were read from information_schema and may have lost
    characters there (``labels_may_be_mangled``); its labels are never given as the column's values.
    ``hidden``: a column the server adds, which information_schema does not show: one of the SYSTEM_TIME_COLUMNS of
    a system-versioned table, or a long UNIQUE key's hash (``binlog.schema.long_unique_hash_columns``); both stay
    after the table's own columns.
    """

    name: str
    data_type: str  # "int", "varchar", "enum"...
    column_type: str  # "int(10) unsigned", "enum('a','b')"...
    charset: str | None = None
    nullable: bool = True
    labels_uncertain: bool = False
    hidden: bool = False

    @property
    def unsigned(self) -> bool:
        return " unsigned" in self.column_type

    @property
    def labels(self) -> tuple[str, ...]:
        return parse_enum_labels(self.column_type) if self.data_type in ("enum", "set") else ()


def hidden(columns: Sequence[SchemaColumn]) -> tuple[Column, ...]:
    """Columns the server adds to a table (``Column.hidden``), as the model has them."""
    return tuple(Column(c.name, c.data_type, c.column_type, c.charset, c.nullable, hidden=True) for c in columns)


#: The hidden columns of a table WITH SYSTEM VERSIONING (``binlog.schema.SYSTEM_TIME_COLUMNS``), as the model has them.
SYSTEM_TIME = hidden(SYSTEM_TIME_COLUMNS)


_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def fold_name(name: str) -> str:
    """A column name as the history compares it: ASCII letters without their case, every other character as it is.

    The server compares column names case-insensitively by its own case table (the system charset's), which differs
    from Python's for letters outside ASCII: it keeps the dotless i (U+0131) and I apart, which str.upper makes one.
    So two names that differ only in the case of such letters are two names here; a statement that finds a column
    only by such a difference (``may_fold_alike``) cannot be applied with certainty (``binlog.ddl`` refuses it)."""
    return name.translate(_ASCII_UPPER)


def may_fold_alike(name: str, other: str) -> bool:
    """Whether the server may take two names ``fold_name`` keeps apart for one: where they differ, both have letters
    and one of them a letter outside ASCII (the server folds a character at a time, by a table of its own: 'İ' is
    'i' to it, which no case mapping of Python's makes so)."""
    if len(name) != len(other) or fold_name(name) == fold_name(other):
        return False
    return all(
        a == b or (a.isalpha() and b.isalpha() and not (a.isascii() and b.isascii()))
        for a, b in zip(fold_name(name), fold_name(other), strict=True)
    )


@dataclass(frozen=True, slots=True)
class TableDef:
    """A table's columns in order, its primary key (column names in key order) and default charset."""

    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    charset: str = "utf8mb4"

    def index(self, name: str) -> int:
        """Position of a column (names are case-insensitive, as the server compares them: ``fold_name``); -1 when
        absent."""
        folded = fold_name(name)
        for i, column in enumerate(self.columns):
            if fold_name(column.name) == folded:
                return i
        return -1

    def as_schema_table(self) -> SchemaTable:
        """The table for ``TableResolver``. A column with uncertain labels goes without them (its type is the bare
        "enum" or "set"): its values are then the label's number, or the set's bits as a number, as for a column
        whose labels are unknown (``binlog.values.enum_text``), never a label that may be wrong."""
        return SchemaTable(
            tuple(
                SchemaColumn(
                    c.name, c.data_type, c.data_type if c.labels_uncertain else c.column_type, c.charset, c.nullable
                )
                for c in self.columns
            ),
            self.primary_key,
        )

    def uncertain_labels(self) -> tuple[int, ...]:
        """Indexes of the columns whose labels are uncertain."""
        return tuple(i for i, c in enumerate(self.columns) if c.labels_uncertain)

    def layout(self) -> str:
        """A one-line description for log messages."""
        return ", ".join(f"{c.name} {c.column_type}" for c in self.columns)


@dataclass(slots=True)
class SchemaModel:
    """Tables by (schema, table) and databases with their default charset, as DDL leaves them.

    ``lower_case_table_names`` is the source's setting: 0 names are case-sensitive, 1 they are stored in lower case,
    2 they are stored as given and compared in lower case.
    """

    tables: dict[tuple[str, str], TableDef] = field(default_factory=dict)
    databases: dict[str, str] = field(default_factory=dict)  # name -> default charset
    lower_case_table_names: int = 0
    server_charset: str = "utf8mb4"  # character_set_server: the default of a CREATE DATABASE without one
    names: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # key -> names as stored

    def name(self, text: str) -> str:
        """A schema or table name as the server stores it."""
        return text.lower() if self.lower_case_table_names == 1 else text

    def _key(self, schema: str, table: str) -> tuple[str, str]:
        if self.lower_case_table_names:
            return schema.lower(), table.lower()
        return schema, table

    def _db_key(self, schema: str) -> str:
        return schema.lower() if self.lower_case_table_names else schema

    def get(self, schema: str, table: str) -> TableDef | None:
        return self.tables.get(self._key(schema, table))

    def put(self, schema: str, table: str, definition: TableDef) -> None:
        key = self._key(schema, table)
        self.tables[key] = definition
        self.names[key] = (self.name(schema), self.name(table))

    def remove(self, schema: str, table: str) -> TableDef | None:
        key = self._key(schema, table)
        self.names.pop(key, None)
        return self.tables.pop(key, None)

    def stored_name(self, schema: str, table: str) -> tuple[str, str]:
        return self.names.get(self._key(schema, table), (self.name(schema), self.name(table)))

    def database_charset(self, schema: str) -> str:
        return self.databases.get(self._db_key(schema), self.server_charset)

    def set_database(self, schema: str, charset: str | None) -> None:
        self.databases[self._db_key(schema)] = charset or self.server_charset

    def has_database(self, schema: str) -> bool:
        return self._db_key(schema) in self.databases

    def drop_database(self, schema: str) -> list[tuple[str, str]]:
        """Forgets a database and its tables; returns the tables' stored names."""
        db = self._db_key(schema)
        self.databases.pop(db, None)
        gone = [key for key in self.tables if key[0] == db]
        names = [self.names.get(key, key) for key in gone]
        for key in gone:
            del self.tables[key]
            self.names.pop(key, None)
        return names

    def copy(self) -> SchemaModel:
        return replace(self, tables=dict(self.tables), databases=dict(self.databases), names=dict(self.names))


def labels_may_be_mangled(column: Column, shown_in: str) -> bool:
    """Whether an ENUM/SET column's labels, as information_schema shows them in the charset ``shown_in`` (that of
    its COLUMN_TYPE), may differ from the real ones (``binlog.schema.shown_labels_may_be_mangled``)."""
    return shown_labels_may_be_mangled(column.data_type, column.charset, column.labels, shown_in)


# -- checking a TABLE_MAP against a version ------------------------------------------------------------------------

_INTEGER_CODES = {
    "tinyint": MYSQL_TYPE_TINY,
    "smallint": MYSQL_TYPE_SHORT,
    "mediumint": MYSQL_TYPE_INT24,
    "int": MYSQL_TYPE_LONG,
    "bigint": MYSQL_TYPE_LONGLONG,
}
_BLOB_PACK = {"tiny": 1, "": 2, "medium": 3, "long": 4}
#: The spatial types' names (information_schema's DATA_TYPE); all are written as MYSQL_TYPE_GEOMETRY.
GEOMETRY_TYPES = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    }
)


def _args(column_type: str) -> list[int]:
    start = column_type.find("(")
    if start < 0:
        return []
    inner = column_type[start + 1 : column_type.find(")", start)]
    return [int(x) for x in inner.split(",") if x.strip().isdigit()]


def _expected(column: Column) -> tuple[frozenset[int], int | None]:
    """The binlog type codes a column may be written with, and its TABLE_MAP metadata when it is certain."""
    dt = column.data_type
    args = _args(column.column_type)
    if dt in _INTEGER_CODES:
        return frozenset({_INTEGER_CODES[dt]}), None
    if dt == "decimal":
        precision, scale = ([*args, 10, 0])[:2] if args else (10, 0)
        return frozenset({MYSQL_TYPE_NEWDECIMAL}), precision << 8 | scale
    if dt == "float":
        return frozenset({MYSQL_TYPE_FLOAT}), None
    if dt == "double":
        return frozenset({MYSQL_TYPE_DOUBLE}), None
    if dt == "bit":
        bits = args[0] if args else 1
        return frozenset({MYSQL_TYPE_BIT}), (bits % 8) << 8 | bits // 8
    if dt == "year":
        return frozenset({MYSQL_TYPE_YEAR}), None
    if dt == "date":
        return frozenset({MYSQL_TYPE_DATE, MYSQL_TYPE_NEWDATE}), None
    if dt == "time":
        return frozenset({MYSQL_TYPE_TIME, MYSQL_TYPE_TIME2}), None
    if dt == "datetime":
        return frozenset({MYSQL_TYPE_DATETIME, MYSQL_TYPE_DATETIME2}), None
    if dt == "timestamp":
        return frozenset({MYSQL_TYPE_TIMESTAMP, MYSQL_TYPE_TIMESTAMP2}), None
    if dt in ("char", "binary"):
        width = (args[0] if args else 1) * (1 if dt == "binary" else max_bytes_per_char(column.charset))
        return frozenset({MYSQL_TYPE_STRING}), width
    if dt in ("varchar", "varbinary"):
        width = (args[0] if args else 0) * (1 if dt == "varbinary" else max_bytes_per_char(column.charset))
        return frozenset({MYSQL_TYPE_VARCHAR, MYSQL_TYPE_VAR_STRING, MYSQL_TYPE_VARCHAR_COMPRESSED}), width
    for prefix, pack in _BLOB_PACK.items():
        if dt in (prefix + "text", prefix + "blob"):
            return frozenset({MYSQL_TYPE_BLOB, MYSQL_TYPE_BLOB_COMPRESSED}), pack
    if dt == "enum":
        return frozenset({MYSQL_TYPE_ENUM}), 1 if len(column.labels) < 256 else 2
    if dt == "set":
        count = len(column.labels)
        return frozenset({MYSQL_TYPE_SET}), (count + 7) // 8 if count <= 32 else 8
    if dt == "json":
        return frozenset({MYSQL_TYPE_JSON, MYSQL_TYPE_BLOB}), None
    if dt in GEOMETRY_TYPES:
        return frozenset({MYSQL_TYPE_GEOMETRY}), None
    return frozenset(), None  # a type the model does not know (INET6, UUID...): anything goes


def layout_mismatch(definition: TableDef, tm: TableMap) -> str | None:
    """Why a TABLE_MAP cannot have been written for ``definition`` (None when it can).

    Checked: the column count, each column's binlog type, and the metadata that follows from the declared type alone
    (DECIMAL precision and scale, BIT width, CHAR/VARCHAR byte length, TEXT/BLOB size class, ENUM/SET pack length);
    with row metadata, the names and signedness too. A rename or a reorder of same-typed columns passes: that only the
    history itself can get right.
    """
    if len(definition.columns) != len(tm.types):
        return f"{len(tm.types)} columns in the event, {len(definition.columns)} in the history"
    opt = tm.optional
    for i, (column, code, meta) in enumerate(zip(definition.columns, tm.types, tm.metas, strict=True)):
        codes, expected_meta = _expected(column)
        if code == MYSQL_TYPE_VARCHAR_COMPRESSED and expected_meta is not None:
            expected_meta += 1  # a COMPRESSED VARCHAR's length counts the byte that says how its value is compressed
        if codes and code not in codes:
            return f"column {i + 1} ({column.name} {column.column_type}) is binlog type {code}"
        if codes and expected_meta is not None and meta != expected_meta:
            return f"column {i + 1} ({column.name} {column.column_type}) has metadata {meta}, not {expected_meta}"
        if opt is not None and opt.names and i < len(opt.names) and fold_name(opt.names[i]) != fold_name(column.name):
            return f"column {i + 1} is named {opt.names[i]} in the event, {column.name} in the history"
        signed_known = opt is not None and opt.unsigned is not None and column.data_type in _INTEGER_CODES
        if signed_known and opt is not None and opt.unsigned is not None and opt.unsigned[i] != column.unsigned:
            return f"column {i + 1} ({column.name}) differs in signedness"
    return None


def event_layout(tm: TableMap) -> str:
    """The TABLE_MAP's own description of the columns, for log messages."""
    names = tm.optional.names if tm.optional is not None and tm.optional.names else None
    return ", ".join(
        f"{names[i] if names and i < len(names) else '@' + str(i + 1)} type {t} meta {m}"
        for i, (t, m) in enumerate(zip(tm.types, tm.metas, strict=True))
    )
