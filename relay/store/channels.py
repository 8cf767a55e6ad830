"""The PostgreSQL NOTIFY channels that the store's writers and the relay processes share (SQLite has none: its
readers poll instead)."""

from __future__ import annotations

from collections.abc import Iterable

#: The worker notifies it in each batch transaction that queued entries, naming the clients whose queues grew
#: (:func:`queue_notice`): their long-polling FETCHes wake, and no other.
QUEUE_CHANNEL = "relay_queues"

#: A notice naming more clients than fit in this many characters names none: every waiter wakes (PostgreSQL's
#: payloads stop at 8,000 bytes).
MAX_NOTICE = 7000

#: The worker notifies it in a batch transaction whose unqueue-oldest policy moved clients' queue heads, naming them
#: (:func:`queue_notice`): a relay process drops what it read ahead of their queues, which the policy discarded.
HEAD_CHANNEL = "relay_heads"

#: PostgreSQL channel on which :func:`open_session` announces "client_id:token": every relay process LISTENs on it
#: and closes its own older connection of that client at once (several ``runrelay`` processes share one store).
SESSION_CHANNEL = "relay_sessions"


def queue_notice(client_ids: Iterable[int]) -> str:
    """The QUEUE_CHANNEL payload for a commit that grew these clients' queues: their ids, comma-separated; "" (every
    client) when they do not fit."""
    notice = ",".join(str(client_id) for client_id in sorted(client_ids))
    return notice if len(notice) <= MAX_NOTICE else ""


def notice_clients(payload: str) -> frozenset[int] | None:
    """The clients a QUEUE_CHANNEL payload names; None for every client (an empty or unreadable payload)."""
    if not payload:
        return None
    try:
        return frozenset(int(part) for part in payload.split(","))
    except ValueError:
        return None
