"""A session's view of its client's queue: the read-ahead, and write-behind of what it delivered.

A session's state lives on the event loop (this object); the store work runs in the store threads as plain
functions that take a snapshot and return results, so no state is shared between threads.

* **Read-ahead**: a POLL session reads the next :data:`READ_AHEAD` entries of its queue in one query and serves
  POLLs from memory; an empty read-ahead costs one store call that also writes what is pending (below), and one
  running low is topped up by the write-behind's own store call. The entries are rendered as they are read, in the
  store thread (:class:`render.PollRenderCache`, shared by the sessions): a POLL served from the read-ahead only adds
  its QueueSize and checksum (:meth:`SessionQueue.take`, called by the connection without a task).
* **Write-behind**: what a session delivers (the head it moved with POLL or auto-ack FETCH, its manual-ack cursor,
  its served count) is written to the store *after* the reply is sent, by one UPDATE that coalesces every delivery
  since the previous one (:meth:`SessionQueue.schedule_sync`), :data:`SYNC_DELAY` after the first of them; one is in
  flight per session at a time, so the store lags a busy session by a few milliseconds. Every store call of the
  session writes what is pending first.
  A relay crash therefore never loses an event: what was sent but not yet written is delivered again (auto-ack is
  at-least-once, and a reply the client never read is never lost either).
* **Ownership**: every write checks the session token. When a newer session (in any process) took over, the write
  is refused, the session is marked stale, and its next request gets 0xFB. Positions only move forward: the store
  wins when it is ahead (the worker's unqueue-oldest policy, a purge, an ACK), and the read-ahead drops what the
  store has passed.
* **Snapshot markers** (the SNAPSHOT_START/END records around a table's snapshot) are for FETCH only: a POLL session
  passes over them, moving its head past them as if delivered, and serves the next entry; a queue holding only
  markers answers EMPTY, its head moved past them all the same. They are not counted as served, nor listed in the
  History column: both tell what the client received. POLL's QueueSize leaves out the markers read ahead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from django.db import DatabaseError

from binlog.constants import SNAPSHOT_MARKERS
from relay import store
from relay.server import render
from relay.server.database import StoreThreads
from relay.store import Bounds, StoredEntry

log = logging.getLogger("relay.server")
T = TypeVar("T")

#: Entries a POLL session reads ahead of its head (and reads more of, with its write-behind, once it holds fewer).
READ_AHEAD = 128
#: Bytes a POLL read-ahead holds at most, one entry at least whatever its size (a top-up reads what is left of it).
#: A session keeps its read-ahead while its client is idle (up to the idle timeout), its changes and their rendered
#: replies, so this bounds what one POLL client holds in the server: about twice this. Small rows still come 128 at
#: a time; large ones a few at a time, each read costing little next to sending them.
POLL_READ_BYTES = 1 << 20
#: A FETCH read-ahead is kept only while its reply is at most this many times its batch's byte budget. A session keeps
#: it while its client is idle (up to the idle timeout), its changes with it, so this bounds what one auto-ack FETCH
#: client holds in the server: about twice this. A larger one (a row change larger than the budget, which comes
#: alone) is let go as soon as it is read, and the next FETCH reads it again.
FETCH_READ_AHEAD_BUDGETS = 2
#: Deliveries are written at most this long after the reply that made them (plus one store round trip).
SYNC_DELAY = 0.005
#: A POLL reply's QueueSize counts the entries queued up to the session's last read of its queue's bounds; past this
#: age (seconds) the bounds are read again before a reply is served from the read-ahead. A client polling steadily
#: keeps them fresher than this through its write-behind; one that polls after a pause gets the entries queued
#: meanwhile counted.
BOUNDS_FRESH = 0.05
_RETRY_DELAY = 0.5


class StaleSession(Exception):
    """The session's token is no longer the client's current one: a newer AUTH replaced it (in any process)."""


class Pending(NamedTuple):
    """What a session delivered and has not written to the store yet."""

    acked: int
    delivered: int
    served: int


@dataclass(slots=True)
class Delivery:
    """What a POLL or FETCH found: the entries sent, the whole reply frame, and what is left. The session counts it
    as delivered only at :meth:`SessionQueue.sent`, once the reply went out."""

    entries: list[StoredEntry]
    #: The whole reply frame.
    payload: bytes
    queue_size: int
    #: Seq of the last entry in the reply.
    top: int = 0
    #: MANUAL_ACK: the reply moves the session's cursor, not the head.
    manual: bool = False
    #: (max_events, byte_budget) of the FETCH read-ahead to start once the reply is out, if any.
    read_next: tuple[int, int] | None = None


# -- store calls (run in the store threads) ---------------------------------------------------------------------


def _sync(client_id: int, token: int, pending: Pending | None) -> Bounds:
    """Writes what is pending and reads the bounds: one statement either way."""
    bounds = store.session_bounds(client_id) if pending is None else store.sync_session(client_id, token, *pending)
    if bounds is None or bounds.token != token:
        raise StaleSession
    return bounds


#: An entry of a POLL read-ahead: the stored entry and its reply, rendered but for QueueSize (None for a snapshot
#: marker, which POLL never sends).
Ahead = tuple[StoredEntry, render.PollRender | None]


def _refill(
    client_id: int,
    token: int,
    pending: Pending | None,
    after: int,
    limit: int,
    byte_budget: int,
    v2: bool,
    instance_id: int,
) -> tuple[Bounds, list[Ahead]]:
    """Writes what is pending, reads up to ``limit`` entries after ``after`` (and after the head) and renders them for
    POLL (or POLLV2), here in the store thread rather than on the event loop."""
    bounds = _sync(client_id, token, pending)
    start = max(after, bounds.acked_seq)
    if bounds.last_seq <= start:
        return bounds, []
    poll_render = render.SHARED_POLL.render
    return bounds, [
        (entry, None if entry.kind in SNAPSHOT_MARKERS else poll_render(entry, v2, instance_id))
        for entry in store.read_entries(client_id, start, limit, byte_budget)
    ]


#: Entries per run, on average, from which a read asks for its runs' checks (each a subquery; fewer, longer runs:
#: one check statement after the read costs more; 500 single entries: the subqueries cost about twice the read).
ENTRIES_PER_CHECKED_RUN = 8


class FetchRead(NamedTuple):
    """A FETCH batch read from the store: the bounds, the entries sent, the whole reply frame, and whether the
    server held the batch's changes already, in long runs (what the worker writes for a broad subscription). The
    session's next read expects the same: it then asks for its runs' checks."""

    bounds: Bounds
    entries: list[StoredEntry]
    frame: bytes
    held: bool


def _fetch(
    client_id: int,
    token: int,
    pending: Pending | None,
    records: render.RenderCache,
    ack_upto: int,
    cursor: int | None,
    max_events: int,
    byte_budget: int,
    expect_held: bool,
) -> FetchRead:
    """``cursor``: the manual-ack cursor of the session, or None for auto-ack (read after the head).

    Returns the bounds, the entries sent and the whole FETCH reply frame, rendered here, off the event loop, from
    ``records``, shared by every session of the server: a change read and rendered for one session is only checked
    in the store for the others. ``expect_held``: whether the session's last read found its changes held, in long
    runs (most likely so again: a session reading behind others, or one reading first). The runs' checks are asked
    for only then: a run's check is a subquery of its own, which pays for itself over a run of many changes, not
    over single entries.
    """
    bounds = _sync(client_id, token, pending)
    if ack_upto and store.ack_session(client_id, token, ack_upto) is not None:
        bounds = _sync(client_id, token, None)
    start = bounds.acked_seq if cursor is None else max(cursor, bounds.acked_seq)
    if bounds.last_seq <= start:
        return FetchRead(bounds, [], b"", expect_held)
    shape = store.ReadShape()
    entries = store.read_entries(client_id, start, max_events, known=records.known, check_runs=expect_held, shape=shape)
    held = (
        bool(entries)
        and shape.runs <= max(1, len(entries) // ENTRIES_PER_CHECKED_RUN)
        and records.known(entries[-1].change_id) is not None  # before the frame below keeps them
    )
    frame, count = render.fetch_frame(records, entries, byte_budget, max(bounds.last_seq, bounds.acked_seq))
    return FetchRead(bounds, entries[:count], frame, held)


def _ack(client_id: int, token: int, pending: Pending | None, seq: int) -> tuple[Bounds, int, int]:
    _sync(client_id, token, pending)
    result = store.ack_session(client_id, token, seq)
    if result is None:
        raise StaleSession
    return _sync(client_id, token, None), *result


def _check(client_id: int, token: int, pending: Pending | None) -> Bounds:
    return _sync(client_id, token, pending)


# -- the session ------------------------------------------------------------------------------------------------


@dataclass
class SessionQueue:
    client_id: int
    token: int
    threads: StoreThreads
    #: The server's FETCH records, shared by its sessions.
    records: render.RenderCache
    instance_id: int = 0
    #: Whether the server hears the worker move queue heads (PostgreSQL's notifications, :meth:`forget_read_ahead`);
    #: if not, a read-ahead that waited is checked against the head before it is served.
    hears_heads: bool = True
    #: The head as this session knows it: everything up to here was delivered (auto-ack) or acknowledged.
    acked: int = 0
    #: Manual-ack cursor: everything up to here was sent in this session. A new session starts at the head.
    delivered: int = 0
    #: Newest seq of the queue as last seen, and when (time.monotonic()).
    last: int = 0
    _bounds_read: float = 0.0
    stale: bool = False
    _served: int = 0
    _dirty: bool = False
    _ahead: deque[Ahead] = field(default_factory=deque)
    #: Snapshot markers in ``_ahead``: POLL's QueueSize leaves them out.
    _ahead_markers: int = 0
    #: Moves whenever the read-ahead is dropped or replaced: a top-up read before that is not appended to it.
    _ahead_generation: int = 0
    #: The command of the last POLL (POLLV2 or not): what a top-up renders its entries for.
    _poll_v2: bool = False
    _sync_task: asyncio.Task[None] | None = None
    #: The write-behind in flight, if any, until its result is applied (the sync task spends most of its life
    #: sleeping before it).
    _writing: asyncio.Task[None] | None = None
    #: The other store calls in flight that write what the session delivered (a request's, the FETCH read-ahead's):
    #: :meth:`settle` waits for them too, so a session's end writes after them.
    _carrying: set[asyncio.Future[Any]] = field(default_factory=set)
    #: FETCH read-ahead: the next auto-ack batch, read while the client takes in the current one, and the
    #: (max_events, byte_budget) it was read for. Only a FETCH asking the same serves it; anything else drops it.
    _next: asyncio.Task[FetchRead | None] | None = None
    _next_for: tuple[int, int] = (0, 0)
    #: When the FETCH read-ahead's store read returned (time.monotonic()).
    _next_read: float = 0.0
    _next_wanted: tuple[int, int] | None = None
    #: Whether the last FETCH read found its changes held by the server, in long runs (``FetchRead.held``); a
    #: session starts as if not (a wrong guess costs one more statement, the other way a check of every run in the
    #: store).
    _held: bool = False

    # -- pending writes -------------------------------------------------------------------------------------------

    def _take_pending(self) -> Pending | None:
        if not self._dirty:
            return None
        pending = Pending(self.acked, self.delivered, self._served)
        self._served = 0
        self._dirty = False
        return pending

    def _give_back(self, pending: Pending | None) -> None:
        if pending is not None:
            self._served += pending.served
            self._dirty = True

    def _apply(self, bounds: Bounds) -> None:
        if bounds.acked_seq > self.acked:  # the store moved the head (discard policy, purge, ACK): follow it
            self.acked = bounds.acked_seq
            while self._ahead and self._ahead[0][0].seq <= self.acked:
                if self._ahead.popleft()[1] is None:
                    self._ahead_markers -= 1
        self.delivered = max(self.delivered, self.acked)
        self.last = max(bounds.last_seq, self.acked)
        self._bounds_read = time.monotonic()

    async def _call(self, function: Callable[..., T], *args: object) -> T:
        """A store call of this session, which first writes what is pending."""
        if self._next is not None:
            await self._take_next()  # dropped: this call reads the queue again
        return await self._store_call(function, *args)

    async def _store_call(self, function: Callable[..., T], *args: object) -> T:
        if self.stale:
            raise StaleSession
        await self.settle()
        pending = self._take_pending()
        call = self.threads.submit(function, self.client_id, self.token, pending, *args)
        if pending is not None:
            self._carrying.add(call)
            call.add_done_callback(self._carrying.discard)
        try:
            return await call
        except StaleSession:
            self.stale = True
            raise
        except BaseException:
            self._give_back(pending)
            raise

    def schedule_sync(self) -> None:
        """Writes pending deliveries soon (after the reply went out), coalescing those that come meanwhile.

        After an auto-ack FETCH that left entries in the queue, the write goes with reading the next batch at once
        (:meth:`_read_next`): the client's next FETCH then finds its batch ready instead of waiting for the store.
        """
        wanted, self._next_wanted = self._next_wanted, None
        if wanted is not None and self._next is None and not self.stale:
            self._next_for = wanted
            self._next = asyncio.get_running_loop().create_task(self._read_next(*wanted))
            return
        if self._dirty and not self.stale and (self._sync_task is None or self._sync_task.done()):
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    async def _sync_loop(self) -> None:
        while self._dirty and not self.stale:
            # Gather the deliveries of a few milliseconds into one write: a store call per POLL would cost a thread
            # hand-over per reply, and the GIL hand-over between threads costs more than the POLL itself.
            await asyncio.sleep(SYNC_DELAY)
            pending = self._take_pending()
            if pending is None:
                return
            self._writing = asyncio.get_running_loop().create_task(self._write(pending))
            try:
                await self._writing
            except StaleSession:
                self.stale = True
                return
            except (DatabaseError, RuntimeError) as exc:  # RuntimeError: store threads shut down
                self._give_back(pending)
                log.warning("client %d: could not record deliveries (%s); retrying", self.client_id, exc)
                await asyncio.sleep(_RETRY_DELAY)
                continue

    async def _write(self, pending: Pending) -> None:
        """The write-behind's store call, its result applied. A POLL read-ahead running low is topped up by the
        same call (the entries after its last one), so a POLL session reading steadily never waits for the store
        and costs no store call beyond its write-behind."""
        ahead = self._ahead
        room = POLL_READ_BYTES - sum(len(r.body) for _, r in ahead if r is not None) if ahead else 0
        if ahead and len(ahead) < READ_AHEAD and room > 0:
            generation = self._ahead_generation
            bounds, more = await self.threads.run(
                _refill,
                self.client_id,
                self.token,
                pending,
                ahead[-1][0].seq,
                READ_AHEAD,
                room,
                self._poll_v2,
                self.instance_id,
            )
            self._apply(bounds)
            if generation == self._ahead_generation:
                self._extend_ahead(more)
        else:
            self._apply(await self.threads.run(_sync, self.client_id, self.token, pending))

    def _extend_ahead(self, more: list[Ahead]) -> None:
        """Appends what follows the read-ahead (or the head, once the read-ahead is empty)."""
        ahead = self._ahead
        tail = max(ahead[-1][0].seq if ahead else 0, self.acked)
        for item in more:
            if item[0].seq > tail:
                ahead.append(item)
                if item[1] is None:
                    self._ahead_markers += 1

    async def _read_next(self, max_events: int, byte_budget: int) -> FetchRead | None:
        """The FETCH read-ahead (writing what is pending first, as every store call does); None if it failed."""
        try:
            result = await self._store_call(_fetch, self.records, 0, None, max_events, byte_budget, self._held)
            self._next_read = time.monotonic()
            if len(result.frame) > FETCH_READ_AHEAD_BUDGETS * byte_budget:
                return None  # too large to hold while the client may be idle: the next FETCH reads it again
            return result
        except StaleSession:
            return None  # the session is marked stale: its next request gets 0xFB
        except (DatabaseError, RuntimeError) as exc:  # RuntimeError: store threads shut down
            log.info("client %d: FETCH read-ahead failed (%s); the next FETCH reads again", self.client_id, exc)
            return None

    async def _take_next(self) -> FetchRead | None:
        """Waits for the FETCH read-ahead and removes it; its bounds are applied, its entries are the caller's."""
        task, self._next = self._next, None
        if task is None:
            return None
        result = await asyncio.shield(task)
        if result is not None:
            self._apply(result.bounds)
        return result

    async def settle(self) -> None:
        """Waits for the writes in flight, if any: the write-behind's, and those of the store calls that took what
        was pending (a request of a connection a newer AUTH just closed may still be in the store: what it writes
        must be there before the new session starts).

        Not for a sync task still sleeping out SYNC_DELAY: the caller's own store call takes what is pending (one
        write instead of two, and no request waits out the delay), and the task then finds nothing left to write.
        """
        while True:  # another such call may start while these end (it took what was pending): wait for it too
            writing = [call for call in (self._writing, *self._carrying) if call is not None and not call.done()]
            if not writing:
                return
            await asyncio.wait(writing)

    async def flush(self) -> None:
        """Writes everything pending now (the session ends)."""
        self._next_wanted = None
        await self._take_next()  # an unsent read-ahead changes nothing: those entries are still the queue's
        await self.settle()
        if self._dirty and not self.stale:
            pending = self._take_pending()
            try:
                await self.threads.run(_sync, self.client_id, self.token, pending)
            except StaleSession:
                self.stale = True

    def _clear_ahead(self) -> None:
        self._ahead.clear()
        self._ahead_markers = 0
        self._ahead_generation += 1

    def forget_read_ahead(self) -> None:
        """The next POLL or FETCH reads the store (which checks the token) instead of serving from memory: a newer
        session of this client was announced."""
        self._clear_ahead()
        self._next_for = (-1, -1)  # no FETCH asks for this: the FETCH read-ahead in flight, if any, is dropped

    # -- commands -------------------------------------------------------------------------------------------------

    async def poll(self, v2: bool) -> Delivery | None:
        """Takes the head of the queue (POLL/POLLV2, auto-ack); None when the queue is empty or holds only snapshot
        markers, which POLL passes over."""
        while True:
            if self.stale:
                raise StaleSession
            delivery = self.take(v2)
            if delivery is not None:
                return delivery
            if self._ahead and not self._bounds_fresh():  # the read-ahead stands, QueueSize needs the bounds
                try:
                    self._apply(await self._call(_sync))
                except (DatabaseError, RuntimeError) as exc:  # RuntimeError: store threads shut down
                    # The store failing: what is held is served, its QueueSize from the bounds last read, rather
                    # than nothing until the store is back.
                    log.debug("client %s: queue bounds not read (%s); serving the read-ahead", self.client_id, exc)
                    self._bounds_read = time.monotonic()
                continue
            writing = self._writing
            if writing is not None and not writing.done():
                # The write-behind in flight may be topping the read-ahead up: its entries come first.
                await asyncio.wait([writing])
                if self._ahead:
                    continue
            bounds, ahead = await self._call(_refill, 0, READ_AHEAD, POLL_READ_BYTES, v2, self.instance_id)
            self._apply(bounds)
            acked = self.acked
            self._clear_ahead()
            self._ahead.extend(item for item in ahead if item[0].seq > acked)
            self._ahead_markers = sum(1 for item in self._ahead if item[1] is None)
            if not self._ahead:
                return None

    def _bounds_fresh(self) -> bool:
        return time.monotonic() - self._bounds_read < BOUNDS_FRESH

    def take(self, v2: bool) -> Delivery | None:
        """The head of the read-ahead as a POLL (or POLLV2) reply, without a store call; None when the read-ahead
        has no entry to send (empty, only snapshot markers, or the session is stale): :meth:`poll` then asks the
        store. Snapshot markers before the entry are passed over, the head moved past them."""
        ahead = self._ahead
        if self.stale or not self._bounds_fresh():
            return None
        self._poll_v2 = v2
        while ahead:
            entry, rendered = ahead.popleft()
            if rendered is not None:
                break
            # Never sent to POLL, so the head moves past it now, whatever becomes of this request's reply; it is
            # written with the next store call or by the write-behind.
            self._ahead_markers -= 1
            self.acked = max(self.acked, entry.seq)
            self.delivered = max(self.delivered, self.acked)
            self._dirty = True
        else:
            return None
        if rendered.v2 != v2:  # the read-ahead was rendered for the other command
            rendered = render.poll_render(entry, v2, self.instance_id)
        left = max(0, self.last - entry.seq - self._ahead_markers)
        return Delivery([entry], render.poll_frame(rendered, left), left, top=entry.seq)

    async def fetch(self, max_events: int, manual_ack: bool, ack_upto: int, byte_budget: int) -> Delivery | None:
        """A FETCH batch (after acknowledging up to ``ack_upto``); None when nothing is pending."""
        self._clear_ahead()  # FETCH reads its own batch: a POLL read-ahead would only go stale
        self._next_wanted = None
        result = None
        if self._next is not None:
            same = not manual_ack and not ack_upto and self._next_for == (max_events, byte_budget)
            result = await self._take_next()
            # An empty read-ahead is read again: a long-poll must see the commits since, and it takes the notifier's
            # generation before this call.
            # (Or the store's head moved past it meanwhile: read again too.)
            if not same or result is None or not result.entries or result.entries[0].seq <= self.acked:
                result = None
            elif not self.hears_heads and time.monotonic() - self._next_read > BOUNDS_FRESH:
                # Nothing tells this store's sessions when the worker moves a head (SQLite has no notifications): a
                # read-ahead that waited may hold entries a queue limit's unqueue-oldest policy has discarded since.
                self._apply(await self._call(_sync))
                if result.entries[0].seq <= self.acked:
                    result = None
        if result is None:
            cursor = self.delivered if manual_ack else None
            result = await self._call(_fetch, self.records, ack_upto, cursor, max_events, byte_budget, self._held)
            self._apply(result.bounds)
        entries, frame, self._held = result.entries, result.frame, result.held
        if not entries:
            return None
        top = entries[-1].seq
        left = max(0, self.last - top)
        # Read the next batch at once after the reply (schedule_sync).
        read_next = (max_events, byte_budget) if not manual_ack and left else None
        return Delivery(entries, frame, left, top=top, manual=manual_ack, read_next=read_next)

    def sent(self, delivery: Delivery) -> None:
        """The reply of ``delivery`` was handed to TCP whole: only now does it count as delivered.

        Until here the delivery touches nothing the write-behind could store, so a reply whose sending failed (the
        client went away, refused a frame too big for it, or timed out reading it) moves neither the head nor the
        manual-ack cursor, and the session's end writes nothing of it: those entries are delivered again.
        """
        if not delivery.manual:
            self.acked = max(self.acked, delivery.top)  # max: the store may have moved the head past it meanwhile
        self.delivered = max(self.delivered, delivery.top)
        self._served += len(delivery.entries)
        self._dirty = True
        if delivery.read_next is not None:
            self._next_wanted = delivery.read_next

    async def ack(self, seq: int) -> tuple[int, int]:
        """ACK: (acked_seq after it, entries it removed)."""
        self._clear_ahead()
        bounds, acked, removed = await self._call(_ack, seq)
        self._apply(bounds)
        return acked, removed

    async def check(self) -> None:
        """Writes what is pending and checks that the session is still current (raises StaleSession if not)."""
        bounds = await self._call(_check)
        self._apply(bounds)
