"""Resetting the statistics: event counts, table usage and its minute buckets (the admin's reset actions)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from relay.models import EventCount, TableUsage, UsageMinute


def reset_statistics(tables: list[tuple[str, str]] | None = None) -> dict[str, int]:
    """Zeroes the counters: event counts, table usage and the minute buckets; of some tables only, if given.

    Row updates and deletes, no table locks: the worker's next upsert simply starts again from zero.
    """
    with transaction.atomic():
        usage = TableUsage.objects.all()
        minutes = UsageMinute.objects.all()
        events = 0
        if tables is None:
            events = EventCount.objects.update(count=0)
        else:
            wanted = Q(pk__in=[])
            for schema, table in tables:
                wanted |= Q(schema_name=schema, table_name=table)
            usage = usage.filter(wanted)
            minutes = minutes.filter(wanted)
        tables_reset = usage.update(inserts=0, updates=0, deletes=0, start_inserts=0, start_updates=0, start_deletes=0)
        buckets = minutes.delete()[0]
    return {"event types": events, "tables": tables_reset, "minute buckets": buckets}
