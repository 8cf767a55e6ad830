"""Snapshots are exact, with real processes: a client that applies its queue in order (snapshot rows and inserts as
upserts, updates as upserts of the after image, deletes as deletes) ends with a copy equal to ``SELECT *``, while a
writer keeps updating, deleting and inserting rows of the table, including inside the chunk being read, and when the
worker is killed with -9 in the middle."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from binlog.constants import (
    KIND_DELETE,
    KIND_INSERT,
    KIND_SNAPSHOT_END,
    KIND_SNAPSHOT_ROW,
    KIND_SNAPSHOT_START,
    KIND_UPDATE,
)
from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay import store
from relay.models import Change, Client, Filter, Snapshot
from relay.store import rowcodec
from relay.store.snapshots import SnapshotRefused, request_snapshots
from tests.helpers.processes import RelayProcess
from tests.helpers.queues import queue_size
from tests.helpers.worker import caught_up, start_worker, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 20_000
T = TypeVar("T")


def _fill(server: MariaDB, schema: str, rows: int = ROWS) -> None:
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT, d DATETIME(3), b VARBINARY(8))"
    )
    server.execute(
        f"INSERT INTO `{schema}`.t SELECT seq, CONCAT('v', seq), seq * 7, '2024-01-02 03:04:05.678', "
        f"UNHEX(LPAD(HEX(seq), 8, '0')) FROM seq_1_to_{rows}",
        database=schema,
    )


class Writer(threading.Thread):
    """Updates, deletes and inserts rows of the table until stopped, in one-row and few-row transactions; half of
    the operations aim just above the snapshot's last key, at the chunk being read. One transaction in five is an XA
    transaction, prepared, then committed a moment later (one in four of those rolled back): its rows come with the
    commit, which may fall between a chunk's read and its point."""

    def __init__(self, server: MariaDB, schema: str, snapshot_id: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.schema, self.snapshot_id = server, schema, snapshot_id
        self.random = random.Random(seed)
        self.halt = threading.Event()
        self.operations = 0
        self.failure: BaseException | None = None
        self.rotate_every = 0

    def _pick(self) -> int:
        if self.random.random() < 0.5:
            last = Snapshot.objects.filter(id=self.snapshot_id).values_list("last_key", flat=True).first()
            if last:
                return int(last.strip('[]"')) + self.random.randint(-50, 400)
        return self.random.randint(1, ROWS + 2_000)

    def run(self) -> None:
        try:
            conn = self.server.connect(self.schema, autocommit=False)
            with conn.cursor() as cursor:
                while not self.halt.is_set():
                    xid = f"w{self.operations}" if self.random.random() < 0.2 else ""
                    if xid:
                        cursor.execute(f"XA START '{xid}'")
                    for _ in range(self.random.choice((1, 1, 1, 3))):
                        key = self._pick()
                        action = self.random.random()
                        if action < 0.45:
                            cursor.execute(
                                "UPDATE t SET v = %s, n = n + 1, b = %s WHERE id = %s",
                                (f"u{self.operations}", bytes([self.operations % 256]), key),
                            )
                        elif action < 0.6:  # moves a row's key: a delete and an insert for a keyed copy
                            cursor.execute("UPDATE IGNORE t SET id = id + 100000 WHERE id = %s", (key,))
                        elif action < 0.8:
                            cursor.execute("DELETE FROM t WHERE id = %s", (key,))
                        else:
                            cursor.execute(
                                "INSERT IGNORE INTO t VALUES (%s, %s, 1, NOW(3), NULL)", (key, f"i{self.operations}")
                            )
                        self.operations += 1
                    if xid:
                        cursor.execute(f"XA END '{xid}'")
                        cursor.execute(f"XA PREPARE '{xid}'")
                        time.sleep(self.random.random() * 0.005)
                        ending = "ROLLBACK" if self.random.random() < 0.25 else "COMMIT"
                        cursor.execute(f"XA {ending} '{xid}'")
                    else:
                        conn.commit()
                    if self.rotate_every and self.operations % self.rotate_every < 3:
                        cursor.execute("FLUSH BINARY LOGS")  # the snapshot's positions cross binlog files
                    time.sleep(self.random.random() * 0.002)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            import traceback

            self.failure = exc
            self.trace = traceback.format_exc()


def _key(change: Change, columns: list[Any], image: str) -> str:
    return next(str(getattr(c, image)) for c in columns if c.name == "id")


def rebuild(client_name: str) -> tuple[dict[str, tuple[Any, ...]], list[int]]:
    """The client's copy of the table, from its queue applied in order; and the kinds in queue order."""
    client = Client.objects.get(name=client_name)
    ids = [change_id for _, change_id in store.entry_change_ids(client.id, client.acked_seq, 10**9)]
    changes = Change.objects.in_bulk(ids)
    copy: dict[str, tuple[Any, ...]] = {}
    kinds: list[int] = []
    for change_id in ids:
        change = changes[change_id]
        kinds.append(change.kind)
        if change.kind in (KIND_SNAPSHOT_START, KIND_SNAPSHOT_END):
            continue
        columns = rowcodec.decode(change.data)
        if change.kind in (KIND_INSERT, KIND_SNAPSHOT_ROW):
            copy[_key(change, columns, "after")] = tuple(c.after for c in columns)
        elif change.kind == KIND_DELETE:
            copy.pop(_key(change, columns, "before"), None)
        else:
            copy.pop(_key(change, columns, "before"), None)
            copy[_key(change, columns, "after")] = tuple(c.after for c in columns)
    return copy, kinds


def table_rows(server: MariaDB, schema: str) -> dict[str, tuple[Any, ...]]:
    """``SELECT *`` in the text forms the decoder gives (binary columns as bytes)."""
    from pymysql.converters import encoders

    with server.connect(schema, conv=dict(encoders)) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT id, v, n, d, b FROM t")
        rows = [(*tuple(v.decode() if isinstance(v, bytes) else v for v in row[:4]), row[4]) for row in cursor]
        return {row[0]: row for row in rows}


@pytest.fixture
def streaming(fresh_schema: tuple[MariaDB, str]) -> Iterator[tuple[MariaDB, str, dict[str, RelayProcess]]]:
    server, schema = fresh_schema
    _fill(server, schema)
    holder: dict[str, RelayProcess] = {}
    yield server, schema, holder


def _start(server: MariaDB, chunk_rows: int, **env: object) -> RelayProcess:
    return start_worker(server, server.binlog_position(), batch_ms=20, RELAY_SNAPSHOT_CHUNKROWS=chunk_rows, **env)


def _resume(server: MariaDB, chunk_rows: int, **env: object) -> RelayProcess:
    return start_worker(server, batch_ms=20, RELAY_SNAPSHOT_CHUNKROWS=chunk_rows, **env)


def _snapshot_under_way(server: MariaDB, schema: str) -> tuple[RelayProcess, Snapshot]:
    """A worker reading a snapshot of ``schema``.t for the client "copy" slowly (50 rows a chunk, 400 rows a second),
    once its first 150 rows are queued."""
    worker = _start(server, 50, RELAY_SNAPSHOT_ROWSPERSECOND=400)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    snapshot = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0]
    wait_for(lambda: Snapshot.objects.get(id=snapshot.id).rows_done >= 150, timeout=60, message="a quarter read")
    return worker, snapshot


