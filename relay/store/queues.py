"""The consuming side of the queues: the relay server's session primitives, and the administration of a queue.

A client's queue is the contiguous range of sequence numbers ``(acked_seq, last_seq]``. The worker appends (it owns
``last_seq``, relay/worker/ingest.py); everything here consumes or reads, and moves the head by compare-and-set on
``Client.acked_seq``, so a POLL never waits for the worker's batch to commit. The session primitives are one SQL
statement each, in raw SQL because they run once or twice per POLL, and each checks the session token so that a session
replaced by a newer AUTH (in any process) can no longer consume.
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.db.models.signals import pre_delete

from relay.models import MAX_RUN, Change, Client, QueueEntry, QueueState, ServedEvent
from relay.store.errors import StoreError
from relay.store.sql import now, table

HISTORY_LENGTH = 10


class Bounds(NamedTuple):
    """A client's queue as the server sees it: (acked_seq, last_seq] are queued, up to delivered_seq were sent."""

    acked_seq: int
    delivered_seq: int
    last_seq: int
    token: int


class StoredEntry(NamedTuple):
    """A queue entry joined with its change, as :func:`read_entries` returns it (``data``: relay/store/rowcodec.py)."""

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
    #: The change's id: what the relay server's caches of rendered changes are keyed by (0: not from the store).
    change_id: int = 0


class HistoryItem(NamedTuple):
    seq: int
    kind: int
    schema_name: str
    table_name: str
    served_at: datetime.datetime


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


def queue_heads(client_id: int | None = None) -> dict[int, tuple[int, int]]:
    """(change id, source timestamp) of the head entry of every client's backlog (or one client's), in one statement
    whatever the number of clients: each head's run is found by the (client, seq) index within MAX_RUN of it."""
    q = connection.ops.quote_name
    one = "" if client_id is None else " WHERE c.id = %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.id, ch.id, ch.{q('timestamp')} FROM {table(Client)} c"
            f" JOIN {table(QueueState)} s ON s.client_id = c.id AND s.last_seq > c.acked_seq"
            f" JOIN {table(QueueEntry)} e ON e.client_id = c.id AND e.seq <= c.acked_seq + 1"
            f" AND e.seq > c.acked_seq + 1 - %s AND e.seq + e.{q('count')} > c.acked_seq + 1"
            f" JOIN {table(Change)} ch ON ch.id = e.change_id + c.acked_seq + 1 - e.seq"
            f"{one}",
            [MAX_RUN] if client_id is None else [MAX_RUN, client_id],
        )
        return {row[0]: (row[1], row[2]) for row in cursor.fetchall()}


def session_bounds(client_id: int) -> Bounds | None:
    """The queue bounds and the current session token in one statement; None for an unknown client."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.acked_seq, c.delivered_seq, COALESCE(q.last_seq, 0), c.token FROM {table(Client)} c"
            f" LEFT JOIN {table(QueueState)} q ON q.client_id = c.id WHERE c.id = %s",
            [client_id],
        )
        row = cursor.fetchone()
    return None if row is None else Bounds(*row)


#: A change whose stored text is longer than this is not read with the others: it is read alone, and only while the
#: read's byte budget allows, so that a queue of very large rows (a LONGBLOB reaches 1 GiB) never loads a whole
#: read-ahead of them into the relay's memory.
LARGE_CHANGE = 1 << 20
#: What one read of a queue loads at most (one change at least, whatever its size).
READ_BYTE_BUDGET = 16 << 20
#: Ids in one statement at most (SQLite's variable limit).
_ID_CHUNK = 500

#: A change as a reader keeps it: a StoredEntry less its seq (``entry[1:]``), a plain tuple.
ChangeFields = tuple[Any, ...]
#: A change a reader holds: its fields and its check text (:func:`change_check`), which the reader keeps with it,
#: then whatever else the reader keeps (the relay server: its record).
KnownChange = tuple[ChangeFields, str, *tuple[Any, ...]]
#: The caller's copies of changes already read, by change id (relay/server/render.py): a change found here is not
#: read again, only checked (:func:`read_entries`).
KnownChanges = Callable[[int], KnownChange | None]
#: Where ChangeFields holds what a held copy is checked by.
_KIND, _FILE, _POS, _ROW, _TIMESTAMP, _GTID, _DATA = (
    StoredEntry._fields.index(name) - 1
    for name in ("kind", "binlog_file", "binlog_pos", "row_index", "timestamp", "gtid", "data")
)


def change_check(fields: ChangeFields) -> str:
    """What a held copy of a change is checked by: its binlog coordinates, timestamp, kind, GTID and stored size, as
    the store writes them for a range of changes (``_checks_of_range``). Ids are handed out once per store, so these
    differ from the copy's only where a store restored or recreated under a running reader hands the id out again
    (for another row: a row at the same coordinates of the same source is the same row)."""
    return (
        f"{fields[_POS]},{fields[_ROW]},{fields[_TIMESTAMP]},{len(fields[_DATA])},{fields[_KIND]},{fields[_GTID]},"
        f"{fields[_FILE]}"
    )


def _check_expression() -> str:
    """The SQL expression of a stored change's check: the text :func:`change_check` makes of a held copy."""
    q = connection.ops.quote_name
    if connection.vendor == "postgresql":
        return f"concat_ws(',', binlog_pos, row_index, {q('timestamp')}, octet_length(data), kind, gtid, binlog_file)"
    return (
        f"binlog_pos || ',' || row_index || ',' || {q('timestamp')} || ',' || length(data) || ',' || kind || ','"
        " || gtid || ',' || binlog_file"
    )


