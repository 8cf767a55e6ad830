"""The binlog worker against a real MariaDB and the test store: routing, policies, exactly once, faults."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client as HttpClient

from binlog import Position
from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay import store
from relay.models import (
    Change,
    Checkpoint,
    Client,
    LagSample,
    PreparedTransaction,
    QueueState,
    SchemaTable,
    TableUsage,
    WorkerStatus,
)
from relay.store import rowcodec
from relay.web.metrics import render_metrics
from relay.worker.ingest import write_checkpoint
from tests.helpers.postgres import read_only_store
from tests.helpers.processes import RelayProcess
from tests.helpers.queues import queue_size
from tests.helpers.scratch import scratch_dir
from tests.helpers.worker import caught_up, queue_of, start_worker, subscribe

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_mariadb() -> Iterator[MariaDB]:
    """A MariaDB of this test alone, for faults that would disturb other tests (restarts, purges)."""
    server = MariaDB(scratch_dir("relay-own-"), row_metadata_full=True).start()
    yield server
    server.destroy()


def test_clients_get_exactly_the_matching_rows_once_in_binlog_order(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.orders (id INT PRIMARY KEY, v INT)",
        f"CREATE TABLE `{schema}`.order_lines (id INT PRIMARY KEY, v INT)",
        f"CREATE TABLE `{schema}`.people (id INT PRIMARY KEY, v INT)",
    )
    subscribe("exact", 7, schema, "orders")
    subscribe("overlap", 1, schema, "*")
    store.add_filter(Client.objects.get(name="overlap").id, 7, schema, "ord*")  # overlaps the first on inserts
    subscribe("deletes", 4, "*", "orders")
    subscribe("elsewhere", 7, "other_schema", "*")
    start = server.binlog_position()
    worker = start_worker(server, start)
    server.execute(
        f"INSERT INTO `{schema}`.orders VALUES (1, 1), (2, 2)",
        f"INSERT INTO `{schema}`.people VALUES (10, 1)",
        "BEGIN",
        f"INSERT INTO `{schema}`.order_lines VALUES (20, 1)",
        f"UPDATE `{schema}`.orders SET v = 5 WHERE id = 1",
        f"DELETE FROM `{schema}`.people WHERE id = 10",
        "COMMIT",
        f"DELETE FROM `{schema}`.orders WHERE id = 2",
    )
    caught_up(server, worker)
    assert queue_of("exact") == [("orders", 1, "1"), ("orders", 1, "2"), ("orders", 2, "1"), ("orders", 4, "2")]
    offset = WorkerStatus.objects.get().clock_offset_seconds  # measured at start: the same host's clock here
    assert offset is not None and abs(offset) < 1
    assert queue_of("overlap") == [
        ("orders", 1, "1"),
        ("orders", 1, "2"),
        ("people", 1, "10"),
        ("order_lines", 1, "20"),
        ("orders", 2, "1"),
        ("orders", 4, "2"),
    ]
    assert queue_of("deletes") == [("orders", 4, "2")]
    assert queue_of("elsewhere") == []
    usage = {u.table_name: (u.inserts, u.updates, u.deletes) for u in TableUsage.objects.all()}
    assert usage == {"orders": (2, 1, 1), "people": (1, 0, 1), "order_lines": (1, 0, 0)}
    assert SchemaTable.objects.get(schema_name=schema, table_name="orders").columns.count() == 2
    assert worker.stop() == 0
    assert WorkerStatus.objects.get().state == "stopped"


def test_the_lag_history_takes_the_source_clocks_skew_off(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 7, schema, "t")
    start = server.binlog_position()
    server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({i})" for i in range(1, 6)))
    # The worker's host an hour ahead of the source (its time.time(), which the clock measure and the lag read).
    hooks = scratch_dir("clock-ahead-")
    (hooks / "sitecustomize.py").write_text("import time\n_real = time.time\ntime.time = lambda: _real() + 3600\n")
    worker = start_worker(server, start, PYTHONPATH=str(hooks))
    caught_up(server, worker)
    wait_for(LagSample.objects.exists, 30, message="a lag sample")
    status = WorkerStatus.objects.get()
    assert status.clock_offset_seconds is not None and abs(status.clock_offset_seconds + 3600) < 5
    # The first batch held the rows, written seconds ago: neither its sample nor its report says "an hour".
    assert LagSample.objects.first().lag < 600, list(LagSample.objects.values_list("lag", flat=True))
    assert status.lag_seconds is not None and status.lag_seconds < 600, status.lag_seconds


def test_discard_policies_at_their_limits(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("oldest_out", 1, schema, "t", limit=3, policy=1)
    subscribe("newest_ignored", 1, schema, "t", limit=3, policy=2)
    subscribe("never_drops", 1, schema, "t", limit=3, policy=0)
    subscribe("unlimited_zero", 1, schema, "t", limit=0, policy=1)
    subscribe("unlimited_negative", 1, schema, "t", limit=-5, policy=2)
    worker = start_worker(server, server.binlog_position())
    server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({i})" for i in range(1, 6)))
    server.execute(f"INSERT INTO `{schema}`.t VALUES (6), (7), (8), (9), (10)")
    caught_up(server, worker)

    def ids(name: str) -> list[str]:
        return [key for _, _, key in queue_of(name)]

    every = [str(i) for i in range(1, 11)]
    assert ids("oldest_out") == ["8", "9", "10"]
    assert ids("newest_ignored") == ["1", "2", "3"]
    assert ids("never_drops") == every
    assert ids("unlimited_zero") == every
    assert ids("unlimited_negative") == every
    discarded = {s.client.name: (s.discarded, s.max_queue) for s in QueueState.objects.select_related("client")}
    assert discarded["oldest_out"] == (7, 3)
    assert discarded["newest_ignored"] == (7, 3)
    assert discarded["never_drops"] == (0, 10)
    assert queue_size(Client.objects.get(name="oldest_out").id) == 3


def test_filters_added_while_running_apply_without_restart(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("early", 1, schema, "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, worker)
    subscribe("late", 1, schema, "t")
    time.sleep(1.0)  # the worker checks its filters twice a second
    server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
    caught_up(server, worker)
    assert [key for *_, key in queue_of("early")] == ["1", "2"]
    assert [key for *_, key in queue_of("late")] == ["2"]
    assert worker.alive()


def test_clients_deleted_while_rows_flow_to_them_stop_nothing(fresh_schema: tuple[MariaDB, str]) -> None:
    """The admin deletes clients while the worker writes batches for them. On PostgreSQL the foreign keys are checked
    at COMMIT: a batch that read a client just before its delete failed there, and the worker exited (later: started
    over from its checkpoint, with a backoff that stalled every client). Now a batch holds the clients it writes to,
    a deletion waits for it, and a batch after drops the client gone: no restart, and a client that stays gets every
    row once, in order. Deleted by the store's call and by the ORM's (the admin's)."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(200))")
    subscribe("bystander", 1, schema, "t")
    worker = start_worker(server, server.binlog_position(), batch_ms=10)
    stop = threading.Event()

    def write() -> None:
        with server.connect(schema) as conn, conn.cursor() as cursor:
            while not stop.is_set():
                cursor.execute("INSERT INTO t (pad) SELECT REPEAT('p', 200) FROM seq_1_to_200")
                conn.commit()
                stop.wait(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for number in range(20):
            victim = subscribe(f"victim{number}", 1, schema, "t")
            time.sleep(0.15)
            if number % 2:
                store.delete_client(victim)
            else:
                Client.objects.get(id=victim).delete()
            assert worker.alive(), worker.output[-3000:]
    finally:
        stop.set()
        writer.join()
    caught_up(server, worker, timeout=120)
    written = [row[0] for row in server.query(f"SELECT id FROM `{schema}`.t ORDER BY id")]  # ids with gaps
    got = [int(key) for *_, key in queue_of("bystander")]
    assert got == written, (len(got), len(written), len(got) - len(set(got)), worker.output[-3000:])
    assert worker.alive() and "a client was deleted while a batch" not in worker.output, worker.output[-3000:]
    worker.stop()


def test_a_store_that_turns_read_only_is_waited_for(fresh_schema: tuple[MariaDB, str]) -> None:
    """A PostgreSQL store that refuses writes (a fail-over onto a hot standby; here default_transaction_read_only
    and its sessions ended) is waited for like one that went away: the worker ended with an InternalError before, and
    nothing restarted it. Once writable again it goes on from the checkpoint, losing nothing."""
    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test store (SQLite has no read-only mode a running worker meets)")
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, worker)
    with read_only_store():
        server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
        wait_for(
            lambda: "read-only transaction" in worker.output and "nothing is lost" in worker.output,
            timeout=30,
            message="the worker's retry line",
        )
        time.sleep(2)
        assert worker.alive(), worker.output[-3000:]
    server.execute(f"INSERT INTO `{schema}`.t VALUES (3)")
    caught_up(server, worker, timeout=90)
    assert [key for *_, key in queue_of("c")] == ["1", "2", "3"]
    assert worker.alive()
    worker.stop()


def test_a_source_that_stops_writing_checksums_is_read_on_from_its_older_files() -> None:
    """binlog_checksum changed from CRC32 to NONE across a restart, with rows the worker has not read yet in a CRC32
    file: the source refused that file to a reader that did not say it reads checksums (error 1236, and the worker
    stopped, telling the operator to move --from)."""
    server = MariaDB(scratch_dir("relay-own-"), row_metadata_full=True, extra_args=["--binlog-checksum=CRC32"]).start()
    try:
        server.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)")
        subscribe("c", 1, "s", "t")
        worker = start_worker(server, server.binlog_position())
        server.execute("INSERT INTO s.t VALUES (1)")
        caught_up(server, worker)
        assert worker.stop() == 0
        server.execute("INSERT INTO s.t VALUES (2)")
        server.stop()
        server.extra_args = ["--binlog-checksum=NONE"]
        server.start()
        server.execute("INSERT INTO s.t VALUES (3)")
        worker = start_worker(server)
        caught_up(server, worker)
        assert [key for *_, key in queue_of("c")] == ["1", "2", "3"]
        assert worker.stop() == 0
    finally:
        server.destroy()


