"""The schema page's query: every table seen in the stream with the columns of its latest layout, searched and
paginated (two queries per page: the tables, then their columns)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Prefetch, Value
from django.db.models.functions import Concat

from relay.models import SchemaColumn, SchemaTable

PER_PAGE = 50


@dataclass
class SchemaPage:
    tables: list[SchemaTable]  # each with .columns prefetched, in ordinal order
    count: int
    page: int
    pages: int
    query: str


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
    return SchemaPage(listed, count, page, pages, query)


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


def table_info(table: SchemaTable) -> dict[str, object]:
    return {
        "schema": table.schema_name,
        "table": table.table_name,
        "primary_key": [name for name in table.primary_key.split(",") if name],
        "first_seen": table.first_seen.isoformat() if table.first_seen else None,
        "last_seen": table.last_seen.isoformat() if table.last_seen else None,
        "columns": [column_info(column) for column in table.columns.all()],
    }
