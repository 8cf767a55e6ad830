"""SNAPSHOT: a session asks for, cancels or watches snapshots of tables for its own client.

Requests go through the store's one entry point (relay/store/snapshots.py), so the protocol refuses what
``manage.py snapshot`` and the admin refuse, with the same words: a table no filter of the client covers, a condition
the relay does not run, too many tables or snapshots. A refusal is a StoreError, which the connection answers with
0xFA and the reason, keeping the connection open. These run in the store threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import or_

from django.db.models import Q

from clientproto import SnapshotAction, SnapshotItem, SnapshotRequest, SnapshotState
from relay.models import Client, Snapshot
from relay.server.queues import StaleSession
from relay.store.snapshots import MAX_TABLES_PER_REQUEST, SnapshotRefused, cancel_snapshots, request_snapshots

#: Longest schema or table name the store keeps (Snapshot.schema_name, table_name).
MAX_STORED_NAME = 255

STATES = {
    Snapshot.State.PENDING: SnapshotState.PENDING,
    Snapshot.State.RUNNING: SnapshotState.RUNNING,
    Snapshot.State.DONE: SnapshotState.DONE,
    Snapshot.State.CANCELLED: SnapshotState.CANCELLED,
    Snapshot.State.FAILED: SnapshotState.FAILED,
}
_NONE = SnapshotItem(0, SnapshotState.NONE)


def item(snapshot: Snapshot | None) -> SnapshotItem:
    if snapshot is None:
        return _NONE
    return SnapshotItem(snapshot.id, STATES[Snapshot.State(snapshot.state)], snapshot.rows_done, snapshot.rows_total)


def _tables_of(client_id: int, tables: Sequence[tuple[str, str]]) -> Q:
    names = reduce(or_, (Q(schema_name=schema, table_name=table) for schema, table in set(tables)))
    return Q(client_id=client_id) & names


def newest(client_id: int, tables: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Snapshot]:
    """Each table's newest snapshot for the client (tables without one are left out)."""
    found: dict[tuple[str, str], Snapshot] = {}
    for snapshot in Snapshot.objects.filter(_tables_of(client_id, tables)).order_by("id"):
        found[(snapshot.schema_name, snapshot.table_name)] = snapshot
    return found


def run(client_id: int, request: SnapshotRequest) -> list[SnapshotItem]:
    """The reply's items, one per table of the request, in its order. Raises SnapshotRefused (0xFA)."""
    tables = list(request.tables)
    if len(tables) > MAX_TABLES_PER_REQUEST:
        raise SnapshotRefused(f"{len(tables)} tables in one request, the limit is {MAX_TABLES_PER_REQUEST}")
    for schema, table in tables:
        if len(schema) > MAX_STORED_NAME or len(table) > MAX_STORED_NAME:
            raise SnapshotRefused(f"{schema[:64]}.{table[:64]}: a name is over {MAX_STORED_NAME} characters")
    if request.action == SnapshotAction.START:
        client = Client.objects.filter(id=client_id).first()
        if client is None:  # deleted in the admin meanwhile: the session is gone with it
            raise StaleSession
        return [item(snapshot) for snapshot in request_snapshots(client, tables, request.where)]
    if request.action == SnapshotAction.CANCEL:
        cancel_snapshots(list(Snapshot.objects.filter(_tables_of(client_id, tables), state__in=Snapshot.ACTIVE)))
    found = newest(client_id, tables)
    return [item(found.get(table)) for table in tables]
