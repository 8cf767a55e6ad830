"""``manage.py runrelay`` as a process: start-up checks, graceful stop, and end to end with the worker and MariaDB."""

from __future__ import annotations

import signal
import statistics
import threading
import time

import pytest

from clientproto import RelayClient
from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay.models import Client
from tests.helpers.processes import TEST_SECRET, RelayProcess, relay_env, start_relay
from tests.helpers.worker import fetch_events, filtered_client, start_worker

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = TEST_SECRET


def test_runrelay_refuses_an_empty_secret() -> None:
    relay = RelayProcess(relay_env(None, RELAY_SERVER_AUTHSECRET=""), "runrelay", "--port", "0").start()
    assert relay.wait(60) != 0
    assert "[Server] AuthSecret" in relay.output


def test_runrelay_refuses_an_unknown_event_loop() -> None:
    relay = RelayProcess(relay_env(None, RELAY_EVENT_LOOP="trio"), "runrelay", "--port", "0").start()
    assert relay.wait(60) == 1
    assert "configuration error: RELAY_EVENT_LOOP='trio': not one of auto, uvloop, asyncio" in relay.output
    assert "Traceback" not in relay.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--idle-timeout", "0"), "--idle-timeout must be more than 0"),
        (("--io-timeout", "-5"), "--io-timeout must be more than 0"),
        (("--auth-timeout", "0"), "--auth-timeout must be more than 0"),
        (("--shutdown-grace", "-1"), "--shutdown-grace must be 0 or more"),
        (("--max-connections", "0"), "--max-connections must be at least 1"),
    ],
)
def test_runrelay_refuses_timeouts_and_limits_that_would_cut_every_client(flags: tuple[str, str], message: str) -> None:
    relay = RelayProcess(relay_env(None), "runrelay", "--port", "0", *flags).start()
    assert relay.wait(60) != 0
    assert message in relay.output and "Traceback" not in relay.output


@pytest.mark.parametrize("event_loop", ["auto", "asyncio"])  # auto: uvloop, installed by requirements.txt
def test_runrelay_stops_gracefully_on_sigterm(event_loop: str) -> None:
    relay, port = start_relay(None, RELAY_EVENT_LOOP=event_loop)
    loop_line = f"event loop {'uvloop' if event_loop == 'auto' else 'asyncio'})"
    wait_for(lambda: loop_line in relay.output, timeout=10, message="the start line")  # read by a thread of its own
    with RelayClient("127.0.0.1", port, SECRET, "graceful", reconnect=False) as client:
        client.ping()
        assert Client.objects.get(name="graceful").connected
        waiting = threading.Thread(target=lambda: client.fetch(10, wait_ms=20_000))
        waiting.start()
        time.sleep(0.3)
        relay.signal(signal.SIGTERM)
        assert relay.wait(30) == 0
        waiting.join(10)
        assert not waiting.is_alive()  # the long-poll was answered before the stop
    assert not Client.objects.get(name="graceful").connected


def test_rows_from_the_source_come_out_of_poll_pollv2_and_fetch(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.orders (id INT UNSIGNED PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20),"
        f" created DATETIME(3), flag TINYINT)"
    )
    _relay, port = start_relay(server)
    clients = {name: RelayClient("127.0.0.1", port, SECRET, name) for name in ("legacy", "legacy2", "modern")}
    for client in clients.values():
        client.connect()
        client.add_filter("IUD", schema, "orders")
    file, pos = server.binlog_position()
    worker = start_worker(server, (file, pos), batch_ms=10)
    server.execute(
        f"INSERT INTO `{schema}`.orders VALUES (4000000000, 12.50, NULL, '2024-02-29 13:14:15.123', -1)",
        f"INSERT INTO `{schema}`.orders VALUES (2, -0.5, 'NULL', NULL, 7)",
        f"UPDATE `{schema}`.orders SET note = 'Liège' WHERE id = 2",
        f"DELETE FROM `{schema}`.orders WHERE id = 4000000000",
    )
    fetched = fetch_events(clients["modern"], worker, 4, 60)
    assert [(e.seq, e.type) for e in fetched] == [(1, 1), (2, 1), (3, 2), (4, 4)]
    first = fetched[0]
    assert first.after() == {
        "id": b"4000000000",
        "amount": b"12.50",
        "note": None,
        "created": b"2024-02-29 13:14:15.123",
        "flag": b"-1",
    }
    assert first.file == file and first.pos > pos and first.row == 0 and first.timestamp > 1_700_000_000
    assert fetched[2].before()["note"] == b"NULL" and fetched[2].after()["note"] == "Liège".encode()
    assert fetched[3].before()["id"] == b"4000000000"

    legacy = [clients["legacy"].poll() for _ in range(4)]
    assert clients["legacy"].poll() is None
    for event, modern in zip(legacy, fetched, strict=True):
        assert event is not None
        assert (event.type, event.pos, event.timestamp) == (modern.type, modern.pos, modern.timestamp)
        assert event.event_position == modern.event_position
    assert [(c.name, c.after) for c in legacy[0].columns] == [
        ("id", b"4000000000"),
        ("amount", b"12.50"),
        ("note", b"NULL"),  # NULL as the original clients expect it
        ("created", b"2024-02-29 13:14:15.123"),
        ("flag", b"-1"),
    ]
    v2 = clients["legacy2"].poll_v2()
    assert v2 is not None and v2.after() == legacy[0].after()
    for client in clients.values():
        client.close()
    worker.stop()


