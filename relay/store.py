"""The store API: clients, sessions, filters and the consuming side of the queues.

The relay server, the dashboard and the admin go through these functions; no other module writes SQL against the
queue tables (the worker's appending side is relay/ingest.py). Consuming is lock-free: the head of a queue moves by
compare-and-set on ``Client.acked_seq``, so a POLL never waits for the worker's batch to commit.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F, Max, Min, Q, Value
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from relay.models import Change, Client, Filter, QueueEntry, QueueState, ServedEvent

HISTORY_LENGTH = 10


class StoreError(Exception):
    """A request the store cannot satisfy; the message says why."""


@dataclass(frozen=True, slots=True)
class Session:
    client_id: int
    token: int
    name: str


@dataclass(frozen=True, slots=True)
class QueuedChange:
    seq: int
    change: Change


# -- clients and sessions -----------------------------------------------------------------------------------------


def new_token() -> int:
    """A random, non-zero 32-bit session token."""
    return secrets.randbelow(0xFFFFFFFF) + 1


def open_session(name: str, remote_address: str = "") -> Session:
    """Registers ``name`` (same name, same ClientID, for ever) and starts a new session with a fresh token.

    Entries sent in an earlier session but never acknowledged become deliverable again.
    """
    if not name:
        raise StoreError("client name is empty")
    now = timezone.now()
    with transaction.atomic():
        client, _ = Client.objects.get_or_create(name=name)
        QueueState.objects.get_or_create(client=client)
        token = new_token()
        Client.objects.filter(id=client.id).update(
            token=token,
            connected=True,
            session_started=now,
            last_seen=now,
            remote_address=remote_address[:100],
            delivered_seq=F("acked_seq"),
        )
    return Session(client.id, token, name)


def close_session(client_id: int, token: int) -> None:
    """Marks the client disconnected, unless a newer session has taken over."""
    Client.objects.filter(id=client_id, token=token).update(connected=False, last_seen=timezone.now())


def session_is_current(client_id: int, token: int) -> bool:
    return Client.objects.filter(id=client_id, token=token).exists()


def touch(client_id: int) -> None:
    Client.objects.filter(id=client_id).update(last_seen=timezone.now())


# -- filters ------------------------------------------------------------------------------------------------------


def add_filter(
    client_id: int, event_mask: int, schema_name: str, table_name: str, queue_limit: int = 0, discard_policy: int = 0
) -> Filter:
    """Adds a filter; the same (mask, schema, table) again only updates its limit and policy."""
    if not 1 <= event_mask <= 7:
        raise StoreError(f"event mask {event_mask} is not a combination of 1 (insert), 2 (update), 4 (delete)")
    if discard_policy not in (0, 1, 2):
        raise StoreError(f"discard policy {discard_policy} is not 0, 1 or 2")
    if not schema_name or not table_name:
        raise StoreError("schema and table names must not be empty")
    spec, _ = Filter.objects.update_or_create(
        client_id=client_id,
        event_mask=event_mask,
        schema_name=schema_name,
        table_name=table_name,
        defaults={"queue_limit": queue_limit, "discard_policy": discard_policy},
    )
    return spec


def remove_filter(client_id: int, event_mask: int, schema_name: str, table_name: str) -> bool:
    deleted, _ = Filter.objects.filter(
        client_id=client_id, event_mask=event_mask, schema_name=schema_name, table_name=table_name
    ).delete()
    return deleted > 0


def filters_signature() -> tuple[int, int, int]:
    """Changes whenever a filter is added, removed or updated: the worker reloads its index then."""
    from django.db.models import Count, Sum

    stats = Filter.objects.aggregate(
        count=Count("id"), top=Max("id"), limits=Sum("queue_limit"), policies=Sum("discard_policy")
    )
    return (stats["count"] or 0, stats["top"] or 0, hash((stats["limits"], stats["policies"])))


# -- consuming ----------------------------------------------------------------------------------------------------


def queue_bounds(client_id: int) -> tuple[int, int, int]:
    """(acked_seq, delivered_seq, last_seq) of a client's queue."""
    client = Client.objects.filter(id=client_id).values("acked_seq", "delivered_seq").first()
    if client is None:
        raise StoreError(f"no client with id {client_id}")
    last = QueueState.objects.filter(client_id=client_id).values_list("last_seq", flat=True).first() or 0
    return client["acked_seq"], client["delivered_seq"], last


def queue_size(client_id: int) -> int:
    acked, _, last = queue_bounds(client_id)
    return max(0, last - acked)


def _entries_after(client_id: int, seq: int, limit: int) -> list[QueuedChange]:
    entries = list(
        QueueEntry.objects.filter(client_id=client_id, seq__gt=seq)
        .order_by("seq")
        .values_list("seq", "change_id")[:limit]
    )
    if not entries:
        return []
    changes = Change.objects.in_bulk([change_id for _, change_id in entries])
    return [QueuedChange(seq, changes[change_id]) for seq, change_id in entries if change_id in changes]


