"""The compiled event path (binlog/_events.c) against ``EventDecoder.feed``: the same transactions, the same decoder
state and the same error, event for event, on a real source's binlog and on damaged copies of it.

The compiled module is loaded here whatever RELAY_NATIVE says (the suite runs once with it on and once with the
Python code alone), so both paths are compared on every run; ``scripts/bootstrap`` builds it.
"""

from __future__ import annotations

import importlib
import os
import random
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlog import Position, parser
from binlog.changes import Transaction
from binlog.connection import ReplicationConnection
from binlog.constants import (
    TABLE_MAP_EVENT,
    UPDATE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V2,
    XID_EVENT,
)
from binlog.errors import BinlogError
from binlog.parser import EventDecoder
from tests.helpers.mariadb import MariaDB, settings_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compiled() -> Any:
    """binlog/_events.c, configured as the parser configures it (built by scripts/bootstrap: its absence fails)."""
    return parser.configure_compiled_events(importlib.import_module("binlog._events"))


@pytest.fixture(scope="module")
def captured(mariadb: MariaDB) -> tuple[Position, int, list[bytes]]:
    """The start, checksum algorithm and raw events of a workload of every shape the compiled path meets: single
    and multi-row changes of every kind, a table of more than 64 columns and one of more than 250, a DDL between
    changes, a savepoint rolled back, a large transaction, an XA transaction."""
    schema = "native_events"
    wide = ", ".join(f"w{i} INT" for i in range(70))
    widest = ", ".join(f"x{i} TINYINT" for i in range(260))
    mariadb.execute(
        f"DROP DATABASE IF EXISTS {schema}",
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), at DATETIME(3),"
        " note TEXT, flag BIT(3), kind ENUM('a','b'), big BIGINT UNSIGNED) ENGINE=InnoDB",
        f"CREATE TABLE {schema}.wide (id INT PRIMARY KEY, {wide}) ENGINE=InnoDB",
        f"CREATE TABLE {schema}.widest (id INT PRIMARY KEY, {widest}) ENGINE=InnoDB",
        f"CREATE TABLE {schema}.log (msg VARCHAR(20)) ENGINE=MyISAM",
    )
    start = Position(*mariadb.binlog_position())
    statements = [f"INSERT INTO {schema}.t VALUES ({i}, 'n{i}', {i}.25, '2026-01-02 03:04:05.678', REPEAT('x', {i}),"
                  f" b'101', 'b', {2**63 + i})" for i in range(1, 40)]  # fmt: skip
    statements += [
        f"UPDATE {schema}.t SET name = CONCAT(name, '!'), price = price * 2 WHERE id < 20",
        f"DELETE FROM {schema}.t WHERE id > 30",
        f"INSERT INTO {schema}.wide (id, w3, w69) VALUES (1, 3, 69), (2, NULL, -1)",
        f"UPDATE {schema}.wide SET w0 = 7",
        f"INSERT INTO {schema}.widest (id, x0, x259) VALUES (1, 1, 2)",
        f"ALTER TABLE {schema}.t ADD COLUMN extra INT DEFAULT 5 FIRST",
        f"INSERT INTO {schema}.t (id, name) VALUES (100, 'after ddl')",
        "BEGIN",
        *(f"INSERT INTO {schema}.t (id, name) VALUES ({300 + i}, 'bulk')" for i in range(30)),
        f"UPDATE {schema}.t SET name = 'bulk2' WHERE id >= 300",
        "COMMIT",
        "XA START 'x1'",
        f"INSERT INTO {schema}.t (id) VALUES (400)",
        "XA END 'x1'",
        "XA PREPARE 'x1'",
        "XA COMMIT 'x1'",
        "BEGIN",
        f"INSERT INTO {schema}.t (id) VALUES (200)",
        "SAVEPOINT s1",
        f"INSERT INTO {schema}.t (id) VALUES (201)",
        f"INSERT INTO {schema}.log VALUES ('kept')",
        "ROLLBACK TO SAVEPOINT s1",
        f"INSERT INTO {schema}.t (id) VALUES (202)",
        "COMMIT",
    ]
    mariadb.execute(*statements)
    settings = settings_for(mariadb)
    connection = ReplicationConnection(settings)
    try:
        connection.connect()
        connection.prepare(settings.heartbeat_seconds)
        connection.register(settings.server_id)
        connection.start_dump(start, settings.server_id, blocking=False, use_gtid=False)
        events = []
        while (event := connection.read_event()) is not None:
            events.append(event)
        return start, connection.checksum_alg, events
    finally:
        connection.close()
        mariadb.execute(f"DROP DATABASE {schema}")


