"""Fast multi-row writes for the worker: COPY on PostgreSQL, executemany on SQLite, id allocation, and the batch's
small writes sent in one round trip."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model, QuerySet
from django.db.models.sql import UpdateQuery

from binlog.native import load_compiled

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_field(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float):
        return str(value)
    return str(value).translate(_COPY_ESCAPES)


def _escape(text: str) -> str:
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_ESCAPES)
    return text


@lru_cache(maxsize=64)
def _line_formatter(kinds: str) -> Callable[[Sequence[Any]], str]:
    """One COPY line per row, for rows whose columns are ``kinds``: ``i`` a plain int, ``s`` a non-NULL str.

    Generated once per layout, so a row costs one call instead of one per field.
    """
    fields = "\\t".join(f"{{r[{n}]}}" if kind == "i" else f"{{e(r[{n}])}}" for n, kind in enumerate(kinds))
    # Safe: the source is built from the letters of ``kinds`` and column numbers only, never from data.
    return eval(f'lambda r, e=_escape: f"{fields}\\n"', {"_escape": _escape})


#: relay/worker/_copytext.c: the COPY text of rows of plain ints and strs in one call (None: the Python formatter).
_compiled = load_compiled("relay.worker._copytext", Path(__file__).with_name("_copytext.c"))


def compiled_copy_text() -> ModuleType | None:
    """relay/worker/_copytext.c where it is in use, else None (the Python line formatter)."""
    return _compiled


#: Rows up to which ``insert_rows`` given the batch's ``Statements`` adds one INSERT to them on PostgreSQL instead of
#: running a COPY of its own: for a few short rows (a batch's queue runs, four numbers each) the INSERT riding in the
#: batch's one round trip is cheaper; long text rows are cheaper by COPY even when few.
FEW_ROWS = 50


def insert_rows(
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    kinds: str | None = None,
    writes: Statements | None = None,
) -> None:
    """Inserts many rows into ``table`` in the current transaction.

    ``kinds`` (one letter per column: ``i`` int, ``s`` str, none of them NULL) lets PostgreSQL's COPY text be built
    without per-field type checks: the worker's hot path. ``writes``: the batch's small writes, which take the rows
    when they are few (``FEW_ROWS``) on PostgreSQL; they are then written when ``writes`` is sent.
    """
    if not rows:
        return
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    name = connection.ops.quote_name(table)
    if connection.vendor != "postgresql":
        marks = ", ".join("%s" for _ in columns)
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {name} ({quoted}) VALUES ({marks})", rows)
    elif writes is not None and len(rows) <= FEW_ROWS:
        marks = "(" + ", ".join("%s" for _ in columns) + ")"
        writes.add(
            f"INSERT INTO {name} ({quoted}) VALUES {', '.join(marks for _ in rows)}",
            [value for row in rows for value in row],
        )
    else:
        text: str | bytes | None = None
        if kinds is not None:
            text = _compiled.copy_text(rows, kinds) if _compiled is not None else None
            if text is None:  # not built, or a field that is not a plain int or str: the Python formatter
                text = "".join(map(_line_formatter(kinds), rows))
        else:
            text = "".join("\t".join(map(_copy_field, row)) + "\n" for row in rows)
        with connection.cursor() as cursor:
            cursor.cursor.copy_expert(f"COPY {name} ({quoted}) FROM STDIN", _TextReader(text), size=COPY_CHUNK)


#: Characters psycopg2 asks of a COPY's text at a time.
COPY_CHUNK = 1 << 16


class _TextReader:
    """The file object COPY reads its text (a str, or its UTF-8 bytes) from: slices of the text as it is. An
    io.StringIO would first copy the text into a buffer of 4 bytes a character: 4 times a large row's record again,
    at the worker's peak memory."""

    __slots__ = ("_at", "_text")

    def __init__(self, text: str | bytes) -> None:
        self._text = text
        self._at = 0

    def read(self, size: int = -1) -> str | bytes:
        at = self._at
        end = len(self._text) if size < 0 else min(at + size, len(self._text))
        self._at = end
        return self._text[at:end]


#: How often a reservation of ids is asked again when concurrent writers interleaved with it.
ALLOCATE_ATTEMPTS = 5

#: Ids reserved at a time on PostgreSQL (more when one call asks for more), so a small batch reserves none itself.
ID_RESERVE = 1000

_sequences: dict[tuple[str, str], str] = {}  # (database alias, table) -> the sequence of its id column
_reserves: dict[tuple[str, str], tuple[int, int]] = {}  # (database alias, table) -> (next id, end) reserved


def _sequence(table: str) -> str:
    key = (connection.alias, table)
    name = _sequences.get(key)
    if name is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            name = cursor.fetchone()[0]
        if name is None:
            raise RuntimeError(f"{table}: its id column has no sequence")
        _sequences[key] = name
    return name


def drop_reserved_ids() -> None:
    """Forgets the ranges this process reserved: called when a worker becomes the active one.

    The store's garbage collector counts on a change's id being above every id committed before it (relay/store/
    gc.py). A range reserved in an earlier active term lies below the ids another worker took meanwhile (after a
    takeover from this process, frozen, or cut off from the store): used now, its changes could be collected as
    soon as they are committed. A fresh range comes after every id the sequence has handed out.
    """
    _reserves.clear()


