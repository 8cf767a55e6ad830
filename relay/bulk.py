"""Fast multi-row writes for the worker: COPY on PostgreSQL, executemany on SQLite, and id allocation."""

from __future__ import annotations

import io
from collections.abc import Sequence
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


def insert_rows(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, integers: bool = False) -> None:
    """Inserts many rows into ``table`` in the current transaction.

    ``integers`` says every value is a plain int, which skips the per-field escaping (queue entries: the hot path).
    """
    if not rows:
        return
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            buffer = io.StringIO()
            if integers:
                line = "\t".join("%d" for _ in columns) + "\n"
                buffer.writelines(line % row for row in rows)
            else:
                buffer.writelines("\t".join(map(_copy_field, row)) + "\n" for row in rows)
            buffer.seek(0)
            cursor.cursor.copy_expert(f"COPY {connection.ops.quote_name(table)} ({quoted}) FROM STDIN", buffer)
        else:
            marks = ", ".join("%s" for _ in columns)
            cursor.executemany(f"INSERT INTO {connection.ops.quote_name(table)} ({quoted}) VALUES ({marks})", rows)


def allocate_ids(table: str, count: int) -> int:
    """Reserves ``count`` consecutive primary keys of ``table``; returns the first.

    Rows then go in with explicit ids (COPY cannot return generated ones). On SQLite the write transaction already
    excludes every other writer; on PostgreSQL the sequence is advanced by ``count`` in one call.
    """
    if count <= 0:
        raise ValueError("count must be positive")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            sequence = cursor.fetchone()[0]
            # setval/nextval in one statement would race with nothing (one worker), but keep it atomic anyway.
            cursor.execute("SELECT nextval(%s) FROM generate_series(1, %s)", [sequence, count])
            ids = [row[0] for row in cursor.fetchall()]
            if ids[-1] - ids[0] != count - 1:
                raise RuntimeError(f"{table}: the id sequence did not hand out {count} consecutive values")
            return ids[0]
        cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
        row = cursor.fetchone()
        cursor.execute(f"SELECT MAX(id) FROM {connection.ops.quote_name(table)}")
        top = max(row[0] if row else 0, cursor.fetchone()[0] or 0)
        return top + 1
