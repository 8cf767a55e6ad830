"""The live stream against the private MariaDB: positions, GTIDs, heartbeats, reconnects and failures.

Connection failures are produced by a small TCP proxy between the stream and the server that can cut every
connection, cut one in the middle of a packet, or stop forwarding (a half-open connection).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from binlog import (
    BinlogError,
    BinlogStream,
    Position,
    PurgedPositionError,
    UnreadablePositionError,
    read_binlog_files,
)
from tests.helpers.mariadb import MariaDB, drain, free_tcp_port, new_schema, settings_for
from tests.helpers.proxy import Proxy


@pytest.fixture
def proxy(mariadb: MariaDB) -> Iterator[Proxy]:
    p = Proxy(mariadb.port)
    yield p
    p.close()


def test_stream_yields_committed_transactions_with_positions(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
    start = Position(*mariadb.binlog_position())
    with mariadb.connect(schema, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        cur.execute("UPDATE t SET v = 'c' WHERE id = 1")
        conn.commit()
        after_first = mariadb.binlog_position()
        cur.execute("DELETE FROM t WHERE id = 2")
        conn.commit()
    end = mariadb.binlog_position()
    transactions = drain(mariadb, start)
    assert len(transactions) == 2
    first, second = transactions
    assert [(c.kind, c.row) for c in first.changes] == [(1, 0), (1, 1), (2, 0)]
    assert first.changes[2].before == ("1", "a") and first.changes[2].after == ("1", "c")
    assert (first.position.file, first.position.pos) == after_first
    assert (second.position.file, second.position.pos) == end
    assert second.changes[0].kind == 4 and second.changes[0].before == ("2", "b")
    # MariaDB GTIDs: the transaction's own, and the state after it in the position.
    gtid_pos = mariadb.query("SELECT @@gtid_binlog_pos")[0][0]
    assert second.position.gtid == gtid_pos
    assert second.gtid == gtid_pos.split(",")[0] and first.gtid != second.gtid
    insert_a, insert_b, update = first.changes
    assert insert_a.pos == insert_b.pos < update.pos < first.position.pos  # END position of each rows event
    assert first.changes[0].file == after_first[0]
    assert abs(first.timestamp - time.time()) < 60
    assert 19 in first.event_counts and 16 in second.event_counts  # TABLE_MAP, XID


def test_stream_and_file_reader_agree(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    start = Position(*mariadb.binlog_position())
    mariadb.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, d DECIMAL(8,3), t DATETIME(6), b BLOB)",
        f"INSERT INTO `{schema}`.t VALUES (1, -1.5, '2020-01-01 00:00:00.5', x'00'), (2, 2, NOW(), NULL)",
        f"UPDATE `{schema}`.t SET d = d * 2",
        f"DELETE FROM `{schema}`.t",
    )
    streamed = drain(mariadb, start)
    mariadb.execute("FLUSH BINARY LOGS")
    files = [f for f in mariadb.binlog_files() if f.name >= start.file]
    from_files = [t for t in read_binlog_files(files, start=start.pos) if t.changes or t.statements]
    assert [(t.position.file, t.position.pos, t.gtid) for t in streamed] == [
        (t.position.file, t.position.pos, t.gtid) for t in from_files[: len(streamed)]
    ]
    assert [c for t in streamed for c in t.changes] == [c for t in from_files[: len(streamed)] for c in t.changes]
    assert streamed[0].statements[0].startswith("CREATE TABLE")


def test_start_none_follows_from_the_current_position(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{schema}`.t VALUES (1)")
    seen = []
    with BinlogStream(settings_for(mariadb)) as stream:
        for trx in stream:
            if not seen:
                mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
            seen.append(trx)
            if trx.changes:
                break
    rows = [c.after for t in seen for c in t.changes if c.schema == schema]
    assert rows == [("2",)]  # the row inserted before the stream started is not replayed
    assert seen[0].changes == []


def test_heartbeats_yield_empty_transactions(mariadb: MariaDB) -> None:
    settings = settings_for(mariadb, heartbeat_seconds=0.2)
    started = time.monotonic()
    with BinlogStream(settings) as stream:
        ticks = list(itertools.islice(stream, 4))
        assert stream.lag_seconds == 0.0
    assert time.monotonic() - started < 5
    assert all(t.changes == [] for t in ticks)
    assert sum(t.event_counts.get(27, 0) for t in ticks) >= 3  # HEARTBEAT_LOG_EVENT
    assert ticks[-1].position.file == mariadb.binlog_position()[0]


def test_mariadb_gtid_start(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    gtid = mariadb.query("SELECT @@gtid_binlog_pos")[0][0]
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (2)", f"INSERT INTO `{schema}`.t VALUES (3)")
    transactions = drain(mariadb, Position("", 0, gtid))
    rows = [c.after for t in transactions for c in t.changes if c.schema == schema]
    assert rows == [("2",), ("3",)]
    assert transactions[-1].position.gtid == mariadb.query("SELECT @@gtid_binlog_pos")[0][0]
    # use_gtid resumes by GTID even when a file is known.
    transactions = drain(mariadb, Position("no-such-file", 4, gtid), use_gtid=True)
    assert [c.after for t in transactions for c in t.changes if c.schema == schema] == [("2",), ("3",)]


def test_a_purged_start_file_raises_naming_it(mariadb: MariaDB) -> None:
    with pytest.raises(PurgedPositionError, match=r"binlog\.999999") as info:
        drain(mariadb, Position("binlog.999999", 4))
    assert "1236" in str(info.value)


def test_reconnect_resumes_from_the_confirmed_position(
    mariadb: MariaDB, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    start = Position(*mariadb.binlog_position())
    for i in range(1, 4):
        mariadb.execute(f"INSERT INTO `{schema}`.t VALUES ({i})")
    settings = settings_for(mariadb, port=proxy.port)
    got: list[tuple[int, str]] = []  # (reconnects so far, value)
    caplog.set_level(logging.WARNING, "binlog.stream")
    with BinlogStream(settings, start) as stream:
        for trx in stream:
            if not trx.changes:
                continue
            value = trx.changes[0].after[0]
            got.append((stream.reconnects, value))
            if value == "1":
                stream.confirm(trx.position)
            elif value == "2" and stream.reconnects == 0:
                proxy.cut()  # "2" was not confirmed: it must come again
            elif value == "3" and stream.reconnects == 1:
                break
        assert stream.reconnects == 1
    before = [v for r, v in got if r == 0]
    after = [v for r, v in got if r == 1]
    # Events already buffered when the connection broke may still arrive; after the reconnect everything since the
    # last confirmed position comes again, and nothing before it.
    assert before[:2] == ["1", "2"]
    assert after == ["2", "3"]
    assert proxy.connections >= 2
    assert "reconnect attempt 1" in caplog.text


def test_server_closing_mid_event_is_recovered(mariadb: MariaDB, proxy: Proxy) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, b LONGBLOB)")
    start = Position(*mariadb.binlog_position())
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (1, REPEAT(x'ab', 300000))")
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (2, x'01')")
    settings = settings_for(mariadb, port=proxy.port)
    rows = []
    with BinlogStream(settings, start) as stream:
        proxy.cut_after_bytes = 150_000  # well inside the first (300 kB) rows event, after the handshake
        for trx in stream:
            rows += [(c.after[0], len(c.after[1])) for c in trx.changes]
            if len(rows) >= 2:
                break
        assert stream.reconnects >= 1
        assert "middle of a packet" in stream.last_error or "closed" in stream.last_error
    assert rows == [("1", 300000), ("2", 1)]


def test_half_open_connection_is_noticed_by_the_read_timeout(
    mariadb: MariaDB, proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    settings = settings_for(mariadb, port=proxy.port, heartbeat_seconds=0.2, read_timeout=1.0)
    caplog.set_level(logging.WARNING, "binlog.stream")
    with BinlogStream(settings) as stream:
        iterator = iter(stream)
        next(iterator)  # connected, first heartbeat
        proxy.frozen = True  # the connection stays open but nothing arrives any more (nor does a new handshake)
        threading.Timer(2.5, lambda: setattr(proxy, "frozen", False)).start()
        mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (7)")
        started = time.monotonic()
        trx = next(t for t in iterator if t.changes)
        assert trx.changes[0].after == ("7",)
        assert stream.reconnects >= 1
        assert time.monotonic() - started < 20
    assert "no data from the source for 1.0s" in caplog.text


def test_checksum_off_source(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute("SET GLOBAL binlog_checksum = NONE")
    try:
        start = Position(*mariadb.binlog_position())
        mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{schema}`.t VALUES (5)")
        transactions = drain(mariadb, start)
    finally:
        mariadb.execute("SET GLOBAL binlog_checksum = CRC32")
    assert [c.after for t in transactions for c in t.changes] == [("5",)]


def test_events_over_16_mib_are_reassembled(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, b LONGBLOB)")
    start = Position(*mariadb.binlog_position())
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (1, REPEAT(x'5a', 17 * 1024 * 1024))")
    (trx,) = drain(mariadb, start)
    (change,) = trx.changes
    assert change.after[1] == b"\x5a" * (17 * 1024 * 1024)


def test_giving_up_after_the_configured_attempts(mariadb: MariaDB) -> None:
    settings = settings_for(mariadb, port=free_tcp_port(), max_reconnect_attempts=2)  # nothing listens there
    with pytest.raises(BinlogError, match="giving up after 2 reconnect attempts") as info:
        list(BinlogStream(settings, Position("binlog.000001", 4)))
    assert "cannot connect" in str(info.value)


def test_an_xa_transactions_rows_come_with_its_prepare_apart_from_the_commits(mariadb: MariaDB) -> None:
    """An XA transaction's rows end with XA PREPARE, not committed: they come in ``prepared``, never in ``changes``,
    and a later transaction names their fate (XA COMMIT or ROLLBACK of the same xid). Nor do they come in parts, however
    many: a part would go out before the prepare says what they are. A one-phase XA COMMIT is an ordinary commit."""
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    start = Position(*mariadb.binlog_position())
    # Each call is a connection of its own: a prepared XA transaction outlives it, and another ends it.
    mariadb.execute(
        "XA START 'rb'", f"INSERT INTO `{schema}`.t VALUES (1, 'rolled back')", "XA END 'rb'", "XA PREPARE 'rb'"
    )
    mariadb.execute(f"INSERT INTO `{schema}`.t VALUES (2, 'plain')")
    mariadb.execute("XA ROLLBACK 'rb'")
    mariadb.execute(
        "XA START 'ok', 'branch', 7",
        f"INSERT INTO `{schema}`.t SELECT seq + 100, 'xa' FROM `{schema}`.seq_1_to_30",
        "XA END 'ok', 'branch', 7",
        "XA PREPARE 'ok', 'branch', 7",
    )
    mariadb.execute("XA COMMIT 'ok', 'branch', 7")
    mariadb.execute(
        "XA START 'one'",
        f"INSERT INTO `{schema}`.t VALUES (3, 'one phase')",
        "XA END 'one'",
        "XA COMMIT 'one' ONE PHASE",
    )
    steps = [
        (t.xa, t.xid, [c.after[0] for c in t.changes], [c.after[0] for c in t.prepared], t.partial)
        for t in BinlogStream(settings_for(mariadb), start, blocking=False, chunk_rows=10)
        if t.changes or t.prepared or t.xa
    ]
    rb, ok = "X'7262',X'',1", "X'6f6b',X'6272616e6368',7"
    assert steps == [
        ("prepare", rb, [], ["1"], False),
        ("", "", ["2"], [], False),
        ("rollback", rb, [], [], False),
        ("prepare", ok, [], [str(n) for n in range(101, 131)], False),
        ("commit", ok, [], [], False),
        ("", "", ["3"], [], False),
    ]


def test_labels_information_schema_shows_as_question_marks_come_as_label_numbers(
    mariadb_no_metadata: MariaDB, caplog: pytest.LogCaptureFixture
) -> None:
    """Without row metadata the stream takes ENUM/SET labels from information_schema, which shows each character
    beyond utf8mb3 as '?': such a column's values come as label numbers, with a warning, never as '?'."""
    server = mariadb_no_metadata
    schema = new_schema(server)
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, e ENUM('😀', 'x'), s SET('a', '😀'), plain ENUM('p', 'q'))"
        " CHARACTER SET utf8mb4"
    )
    start = Position(*server.binlog_position())
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1, '😀', 'a,😀', 'q'), (2, 'x', '', 'p')")
    rows = [c.after for t in drain(server, start) for c in t.changes if c.schema == schema]
    assert rows == [("1", "1", "3", "q"), ("2", "2", "0", "p")]
    assert any("given as label numbers" in r.getMessage() and "e, s" in r.getMessage() for r in caplog.records)


