"""Table usage counters: rows per table all time, since the worker's start, and in minute buckets of event time.

The rolling windows are sums over the buckets of the last 60 and 1,440 minutes (a true rolling window, unlike the
original's "since local midnight"), and inserts, updates and deletes are all counted in rows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from binlog.constants import KIND_ORDER
from relay.models import TableUsage, UsageMinute
from relay.store.sql import table
from relay.worker.bulk import Statements, upsert_statements

BUCKET_RETENTION_MINUTES = 2 * 24 * 60
KIND_COLUMN = {kind: index for index, kind in enumerate(KIND_ORDER)}  # the index of each kind's counter


class UsageTally:
    """Counts of one batch, written with one upsert per table and per (table, minute)."""

    def __init__(self, clock_offset: int = 0) -> None:
        """``clock_offset``: the source's clock minus this host's, whole seconds. The buckets are of this host's time,
        which the rolling windows are read against, so a skewed source clock does not shift them."""
        self.clock_offset = clock_offset
        self.tables: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self.minutes: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0])

    def add_many(self, schema: str, table: str, kind: int, timestamps: Sequence[int]) -> None:
        """Counts changes of one table and kind (a run of the batch's changes), by their source timestamps."""
        if not timestamps:
            return
        if self.clock_offset:
            timestamps = [timestamp - self.clock_offset for timestamp in timestamps]
        column = KIND_COLUMN[kind]
        counts = self.tables[(schema, table)]
        counts[column] += len(timestamps)
        newest, oldest = max(timestamps), min(timestamps)
        if newest > counts[3]:
            counts[3] = newest
        if newest - newest % 60 == oldest - oldest % 60:  # all in one minute: the usual case
            self.minutes[(schema, table, newest - newest % 60)][column] += len(timestamps)
            return
        minutes = self.minutes
        for timestamp in timestamps:
            minutes[(schema, table, timestamp - timestamp % 60)][column] += 1

    def __bool__(self) -> bool:
        return bool(self.tables)

    def write(self, statements: Statements) -> None:
        """Adds the tally's upserts to the batch's ``statements``."""
        if not self.tables:
            return
        usage = table(TableUsage)
        minute = table(UsageMinute)
        # One statement each (not one per row), sent with the batch's other small writes.
        statements.extend(
            upsert_statements(
                f"INSERT INTO {usage} (schema_name, table_name, inserts, updates, deletes, start_inserts,"
                " start_updates, start_deletes, last_change) VALUES",
                [(s, t, i, u, d, i, u, d, last) for (s, t), (i, u, d, last) in sorted(self.tables.items())],
                conflict=" ON CONFLICT (schema_name, table_name) DO UPDATE SET"
                f" inserts = {usage}.inserts + excluded.inserts, updates = {usage}.updates + excluded.updates,"
                f" deletes = {usage}.deletes + excluded.deletes,"
                f" start_inserts = {usage}.start_inserts + excluded.start_inserts,"
                f" start_updates = {usage}.start_updates + excluded.start_updates,"
                f" start_deletes = {usage}.start_deletes + excluded.start_deletes,"
                " last_change = excluded.last_change",
            )
        )
        statements.extend(
            upsert_statements(
                f"INSERT INTO {minute} (schema_name, table_name, minute, inserts, updates, deletes) VALUES",
                [(s, t, m, i, u, d) for (s, t, m), (i, u, d) in sorted(self.minutes.items())],
                conflict=" ON CONFLICT (schema_name, table_name, minute) DO UPDATE SET"
                f" inserts = {minute}.inserts + excluded.inserts, updates = {minute}.updates + excluded.updates,"
                f" deletes = {minute}.deletes + excluded.deletes",
            )
        )


def reset_since_start() -> None:
    TableUsage.objects.update(start_inserts=0, start_updates=0, start_deletes=0)


def prune_buckets(now: float | None = None) -> int:
    cutoff = int(now if now is not None else time.time()) - BUCKET_RETENTION_MINUTES * 60
    return UsageMinute.objects.filter(minute__lt=cutoff).delete()[0]


@dataclass(frozen=True, slots=True)
class WindowCounts:
    inserts: int = 0
    updates: int = 0
    deletes: int = 0

    @property
    def total(self) -> int:
        return self.inserts + self.updates + self.deletes
