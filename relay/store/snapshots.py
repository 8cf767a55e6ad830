"""Snapshot requests: a client asks for the current rows of a table; the worker reads them and queues them in order
with the stream (relay/worker/snapshots.py). Every way of asking (``manage.py snapshot``, the admin action, the
protocol's SNAPSHOT command) goes through :func:`request_snapshots`, so they refuse the same things with the same
words, and every way of watching one reads :func:`progress`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from binlog.snapshot import WhereError, check_where
from relay.models import Client, Filter, Snapshot
from relay.store.errors import StoreError
from relay.store.patterns import NamePattern

#: Tables one request may name; a client that wants more asks again.
MAX_TABLES_PER_REQUEST = 100
#: Snapshots a client may have pending or running at once.
MAX_ACTIVE_PER_CLIENT = 100
INSERT_BIT = 1
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


class SnapshotRefused(StoreError):
    """A request the relay will not carry out; the message says why and what to do."""


def parse_table(name: str) -> tuple[str, str]:
    """``schema.table`` into its two names (a table name may hold dots; the schema's may not)."""
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise SnapshotRefused(f"{name!r} is not SCHEMA.TABLE")
    return schema, table


def covering_filter(client_id: int, schema: str, table: str) -> Filter | None:
    """The client's earliest filter that routes inserts of ``schema.table`` (the one whose limit and policy apply to
    the snapshot's rows, as to the inserts the worker routes); None when no filter covers the table."""
    for spec in Filter.objects.filter(client_id=client_id).order_by("id"):
        if (
            spec.event_mask & INSERT_BIT
            and NamePattern(spec.schema_name).matches(schema)
            and NamePattern(spec.table_name).matches(table)
        ):
            return spec
    return None


def request_snapshots(client: Client, tables: Sequence[tuple[str, str]], where: str = "") -> list[Snapshot]:
    """Asks for a snapshot of each table (or finds the one already asked for with the same condition); the worker
    picks them up. Raises :class:`SnapshotRefused` naming the first problem, and asks for nothing then."""
    if not tables:
        raise SnapshotRefused("name at least one table")
    if len(tables) > MAX_TABLES_PER_REQUEST:
        raise SnapshotRefused(f"{len(tables)} tables in one request, the limit is {MAX_TABLES_PER_REQUEST}")
    where = where.strip()
    try:
        check_where(where)
    except WhereError as exc:
        raise SnapshotRefused(str(exc)) from None
    snapshots: list[Snapshot] = []
    with transaction.atomic():
        active = list(Snapshot.objects.select_for_update().filter(client=client, state__in=Snapshot.ACTIVE))
        for schema, table in tables:
            if "*" in schema + table or "?" in schema + table:
                raise SnapshotRefused(f"{schema}.{table}: name one table, without wildcards")
            if schema.lower() in SYSTEM_SCHEMAS:
                # A filter of * on * covers them, but their rows (accounts, password hashes) are the server's own.
                raise SnapshotRefused(f"{schema}.{table}: the server's own schemas are not snapshot")
            if covering_filter(client.id, schema, table) is None:
                raise SnapshotRefused(
                    f"client {client.name!r} has no filter that covers inserts on {schema}.{table}; "
                    "add one first (the snapshot's rows are delivered as inserts, and the changes that follow "
                    "them by the client's filters)"
                )
            same = [s for s in active if (s.schema_name, s.table_name) == (schema, table)]
            if same and same[0].where != where:
                raise SnapshotRefused(
                    f"snapshot #{same[0].id} of {schema}.{table} is already under way for this client with another "
                    "condition; cancel it first"
                )
            if same:
                snapshots.append(same[0])
                continue
            if len(active) >= MAX_ACTIVE_PER_CLIENT:
                raise SnapshotRefused(f"the client has {MAX_ACTIVE_PER_CLIENT} snapshots under way, the limit")
            snapshot = Snapshot.objects.create(client=client, schema_name=schema, table_name=table, where=where)
            active.append(snapshot)
            snapshots.append(snapshot)
    return snapshots


def next_snapshot(excluded: Sequence[int] = ()) -> Snapshot | None:
    """The snapshot the worker reads next (one at a time): one under way first (a worker resumes it after a
    restart), else the oldest request of the client whose last snapshot started longest ago (or never). So clients
    take turns: one that asked for a hundred tables delays another's request by one table, not by a hundred.
    ``excluded``: snapshots not to take (their end is being written)."""
    active = Snapshot.objects.filter(state__in=Snapshot.ACTIVE).exclude(id__in=excluded)
    running = active.filter(state=Snapshot.State.RUNNING).order_by("id").first()
    if running is not None:
        return running
    firsts = dict(
        active.filter(state=Snapshot.State.PENDING)
        .values("client_id")
        .annotate(first=Min("id"))
        .values_list("client_id", "first")
    )
    if not firsts:
        return None
    last_started = dict(
        Snapshot.objects.filter(client_id__in=list(firsts), started__isnull=False)
        .values("client_id")
        .annotate(last=Max("started"))
        .values_list("client_id", "last")
    )
    never = datetime.min.replace(tzinfo=timezone.get_current_timezone())
    client = min(firsts, key=lambda client_id: (last_started.get(client_id) or never, firsts[client_id]))
    return Snapshot.objects.filter(id=firsts[client]).first()


def cancel_snapshots(snapshots: Sequence[Snapshot]) -> int:
    """Cancels those still under way; rows already queued stay queued (the end marker says it was cancelled).
    Returns how many were cancelled."""
    ids = [snapshot.id for snapshot in snapshots]
    return Snapshot.objects.filter(id__in=ids, state__in=Snapshot.ACTIVE).update(
        state=Snapshot.State.CANCELLED, finished=timezone.now(), updated=timezone.now()
    )


@dataclass(frozen=True)
class Progress:
    """What the dashboard, /metrics and the terminal show of a snapshot."""

    rows_done: int
    rows_total: int | None  # the table's estimated row count (InnoDB's estimate: rows_done may pass it)
    rows_per_second: float | None
    eta_seconds: float | None
    fraction: float | None  # rows_done / rows_total, at most 1.0 while running; 1.0 when done


def progress(snapshot: Snapshot, now: datetime | None = None) -> Progress:
    now = now or timezone.now()
    rate = None
    if snapshot.started is not None:
        end = snapshot.finished or snapshot.updated or now
        elapsed = (end - snapshot.started).total_seconds()
        if elapsed > 0 and snapshot.rows_done:
            rate = snapshot.rows_done / elapsed
    total = snapshot.rows_total
    fraction = eta = None
    if snapshot.state == Snapshot.State.DONE:
        fraction, eta = 1.0, 0.0
    elif total:
        fraction = min(snapshot.rows_done / total, 1.0)
        if rate:
            eta = max(total - snapshot.rows_done, 0) / rate
    return Progress(snapshot.rows_done, total, rate, eta, fraction)