def _wait_done(snapshot: Snapshot, worker: RelayProcess, timeout: float = 240) -> Snapshot:
    def finished() -> bool:
        assert worker.alive(), worker.output[-3000:]
        snapshot.refresh_from_db()
        return snapshot.state not in Snapshot.ACTIVE

    wait_for(finished, timeout=timeout, message=f"snapshot #{snapshot.id} done")
    return snapshot


def _run(
    server: MariaDB,
    schema: str,
    *,
    chunk_rows: int,
    seed: int,
    kill_at: float | None = None,
    rotate_every: int = 0,
    **env: object,
) -> None:
    worker = _start(server, chunk_rows, **env)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    subscribe("everything", 7, schema, "*")  # sees every table of the schema, the signal table's too if it leaked
    snapshot = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0]
    writer = Writer(server, schema, snapshot.id, seed)
    writer.rotate_every = rotate_every
    writer.start()
    try:
        if kill_at is not None:
            wait_for(
                lambda: Snapshot.objects.get(id=snapshot.id).rows_done >= ROWS * kill_at,
                timeout=240,
                message="the snapshot half way",
            )
            worker.kill()
            worker = _resume(server, chunk_rows, **env)
        snapshot = _wait_done(snapshot, worker)
        time.sleep(0.3)  # the writer goes on a little after the last chunk
    finally:
        writer.halt.set()
        writer.join(30)
    assert writer.failure is None, writer.trace
    assert snapshot.state == Snapshot.State.DONE, (snapshot.state, snapshot.error, worker.output[-3000:])
    caught_up(server, worker)
    copy, kinds = rebuild("copy")
    expected = table_rows(server, schema)
    assert writer.operations > 100
    assert kinds.count(KIND_SNAPSHOT_START) == 1 and kinds.count(KIND_SNAPSHOT_END) == 1
    assert kinds.index(KIND_SNAPSHOT_START) < kinds.index(KIND_SNAPSHOT_ROW) < kinds.index(KIND_SNAPSHOT_END)
    missing = sorted(set(expected) - set(copy), key=int)[:10]
    extra = sorted(set(copy) - set(expected), key=int)[:10]
    wrong = [key for key in expected if key in copy and copy[key] != expected[key]][:10]
    assert not (missing or extra or wrong), (missing, extra, [(k, copy[k], expected[k]) for k in wrong])
    assert len(copy) == len(expected) > ROWS // 2
    everything = Client.objects.get(name="everything")
    tables = set(
        Change.objects.filter(
            id__in=[i for _, i in store.entry_change_ids(everything.id, everything.acked_seq, 10**9)]
        ).values_list("table_name", flat=True)
    )
    assert tables == {"t"}  # the watermarks are the relay's own: no client gets them
    worker.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("chunk_rows", "seed", "rotate_every"), [(1_000, 1, 0), (137, 2, 0), (5_000, 3, 0), (400, 8, 300)]
)
def test_consistent_snapshot_is_exact_under_concurrent_writes(
    streaming: Any, chunk_rows: int, seed: int, rotate_every: int
) -> None:
    server, schema, _ = streaming
    _run(server, schema, chunk_rows=chunk_rows, seed=seed, rotate_every=rotate_every)


def test_a_snapshot_of_an_idle_source_after_a_rotation_completes(fresh_schema: tuple[MariaDB, str]) -> None:
    """Nothing but the rotation's own events after the last transaction: the chunk's position is still reached."""
    server, schema = fresh_schema
    _fill(server, schema, rows=500)
    worker = _start(server, 100)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    server.execute("FLUSH BINARY LOGS")
    snapshot = _wait_done(request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0], worker, 60)
    assert (snapshot.state, snapshot.rows_done) == (Snapshot.State.DONE, 500)
    worker.stop()


@pytest.mark.slow
def test_snapshot_survives_a_kill_of_the_worker(streaming: Any) -> None:
    server, schema, _ = streaming
    _run(server, schema, chunk_rows=500, seed=4, kill_at=0.4)


@pytest.mark.slow
@pytest.mark.parametrize(("chunk_rows", "seed", "kill_at"), [(1_000, 5, None), (300, 6, 0.3)])
def test_watermark_snapshot_is_exact_under_concurrent_writes(
    streaming: Any, chunk_rows: int, seed: int, kill_at: float | None
) -> None:
    server, schema, _ = streaming
    _run(
        server,
        schema,
        chunk_rows=chunk_rows,
        seed=seed,
        kill_at=kill_at,
        RELAY_SNAPSHOT_METHOD="watermark",
        RELAY_SNAPSHOT_SIGNALTABLE=f"{schema}.relay_signal",
        RELAY_MYSQL_LOGIN="root",  # the marks are writes: the replication user may only read
        RELAY_MYSQL_PASSWORD="",
    )


def test_a_table_without_a_key_fails_with_the_reason(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.nokey (a INT, b INT NULL, UNIQUE KEY (b))")
    worker = _start(server, 100)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "nokey")
    snapshot = _wait_done(request_snapshots(Client.objects.get(name="copy"), [(schema, "nokey")])[0], worker, 60)
    assert snapshot.state == Snapshot.State.FAILED
    assert "no primary key and no unique key over NOT NULL columns" in snapshot.error
    _, kinds = rebuild("copy")
    assert kinds == [KIND_SNAPSHOT_END]  # FETCH clients learn it from the end marker
    worker.stop()


