"""Column names and types that the binlog itself may lack, from information_schema, and TableInfo resolution.

Sources without ``binlog_row_metadata=FULL`` write no column names, ENUM/SET labels or (before MINIMAL) signedness
into TABLE_MAP events. ``InformationSchemaProvider`` reads them from the source with a cache that the stream
invalidates whenever a DDL statement passes and whenever a TABLE_MAP's column count disagrees with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from binlog.constants import (
    MYSQL_TYPE_DATETIME,
    MYSQL_TYPE_ENUM,
    MYSQL_TYPE_GEOMETRY,
    MYSQL_TYPE_JSON,
    MYSQL_TYPE_SET,
    MYSQL_TYPE_TIME,
    MYSQL_TYPE_TIMESTAMP,
)
from binlog.logs import logger
from binlog.table import BLOB_TYPES, NUMERIC_TYPES, STRING_TYPES, ColumnInfo, TableInfo, derived_type_name
from binlog.table import parse_enum_labels as _labels
from binlog.tablemap import TableMap


@dataclass(frozen=True, slots=True)
class SchemaColumn:
    """One column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str  # "int", "varchar", "enum", "json"...
    column_type: str  # "int(10) unsigned", "enum('a','b')"...
    charset: str | None  # CHARACTER_SET_NAME; None for non-text columns (and binary strings)
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class SchemaTable:
    columns: tuple[SchemaColumn, ...]
    primary_key: tuple[str, ...] = ()


#: The columns MariaDB adds to a table WITH SYSTEM VERSIONING that names no AS ROW START/END column of its own: last in
#: every row image (a column added later goes before them), shown by neither information_schema.COLUMNS nor SHOW
#: CREATE TABLE. information_schema says such a table is one by its TABLE_TYPE.
SYSTEM_TIME_COLUMNS = (
    SchemaColumn("row_start", "timestamp", "timestamp(6)", None, False),
    SchemaColumn("row_end", "timestamp", "timestamp(6)", None, False),
)
SYSTEM_VERSIONED = "SYSTEM VERSIONED"
#: A UNIQUE key too long for the engine's B-tree (over a BLOB or TEXT column, or wider than the engine's key length)
#: is kept by a hash: a hidden BIGINT column per such key, DB_ROW_HASH_1, _2..., after the table's own columns, in
#: every row image, which information_schema does not list (its index shows INDEX_TYPE HASH, NON_UNIQUE 0; on a
#: table of ORDINARY_HASH_ENGINES a HASH index is an ordinary one).
ORDINARY_HASH_ENGINES = frozenset(("MEMORY", "HEAP"))


def long_unique_hash_columns(keys: int) -> tuple[SchemaColumn, ...]:
    """The hidden columns of a table with ``keys`` long UNIQUE keys."""
    return tuple(
        SchemaColumn(f"DB_ROW_HASH_{n}", "bigint", "bigint(20) unsigned", None, True) for n in range(1, keys + 1)
    )


def has_hidden_system_time(table_type: str, generation_expressions: Sequence[str | None]) -> bool:
    """Whether a table of ``table_type`` whose columns have these GENERATION_EXPRESSIONs has SYSTEM_TIME_COLUMNS."""
    return table_type.upper() == SYSTEM_VERSIONED and not any(
        (expression or "").upper() == "ROW START" for expression in generation_expressions
    )


class SchemaProvider(Protocol):
    """Where names and types come from when the binlog lacks them."""

    def table(self, schema: str, table: str) -> SchemaTable | None: ...

    def invalidate(self, schema: str | None = None, table: str | None = None) -> None: ...


# Charsets with characters beyond utf8mb3's (four-byte UTF-8): an ENUM/SET label in one of them may hold characters
# an information_schema in utf8mb3 (MariaDB 10.x, MySQL) shows as "?".
_BEYOND_UTF8MB3 = frozenset({"utf8mb4", "utf16", "utf16le", "utf32", "gb18030"})

#: The charset information_schema shows COLUMN_TYPE in (utf8mb3 on MariaDB 10.x).
COLUMN_TYPE_CHARSET_SQL = (
    "SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'information_schema' "
    "AND TABLE_NAME = 'COLUMNS' AND COLUMN_NAME = 'COLUMN_TYPE'"
)


def shown_labels_may_be_mangled(data_type: str, charset: str | None, labels: Sequence[str], shown_in: str) -> bool:
    """Whether an ENUM/SET column's labels, as information_schema shows them in the charset ``shown_in`` (that of
    its COLUMN_TYPE), may differ from the real ones: the server writes "?" for each character it cannot convert, so
    a "?" in a label of a column that can hold such characters may be one. (The server's own SHOW CREATE TABLE does
    the same; only ``binlog_row_metadata=FULL`` or the DDL in the stream give such labels.)"""
    if data_type not in ("enum", "set") or shown_in in _BEYOND_UTF8MB3:
        return False
    return charset in _BEYOND_UTF8MB3 and any("?" in label for label in labels)


