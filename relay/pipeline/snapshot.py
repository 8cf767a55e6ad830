"""Schema snapshots: the column names a binlog without row metadata lacks, taken once and broadcast to the tasks.

A snapshot is plain JSON (so it can be saved, shipped and broadcast)::

    {"version": 1, "tables": [{"schema": "shop", "table": "orders", "primary_key": ["id"],
      "columns": [{"name": "id", "data_type": "int", "column_type": "int(10) unsigned",
                   "charset": null, "nullable": false}, ...]}, ...]}

It describes the tables as they are when it is taken. An archived event whose TABLE_MAP has another column count
(the table was altered since) gets the ``@1, @2...`` names, as ``binlog/`` does when a look-up finds no match.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SNAPSHOT_VERSION = 1
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


class SnapshotProvider:
    """A ``binlog.schema.SchemaProvider`` from a snapshot; nothing refreshes, so ``invalidate`` does nothing."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self._tables = {(t["schema"], t["table"]): t for t in snapshot.get("tables", ())}
        self._built: dict[tuple[str, str], Any] = {}

    def table(self, schema: str, table: str) -> Any:
        key = (schema, table)
        if key in self._built:
            return self._built[key]
        from binlog.schema import SchemaColumn, SchemaTable

        found = self._tables.get(key)
        result = None
        if found is not None:
            result = SchemaTable(
                tuple(
                    SchemaColumn(
                        name=c["name"],
                        data_type=c.get("data_type", "").lower(),
                        column_type=c.get("column_type", ""),
                        charset=c.get("charset"),
                        nullable=bool(c.get("nullable", True)),
                    )
                    for c in found["columns"]
                ),
                tuple(found.get("primary_key", ())),
            )
        self._built[key] = result
        return result

    def invalidate(self, schema: str | None = None, table: str | None = None) -> None:
        return None


def snapshot_from_rows(columns: Iterable[Sequence[Any]], keys: Iterable[Sequence[Any]] = ()) -> dict[str, Any]:
    """A snapshot from information_schema rows.

    ``columns``: (schema, table, name, data_type, column_type, charset, is_nullable) in ordinal order;
    ``keys``: (schema, table, column) of PRIMARY KEY columns in index order.
    """
    tables: dict[tuple[str, str], dict[str, Any]] = {}
    for schema, table, name, data_type, column_type, charset, nullable in columns:
        entry = tables.setdefault(
            (_text(schema), _text(table)),
            {"schema": _text(schema), "table": _text(table), "columns": [], "primary_key": []},
        )
        entry["columns"].append(
            {
                "name": _text(name),
                "data_type": _text(data_type).lower(),
                "column_type": _text(column_type),
                "charset": _text(charset) if charset is not None else None,
                "nullable": nullable in (True, "YES", b"YES"),
            }
        )
    for schema, table, column in keys:
        keyed = tables.get((_text(schema), _text(table)))
        if keyed is not None:
            keyed["primary_key"].append(_text(column))
    return {"version": SNAPSHOT_VERSION, "tables": [tables[key] for key in sorted(tables)]}


def snapshot_from_source(connect_args: dict[str, Any]) -> dict[str, Any]:
    """Reads every user table's columns from the source's information_schema (the [MySQL] connection)."""
    import pymysql

    excluded = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    with pymysql.connect(**connect_args) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE"
            f" FROM information_schema.COLUMNS WHERE TABLE_SCHEMA NOT IN ({excluded})"
            " ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
            SYSTEM_SCHEMAS,
        )
        columns = list(cur.fetchall())
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS"
            f" WHERE INDEX_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN ({excluded})"
            " ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX",
            SYSTEM_SCHEMAS,
        )
        keys = list(cur.fetchall())
    return snapshot_from_rows(columns, keys)


def snapshot_from_store() -> dict[str, Any]:
    """The tables the worker has seen (SchemaTable/SchemaColumn in the store), for when the source is out of reach."""
    from relay.models import SchemaColumn, SchemaTable

    rows = []
    ordered = SchemaColumn.objects.select_related("table").order_by(
        "table__schema_name", "table__table_name", "ordinal"
    )
    for column in ordered:
        type_name = column.type_name or ""
        rows.append(
            (
                column.table.schema_name,
                column.table.table_name,
                column.name,
                type_name.split("(")[0].split(" ")[0],
                type_name,
                column.charset or None,
                column.nullable,
            )
        )
    snapshot = snapshot_from_rows(rows)
    keys = {}
    for table in SchemaTable.objects.exclude(primary_key=""):
        keys[(table.schema_name, table.table_name)] = [name for name in table.primary_key.split(",") if name]
    for entry in snapshot["tables"]:
        entry["primary_key"] = keys.get((entry["schema"], entry["table"]), [])
    return snapshot


def load_snapshot(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"schema snapshot {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
        raise ValueError(f"schema snapshot {path}: not a snapshot (no 'tables' list)")
    return data


def save_snapshot(snapshot: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(snapshot, indent=1, ensure_ascii=False), encoding="utf-8")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
