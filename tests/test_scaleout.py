"""Scale-out: several ``runrelay`` processes on one store serve the same clients consistently, and a standby worker
takes over from a dead one within seconds. Every process here is real (``manage.py runrelay``/``runbinlog``)."""

from __future__ import annotations

import signal
import struct
import threading
import time

import pytest
from django.db import connection

from clientproto import Command, RelayClient, Result, decode_fetch_reply, encode_auth, encode_fetch, server_key
from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay.models import Client, WorkerStatus
from tests.helpers.processes import TEST_SECRET, RelayProcess, relay_env, start_relay
from tests.helpers.queues import enqueue
from tests.helpers.relay_server import RawClient
from tests.helpers.worker import filtered_client

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = TEST_SECRET


def raw_auth(port: int, name: str) -> RawClient:
    import socket

    client = RawClient(socket.create_connection(("127.0.0.1", port), timeout=10))
    result, payload = client.request(Command.AUTH, encode_auth(server_key(SECRET), name))
    assert result == Result.OK
    _, client.token, client.client_id = struct.unpack("<QII", payload)
    return client


def refused_or_closed(client: RawClient, command: int, payload: bytes = b"") -> bool:
    """True when the request gets 0xFB or the relay has closed the connection."""
    try:
        result, _ = client.request(command, payload)
    except OSError:
        return True
    return result == Result.BAD_SESSION


@pytest.mark.parametrize("command", [Command.POLL, Command.FETCH])
def test_the_newest_session_wins_across_relay_processes(command: Command) -> None:
    (_a, port_a), (_b, port_b) = start_relay(), start_relay()
    old = raw_auth(port_a, "mover")
    enqueue(old.client_id, [{"id": str(i)} for i in range(1, 201)])
    # One event with auto-ack: the session on A then holds a read-ahead of the queue in memory (POLL's next 128
    # entries; FETCH's next batch, read while the client takes in this one).
    payload = encode_fetch(1, 0) if command == Command.FETCH else b""
    result, _ = old.request(command, payload)
    assert result == Result.OK
    time.sleep(0.1)  # the delivery is written behind the reply
    new = raw_auth(port_b, "mover")
    authed = time.monotonic()
    assert new.client_id == old.client_id and new.token != old.token
    # A closes the replaced connection: on PostgreSQL as soon as the AUTH's announcement (NOTIFY at its commit)
    # reaches it, and a request it handles after that gets 0xFB even if its read-ahead could serve it; on SQLite,
    # which has no notification, at A's next token sweep (every 0.2 s). A request that raced the announcement may
    # have been served from the read-ahead: at-least-once, the new session gets that event as well.
    assert old.closed_by_peer(timeout=5)
    limit = 1.0 if connection.vendor == "postgresql" else 2.0  # milliseconds and 0.2 s, with room for a busy machine
    assert time.monotonic() - authed < limit
    assert refused_or_closed(old, command, payload)
    # The new session starts after what A delivered (or on it, were A's write not done): nothing is skipped.
    result, payload = new.request(Command.FETCH, encode_fetch(500, 0))
    assert result == Result.OK
    seqs = [event.seq for event in decode_fetch_reply(payload).events]
    assert seqs[0] in (1, 2) and seqs == list(range(seqs[0], 201))
    client = Client.objects.get(name="mover")
    assert client.connected and client.token == new.token


def test_a_replaced_long_poll_on_another_process_is_closed() -> None:
    (_a, port_a), (_b, port_b) = start_relay(), start_relay()
    old = raw_auth(port_a, "sleeper")
    old.send(encode_request_fetch(old, wait_ms=30_000))
    time.sleep(0.3)  # waiting in A
    raw_auth(port_b, "sleeper")
    started = time.monotonic()
    assert old.closed_by_peer(timeout=10)
    assert time.monotonic() - started < 2


def encode_request_fetch(client: RawClient, wait_ms: int) -> bytes:
    from clientproto import PROTOCOL_VERSION, encode_request

    return encode_request(
        Command.FETCH,
        encode_fetch(10, wait_ms),
        version=PROTOCOL_VERSION,
        client_id=client.client_id,
        token=client.token,
    )


def test_long_poll_wake_ups_cross_processes() -> None:
    (_a, port_a), (_b, port_b) = start_relay(), start_relay()
    clients = [RelayClient("127.0.0.1", port, SECRET, f"waiter-{port}") for port in (port_a, port_b)]
    for client in clients:
        client.connect()
    for round_ in range(3):
        received: dict[int, float] = {}

        def wait(index: int, client: RelayClient, received: dict[int, float] = received) -> None:
            events = client.fetch(10, wait_ms=10_000)
            if events:
                received[index] = time.monotonic()

        waiting = [threading.Thread(target=wait, args=(i, c)) for i, c in enumerate(clients)]
        for thread in waiting:
            thread.start()
        time.sleep(0.3)
        # This process commits the entries, as the worker would (with its NOTIFY on PostgreSQL).
        for client in clients:
            enqueue(client.client_id, [{"id": str(round_)}])
        committed = time.monotonic()
        for thread in waiting:
            thread.join(15)
        assert sorted(received) == [0, 1]
        assert max(received.values()) - committed < 0.5, received
    for client in clients:
        client.close()


