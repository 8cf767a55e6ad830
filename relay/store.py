"""The store API: clients, sessions, filters and the consuming side of the queues.

The relay server, the dashboard and the admin go through these functions; no other module writes SQL against the
queue tables (the worker's appending side is relay/ingest.py). Consuming is lock-free: the head of a queue moves by
compare-and-set on ``Client.acked_seq``, so a POLL never waits for the worker's batch to commit.

Two layers: the ORM functions (``poll``, ``fetch``, ``ack``, ...) that the dashboard, the admin and the tests use,
and the session primitives of the relay server (``session_bounds``, ``read_entries``, ``advance_head``,
``mark_delivered``, ``ack_session``, ``record_history``): one SQL statement each, in raw SQL because they run once or
twice per POLL, and each checks the session token so that a session replaced by a newer AUTH (in any process) can no
longer consume.
"""

from __future__ import annotations

import bisect
import datetime
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from relay.models import MAX_RUN, Change, Checkpoint, Client, Filter, QueueEntry, QueueState, ServedEvent

HISTORY_LENGTH = 10
#: PostgreSQL channel on which :func:`open_session` announces "client_id:token": every relay process LISTENs on it
#: and closes its own older connection of that client at once (several ``runrelay`` processes share one store).
SESSION_CHANNEL = "relay_sessions"


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


def open_session(name: str, remote_address: str = "", relay_process_id: int | None = None) -> Session:
    """Registers ``name`` (same name, same ClientID, for ever) and starts a new session with a fresh token, held by
    relay process ``relay_process_id`` (see relay/relayprocess.py).

    Entries sent in an earlier session but never acknowledged become deliverable again.
    """
    if not name:
        raise StoreError("client name is empty")
    now = timezone.now()
    with transaction.atomic():
        # A write first: on SQLite a transaction that reads before it writes cannot wait for the write lock (the
        # upgrade fails at once with "database is locked" while the worker commits); a write waits its turn.
        Client.objects.bulk_create([Client(name=name)], ignore_conflicts=True)
        client = Client.objects.only("id").get(name=name)
        QueueState.objects.bulk_create([QueueState(client_id=client.id)], ignore_conflicts=True)
        token = new_token()
        Client.objects.filter(id=client.id).update(
            token=token,
            connected=True,
            relay_process_id=relay_process_id,
            session_started=now,
            last_seen=now,
            remote_address=remote_address[:100],
            delivered_seq=F("acked_seq"),
        )
        if connection.vendor == "postgresql":
            # Delivered at commit, so no relay process hears of the session before it exists.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [SESSION_CHANNEL, f"{client.id}:{token}"])
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


def entry_change_ids(client_id: int, after_seq: int, limit: int) -> list[tuple[int, int]]:
    """(seq, change id) of up to ``limit`` entries with seq > ``after_seq``, oldest first (runs expanded).

    The run holding ``after_seq + 1`` starts at most MAX_RUN entries earlier, which bounds the index range scan.
    """
    if limit <= 0:
        return []
    runs = (
        QueueEntry.objects.filter(client_id=client_id, seq__gt=after_seq - MAX_RUN)
        .order_by("seq")
        .values_list("seq", "count", "change_id")
    )
    found: list[tuple[int, int]] = []
    for seq, count, change_id in runs.iterator(chunk_size=100):
        start = max(seq, after_seq + 1)
        for entry in range(start, seq + count):
            found.append((entry, change_id + entry - seq))
            if len(found) >= limit:
                return found
    return found


def change_ids_at(client_id: int, seqs: list[int]) -> dict[int, int]:
    """The change id of each of ``seqs`` that is in the client's queue."""
    if not seqs:
        return {}
    runs = QueueEntry.objects.filter(client_id=client_id, seq__gt=min(seqs) - MAX_RUN, seq__lte=max(seqs)).values_list(
        "seq", "count", "change_id"
    )
    found: dict[int, int] = {}
    wanted = sorted(seqs)
    for seq, count, change_id in runs:
        for entry in wanted[bisect.bisect_left(wanted, seq) : bisect.bisect_left(wanted, seq + count)]:
            found[entry] = change_id + entry - seq
    return found


