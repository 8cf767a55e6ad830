"""The schema history in the store: binlog.schemahistory's ``HistoryStore`` over SchemaVersion and SchemaBaseline.

Versions are saved by the worker inside the store transaction of the batch whose DDL made them (``Ingestor.apply``),
so a kill at any instant leaves history and checkpoint in agreement; so are the marks of the tables it doubts (a
version's ``mark``), so that a restart still gives their rows positional names until they are re-read. A first start
takes a baseline from the source's information_schema and records the position it belongs to; ``manage.py
rebaseline`` takes a new one, for the whole source or for some tables (after an incident: a DDL the history could
not read, a change made with sql_log_bin=0). A running worker keeps the history it loaded: restart it after a
re-baseline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.db.models import Q

from binlog.position import Position
from binlog.schemahistory import (
    REREAD_STATEMENT,
    SchemaHistory,
    Version,
    baseline_from_server,
    pymysql_query,
    read_current,
    server_reread,
)
from binlog.schemamodel import Column, SchemaModel, TableDef, labels_may_be_mangled
from relay.models import SchemaBaseline, SchemaVersion

log = logging.getLogger("relay.schemahistory")


def _row(source: str, version: Version) -> SchemaVersion:
    definition = version.definition
    return SchemaVersion(
        source=source,
        schema_name=version.schema,
        table_name=version.table,
        binlog_file=version.position.file,
        binlog_pos=version.position.pos,
        gtid=version.position.gtid,
        exists=definition is not None,
        # A sixth item only for a column whose labels are uncertain, a seventh only for a hidden one (rows stored
        # before them have five, or six).
        columns=[_column_row(c) for c in definition.columns] if definition is not None else [],
        primary_key=list(definition.primary_key) if definition is not None else [],
        charset=definition.charset if definition is not None else "",
        statement=version.statement,
        baseline=version.baseline,
        mark=version.mark,
    )


def _column_row(c: Column) -> list[object]:
    extra: list[object] = [c.labels_uncertain, True] if c.hidden else [True] if c.labels_uncertain else []
    return [c.name, c.data_type, c.column_type, c.charset, c.nullable, *extra]


def _version(row: SchemaVersion) -> Version:
    definition = None
    if row.exists:
        # A version read from information_schema before its columns' uncertain labels were recorded: tell them again
        # (as read_model would, with the utf8mb3 information_schema of the servers that mangle them).
        from_server = row.baseline or row.statement.startswith(REREAD_STATEMENT)
        columns = []
        for c in row.columns:
            column = Column(
                c[0], c[1], c[2], c[3], bool(c[4]), len(c) > 5 and bool(c[5]), hidden=len(c) > 6 and bool(c[6])
            )
            if len(c) <= 5 and from_server and labels_may_be_mangled(column, "utf8mb3"):
                column = replace(column, labels_uncertain=True)
            columns.append(column)
        definition = TableDef(tuple(columns), tuple(row.primary_key), row.charset or "utf8mb4")
    return Version(
        row.schema_name,
        row.table_name,
        Position(row.binlog_file, row.binlog_pos, row.gtid),
        definition,
        row.statement,
        row.baseline,
        row.mark,
    )


class StoreHistory:
    """``HistoryStore`` of one source in the relay's store."""

    def __init__(self, source: str) -> None:
        self.source = source

    def load(self) -> list[Version]:
        return [_version(row) for row in SchemaVersion.objects.filter(source=self.source)]

    def save(self, versions: Sequence[Version]) -> None:
        """Call inside the batch's transaction. A version replaces the same table's versions at or after it."""
        for version in versions:
            position = version.position
            SchemaVersion.objects.filter(
                source=self.source,
                schema_name=version.schema,
                table_name=version.table,
                baseline=False,
            ).filter(
                Q(binlog_file__gt=position.file) | Q(binlog_file=position.file, binlog_pos__gte=position.pos)
            ).delete()
        SchemaVersion.objects.bulk_create([_row(self.source, v) for v in versions])

    def baseline(self) -> SchemaBaseline | None:
        return SchemaBaseline.objects.filter(source=self.source).first()

    def save_baseline(self, history: SchemaHistory, model: SchemaModel, position: Position) -> None:
        """Replaces the whole history of the source with ``model`` as of ``position``."""
        with transaction.atomic():
            SchemaVersion.objects.filter(source=self.source).delete()
            versions = history.set_baseline(model, position)
            SchemaVersion.objects.bulk_create([_row(self.source, v) for v in versions])
            SchemaBaseline.objects.update_or_create(
                source=self.source,
                defaults={
                    "binlog_file": position.file,
                    "binlog_pos": position.pos,
                    "gtid": position.gtid,
                    "lower_case_table_names": model.lower_case_table_names,
                    "server_charset": model.server_charset,
                    "databases": dict(model.databases),
                },
            )


def open_history(
    source: str,
    connect_args: dict[str, Any],
    start: Position | None,
    *,
    on_problem: Callable[[str], None] | None = None,
) -> SchemaHistory:
    """The source's history from the store; a baseline from information_schema first if there is none."""
    store = StoreHistory(source)
    base = store.baseline()
    if base is None:
        return rebaseline(source, connect_args, on_problem=on_problem)
    history = SchemaHistory(
        store.load(),
        lower_case_table_names=base.lower_case_table_names,
        server_charset=base.server_charset,
        databases=dict(base.databases),
        on_problem=on_problem,
        reread=server_reread(connect_args),
    )
    if start is not None:
        history.rewind(start)  # says so in the log when the start is older than the baseline
    return history


def rebaseline(
    source: str, connect_args: dict[str, Any], *, on_problem: Callable[[str], None] | None = None
) -> SchemaHistory:
    """A new baseline: the schema now, and the source position it belongs to, replace the stored history."""
    query, close = pymysql_query(connect_args)
    try:
        model, position = baseline_from_server(query)
    finally:
        close()
    history = SchemaHistory(on_problem=on_problem, reread=server_reread(connect_args))
    StoreHistory(source).save_baseline(history, model, position)
    log.info("schema history baseline for %s: %d tables at %s", source, len(model.tables), position)
    return history


def rebaseline_tables(source: str, connect_args: dict[str, Any], tables: Sequence[tuple[str, str]]) -> list[Version]:
    """A new version of each of ``tables``, as information_schema shows it now, valid from the source's current
    position (the versions before it stay: a replay of older events still gets the names of their own time).

    Raises ``LookupError`` when the source has no baseline yet (``rebaseline`` makes one), ``RuntimeError`` when
    the source kept writing during five reads in a row (no read provably belongs to one position).
    """
    if StoreHistory(source).baseline() is None:
        raise LookupError(f"no schema history for {source} yet: re-baseline the whole source first")
    query, close = pymysql_query(connect_args)
    try:
        for _ in range(5):
            read = read_current(query, sorted({schema for schema, _ in tables}))
            if read is not None:
                break
        else:
            raise RuntimeError("the source kept writing during five reads of information_schema; try again")
    finally:
        close()
    model, position = read
    versions = []
    for schema, table in tables:
        definition = model.get(schema, table)
        stored = model.stored_name(schema, table) if definition is not None else (schema, table)
        versions.append(Version(*stored, position, definition, f"{REREAD_STATEMENT} (manage.py rebaseline)"))
    with transaction.atomic():
        StoreHistory(source).save(versions)
    for version in versions:
        log.info(
            "schema history of %s: %s.%s re-read at %s: %s",
            source,
            version.schema,
            version.table,
            position,
            version.definition.layout() if version.definition is not None else "(no such table)",
        )
    return versions
