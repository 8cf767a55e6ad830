"""The schema page's query: every table seen in the stream with the columns of its latest layout, searched and
paginated (three queries per page: the tables, their columns, and their versions in the schema history, each with the
binlog position it began at)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Prefetch, Value
from django.db.models.functions import Concat

from relay.models import SchemaColumn, SchemaTable, SchemaVersion

PER_PAGE = 50


@dataclass
class SchemaPage:
    tables: list[SchemaTable]  # each with .columns prefetched, in ordinal order
    count: int
    page: int
    pages: int
    query: str
    versions: dict[tuple[str, str], list[SchemaVersion]] = field(default_factory=dict)  # oldest first

    @property
    def with_versions(self) -> list[tuple[SchemaTable, list[SchemaVersion]]]:
        return [(table, self.versions.get((table.schema_name, table.table_name), [])) for table in self.tables]


def schema_page(*, query: str = "", page: int = 1, per_page: int = PER_PAGE) -> SchemaPage:
    tables = SchemaTable.objects.all()
    if query:
        tables = tables.annotate(full=Concat("schema_name", Value("."), "table_name")).filter(full__icontains=query)
    count = tables.count()
    pages = max(1, -(-count // per_page))
    page = min(page, pages)
    start = (page - 1) * per_page
    listed = list(
        tables.order_by("schema_name", "table_name").prefetch_related(
            Prefetch("columns", queryset=SchemaColumn.objects.order_by("ordinal"))
        )[start : start + per_page]
    )
    return SchemaPage(listed, count, page, pages, query, _versions(listed))


def _versions(tables: list[SchemaTable]) -> dict[tuple[str, str], list[SchemaVersion]]:
    """The schema history's versions of ``tables``, oldest first (by binlog position)."""
    wanted = {(t.schema_name, t.table_name) for t in tables}
    found: dict[tuple[str, str], list[SchemaVersion]] = defaultdict(list)
    if not wanted:
        return found
    rows = SchemaVersion.objects.filter(
        schema_name__in={schema for schema, _ in wanted}, table_name__in={table for _, table in wanted}
    ).order_by("source", "binlog_file", "binlog_pos", "id")
    for row in rows:
        if (row.schema_name, row.table_name) in wanted:
            found[(row.schema_name, row.table_name)].append(row)
    return found


def version_info(version: SchemaVersion) -> dict[str, object]:
    return {
        "source": version.source,
        "binlog_file": version.binlog_file,
        "binlog_pos": version.binlog_pos,
        "gtid": version.gtid,
        "baseline": version.baseline,
        "exists": version.exists,
        "columns": [{"name": c[0], "type": c[2]} for c in version.columns],
        "primary_key": version.primary_key,
        "statement": version.statement,
        # "unreadable" or "stale": from here on the relay doubts this layout, and the table's rows go out with
        # positional names (@1, @2...) until it is re-read; "" when it is sure.
        "mark": version.mark,
    }


def column_info(column: SchemaColumn) -> dict[str, object]:
    return {
        "ordinal": column.ordinal,
        "name": column.name,
        "type": column.type_name,
        "type_code": column.type_code,
        "unsigned": column.unsigned,
        "nullable": column.nullable,
        "charset": column.charset,
    }


def table_info(table: SchemaTable, versions: list[SchemaVersion] | None = None) -> dict[str, object]:
    return {
        "versions": [version_info(version) for version in versions or []],
        "schema": table.schema_name,
        "table": table.table_name,
        "primary_key": [name for name in table.primary_key.split(",") if name],
        "first_seen": table.first_seen.isoformat() if table.first_seen else None,
        "last_seen": table.last_seen.isoformat() if table.last_seen else None,
        "columns": [column_info(column) for column in table.columns.all()],
    }