def test_an_xa_prepare_or_rollback_is_a_transaction_of_its_time_not_a_heartbeat(mariadb: MariaDB) -> None:
    """Neither carries changes, yet the source wrote them at their time: the lag they leave is theirs (a heartbeat's
    would say the source has nothing newer, and health would call a stuck relay caught up)."""
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    start = Position(*mariadb.binlog_position())
    old = "SET TIMESTAMP = UNIX_TIMESTAMP() - 600"
    mariadb.execute(old, "XA START 'old'", f"INSERT INTO `{schema}`.t VALUES (1)", "XA END 'old'", "XA PREPARE 'old'")
    mariadb.execute(old, "XA ROLLBACK 'old'")
    with BinlogStream(settings_for(mariadb), start, blocking=False) as stream:
        seen = [(t.xa, t.is_heartbeat, stream.lag_seconds) for t in stream if t.xa]
    assert [(xa, heartbeat) for xa, heartbeat, _ in seen] == [("prepare", False), ("rollback", False)]
    assert all(lag > 590 for *_, lag in seen), seen


def test_a_start_where_no_event_starts_or_inside_a_transaction_is_named_so(mariadb: MariaDB) -> None:
    """What the stream says when it is asked to start at a bad place (the worker refuses such a --from first when the
    source lets it list events; this is the stream's own guard): never a damaged binlog, never half a transaction as
    a whole one."""
    schema = new_schema(mariadb)
    mariadb.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    file, before = mariadb.binlog_position()
    mariadb.execute("BEGIN", f"INSERT INTO `{schema}`.t VALUES (1)", f"INSERT INTO `{schema}`.t VALUES (2)", "COMMIT")
    events = mariadb.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {before}")
    second_map = [row[1] for row in events if row[2] == "Table_map"][1]
    for pos, reason in ((before + 7, r"no event starts there|source error 1236"), (second_map, "inside a transaction")):
        with pytest.raises(UnreadablePositionError, match=reason) as raised:
            drain(mariadb, Position(file, pos))
        assert f"cannot read the binlog from {file}:{pos}" in str(raised.value)