def _changes(changes: list[Any]) -> tuple[Any, ...]:
    return tuple(
        (c.schema, c.table, c.kind, c.columns, c.before, c.after, c.file, c.pos, c.row, c.timestamp, c.gtid)
        for c in changes
    )


def _transaction(trx: Transaction) -> tuple[Any, ...]:
    return (_changes(trx.changes), trx.position, trx.timestamp, trx.gtid, trx.statements, trx.event_counts,
            trx.partial, trx.part, trx.size, trx.xa, trx.xid, _changes(trx.prepared))  # fmt: skip


def _state(decoder: EventDecoder) -> tuple[Any, ...]:
    return (decoder.file, decoder.pos, decoder.events, dict(decoder.counts), decoder.in_transaction,
            decoder.trx_timestamp, decoder.last_timestamp, decoder._rows_bytes, decoder._past_start,
            sorted(decoder.tables), len(decoder.changes), decoder.position())  # fmt: skip


def _decode(
    events: list[bytes], start: Position, checksum_alg: int, *, by_runs: bool, **options: Any
) -> tuple[list[Any], Any, tuple[Any, ...]]:
    """(the transactions, the error or None, the decoder's state after) of ``events`` decoded one ``feed`` at a
    time, or by ``feed_from`` (the compiled path, when ``parser._compiled_events`` is set)."""
    decoder = EventDecoder(None, file=start.file, pos=start.pos, checksum_alg=checksum_alg, **options)
    out: list[Any] = []
    error = None
    index = 0
    try:
        while index < len(events):
            if by_runs:
                index, trx = decoder.feed_from(events, index)
            else:
                trx = decoder.feed(events[index])
                index += 1
            if trx is not None:
                out.append(_transaction(trx))
    except BinlogError as exc:
        error = (type(exc).__name__, str(exc))
    return out, error, _state(decoder)


def _both(
    compiled: Any, monkeypatch: pytest.MonkeyPatch, events: list[bytes], start: Position, alg: int, **options: Any
) -> tuple[Any, Any]:
    monkeypatch.setattr(parser, "_compiled_events", compiled)
    fast = _decode(events, start, alg, by_runs=True, **options)
    monkeypatch.setattr(parser, "_compiled_events", None)
    slow = _decode(events, start, alg, by_runs=False, **options)
    return fast, slow


