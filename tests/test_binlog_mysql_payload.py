"""MySQL's compressed transactions (TRANSACTION_PAYLOAD, ``binlog_transaction_compression=ON``) on event bytes.

No MySQL server runs here. The bytes come from two sources:

* a zstd payload captured from a MySQL 8.0.27 server in a public test suite, with that server's FORMAT_DESCRIPTION
  post-header lengths (``tests/data/binlog/captured_payload.json``, hex, with its source);
* payloads built here by ``payload_body`` field by field after MySQL's layout (``Transaction_payload::encode``): a
  sequence of (type, length, value) fields, each a packed integer (net_store_length: below 251 one byte, else 0xfc +
  u16, 0xfd + u24, 0xfe + u64), ``length`` being the size of the packed value: compression type (2), uncompressed
  size (3, only when compressed), payload size (1); then the end mark 0 and the payload: the transaction's events,
  each with its 19-byte header (end position 0) and no checksum, compressed with the ``zstandard`` package.

The events inside are the captured MySQL bodies of ``tests/helpers/binlog_events.py`` (TABLE_MAP and ROWS v2 of table
t10: a JSON and a DECIMAL(10,0) column) and rows built after the ROWS v2 layout documented there.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
import zstandard

from binlog import BinlogError, Transaction, TruncatedEventError, read_binlog_files
from binlog.constants import (
    DELETE_ROWS_EVENT_V2,
    FORMAT_DESCRIPTION_EVENT,
    GTID_LOG_EVENT,
    QUERY_EVENT,
    TABLE_MAP_EVENT,
    TRANSACTION_PAYLOAD_EVENT,
    UPDATE_ROWS_EVENT_V2,
    WRITE_ROWS_EVENT_V2,
    XID_EVENT,
)
from tests.helpers.binlog_events import CAPTURED, T10, FixedSchema, make_event, query_body
from tests.helpers.mysql_payload import CAPTURED_PAYLOAD, Binlog, mysql8_fde_body, packed, rows_v2, t10_row

ZSTD, NONE = 0, 255

# -- building events ---------------------------------------------------------------------------------------------------


def tlv(field_type: int, value: int) -> bytes:
    encoded = packed(value)
    return packed(field_type) + packed(len(encoded)) + encoded


def payload_body(
    events: bytes,
    compression: int = ZSTD,
    *,
    payload: bytes | None = None,
    payload_size: int | None = None,
    extra_fields: bytes = b"",
) -> bytes:
    """A TRANSACTION_PAYLOAD body holding ``events`` (the concatenated inner events); ``payload`` replaces the
    compressed bytes (to carry captured or damaged ones), ``payload_size`` the size field, ``extra_fields`` go before
    the end mark."""
    if payload is None:
        payload = zstandard.ZstdCompressor().compress(events) if compression == ZSTD else events
    fields = tlv(2, compression)
    if compression != NONE:
        fields += tlv(3, len(events))
    fields += tlv(1, len(payload) if payload_size is None else payload_size)
    return fields + extra_fields + packed(0) + payload


def inner(event_type: int, body: bytes, timestamp: int = 1700000100) -> bytes:
    """An event as it stands inside a payload: the 19-byte header with end position 0, the body, no checksum."""
    return make_event(event_type, body, log_pos=0, crc=False, timestamp=timestamp)


def t10_transaction_events() -> bytes:
    """BEGIN, TABLE_MAP t10, WRITE (2 rows: a captured one and a built one), UPDATE, DELETE, XID: inner events."""
    table_map = CAPTURED["mysql_table_map_t10_json_decimal"]
    update = t10_row({"a": 1}, 7) + t10_row({"a": [2, "x"]}, 8)
    return b"".join(
        [
            inner(QUERY_EVENT, query_body("BEGIN")),
            inner(TABLE_MAP_EVENT, table_map),
            inner(
                WRITE_ROWS_EVENT_V2,
                CAPTURED["mysql_rows_v2_t10_object"] + t10_row(None, 3),
                timestamp=1700000101,
            ),
            inner(UPDATE_ROWS_EVENT_V2, rows_v2(table_map, 2, b"\xff\xff", update), timestamp=1700000102),
            inner(DELETE_ROWS_EVENT_V2, rows_v2(table_map, 2, b"\xff", t10_row(None, 3)), timestamp=1700000103),
            inner(XID_EVENT, struct.pack("<Q", 77)),
        ]
    )


def t10_binlog(payload: bytes, name: str = "binlog.000003") -> tuple[Binlog, int, int]:
    """FDE, GTID, the payload event, then an ordinary transaction (GTID, BEGIN, TABLE_MAP, WRITE, XID).
    Returns the binlog and the payload's start and end positions."""
    log = Binlog(name)
    log.add(FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    log.add(GTID_LOG_EVENT, CAPTURED["mysql80_gtid"])
    start, end = log.add(TRANSACTION_PAYLOAD_EVENT, payload, timestamp=1700000104)
    log.add(GTID_LOG_EVENT, CAPTURED["mysql57_gtid"])
    log.add(QUERY_EVENT, query_body("BEGIN"))
    log.add(TABLE_MAP_EVENT, CAPTURED["mysql_table_map_t10_json_decimal"])
    log.add(WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_t10_null_json"])
    log.add(XID_EVENT, struct.pack("<Q", 78))
    return log, start, end


def summary(transactions: list[Transaction]) -> list[tuple]:
    return [(c.kind, c.before, c.after, c.file, c.pos, c.row, c.timestamp) for t in transactions for c in t.changes]


# -- decoding ----------------------------------------------------------------------------------------------------------


def test_compressed_transaction_decodes_rows_with_the_payload_position(tmp_path: Path) -> None:
    log, _start, end = t10_binlog(payload_body(t10_transaction_events()))
    provider = FixedSchema({("test", "t10"): T10})
    fed = log.feed(provider)
    first, second = fed
    assert [(c.kind, c.columns, c.before, c.after) for c in first.changes] == [
        (1, ("c1", "c2"), None, ('{"key1":"value1","key2":"value2"}', "1")),
        (1, ("c1", "c2"), None, (None, "3")),
        (2, ("c1", "c2"), ('{"a":1}', "7"), ('{"a":[2,"x"]}', "8")),
        (4, ("c1", "c2"), (None, "3"), None),
    ]
    # MySQL reports every event of the payload at the payload's end: the rows share it and differ by row index.
    assert [(c.file, c.pos, c.row) for c in first.changes] == [("binlog.000003", end, i) for i in range(4)]
    assert [c.timestamp for c in first.changes] == [1700000101, 1700000101, 1700000102, 1700000103]
    assert (first.position.file, first.position.pos) == ("binlog.000003", end)
    assert first.gtid == "5ccc1033-44a8-11ea-bd59-0242ac190003:119"
    assert first.event_counts[TRANSACTION_PAYLOAD_EVENT] == 1
    assert first.event_counts[WRITE_ROWS_EVENT_V2] == first.event_counts[XID_EVENT] == 1
    # The ordinary transaction after it is positioned as usual.
    (change,) = second.changes
    xid_size = 19 + 8 + 4
    assert change.after == (None, "1") and change.row == 0 and change.pos == log.pos - xid_size
    assert second.position.pos == log.pos
    # The file reader goes through the same decoder.
    from_file = list(read_binlog_files([log.write(tmp_path)], schema_provider=provider))
    assert summary(from_file) == summary(fed)


def test_compression_none_and_several_zstd_frames_decode_the_same_rows() -> None:
    events = t10_transaction_events()
    provider = FixedSchema({("test", "t10"): T10})

    def decoded(body: bytes) -> list[tuple]:
        """The rows (without positions, which depend on the payload's size), each checked at the payload's end."""
        log, _start, end = t10_binlog(body)
        first, _second = log.feed(provider)
        assert {c.pos for c in first.changes} == {end}
        return [(c.kind, c.before, c.after, c.row, c.timestamp) for c in first.changes]

    expected = decoded(payload_body(events))
    assert len(expected) == 4
    none_body = payload_body(events, NONE)
    assert none_body.startswith(tlv(2, NONE) + tlv(1, len(events)) + b"\0")  # no uncompressed size when stored as is
    assert decoded(none_body) == expected
    half = len(events) // 2
    compressor = zstandard.ZstdCompressor()
    frames = compressor.compress(events[:half]) + compressor.compress(events[half:])
    assert decoded(payload_body(events, payload=frames)) == expected
    # A header field this decoder does not know is skipped by its length.
    assert decoded(payload_body(events, extra_fields=packed(9) + packed(3) + b"abc")) == expected


def test_captured_mysql8_payload_decodes_like_its_events_uncompressed() -> None:
    compressed = bytes.fromhex(CAPTURED_PAYLOAD["zstd_payload"])
    events = zstandard.ZstdDecompressor().decompressobj().decompress(compressed)
    log = Binlog("binlog.000012")
    log.add(FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    _start, end = log.add(TRANSACTION_PAYLOAD_EVENT, payload_body(events, payload=compressed))
    (trx,) = log.feed()

    # The same events as ordinary ones (end positions and checksums added), one after the other.
    plain = Binlog("binlog.000012")
    plain.add(FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    p = 0
    inner_times = {}
    while p < len(events):
        timestamp, event_type, _server, size, log_pos, _flags = struct.unpack_from("<IBIIIH", events, p)
        assert log_pos == 0  # as MySQL writes events inside a payload
        _s, plain_end = plain.add(event_type, events[p + 19 : p + size], timestamp=timestamp)
        inner_times[plain_end] = timestamp
        p += size
    (plain_trx,) = plain.feed()

    assert [(c.kind, c.table, c.before, c.after) for c in trx.changes] == [
        (c.kind, c.table, c.before, c.after) for c in plain_trx.changes
    ]
    assert [c.kind for c in trx.changes] == [1, 2, 2, 4]
    insert, update_1, update_2, delete = trx.changes
    assert insert.after[0] == "2" and update_2.before == insert.after and update_2.after[1] == "updated"
    assert update_1.after[1] == "updated" and delete.before == update_1.after
    assert [(c.pos, c.row) for c in trx.changes] == [(end, 0), (end, 1), (end, 2), (end, 3)]
    assert [c.timestamp for c in trx.changes] == [inner_times[c.pos] for c in plain_trx.changes]
    assert trx.position.pos == end and plain_trx.position.pos == plain.pos


# -- bad input ---------------------------------------------------------------------------------------------------------


def _truncated_frame() -> bytes:
    frame = zstandard.ZstdCompressor().compress(t10_transaction_events())
    return payload_body(t10_transaction_events(), payload=frame[:-6])


def _events_cut_short() -> bytes:
    events = t10_transaction_events()
    return payload_body(events[:-5], NONE)


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (
            payload_body(t10_transaction_events(), payload=b"\x28\xb5\x2f\xfd" + b"\xa7" * 40),
            BinlogError,
            "zstd payload does not decompress",
        ),
        (payload_body(t10_transaction_events(), payload=b"not zstd at all"), BinlogError, "does not decompress"),
        (_truncated_frame(), TruncatedEventError, "zstd payload ends inside a frame"),
        (_events_cut_short(), TruncatedEventError, r"event at payload offset \d+ needs 27 bytes"),
        (
            payload_body(t10_transaction_events(), payload_size=10_000),
            TruncatedEventError,
            "payload size says 10000 bytes",
        ),
        (payload_body(t10_transaction_events(), compression=7), BinlogError, "unknown payload compression type 7"),
        (packed(2) + packed(1), TruncatedEventError, "runs past the event"),
    ],
    ids=["corrupt-zstd", "not-zstd", "truncated-frame", "truncated-events", "short-event", "unknown-type", "header"],
)
def test_bad_payloads_raise_naming_file_and_position(
    tmp_path: Path, body: bytes, error: type[BinlogError], message: str
) -> None:
    log, start, _end = t10_binlog(body, name="mysql-bin.000021")
    where = rf"transaction payload in mysql-bin.000021 at position {start}: .*{message}"
    with pytest.raises(error, match=where):
        log.feed(FixedSchema({("test", "t10"): T10}))
    with pytest.raises(error, match=where):
        list(read_binlog_files([log.write(tmp_path)]))


def test_a_payload_may_not_hold_a_format_description() -> None:
    events = inner(FORMAT_DESCRIPTION_EVENT, mysql8_fde_body()) + t10_transaction_events()
    log, start, _end = t10_binlog(payload_body(events))
    with pytest.raises(BinlogError, match=f"position {start}: a FORMAT_DESCRIPTION_EVENT cannot be inside"):
        log.feed(FixedSchema({("test", "t10"): T10}))


def test_missing_zstandard_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    log, _start, _end = t10_binlog(payload_body(t10_transaction_events()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes ``import zstandard`` raise ImportError
    with pytest.raises(BinlogError, match=r"needs the 'zstandard' package: pip install zstandard"):
        log.feed(FixedSchema({("test", "t10"): T10}))
    # Payloads stored as is need no zstandard.
    rows = summary(t10_binlog(payload_body(t10_transaction_events(), NONE))[0].feed(FixedSchema({})))
    assert [kind for kind, *_rest in rows] == [1, 1, 2, 4, 1]
