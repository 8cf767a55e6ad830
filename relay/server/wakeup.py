"""Long-poll wake-up: tell waiting FETCHes as soon as the worker commits new queue entries.

On PostgreSQL the worker runs ``pg_notify('relay_queues', '12,40')`` inside each batch transaction that queued
entries, naming the clients whose queues grew (an empty payload names every client); the notification is delivered
at commit. The server LISTENs on a dedicated psycopg2 connection watched by the event loop (``add_reader``), so a
waiter of those clients wakes within a millisecond of the commit, and no other waiter does: a busy client does not
make every idle long-poll read its queue again. Each notification bumps the generation of the clients it names: a
waiter takes its client's generation *before* it reads its queue, so a commit between its read and its wait still
wakes it.

On SQLite there is no notification: while someone waits, one task reads the newest seq of every waiting client's
queue (one indexed query) every :data:`SQLITE_INTERVAL` seconds and wakes the clients whose queue grew past what
they saw. Nobody waiting, no queries.

The same LISTEN connection hears ``relay_sessions`` (:data:`relay.store.channels.SESSION_CHANNEL`): each AUTH
announces the client's new token at commit, and the server closes its own older connection of that client, so that
with several relay processes the newest session wins within a millisecond (see :class:`SessionCallback`). The loop
reads the LISTEN connection only when its socket is readable, in the order the kernel reports the sockets ready: a
notification that arrived before a client's request is handled before that request, so a POLL served from the
read-ahead after a newer session was announced finds that read-ahead dropped, without a read of the LISTEN socket
per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connections

from relay import store
from relay.server.database import StoreThreads
from relay.store.channels import HEAD_CHANNEL, QUEUE_CHANNEL, SESSION_CHANNEL, notice_clients

log = logging.getLogger("relay.server")

SQLITE_INTERVAL = 0.01
#: However the wake-up works, a waiter re-reads its queue at least this often (a lost notification costs no more).
SAFETY_INTERVAL = 1.0
_RECONNECT_DELAY = 1.0

#: Called on the event loop with (client_id, token) of every new session announced by any relay process.
SessionCallback = Callable[[int, int], None]
#: Called with the clients whose queue heads the worker moved (None: possibly every client).
HeadsCallback = Callable[[frozenset[int] | None], None]


#: What a waiter saw before reading its queue: the generation of every client, and that of its own.
Generation = tuple[int, int]


class Waiter:
    """One long-polling request: the client, the newest seq it saw, the generation it saw."""

    __slots__ = ("client_id", "event", "generation", "seen_last")

    def __init__(self, client_id: int, seen_last: int, generation: Generation) -> None:
        self.client_id = client_id
        self.seen_last = seen_last
        self.generation = generation
        self.event = asyncio.Event()


class Notifier:
    """The common part: waiters by client, the generation numbers, and the task that watches the store."""

    #: Whether the worker's moves of queue heads are heard (HeadsCallback).
    hears_heads = False

    def __init__(self) -> None:
        self.generation = 0  # bumped when every waiter wakes
        self._generations: dict[int, int] = {}  # bumped when a client's waiters wake (one number per client)
        self._waiters: dict[int, set[Waiter]] = {}  # by client
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    def generation_of(self, client_id: int) -> Generation:
        """Taken before a read of the client's queue: a wake-up of the client after it ends the wait at once."""
        return self.generation, self._generations.get(client_id, 0)

    async def start(self) -> None:
        """Begins watching the store."""

    async def stop(self) -> None:
        """Stops watching and wakes every waiter (the server is shutting down)."""
        self._stopped = True
        self._wake_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _wake_all(self) -> None:
        self.generation += 1
        for waiting in self._waiters.values():
            for waiter in waiting:
                waiter.event.set()

    def _wake(self, client_ids: frozenset[int]) -> None:
        """Wakes the waiters of these clients (the others' queues did not change)."""
        generations = self._generations
        for client_id in client_ids:
            # Bumped whether anybody waits or not: a request between its read and its wait is told by it.
            generations[client_id] = generations.get(client_id, 0) + 1
            for waiter in self._waiters.get(client_id, ()):
                waiter.event.set()

    async def wait(self, waiter: Waiter, timeout: float) -> None:
        """Returns when the waiter's queue may have grown, when ``timeout`` passes, or when stopping."""
        if self._stopped or waiter.generation != self.generation_of(waiter.client_id):
            return
        self._waiters.setdefault(waiter.client_id, set()).add(waiter)
        self._waiter_added()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.event.wait(), min(timeout, SAFETY_INTERVAL))
        finally:
            waiting = self._waiters[waiter.client_id]
            waiting.discard(waiter)
            if not waiting:
                del self._waiters[waiter.client_id]

    def _waiter_added(self) -> None:
        pass