@pytest.mark.parametrize(("chunk_rows", "error"), [(None, None), (7, None), (1, "RolledBackPartError")])
def test_the_compiled_path_decodes_a_real_binlog_as_feed_does(
    compiled: Any,
    captured: tuple[Position, int, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    chunk_rows: Any,
    error: str | None,
) -> None:
    """In parts of one row, the rollback to a savepoint takes back a row already handed on: both paths say so."""
    start, alg, events = captured
    fast, slow = _both(compiled, monkeypatch, events, start, alg, chunk_rows=chunk_rows)
    assert fast == slow
    transactions, raised, _state_after = fast
    assert (raised and raised[0]) == error
    assert sum(len(t[0]) for t in transactions) > 100
    assert any(t[6] for t in transactions) == (chunk_rows is not None)  # parts of the large transaction


def test_the_compiled_path_takes_the_table_maps_and_rows_events(
    compiled: Any, captured: tuple[Position, int, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without it every event goes through ``feed``; with it, none of the TABLE_MAPs met before nor the rows events
    of the tables of fewer than 65 columns does."""
    start, alg, events = captured
    fed: list[int] = []
    original = EventDecoder.feed

    def counting_feed(self: EventDecoder, event: bytes) -> Transaction | None:
        fed.append(event[4])
        return original(self, event)

    monkeypatch.setattr(EventDecoder, "feed", counting_feed)
    monkeypatch.setattr(parser, "_compiled_events", compiled)
    _decode(events, start, alg, by_runs=True)
    rows_events = sum(1 for event in events if event[4] in (WRITE_ROWS_EVENT_V1, UPDATE_ROWS_EVENT_V1))
    table_maps = sum(1 for event in events if event[4] == TABLE_MAP_EVENT)
    assert rows_events > 60 and table_maps > 60
    # fed: the events of other types, the first TABLE_MAP of each layout, the rows of the two wide tables (3 events)
    assert fed.count(TABLE_MAP_EVENT) <= 6
    assert fed.count(WRITE_ROWS_EVENT_V1) + fed.count(UPDATE_ROWS_EVENT_V1) <= 3
    assert fed.count(XID_EVENT) == sum(1 for event in events if event[4] == XID_EVENT)


def _with_crc(event: bytes) -> bytes:
    """The event with its checksum made right again for its (changed) bytes and length."""
    body = event[:-4]
    body = body[:9] + struct.pack("<I", len(body) + 4) + body[13:]
    return body + struct.pack("<I", zlib.crc32(body))


def _damaged(rng: random.Random, events: list[bytes]) -> list[bytes]:
    """A copy of ``events`` with one of them damaged, mostly with its checksum made right again so that the bytes
    reach the decoding; or an event missing, or two swapped."""
    events = list(events)
    candidates = [i for i, e in enumerate(events) if e[4] in (TABLE_MAP_EVENT, WRITE_ROWS_EVENT_V1,
                                                              UPDATE_ROWS_EVENT_V1, WRITE_ROWS_EVENT_V2)]  # fmt: skip
    index = rng.choice(candidates if rng.random() < 0.9 else range(len(events)))
    event = bytearray(events[index])
    how = rng.randrange(8)
    if how == 0:  # a byte changed, the checksum left: the checksum fails
        event[rng.randrange(len(event))] ^= 1 << rng.randrange(8)
    elif how == 1:  # cut short
        event = event[: rng.randrange(len(event))]
    elif how == 2:  # the header's size wrong
        event[9:13] = struct.pack("<I", len(event) + rng.choice((-1, 1, 100)))
    elif how in (3, 4, 5):  # bytes of the body changed, the checksum right: the decoder reads them
        for _ in range(rng.randrange(1, 4)):
            event[rng.randrange(19, len(event) - 4)] = rng.randrange(256)
        event = bytearray(_with_crc(bytes(event)))
    elif how == 6:  # bytes cut out of the body, the checksum right
        cut = rng.randrange(19, len(event) - 4)
        event = bytearray(_with_crc(bytes(event[:cut] + event[cut + rng.randrange(1, 8) :])))
    else:  # an event missing (a TABLE_MAP: rows of an unknown table), or swapped with the next
        if rng.random() < 0.5 or index + 1 == len(events):
            del events[index]
            return events
        events[index], events[index + 1] = events[index + 1], events[index]
        return events
    events[index] = bytes(event)
    return events


@pytest.mark.parametrize("seed", range(4))
def test_damaged_events_give_the_same_state_and_error_on_both_paths(
    compiled: Any, captured: tuple[Position, int, list[bytes]], monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    start, alg, events = captured
    rng = random.Random(seed)
    errors = 0
    for _ in range(60):
        damaged = _damaged(rng, events)
        options = {"chunk_rows": rng.choice((None, 5)), "verify_checksum": rng.random() < 0.8}
        fast, slow = _both(compiled, monkeypatch, damaged, start, alg, **options)
        assert fast == slow, options
        errors += fast[1] is not None
    assert errors > 10  # the damage reached the decoder's checks, not only the values


def _packet(payload: bytes, seq: int = 1) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload


def _reference_split(data: bytes) -> tuple[list[bytes], int]:
    """What split_packets gives, after the connection's reader (read_event): whole event packets, stopping before
    any other."""
    events, p = [], 0
    while len(data) - p >= 4:
        length = int.from_bytes(data[p : p + 3], "little")
        if length == 0 or length >= 0xFFFFFF or len(data) - p - 4 < length or data[p + 4] != 0:
            break
        events.append(data[p + 5 : p + 4 + length])
        p += 4 + length
    return events, p


def test_split_packets_cuts_whole_event_packets_and_stops_before_anything_else(compiled: Any) -> None:
    rng = random.Random(5)
    for _ in range(300):
        packets = []
        for _ in range(rng.randrange(6)):
            kind = rng.random()
            if kind < 0.8:
                packets.append(_packet(b"\0" + rng.randbytes(rng.randrange(40))))
            elif kind < 0.85:
                packets.append(_packet(b"\xff\x4c\x04#HY000the source says no"))  # an error
            elif kind < 0.9:
                packets.append(_packet(b"\xfe\0\0\x02\0"))  # the end of a non-blocking dump
            elif kind < 0.95:
                packets.append(b"\xff\xff\xff\x01\0" + rng.randbytes(30))  # 16 MiB: continues in the next packet
            else:
                packets.append(_packet(b""))
        data = b"".join(packets)
        data = data[: rng.randrange(len(data) + 1)] if data and rng.random() < 0.5 else data
        assert compiled.split_packets(data) == _reference_split(data)
        assert compiled.split_packets(bytearray(data)) == _reference_split(data)


def test_a_stream_reads_the_same_transactions_through_the_compiled_path(
    compiled: Any, mariadb: MariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live stream over read_events and feed_from, with the compiled path on and off: the same transactions."""
    from binlog import BinlogStream, native

    schema = "native_stream"
    mariadb.execute(
        f"DROP DATABASE IF EXISTS {schema}",
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(3000))",
    )
    start = Position(*mariadb.binlog_position())
    # Events of every size around the connection's 8 KiB buffer: some arrive whole, some across reads.
    mariadb.execute(*(f"INSERT INTO {schema}.t VALUES ({i}, REPEAT('v', {i * 37 % 3000}))" for i in range(400)))
    mariadb.execute(f"DROP DATABASE {schema}")

    def read(module: Any) -> Iterator[Any]:
        monkeypatch.setattr(native, "events", module)
        monkeypatch.setattr(parser, "_compiled_events", module)
        with BinlogStream(settings_for(mariadb), start, blocking=False) as stream:
            for trx in stream:
                yield _transaction(trx)

    with_compiled = list(read(compiled))
    assert list(read(None)) == with_compiled
    assert sum(len(t[0]) for t in with_compiled) == 400


def test_an_event_sent_in_several_reads_is_read_whole(
    compiled: Any, captured: tuple[Position, int, list[bytes]]
) -> None:
    """split_packets leaves a packet not all there to the connection's own reader (no event is cut)."""
    _start, _alg, events = captured
    data = b"".join(_packet(b"\0" + e) for e in events[:50])
    rng = random.Random(9)
    got: list[bytes] = []
    buffered = b""
    rest = data
    while rest or buffered:
        take = rng.randrange(1, 300)
        buffered, rest = buffered + rest[:take], rest[take:]
        found, used = compiled.split_packets(buffered)
        got += found
        buffered = buffered[used:]
        if not rest and not found:
            break
    assert got == events[:50]


def test_the_environment_turns_the_compiled_event_path_off() -> None:
    probe = "from binlog import native, parser; print(native.events is None, parser._compiled_events is None)"
    for setting, off in (("0", "True True"), ("1", "False False")):
        env = {**os.environ, "RELAY_NATIVE": setting}
        out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
        assert (out.returncode, out.stdout.strip()) == (0, off), out.stderr
