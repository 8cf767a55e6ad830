"""Queues for the tests: filled the way the worker fills them, consumed the way a relay session consumes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from relay import store
from relay.models import Change, QueueEntry, QueueState
from relay.server.queues import StaleSession
from relay.store import Bounds, HistoryItem, StoredEntry, rowcodec
from relay.store.channels import QUEUE_CHANNEL, queue_notice


def enqueue(
    client_id: int,
    rows: Sequence[dict[str, Any]],
    *,
    schema: str = "shop",
    table: str = "orders",
    kind: int = 1,
    binlog_file: str = "mysql-bin.000042",
    timestamp: int = 1_700_000_000,
    pos: int = 4000,
    before: Sequence[dict[str, Any]] | None = None,
    notify: bool = True,
) -> list[int]:
    """Appends changes to a client's queue in one transaction, as the worker does (and notifies on PostgreSQL).

    ``rows`` are the after images (the before images for kind 4); ``before`` the before images of updates.
    Returns the sequence numbers given.
    """
    seqs = []
    with transaction.atomic():
        state, _ = QueueState.objects.select_for_update().get_or_create(client_id=client_id)
        for index, row in enumerate(rows):
            names = list(row)
            values = [row[name] for name in names]
            if kind == 1:
                data = rowcodec.encode(names, None, values)
            elif kind == 4:
                data = rowcodec.encode(names, values, None)
            else:
                assert before is not None
                data = rowcodec.encode(names, [before[index][name] for name in names], values)
            change = Change.objects.create(
                schema_name=schema,
                table_name=table,
                kind=kind,
                binlog_file=binlog_file,
                binlog_pos=pos + index,
                row_index=index,
                timestamp=timestamp,
                gtid=f"0-1-{index + 1}",
                data=data,
            )
            state.last_seq += 1
            QueueEntry.objects.create(client_id=client_id, seq=state.last_seq, change=change)
            seqs.append(state.last_seq)
        state.save()
        if notify and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [QUEUE_CHANNEL, queue_notice([client_id])])
    return seqs


def queue_size(client_id: int) -> int:
    """Entries not yet acknowledged, from the bounds the relay server reads."""
    bounds = store.session_bounds(client_id)
    assert bounds is not None, f"no client with id {client_id}"
    return max(0, bounds.last_seq - bounds.acked_seq)


class Consumer:
    """A session consuming its client's queue through the store calls of the relay server (relay/server/queues.py).

    The same primitives in the same order (bounds, read, ACK, then the write of what was delivered, and the History
    column), one request at a time: no read-ahead, and a request's deliveries are written before it returns instead
    of a few milliseconds later. A session replaced by a newer AUTH raises StaleSession, as the server's does.
    """

    def __init__(self, session: store.Session) -> None:
        self.client_id = session.client_id
        self.token = session.token
        #: The head as this session knows it, the manual-ack cursor, and the newest seq seen: SessionQueue's state.
        self.acked = self.delivered = self.last = 0
        self._apply(store.session_bounds(self.client_id))

    def _apply(self, bounds: Bounds | None) -> None:
        if bounds is None or bounds.token != self.token:
            raise StaleSession
        self.acked = max(self.acked, bounds.acked_seq)  # the store moved the head (discard policy, purge, ACK)
        self.delivered = max(self.delivered, self.acked)
        self.last = max(bounds.last_seq, self.acked)

    def _delivered(self, entries: list[StoredEntry], *, auto_ack: bool) -> None:
        top = entries[-1].seq
        if auto_ack:
            self.acked = top
        self.delivered = max(self.delivered, top)
        self._apply(store.sync_session(self.client_id, self.token, self.acked, self.delivered, len(entries)))
        now = timezone.now()
        items = [HistoryItem(entry.seq, entry.kind, entry.schema_name, entry.table_name, now) for entry in entries]
        store.record_history({self.client_id: items})

    def poll(self) -> tuple[StoredEntry, int] | None:
        """POLL: the head of the queue (auto-ack) and the number of entries left; None when the queue is empty."""
        self._apply(store.session_bounds(self.client_id))
        head = store.read_entries(self.client_id, self.acked, 1)
        if not head:
            return None
        self._delivered(head, auto_ack=True)
        return head[0], max(0, self.last - head[0].seq)

    def fetch(self, max_events: int, *, manual_ack: bool = False, ack_upto: int = 0) -> tuple[list[StoredEntry], int]:
        """FETCH: up to ``max_events`` entries after the head (auto-ack) or after what this session sent (manual ack),
        having acknowledged up to ``ack_upto`` first; and the number of entries after them. ([], 0) when none."""
        self._apply(store.session_bounds(self.client_id))
        if ack_upto and store.ack_session(self.client_id, self.token, ack_upto) is not None:
            self._apply(store.session_bounds(self.client_id))
        start = self.delivered if manual_ack else self.acked
        entries = store.read_entries(self.client_id, start, max_events) if self.last > start else []
        if not entries:
            return [], 0
        self._delivered(entries, auto_ack=not manual_ack)
        return entries, max(0, self.last - entries[-1].seq)

    def ack(self, seq: int) -> tuple[int, int]:
        """ACK: (acked_seq after it, entries it removed); cumulative and idempotent."""
        result = store.ack_session(self.client_id, self.token, seq)
        if result is None:
            raise StaleSession
        self._apply(store.session_bounds(self.client_id))
        return result
