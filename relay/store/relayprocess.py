"""Which relay processes are alive, and so which clients' sessions really are open.

A client's ``connected`` flag is cleared when its relay process closes the session. A process that is killed (or
loses its host) never does, so every ``runrelay`` process also keeps a :class:`RelayProcess` row and moves its
``expires`` ahead every few seconds. A session counts as open only while its process's row has not expired
(:func:`live_sessions`, :func:`session_is_live`): the dashboard, the admin and /metrics are right at once, even if
no relay process is left. The next report of any relay process then ends the sessions of the expired ones in the
store and deletes their rows (:func:`report`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from relay.models import Client, RelayProcess

#: A relay process is presumed gone after this many report intervals without a report.
MISSED_REPORTS = 6


@dataclass(frozen=True)
class ProcessInfo:
    hostname: str
    pid: int
    addresses: str
    instance_id: int
    started: datetime.datetime


def _expiry(now: datetime.datetime, interval: float) -> datetime.datetime:
    return now + datetime.timedelta(seconds=interval * MISSED_REPORTS)


def _fields(info: ProcessInfo, interval: float, connections: int) -> dict[str, Any]:
    now = timezone.now()
    return {
        "hostname": info.hostname[:255],
        "pid": info.pid,
        "addresses": info.addresses[:500],
        "instance_id": info.instance_id,
        "started": info.started,
        "heartbeat": now,
        "expires": _expiry(now, interval),
        "connections": connections,
    }


def register(info: ProcessInfo, interval: float) -> int:
    """A new row for a starting relay process; returns its id (the sessions it opens point at it)."""
    return RelayProcess.objects.create(**_fields(info, interval, 0)).id


def report(process_id: int, info: ProcessInfo, interval: float, connections: int, sessions: Mapping[int, int]) -> int:
    """The process is alive: moves its expiry ahead, then ends the sessions of the processes that expired.

    ``sessions`` maps the client ids this process serves to their session tokens. If this process was itself taken
    for gone (it could not report in time, and another process may have ended its sessions and deleted its row), its
    row is written again and those of its sessions that no newer AUTH replaced count as open again. Returns how many
    sessions of expired processes were ended.
    """
    now = timezone.now()
    with transaction.atomic():
        # A write first: on SQLite it takes the database's write lock, so the sweep below runs alone. On PostgreSQL
        # the sweep locks the expired rows, and a late process's update_or_create below (SELECT ... FOR UPDATE of
        # its own row) waits for a sweep of it to commit, so it re-opens its sessions after that sweep ended them.
        on_time = RelayProcess.objects.filter(id=process_id, expires__gte=now).update(
            heartbeat=now, expires=_expiry(now, interval), connections=connections
        )
        ended = _end_expired(now, exclude=process_id)
        if not on_time:
            RelayProcess.objects.update_or_create(id=process_id, defaults=_fields(info, interval, connections))
            for client_id, token in sessions.items():
                Client.objects.filter(id=client_id, token=token).update(connected=True, relay_process_id=process_id)
    return ended


def _end_expired(now: datetime.datetime, exclude: int | None = None) -> int:
    expired = RelayProcess.objects.filter(expires__lt=now)
    if exclude is not None:
        expired = expired.exclude(id=exclude)
    if connection.vendor == "postgresql":
        expired = expired.select_for_update()
    ids = list(expired.values_list("id", flat=True))
    if not ids:
        return 0
    ended = Client.objects.filter(relay_process_id__in=ids, connected=True).update(connected=False, relay_process=None)
    RelayProcess.objects.filter(id__in=ids).delete()
    return ended


def end(process_id: int) -> None:
    """A relay process stops cleanly (its sessions are already closed): its row goes."""
    with transaction.atomic():
        Client.objects.filter(relay_process_id=process_id, connected=True).update(connected=False)
        RelayProcess.objects.filter(id=process_id).delete()


def live_sessions(now: datetime.datetime | None = None) -> Q:
    """Clients with an open session: connected, through a relay process that has not expired. (A session opened
    before relay processes reported has none, and is taken at its word.)"""
    now = now or timezone.now()
    return Q(connected=True) & (Q(relay_process__isnull=True) | Q(relay_process__expires__gte=now))


def session_is_live(client: Client, now: datetime.datetime) -> bool:
    """The same test for a loaded client (load it with ``select_related("relay_process")``)."""
    if not client.connected:
        return False
    process = client.relay_process
    return client.relay_process_id is None or (process is not None and process.expires >= now)
