"""The History column: the last events served to each client, written in batches off the request path.

A POLL must not pay a second store round trip to record what it served, nor build the column's items: a reply is
noted in memory as it is (its entries and the time it went out; the newest ``HISTORY_LENGTH`` replies per client,
which hold at least the newest ``HISTORY_LENGTH`` entries). The items are made in the store thread that writes them,
for every client that served something, in one transaction, every :data:`FLUSH_INTERVAL` seconds and at shutdown. If
the relay dies in between, the dashboard's history misses at most that last interval; the queues themselves are not
affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections import deque
from collections.abc import Sequence

from django.conf import settings
from django.db import DatabaseError

from relay import store
from relay.server.database import StoreThreads
from relay.store import HISTORY_LENGTH, HistoryItem, StoredEntry

log = logging.getLogger("relay.server")

FLUSH_INTERVAL = 0.5


#: A reply's entries and the time it went out (Unix seconds).
Served = tuple[Sequence[StoredEntry], float]


class HistoryRecorder:
    def __init__(self, threads: StoreThreads, interval: float = FLUSH_INTERVAL) -> None:
        self._threads = threads
        self._interval = interval
        self._pending: dict[int, deque[Served]] = {}
        self._task: asyncio.Task[None] | None = None

    def served(self, client_id: int, entries: Sequence[StoredEntry]) -> None:
        """Notes a reply that went out (on the request path: the items are made when they are written).

        Only the reply's newest HISTORY_LENGTH entries are kept: holding a whole FETCH batch until the next flush
        would keep hundreds of entries per reply alive past the young collections, which then walk them again and
        again (the cyclic collector's cost grows with what survives)."""
        replies = self._pending.get(client_id)
        if replies is None:
            replies = self._pending[client_id] = deque(maxlen=HISTORY_LENGTH)
        replies.append((entries[-HISTORY_LENGTH:], time.time()))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="relay-history")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

    async def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        try:
            await self._threads.run(_record, pending)
        except DatabaseError as exc:
            log.warning("could not record the served history: %s", exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


def _record(pending: dict[int, deque[Served]]) -> None:
    """Writes the noted replies as the History column's items (in the store thread)."""
    tz = datetime.UTC if settings.USE_TZ else None
    items: dict[int, list[HistoryItem]] = {}
    for client_id, replies in pending.items():
        newest: deque[HistoryItem] = deque(maxlen=HISTORY_LENGTH)
        for entries, at in replies:
            served_at = datetime.datetime.fromtimestamp(at, tz)
            for entry in entries[-HISTORY_LENGTH:]:
                newest.append(HistoryItem(entry.seq, entry.kind, entry.schema_name, entry.table_name, served_at))
        items[client_id] = list(newest)
    store.record_history(items)
