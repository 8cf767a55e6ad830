"""Snapshots in the dashboard's store (tests/helpers/dashboard_data.py), asked for through relay.store.snapshots and
then moved the way the binlog worker moves them: one in each state, one of a table with hostile names."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from relay.models import Client, Snapshot
from relay.store.snapshots import cancel_snapshots, request_snapshots
from tests.helpers.dashboard_data import HOSTILE, QUOTED, Filled

EVIL_ERROR = f"table {HOSTILE}.{QUOTED} has no primary key and no unique key over NOT NULL columns"


@dataclass
class Snapshots:
    client_id: int
    running: Snapshot  # shop.orders: 2,500 of ~10,000 rows in 50 s: 50 rows/s, 150 s to go
    pending: Snapshot  # shop.customers
    done: Snapshot  # shop.items: 1,234 rows (past its estimate of 1,200)
    cancelled: Snapshot  # shop.refunds, after 10 rows
    failed: Snapshot  # HOSTILE.QUOTED, with EVIL_ERROR


def add_snapshots(filled: Filled) -> Snapshots:
    client = Client.objects.get(id=filled.client_ids[HOSTILE])  # filters: shop.* and HOSTILE.* (inserts)
    now = timezone.now()
    tables = [("shop", "orders"), ("shop", "customers"), ("shop", "items"), ("shop", "refunds"), (HOSTILE, QUOTED)]
    running, pending, done, cancelled, failed = request_snapshots(client, tables)
    Snapshot.objects.filter(id=running.id).update(
        state=Snapshot.State.RUNNING,
        rows_done=2500,
        rows_total=10_000,
        chunks_done=5,
        started=now - timedelta(seconds=50),
        updated=now,
        key_columns='["id"]',
        last_key="[2500]",
    )
    Snapshot.objects.filter(id=done.id).update(
        state=Snapshot.State.DONE,
        rows_done=1234,
        rows_total=1200,
        chunks_done=3,
        started=now - timedelta(seconds=100),
        updated=now - timedelta(seconds=90),
        finished=now - timedelta(seconds=90),
    )
    Snapshot.objects.filter(id=cancelled.id).update(
        state=Snapshot.State.RUNNING, rows_done=10, started=now - timedelta(seconds=20), updated=now
    )
    assert cancel_snapshots([cancelled]) == 1
    Snapshot.objects.filter(id=failed.id).update(
        state=Snapshot.State.FAILED,
        started=now - timedelta(seconds=5),
        updated=now - timedelta(seconds=5),
        finished=now - timedelta(seconds=5),
        error=EVIL_ERROR + "\nsecond line",
    )
    return Snapshots(client.id, *(Snapshot.objects.get(id=s.id) for s in (running, pending, done, cancelled, failed)))
