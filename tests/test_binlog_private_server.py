"""Tests that restart or purge a server: they get a private MariaDB of their own, so the shared session servers keep
their binlog files and stay up for every other test."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from binlog import BinlogResetError, BinlogStream, Position, PurgedPositionError, SourceSettings
from tests.helpers.mariadb import MariaDB
from tests.helpers.scratch import scratch_dir


@pytest.fixture(scope="module")
def private_server() -> Iterator[MariaDB]:
    server = MariaDB(scratch_dir("relay-binlog-private-"), row_metadata_full=True).start()
    server.execute("CREATE DATABASE p", "CREATE TABLE p.t (id INT PRIMARY KEY, v VARCHAR(10))")
    yield server
    server.destroy()


def _settings(server: MariaDB) -> SourceSettings:
    return SourceSettings(
        **server.replication_settings(), heartbeat_seconds=0.5, reconnect_initial_delay=0.2, reconnect_max_delay=1.0
    )


def test_stream_survives_a_server_restart(private_server: MariaDB, caplog: pytest.LogCaptureFixture) -> None:
    server = private_server
    start = Position(*server.binlog_position())
    server.execute("INSERT INTO p.t VALUES (1, 'before')")
    caplog.set_level(logging.WARNING, "binlog.stream")
    seen: list[str] = []
    with BinlogStream(_settings(server), start) as stream:
        for trx in stream:
            for change in trx.changes:
                seen.append(change.after[1])
            if seen == ["before"] and trx.changes:
                stream.confirm(trx.position)

                def restart_and_write() -> None:
                    server.restart()
                    server.execute("INSERT INTO p.t VALUES (2, 'after')")

                worker = threading.Thread(target=restart_and_write)
                worker.start()
            if "after" in seen:
                break
        worker.join()
        assert stream.reconnects >= 1
    assert seen == ["before", "after"]  # nothing lost, nothing repeated (the first row was confirmed)
    assert "reconnect attempt" in caplog.text


def test_purged_start_file_raises(private_server: MariaDB) -> None:
    server = private_server
    old_file, _ = server.binlog_position()
    server.execute("FLUSH BINARY LOGS", "INSERT INTO p.t VALUES (3, 'x')", "FLUSH BINARY LOGS")
    current, _ = server.binlog_position()
    deadline = time.monotonic() + 10
    # The server keeps files a dump thread is still reading; the previous test's thread may take a moment to end.
    while old_file in [f.name for f in server.binlog_files()] and time.monotonic() < deadline:
        server.execute(f"PURGE BINARY LOGS TO '{current}'")
        time.sleep(0.2)
    assert old_file not in [f.name for f in server.binlog_files()]
    started = time.monotonic()
    with (
        pytest.raises(PurgedPositionError, match=old_file) as info,
        BinlogStream(_settings(server), Position(old_file, 4)) as stream,
    ):
        next(iter(stream))
    assert "1236" in str(info.value)
    assert time.monotonic() - started < 10  # not retried: a purged position never comes back


def test_a_file_begun_anew_under_a_known_name_raises_instead_of_being_read_at_the_old_position() -> None:
    """RESET MASTER (or another server at the address) begins binlog.000001 again: a stream told when the file it
    read was begun refuses the new one, whose events at the old position are other changes or none."""
    server = MariaDB(scratch_dir("relay-binlog-reset-"), row_metadata_full=True).start()
    try:
        server.execute("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY)")
        start = Position(*server.binlog_position())
        server.execute("INSERT INTO r.t VALUES (1)")
        with BinlogStream(_settings(server), start, blocking=False) as stream:
            transactions = [trx for trx in stream if trx.changes]
            known = dict(stream.file_started)
        assert [c.after[0] for trx in transactions for c in trx.changes] == ["1"]
        end = transactions[-1].position
        assert known.get(end.file, 0) > 0
        time.sleep(1.1)  # the new file is begun in another second
        server.execute("RESET MASTER", *(f"INSERT INTO r.t VALUES ({n})" for n in range(2, 12)))
        assert server.binlog_position()[0] == end.file
        started = time.monotonic()
        with (
            pytest.raises(BinlogResetError, match="RESET MASTER") as info,
            BinlogStream(_settings(server), end, blocking=False, file_started=known) as stream,
        ):
            list(stream)
        assert end.file in str(info.value) and isinstance(info.value, PurgedPositionError)
        assert time.monotonic() - started < 10  # never retried
    finally:
        server.destroy()