def test_rows_a_rollback_to_a_savepoint_takes_back_never_come(mariadb: MariaDB) -> None:
    """The source logs ROLLBACK TO SAVEPOINT, after the rows it takes back, when a non-transactional table changed
    meanwhile (it cannot cut those rows from its binlog then): they were never committed, and never come. When a part
    of the transaction already went out with some of them, the stream reads the transaction again and hands it on
    whole: the consumer sees it start again (part 0), as after a reconnect."""
    schema = new_schema(mariadb)
    mariadb.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY) ENGINE=InnoDB",
        f"CREATE TABLE `{schema}`.m (id INT PRIMARY KEY) ENGINE=MyISAM",
    )
    start = Position(*mariadb.binlog_position())

    def rows(first: int, last: int) -> str:
        return f"INSERT INTO `{schema}`.t SELECT seq FROM `{schema}`.seq_{first}_to_{last}"

    mariadb.execute(
        "BEGIN",
        rows(1, 5),
        "SAVEPOINT a",
        rows(6, 8),
        "SAVEPOINT `b``x`",
        rows(9, 30),  # past a part of 10 rows
        f"INSERT INTO `{schema}`.m VALUES (1)",  # the source cannot take it back: it logs the ROLLBACK TO
        "ROLLBACK TO SAVEPOINT `B``X`",  # savepoint names compare as the server compares names: case aside
        rows(31, 32),
        "ROLLBACK WORK TO a",
        rows(33, 34),
        "SAVEPOINT a",  # set again
        rows(35, 35),
        "COMMIT",
    )
    held = [str(row[0]) for row in mariadb.query(f"SELECT id FROM `{schema}`.t ORDER BY id")]
    assert held == ["1", "2", "3", "4", "5", "33", "34", "35"]
    from_files = [c.after[0] for t in drain(mariadb, start) for c in t.changes if c.table == "t"]
    assert from_files == held
    stream = BinlogStream(settings_for(mariadb), start, blocking=False, chunk_rows=10)
    steps = []
    for t in stream:
        stream.confirm(t.position)
        if any(c.table == "t" for c in t.changes):
            steps.append((t.part, t.partial, [c.after[0] for c in t.changes]))
    assert steps == [(0, True, [str(n) for n in range(1, 31)]), (0, False, held)]
