"""Loading a run's results into the store, where the dashboard's table usage page shows them: usage per hour and per
day (UsageHistory) and, per day, how often each column really changed on UPDATE (ColumnChangeHistory).

A row is replaced, not added to: the run that read an hour's (a day's) files is the authority for that hour (day),
so running the pipeline twice over the same archives leaves the same history.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime
from itertools import islice
from typing import Any

from django.db import models, transaction

from relay.models import ColumnChangeHistory, UsageHistory

BATCH = 2000


def history_rows(period: str, rows: Iterable[tuple[int, str, str, int, int, int, int]], run: str) -> Iterator[Any]:
    """UsageHistory objects from (start unix time, schema, table, inserts, updates, deletes, transactions)."""
    for start, schema, table, inserts, updates, deletes, transactions in rows:
        yield UsageHistory(
            period=period,
            start=datetime.fromtimestamp(start, UTC),
            schema_name=schema,
            table_name=table,
            inserts=inserts,
            updates=updates,
            deletes=deletes,
            transactions=transactions,
            run=run[:64],
        )


def column_rows(rows: Iterable[tuple[str, str, str, str, int, int]], run: str) -> Iterator[Any]:
    """ColumnChangeHistory objects from (yyyy-mm-dd, schema, table, column, changed, compared)."""
    for day, schema, table, column, changed, compared in rows:
        yield ColumnChangeHistory(
            day=date.fromisoformat(day),
            schema_name=schema,
            table_name=table,
            column_name=column,
            changed=changed,
            compared=compared,
            run=run[:64],
        )


def upsert(objects: Iterable[models.Model], unique: list[str], updated: list[str]) -> int:
    """Inserts or replaces (on the ``unique`` fields), in batches, inside the caller's transaction."""
    written = 0
    iterator = iter(objects)
    while batch := list(islice(iterator, BATCH)):
        type(batch[0])._default_manager.bulk_create(
            batch, update_conflicts=True, unique_fields=unique, update_fields=updated
        )
        written += len(batch)
    return written


def _tuples(frame: Any, *columns: Any) -> Iterator[tuple]:
    for row in frame.select(*columns).toLocalIterator():
        yield tuple(row)


def load_results(results: Any, run: str) -> dict[str, int]:
    """A run's hourly and daily usage and its column changes into the store, in one database transaction."""
    from pyspark.sql import functions as F

    def usage(frame: Any, start_column: str) -> Iterator[tuple]:
        # Seconds, not Python datetimes: PySpark turns timestamps into naive local times of the driver's zone.
        counts = ("inserts", "updates", "deletes", "transactions")
        return _tuples(frame, F.col(start_column).cast("long"), "schema_name", "table_name", *counts)

    usage_unique = ["period", "start", "schema_name", "table_name"]
    usage_updated = ["inserts", "updates", "deletes", "transactions", "run"]
    column_unique = ["day", "schema_name", "table_name", "column_name"]
    columns = _tuples(results.column_changes, "day", "schema_name", "table_name", "column_name", "changed", "compared")
    with transaction.atomic():
        hours = upsert(
            history_rows(UsageHistory.Period.HOUR, usage(results.usage_hourly, "hour"), run),
            usage_unique,
            usage_updated,
        )
        days = upsert(
            history_rows(UsageHistory.Period.DAY, usage(results.usage_daily, "start"), run), usage_unique, usage_updated
        )
        changes = upsert(column_rows(columns, run), column_unique, ["changed", "compared", "run"])
    return {"hour": hours, "day": days, "columns": changes}