def test_rotation_and_source_restart_lose_nothing(own_mariadb: MariaDB) -> None:
    server = own_mariadb
    server.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)")
    subscribe("c", 7, "s", "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(*(f"INSERT INTO s.t VALUES ({i})" for i in range(1, 51)))
    server.execute("FLUSH BINARY LOGS")
    server.execute(*(f"INSERT INTO s.t VALUES ({i})" for i in range(51, 101)))
    caught_up(server, worker)
    server.restart()  # the worker's connection drops; it reconnects and resumes
    server.execute(*(f"INSERT INTO s.t VALUES ({i})" for i in range(101, 151)))
    server.execute("FLUSH BINARY LOGS", "DELETE FROM s.t WHERE id <= 10")
    caught_up(server, worker, timeout=90)
    rows = queue_of("c")
    assert [key for _, kind, key in rows if kind == 1] == [str(i) for i in range(1, 151)]
    assert [key for _, kind, key in rows if kind == 4] == [str(i) for i in range(1, 11)]
    assert WorkerStatus.objects.get().reconnects >= 1
    assert worker.alive()


@pytest.mark.parametrize("metadata", ["full", "none"])
def test_ddl_mid_stream_renames_columns_at_the_right_time(
    metadata: str, mariadb: MariaDB, mariadb_no_metadata: MariaDB
) -> None:
    server = mariadb if metadata == "full" else mariadb_no_metadata
    schema = f"ddl_{metadata}_{random.randrange(10**6)}"
    server.execute(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a INT, b INT)")
    subscribe("c", 7, schema, "t")
    worker = start_worker(server, server.binlog_position())
    steps = [
        f"INSERT INTO {schema}.t VALUES (1, 10, 20)",
        f"ALTER TABLE {schema}.t ADD COLUMN c VARCHAR(5)",
        f"INSERT INTO {schema}.t VALUES (2, 11, 21, 'x')",
        f"ALTER TABLE {schema}.t DROP COLUMN b",
        f"INSERT INTO {schema}.t VALUES (3, 12, 'y')",
        f"ALTER TABLE {schema}.t RENAME COLUMN a TO a2",
        f"INSERT INTO {schema}.t VALUES (4, 13, 'z')",
    ]
    for statement in steps:
        server.execute(statement)
        if metadata == "none":  # names come from information_schema: read each event before the next DDL
            caught_up(server, worker)
    caught_up(server, worker)
    client = Client.objects.get(name="c")
    changes = [Change.objects.get(id=change_id) for _, change_id in store.entry_change_ids(client.id, 0, 100)]
    layouts = [[(col.name, col.after) for col in rowcodec.decode(change.data)] for change in changes]
    assert layouts == [
        [("id", "1"), ("a", "10"), ("b", "20")],
        [("id", "2"), ("a", "11"), ("b", "21"), ("c", "x")],
        [("id", "3"), ("a", "12"), ("c", "y")],
        [("id", "4"), ("a2", "13"), ("c", "z")],
    ]
    server.execute(f"DROP DATABASE {schema}")


def test_a_worker_is_not_shown_connected_before_it_reads_from_the_source(own_mariadb: MariaDB) -> None:
    server = own_mariadb
    first = start_worker(server, server.binlog_position())
    wait_for(lambda: WorkerStatus.objects.filter(state="connected").exists(), 60, message="connected")
    assert first.stop() == 0
    server.stop()  # the checkpoint is stored: the next start asks the source nothing before its stream connects

    worker = start_worker(server)
    states: list[str] = []

    def reconnecting() -> bool:
        assert worker.alive(), worker.output[-3000:]
        states.append(WorkerStatus.objects.get().state)
        return states[-1] == "reconnecting"

    wait_for(reconnecting, 60, interval=0.05, message="reconnecting")
    assert "connected" not in states, states  # /healthz would have said OK while the source refused the stream


def test_a_source_that_goes_away_shows_as_reconnecting_at_once_not_after_heartbeats_are_missed(
    own_mariadb: MariaDB,
) -> None:
    """The stream knows at once that its connection was lost: the state says so at its first failed reconnect,
    not only after two heartbeat periods of silence (here 20 s) while /healthz would still say OK."""
    server = own_mariadb
    worker = start_worker(server, server.binlog_position(), RELAY_SERVER_HEARTBEATSECONDS="10")
    server.execute("CREATE DATABASE IF NOT EXISTS s")  # a first batch: the worker reports connected
    wait_for(lambda: WorkerStatus.objects.filter(state="connected").exists(), 60, message="connected")
    server.stop()
    stopped = time.monotonic()
    wait_for(lambda: WorkerStatus.objects.get().state == "reconnecting", 30, interval=0.1, message="reconnecting")
    assert time.monotonic() - stopped < 8, worker.output[-2000:]
    assert worker.alive()
    server.start()
    wait_for(lambda: WorkerStatus.objects.get().state == "connected", 60, message="connected again")


def test_purged_checkpoint_stops_with_a_message_and_from_skips_forward(own_mariadb: MariaDB) -> None:
    server = own_mariadb
    server.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)")
    subscribe("c", 1, "s", "t")
    worker = start_worker(server, server.binlog_position())
    server.execute("INSERT INTO s.t VALUES (1)")
    caught_up(server, worker)
    assert worker.stop() == 0
    old_file = Checkpoint.objects.get().binlog_file
    server.execute("FLUSH BINARY LOGS", "INSERT INTO s.t VALUES (2)", "FLUSH BINARY LOGS")
    newest = server.binlog_position()[0]

    def purged() -> bool:
        # MariaDB keeps a binlog until InnoDB's binlog checkpoint has passed it: retry until the file is gone.
        server.execute(f"PURGE BINARY LOGS TO '{newest}'")
        return old_file not in [row[0] for row in server.query("SHOW BINARY LOGS")]

    wait_for(purged, 60, interval=0.2, message=f"{old_file} purged")
    server.execute("INSERT INTO s.t VALUES (3)")

    failed = start_worker(server)
    assert failed.wait(60) == 2
    assert old_file in failed.output
    assert "--from" in failed.output
    assert f"{old_file} was purged" in failed.output
    status = WorkerStatus.objects.get()
    assert status.state == "failed" and old_file in status.last_error

    resumed = start_worker(server, (newest, 4))
    caught_up(server, resumed)
    assert [key for *_, key in queue_of("c")] == ["1", "3"]  # 2 was purged before the relay read it


