"""Reading a table's current rows in key chunks, each exact at a known point of the binlog stream, with no lock on
the table and no transaction longer than one chunk's SELECT.

Two ways to tie a chunk to the stream; both are exact when the chunk is queued as the worker's stream passes it:

* **Consistent snapshot** (MariaDB, the default there): each chunk is read in its own ``START TRANSACTION WITH
  CONSISTENT SNAPSHOT``, whose binlog position MariaDB reports (``binlog_snapshot_file``/``_position``). The rows are
  the table as of exactly that position: every transaction that ends at or before it is in them, none after it. The
  worker queues the chunk after the last transaction ending at that position, before the next. Nothing is written
  to the source. It needs a transactional engine (InnoDB): a MyISAM or Aria table has no snapshot to read.
* **Watermarks** (MySQL, which reports no snapshot position; or by choice): the method of Netflix's DBLog. The reader
  writes a low watermark row into a small relay-owned signal table on the source, reads the chunk (autocommit, no
  snapshot needed), then writes a high watermark row. The worker, applying the stream, notes the keys of the table's
  row changes between the two watermarks; at the high watermark it queues the chunk's other rows. A row changed
  inside the window is left out: the change itself, already queued, carries its newer image. With ordered commits
  (``binlog_order_commits``, on by default) every transaction before the low watermark in the binlog is visible
  when the low watermark's commit returns, so the chunk sees all of them.

Either way, a chunk's rows are the table's rows with keys above the previous chunk's last key, in key order, up to
the chunk size; the last chunk is the one that comes back short.

A chunk is exact only in the table's layout at its point of the stream (its rows carry the columns and values the
binlog decoder gives there). So the table's layout (``TableLayout``) is read before and after each chunk's read and
compared with the plan's; a DDL in between raises :class:`TableChanged`, with the table's new plan when the snapshot
can go on in it (same chunk key) and the chunk is read again, or without one when it cannot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from binlog import snapshotrows
from binlog.errors import BinlogError
from binlog.position import Position
from binlog.schema import SYSTEM_TIME_COLUMNS, SchemaColumn, has_hidden_system_time

log = logging.getLogger("binlog.snapshot")

CONSISTENT = "consistent-snapshot"
WATERMARK = "watermark"
METHODS = (CONSISTENT, WATERMARK)
#: Engines whose rows a consistent snapshot can read as of one point.
TRANSACTIONAL_ENGINES = frozenset({"innodb", "xtradb", "rocksdb", "tokudb"})
#: A chunk's SELECT (and a watermark write) taking longer is stopped by the source: a bad condition cannot hold it.
STATEMENT_SECONDS = 60
#: A chunk stops taking rows once their values reach this many bytes (a row of any size still makes a chunk).
CHUNK_BYTES = 32 << 20


class SnapshotError(BinlogError):
    """A table or request that cannot be snapshot; the message says why."""


class WhereError(SnapshotError):
    """A WHERE condition the relay does not run."""


class TableChanged(SnapshotError):
    """The table's layout (columns, types, charsets, indexes, engine) is not the plan's any more: the chunk read is
    not used. ``plan`` is the table's new plan when the snapshot can go on exactly in it (the same chunk key), None
    when it cannot (the table is gone, or its key changed): the message then says to ask for the table again."""

    def __init__(self, message: str, plan: TablePlan | None) -> None:
        super().__init__(message)
        self.plan = plan


#: Key types whose values, as rows carry them, do not bound a key range in SQL: floats (the text of a FLOAT is not
#: the stored single), ENUM and SET (compared as text, sorted by their index).
_UNBOUNDED_KEY_TYPES = frozenset({"float", "double", "real", "enum", "set"})
# A condition is one boolean expression over the table's own columns: no second statement, no subquery, no comment
# (which could hide either), nothing that writes or waits.
_FORBIDDEN_WORDS = re.compile(
    r"\b(select|union|into|outfile|dumpfile|sleep|benchmark|get_lock|load_file|for\s+update|lock|nextval|setval|"
    r"lastval|next\s+value\s+for|previous\s+value\s+for)\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`")
MAX_WHERE = 4096


def check_where(where: str) -> None:
    """Raises :class:`WhereError` for a condition that is not one plain boolean expression."""
    if not where:
        return
    if len(where) > MAX_WHERE:
        raise WhereError(f"the condition is {len(where)} characters, the limit is {MAX_WHERE}")
    bare = _QUOTED.sub("''", where)  # what is outside string literals and quoted names
    if bare.count("'") % 2 or bare.count('"') % 2 or bare.count("`") % 2:
        raise WhereError("the condition has an unterminated quote")
    for token, why in ((";", "a second statement"), ("--", "a comment"), ("#", "a comment"), ("/*", "a comment")):
        if token in bare:
            raise WhereError(f"the condition holds {token!r} ({why}); give one boolean expression")
    word = _FORBIDDEN_WORDS.search(bare)
    if word:
        raise WhereError(f"the condition uses {word.group(0).upper()!r}; give one expression over the table's columns")
    depth = 0
    for char in bare:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            break
    if depth:
        raise WhereError("the condition's parentheses do not balance")


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- keys -----------------------------------------------------------------------------------------------------------


def encode_key(values: Sequence[object]) -> str:
    """A chunk key as stored (JSON): text as it is, binary as ``{"x": base64}``."""
    return json.dumps(
        [{"x": base64.b64encode(v).decode("ascii")} if isinstance(v, bytes) else v for v in values],
        separators=(",", ":"),
    )


def decode_key(text: str) -> tuple[object, ...] | None:
    if not text:
        return None
    return tuple(base64.b64decode(v["x"]) if isinstance(v, dict) else v for v in json.loads(text))


def _after_key(columns: Sequence[str]) -> str:
    """``(a, b) > (x, y)`` written so that both servers use the key's index for it: a > x OR (a = x AND b > y)."""
    terms = []
    for index in range(len(columns)):
        equal = [f"{quote_name(c)} = %s" for c in columns[:index]]
        terms.append("(" + " AND ".join([*equal, f"{quote_name(columns[index])} > %s"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def _bound_values(plan: TablePlan, key: Sequence[object]) -> list[object]:
    """The last key as a chunk bound: as clients get it, but BIT as a number. Its text ("3") would be compared with the
    column as a binary string, and chunks would skip keys."""
    return [
        int(str(value)) if plan.columns[index].data_type == "bit" and value is not None else value
        for index, value in zip(plan.key_indexes, key, strict=True)
    ]


def _after_key_params(key: Sequence[object]) -> list[object]:
    params: list[object] = []
    for index in range(len(key)):
        params.extend(key[: index + 1])
    return params


# -- chunks ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TablePlan:
    """What a snapshot of one table reads: its columns, the key chunks are ordered by, and its SELECT."""

    schema: str
    table: str
    columns: tuple[SchemaColumn, ...]
    key: tuple[str, ...]
    key_indexes: tuple[int, ...]
    engine: str
    estimated_rows: int | None
    layout: TableLayout | None = None  # what the plan was made from; every chunk checks the table still has it

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class TableLayout:
    """Everything a chunk's rows depend on, as information_schema shows it, read in one statement: the columns (with
    their collations, which order and compare a key), the indexes (which say what the key is) and the engine.

    A chunk is exact only in the layout the stream has at the chunk's point (its rows carry the column names and
    values the binlog decoder gives there); the reader compares this with the table before and after each read."""

    columns: tuple[SchemaColumn, ...]
    collations: tuple[str | None, ...]
    indexes: tuple[tuple[str, int, str, bool, str | None], ...]  # (index, seq, column, unique, sub_part) in order
    engine: str
    table_type: str

    def column(self, name: str) -> tuple[SchemaColumn, str | None]:
        index = [c.name for c in self.columns].index(name)
        return self.columns[index], self.collations[index]

    def index_columns(self) -> dict[str, list[tuple[str, bool, str | None]]]:
        """Each index's (column, unique, sub_part) in key order."""
        indexes: dict[str, list[tuple[str, bool, str | None]]] = {}
        for name, _, column, unique, sub_part in self.indexes:
            indexes.setdefault(name, []).append((column, unique, sub_part))
        return indexes


def describe_changes(old: TableLayout, new: TableLayout) -> str:
    """What a DDL changed, in a few words: "column c added; column v varchar(20) latin1 -> varchar(20) utf8mb4"."""
    before = {c.name: (c, collation) for c, collation in zip(old.columns, old.collations, strict=True)}
    after = {c.name: (c, collation) for c, collation in zip(new.columns, new.collations, strict=True)}
    changes = [f"column {name} dropped" for name in before if name not in after]
    changes += [f"column {name} added" for name in after if name not in before]
    for name in before.keys() & after.keys():
        if before[name] != after[name]:
            changes.append(f"column {name} {_column_text(*before[name])} -> {_column_text(*after[name])}")
    if not changes and [c.name for c in old.columns] != [c.name for c in new.columns]:
        changes.append("columns reordered")
    if old.indexes != new.indexes:
        changes.append("indexes changed")
    if (old.engine, old.table_type) != (new.engine, new.table_type):
        changes.append(f"engine {old.engine or old.table_type} -> {new.engine or new.table_type}")
    return "; ".join(sorted(changes)) or "its layout changed"


def _column_text(column: SchemaColumn, collation: str | None) -> str:
    return " ".join(
        part
        for part in (column.column_type, collation or column.charset or "", "" if column.nullable else "NOT NULL")
        if part
    )


@dataclass
class Chunk:
    """Rows of one chunk, converted to the values the binlog decoder gives, and where they belong in the stream."""

    plan: TablePlan
    rows: list[tuple[str | bytes | None, ...]]
    last_key: tuple[object, ...] | None  # of the last row; None when the chunk is empty
    complete: bool  # the table's end: no row has a key above last_key
    position: Position | None = None  # consistent snapshot: the rows are exact as of this binlog position
    low_mark: str = ""  # watermarks: the tokens written before and after the read
    high_mark: str = ""
    read_seconds: float = 0.0
    keys: list[tuple[object, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class SignalTable:
    """The relay-owned table on the source that watermark rows are written to."""

    schema: str
    table: str

    @property
    def qualified(self) -> str:
        return f"{quote_name(self.schema)}.{quote_name(self.table)}"

    @classmethod
    def parse(cls, text: str) -> SignalTable:
        schema, dot, table = text.partition(".")
        if not dot or not schema or not table:
            raise SnapshotError(f"signal table {text!r} is not SCHEMA.TABLE")
        return cls(schema, table)


MARK_COLUMN = "mark"

#: A table's layout in one statement (three parts, one row each per column, index column and table); every value
#: arrives as text. Parameters: (schema, table) three times.
_DESCRIBE = (
    "SELECT 'column', ORDINAL_POSITION, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME,"
    " IS_NULLABLE, GENERATION_EXPRESSION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " UNION ALL SELECT 'index', SEQ_IN_INDEX, INDEX_NAME, COLUMN_NAME, NON_UNIQUE, SUB_PART, NULL, NULL, NULL"
    " FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " UNION ALL SELECT 'table', 0, ENGINE, TABLE_TYPE, TABLE_ROWS, NULL, NULL, NULL, NULL"
    " FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
)
#: A chunk's SELECT failing with these may be a DDL's doing (a column or the table gone, a definition newer than the
#: consistent snapshot): the table's layout is looked at before the error is taken as it is.
_LAYOUT_ERRORS = frozenset({1054, 1146, 1412})


def _chunk_key(layout: TableLayout) -> tuple[str, ...]:
    """The primary key, else the shortest unique key over NOT NULL columns (whole columns, not prefixes)."""
    indexes = layout.index_columns()
    if "PRIMARY" in indexes:
        return tuple(column for column, _, _ in indexes["PRIMARY"])
    nullable = {c.name: c.nullable for c in layout.columns}
    for name in sorted(indexes, key=lambda n: (len(indexes[n]), n)):
        parts = indexes[name]
        if all(unique and sub_part is None and not nullable.get(column, True) for column, unique, sub_part in parts):
            return tuple(column for column, _, _ in parts)
    return ()


class ChunkReader:
    """Reads chunks over its own connection to the source (opened lazily, reopened after an error)."""

    def __init__(self, connect_args: dict[str, Any], method: str, signal: SignalTable | None = None) -> None:
        if method not in METHODS:
            raise SnapshotError(f"snapshot method {method!r} is not one of {', '.join(METHODS)}")
        if method == WATERMARK and signal is None:
            raise SnapshotError("the watermark method needs a signal table")
        self._connect_args = dict(connect_args)
        self.method = method
        self.signal = signal
        self._conn: Any = None
        self._signal_ready = False
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None:
            args = {**self._connect_args, **snapshotrows.connect_kwargs()}
            args.pop("database", None)
            args["autocommit"] = True
            # A source that stops answering mid-read (a frozen host, a dropped network) fails the read instead of
            # holding the snapshot, and the worker waiting on it, for ever.
            args.setdefault("read_timeout", STATEMENT_SECONDS + 10)
            args.setdefault("write_timeout", STATEMENT_SECONDS + 10)
            conn = pymysql.connect(**args)
            with conn.cursor() as cursor:
                for statement in snapshotrows.SESSION_STATEMENTS:
                    cursor.execute(statement)
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                for limit in (
                    f"max_statement_time = {STATEMENT_SECONDS}",
                    f"max_execution_time = {STATEMENT_SECONDS}000",
                ):
                    try:  # MariaDB's name, then MySQL's (milliseconds)
                        cursor.execute(f"SET SESSION {limit}")
                        break
                    except pymysql.err.MySQLError:
                        continue
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    self._conn.close()
                self._conn = None

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._connection().cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    # -- planning ------------------------------------------------------------------------------------------------

    def plan(self, schema: str, table: str) -> TablePlan:
        """The table's columns and chunk key; raises SnapshotError when it has none or cannot be read as needed."""
        with self._lock:
            try:
                return self._plan(schema, table)
            except pymysql.err.MySQLError:
                self._drop()
                raise

    def _plan(self, schema: str, table: str) -> TablePlan:
        layout, estimated = self._describe(schema, table)
        if layout is None:
            raise SnapshotError(f"{schema}.{table} does not exist on the source")
        if layout.table_type.upper() == "VIEW":
            raise SnapshotError(f"{schema}.{table} is a view; snapshot the tables it reads")
        engine = layout.engine
        if self.method == CONSISTENT and engine.lower() not in TRANSACTIONAL_ENGINES:
            raise SnapshotError(
                f"{schema}.{table} uses the {engine or 'unknown'} engine, which has no consistent snapshot; "
                f"use the watermark method ([Snapshot] Method = {WATERMARK}) for it"
            )
        key = _chunk_key(layout)
        if not key:
            raise SnapshotError(
                f"{schema}.{table} has no primary key and no unique key over NOT NULL columns: its rows cannot be "
                "read in chunks or told apart in the stream; add one"
            )
        names = [c.name for c in layout.columns]
        key_columns = [layout.columns[names.index(k)] for k in key]
        for column in key_columns:
            if column.data_type in _UNBOUNDED_KEY_TYPES:
                raise SnapshotError(
                    f"{schema}.{table}: key column {column.name!r} is {column.data_type.upper()}, whose values "
                    "cannot bound chunks exactly (a float's text is not its stored value; ENUM and SET sort by index "
                    "but compare as text); the table needs a primary or unique NOT NULL key of other types"
                )
        return TablePlan(
            schema,
            table,
            layout.columns,
            tuple(key),
            tuple(names.index(k) for k in key),
            engine,
            estimated,
            layout,
        )

    def _describe(self, schema: str, table: str) -> tuple[TableLayout | None, int | None]:
        """The table's layout (None when it does not exist) and its estimated row count, in one statement over the
        reader's connection: inside a chunk's read it shows the definition the read's metadata lock holds."""
        rows = [
            tuple(None if value is None else _text(value) for value in row)
            for row in self._query(_DESCRIBE, (schema, table) * 3)
        ]
        columns = sorted((r for r in rows if r[0] == "column"), key=lambda r: int(r[1] or 0))
        if not columns:
            return None, None
        described = tuple(
            SchemaColumn(
                name=r[2] or "",
                data_type=(r[3] or "").lower(),
                column_type=r[4] or "",
                charset=r[5],
                nullable=r[7] == "YES",
            )
            for r in columns
        )
        indexes = sorted(
            ((r[2] or "", int(r[1] or 0), r[3] or "", r[4] == "0", r[5]) for r in rows if r[0] == "index"),
            key=lambda i: (i[0], i[1]),
        )
        tables = [r for r in rows if r[0] == "table"]
        engine, table_type, estimate = (tables[0][2], tables[0][3], tables[0][4]) if tables else ("", "", None)
        collations = tuple(r[6] for r in columns)
        if has_hidden_system_time(table_type or "", [r[8] for r in columns]):
            # In every row image the binlog carries, and selectable by name, though information_schema lists them not.
            described += SYSTEM_TIME_COLUMNS
            collations += (None,) * len(SYSTEM_TIME_COLUMNS)
        layout = TableLayout(described, collations, tuple(indexes), engine or "", table_type or "")
        return layout, int(estimate) if estimate is not None else None

    def _check_layout(self, plan: TablePlan) -> None:
        """Raises :class:`TableChanged` when the table's layout is not the plan's (a DDL came since it was made)."""
        layout, _ = self._describe(plan.schema, plan.table)
        if layout != plan.layout:
            raise self._changed(plan, layout)

    def _changed(self, plan: TablePlan, layout: TableLayout | None) -> TableChanged:
        """What to do about a DDL on the table: go on in its new plan when that is exact (the rows already queued are
        exact at their own points, and the DDL reaches the client through the stream like any), else fail."""
        name = f"{plan.schema}.{plan.table}"
        ask = "; ask for it again"
        if layout is None:
            return TableChanged(f"{name} changed during the snapshot (it was renamed or dropped){ask}", None)
        what = describe_changes(plan.layout, layout) if plan.layout is not None else "its layout changed"
        try:
            new = self._plan(plan.schema, plan.table)
        except SnapshotError as exc:
            return TableChanged(f"{name} changed during the snapshot ({what}): {exc}{ask}", None)
        assert plan.layout is not None and new.layout is not None
        if new.key != plan.key or any(plan.layout.column(k) != new.layout.column(k) for k in plan.key):
            # The chunks so far were bounded by the old key's order: the rest cannot be bounded by another.
            return TableChanged(
                f"{name} changed during the snapshot ({what}); its chunk key ({', '.join(plan.key)}) is not the "
                f"same, so the chunks read cannot be continued exactly{ask}",
                None,
            )
        return TableChanged(f"{name} changed during the snapshot ({what}); reading on in its new layout", new)

    # -- reading -------------------------------------------------------------------------------------------------

    def read(
        self,
        plan: TablePlan,
        after: Sequence[object] | None,
        limit: int,
        where: str = "",
        marks: tuple[str, str] = ("", ""),
        on_position: Callable[[Position], None] | None = None,
    ) -> Chunk:
        """The next chunk: up to ``limit`` rows with keys above ``after`` (from the first when None). ``marks``: the
        low and high watermarks to write around the read (the watermark method; see :func:`new_mark`).
        ``on_position``: called with the consistent snapshot's position as soon as it is known, before the rows are
        read (the worker holds its stream there until the chunk is in)."""
        with self._lock:
            try:
                if self.method == CONSISTENT:
                    return self._read_consistent(plan, after, limit, where, on_position)
                low, high = marks if marks[0] else (new_mark("low"), new_mark("high"))
                return self._read_between_marks(plan, after, limit, where, low, high)
            except pymysql.err.MySQLError:
                self._drop()
                raise

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # the connection is already broken
                conn.close()

    def _select(
        self, plan: TablePlan, after: Sequence[object] | None, limit: int, where: str
    ) -> tuple[str, list[object]]:
        conditions: list[str] = []
        params: list[object] = []
        if where:
            conditions.append("(" + where.replace("%", "%%") + ")")  # the driver formats the statement with params
        if after is not None:
            conditions.append(_after_key(plan.key))
            params.extend(_after_key_params(_bound_values(plan, after)))
        sql = (
            f"SELECT {', '.join(snapshotrows.select_expressions(plan.columns))}"
            f" FROM {quote_name(plan.schema)}.{quote_name(plan.table)}"
            + (f" WHERE {' AND '.join(conditions)}" if conditions else "")
            + f" ORDER BY {', '.join(quote_name(k) for k in plan.key)} LIMIT {int(limit)}"
        )
        return sql, params

    def _fetch(self, sql: str, params: Sequence[object], limit: int) -> tuple[list[tuple[Any, ...]], bool]:
        """The chunk's rows, streamed, up to CHUNK_BYTES of values (one row at least); and whether it ended the table.

        A chunk of rows of tens of MB each would otherwise hold ChunkRows times that in memory: the rows past the
        budget are left to the next chunk (the unread rest of the result is discarded as it arrives)."""
        raw: list[tuple[Any, ...]] = []
        size = 0
        with self._connection().cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(sql, params)
            for row in cursor:
                raw.append(row)
                size += sum(len(value) if isinstance(value, bytes | str) else 8 for value in row)
                if size >= CHUNK_BYTES:
                    return raw, False
        return raw, len(raw) < limit

    def _chunk(self, plan: TablePlan, raw: list[tuple[Any, ...]], complete: bool) -> Chunk:
        # The next chunk's bound is the last key as clients get it: text for numbers, dates and strings (compared
        # as the column sorts), bytes for binary strings and UUID/INET (the server converts them back).
        convert = snapshotrows.row_converter(plan.columns)
        rows = [convert(row) for row in raw]
        indexes = plan.key_indexes
        keys: list[tuple[object, ...]] = [tuple(row[i] for i in indexes) for row in rows]
        last_key = keys[-1] if keys else None
        return Chunk(plan, rows, last_key, complete=complete, keys=keys)

    def _read_consistent(
        self,
        plan: TablePlan,
        after: Sequence[object] | None,
        limit: int,
        where: str,
        on_position: Callable[[Position], None] | None,
    ) -> Chunk:
        # The layout is checked before the snapshot starts and again after the SELECT, whose metadata lock holds the
        # definition until COMMIT. The same both times: no DDL ended between them, so the stream's layout at the
        # snapshot's position (which lies between) is the plan's. (A DDL ends, and is written to the binlog, under an
        # exclusive metadata lock: neither check can see its new definition before its binlog event is written.)
        self._check_layout(plan)
        conn = self._connection()
        sql, params = self._select(plan, after, limit, where)
        with conn.cursor() as cursor:
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
                status = {_text(name).lower(): value for name, value in cursor.fetchall()}
                file = status.get("binlog_snapshot_file")
                pos = status.get("binlog_snapshot_position")
                if not file or pos is None:
                    raise SnapshotError(
                        "the source reports no binlog_snapshot_file/position (MySQL has none): use the watermark "
                        f"method ([Snapshot] Method = {WATERMARK})"
                    )
                position = Position(_text(file), int(_text(pos)))
                if on_position is not None:
                    on_position(position)
                raw, complete = self._fetch_checked(plan, sql, params, limit)
                self._check_layout(plan)
            finally:
                cursor.execute("COMMIT")
        chunk = self._chunk(plan, raw, complete)
        chunk.position = position
        return chunk

    def _fetch_checked(
        self, plan: TablePlan, sql: str, params: Sequence[object], limit: int
    ) -> tuple[list[tuple[Any, ...]], bool]:
        """``_fetch``, with an error a DDL may have caused (a column or the table gone) told as the table's change."""
        try:
            return self._fetch(sql, params, limit)
        except pymysql.err.MySQLError as error:
            if not (error.args and error.args[0] in _LAYOUT_ERRORS):
                raise
            layout, _ = self._describe(plan.schema, plan.table)
            if layout == plan.layout:
                raise  # not a change of the table: the error is the error (a WHERE naming an unknown column)
            raise self._changed(plan, layout) from error

    def _read_between_marks(
        self, plan: TablePlan, after: Sequence[object] | None, limit: int, where: str, low: str, high: str
    ) -> Chunk:
        # The chunk goes into the stream at its high mark, so its rows must be in the layout the stream has there:
        # the layout checked before the SELECT and again after the high mark is the same, so no DDL ended between.
        self._check_layout(plan)
        self._write_mark(low)
        sql, params = self._select(plan, after, limit, where)
        raw, complete = self._fetch_checked(plan, sql, params, limit)
        self._write_mark(high)
        self._check_layout(plan)
        chunk = self._chunk(plan, raw, complete)
        chunk.low_mark, chunk.high_mark = low, high
        return chunk

    def _write_mark(self, mark: str) -> None:
        assert self.signal is not None
        conn = self._connection()
        with conn.cursor() as cursor:
            if not self._signal_ready:
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote_name(self.signal.schema)}")
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.signal.qualified} ("
                    f" id BIGINT AUTO_INCREMENT PRIMARY KEY, {MARK_COLUMN} VARCHAR(64) NOT NULL,"
                    " written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
                )
                self._signal_ready = True
            cursor.execute(f"INSERT INTO {self.signal.qualified} ({MARK_COLUMN}) VALUES (%s)", (mark,))
            # The table holds the last few marks only: the worker reads them from the stream, not from here.
            if mark.startswith("high:"):
                cursor.execute("SELECT LAST_INSERT_ID()")
                newest = int(_text(cursor.fetchone()[0]))
                if newest % 100 == 0:
                    cursor.execute(f"DELETE FROM {self.signal.qualified} WHERE id < %s", (newest - 100,))


def new_mark(kind: str) -> str:
    return f"{kind}:{uuid.uuid4().hex}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
