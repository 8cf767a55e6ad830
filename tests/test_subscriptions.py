"""The subscription point is exact, with real processes: every row committed on the source after ADDFILTER's reply
(or an admin edit, or REMOVEFILTER) is routed by the new filters; and one client's patterns cannot slow another's."""

from __future__ import annotations

import statistics
import threading
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client as WebClient

from clientproto import RelayClient
from devtools.sandbox import MariaDB
from relay import store
from relay.models import Client, Filter
from relay.store.filters import filter_version
from tests.helpers.processes import TEST_SECRET, RelayProcess, start_relay
from tests.helpers.worker import start_worker

pytestmark = pytest.mark.django_db(transaction=True)


def _streaming_worker(server: MariaDB, schema: str) -> RelayProcess:
    """A worker that is already reading the stream (a first row went through), as in production."""
    server.execute(f"CREATE TABLE `{schema}`.warmup (id INT PRIMARY KEY)")
    return start_worker(server, server.binlog_position(), batch_ms=10)


def _wait_applied(server: MariaDB, worker: RelayProcess, timeout: float = 60) -> None:
    """Until the worker's checkpoint reaches the source's current position."""
    from relay.models import Checkpoint

    target = server.binlog_position()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert worker.alive(), worker.output[-3000:]
        checkpoint = Checkpoint.objects.first()
        if checkpoint is not None and (checkpoint.binlog_file, checkpoint.binlog_pos) >= target:
            return
        time.sleep(0.05)
    raise AssertionError(f"the worker did not reach {target}:\n{worker.output[-3000:]}")


def _drain(client: RelayClient, want: int, timeout: float = 60) -> list[bytes]:
    ids: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(ids) < want and time.monotonic() < deadline:
        ids += [event.after()["id"] for event in client.fetch(500, wait_ms=500)]
    return ids