def test_a_binlog_reset_while_stopped_stops_the_worker_instead_of_skipping_rows(own_mariadb: MariaDB) -> None:
    """RESET MASTER while the worker was stopped: the checkpoint's file name is begun again, and its position may well
    be an event's start there. The worker stops (exit 2, as for a purge) and says so; --from goes on."""
    server = own_mariadb
    server.execute("CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)")
    subscribe("c", 1, "s", "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(*(f"INSERT INTO s.t VALUES ({n})" for n in range(1, 6)))
    caught_up(server, worker)
    assert worker.stop() == 0
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.binlog_file_started > 0
    time.sleep(1.1)  # the new file is begun in another second
    server.execute("RESET MASTER", *(f"INSERT INTO s.t VALUES ({n})" for n in range(11, 31)))
    assert server.binlog_position()[0] == checkpoint.binlog_file

    failed = start_worker(server)
    assert failed.wait(60) == 2
    assert "RESET MASTER" in failed.output and "--from" in failed.output
    status = WorkerStatus.objects.get()
    assert status.state == "failed" and checkpoint.binlog_file in status.last_error
    assert [key for *_, key in queue_of("c")] == ["1", "2", "3", "4", "5"]

    resumed = start_worker(server, (checkpoint.binlog_file, 4))
    caught_up(server, resumed)
    assert [key for *_, key in queue_of("c")] == [str(n) for n in (*range(1, 6), *range(11, 31))]


def test_a_start_position_the_source_cannot_read_from_is_named_so_and_never_called_purged(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """Error 1236 has many causes; only a file or GTID the source no longer has means changes were lost. A --from of
    a file the source never had, past its end, where no event starts, or inside a transaction is refused before it
    becomes the checkpoint (every later start would fail the same way): exit 1, the reason named, nothing delivered,
    the checkpoint as it was."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    subscribe("c", 7, schema, "t")
    file, before = server.binlog_position()
    server.execute(
        "BEGIN",
        f"INSERT INTO `{schema}`.t VALUES (1, 'debit')",
        f"INSERT INTO `{schema}`.t VALUES (2, 'credit')",
        "COMMIT",
    )
    events = server.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {before}")
    second_map = [row[1] for row in events if row[2] == "Table_map"][1]
    size = dict((row[0], int(row[1])) for row in server.query("SHOW BINARY LOGS"))[file]
    write_checkpoint(f"{server.host}:{server.port}", Position(file, before))  # where a plain restart would go
    checkpoint = Checkpoint.objects.values_list("binlog_file", "binlog_pos").get()

    for start, expected in (
        (("binlog.000099", 4), "no binlog binlog.000099. The source's binlogs run from binlog.000001 to"),
        ((file, size + 1000), f"outside {file}"),
        ((file, before + 7), "no event starts there"),
        ((file, second_map), "(Table_map) is inside a transaction"),
    ):
        refused = start_worker(server, start)
        assert refused.wait(60) == 1, refused.output[-3000:]
        assert expected in refused.output and "are lost" not in refused.output, refused.output[-3000:]
        assert Checkpoint.objects.values_list("binlog_file", "binlog_pos").get() == checkpoint
        assert queue_of("c") == []  # not the transaction's second half as if it were all of it
    Checkpoint.objects.update(binlog_file="other-bin.000001", binlog_pos=4)
    stranger = start_worker(server)
    assert stranger.wait(60) == 2
    assert "never written there" in stranger.output, stranger.output[-3000:]


def test_xa_rows_are_queued_at_their_commit_never_when_rolled_back_and_survive_a_restart_in_between(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """An XA transaction's rows are prepared in one binlog group and committed (or rolled back) in a later one. They
    are queued at the commit, at its place among the other transactions, once, even when the worker stops between
    the two; a rolled-back transaction's rows are never queued."""
    server, schema = fresh_schema
    table = f"`{schema}`.t"
    server.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY)")
    subscribe("c", 7, schema, "t")
    try:
        _xa_commit_and_rollback_around_a_restart(server, table)
    finally:  # a prepared transaction left behind would hold its locks on the shared server for ever
        for xid in ("rb", "ok"):
            with contextlib.suppress(Exception):
                server.execute(f"XA ROLLBACK '{xid}'")


def _xa_commit_and_rollback_around_a_restart(server: MariaDB, table: str) -> None:
    worker = start_worker(server, server.binlog_position())
    # Each call is a connection of its own: a prepared XA transaction outlives it, and another ends it.
    server.execute("XA START 'rb'", f"INSERT INTO {table} VALUES (1)", "XA END 'rb'", "XA PREPARE 'rb'")
    server.execute("XA START 'ok'", f"INSERT INTO {table} VALUES (2), (3)", "XA END 'ok'", "XA PREPARE 'ok'")
    server.execute(f"INSERT INTO {table} VALUES (4)")
    caught_up(server, worker)
    assert [key for *_, key in queue_of("c")] == ["4"]  # prepared is not committed
    assert sorted(PreparedTransaction.objects.values_list("xid", "rows")) == [
        ("X'6f6b',X'',1", 2),
        ("X'7262',X'',1", 1),
    ]
    source = WorkerStatus.objects.get().source
    assert f'relay_xa_prepared_transactions{{source="{source}"}} 2' in render_metrics()
    assert worker.stop() == 0
    server.execute("XA ROLLBACK 'rb'")
    server.execute("XA COMMIT 'ok'")
    server.execute(f"INSERT INTO {table} VALUES (5)")
    worker = start_worker(server)
    caught_up(server, worker)
    assert [key for *_, key in queue_of("c")] == ["4", "2", "3", "5"]
    assert not PreparedTransaction.objects.exists()
    assert f'relay_xa_prepared_transactions{{source="{source}"}} 0' in render_metrics()
    assert sorted(server.query(f"SELECT id FROM {table}")) == [(2,), (3,), (4,), (5,)]


def test_a_rollback_to_a_savepoint_before_a_part_already_applied_queues_only_what_stayed(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """A large transaction comes in parts; a ROLLBACK TO SAVEPOINT after its first part (logged because a MyISAM
    table changed meanwhile) takes back rows that part held. The worker takes the part back with its store
    transaction and applies the transaction again, whole: the queue holds only the rows the source kept, once."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY) ENGINE=InnoDB",
        f"CREATE TABLE `{schema}`.m (id INT PRIMARY KEY) ENGINE=MyISAM",
    )
    subscribe("c", 7, schema, "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(
        "BEGIN",
        f"INSERT INTO `{schema}`.t SELECT seq FROM `{schema}`.seq_1_to_10",
        "SAVEPOINT s",
        f"INSERT INTO `{schema}`.t SELECT seq FROM `{schema}`.seq_11_to_8000",  # past the worker's part of 5,000
        f"INSERT INTO `{schema}`.m VALUES (1)",
        "ROLLBACK TO SAVEPOINT s",
        f"INSERT INTO `{schema}`.t VALUES (8001), (8002)",
        "COMMIT",
    )
    server.execute(f"INSERT INTO `{schema}`.t VALUES (9000)")
    caught_up(server, worker)
    held = [str(row[0]) for row in server.query(f"SELECT id FROM `{schema}`.t ORDER BY id")]
    assert [key for *_, key in queue_of("c")] == held == [*map(str, range(1, 11)), "8001", "8002", "9000"]
    assert "reading that transaction again, whole" in worker.output
    worker.stop()


def test_row_changes_logged_as_statements_are_named_counted_and_shown(
    fresh_schema: tuple[MariaDB, str], viewer: HttpClient
) -> None:
    """TRUNCATE, and DML from a session with binlog_format STATEMENT, are in the binlog as statements: their row
    changes reach no client. The worker says so: each in its log, counted in /metrics, the last on the dashboard."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v INT)", f"INSERT INTO `{schema}`.t VALUES (1, 1)")
    subscribe("copy", 7, schema, "t")
    worker = start_worker(server, server.binlog_position())
    server.execute(
        "SET SESSION binlog_format = STATEMENT",
        f"INSERT INTO `{schema}`.t VALUES (2, 2)",
        f"UPDATE `{schema}`.t SET v = 5 WHERE id = 1",
    )
    server.execute(f"TRUNCATE TABLE `{schema}`.t")
    server.execute(f"INSERT INTO `{schema}`.t VALUES (3, 3)")
    caught_up(server, worker)
    assert queue_of("copy") == [("t", 1, "3")]  # the one change in the binlog as a row
    status = WorkerStatus.objects.get()
    assert status.unrelayed_statements == 3 and status.last_unrelayed_statement == f"TRUNCATE TABLE `{schema}`.t"
    assert f'relay_unrelayed_statements_total{{source="{status.source}"}} 3' in render_metrics()
    for statement in ("INSERT INTO", "UPDATE", "TRUNCATE TABLE"):
        assert f"{statement} `{schema}`.t" in worker.output and "changed rows as a statement" in worker.output
    overview = viewer.get("/").content.decode()
    assert "Row changes logged as statements" in overview and f"TRUNCATE TABLE `{schema}`.t" in overview
    worker.stop()


def test_foreign_keys_whose_cascades_the_binlog_lacks_are_named_at_start(
    fresh_schema: tuple[MariaDB, str], viewer: HttpClient
) -> None:
    """The source applies ON DELETE/UPDATE CASCADE and SET NULL inside the statement and writes none of those changes
    to the binlog: the worker names those foreign keys when it starts, in its log, its status (the dashboard and
    /metrics), and `binlog check` lists them."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.p (id INT PRIMARY KEY) ENGINE=InnoDB",
        f"CREATE TABLE `{schema}`.c (id INT PRIMARY KEY, pid INT, FOREIGN KEY fk_parent (pid) REFERENCES"
        f" `{schema}`.p (id) ON DELETE CASCADE) ENGINE=InnoDB",
        f"CREATE TABLE `{schema}`.r (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES `{schema}`.p (id))",
    )
    subscribe("children", 7, schema, "c")
    worker = start_worker(server, server.binlog_position())
    server.execute(f"INSERT INTO `{schema}`.p VALUES (1)", f"INSERT INTO `{schema}`.c VALUES (10, 1)")
    server.execute(f"DELETE FROM `{schema}`.p WHERE id = 1")  # deletes c's row 10: not in the binlog
    caught_up(server, worker)
    assert queue_of("children") == [("c", 1, "10")]
    wait_for(lambda: f"{schema}.c (" in worker.output, timeout=30, message="the cascading foreign key named")
    assert f"-> {schema}.p ON DELETE CASCADE)" in worker.output
    assert f"{schema}.r (" not in worker.output  # RESTRICT changes nothing else
    status = wait_for(lambda: WorkerStatus.objects.filter(cascading_foreign_keys__contains=f"{schema}.c (").first())
    named = [line for line in status.cascading_foreign_keys.splitlines() if schema in line]
    assert len(named) == 1 and named[0].endswith(f"-> {schema}.p ON DELETE CASCADE)"), named
    assert f'relay_cascading_foreign_keys{{source="{status.source}"}} ' in render_metrics()
    overview = viewer.get("/").content.decode()
    assert "Foreign keys that cascade" in overview and f"{schema}.c (" in overview
    worker.stop()


@pytest.mark.parametrize("command", ["poll", "fetch"])
def test_entries_the_unqueue_oldest_policy_discarded_are_not_served_from_a_read_ahead(
    fresh_schema: tuple[MariaDB, str], command: str
) -> None:
    """The relay reads ahead of a client's queue (POLL's next entries, FETCH's next batch); when the worker's
    unqueue-oldest policy then drops the queue's oldest entries, the relay hears it (PostgreSQL), or reads the head
    again before it serves a read-ahead that waited (SQLite), and serves none of them: the client gets what the queue
    holds, and served + discarded + queued add up to what was routed."""
    from clientproto import RelayClient
    from tests.helpers.processes import TEST_SECRET, start_relay

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    worker = start_worker(server, server.binlog_position(), batch_ms=10)
    _relay, port = start_relay(server)
    with RelayClient("127.0.0.1", port, TEST_SECRET, "bounded") as client:
        client.add_filter("I", schema, "t", 4, 1)
        server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({n})" for n in range(1, 5)))
        caught_up(server, worker)
        first = client.poll() if command == "poll" else client.fetch(2, wait_ms=0)[0]
        assert first is not None and first.after()["id"] == b"1"
        time.sleep(0.5)  # the read-ahead of what follows is in
        server.execute(*(f"INSERT INTO `{schema}`.t VALUES ({n})" for n in range(5, 15)))
        caught_up(server, worker)
        time.sleep(0.3)  # the notification heard
        got = []
        # FETCH asks what it asked first: its read-ahead is served only to the same request.
        while events := ([e] if (e := client.poll()) else []) if command == "poll" else client.fetch(2, wait_ms=0):
            got += [int(event.after()["id"] or b"0") for event in events]
    assert got == list(range(11, 15)), got
    bounded = Client.objects.get(name="bounded")
    served = (2 if command == "fetch" else 1) + 4
    wait_for(lambda: Client.objects.get(id=bounded.id).served == served, timeout=10, message="every reply counted")
    state = QueueState.objects.get(client_id=bounded.id)
    # Each routed entry served or discarded once (the head the first reply acknowledged may reach the store after
    # the worker dropped it: then it is counted as dropped, and the relay served no other dropped entry).
    assert served + state.discarded in (state.last_seq, state.last_seq + 1) and state.last_seq == 14
    worker.stop()


def test_second_worker_is_a_standby_and_takes_over(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    start = server.binlog_position()
    first = start_worker(server, start)
    wait_for(lambda: WorkerStatus.objects.filter(pid=first.process.pid, state="connected").exists(), 30)
    second = start_worker(server, start)
    wait_for(lambda: "standby" in second.output, 30, message="standby message")
    wait_for(lambda: WorkerStatus.objects.filter(standby_pid=second.process.pid).exists(), 30, message="standby row")
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, first)
    first.kill()
    wait_for(lambda: WorkerStatus.objects.filter(pid=second.process.pid).exists(), 30, message="takeover")
    assert WorkerStatus.objects.get().standby_pid is None
    server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
    caught_up(server, second)
    assert [key for *_, key in queue_of("c")] == ["1", "2"]


def _active_and_standby(server: MariaDB, schema: str, takeover_seconds: int) -> tuple[RelayProcess, RelayProcess]:
    """Table ``t`` with client ``c`` subscribed to its inserts, and two workers with ``--takeover-after``: the first
    active (connected), the second waiting as its standby. PostgreSQL only (the test is skipped on SQLite)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test store (SQLite: a file lock, which a frozen process keeps)")
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    start = server.binlog_position()
    takeover = ("--takeover-after", str(takeover_seconds))
    active = start_worker(server, start, batch_ms=10, options=takeover)
    wait_for(lambda: WorkerStatus.objects.filter(pid=active.process.pid, state="connected").exists(), 30)
    standby = start_worker(server, start, batch_ms=10, options=takeover)
    wait_for(lambda: WorkerStatus.objects.filter(standby_pid=standby.process.pid).exists(), 30, message="standby")
    return active, standby


def test_a_frozen_active_worker_is_taken_over_and_writes_nothing_after(fresh_schema: tuple[MariaDB, str]) -> None:
    """SIGSTOP of the active worker while rows come, at any instant of its work: the standby ends its store sessions
    once its lease is older than --takeover-after and takes over; the frozen one, resumed, becomes the standby without
    writing anything. Twice, the roles swapped; the queue ends exact. An idle active worker keeps its lock."""
    server, schema = fresh_schema
    active, standby = _active_and_standby(server, schema, 2)
    time.sleep(4)  # twice the takeover time with the source quiet: the lease keeps the lock with the active worker
    assert WorkerStatus.objects.get().pid == active.process.pid

    written = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal written
        with server.connect(schema) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute(f"INSERT INTO t VALUES ({written + 1})")  # autocommit: a transaction a row
                written += 1
                time.sleep(0.002)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(2):
            time.sleep(random.uniform(0.3, 1.0))  # frozen at any point of a batch
            active.signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            new_pid, old_pid = standby.process.pid, active.process.pid
            wait_for(lambda: WorkerStatus.objects.get().pid == new_pid, 60, message="takeover")  # noqa: B023
            assert time.monotonic() - frozen_at >= 1.5  # not before the lease was stale
            assert "has not renewed its lease" in standby.output
            active.signal(signal.SIGCONT)
            wait_for(lambda: WorkerStatus.objects.get().standby_pid == old_pid, 60, message="standby")  # noqa: B023
            active, standby = standby, active
    finally:
        stop.set()
        writer.join(30)
    caught_up(server, active)
    assert [key for *_, key in queue_of("c")] == [str(n) for n in range(1, written + 1)]
    assert standby.alive() and active.alive()
    # The first worker was active again in the second round: its changes must still come after the other's in id
    # order, as the garbage collector counts on (ids taken from a range it had reserved before would not).
    positions = list(Change.objects.order_by("id").values_list("binlog_file", "binlog_pos", "row_index"))
    assert positions == sorted(positions)


def test_a_standby_takes_over_a_worker_frozen_inside_a_batch(fresh_schema: tuple[MariaDB, str]) -> None:
    """A worker frozen inside a batch's transaction holds its status row: the standby, which reports itself on that
    row, must still take over (here the row is held from a session of the test, as the frozen batch would hold it,
    until the standby has ended the frozen worker's sessions)."""
    import psycopg2

    server, schema = fresh_schema
    # Longer than the 5 s between two reports of the standby: one of them comes due while the row is held.
    active, standby = _active_and_standby(server, schema, 6)
    holder = psycopg2.connect(**connection.get_connection_params())
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT id FROM relay_workerstatus FOR UPDATE")
        active.signal(signal.SIGSTOP)
        server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
        wait_for(lambda: "has not renewed its lease" in standby.output, 30, message="the frozen one's sessions ended")
    finally:
        holder.rollback()
        holder.close()
    wait_for(lambda: WorkerStatus.objects.get().pid == standby.process.pid, 30, message="takeover")
    active.signal(signal.SIGCONT)
    caught_up(server, standby)
    assert [key for *_, key in queue_of("c")] == ["1"]
    wait_for(lambda: WorkerStatus.objects.get().standby_pid == active.process.pid, 30, message="back as standby")


def test_a_worker_that_lost_only_its_lock_session_commits_nothing_after_the_takeover(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """The active worker's lock session ends (a network blip on that one connection) while its batch session goes on:
    here its large transaction waits on a table lock in its first part. The standby takes the lock and ends the old
    worker's sessions before it reads the checkpoint, so the transaction is queued once: by the new worker. (The old
    one committed it too, after the takeover: 30,000 rows twice, or a duplicate key that ended a worker.)"""
    import psycopg2

    server, schema = fresh_schema
    active, standby = _active_and_standby(server, schema, 0)
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, active)
    admin = psycopg2.connect(**connection.get_connection_params())
    admin.autocommit = True
    holder = psycopg2.connect(**connection.get_connection_params())
    try:
        with holder.cursor() as cursor:
            cursor.execute("LOCK TABLE relay_change IN SHARE MODE")
        server.execute(f"INSERT INTO `{schema}`.t SELECT seq + 1 FROM seq_1_to_30000", database=schema)
        database = connection.settings_dict["NAME"]
        with admin.cursor() as cursor:

            def waiting() -> bool:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
                    " AND application_name LIKE 'relay-worker%%' AND query LIKE 'COPY%%'",
                    [database],
                )
                return bool(cursor.fetchone()[0])

            wait_for(waiting, 60, message="the first part waiting on the lock")
            cursor.execute(
                "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND a.datname = %s",
                [database],
            )
            assert cursor.fetchone() == (True,)
        wait_for(lambda: WorkerStatus.objects.get().pid == standby.process.pid, 30, message="takeover")
    finally:
        holder.rollback()
        holder.close()
        admin.close()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (30002)")
    caught_up(server, standby, timeout=120)
    assert [int(key) for *_, key in queue_of("c")] == list(range(1, 30003))
    assert "ended them, so that nothing it had in flight commits" in standby.output
    wait_for(lambda: active.alive() and WorkerStatus.objects.get().standby_pid == active.process.pid, 30)


