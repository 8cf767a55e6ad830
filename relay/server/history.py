"""The History column: the last events served to each client, written in batches off the request path.

A POLL must not pay a second store round trip to record what it served. Deliveries are noted in memory (the newest
``HISTORY_LENGTH`` per client) and written for every client that served something, in one transaction, every
:data:`FLUSH_INTERVAL` seconds and at shutdown. If the relay dies in between, the dashboard's history misses at most
that last interval; the queues themselves are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence

from django.db import DatabaseError
from django.utils import timezone

from relay import store
from relay.server.database import StoreThreads
from relay.store import HISTORY_LENGTH, HistoryItem, StoredEntry

log = logging.getLogger("relay.server")

FLUSH_INTERVAL = 0.5


class HistoryRecorder:
    def __init__(self, threads: StoreThreads, interval: float = FLUSH_INTERVAL) -> None:
        self._threads = threads
        self._interval = interval
        self._pending: dict[int, deque[HistoryItem]] = {}
        self._task: asyncio.Task[None] | None = None

    def served(self, client_id: int, entries: Sequence[StoredEntry]) -> None:
        now = timezone.now()
        items = self._pending.get(client_id)
        if items is None:
            items = self._pending[client_id] = deque(maxlen=HISTORY_LENGTH)
        for entry in entries[-HISTORY_LENGTH:]:
            items.append(HistoryItem(entry.seq, entry.kind, entry.schema_name, entry.table_name, now))

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
            await self._threads.run(store.record_history, pending)
        except DatabaseError as exc:
            log.warning("could not record the served history: %s", exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()