class PostgresNotifier(Notifier):
    hears_heads = True

    def __init__(self, on_session: SessionCallback | None = None, on_heads: HeadsCallback | None = None) -> None:
        super().__init__()
        self._on_session = on_session
        self._on_heads = on_heads
        self._conn: Any = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        conn = await loop.run_in_executor(None, self._connect)
        loop.add_reader(conn.fileno(), self._on_readable)
        self._task = asyncio.create_task(self._supervise(), name="relay-listen")

    def _connect(self) -> Any:
        """Opens the LISTEN connection (kept as ``_conn``) and returns it."""
        import psycopg2
        import psycopg2.extensions

        wrapper = connections["default"]
        params = wrapper.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)  # psycopg 3 only
        conn = psycopg2.connect(**params)
        conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
        with conn.cursor() as cursor:
            cursor.execute(f"LISTEN {QUEUE_CHANNEL}")
            cursor.execute(f"LISTEN {SESSION_CHANNEL}")
            cursor.execute(f"LISTEN {HEAD_CHANNEL}")
        self._conn = conn
        return conn

    def _on_readable(self) -> None:
        conn = self._conn
        try:
            conn.poll()
        except Exception as exc:  # noqa: BLE001 - a dead LISTEN connection is replaced by _supervise
            log.warning("LISTEN %s connection failed: %s", QUEUE_CHANNEL, exc)
            self._drop()
            return
        if not conn.notifies:
            return
        notifies = list(conn.notifies)
        conn.notifies.clear()
        woken: set[int] = set()
        everyone = False
        for notify in notifies:
            if notify.channel == SESSION_CHANNEL:
                self._session_announced(notify.payload)
                continue
            if notify.channel == HEAD_CHANNEL:
                if self._on_heads is not None:
                    self._on_heads(notice_clients(notify.payload))
                continue
            clients = notice_clients(notify.payload)
            if clients is None:
                everyone = True
            else:
                woken |= clients
        if everyone:
            self._wake_all()
        elif woken:
            self._wake(frozenset(woken))

    def _heads_unheard(self) -> None:
        """No one listened for a while: every read-ahead may hold entries the worker discarded meanwhile."""
        if self._on_heads is not None:
            self._on_heads(None)

    def _session_announced(self, payload: str) -> None:
        if self._on_session is None:
            return
        try:
            client_id, token = (int(part) for part in payload.split(":"))
        except ValueError:
            log.warning("ignoring a malformed %s notification: %r", SESSION_CHANNEL, payload)
            return
        self._on_session(client_id, token)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(conn.fileno())
            with contextlib.suppress(Exception):
                conn.close()
        self._wake_all()  # waiters re-read now rather than miss a commit while no one listens
        self._heads_unheard()

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            if self._conn is None:
                try:
                    conn = await loop.run_in_executor(None, self._connect)
                except Exception as exc:  # noqa: BLE001 - retried; waiters fall back to SAFETY_INTERVAL
                    log.warning("cannot LISTEN %s: %s; retrying", QUEUE_CHANNEL, exc)
                    await asyncio.sleep(_RECONNECT_DELAY)
                    continue
                loop.add_reader(conn.fileno(), self._on_readable)
                self._wake_all()
                self._heads_unheard()
            # Nothing to do until the connection drops; check now and then that it still lives.
            await asyncio.sleep(_RECONNECT_DELAY)
            if self._conn is not None and self._conn.closed:
                self._drop()

    async def stop(self) -> None:
        await super().stop()
        self._drop()


class PollingNotifier(Notifier):
    """SQLite: poll the waiting clients' last_seq while anybody waits."""

    def __init__(self, threads: StoreThreads, interval: float = SQLITE_INTERVAL) -> None:
        super().__init__()
        self._threads = threads
        self._interval = interval

    def _waiter_added(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch(), name="relay-queue-watch")

    async def _watch(self) -> None:
        while self._waiters and not self._stopped:
            await asyncio.sleep(self._interval)
            waiters = [waiter for waiting in self._waiters.values() for waiter in waiting]
            if not waiters:
                break
            try:
                lasts = await self._threads.run(store.last_seqs, sorted({w.client_id for w in waiters}))
            except DatabaseError as exc:
                log.warning("queue watch failed: %s", exc)
                continue
            for waiter in waiters:
                if lasts.get(waiter.client_id, 0) > waiter.seen_last:
                    waiter.event.set()


def make_notifier(
    threads: StoreThreads, on_session: SessionCallback | None = None, on_heads: HeadsCallback | None = None
) -> Notifier:
    if connections["default"].vendor == "postgresql":
        return PostgresNotifier(on_session, on_heads)
    return PollingNotifier(threads)