def test_a_request_needs_a_filter_that_covers_the_table(fresh_schema: tuple[MariaDB, str]) -> None:
    _, schema = fresh_schema
    subscribe("copy", 2, schema, "t")  # updates only
    with pytest.raises(SnapshotRefused, match="no filter that covers inserts"):
        request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])
    subscribe("copy", 1, schema, "t*")
    with pytest.raises(SnapshotRefused, match="SLEEP"):
        request_snapshots(Client.objects.get(name="copy"), [(schema, "t")], where="id > 0 AND SLEEP(10)")
    subscribe("copy", 7, "*", "*")
    with pytest.raises(SnapshotRefused, match="the server's own schemas"):
        request_snapshots(Client.objects.get(name="copy"), [("mysql", "user")])
    first = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")], where="id > 5")
    again = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")], where="id > 5")
    assert [s.id for s in first] == [s.id for s in again]  # asking again attaches to the one under way
    with pytest.raises(SnapshotRefused, match="cancel it first"):
        request_snapshots(Client.objects.get(name="copy"), [(schema, "t")], where="id > 6")


def test_an_empty_table_gets_its_markers_and_a_where_limits_the_rows(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.`empty` (id INT PRIMARY KEY)")
    _fill(server, schema, rows=300)
    worker = _start(server, 50)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "*")
    client = Client.objects.get(name="copy")
    empty, some = request_snapshots(client, [(schema, "empty"), (schema, "t")], where="")
    _wait_done(empty, worker, 60)
    _wait_done(some, worker, 60)
    filtered = request_snapshots(client, [(schema, "t")], where="n % 2 = 0 AND v LIKE 'v%'")[0]
    _wait_done(filtered, worker, 60)
    assert (empty.rows_done, some.rows_done, filtered.rows_done) == (0, 300, 150)
    _, kinds = rebuild("copy")
    assert kinds[:2] == [KIND_SNAPSHOT_START, KIND_SNAPSHOT_END]
    assert kinds.count(KIND_SNAPSHOT_ROW) == 450
    worker.stop()


def test_rows_per_second_paces_the_chunks(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    _fill(server, schema, rows=3_000)
    worker = _start(server, 500, RELAY_SNAPSHOT_ROWSPERSECOND=2_000)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    snapshot = _wait_done(request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0], worker, 60)
    assert snapshot.state == Snapshot.State.DONE and snapshot.rows_done == 3_000
    assert snapshot.chunks_done == 7  # six full chunks, then the short one that ends the table
    # Each chunk of 500 rows waits 500 / 2,000 s before the next read: the seven reads span six waits at least.
    assert snapshot.started is not None and snapshot.finished is not None
    assert (snapshot.finished - snapshot.started).total_seconds() >= 5 * 0.25
    worker.stop()


def _expected_wire(server: MariaDB, schema: str) -> dict[bytes, dict[str, bytes | None]]:
    """The table as a relay client sees it: every value as bytes, keyed by id."""
    names = ("id", "v", "n", "d", "b")
    return {
        key.encode(): {
            name: value if isinstance(value, bytes) or value is None else value.encode()
            for name, value in zip(names, row, strict=True)
        }
        for key, row in table_rows(server, schema).items()
    }


def _until_drained(client_name: str, take: Callable[[], T | None]) -> Iterator[T]:
    """What ``take`` gives until the client's queue is empty in the store. An EMPTY reply alone does not say so: the
    server also answers EMPTY while a store read fails (busy, under load), and the client polls again."""
    client_id = Client.objects.get(name=client_name).id
    deadline = time.monotonic() + 120
    while True:
        if got := take():
            yield got
        elif queue_size(client_id) == 0:
            return
        else:
            assert time.monotonic() < deadline, f"{client_name}: EMPTY while {queue_size(client_id)} entries are queued"
            time.sleep(0.05)


@pytest.mark.slow
def test_legacy_poll_and_fetch_clients_rebuild_the_table_over_the_relay(streaming: Any) -> None:
    """The original protocol's path: a POLL client sees the snapshot's rows as plain INSERTs (no markers) and
    rebuilds the table like a FETCH client applying flagged rows between markers, while the writer goes on."""
    from clientproto import EventType, RelayClient, TableMirror
    from tests.helpers.processes import TEST_SECRET, start_relay

    server, schema, _ = streaming
    worker = _start(server, 1_500)
    caught_up(server, worker)
    _relay, port = start_relay(server)
    with (
        RelayClient("127.0.0.1", port, TEST_SECRET, "legacy") as legacy,
        RelayClient("127.0.0.1", port, TEST_SECRET, "modern") as modern,
    ):
        legacy.add_filter("IUD", schema, "t")
        modern.add_filter("IUD", schema, "t")
        asked = [modern.snapshot([f"{schema}.t"])[0].snapshot_id]
        asked += [s.id for s in request_snapshots(Client.objects.get(name="legacy"), [(schema, "t")])]
        writer = Writer(server, schema, asked[-1], seed=7)
        writer.start()
        copy: dict[bytes, dict[str, bytes | None]] = {}
        mirror = TableMirror(("id",))
        types: set[int] = set()
        flagged = markers = 0
        try:
            while Snapshot.objects.filter(id__in=asked, state__in=Snapshot.ACTIVE).exists():
                for event in modern.fetch(1_000, wait_ms=200):
                    mirror.apply(event)
                    flagged += event.snapshot
                    markers += event.is_marker
                assert worker.alive(), worker.output[-3000:]
        finally:
            writer.halt.set()
            writer.join(30)
        assert writer.failure is None, writer.trace
        caught_up(server, worker)
        for batch in _until_drained("modern", lambda: modern.fetch(1_000, wait_ms=300)):
            for event in batch:
                mirror.apply(event)
                flagged += event.snapshot
                markers += event.is_marker
        # The legacy client polls one event at a time, as the original clients do; INSERT, UPDATE, DELETE only.
        for event in _until_drained("legacy", legacy.poll):
            types.add(event.type)
            before, after = event.before(), event.after()
            if event.type == EventType.INSERT:
                copy[after["id"] or b""] = after
            elif event.type == EventType.UPDATE:
                copy.pop(before["id"] or b"", None)
                copy[after["id"] or b""] = after
            else:
                copy.pop(before["id"] or b"", None)
    expected = _expected_wire(server, schema)
    # POLL renders NULL as the text NULL, as the original did.
    legacy_expected = {k: {n: b"NULL" if v is None else v for n, v in row.items()} for k, row in expected.items()}
    assert types <= {EventType.INSERT, EventType.UPDATE, EventType.DELETE}
    assert copy == legacy_expected
    assert {key[0]: row for key, row in mirror.rows(schema, "t").items()} == expected
    assert markers == 2 and flagged >= ROWS // 2
    worker.stop()