def _entries_after(client_id: int, seq: int, limit: int) -> list[QueuedChange]:
    entries = entry_change_ids(client_id, seq, limit)
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

    An ACK past the newest entry stops there. It is not limited to what this session delivered: a client that
    reconnected may acknowledge what it received in its previous session (PROTOCOL.md, ACK).
    """
    last = QueueState.objects.filter(client_id=client_id).values_list("last_seq", flat=True).first() or 0
    Client.objects.filter(id=client_id, acked_seq__lt=min(seq, last)).update(
        acked_seq=Least(Value(seq), Value(last)),
        delivered_seq=Greatest(F("delivered_seq"), Least(Value(seq), Value(last))),
        last_seen=timezone.now(),
    )
    return Client.objects.filter(id=client_id).values_list("acked_seq", flat=True).first() or 0


def record_served(client_id: int, served: Iterable[QueuedChange]) -> None:
    """Keeps the last served events of a client (the History column)."""
    now = timezone.now()
    items = [
        HistoryItem(item.seq, item.change.kind, item.change.schema_name, item.change.table_name, now) for item in served
    ]
    record_history({client_id: items})


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


def _queue_heads() -> list[int]:
    """The change each non-empty queue needs first: the oldest change any queue still points at is among these.

    Within a queue, change ids grow with the sequence (both follow binlog order), so a queue's head entry holds its
    smallest change id; one index lookup per client instead of a scan of every entry.
    """
    heads = []
    for client_id, acked in Client.objects.values_list("id", "acked_seq"):
        head = entry_change_ids(client_id, acked, 1)
        if head:
            heads.append(head[0][1])
    return heads


def collect_garbage(batch_size: int = 10_000, max_seconds: float | None = None) -> tuple[int, int]:
    """Deletes consumed queue entries, then the changes no entry points at; each in bounded batches.

    Returns (entries deleted, changes deleted). Safe while the worker appends: a change is deleted only when its id
    is below every remaining entry's change and not above the largest id this statement saw committed.
    ``max_seconds`` stops starting new batches after that long, so that a large backlog is worked off in slices
    that leave the store to the worker in between.
    """
    deadline = None if max_seconds is None else time.monotonic() + max_seconds

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() > deadline

    entries_deleted = 0
    for client_id, acked in Client.objects.values_list("id", "acked_seq"):
        while not out_of_time():
            ids = list(
                QueueEntry.objects.filter(client_id=client_id, seq__lte=acked)
                .annotate(end=F("seq") + F("count") - 1)
                .filter(end__lte=acked)
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                break
            entries_deleted += QueueEntry.objects.filter(id__in=ids).delete()[0]
    changes_deleted = 0
    while not out_of_time():
        with transaction.atomic():
            # The newest committed change first: a batch the worker commits after this read has higher ids, so
            # its changes stay whatever the head scan below sees.
            newest = Change.objects.aggregate(top=Max("id"))["top"]
            if newest is None:
                break
            bound = min([newest + 1, *_queue_heads()])
            ids = list(Change.objects.filter(id__lt=bound).order_by("id").values_list("id", flat=True)[:batch_size])
            if not ids:
                break
            changes_deleted += Change.objects.filter(id__in=ids).delete()[0]
    return entries_deleted, changes_deleted


# -- the relay server's session primitives --------------------------------------------------------------------------


class Bounds(NamedTuple):
    """A client's queue as the server sees it: (acked_seq, last_seq] are queued, up to delivered_seq were sent."""

    acked_seq: int
    delivered_seq: int
    last_seq: int
    token: int


class StoredEntry(NamedTuple):
    """A queue entry joined with its change, as :func:`read_entries` returns it (``data``: relay/rowcodec.py)."""

    seq: int
    kind: int
    schema_name: str
    table_name: str
    binlog_file: str
    binlog_pos: int
    row_index: int
    timestamp: int
    gtid: str
    data: str


class HistoryItem(NamedTuple):
    seq: int
    kind: int
    schema_name: str
    table_name: str
    served_at: datetime.datetime


def _table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _now() -> Any:
    return connection.ops.adapt_datetimefield_value(timezone.now())