def _checks_of_range(where: str) -> str:
    """One statement giving the checks (:func:`change_check`) of the changes matching ``where``, in id order,
    joined by ';': the check of a few hundred held changes costs one row instead of one each. Only a text equal
    to the held copies' own proves them current; anything else (a change gone, one that differs, an order the
    database did not keep) sends the range to the change-by-change check."""
    if connection.vendor == "postgresql":
        return f"SELECT string_agg({_check_expression()}, ';' ORDER BY id) FROM {table(Change)} WHERE {where}"
    # SQLite before 3.44 has no ORDER BY in an aggregate: its group_concat follows the ordered subquery.
    return (
        f"SELECT group_concat(c, ';') FROM (SELECT {_check_expression()} AS c FROM {table(Change)} WHERE {where}"
        " ORDER BY id)"
    )


def _id_ranges(ids: list[int]) -> Iterator[tuple[str, list[int], list[int]]]:
    """WHERE clauses over sorted, distinct ``ids``, with their parameters and the ids each covers: a range where they
    are consecutive (a broad subscription), an IN list of at most _ID_CHUNK otherwise."""
    for at in range(0, len(ids), _ID_CHUNK):
        chunk = ids[at : at + _ID_CHUNK]
        if chunk[-1] - chunk[0] + 1 == len(chunk):
            yield "id >= %s AND id <= %s", [chunk[0], chunk[-1]], chunk
        else:
            yield f"id IN ({', '.join('%s' for _ in chunk)})", chunk, chunk


def _stored_size() -> str:
    """The SQL function giving a stored text's size in bytes. Characters on SQLite: the stored forms are ASCII, so
    the two agree."""
    return "octet_length" if connection.vendor == "postgresql" else "length"


def _current_copies(cursor: Any, held: dict[int, KnownChange]) -> dict[int, tuple[ChangeFields, int]]:
    """Of the held copies (ascending ids), those the store holds as they are, each with its stored size: a range
    whose checks match as a whole is current at once; otherwise its changes' checks are compared one by one."""
    current: dict[int, tuple[ChangeFields, int]] = {}
    for where, params, chunk in _id_ranges(list(held)):
        cursor.execute(_checks_of_range(where), params)
        if cursor.fetchone()[0] == ";".join([held[change_id][1] for change_id in chunk]):
            matching = chunk
        else:
            cursor.execute(f"SELECT id, {_check_expression()} FROM {table(Change)} WHERE {where}", params)
            matching = [change_id for change_id, check in cursor.fetchall() if check == held[change_id][1]]
        for change_id in matching:
            fields = held[change_id][0]
            current[change_id] = (fields, len(fields[_DATA]))
    return current


@dataclass(slots=True)
class ReadShape:
    """What a read of a queue went through, for its reader's next read: the runs (QueueEntry rows) it covered."""

    runs: int = 0