def test_queue_limits_and_policies_apply_to_snapshot_rows(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    _fill(server, schema, rows=500)
    worker = _start(server, 100)
    caught_up(server, worker)
    subscribe("capped", 7, schema, "t", limit=150, policy=2)  # ignore-newest: the queue keeps its first 150 entries
    snapshot = _wait_done(request_snapshots(Client.objects.get(name="capped"), [(schema, "t")])[0], worker, 60)
    assert (snapshot.state, snapshot.rows_done) == (Snapshot.State.DONE, 500)
    wait_for(lambda: len(rebuild("capped")[1]) == 150, timeout=30, message="the capped queue")
    _, kinds = rebuild("capped")
    assert kinds == [KIND_SNAPSHOT_START] + [KIND_SNAPSHOT_ROW] * 149
    assert Filter.objects.get(client__name="capped").discarded == 502 - 150  # the rest of the rows and the end marker
    worker.stop()


@pytest.mark.slow
def test_a_frozen_source_connection_holds_neither_the_stream_nor_the_snapshot(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """The snapshot's connection stops answering mid-read (a frozen host): the live stream goes on after a bounded
    wait, the read fails on its timeout, and the snapshot completes, exact, once the connection answers again."""
    from tests.helpers.proxy import Proxy

    server, schema = fresh_schema
    _fill(server, schema, rows=5_000)
    server.execute(f"CREATE TABLE `{schema}`.live (id INT PRIMARY KEY)")
    proxy = Proxy(server.port)
    try:
        worker = _start(
            server,
            200,
            RELAY_MYSQL_HOST="127.0.0.1",
            RELAY_MYSQL_PORT=proxy.port,
            RELAY_MYSQL_LOGIN="root",
            RELAY_MYSQL_PASSWORD="",
            RELAY_SNAPSHOT_ROWSPERSECOND=1_000,
        )
        caught_up(server, worker)
        subscribe("copy", 7, schema, "t")
        subscribe("live", 7, schema, "live")
        snapshot = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0]
        wait_for(lambda: Snapshot.objects.get(id=snapshot.id).rows_done >= 1_000, timeout=60, message="a few chunks")
        proxy.frozen = True
        frozen_at = time.monotonic()
        server.execute(
            f"INSERT INTO `{schema}`.live VALUES (1)", f"UPDATE `{schema}`.t SET v = 'frozen' WHERE id = 4000"
        )
        wait_for(lambda: len(rebuild("live")[1]) == 1, timeout=60, message="the live row while the source is frozen")
        assert time.monotonic() - frozen_at < 30  # the stream waited at most one chunk's wait, not the frozen read
        proxy.frozen = False
        snapshot = _wait_done(snapshot, worker, 240)
        assert snapshot.state == Snapshot.State.DONE, (snapshot.error, worker.output[-3000:])
        caught_up(server, worker)
        copy, _ = rebuild("copy")
        assert copy == table_rows(server, schema)
        worker.stop()
    finally:
        proxy.close()


def test_chunks_shrink_while_the_stream_is_live_and_grow_back_when_it_is_quiet() -> None:
    from relay.config import SnapshotConfig
    from relay.worker.snapshots import SnapshotCoordinator

    coordinator = SnapshotCoordinator({}, SnapshotConfig(chunk_rows=2_000), lambda: "")
    try:
        sizes = []
        for seconds, live in [(0.060, True), (0.030, True), (0.001, True), (0.015, True), (0.2, False), (0.2, False)]:
            coordinator.applied(seconds, live)
            sizes.append(coordinator.next_chunk_rows)
        # 15 ms of writing per chunk while live (doubling at most per chunk), ChunkRows again once quiet.
        assert sizes == [500, 250, 500, 500, 1_000, 2_000]
        coordinator.applied(100.0, True)
        assert coordinator.next_chunk_rows == 50  # never below MIN_CHUNK_ROWS: a slow store still gets on
    finally:
        coordinator.close()


# -- a DDL on the table while its snapshot runs -----------------------------------------------------------------


def _queued(client_name: str) -> list[Change]:
    client = Client.objects.get(name=client_name)
    ids = [change_id for _, change_id in store.entry_change_ids(client.id, client.acked_seq, 10**9)]
    changes = Change.objects.in_bulk(ids)
    return [changes[change_id] for change_id in ids]


def _images(change: Change) -> tuple[dict[str, Any], dict[str, Any]]:
    columns = rowcodec.decode(change.data)
    return {c.name: c.before for c in columns}, {c.name: c.after for c in columns}


def rebuild_named(client_name: str) -> dict[str, dict[str, Any]]:
    """The client's copy of table ``t`` by id, each row by column name, from its queue applied in order."""
    copy: dict[str, dict[str, Any]] = {}
    for change in _queued(client_name):
        if change.kind in (KIND_SNAPSHOT_START, KIND_SNAPSHOT_END):
            continue
        before, after = _images(change)
        if change.kind != KIND_INSERT and change.kind != KIND_SNAPSHOT_ROW:
            copy.pop(str(before["id"]), None)
        if change.kind != KIND_DELETE:
            copy[str(after["id"])] = after
    return copy


def snapshot_markers(client_name: str) -> list[tuple[int, dict[str, Any]]]:
    return [(c.kind, _images(c)[1]) for c in _queued(client_name) if c.kind in (KIND_SNAPSHOT_START, KIND_SNAPSHOT_END)]


def named_rows(server: MariaDB, schema: str, table: str = "t") -> dict[str, dict[str, Any]]:
    """``SELECT *`` by id, each row by column name, in the decoder's text forms."""
    from pymysql.converters import encoders

    with server.connect(schema, conv=dict(encoders)) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cursor.description]
        rows = [{n: v.decode() if isinstance(v, bytes) else v for n, v in zip(names, r, strict=True)} for r in cursor]
    return {row["id"]: row for row in rows}


DDL_ROWS = 600