class InformationSchemaProvider:
    """Reads ``information_schema`` over its own PyMySQL connection (opened lazily, reopened after errors)."""

    def __init__(self, connect_args: dict[str, Any]) -> None:
        self.connect_args = dict(connect_args)
        self.connect_args.pop("database", None)
        self._cache: dict[tuple[str, str], SchemaTable | None] = {}
        self._conn: Any = None
        import threading  # here: a decoder without a schema look-up (a dump of files) does without it

        self._lock = threading.Lock()
        self.queries = 0  # look-ups made (for tests and statistics)
        self._shown_in: str | None = None  # the charset of information_schema's COLUMN_TYPE, asked once

    def _query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import pymysql

        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = pymysql.connect(**self.connect_args)
                with self._conn.cursor() as cur:
                    cur.execute(sql, params)
                    return list(cur.fetchall())
            except pymysql.err.OperationalError:
                self.close()
                if attempt == 2:
                    raise
        return []

    def table(self, schema: str, table: str) -> SchemaTable | None:
        key = (schema, table)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            self.queries += 1
            rows = self._query(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE, GENERATION_EXPRESSION "
                "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                "ORDER BY ORDINAL_POSITION",
                schema,
                table,
            )
            if not rows:
                self._cache[key] = None
                return None
            # The primary key's columns and the long UNIQUE keys, in one read of the table's own indexes.
            indexes = self._query(
                "SELECT INDEX_NAME, COLUMN_NAME, NON_UNIQUE, INDEX_TYPE FROM information_schema.STATISTICS"
                " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND (INDEX_NAME = 'PRIMARY' OR INDEX_TYPE = 'HASH')"
                " ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                schema,
                table,
            )
            pk = [r for r in indexes if _text(r[0]) == "PRIMARY"]
            hashed = {_text(r[0]) for r in indexes if _text(r[3]) == "HASH" and int(r[2]) == 0}
            columns = tuple(
                SchemaColumn(
                    name=_text(r[0]),
                    data_type=_text(r[1]).lower(),
                    column_type=_text(r[2]),
                    charset=_text(r[3]) if r[3] is not None else None,
                    nullable=_text(r[4]) == "YES",
                )
                for r in rows
            )
            kind = self._query(
                "SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                schema,
                table,
            )
            if kind and has_hidden_system_time(
                _text(kind[0][0]), [_text(r[5]) if r[5] is not None else None for r in rows]
            ):
                columns += SYSTEM_TIME_COLUMNS
            if kind and _text(kind[0][1] or "").upper() not in ORDINARY_HASH_ENGINES:
                columns += long_unique_hash_columns(len(hashed))
            result = SchemaTable(self._without_doubtful_labels(schema, table, columns), tuple(_text(r[1]) for r in pk))
            self._cache[key] = result
            return result

    def _without_doubtful_labels(
        self, schema: str, table: str, columns: tuple[SchemaColumn, ...]
    ) -> tuple[SchemaColumn, ...]:
        """The columns, an ENUM/SET whose labels information_schema may have mangled ("?") typed bare ("enum"): its
        values are then given as label numbers, never as labels that may be wrong; said once per table."""
        doubtful = [
            c
            for c in columns
            if c.data_type in ("enum", "set")
            and shown_labels_may_be_mangled(c.data_type, c.charset, _labels(c.column_type), self._column_type_charset())
        ]
        if not doubtful:
            return columns
        logger("binlog.schema").warning(
            "%s.%s: information_schema shows the ENUM/SET labels of %s with '?' for characters it cannot convert: "
            "their values are given as label numbers (ENUM: position from 1; SET: the bits as a number); "
            "binlog_row_metadata=FULL on the source gives the labels",
            schema,
            table,
            ", ".join(c.name for c in doubtful),
        )
        return tuple(replace(c, column_type=c.data_type) if c in doubtful else c for c in columns)

    def _column_type_charset(self) -> str:
        if self._shown_in is None:
            rows = self._query(COLUMN_TYPE_CHARSET_SQL)
            self._shown_in = _text(rows[0][0]).lower() if rows and rows[0][0] is not None else "utf8mb3"
        return self._shown_in

    def invalidate(self, schema: str | None = None, table: str | None = None) -> None:
        with self._lock:
            if schema is None:
                self._cache.clear()
            elif table is None:
                for key in [k for k in self._cache if k[0] == schema]:
                    del self._cache[key]
            else:
                self._cache.pop((schema, table), None)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail in any way
                self._conn.close()
            self._conn = None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


_TEXT_DATA_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"})


def _schema_charset(column: SchemaColumn) -> str:
    # information_schema gives no charset for binary strings (BINARY, VARBINARY, BLOB): they are "binary".
    if column.charset:
        return column.charset
    return "utf8mb4" if column.data_type in _TEXT_DATA_TYPES else "binary"


_OLD_TEMPORAL = frozenset({MYSQL_TYPE_DATETIME, MYSQL_TYPE_TIMESTAMP, MYSQL_TYPE_TIME})