def read_entries(
    client_id: int,
    after_seq: int,
    limit: int,
    byte_budget: int = READ_BYTE_BUDGET,
    known: KnownChanges | None = None,
    check_runs: bool = True,
    shape: ReadShape | None = None,
) -> list[StoredEntry]:
    """Up to ``limit`` entries with seq > ``after_seq``, oldest first, each with its change: indexed queries only.

    The entries stop early once their changes' stored text reaches ``byte_budget`` (the first entry always comes).

    ``known``: changes the caller holds already. Those are only checked (:func:`change_check`: binlog coordinates,
    timestamp, kind, GTID and stored size; one text per run of the queue, read with the run), which is most of the
    cost of a read saved when many clients queue the same changes; one whose check differs from the copy's (a store
    restored or recreated under a running server hands out ids again) is read whole, as if unknown. ``check_runs``
    False: the reader expects to hold none of them (it is the first to read these changes), or the runs to be short
    (a run's check is a subquery of its own), so the runs come without their checks; the copies it does hold are
    checked afterwards, a range of ids at a time. ``shape``, if given, is filled in.
    """
    if limit <= 0:
        return []
    q = connection.ops.quote_name
    size = _stored_size()
    upper = after_seq + limit
    with connection.cursor() as cursor:
        # Entries are runs (QueueEntry): entry seq + i is change change_id + i. The runs overlapping (after, upper]
        # start within MAX_RUN of it, so the (client, seq) index bounds the scan whatever the queue's length. The
        # runs first, then their changes by id: one query joining on the id range lets the planner pick a plan
        # that compares every run with every change (seconds per read on a queue of single entries). With held
        # copies, each run comes with the check of its changes in the read (a subquery bounded by the run's own id
        # range): a run the reader holds whole is then current without another statement.
        run_check, params = "", [client_id, after_seq - MAX_RUN, upper, after_seq + 1]
        if known is not None and check_runs:
            greatest, least = ("GREATEST", "LEAST") if connection.vendor == "postgresql" else ("MAX", "MIN")
            ids_of_run = (
                f"id >= e.change_id + {greatest}(0, %s - e.seq)"
                f" AND id < e.change_id + {least}(e.{q('count')}, %s - e.seq)"
            )
            run_check = f", ({_checks_of_range(ids_of_run)})"
            params = [after_seq + 1, upper + 1, *params]
        cursor.execute(
            f"SELECT e.seq, e.change_id, e.{q('count')}{run_check} FROM {table(QueueEntry)} e WHERE e.client_id = %s"
            f" AND e.seq > %s AND e.seq <= %s AND e.seq + e.{q('count')} > %s ORDER BY e.seq",
            params,
        )
        seqs: list[int] = []
        change_ids: list[int] = []
        # Each change as (entry less its seq, stored size): data is None for a large change not read yet.
        changes: dict[int, tuple[ChangeFields, int]] = {}
        #: Held copies still to check one range or one change at a time.
        held: dict[int, KnownChange] = {}
        runs = cursor.fetchall()
        if shape is not None:
            shape.runs = len(runs)
        for seq, change_id, count, *checks in runs:
            first = max(seq, after_seq + 1)
            stop = min(seq + count, upper + 1)
            seqs.extend(range(first, stop))
            run = range(change_id + first - seq, change_id + stop - seq)
            change_ids.extend(run)
            if not checks or known is None:  # read without checks
                continue
            copies = [known(change_id) for change_id in run]
            whole = [copy for copy in copies if copy is not None]
            if len(whole) == len(copies) and checks[0] == ";".join([copy[1] for copy in whole]):
                for change_id, current in zip(run, whole, strict=True):
                    changes[change_id] = (current[0], len(current[0][_DATA]))
            else:
                held.update((change_id, copy) for change_id, copy in zip(run, copies, strict=True) if copy is not None)
        if not seqs:
            return []
        distinct = set(change_ids)
        if known is not None and not run_check:
            held = {change_id: copy for change_id in distinct if (copy := known(change_id)) is not None}
        if held:
            unsure = {change_id: held[change_id] for change_id in sorted(held) if change_id not in changes}
            changes.update(_current_copies(cursor, unsure))
        wanted = sorted(distinct.difference(changes))
        # A change's data comes with its fields when it is small enough for all of them to fit the byte budget;
        # a larger one's comes later, if the budget has room for it (below): a read of 10,000 changes of almost
        # 1 MiB would otherwise hold 10 GB to send a few MiB.
        inline = min(LARGE_CHANGE, byte_budget // max(1, len(wanted)))
        for where, params, _chunk in _id_ranges(wanted):
            cursor.execute(
                f"SELECT kind, schema_name, table_name, binlog_file, binlog_pos, row_index, {q('timestamp')},"
                f" gtid, CASE WHEN {size}(data) > %s THEN NULL ELSE data END, id, {size}(data)"
                f" FROM {table(Change)} WHERE {where}",
                [inline, *params],
            )
            for row in cursor.fetchall():
                changes[row[9]] = (row[:10], row[10])
        entries: list[StoredEntry] = []
        loaded = 0
        make = tuple.__new__  # a StoredEntry from one tuple, without NamedTuple's argument handling
        for index, (seq, change_id) in enumerate(zip(seqs, change_ids, strict=True)):
            change = changes.get(change_id)
            if change is None:
                continue  # a change missing (entries written by hand) leaves a gap, as before
            fields, stored_size = change
            if entries and loaded + stored_size > byte_budget:
                break
            if fields[_DATA] is None:  # read now that the budget has room, with the next ones it has room for
                _read_data(cursor, changes, change_ids[index:], byte_budget - loaded)
                fields = changes[change_id][0]
            loaded += stored_size
            entries.append(make(StoredEntry, (seq, *fields)))
    return entries


def _read_data(cursor: Any, changes: dict[int, tuple[ChangeFields, int]], following: list[int], room: int) -> None:
    """Reads the data of the first of ``following`` (its data not read yet), and of those after it whose data was
    not read either while they fit in ``room`` bytes (at most _ID_CHUNK), in one statement; the changes get their
    data in place."""
    ids: list[int] = []
    for change_id in following:
        change = changes.get(change_id)
        if change is None:
            continue
        if ids and (change[1] > room or change[0][_DATA] is not None or len(ids) == _ID_CHUNK):
            break
        ids.append(change_id)
        room -= change[1]
    cursor.execute(f"SELECT id, data FROM {table(Change)} WHERE id IN ({', '.join('%s' for _ in ids)})", ids)
    for change_id, data in cursor.fetchall():
        fields, stored_size = changes[change_id]
        changes[change_id] = ((*fields[:_DATA], data, *fields[_DATA + 1 :]), stored_size)


def advance_head(client_id: int, token: int, expected_acked: int, new_acked: int, served: int) -> int | None:
    """Moves the queue head from ``expected_acked`` to ``new_acked`` (auto-ack delivery of ``served`` entries).

    Compare-and-set: nothing happens unless the session token is still current and nobody moved the head meanwhile
    (another session, the worker's unqueue-oldest policy, a purge). Returns the queue's last_seq on success, None
    when the compare failed: the caller re-reads the bounds.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table(Client)} SET acked_seq = %s,"
            f" delivered_seq = CASE WHEN delivered_seq > %s THEN delivered_seq ELSE %s END,"
            f" served = served + %s, last_seen = %s WHERE id = %s AND token = %s AND acked_seq = %s"
            f" RETURNING (SELECT last_seq FROM {table(QueueState)} WHERE client_id = %s)",
            [new_acked, new_acked, new_acked, served, now(), client_id, token, expected_acked, client_id],
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
            f"UPDATE {table(Client)} SET acked_seq = CASE WHEN acked_seq > %s THEN acked_seq ELSE %s END,"
            f" delivered_seq = CASE WHEN delivered_seq > %s THEN delivered_seq ELSE %s END,"
            f" served = served + %s, last_seen = %s WHERE id = %s AND token = %s"
            f" RETURNING acked_seq, delivered_seq,"
            f" COALESCE((SELECT last_seq FROM {table(QueueState)} WHERE client_id = %s), 0), token",
            [acked_seq, acked_seq, delivered_seq, delivered_seq, served, now(), client_id, token, client_id],
        )
        row = cursor.fetchone()
    return None if row is None else Bounds(*row)


def ack_session(client_id: int, token: int, seq: int) -> tuple[int, int] | None:
    """ACK for a session: (acked_seq after it, entries it removed); None if the token is stale.

    Cumulative and idempotent; an ACK past the newest entry stops there. It is not limited to what this session
    delivered: a client that reconnected may acknowledge what it received in its previous session (PROTOCOL.md, ACK).
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


def last_seqs(client_ids: Sequence[int]) -> dict[int, int]:
    """The newest sequence number of each client's queue: what a long-poll waits to see grow (SQLite wake-up)."""
    if not client_ids:
        return {}
    marks = ", ".join("%s" for _ in client_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client_id, last_seq FROM {table(QueueState)} WHERE client_id IN ({marks})", list(client_ids)
        )
        return dict(cursor.fetchall())


def record_history(items: Mapping[int, Sequence[HistoryItem]]) -> None:
    """Appends served events per client and keeps the newest HISTORY_LENGTH of each: an insert and a delete for all
    clients (in pages of at most 100 rows and 500 clients: SQLite's limit on a statement's parameters).

    A client deleted since it was served (the admin's delete) has no items written: one such row would fail the
    whole transaction at its foreign key, and every other client's items with it. On PostgreSQL the clients written
    for are share-locked first, so that a delete waits for this short transaction instead of slipping in between."""
    adapt = connection.ops.adapt_datetimefield_value
    clients = list(items)
    served_table = table(ServedEvent)
    with transaction.atomic(), connection.cursor() as cursor:
        existing: set[int] = set()
        lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
        for at in range(0, len(clients), 500):
            chunk = clients[at : at + 500]
            cursor.execute(
                f"SELECT id FROM {table(Client)} WHERE id IN ({', '.join('%s' for _ in chunk)}){lock}", chunk
            )
            existing.update(row[0] for row in cursor.fetchall())
        clients = [client_id for client_id in clients if client_id in existing]
        rows = [
            (client_id, item.seq, item.kind, item.schema_name[:255], item.table_name[:255], adapt(item.served_at))
            for client_id in clients
            for item in list(items[client_id])[-HISTORY_LENGTH:]
        ]
        if not rows:
            return
        for at in range(0, len(rows), 100):
            page = rows[at : at + 100]
            cursor.execute(
                f"INSERT INTO {served_table} (client_id, seq, kind, schema_name, table_name, served_at) VALUES "
                + ", ".join("(%s, %s, %s, %s, %s, %s)" for _ in page),
                [value for row in page for value in row],
            )
        for at in range(0, len(clients), 500):
            chunk = clients[at : at + 500]
            marks = ", ".join("%s" for _ in chunk)
            cursor.execute(
                f"DELETE FROM {served_table} WHERE client_id IN ({marks}) AND id IN (SELECT id FROM (SELECT id,"
                f" row_number() OVER (PARTITION BY client_id ORDER BY id DESC) AS newer FROM {served_table}"
                f" WHERE client_id IN ({marks})) ranked WHERE newer > %s)",
                [*chunk, *chunk, HISTORY_LENGTH],
            )


def purge_queue(client_id: int) -> int:
    """Empties a client's queue; returns the number of entries dropped."""
    with transaction.atomic():
        bounds = session_bounds(client_id)
        if bounds is None:
            raise StoreError(f"no client with id {client_id}")
        acked, last = bounds.acked_seq, bounds.last_seq
        Client.objects.filter(id=client_id).update(
            acked_seq=Greatest(F("acked_seq"), Value(last)), delivered_seq=Greatest(F("delivered_seq"), Value(last))
        )
        QueueEntry.objects.filter(client_id=client_id, seq__lte=last).delete()
    return max(0, last - acked)


def delete_client(client_id: int) -> None:
    with transaction.atomic():
        lock_for_deletion(Client, [client_id])
        QueueEntry.objects.filter(client_id=client_id).delete()
        Client.objects.filter(id=client_id).delete()


def lock_for_deletion(model: type[Client], ids: list[int]) -> None:
    """Before clients are deleted, in the deleting transaction: waits for a worker batch writing to them to commit
    (it holds them FOR KEY SHARE, relay.worker.ingest), so that the entries it wrote are deleted with them, and a
    batch after sees them gone. Connected to Client's pre_delete, so the admin's deletions take it too."""
    if connection.vendor == "postgresql" and ids:
        list(model.objects.select_for_update().filter(id__in=ids).values_list("id", flat=True))


def _client_deleted(sender: type[Client], instance: Client, **kwargs: Any) -> None:
    lock_for_deletion(sender, [instance.id])


pre_delete.connect(_client_deleted, sender=Client, dispatch_uid="relay.store.queues.client_deleted")