@pytest.mark.parametrize(
    ("ddl", "state"),
    [
        ("ALTER TABLE t MODIFY v VARCHAR(20) CHARACTER SET utf8mb4", Snapshot.State.DONE),
        ("ALTER TABLE t ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'dflt'", Snapshot.State.DONE),
        ("ALTER TABLE t DROP COLUMN n", Snapshot.State.DONE),
        ("RENAME TABLE t TO t2", Snapshot.State.FAILED),
    ],
    ids=["charset", "add", "drop", "rename"],
)
def test_a_ddl_during_the_snapshot_gives_rows_in_the_layout_of_their_point(
    fresh_schema: tuple[MariaDB, str], ddl: str, state: str
) -> None:
    """Each chunk carries the columns the table has at its point of the stream: after the DDL, chunks are read in the
    new layout (a latin1 column made utf8mb4 is no mojibake), the rows queued before keep theirs, and the stream's
    changes after the DDL carry the new layout as well. A table that is gone fails the snapshot with the reason."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET latin1, n INT)",
        f"INSERT INTO `{schema}`.t SELECT seq, CONCAT('café', seq), seq FROM seq_1_to_{DDL_ROWS}",
        database=schema,
    )
    worker, snapshot = _snapshot_under_way(server, schema)
    server.execute(ddl, database=schema)
    if state == Snapshot.State.DONE:
        # A change of an early row after the DDL: the stream gives it in the new layout too.
        server.execute("UPDATE t SET v = 'après' WHERE id = 1", database=schema)
    at_ddl = Snapshot.objects.get(id=snapshot.id).rows_done
    snapshot = _wait_done(snapshot, worker, 60)
    assert snapshot.state == state, (snapshot.error, worker.output[-3000:])
    caught_up(server, worker)
    assert at_ddl < DDL_ROWS  # the DDL came while the snapshot was under way
    markers = snapshot_markers("copy")
    assert [kind for kind, _ in markers] == [KIND_SNAPSHOT_START, KIND_SNAPSHOT_END]
    end = markers[1][1]
    rows_queued = sum(1 for c in _queued("copy") if c.kind == KIND_SNAPSHOT_ROW)
    assert end["rows"] == str(snapshot.rows_done) == str(rows_queued)
    copy = rebuild_named("copy")
    if state == Snapshot.State.FAILED:
        assert end["state"] == "failed" and end["error"] == snapshot.error
        assert snapshot.error == (
            f"{schema}.t changed during the snapshot (it was renamed or dropped); ask for it again"
        ), snapshot.error
        return
    table = named_rows(server, schema)
    assert end["state"] == "done" and snapshot.rows_done == DDL_ROWS
    assert set(copy) == set(table)
    new_layout = [key for key, row in copy.items() if row == table[key]]
    old_layout = [key for key, row in copy.items() if row != table[key]]
    if "MODIFY" in ddl:  # the values are the same text in both layouts: the copy equals the table
        assert not old_layout, [(copy[k], table[k]) for k in old_layout[:3]]
    else:
        # The rows queued before the DDL have the columns of their point (as a copy the client held all along
        # would); those from the chunks after it, and the row the stream changed after it, have the new columns.
        assert "1" in new_layout and old_layout and len(new_layout) > DDL_ROWS - at_ddl
        for key in old_layout:
            assert set(copy[key]) ^ set(table[key]) == {"c" if "ADD" in ddl else "n"}, copy[key]
            assert all(copy[key][name] == table[key][name] for name in set(copy[key]) & set(table[key]))
            assert int(key) <= at_ddl + 50  # read before the DDL: at most the chunk in flight then
    assert table["2"]["v"] == "café2" and copy["1"]["v"] == "après"
    worker.stop()


# -- cancelling --------------------------------------------------------------------------------------------------


def test_no_chunk_is_queued_after_its_snapshot_is_cancelled(fresh_schema: tuple[MariaDB, str]) -> None:
    """A cancel while chunks flow: the worker notices it only every CHECK_SECONDS, but no chunk is queued once the
    cancel is committed, and the end marker counts exactly the snapshot rows queued before it."""
    from relay.store.snapshots import cancel_snapshots

    server, schema = fresh_schema
    _fill(server, schema, rows=6_000)
    worker = _start(server, 100, RELAY_SNAPSHOT_ROWSPERSECOND=4_000)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    snapshot = request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0]
    wait_for(lambda: Snapshot.objects.get(id=snapshot.id).rows_done >= 1_000, timeout=60, message="a few chunks")
    assert cancel_snapshots([snapshot]) == 1
    counted = Snapshot.objects.get(id=snapshot.id).rows_done
    wait_for(lambda: len(snapshot_markers("copy")) == 2, timeout=30, message="the end marker")
    time.sleep(1.0)  # a chunk queued after the cancel would be in by now
    snapshot.refresh_from_db()
    assert snapshot.state == Snapshot.State.CANCELLED and snapshot.rows_done == counted < 6_000
    kinds = [c.kind for c in _queued("copy")]
    assert kinds == [KIND_SNAPSHOT_START] + [KIND_SNAPSHOT_ROW] * counted + [KIND_SNAPSHOT_END]
    assert snapshot_markers("copy")[1][1] == {
        "snapshot": str(snapshot.id),
        "rows": str(counted),
        "state": "cancelled",
        "error": None,
    }
    worker.stop()


def test_a_chunk_of_a_cancelled_snapshot_is_withdrawn_in_the_batchs_transaction() -> None:
    """record(), in the batch's store transaction, finds the snapshot cancelled: the chunk's rows leave the batch,
    the cancelled end marker (rows: those counted) takes their place; a snapshot cancelled before anything of it
    was queued gets no marker; an active one is counted."""
    from django.db import transaction

    from binlog.position import Position
    from binlog.table import TableInfo
    from relay.store.snapshots import cancel_snapshots
    from relay.worker.snapshots import SnapshotCoordinator, SnapshotRow, _Job, _Placed

    subscribe("copy", 7, "shop", "*")
    client = Client.objects.get(name="copy")
    queued_before, nothing_before, active = request_snapshots(
        client, [("shop", "orders"), ("shop", "items"), ("shop", "users")]
    )
    Snapshot.objects.filter(id=queued_before.id).update(state=Snapshot.State.RUNNING, rows_done=100, chunks_done=1)
    assert cancel_snapshots([queued_before, nothing_before]) == 2
    at = Position("mysql-bin.000007", 4_000)

    def placed(snapshot: Snapshot) -> _Placed:
        job = _Job(snapshot.id, client.id, "shop", snapshot.table_name, "", None, first=False)
        info = TableInfo("shop", snapshot.table_name, (), primary_key=("id",))
        rows: list[Any] = [
            SnapshotRow(
                client.id,
                snapshot.id,
                "shop",
                snapshot.table_name,
                KIND_SNAPSHOT_ROW,
                ("id",),
                None,
                (str(n),),
                at.file,
                at.pos,
                n,
                0,
                "",
                info,
            )
            for n in range(50)
        ]
        return _Placed(job, 50, ("150",), False, rows, at=at)

    chunks = [placed(queued_before), placed(nothing_before), placed(active)]
    with transaction.atomic():
        SnapshotCoordinator.record(chunks)
    withdrawn, nothing, counted = chunks
    assert withdrawn.job.withdrawn and [(c.kind, c.after, c.file, c.pos) for c in withdrawn.changes] == [
        (KIND_SNAPSHOT_END, (str(queued_before.id), "100", "cancelled", None), at.file, at.pos)
    ]
    assert nothing.job.withdrawn and nothing.changes == []
    assert not counted.job.withdrawn and len(counted.changes) == 50
    stored = {s.id: (s.state, s.rows_done, s.chunks_done) for s in Snapshot.objects.all()}
    assert stored == {
        queued_before.id: (Snapshot.State.CANCELLED, 100, 1),
        nothing_before.id: (Snapshot.State.CANCELLED, 0, 0),
        active.id: (Snapshot.State.RUNNING, 50, 1),
    }


def test_a_read_refused_for_a_ddl_does_not_hold_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader reports the table's change before it has a position: the stream, waiting for the chunk's position,
    goes on at once, and the next chunk is read with the table's new plan."""
    from binlog.changes import Transaction
    from binlog.position import Position
    from binlog.snapshot import CONSISTENT, TableChanged, TablePlan
    from relay.config import SnapshotConfig
    from relay.worker import snapshots
    from relay.worker.snapshots import SnapshotCoordinator, _Job

    monkeypatch.setattr(snapshots, "CHUNK_WAIT_SECONDS", 5.0)
    old = TablePlan("shop", "t", (), ("id",), (0,), "InnoDB", None)
    new = TablePlan("shop", "t", (), ("id",), (0,), "InnoDB", 7)
    started = threading.Event()

    class ChangedTable:
        def read(self, *args: object) -> None:
            started.set()
            time.sleep(0.05)  # the stream is already waiting for the position
            raise TableChanged("shop.t changed during the snapshot (column c added); reading on in its new layout", new)

        def close(self) -> None:
            pass

    coordinator = SnapshotCoordinator({}, SnapshotConfig(method=CONSISTENT), lambda: "")
    try:
        coordinator.reader = ChangedTable()  # type: ignore[assignment]
        coordinator._checked = time.monotonic() + 60  # no look at the store
        job = coordinator._job = _Job(1, 1, "shop", "t", "", None, first=False, plan=old)
        coordinator.tick()
        assert started.wait(5)
        applied = Position("mysql-bin.000001", 100)
        begun = time.monotonic()
        out, placed = coordinator.arrange([Transaction([], Position("mysql-bin.000001", 200))], applied)
        assert time.monotonic() - begun < 1.0  # not the wait for a position that never comes
        assert (len(out), placed) == (1, [])
        assert job.plan is new and job.pending is None and coordinator._job is job
    finally:
        coordinator.close()