def session_bounds(client_id: int) -> Bounds | None:
    """The queue bounds and the current session token in one statement; None for an unknown client."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.acked_seq, c.delivered_seq, COALESCE(q.last_seq, 0), c.token FROM {_table(Client)} c"
            f" LEFT JOIN {_table(QueueState)} q ON q.client_id = c.id WHERE c.id = %s",
            [client_id],
        )
        row = cursor.fetchone()
    return None if row is None else Bounds(*row)


def read_entries(client_id: int, after_seq: int, limit: int) -> list[StoredEntry]:
    """Up to ``limit`` entries with seq > ``after_seq``, oldest first, each with its change: two indexed queries."""
    if limit <= 0:
        return []
    q = connection.ops.quote_name
    upper = after_seq + limit
    with connection.cursor() as cursor:
        # Entries are runs (QueueEntry): entry seq + i is change change_id + i. The runs overlapping (after, upper]
        # start within MAX_RUN of it, so the (client, seq) index bounds the scan whatever the queue's length. The
        # runs first, then their changes by id: one query joining on the id range lets the planner pick a plan
        # that compares every run with every change (seconds per read on a queue of single entries).
        cursor.execute(
            f"SELECT seq, change_id, {q('count')} FROM {_table(QueueEntry)} WHERE client_id = %s AND seq > %s"
            f" AND seq <= %s AND seq + {q('count')} > %s ORDER BY seq",
            [client_id, after_seq - MAX_RUN, upper, after_seq + 1],
        )
        pairs: list[tuple[int, int]] = []
        for seq, change_id, count in cursor.fetchall():
            for entry in range(max(seq, after_seq + 1), min(seq + count, upper + 1)):
                pairs.append((entry, change_id + entry - seq))
        if not pairs:
            return []
        changes: dict[int, tuple[Any, ...]] = {}
        ids = sorted({change_id for _, change_id in pairs})
        for at in range(0, len(ids), 500):  # bounded IN lists (SQLite's variable limit)
            chunk = ids[at : at + 500]
            if chunk[-1] - chunk[0] + 1 == len(chunk):  # consecutive ids (a broad subscription): one range
                where, params = "id >= %s AND id <= %s", [chunk[0], chunk[-1]]
            else:
                where, params = f"id IN ({', '.join('%s' for _ in chunk)})", chunk
            cursor.execute(
                f"SELECT id, kind, schema_name, table_name, binlog_file, binlog_pos, row_index, {q('timestamp')},"
                f" gtid, data FROM {_table(Change)} WHERE {where}",
                params,
            )
            for row in cursor.fetchall():
                changes[row[0]] = row[1:]
    # A change missing (entries written by hand) leaves a gap, as before.
    return [StoredEntry(seq, *changes[change_id]) for seq, change_id in pairs if change_id in changes]


def advance_head(client_id: int, token: int, expected_acked: int, new_acked: int, served: int) -> int | None:
    """Moves the queue head from ``expected_acked`` to ``new_acked`` (auto-ack delivery of ``served`` entries).

    Compare-and-set: nothing happens unless the session token is still current and nobody moved the head meanwhile
    (another session, the worker's unqueue-oldest policy, a purge). Returns the queue's last_seq on success, None
    when the compare failed: the caller re-reads the bounds.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Client)} SET acked_seq = %s,"
            f" delivered_seq = CASE WHEN delivered_seq > %s THEN delivered_seq ELSE %s END,"
            f" served = served + %s, last_seen = %s WHERE id = %s AND token = %s AND acked_seq = %s"
            f" RETURNING (SELECT last_seq FROM {_table(QueueState)} WHERE client_id = %s)",
            [new_acked, new_acked, new_acked, served, _now(), client_id, token, expected_acked, client_id],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0] or 0)


