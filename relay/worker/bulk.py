"""Fast multi-row writes for the worker: COPY on PostgreSQL, executemany on SQLite, and id allocation."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from django.db import connection

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


def insert_rows(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, kinds: str | None = None) -> None:
    """Inserts many rows into ``table`` in the current transaction.

    ``kinds`` (one letter per column: ``i`` int, ``s`` str, none of them NULL) lets PostgreSQL's COPY text be built
    without per-field type checks: the worker's hot path.
    """
    if not rows:
        return
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            buffer = io.StringIO()
            if kinds is not None:
                buffer.writelines(map(_line_formatter(kinds), rows))
            else:
                buffer.writelines("\t".join(map(_copy_field, row)) + "\n" for row in rows)
            buffer.seek(0)
            cursor.cursor.copy_expert(f"COPY {connection.ops.quote_name(table)} ({quoted}) FROM STDIN", buffer)
        else:
            marks = ", ".join("%s" for _ in columns)
            cursor.executemany(f"INSERT INTO {connection.ops.quote_name(table)} ({quoted}) VALUES ({marks})", rows)


#: How often allocate_ids asks again when concurrent writers interleaved with its reservation.
ALLOCATE_ATTEMPTS = 5

_sequences: dict[tuple[str, str], str] = {}  # (database alias, table) -> the sequence of its id column


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


def allocate_ids(table: str, count: int) -> int:
    """Reserves ``count`` consecutive primary keys of ``table``; returns the first.

    Rows then go in with explicit ids (COPY cannot return generated ones). On SQLite the write transaction already
    excludes every other writer. On PostgreSQL one statement takes ``count`` values of the table's sequence and
    returns only their bounds: the values are this transaction's whatever else happens (a sequence never hands out a
    value twice), and they are ``count`` distinct values, so when the bounds are ``count - 1`` apart they are exactly
    that range. A concurrent writer's ``nextval`` can interleave with them; then they are left unused (a gap, as a
    rolled-back insert leaves) and the statement runs again. (``setval`` to the end of a range is not safe: a
    concurrent ``nextval`` between reading the sequence and setting it would get a value of the range too.)
    """
    if count <= 0:
        raise ValueError("count must be positive")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            sequence = _sequence(table)
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
        cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
        row = cursor.fetchone()
        cursor.execute(f"SELECT MAX(id) FROM {connection.ops.quote_name(table)}")
        top = max(row[0] if row else 0, cursor.fetchone()[0] or 0)
        return top + 1


def upsert_rows(sql: str, rows: Sequence[Sequence[Any]], *, conflict: str, page: int = 100) -> None:
    """``sql`` (``INSERT INTO t (a, b) VALUES``) with many rows in one statement per ``page`` rows, then ``conflict``
    (an ``ON CONFLICT`` clause): one round trip where executemany makes one per row. No two rows may share the
    conflict key (PostgreSQL refuses to update a row twice in one statement)."""
    if not rows:
        return
    width = len(rows[0])
    marks = "(" + ", ".join("%s" for _ in range(width)) + ")"
    with connection.cursor() as cursor:
        for offset in range(0, len(rows), page):
            chunk = rows[offset : offset + page]
            cursor.execute(
                f"{sql} {', '.join(marks for _ in chunk)} {conflict}",
                [value for row in chunk for value in row],
            )