def test_a_manual_ack_client_moving_between_relays_loses_nothing() -> None:
    relays = [start_relay(), start_relay()]
    first = RelayClient("127.0.0.1", relays[0][1], SECRET, "wanderer")
    first.connect()
    client_id = first.client_id
    total = 600
    enqueue(client_id, [{"id": str(i)} for i in range(1, total + 1)])
    seen: list[int] = []
    acked = 0
    hop = 0
    client = first
    deadline = time.monotonic() + 120
    while (not seen or seen[-1] < total) and time.monotonic() < deadline:
        events = client.fetch(37, wait_ms=200, manual_ack=True, ack_upto=0)
        assert events, f"stalled after {seen[-1:]}"
        # Whatever was acknowledged never comes again; what was not may come again after a move.
        assert events[0].seq > acked
        assert events[0].seq <= (seen[-1] + 1 if seen else 1)
        seen += [event.seq for event in events if not seen or event.seq > seen[-1]]
        assert [int(event.after()["id"]) for event in events] == [event.seq for event in events]
        if hop % 3 != 2:
            acked = client.ack(events[-1].seq - 5).acked_seq  # leaves a few unacknowledged
        hop += 1
        # Move: every other batch to the other relay process; every fifth, the relay just used is killed first.
        _relay, port = relays[hop % 2]
        if hop % 5 == 0:
            old_relay, _ = relays[(hop + 1) % 2]
            old_relay.signal(signal.SIGKILL)
            old_relay.wait(30)
            relays[(hop + 1) % 2] = start_relay()
        client.close()
        client = RelayClient("127.0.0.1", port, SECRET, "wanderer")
        client.connect()
        assert client.client_id == client_id
    assert seen == list(range(1, total + 1))
    client.ack(total)
    assert Client.objects.get(id=client_id).acked_seq == total
    client.close()


def test_a_standby_worker_takes_over_within_seconds(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    _relay, port = start_relay(server)
    client = filtered_client(port, "follower", "I", schema, "t")
    file, pos = server.binlog_position()
    env = relay_env(server, RELAY_SERVER_STARTFROM=f"{file}:{pos}")
    workers = [RelayProcess(env, "runbinlog", "--batch-ms", "20").start() for _ in range(2)]
    received: list[bytes] = []

    def take(count: int, timeout: float) -> float:
        started = time.monotonic()
        while len(received) < count:
            assert time.monotonic() - started < timeout, f"only {len(received)} of {count} rows arrived"
            for event in client.fetch(100, wait_ms=500, manual_ack=True, ack_upto=0):
                received.append(event.after()["id"])
                client.ack(event.seq)
        return time.monotonic() - started

    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    take(1, 60)
    for round_ in range(2):
        active_pid = WorkerStatus.objects.get().pid
        active = next(w for w in workers if w.process is not None and w.process.pid == active_pid)
        standby = next(w for w in workers if w is not active)
        wait_for(lambda s=standby: "standby" in s.output, 60, message="the standby waiting")
        active.kill()
        killed = time.monotonic()
        server.execute(f"INSERT INTO `{schema}`.t VALUES ({round_ + 2})")
        take(round_ + 2, 30)
        assert time.monotonic() - killed < 10, "the standby took too long to take over"
        assert WorkerStatus.objects.get().pid == standby.process.pid
        workers = [standby, RelayProcess(env, "runbinlog", "--batch-ms", "20").start()]
    assert received == [b"1", b"2", b"3"]
    client.close()


def test_the_clients_of_a_killed_relay_process_count_as_disconnected() -> None:
    from relay.models import RelayProcess
    from relay.web import dashboard

    beat = "0.2"  # presumed gone after 6 x 0.2 s without a report
    killed, port = start_relay(None, "--heartbeat-seconds", beat)
    client = RelayClient("127.0.0.1", port, SECRET, "orphan")
    client.connect()
    client_id = client.client_id

    def status() -> str:
        (row,) = dashboard.client_rows(client_id=client_id)
        return row.status

    assert status() == "CONNECTED" and dashboard.overview().connected_clients == 1
    (process,) = dashboard.overview().relay_processes
    assert process.alive and process.clients == 1 and process.process.pid == killed.process.pid
    killed.signal(signal.SIGKILL)
    killed.wait(30)
    # No relay process is left to clean up: the flag in the store stays, but nothing shows the session as open.
    wait_for(lambda: status() == "DISCONNECTED", 10, message="the orphaned session shown closed")
    assert Client.objects.get(id=client_id).connected
    assert dashboard.overview().connected_clients == 0
    assert [row.alive for row in dashboard.overview().relay_processes] == [False]
    # The next relay process to report ends the session in the store and drops the dead process's row.
    survivor, _port = start_relay(None, "--heartbeat-seconds", beat)
    wait_for(lambda: not Client.objects.get(id=client_id).connected, 10, message="the session ended in the store")
    assert "stopped reporting" in survivor.output
    (alive,) = RelayProcess.objects.all()
    assert alive.pid == survivor.process.pid
    # A relay process that stops cleanly takes its row with it.
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0
    assert not RelayProcess.objects.exists()