def poll(client_id: int) -> tuple[QueuedChange, int] | None:
    """Takes the head of the queue (auto-ack): the change and the number of entries left, or None when empty."""
    for _ in range(100):
        acked, _, last = queue_bounds(client_id)
        if last <= acked:
            return None
        head = _entries_after(client_id, acked, 1)
        if not head:
            return None
        seq = head[0].seq
        moved = Client.objects.filter(id=client_id, acked_seq=acked).update(
            acked_seq=seq,
            delivered_seq=Greatest(F("delivered_seq"), Value(seq)),
            served=F("served") + 1,
            last_seen=timezone.now(),
        )
        if moved:
            return head[0], max(0, last - seq)
    raise StoreError(f"client {client_id}: the queue head kept moving under this poll")


def fetch(client_id: int, max_events: int, *, manual_ack: bool) -> tuple[list[QueuedChange], int]:
    """Up to ``max_events`` entries past what was delivered (manual ack) or acknowledged (auto-ack).

    Returns the entries and the queue size after them. With manual ack nothing leaves the queue until :func:`ack`.
    """
    max_events = max(1, min(max_events, 10_000))
    for _ in range(100):
        acked, delivered, last = queue_bounds(client_id)
        cursor = max(delivered, acked) if manual_ack else acked
        if last <= cursor:
            return [], max(0, last - acked)
        batch = _entries_after(client_id, cursor, max_events)
        if not batch:
            return [], max(0, last - acked)
        top = batch[-1].seq
        if manual_ack:
            moved = Client.objects.filter(id=client_id, delivered_seq=delivered, acked_seq=acked).update(
                delivered_seq=top, served=F("served") + len(batch), last_seen=timezone.now()
            )
            remaining = last - acked
        else:
            moved = Client.objects.filter(id=client_id, acked_seq=acked).update(
                acked_seq=top,
                delivered_seq=Greatest(F("delivered_seq"), Value(top)),
                served=F("served") + len(batch),
                last_seen=timezone.now(),
            )
            remaining = last - top
        if moved:
            return batch, max(0, remaining)
    raise StoreError(f"client {client_id}: the queue head kept moving under this fetch")


def ack(client_id: int, seq: int) -> int:
    """Acknowledges every entry up to ``seq`` (cumulative, idempotent); returns the acknowledged sequence number.

    Only what was delivered can be acknowledged: an ACK past the delivered entries stops at them.
    """
    Client.objects.filter(id=client_id, acked_seq__lt=seq).update(
        acked_seq=Least(Value(seq), Greatest(F("delivered_seq"), F("acked_seq"))), last_seen=timezone.now()
    )
    return Client.objects.filter(id=client_id).values_list("acked_seq", flat=True).first() or 0


def record_served(client_id: int, served: Iterable[QueuedChange]) -> None:
    """Keeps the last served events of a client (the History column)."""
    now = timezone.now()
    rows = [
        ServedEvent(
            client_id=client_id,
            seq=item.seq,
            kind=item.change.kind,
            schema_name=item.change.schema_name,
            table_name=item.change.table_name,
            served_at=now,
        )
        for item in list(served)[-HISTORY_LENGTH:]
    ]
    if not rows:
        return
    ServedEvent.objects.bulk_create(rows)
    keep = list(
        ServedEvent.objects.filter(client_id=client_id).order_by("-id").values_list("id", flat=True)[:HISTORY_LENGTH]
    )
    ServedEvent.objects.filter(client_id=client_id).exclude(id__in=keep).delete()


# -- administration -----------------------------------------------------------------------------------------------


def purge_queue(client_id: int) -> int:
    """Empties a client's queue; returns the number of entries dropped."""
    with transaction.atomic():
        acked, _, last = queue_bounds(client_id)
        Client.objects.filter(id=client_id).update(
            acked_seq=Greatest(F("acked_seq"), Value(last)), delivered_seq=Greatest(F("delivered_seq"), Value(last))
        )
        QueueEntry.objects.filter(client_id=client_id, seq__lte=last).delete()
    return max(0, last - acked)


def delete_client(client_id: int) -> None:
    with transaction.atomic():
        QueueEntry.objects.filter(client_id=client_id).delete()
        Client.objects.filter(id=client_id).delete()


def collect_garbage(batch_size: int = 10_000) -> tuple[int, int]:
    """Deletes consumed queue entries, then the changes no entry points at; each in bounded batches.

    Returns (entries deleted, changes deleted). Safe while the worker appends: a change is deleted only when its id
    is below every remaining entry's change and not above the largest id this statement saw committed.
    """
    entries_deleted = 0
    for client_id, acked in Client.objects.values_list("id", "acked_seq"):
        while True:
            ids = list(
                QueueEntry.objects.filter(client_id=client_id, seq__lte=acked).values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                break
            entries_deleted += QueueEntry.objects.filter(id__in=ids).delete()[0]
    changes_deleted = 0
    orphans = QueueEntry.objects.filter(~Q(client_id__in=Client.objects.values("id")))
    entries_deleted += orphans.delete()[0]
    while True:
        with transaction.atomic():
            # The newest committed change first: a batch the worker commits after this read has higher ids, so
            # its changes stay whatever the entry scan below sees.
            newest = Change.objects.aggregate(top=Max("id"))["top"]
            if newest is None:
                break
            needed = QueueEntry.objects.aggregate(low=Min("change_id"))["low"]
            bound = newest + 1 if needed is None else min(needed, newest + 1)
            ids = list(Change.objects.filter(id__lt=bound).order_by("id").values_list("id", flat=True)[:batch_size])
            if not ids:
                break
            changes_deleted += Change.objects.filter(id__in=ids).delete()[0]
    return entries_deleted, changes_deleted