def sync_session(client_id: int, token: int, acked_seq: int, delivered_seq: int, served: int) -> Bounds | None:
    """Writes what a session delivered since its last sync: the head (auto-ack), the manual-ack cursor, the count.

    Both only move forward (a newer value in the store, from the worker's unqueue-oldest policy or an ACK, wins).
    Returns the bounds after the write, read by the same statement (what :func:`session_bounds` would return next);
    None when the token is no longer the client's current one: a newer session took over and nothing is written.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Client)} SET acked_seq = CASE WHEN acked_seq > %s THEN acked_seq ELSE %s END,"
            f" delivered_seq = CASE WHEN delivered_seq > %s THEN delivered_seq ELSE %s END,"
            f" served = served + %s, last_seen = %s WHERE id = %s AND token = %s"
            f" RETURNING acked_seq, delivered_seq,"
            f" COALESCE((SELECT last_seq FROM {_table(QueueState)} WHERE client_id = %s), 0), token",
            [acked_seq, acked_seq, delivered_seq, delivered_seq, served, _now(), client_id, token, client_id],
        )
        row = cursor.fetchone()
    return None if row is None else Bounds(*row)


def ack_session(client_id: int, token: int, seq: int) -> tuple[int, int] | None:
    """ACK for a session: (acked_seq after it, entries it removed); None if the token is stale.

    Cumulative and idempotent; an ACK past the newest entry stops there (see :func:`ack`).
    """
    for _ in range(100):
        bounds = session_bounds(client_id)
        if bounds is None or bounds.token != token:
            return None
        target = min(seq, bounds.last_seq)
        if target <= bounds.acked_seq:
            return bounds.acked_seq, 0
        if advance_head(client_id, token, bounds.acked_seq, target, 0) is not None:
            return target, target - bounds.acked_seq
    raise StoreError(f"client {client_id}: the queue head kept moving under this ack")


def token_is_current(client_id: int, token: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {_table(Client)} WHERE id = %s AND token = %s", [client_id, token])
        return cursor.fetchone() is not None


def session_tokens(client_ids: Sequence[int]) -> dict[int, int]:
    """The current session token of each client (a relay process checks that its sessions are still the newest)."""
    tokens: dict[int, int] = {}
    ids = list(client_ids)
    for start in range(0, len(ids), 500):  # SQLite allows a limited number of parameters per statement
        chunk = ids[start : start + 500]
        marks = ", ".join("%s" for _ in chunk)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, token FROM {_table(Client)} WHERE id IN ({marks})", chunk)
            tokens.update(cursor.fetchall())
    return tokens


def last_seqs(client_ids: Sequence[int]) -> dict[int, int]:
    """The newest sequence number of each client's queue: what a long-poll waits to see grow (SQLite wake-up)."""
    if not client_ids:
        return {}
    marks = ", ".join("%s" for _ in client_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client_id, last_seq FROM {_table(QueueState)} WHERE client_id IN ({marks})", list(client_ids)
        )
        return dict(cursor.fetchall())


def record_history(items: Mapping[int, Sequence[HistoryItem]]) -> None:
    """Appends served events per client and keeps the newest HISTORY_LENGTH of each: one insert for all clients."""
    rows = [
        ServedEvent(
            client_id=client_id,
            seq=item.seq,
            kind=item.kind,
            schema_name=item.schema_name[:255],
            table_name=item.table_name[:255],
            served_at=item.served_at,
        )
        for client_id, served in items.items()
        for item in list(served)[-HISTORY_LENGTH:]
    ]
    if not rows:
        return
    table = _table(ServedEvent)
    with transaction.atomic():
        ServedEvent.objects.bulk_create(rows)
        with connection.cursor() as cursor:
            for client_id in items:
                cursor.execute(
                    f"DELETE FROM {table} WHERE client_id = %s AND id < (SELECT MIN(id) FROM"
                    f" (SELECT id FROM {table} WHERE client_id = %s ORDER BY id DESC LIMIT %s) newest)",
                    [client_id, client_id, HISTORY_LENGTH],
                )


def client_status(client_id: int) -> dict[str, Any] | None:
    """What STATUS reports: the client's counters, its filters and the worker's checkpoint."""
    client = Client.objects.filter(id=client_id).values("name", "acked_seq", "delivered_seq", "served").first()
    if client is None:
        return None
    state = QueueState.objects.filter(client_id=client_id).values("last_seq", "discarded", "max_queue").first() or {}
    checkpoint = Checkpoint.objects.order_by("-updated").values("binlog_file", "binlog_pos").first() or {}
    filters = list(
        Filter.objects.filter(client_id=client_id)
        .order_by("id")
        .values_list("event_mask", "discard_policy", "queue_limit", "schema_name", "table_name")
    )
    last = max(state.get("last_seq", 0), client["acked_seq"])
    return {
        **client,
        "last_seq": last,
        "discarded": state.get("discarded", 0),
        "max_queue": state.get("max_queue", 0),
        "binlog_file": checkpoint.get("binlog_file", ""),
        "binlog_pos": checkpoint.get("binlog_pos", 0),
        "filters": filters,
    }
