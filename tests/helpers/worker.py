"""The binlog worker as the tests watch it: subscribing clients, waiting for it to catch up, reading queues."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from clientproto import Event, RelayClient
from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay import store
from relay.models import Change, Checkpoint, Client
from relay.store import rowcodec
from tests.helpers.processes import TEST_SECRET, RelayProcess, relay_env


def start_worker(
    server: MariaDB,
    start: tuple[str, int] | None = None,
    *,
    batch_ms: int = 50,
    options: Sequence[str] = (),
    **env: object,
) -> RelayProcess:
    """A ``runbinlog`` process reading ``server``, from ``start`` (file, position) when given; ``options``: more of
    the command's options."""
    args = ["runbinlog", "--batch-ms", str(batch_ms), *options]
    if start:
        args += ["--from", f"{start[0]}:{start[1]}"]
    return RelayProcess(relay_env(server, **env), *args).start()


def filtered_client(port: int, name: str, events: str, schema: str, table: str, **options: Any) -> RelayClient:
    """A client of the relay on ``port``, connected, with one filter (``events`` as in ADDFILTER: "IUD")."""
    client = RelayClient("127.0.0.1", port, TEST_SECRET, name, **options)
    client.connect()
    client.add_filter(events, schema, table)
    return client


def fetch_events(
    client: RelayClient, worker: RelayProcess, count: int, timeout: float, *, manual_ack: bool = False
) -> list[Event]:
    """FETCHes until ``count`` events came or ``timeout`` passed (acknowledging each batch when ``manual_ack``),
    failing at once if the worker exits."""
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(events) < count and time.monotonic() < deadline:
        assert worker.alive(), worker.output[-3000:]
        batch = client.fetch(10, wait_ms=1000, manual_ack=manual_ack)
        events += batch
        if batch and manual_ack:
            client.ack(batch[-1].seq)
    return events


def caught_up(server: MariaDB, worker: RelayProcess | None = None, timeout: float = 60) -> None:
    """Waits until the worker's checkpoint reaches the source's current position."""
    target = server.binlog_position()

    def reached() -> bool:
        if worker is not None and not worker.alive():
            raise AssertionError(f"worker exited with {worker.process.returncode}:\n{worker.output[-3000:]}")
        checkpoint = Checkpoint.objects.first()
        return checkpoint is not None and (checkpoint.binlog_file, checkpoint.binlog_pos) >= target

    try:
        wait_for(reached, timeout=timeout, message=f"checkpoint at {target}")
    except TimeoutError as exc:
        checkpoint = Checkpoint.objects.first()
        where = None if checkpoint is None else (checkpoint.binlog_file, checkpoint.binlog_pos)
        output = "" if worker is None else f"\nworker output:\n{worker.output[-3000:]}"
        raise TimeoutError(f"{exc} (the checkpoint is at {where}){output}") from None


def queue_of(name: str) -> list[tuple[str, int, str]]:
    """(table, kind, id) of every entry in a client's queue, head first."""
    client = Client.objects.get(name=name)
    rows = []
    for _, change_id in store.entry_change_ids(client.id, client.acked_seq, 10**9):
        change = Change.objects.get(id=change_id)
        columns = {column.name: column for column in rowcodec.decode(change.data)}
        key = columns["id"].after if change.kind != 4 else columns["id"].before
        rows.append((change.table_name, change.kind, key))
    return rows


def subscribe(name: str, mask: int, schema: str, table: str, limit: int = 0, policy: int = 0) -> int:
    session = store.open_session(name)
    store.add_filter(session.client_id, mask, schema, table, limit, policy)
    return session.client_id
