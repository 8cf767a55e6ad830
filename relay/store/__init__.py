"""The store: the only writer of the queue tables' consuming side, and of sessions, filters and relay process liveness.

The worker appends to the queues (relay/worker/ingest.py); everything else goes through this package:

* ``sessions``: clients (a name keeps its ClientID for ever) and their sessions (a token per AUTH);
* ``filters``: what each client subscribes to;
* ``queues``: the relay server's per-request primitives (bounds, reads, compare-and-set of the head, ACK, history)
  and the administration of a queue (purge, delete);
* ``gc``: consumed entries and unneeded changes, deleted in bounded batches;
* ``rowcodec``: the stored change format; ``channels``: the NOTIFY channel names; ``relayprocess``: which relay
  processes are alive; ``statistics``: resetting the counters.

The names below are the API the other packages call (``from relay import store``; ``store.open_session(...)``).
"""

from relay.store.errors import StoreError
from relay.store.filters import add_filter, bump_filter_version, filter_version, remove_filter
from relay.store.gc import collect_garbage
from relay.store.queues import (
    HISTORY_LENGTH,
    Bounds,
    ChangeFields,
    HistoryItem,
    KnownChange,
    ReadShape,
    StoredEntry,
    ack_session,
    advance_head,
    change_check,
    change_ids_at,
    delete_client,
    entry_change_ids,
    last_seqs,
    purge_queue,
    queue_heads,
    read_entries,
    record_history,
    session_bounds,
    sync_session,
)
from relay.store.sessions import (
    Session,
    client_status,
    close_session,
    new_token,
    open_session,
    session_tokens,
    token_is_current,
)

__all__ = [
    "HISTORY_LENGTH",
    "Bounds",
    "ChangeFields",
    "HistoryItem",
    "KnownChange",
    "ReadShape",
    "Session",
    "StoreError",
    "StoredEntry",
    "ack_session",
    "add_filter",
    "advance_head",
    "bump_filter_version",
    "change_check",
    "change_ids_at",
    "client_status",
    "close_session",
    "collect_garbage",
    "delete_client",
    "entry_change_ids",
    "filter_version",
    "last_seqs",
    "new_token",
    "open_session",
    "purge_queue",
    "queue_heads",
    "read_entries",
    "record_history",
    "remove_filter",
    "session_bounds",
    "session_tokens",
    "sync_session",
    "token_is_current",
]
