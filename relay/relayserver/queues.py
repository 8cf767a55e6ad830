"""A session's view of its client's queue: the read-ahead, and each command's store work as one blocking call.

Every method here runs in a store thread (relay/relayserver/database.py), never on the event loop, and does all the
SQL one request needs in that one call. A connection sends one request at a time, so a SessionQueue is only ever
used by one thread at a time.

POLL reads ahead: the entries after the head are read :data:`READ_AHEAD` at a time and kept in memory, so that a POLL
usually costs one statement, the compare-and-set that moves the head (``store.advance_head``), which also checks
the session token and returns the queue's newest seq for QueueSize. When the compare fails (the worker's
unqueue-oldest policy, a purge or a newer session moved the head or the token), the read-ahead is dropped and read
again from the store, so nothing is ever delivered from a stale view.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from relay import store
from relay.relayserver import render
from relay.store import Bounds, StoredEntry

#: Entries a POLL session reads ahead of the head.
READ_AHEAD = 64
#: Retries of a compare-and-set that keeps failing because the head moves (the worker discarding under a limit).
_CAS_RETRIES = 50


class StaleSession(Exception):
    """The session's token is no longer the client's current one: a newer AUTH replaced it (in any process)."""


@dataclass(slots=True)
class Delivery:
    """What a POLL or FETCH found: the entries sent, the reply payload pieces, and entries left after them."""

    entries: list[StoredEntry]
    payload: bytes | list[bytes]
    queue_size: int


@dataclass
class SessionQueue:
    client_id: int
    token: int
    instance_id: int = 0
    #: The head as last seen or set by this session; the store's value wins whenever they disagree.
    acked: int = 0
    #: Manual-ack cursor: everything up to here was sent in this session (reset to the head by a new session).
    delivered: int = 0
    #: Newest seq of the queue as last seen.
    last: int = 0
    _ahead: deque[StoredEntry] = field(default_factory=deque)

    # -- reading --------------------------------------------------------------------------------------------------

    def bounds(self) -> Bounds:
        bounds = store.session_bounds(self.client_id)
        if bounds is None or bounds.token != self.token:
            raise StaleSession
        self.acked = bounds.acked_seq
        self.last = max(bounds.last_seq, bounds.acked_seq)
        return bounds

    def check_token(self) -> None:
        if not store.token_is_current(self.client_id, self.token):
            raise StaleSession

    def _refill(self) -> bool:
        self._ahead.clear()
        self.bounds()
        if self.last <= self.acked:
            return False
        self._ahead.extend(store.read_entries(self.client_id, self.acked, READ_AHEAD))
        return bool(self._ahead)

    # -- POLL / POLLV2 (auto-ack, one entry) ---------------------------------------------------------------------

    def poll(self, v2: bool) -> Delivery | None:
        """Takes the head of the queue; None when it is empty."""
        for _ in range(_CAS_RETRIES):
            if not self._ahead and not self._refill():
                return None
            entry = self._ahead[0]
            if entry.seq <= self.acked:  # the head moved past it since the read-ahead
                self._ahead.clear()
                continue
            last = store.advance_head(self.client_id, self.token, self.acked, entry.seq, 1)
            if last is None:
                self._ahead.clear()
                continue  # the refill re-reads the bounds and raises StaleSession if the token changed
            self._ahead.popleft()
            self.acked = entry.seq
            self.delivered = max(self.delivered, entry.seq)
            self.last = max(last, entry.seq)
            left = self.last - entry.seq
            payload = render.pollv2_payload(entry, left, self.instance_id) if v2 else render.poll_payload(entry, left)
            return Delivery([entry], payload, left)
        raise store.StoreError(f"client {self.client_id}: the queue head kept moving under this POLL")

    # -- FETCH / ACK ----------------------------------------------------------------------------------------------

    def fetch(self, max_events: int, manual_ack: bool, ack_upto: int, byte_budget: int) -> Delivery | None:
        """A FETCH batch (after acknowledging up to ``ack_upto``); None when nothing is pending."""
        self._ahead.clear()  # FETCH reads its own batch; POLL's read-ahead would only go stale
        if ack_upto:
            self.ack(ack_upto)
        for _ in range(_CAS_RETRIES):
            self.bounds()
            cursor = max(self.delivered, self.acked) if manual_ack else self.acked
            if self.last <= cursor:
                return None
            entries = store.read_entries(self.client_id, cursor, max_events)
            if not entries:
                return None
            records = render.fetch_records(entries, byte_budget)
            entries = entries[: len(records)]
            top = entries[-1].seq
            if manual_ack:
                if not store.mark_delivered(self.client_id, self.token, top, len(entries)):
                    raise StaleSession
                self.delivered = top
                return Delivery(entries, records, max(0, self.last - top))
            last = store.advance_head(self.client_id, self.token, self.acked, top, len(entries))
            if last is None:
                continue
            self.acked = top
            self.delivered = max(self.delivered, top)
            self.last = max(last, top)
            return Delivery(entries, records, self.last - top)
        raise store.StoreError(f"client {self.client_id}: the queue head kept moving under this FETCH")

    def ack(self, seq: int) -> tuple[int, int]:
        """(acked_seq after the ACK, entries it removed)."""
        self._ahead.clear()
        result = store.ack_session(self.client_id, self.token, seq)
        if result is None:
            raise StaleSession
        self.acked = result[0]
        self.delivered = max(self.delivered, self.acked)
        return result