def test_a_table_rebuilt_during_a_chunks_read_is_read_again() -> None:
    """OPTIMIZE or ALTER ... FORCE after the consistent snapshot began: the SELECT fails with 1412 ("please retry
    transaction") in an unchanged layout. The chunk is read again later; the snapshot does not fail."""
    import pymysql

    from binlog.snapshot import TablePlan
    from relay.config import SnapshotConfig
    from relay.worker.snapshots import SnapshotCoordinator, _Job

    coordinator = SnapshotCoordinator({}, SnapshotConfig(), lambda: "")
    try:
        plan = TablePlan("shop", "t", (), ("id",), (0,), "InnoDB", None)
        job = coordinator._job = _Job(1, 1, "shop", "t", "", None, first=False, plan=plan)
        rebuilt = pymysql.err.OperationalError(1412, "Table definition has changed, please retry transaction")
        coordinator._read_failed(job, rebuilt)
        assert coordinator._job is job and not coordinator._finishing and job.not_before > time.monotonic()
    finally:
        coordinator.close()


def _arranged_around_an_xa_commit(method: str, updated: tuple[object, object]) -> tuple[list[Any], list[Any], Any]:
    """One chunk's placement, the coordinator's own, in a batch with an XA COMMIT that its read did not see: the XA
    updates id 2 (its after image ``updated``) and deletes id 3, which the read still has (MariaDB binlogs an XA
    COMMIT before the engine commits it). The batch's transactions with the chunk placed, what was placed, and the
    snapshots the coordinator ended."""
    from binlog.changes import RowChange, Transaction
    from binlog.position import Position
    from binlog.schema import SchemaColumn
    from binlog.snapshot import Chunk, SignalTable, TablePlan
    from binlog.table import TableInfo
    from relay.config import SnapshotConfig
    from relay.worker.snapshots import SnapshotCoordinator, _Job

    columns = (
        SchemaColumn("id", "int", "int(11)", None, False),
        SchemaColumn("v", "varchar", "varchar(40)", "utf8mb4"),
    )
    plan = TablePlan("shop", "t", columns, ("id",), (0,), "InnoDB", 3)
    info = TableInfo("shop", "t", (), primary_key=("id",))
    point = Position("binlog.000001", 900)  # the end of the XA COMMIT: the consistent snapshot's reported position
    marks: list[str] = []

    class NotYetVisible:
        """The read does not see the XA's rows yet: id 2 before its UPDATE, id 3 before its DELETE."""

        def read(self, plan: TablePlan, after: Any, limit: int, where: str, tokens: Any, found: Any) -> Chunk:
            marks.extend(tokens)
            found(point)
            rows: list[tuple[str | bytes | None, ...]] = [("1", "b"), ("2", "old"), ("3", "gone")]
            low, high = tokens
            return Chunk(plan, rows, ("3",), True, point, low, high, keys=[(r[0],) for r in rows])

        def close(self) -> None:
            pass

    def change(kind: int, before: Any, after: Any, pos: int) -> RowChange:
        return RowChange("shop", "t", kind, ("id", "v"), before, after, "binlog.000001", pos, 0, 0, "", info)

    def mark(token: str, pos: int) -> Transaction:
        signal = RowChange(
            "relay", "snapshot_signal", KIND_INSERT, ("id", "mark"), None, ("1", token), "binlog.000001", pos, 0, 0,
            "", TableInfo("relay", "snapshot_signal", ()),
        )  # fmt: skip
        return Transaction([signal], Position("binlog.000001", pos + 10))

    coordinator = SnapshotCoordinator({}, SnapshotConfig(method=method), lambda: "")
    try:
        coordinator.reader = NotYetVisible()  # type: ignore[assignment]
        coordinator.signal = SignalTable("relay", "snapshot_signal") if method == "watermark" else None
        coordinator._checked = time.monotonic() + 60  # no look at the store
        job = coordinator._job = _Job(1, 1, "shop", "t", "", None, first=True)
        coordinator._use_plan(job, plan)
        coordinator.tick()
        assert coordinator._inflight is not None
        coordinator._inflight.result(timeout=10)
        batch = [
            Transaction([change(KIND_UPDATE, ("1", "a"), ("1", "b"), 300)], Position("binlog.000001", 400)),
            Transaction([], Position("binlog.000001", 600), xa="prepare", xid="x1"),
            # As xa.release() hands it to arrange(): the XA COMMIT's changes are the rows its prepare held.
            Transaction(
                [change(KIND_UPDATE, ("2", "old"), updated, 500), change(KIND_DELETE, ("3", "gone"), None, 550)],
                point,
                xa="commit",
                xid="x1",
            ),
        ]
        if method == "watermark":  # the XA COMMIT comes before the low mark
            batch += [mark(marks[0], 1000), mark(marks[1], 1100)]
        out, placed = coordinator.arrange(batch, Position("binlog.000001", 100))
    finally:
        coordinator.close()
    return out, placed, coordinator._finishing