def _precision(column_type: str) -> int:
    """The fractional-seconds precision in a COLUMN_TYPE such as "datetime(3)" (0 when none)."""
    start = column_type.find("(")
    if start < 0:
        return 0
    digits = column_type[start + 1 : column_type.find(")", start)]
    return min(int(digits), 6) if digits.isdigit() else 0


class TableResolver:
    """Turns TABLE_MAP events into TableInfo, asking the provider for what the optional metadata lacks."""

    def __init__(self, provider: SchemaProvider | None) -> None:
        self.provider = provider
        self._warned: set[tuple[str, str, int]] = set()

    def _schema_table(self, tm: TableMap) -> SchemaTable | None:
        if self.provider is None:
            return None
        check = getattr(self.provider, "table_for_map", None)  # a schema history checks the layout itself
        if check is not None:
            checked: SchemaTable | None = check(tm)
            return checked
        found = self.provider.table(tm.schema, tm.table)
        if found is None or len(found.columns) != len(tm.types):
            # Cached before a DDL we have not seen (or never looked up): look again once.
            self.provider.invalidate(tm.schema, tm.table)
            found = self.provider.table(tm.schema, tm.table)
        if found is not None and len(found.columns) != len(tm.types):
            found = None
        return found

    def resolve(self, tm: TableMap) -> TableInfo:
        count = len(tm.types)
        opt = tm.optional
        names = opt.names if opt is not None and opt.names and len(opt.names) == count else None
        unsigned = opt.unsigned if opt is not None else None
        charsets = opt.charsets if opt is not None else None
        enum_values = opt.enum_values if opt is not None else {}
        set_values = opt.set_values if opt is not None else {}
        needs_schema = (
            names is None
            or (unsigned is None and any(t in NUMERIC_TYPES for t in tm.types))
            or (charsets is None and any(t in STRING_TYPES or t in BLOB_TYPES for t in tm.types))
            or any(t == MYSQL_TYPE_ENUM and i not in enum_values for i, t in enumerate(tm.types))
            or any(t == MYSQL_TYPE_SET and i not in set_values for i, t in enumerate(tm.types))
            or any(t in _OLD_TEMPORAL for t in tm.types)  # their precision is never in the binlog
        )
        # A schema history sees every TABLE_MAP, row metadata or not: a disagreement with the event is worth a warning.
        checking = hasattr(self.provider, "table_for_map")
        st = self._schema_table(tm) if needs_schema or checking else None
        if names is None and st is None:
            key = (tm.schema, tm.table, count)
            if key not in self._warned:
                self._warned.add(key)
                logger("binlog.schema").warning(
                    "no column names for %s.%s (%d columns): the source writes no row metadata and the schema "
                    "look-up found no table of that shape; using @1, @2...",
                    tm.schema,
                    tm.table,
                    count,
                )
        columns = []
        for i, (t, meta) in enumerate(zip(tm.types, tm.metas, strict=True)):
            sc = st.columns[i] if st is not None else None
            name = names[i] if names is not None else (sc.name if sc is not None else f"@{i + 1}")
            if unsigned is not None:
                is_unsigned = unsigned[i]
            else:
                is_unsigned = sc is not None and "unsigned" in sc.column_type.lower()
            charset: str | None = None
            if t in STRING_TYPES or t in BLOB_TYPES or t in (MYSQL_TYPE_ENUM, MYSQL_TYPE_SET):
                if charsets is not None and charsets[i] is not None:
                    charset = charsets[i]
                elif sc is not None:
                    charset = _schema_charset(sc)
            enums = enum_values.get(i, ())
            sets = set_values.get(i, ())
            if sc is not None and t == MYSQL_TYPE_ENUM and not enums:
                enums = _labels(sc.column_type)
            if sc is not None and t == MYSQL_TYPE_SET and not sets:
                sets = _labels(sc.column_type)
            is_json = t == MYSQL_TYPE_JSON or (sc is not None and sc.data_type == "json")
            if t in _OLD_TEMPORAL and meta == 0 and sc is not None:
                # MariaDB's hires DATETIME/TIMESTAMP/TIME (mysql56_temporal_format=OFF) keep the old type codes and
                # write no precision: only the schema says how many fractional digits (and bytes) a value has.
                meta = _precision(sc.column_type)
            type_name = sc.column_type.lower() if sc is not None else derived_type_name(t, meta, is_unsigned, charset)
            columns.append(
                ColumnInfo(
                    name=name,
                    type_code=t,
                    type_name=type_name,
                    unsigned=is_unsigned,
                    charset=charset,
                    nullable=tm.nullable[i],
                    meta=meta,
                    enum_values=enums,
                    set_values=sets,
                    is_json=is_json,
                    is_geometry=t == MYSQL_TYPE_GEOMETRY,
                )
            )
        if opt is not None and opt.primary_key is not None:
            primary_key = tuple(columns[i].name for i in opt.primary_key if i < count)
        else:
            primary_key = st.primary_key if st is not None else ()
        return TableInfo(
            tm.schema,
            tm.table,
            tuple(columns),
            primary_key,
            names_known=names is not None or st is not None,
        )