def test_long_poll_fetch_returns_within_50_ms_of_the_source_commit(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.ticks (id INT PRIMARY KEY)")
    _relay, port = start_relay(server)
    client = filtered_client(port, "ticker", "I", schema, "ticks")
    worker = start_worker(server, server.binlog_position(), batch_ms=10)
    server.execute(f"INSERT INTO `{schema}`.ticks VALUES (0)")
    assert client.fetch(10, wait_ms=30_000)  # the worker is up and streaming
    delays = []
    conn = server.connect(schema)
    for n in range(1, 11):
        received: list[float] = []

        def wait(received: list[float] = received) -> None:
            events = client.fetch(10, wait_ms=10_000)
            received.append(time.monotonic())
            assert events

        waiting = threading.Thread(target=wait)
        waiting.start()
        time.sleep(0.2)
        with conn.cursor() as cursor:
            cursor.execute(f"INSERT INTO ticks VALUES ({n})")  # autocommit: returns after the COMMIT
        committed = time.monotonic()
        waiting.join(15)
        assert received, worker.output[-3000:]
        delays.append(received[0] - committed)
    conn.close()
    assert statistics.median(delays) < 0.05, delays
    worker.stop()


def test_runrelay_takes_writes_again_once_a_read_only_store_does() -> None:
    """A store that refused writes for a while (a fail-over onto a hot standby): the relay's store connections opened
    meanwhile were read-only for good, and AUTH of a new name failed on them long after the store took writes again.
    They are dropped on the refusal, so the relay is whole again as soon as the store is."""
    from django.db import connection

    from tests.helpers.postgres import read_only_store

    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test store (SQLite has no read-only mode the relay meets)")
    relay, port = start_relay()

    def auth(name: str) -> bool:
        try:
            RelayClient("127.0.0.1", port, TEST_SECRET, name, reconnect=False, timeout=5).connect()
            return True
        except (OSError, ConnectionError, RuntimeError):
            return False

    with read_only_store():
        for number in range(8):  # several store threads each open a read-only connection
            assert not auth(f"during{number}")
    wait_for(lambda: auth("after"), timeout=15, message="AUTH of a new name once the store takes writes")
    assert all(auth(f"again{number}") for number in range(8))
    assert relay.alive()
    relay.stop()


def test_a_client_deleted_and_registered_again_gets_its_new_queue_from_its_start(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """The admin deletes a client that consumes with RelayClient.events(manual_ack=True): it reconnects, its AUTH
    registers the name again (a new ClientID, a queue from Seq 1), and every event of the new queue is yielded. The
    iterator skipped the new queue's events up to the old queue's last Seq, and acknowledged them unseen."""
    from relay import store

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    worker = start_worker(server, server.binlog_position())
    relay, port = start_relay(server)
    consumer = filtered_client(port, "consumer", "I", schema, "t")
    server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({n})" for n in range(1, 6)))
    events = consumer.events(batch=10, wait_ms=500, manual_ack=True)
    assert [next(events).after()["id"] for _ in range(5)] == [b"1", b"2", b"3", b"4", b"5"]
    first_id = consumer.client_id
    store.delete_client(first_id)
    got: list[bytes] = []

    def consume() -> None:
        for event in events:
            got.append(event.after()["id"])
            if len(got) == 7:
                return

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    wait_for(lambda: Client.objects.filter(name="consumer").exclude(id=first_id).exists(), timeout=30, message="AUTH")
    time.sleep(0.5)  # its filter re-sent too
    server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({n})" for n in range(10, 17)))
    reader.join(30)
    assert got == [str(n).encode() for n in range(10, 17)]
    assert consumer.client_id != first_id and Client.objects.get(name="consumer").acked_seq <= 7
    consumer.close()
    relay.stop()
    worker.stop()
