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
from binlog.schema import InformationSchemaProvider, SchemaColumn

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

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


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
        info = InformationSchemaProvider({**self._connect_args, "charset": "utf8mb4"})
        try:
            described = info.table(schema, table)
        finally:
            info.close()
        if described is None:
            raise SnapshotError(f"{schema}.{table} does not exist on the source")
        rows = self._query(
            "SELECT ENGINE, TABLE_ROWS, TABLE_TYPE FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema, table),
        )
        engine = _text(rows[0][0] or "") if rows else ""
        estimated = int(rows[0][1]) if rows and rows[0][1] is not None else None
        if rows and _text(rows[0][2]).upper() == "VIEW":
            raise SnapshotError(f"{schema}.{table} is a view; snapshot the tables it reads")
        if self.method == CONSISTENT and engine.lower() not in TRANSACTIONAL_ENGINES:
            raise SnapshotError(
                f"{schema}.{table} uses the {engine or 'unknown'} engine, which has no consistent snapshot; "
                f"use the watermark method ([Snapshot] Method = {WATERMARK}) for it"
            )
        key = described.primary_key or self._unique_key(schema, table, described.columns)
        if not key:
            raise SnapshotError(
                f"{schema}.{table} has no primary key and no unique key over NOT NULL columns: its rows cannot be "
                "read in chunks or told apart in the stream; add one"
            )
        names = [c.name for c in described.columns]
        key_columns = [described.columns[names.index(k)] for k in key]
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
            described.columns,
            tuple(key),
            tuple(names.index(k) for k in key),
            engine,
            estimated,
        )

    def _unique_key(self, schema: str, table: str, columns: Sequence[SchemaColumn]) -> tuple[str, ...]:
        rows = self._query(
            "SELECT INDEX_NAME, COLUMN_NAME, NON_UNIQUE, SUB_PART FROM information_schema.STATISTICS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        nullable = {c.name: c.nullable for c in columns}
        indexes: dict[str, list[str]] = {}
        usable: dict[str, bool] = {}
        for index_name, column, non_unique, sub_part in rows:
            name, column_name = _text(index_name), _text(column)
            indexes.setdefault(name, []).append(column_name)
            ok = not int(non_unique) and sub_part is None and not nullable.get(column_name, True)
            usable[name] = usable.get(name, True) and ok
        for name in sorted(indexes, key=lambda n: (len(indexes[n]), n)):
            if usable[name]:
                return tuple(indexes[name])
        return ()

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
                raw, complete = self._fetch(sql, params, limit)
            finally:
                cursor.execute("COMMIT")
        chunk = self._chunk(plan, raw, complete)
        chunk.position = position
        return chunk

    def _read_between_marks(
        self, plan: TablePlan, after: Sequence[object] | None, limit: int, where: str, low: str, high: str
    ) -> Chunk:
        self._write_mark(low)
        sql, params = self._select(plan, after, limit, where)
        raw, complete = self._fetch(sql, params, limit)
        self._write_mark(high)
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