@pytest.mark.parametrize("method", ["consistent-snapshot", "watermark"])
def test_a_chunk_read_before_an_xa_commit_is_visible_leaves_its_rows_to_the_xa_commit(method: str) -> None:
    """MariaDB writes an XA COMMIT to the binlog before the engine commits it (ha_commit_or_rollback_by_xid: the
    binlog first): a consistent snapshot taken in between reports a position at or past the XA COMMIT, yet reads the
    rows as they were before it; a watermark read after a low mark the XA COMMIT precedes may not see it either. The
    chunk goes after the XA COMMIT: its rows the XA COMMIT touched are left out (the XA COMMIT, queued before the
    chunk, carries their newer image or their delete), the others are queued."""
    out, placed, _ = _arranged_around_an_xa_commit(method, ("2", "new"))
    assert len(placed) == 1
    copy: dict[object, tuple[object, ...]] = {}
    for tx in out:  # applied in order, as a client does: snapshot rows and inserts as upserts
        for c in tx.changes:
            if c.kind in (KIND_SNAPSHOT_START, KIND_SNAPSHOT_END):
                continue
            if c.before is not None:
                copy.pop(c.before[0], None)
            if c.after is not None:
                copy[c.after[0]] = tuple(c.after)
    assert copy == {"1": ("1", "b"), "2": ("2", "new")}


@pytest.mark.parametrize("method", ["consistent-snapshot", "watermark"])
def test_a_row_left_out_whose_newer_image_is_partial_fails_the_snapshot_with_the_reason(method: str) -> None:
    """A row the chunk leaves out relies on the newer image queued before it; a partial one (binlog_row_image
    MINIMAL or NOBLOB in the writer's session) would leave the client a row without its other columns."""
    from binlog import NOT_PRESENT

    out, placed, ended = _arranged_around_an_xa_commit(method, (NOT_PRESENT, "new"))
    assert placed == [] and not any(c.kind == KIND_SNAPSHOT_ROW for tx in out for c in tx.changes)
    ((_job, state, message),) = ended
    assert state == "failed" and "(key 2)" in message and "binlog_row_image=FULL" in message


def _end_markers_of_runs(coordinator: Any, applied: Any, runs: int) -> list[tuple[Any, ...]]:
    """The worker's loop, ``runs`` times over an idle stream: tick (with a look at the store each time), let the
    reader thread finish, then queue what is due in the batch's store transaction. The end markers queued, in order."""
    from django.db import transaction

    from relay.worker.snapshots import SnapshotCoordinator

    ends = []
    for _ in range(runs):
        coordinator._checked = 0.0
        coordinator.tick()
        if coordinator._inflight is not None:
            with contextlib.suppress(Exception):
                coordinator._inflight.result(timeout=10)
        out, placed = coordinator.arrange([], applied)
        with transaction.atomic():
            SnapshotCoordinator.record(placed)
        ends += [c.after for tx in out for c in tx.changes if c.kind == KIND_SNAPSHOT_END]
    return ends


def test_a_failed_snapshot_gets_one_end_marker_though_the_store_is_looked_at_before_it_is_queued() -> None:
    """The failure is found in one batch and written (state and end marker) in the next; a look at the store in
    between still sees the snapshot active. It is not taken up again (it would fail again, with a second marker)."""
    from binlog.position import Position
    from binlog.snapshot import CONSISTENT, SnapshotError, TablePlan
    from relay.config import SnapshotConfig
    from relay.worker.snapshots import SnapshotCoordinator, _Job

    subscribe("copy", 7, "shop", "*")
    client = Client.objects.get(name="copy")
    (snapshot,) = request_snapshots(client, [("shop", "orders")])
    Snapshot.objects.filter(id=snapshot.id).update(state=Snapshot.State.RUNNING, rows_done=100, chunks_done=1)
    gone = "shop.orders changed during the snapshot (it was renamed or dropped); ask for it again"
    planned = []

    class GoneTable:
        def plan(self, schema: str, table: str) -> None:
            planned.append((schema, table))
            raise SnapshotError(gone)

        def close(self) -> None:
            pass

    coordinator = SnapshotCoordinator({}, SnapshotConfig(method=CONSISTENT), lambda: "")
    try:
        coordinator.reader = GoneTable()  # type: ignore[assignment]
        plan = TablePlan("shop", "orders", (), ("id",), (0,), "InnoDB", None)
        job = coordinator._job = _Job(snapshot.id, client.id, "shop", "orders", "", ("100",), first=False, plan=plan)
        coordinator._read_failed(job, SnapshotError(gone))
        ends = _end_markers_of_runs(coordinator, Position("mysql-bin.000007", 4_000), runs=4)
    finally:
        coordinator.close()
    assert ends == [(str(snapshot.id), "100", "failed", gone)] and planned == []
    snapshot.refresh_from_db()
    assert (snapshot.state, snapshot.error) == (Snapshot.State.FAILED, gone)