def allocate_ids(table: str, count: int) -> int:
    """Reserves ``count`` consecutive primary keys of ``table``; returns the first.

    Rows then go in with explicit ids (COPY cannot return generated ones). On SQLite the write transaction already
    excludes every other writer. On PostgreSQL the ids come from a range of the table's sequence this process
    reserved (``ID_RESERVE`` at a time): a sequence never hands out a value twice, whatever happens to the
    transaction that took it, so the range stays this process's across transactions, and its ids go up from one
    call to the next as the sequence's do, for as long as the process stays the active worker
    (:func:`drop_reserved_ids`). What a process leaves unused is a gap, as a rolled-back insert leaves.
    """
    if count <= 0:
        raise ValueError("count must be positive")
    if connection.vendor == "postgresql":
        key = (connection.alias, table)
        following, end = _reserves.get(key, (0, 0))
        if end - following < count:
            size = max(count, ID_RESERVE)
            following = _reserve_range(table, size)
            end = following + size
        _reserves[key] = (following + count, end)
        return following
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
        row = cursor.fetchone()
        cursor.execute(f"SELECT MAX(id) FROM {connection.ops.quote_name(table)}")
        top = max(row[0] if row else 0, cursor.fetchone()[0] or 0)
        return top + 1


def _reserve_range(table: str, count: int) -> int:
    """Takes ``count`` consecutive values of the table's sequence; returns the first.

    One statement takes ``count`` values and returns only their bounds: they are ``count`` distinct values, so when
    the bounds are ``count - 1`` apart they are exactly that range. A concurrent writer's ``nextval`` can interleave
    with them; then they are left unused and the statement runs again. (``setval`` to the end of a range is not
    safe: a concurrent ``nextval`` between reading the sequence and setting it would get a value of the range too.)
    """
    sequence = _sequence(table)
    with connection.cursor() as cursor:
        for _ in range(ALLOCATE_ATTEMPTS):
            cursor.execute(
                "SELECT min(v), max(v) FROM (SELECT nextval(%s::regclass) AS v FROM generate_series(1, %s)) AS s",
                [sequence, count],
            )
            low, high = cursor.fetchone()
            if high - low == count - 1:
                return int(low)
    raise RuntimeError(
        f"{table}: the id sequence did not hand out {count} consecutive values in {ALLOCATE_ATTEMPTS} attempts"
    )


def upsert_statements(
    sql: str, rows: Sequence[Sequence[Any]], *, conflict: str, page: int = 100
) -> list[tuple[str, list[Any]]]:
    """``sql`` (``INSERT INTO t (a, b) VALUES``) with many rows in one statement per ``page`` rows, then ``conflict``
    (an ``ON CONFLICT`` clause): one round trip where executemany makes one per row. No two rows may share the
    conflict key (PostgreSQL refuses to update a row twice in one statement)."""
    if not rows:
        return []
    width = len(rows[0])
    marks = "(" + ", ".join("%s" for _ in range(width)) + ")"
    statements = []
    for offset in range(0, len(rows), page):
        chunk = rows[offset : offset + page]
        statements.append(
            (f"{sql} {', '.join(marks for _ in chunk)} {conflict}", [value for row in chunk for value in row])
        )
    return statements


def upsert_rows(sql: str, rows: Sequence[Sequence[Any]], *, conflict: str, page: int = 100) -> None:
    """Runs ``upsert_statements`` now."""
    statements = Statements()
    statements.extend(upsert_statements(sql, rows, conflict=conflict, page=page))
    statements.send()


class Added(int):
    """In ``Statements.update_row``: a number added to the column's value (``column = column + n``)."""


class Statements:
    """Writes whose results nobody reads, gathered while a batch is built and sent together at its end.

    On PostgreSQL they go as one string of statements joined by ``;``, which the server runs in order in the
    caller's transaction: one round trip instead of one each (the fixed cost of a small batch is mostly round trips).
    On SQLite, in process, there is nothing to save, and its driver runs one statement per call: one call each.
    Every statement is in the driver's parameter style (``%s``, a literal ``%`` written ``%%``), since their
    parameters are bound together.
    """

    def __init__(self) -> None:
        self._statements: list[tuple[str, Sequence[Any]]] = []

    def __len__(self) -> int:
        return len(self._statements)

    def add(self, sql: str, params: Sequence[Any]) -> None:
        self._statements.append((sql, params))

    def extend(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        self._statements.extend(statements)

    def update_row(self, model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """``model.objects.filter(**where).update(**values)`` for plain values (each converted as its field converts
        it) and ``Added`` numbers, written directly: compiling the ORM's query costs more than sending it here."""
        quote = connection.ops.quote_name
        assignments, conditions, params = [], [], []
        for name, value in values.items():
            field = cast(Field, model._meta.get_field(name))
            column = quote(cast(str, field.column))
            if isinstance(value, Added):
                assignments.append(f"{column} = {column} + %s")
                params.append(int(value))
            else:
                assignments.append(f"{column} = %s")
                params.append(field.get_db_prep_save(value, connection))
        for name, value in where.items():
            field = cast(Field, model._meta.get_field(name))
            conditions.append(f"{quote(cast(str, field.column))} = %s")
            params.append(field.get_db_prep_save(value, connection))
        self.add(
            f"UPDATE {quote(model._meta.db_table)} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}",
            params,
        )

    def update(self, queryset: QuerySet[Any], **values: Any) -> None:
        """``queryset.update(**values)``, compiled by Django (any filter, any expression) and sent later."""
        query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
        query.add_update_values(values)
        sql, params = query.get_compiler(queryset.db).as_sql()
        self.add(sql, params)

    def send(self) -> None:
        statements, self._statements = self._statements, []
        if not statements:
            return
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    ";\n".join(sql for sql, _ in statements), [value for _, params in statements for value in params]
                )
            else:
                for sql, params in statements:
                    cursor.execute(sql, params)
