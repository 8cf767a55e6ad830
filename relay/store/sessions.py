"""Clients and their sessions: the same name always gets the same ClientID; each AUTH starts a session with a fresh
random token, and a newer session of a name replaces the older one in every relay process (announced on
:data:`relay.store.channels.SESSION_CHANNEL`)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from relay.models import Checkpoint, Client, Filter, QueueState
from relay.store.channels import SESSION_CHANNEL
from relay.store.errors import StoreError
from relay.store.sql import now, table

#: Registered clients (names that ever authenticated and were not deleted): each costs a row per batch in the
#: worker's routing, so their number is bounded.
MAX_CLIENTS = 10_000


@dataclass(frozen=True, slots=True)
class Session:
    client_id: int
    token: int
    name: str


def _insert_queue_state(rows: str) -> str:
    """An INSERT of a client's empty queue state (QueueState) unless it has one; ``rows``: its VALUES or SELECT."""
    return (
        f"INSERT INTO {table(QueueState)} (client_id, last_seq, discarded, max_queue) {rows}"
        " ON CONFLICT (client_id) DO NOTHING"
    )


def check_client_capacity(name: str) -> None:
    """Refuses a new client name once :data:`MAX_CLIENTS` are registered (a known name always gets in)."""
    if Client.objects.count() >= MAX_CLIENTS and not Client.objects.filter(name=name).exists():
        raise StoreError(f"{MAX_CLIENTS} clients are registered, the limit; delete unused clients in the admin")


def new_token() -> int:
    """A random, non-zero 32-bit session token."""
    return secrets.randbelow(0xFFFFFFFF) + 1


def open_session(name: str, remote_address: str = "", relay_process_id: int | None = None) -> Session:
    """Registers ``name`` (same name, same ClientID, for ever) and starts a new session with a fresh token, held by
    relay process ``relay_process_id`` (see relay/store/relayprocess.py).

    Entries sent in an earlier session but never acknowledged become deliverable again. A known name (every AUTH
    but a client's first) costs one statement on PostgreSQL and one transaction of two on SQLite: clients
    reconnecting all at once after a relay restart get in fast.
    """
    if not name:
        raise StoreError("client name is empty")
    token = new_token()
    if connection.vendor == "postgresql":
        client_id = _start_session_announced(name, token, remote_address, relay_process_id)
        if client_id is not None:
            return Session(client_id, token, name)
    with transaction.atomic():
        client_id = _start_session(name, token, remote_address, relay_process_id)
        if client_id is None:
            # A name never seen: registered (unless the store holds its limit of clients) with its queue state, in
            # this same transaction, so that no one ever sees a client without one.
            check_client_capacity(name)
            Client.objects.bulk_create([Client(name=name)], ignore_conflicts=True)
            client_id = _start_session(name, token, remote_address, relay_process_id)
            if client_id is None:
                raise StoreError(f"client {name!r}: deleted while its session was starting; try again")
        with connection.cursor() as cursor:
            cursor.execute(_insert_queue_state("VALUES (%s, 0, 0, 0)"), [client_id])
            if connection.vendor == "postgresql":
                # Delivered at commit, so no relay process hears of the session before it exists.
                cursor.execute("SELECT pg_notify(%s, %s)", [SESSION_CHANNEL, f"{client_id}:{token}"])
    return Session(client_id, token, name)


def _session_start(token: int, remote_address: str, relay_process_id: int | None) -> tuple[str, list[Any]]:
    """The UPDATE of a client row that starts a session (all but its WHERE clause), with its parameters."""
    at = now()
    return (
        f"UPDATE {table(Client)} SET token = %s, connected = %s, relay_process_id = %s, session_started = %s,"
        " last_seen = %s, remote_address = %s, delivered_seq = acked_seq",
        [token, True, relay_process_id, at, at, remote_address[:100]],
    )


def _start_session(name: str, token: int, remote_address: str, relay_process_id: int | None) -> int | None:
    """Starts the session of the client named ``name``: its id, or None for a name not registered.

    A write first: on SQLite a transaction that reads before it writes cannot wait for the write lock (the upgrade
    fails at once with "database is locked" while the worker commits); a write waits its turn.
    """
    update, params = _session_start(token, remote_address, relay_process_id)
    with connection.cursor() as cursor:
        cursor.execute(update + " WHERE name = %s RETURNING id", [*params, name])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _start_session_announced(name: str, token: int, remote_address: str, relay_process_id: int | None) -> int | None:
    """PostgreSQL: starts the session of a registered client, makes sure of its queue state and announces the
    session, in one statement (atomic, and its notification delivered at its commit); None for a name not
    registered, for which nothing is written."""
    update, params = _session_start(token, remote_address, relay_process_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH started AS ({update} WHERE name = %s RETURNING id),"
            f" queue AS ({_insert_queue_state('SELECT id, 0, 0, 0 FROM started')})"
            " SELECT id, pg_notify(%s, concat(id, ':', %s)) FROM started",
            [*params, name, SESSION_CHANNEL, str(token)],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def close_session(client_id: int, token: int) -> None:
    """Marks the client disconnected, unless a newer session has taken over."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table(Client)} SET connected = %s, last_seen = %s WHERE id = %s AND token = %s",
            [False, now(), client_id, token],
        )


def token_is_current(client_id: int, token: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table(Client)} WHERE id = %s AND token = %s", [client_id, token])
        return cursor.fetchone() is not None


def session_tokens(client_ids: Sequence[int]) -> dict[int, int]:
    """The current session token of each client (a relay process checks that its sessions are still the newest)."""
    tokens: dict[int, int] = {}
    ids = list(client_ids)
    for start in range(0, len(ids), 500):  # SQLite allows a limited number of parameters per statement
        chunk = ids[start : start + 500]
        marks = ", ".join("%s" for _ in chunk)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, token FROM {table(Client)} WHERE id IN ({marks})", chunk)
            tokens.update(cursor.fetchall())
    return tokens


def client_status(client_id: int) -> dict[str, Any] | None:
    """What STATUS reports: the client's counters, its filters and the worker's checkpoint."""
    client = Client.objects.filter(id=client_id).values("name", "acked_seq", "delivered_seq", "served").first()
    if client is None:
        return None
    state: Mapping[str, Any] = (
        QueueState.objects.filter(client_id=client_id).values("last_seq", "discarded", "max_queue").first() or {}
    )
    checkpoint: Mapping[str, Any] = (
        Checkpoint.objects.order_by("-updated").values("binlog_file", "binlog_pos").first() or {}
    )
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