@pytest.mark.parametrize("meanwhile", ["cancelled", "failed", "deleted"])
def test_a_failures_end_marker_says_what_the_store_holds_when_it_is_queued(meanwhile: str) -> None:
    """Between the failure and the batch that writes it, the snapshot was cancelled (its marker says cancelled, with
    the rows queued), had already ended (no second marker), or was deleted with its client (no marker)."""
    from binlog.position import Position
    from binlog.snapshot import CONSISTENT, SnapshotError
    from relay.config import SnapshotConfig
    from relay.store.snapshots import cancel_snapshots
    from relay.worker.snapshots import SnapshotCoordinator, _Job

    subscribe("copy", 7, "shop", "*")
    client = Client.objects.get(name="copy")
    (snapshot,) = request_snapshots(client, [("shop", "orders")])
    Snapshot.objects.filter(id=snapshot.id).update(state=Snapshot.State.RUNNING, rows_done=100, chunks_done=1)
    coordinator = SnapshotCoordinator({}, SnapshotConfig(method=CONSISTENT), lambda: "")
    try:
        coordinator._checked = time.monotonic() + 60  # no look at the store
        job = _Job(snapshot.id, client.id, "shop", "orders", "", ("100",), first=False)
        coordinator._read_failed(job, SnapshotError("reading the table failed: gone"))
        if meanwhile == "cancelled":
            assert cancel_snapshots([snapshot]) == 1
        elif meanwhile == "failed":
            Snapshot.objects.filter(id=snapshot.id).update(state=Snapshot.State.FAILED, error="earlier")
        else:
            Snapshot.objects.filter(id=snapshot.id).delete()
        ends = _end_markers_of_runs(coordinator, Position("mysql-bin.000007", 4_000), runs=2)
    finally:
        coordinator.close()
    expected = {"cancelled": [(str(snapshot.id), "100", "cancelled", None)], "failed": [], "deleted": []}
    assert ends == expected[meanwhile]
    stored = Snapshot.objects.filter(id=snapshot.id).values_list("state", "error").first()
    assert stored == {"cancelled": ("cancelled", ""), "failed": ("failed", "earlier"), "deleted": None}[meanwhile]


def test_clients_take_turns_at_the_snapshot_slot() -> None:
    """One snapshot runs at a time. A client that asked for many tables delays another client's request by one
    table, not by all of its own; a snapshot under way (resumed after a restart) comes first."""
    from django.utils import timezone

    from relay.store.snapshots import next_snapshot

    for name in ("many", "one"):
        subscribe(name, 7, "shop", "*")
    many = request_snapshots(Client.objects.get(name="many"), [("shop", f"t{n}") for n in range(4)])
    (one,) = request_snapshots(Client.objects.get(name="one"), [("shop", "t9")])
    Snapshot.objects.filter(id=many[2].id).update(state=Snapshot.State.RUNNING, started=timezone.now())
    excluding_the_running_one = next_snapshot([many[2].id])  # its end being written: the next turn is the other's
    assert excluding_the_running_one is not None and excluding_the_running_one.id == one.id
    order = []
    while (snapshot := next_snapshot()) is not None:
        order.append(snapshot.id)
        Snapshot.objects.filter(id=snapshot.id).update(
            state=Snapshot.State.DONE, started=timezone.now(), finished=timezone.now()
        )
    assert order == [many[2].id, one.id, many[0].id, many[1].id, many[3].id]


def test_a_snapshot_resumed_after_its_tables_key_changed_fails_instead_of_going_on_in_the_new_keys_order(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """The chunks queued before a kill were bounded in the old key's order: the resumed worker's plan on the new key
    would take the stored last key (an id) as a bound on another column, skip rows, and end done."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, n INT NOT NULL)",
        f"INSERT INTO `{schema}`.t SELECT seq, 601 - seq FROM seq_1_to_600",
        database=schema,
    )
    worker, snapshot = _snapshot_under_way(server, schema)
    worker.kill()
    server.execute("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (n)", database=schema)
    worker = _resume(server, 50)
    snapshot = _wait_done(snapshot, worker, 60)
    worker.stop()
    assert snapshot.state == Snapshot.State.FAILED and "(id) is now (n)" in snapshot.error, snapshot.error
    assert "ask for it again" in snapshot.error


def test_a_truncate_during_the_snapshot_fails_it_with_the_reason(fresh_schema: tuple[MariaDB, str]) -> None:
    """TRUNCATE is in the binlog as a statement, not as the deletes of the rows queued before it: the snapshot
    cannot end done (its copy would keep them), it fails naming the statement."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))",
        f"CREATE TABLE `{schema}`.other (id INT PRIMARY KEY)",
        f"INSERT INTO `{schema}`.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_600",
        database=schema,
    )
    worker, snapshot = _snapshot_under_way(server, schema)
    server.execute("TRUNCATE other", database=schema)  # another table's: the snapshot goes on
    time.sleep(0.5)
    assert Snapshot.objects.get(id=snapshot.id).state in Snapshot.ACTIVE
    server.execute("TRUNCATE t", "INSERT INTO t SELECT seq, 'new' FROM seq_1_to_10", database=schema)
    snapshot = _wait_done(snapshot, worker, 60)
    worker.stop()
    assert snapshot.state == Snapshot.State.FAILED, snapshot.error
    assert "'TRUNCATE t'" in snapshot.error and "ask for it again" in snapshot.error


def test_a_system_versioned_tables_snapshot_rows_carry_the_columns_its_stream_rows_carry(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """WITH SYSTEM VERSIONING without period columns of its own: the binlog's row images carry the hidden row_start
    and row_end, which information_schema does not list. A snapshot row equals the stream's image of the same row."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(10)) WITH SYSTEM VERSIONING",
        f"INSERT INTO `{schema}`.t VALUES (1, 'a'), (2, 'b')",
    )
    worker = _start(server, 100)
    caught_up(server, worker)
    subscribe("copy", 7, schema, "t")
    snapshot = _wait_done(request_snapshots(Client.objects.get(name="copy"), [(schema, "t")])[0], worker, 60)
    assert snapshot.state == Snapshot.State.DONE, snapshot.error
    server.execute(f"UPDATE `{schema}`.t SET v = 'c' WHERE id = 1")
    caught_up(server, worker)
    snapshot_row = next(_images(c)[1] for c in _queued("copy") if c.kind == KIND_SNAPSHOT_ROW)
    update_before = next(_images(c)[0] for c in _queued("copy") if c.kind == KIND_UPDATE)
    worker.stop()
    assert snapshot_row == update_before and set(snapshot_row) == {"id", "v", "row_start", "row_end"}