def test_rows_written_the_instant_addfilter_returns_all_arrive(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    names = [f"fresh{n}" for n in range(5)]
    for name in names:
        server.execute(f"CREATE TABLE `{schema}`.`{name}` (id INT PRIMARY KEY)")
    worker = _streaming_worker(server, schema)
    server.execute(f"INSERT INTO `{schema}`.warmup VALUES (1)")
    _wait_applied(server, worker)
    _relay, port = start_relay(server)
    failures: list[str] = []

    def subscribe_then_write(name: str) -> None:
        try:
            connection = server.connect(schema)
            with RelayClient("127.0.0.1", port, TEST_SECRET, name) as client:
                client.add_filter("I", schema, name)
                # The instant the reply is in: 40 one-row transactions (autocommit).
                with connection.cursor() as cursor:
                    for n in range(40):
                        cursor.execute(f"INSERT INTO `{name}` VALUES ({n})")
            connection.close()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=subscribe_then_write, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    _wait_applied(server, worker)
    for name in names:
        with RelayClient("127.0.0.1", port, TEST_SECRET, name) as client:
            assert _drain(client, 40) == [str(n).encode() for n in range(40)], name
    worker.stop()


def test_an_admin_edit_of_a_filter_moves_the_next_change_to_the_new_table(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.old_t (id INT PRIMARY KEY)", f"CREATE TABLE `{schema}`.new_t (id INT PRIMARY KEY)"
    )
    worker = _streaming_worker(server, schema)
    _relay, port = start_relay(server)
    with RelayClient("127.0.0.1", port, TEST_SECRET, "edited") as client:
        client.add_filter("I", schema, "old_t")
        server.execute(f"INSERT INTO `{schema}`.old_t VALUES (1)", f"INSERT INTO `{schema}`.new_t VALUES (1)")
        assert _drain(client, 1) == [b"1"]

        User.objects.create_superuser("admin", "admin@example.com", "pw")
        web = WebClient()
        web.login(username="admin", password="pw")
        spec = Filter.objects.get(client__name="edited")
        response = web.post(
            f"/admin/relay/filter/{spec.id}/change/",
            {
                "client": spec.client_id,
                "event_mask": 1,
                "schema_name": schema,
                "table_name": "new_t",
                "queue_limit": 0,
                "discard_policy": 0,
            },
        )
        assert response.status_code == 302, response.content[:2000]
        # Right after the admin's reply: one row in each table. Only the new table's reaches the client.
        server.execute(f"INSERT INTO `{schema}`.old_t VALUES (2)", f"INSERT INTO `{schema}`.new_t VALUES (2)")
        server.execute(f"INSERT INTO `{schema}`.new_t VALUES (3)")
        assert _drain(client, 2) == [b"2", b"3"]
        _wait_applied(server, worker)
        assert client.fetch(10, wait_ms=200) == []
    worker.stop()


def test_removefilter_stops_the_rows_written_right_after_its_reply(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    worker = _streaming_worker(server, schema)
    _relay, port = start_relay(server)
    with RelayClient("127.0.0.1", port, TEST_SECRET, "leaving") as client:
        client.add_filter("I", schema, "t")
        server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
        assert _drain(client, 1) == [b"1"]
        assert client.remove_filter("I", schema, "t")
        server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
        _wait_applied(server, worker)
        assert client.fetch(10, wait_ms=200) == []
    worker.stop()


def test_a_backtracking_pattern_does_not_delay_another_clients_rows(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    table = "t" + "x" * 60
    server.execute(f"CREATE TABLE `{schema}`.`{table}` (id INT PRIMARY KEY)")
    worker = _streaming_worker(server, schema)
    _relay, port = start_relay(server)
    connection = server.connect(schema)

    def delays(client: RelayClient, first: int) -> list[float]:
        measured = []
        for n in range(first, first + 5):
            with connection.cursor() as cursor:
                cursor.execute(f"INSERT INTO `{table}` VALUES ({n})")
            committed = time.monotonic()
            assert _drain(client, 1, timeout=30) == [str(n).encode()]
            measured.append(time.monotonic() - committed)
        return measured

    with RelayClient("127.0.0.1", port, TEST_SECRET, "victim") as victim:
        victim.add_filter("I", schema, table)
        delays(victim, 0)  # warm-up: the worker is streaming
        baseline = statistics.median(delays(victim, 10))
        with RelayClient("127.0.0.1", port, TEST_SECRET, "hostile") as hostile:
            hostile.add_filter("IUD", "*" * 30 + "!", "*" * 30 + "!")
            hostile.add_filter("IUD", schema, "*" * 60 + "!")
            loaded = statistics.median(delays(victim, 20))
    connection.close()
    assert worker.alive()
    # A regex with backtracking took seconds per row here; linear matching adds microseconds.
    assert loaded < baseline + 0.1, (baseline, loaded)
    worker.stop()


def test_every_filter_write_moves_the_version(db: None) -> None:
    session = store.open_session("versioned")
    before = filter_version()
    store.add_filter(session.client_id, 1, "s", "t")
    assert filter_version() == before + 1
    store.add_filter(session.client_id, 1, "s", "t")  # re-sent as clients do on every connect: no change
    assert filter_version() == before + 1
    store.add_filter(session.client_id, 1, "s", "t", queue_limit=5)  # an update of limit and policy
    assert filter_version() == before + 2
    spec = Filter.objects.get(client_id=session.client_id)
    spec.table_name = "u"
    spec.save()  # what the admin's change form does
    assert filter_version() == before + 3
    assert store.remove_filter(session.client_id, 1, "s", "u")
    assert filter_version() == before + 4
    store.add_filter(session.client_id, 1, "s", "a")
    store.add_filter(session.client_id, 1, "s", "b")
    Client.objects.filter(id=session.client_id).delete()  # the cascade removes both filters
    assert filter_version() == before + 8


def test_filters_are_bounded_with_errors_that_say_which_limit(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from relay.store import filters, sessions

    session = store.open_session("bounded")
    with pytest.raises(store.StoreError, match="table name is 256 characters, the limit is 255"):
        store.add_filter(session.client_id, 1, "s", "t" * 256)
    with pytest.raises(store.StoreError, match="schema name must not be empty"):
        store.add_filter(session.client_id, 1, "", "t")
    monkeypatch.setattr(filters, "MAX_FILTERS_PER_CLIENT", 2)
    store.add_filter(session.client_id, 1, "s", "a")
    store.add_filter(session.client_id, 1, "s", "b")
    store.add_filter(session.client_id, 1, "s", "b", queue_limit=3)  # an update is not a new filter
    with pytest.raises(store.StoreError, match="the client has 2 filters, the limit"):
        store.add_filter(session.client_id, 1, "s", "c")
    monkeypatch.setattr(sessions, "MAX_CLIENTS", Client.objects.count())
    store.open_session("bounded")  # a known name always gets in
    with pytest.raises(store.StoreError, match="clients are registered, the limit"):
        store.open_session("one-too-many")