@pytest.mark.slow
def test_exactly_once_across_sigkills(fresh_schema: tuple[MariaDB, str]) -> None:
    """SIGKILL at random moments during 20,000+ row changes: every queue ends exact, none lost, none twice."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.a (id INT PRIMARY KEY, v VARCHAR(40))")
    server.execute(f"CREATE TABLE `{schema}`.b (id INT PRIMARY KEY, v VARCHAR(40))")
    subscribe("all", 7, schema, "*")
    subscribe("inserts_a", 1, schema, "a")
    subscribe("b_changes", 6, schema, "b")
    rng = random.Random(20_000)
    sizes = [1, 2, 5, 5000, 3, 1, 2500, 10, 1, 700, 4000, 1, 1, 300, 5000, 50, 2, 1000, 1, 1500]
    expected: dict[str, list[tuple[str, int, str]]] = {"all": [], "inserts_a": [], "b_changes": []}
    next_id = 1
    first_start = "{}:{}".format(*server.binlog_position())
    worker = start_worker(server, None, RELAY_SERVER_STARTFROM=first_start)
    kills = 0
    with server.connect(schema) as conn, conn.cursor() as cur:
        for number, size in enumerate(sizes):
            table = "a" if number % 2 == 0 else "b"
            ids = list(range(next_id, next_id + size))
            next_id += size
            cur.execute("BEGIN")
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(i, f"row {i}") for i in ids])
            if table == "b" and size > 1:
                cur.execute(f"UPDATE b SET v = 'changed' WHERE id IN ({ids[0]}, {ids[1]})")
            cur.execute("COMMIT")
            rows = [(table, 1, str(i)) for i in ids]
            if table == "b" and size > 1:
                rows += [(table, 2, str(ids[0])), (table, 2, str(ids[1]))]
            expected["all"] += rows
            expected["inserts_a"] += [row for row in rows if row[0] == "a"]
            expected["b_changes"] += [row for row in rows if row[0] == "b" and row[1] in (2, 4)]
            if number % 2 == 1:
                time.sleep(rng.uniform(0.05, 0.6))
                worker.kill()
                kills += 1
                worker = start_worker(server, None, RELAY_SERVER_STARTFROM=first_start)
                time.sleep(rng.uniform(0.3, 1.2))
    assert sum(len(v) for v in expected.values()) >= 20_000
    # A few more kills while it catches up.
    while kills < 12:
        time.sleep(rng.uniform(0.2, 0.8))
        worker.kill()
        kills += 1
        worker = start_worker(server, None, RELAY_SERVER_STARTFROM=first_start)
    caught_up(server, worker, timeout=180)
    for name, rows in expected.items():
        assert queue_of(name) == rows, name
    assert worker.stop() == 0


def test_a_kill_right_after_a_large_transactions_commit_keeps_its_change_log_lines_once(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """SIGKILL as soon as the checkpoint shows a 50,000-row transaction committed: its lines were to be copied to the
    log after the commit (lost, or a line cut in half). They are in the log before it, behind a marker that the next
    worker resolves by the checkpoint: each row once, every line whole."""
    import json

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
    subscribe("c", 1, schema, "t")
    logs = scratch_dir("relay-changelog-")
    env = {"RELAY_LOGGER_PATH": logs, "RELAY_LOGGER_SCHEMA": schema, "RELAY_LOGGER_FORMAT": "json"}
    worker = start_worker(server, server.binlog_position(), batch_ms=10, **env)
    server.execute(f"INSERT INTO `{schema}`.t (v) VALUES (0)")
    caught_up(server, worker)
    server.execute(f"INSERT INTO `{schema}`.t (v) SELECT seq FROM seq_1_to_50000", database=schema)
    target = server.binlog_position()

    def committed() -> bool:
        checkpoint = Checkpoint.objects.first()
        return checkpoint is not None and (checkpoint.binlog_file, checkpoint.binlog_pos) >= target

    wait_for(committed, 120, interval=0.002, message="the large transaction committed")
    worker.kill()
    worker = start_worker(server, None, batch_ms=10, **env)
    server.execute(f"INSERT INTO `{schema}`.t (v) VALUES (1)")
    caught_up(server, worker, timeout=120)
    expected = [str(row[0]) for row in server.query(f"SELECT id FROM `{schema}`.t ORDER BY id")]
    assert [key for *_, key in queue_of("c")] == expected
    logged = [json.loads(line)["after"]["id"] for path in sorted(logs.glob("*.jsonl")) for line in path.open()]
    assert logged == expected
    assert worker.stop() == 0
    assert [path.name for path in logs.iterdir() if not path.name.endswith(".jsonl")] == []


def test_a_large_transaction_is_applied_whole_across_kills(fresh_schema: tuple[MariaDB, str]) -> None:
    """A 30,000-row transaction arrives in parts; kills in the middle of it never leave half of it queued, nor its
    change log lines twice (they were written part by part before the commit, and again when applied again)."""
    import json

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    subscribe("c", 1, schema, "t")
    first_start = "{}:{}".format(*server.binlog_position())
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, 30_001)])
        cur.execute("COMMIT")
    logs = scratch_dir("relay-changelog-")
    env = {"RELAY_SERVER_STARTFROM": first_start, "RELAY_LOGGER_PATH": logs, "RELAY_LOGGER_SCHEMA": schema}
    env["RELAY_LOGGER_FORMAT"] = "json"
    for delay in (0.8, 1.2, 1.6, 2.0):
        worker = start_worker(server, None, **env)
        time.sleep(delay)
        worker.kill()
        assert queue_size(Client.objects.get(name="c").id) in (0, 30_000)  # all or nothing
    worker = start_worker(server, None, **env)
    caught_up(server, worker, timeout=120)
    assert [key for *_, key in queue_of("c")] == [str(i) for i in range(1, 30_001)]
    logged = [json.loads(line)["after"]["id"] for path in sorted(logs.glob("*.jsonl")) for line in path.open()]
    assert logged == [str(i) for i in range(1, 30_001)]
    assert [path.name for path in logs.iterdir() if not path.name.endswith(".jsonl")] == []  # no spool left


def test_a_batch_the_store_refuses_for_good_stops_the_worker_with_one_line_and_a_failed_state(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """A store error no wait fixes (here a trigger's refusal; a constraint or a value the store cannot take alike)
    ends the worker with one ERROR line, and its stored state says failed with the error: the dashboard, /metrics and
    /healthz do not go on showing a dead worker as connected. Nothing after the checkpoint was applied."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.poison (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "poison")
    refusal = "this row cannot be stored"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.table_name = "
                f"'poison' THEN RAISE EXCEPTION '{refusal}'; END IF; RETURN NEW; END $$"
            )
            cursor.execute(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON relay_change FOR EACH ROW"
                " EXECUTE FUNCTION refuse_poison()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON relay_change WHEN NEW.table_name = 'poison'"
                f" BEGIN SELECT RAISE(ABORT, '{refusal}'); END"
            )
    worker = start_worker(server, server.binlog_position())
    try:
        wait_for(lambda: WorkerStatus.objects.filter(state=WorkerStatus.State.CONNECTED).exists(), 30)
        checkpoint = Checkpoint.objects.get().binlog_pos
        server.execute(f"INSERT INTO `{schema}`.poison VALUES (1)")
        wait_for(lambda: not worker.alive(), 30, message="the worker stops")
        assert worker.process.returncode == 1
        assert "Traceback" not in worker.output, worker.output[-3000:]
        assert [line for line in worker.output.splitlines() if " ERROR " in line and refusal in line]
        status = WorkerStatus.objects.get()
        assert status.state == WorkerStatus.State.FAILED and refusal in status.last_error
        assert Checkpoint.objects.get().binlog_pos == checkpoint and not Change.objects.exists()
    finally:
        worker.kill()
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER IF EXISTS refuse_poison"
                + (" ON relay_change" if connection.vendor == "postgresql" else "")
            )
