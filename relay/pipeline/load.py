"""Loading a run's usage per hour and per day into the store (UsageHistory), where the dashboard shows it.

A (period, start, schema, table) row is replaced, not added to: the run that read an hour's files is the authority
for that hour, so running the pipeline twice over the same archives leaves the same history.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from django.db import transaction

from relay.models import UsageHistory

BATCH = 2000
UPDATED_FIELDS = ["inserts", "updates", "deletes", "transactions", "run"]


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


def upsert(objects: Iterable[Any]) -> int:
    """Inserts or replaces, in batches, inside the caller's transaction."""
    written = 0
    iterator = iter(objects)
    while batch := list(islice(iterator, BATCH)):
        UsageHistory.objects.bulk_create(
            batch,
            update_conflicts=True,
            unique_fields=["period", "start", "schema_name", "table_name"],
            update_fields=UPDATED_FIELDS,
        )
        written += len(batch)
    return written


def _tuples(frame: Any, start_column: str) -> Iterator[tuple]:
    from pyspark.sql import functions as F

    # Seconds, not Python datetimes: PySpark turns timestamps into naive local times of the driver's zone.
    selected = frame.select(
        F.col(start_column).cast("long"), "schema_name", "table_name", "inserts", "updates", "deletes", "transactions"
    )
    for row in selected.toLocalIterator():
        yield tuple(row)


def load_results(results: Any, run: str) -> dict[str, int]:
    """Hourly and daily usage of a run into UsageHistory, in one database transaction."""
    with transaction.atomic():
        hours = upsert(history_rows(UsageHistory.Period.HOUR, _tuples(results.usage_hourly, "hour"), run))
        days = upsert(history_rows(UsageHistory.Period.DAY, _tuples(results.usage_daily, "start"), run))
    return {"hour": hours, "day": days}
