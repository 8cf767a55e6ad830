"""MySQL-only formats on event bytes, and bad input.

No MySQL server runs here, so MySQL's ROWS v2 events, GTID events, TABLE_MAP optional metadata and binary JSON are
fed to the decoder as bytes: event bodies captured from real MySQL 5.7/8.0 and MariaDB 10.5 servers in a public test
suite (``tests/data/binlog/captured_bodies.json``, hex, with its source), wrapped in headers and events built
field by field after the documented layout (``tests/helpers/binlog_events.py``: 19-byte header, body, CRC32).
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest

from binlog import (
    BinlogError,
    ChecksumError,
    EventDecoder,
    Transaction,
    TruncatedEventError,
    read_binlog_files,
)
from binlog.connection import binlog_dump_gtid_payload, binlog_dump_payload, register_slave_payload
from binlog.constants import (
    FORMAT_DESCRIPTION_EVENT,
    GTID_EVENT,
    GTID_LOG_EVENT,
    PREVIOUS_GTIDS_LOG_EVENT,
    QUERY_EVENT,
    TABLE_MAP_EVENT,
    UPDATE_ROWS_EVENT_V2,
    WRITE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V2,
    XID_EVENT,
)
from binlog.files import iter_file_events
from binlog.gtid import MysqlGtidSet
from binlog.schema import SchemaColumn, SchemaTable
from binlog.tablemap import parse_table_map
from tests.helpers.binlog_events import CAPTURED, T10, FixedSchema, fde_body, make_event, query_body
from tests.helpers.mariadb import MariaDB, new_schema

# -- building events --------------------------------------------------------------------------------------------------


class Feeder:
    """Feeds events with consecutive end positions, collecting the transactions."""

    def __init__(self, decoder: EventDecoder, pos: int = 4) -> None:
        self.decoder = decoder
        self.pos = pos
        self.transactions: list[Transaction] = []

    def event(self, event_type: int, body: bytes, **kwargs: object) -> None:
        size = 19 + len(body) + 4
        self.pos += size
        trx = self.decoder.feed(make_event(event_type, body, log_pos=self.pos, **kwargs))  # type: ignore[arg-type]
        if trx is not None:
            self.transactions.append(trx)


AENUM = SchemaTable(
    (
        SchemaColumn("id", "int", "int(11)", None),
        SchemaColumn("aset", "enum", "enum('0','1','2','3','4','5','6','7','8')", "utf8mb4"),
    ),
    (),
)

# -- MySQL formats -----------------------------------------------------------------------------------------------------


def test_mysql8_transaction_with_gtids_rows_v2_and_binary_json() -> None:
    provider = FixedSchema({("test", "t10"): T10})
    feeder = Feeder(EventDecoder(provider, file="mysql-bin.000003"))
    feeder.event(FORMAT_DESCRIPTION_EVENT, fde_body("8.0.19"))
    previous = MysqlGtidSet("5aa72a7f-44a8-11ea-947f-0242ac190002:1-258")
    feeder.event(PREVIOUS_GTIDS_LOG_EVENT, previous.encode())
    feeder.event(GTID_LOG_EVENT, CAPTURED["mysql80_gtid"])
    feeder.event(QUERY_EVENT, query_body("BEGIN"))
    feeder.event(TABLE_MAP_EVENT, CAPTURED["mysql_table_map_t10_json_decimal"])
    feeder.event(WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_t10_null_json"])
    feeder.event(WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_t10_object"])
    feeder.event(XID_EVENT, struct.pack("<Q", 42))
    commit_pos = feeder.pos
    feeder.event(GTID_LOG_EVENT, CAPTURED["mysql57_gtid"])
    feeder.event(QUERY_EVENT, query_body("CREATE TABLE t11 (id INT)"))
    first, second = feeder.transactions
    assert first.gtid == "5ccc1033-44a8-11ea-bd59-0242ac190003:119"
    assert [(c.kind, c.columns, c.after) for c in first.changes] == [
        (1, ("c1", "c2"), (None, "1")),
        (1, ("c1", "c2"), ('{"key1":"value1","key2":"value2"}', "1")),
    ]
    assert first.changes[0].table_info.columns[0].type_name == "json"
    assert (first.position.file, first.position.pos) == ("mysql-bin.000003", commit_pos)
    assert first.position.gtid == (
        "5aa72a7f-44a8-11ea-947f-0242ac190002:1-258,5ccc1033-44a8-11ea-bd59-0242ac190003:119"
    )
    assert second.gtid == "5aa72a7f-44a8-11ea-947f-0242ac190002:259"
    assert second.statements == ("CREATE TABLE t11 (id INT)",)
    assert second.position.gtid.startswith("5aa72a7f-44a8-11ea-947f-0242ac190002:1-259,")
    assert provider.invalidations == 1  # the DDL dropped the cached schema


def test_mysql_enum_from_information_schema_labels() -> None:
    feeder = Feeder(EventDecoder(FixedSchema({("ttest", "aenum"): AENUM})))
    feeder.event(FORMAT_DESCRIPTION_EVENT, fde_body("5.7.30-log"))
    feeder.event(QUERY_EVENT, query_body("BEGIN"))
    feeder.event(TABLE_MAP_EVENT, CAPTURED["mysql_table_map_aenum"])
    feeder.event(WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_aenum"])
    feeder.event(XID_EVENT, struct.pack("<Q", 1))
    (trx,) = feeder.transactions
    assert trx.changes[0].after == ("1", "0")  # index 1 is the first label, '0'


def test_mysql8_and_mariadb_optional_metadata() -> None:
    for name, mariadb in (
        ("mysql80_table_map_types_full_metadata", False),
        ("mariadb105_table_map_types_full_metadata", True),
    ):
        tm = parse_table_map(CAPTURED[name], 8, mariadb=mariadb)
        meta = tm.optional
        assert meta is not None and meta.names is not None
        assert meta.names[:3] == ["b_bit", "n_boolean", "n_tinyint"] and meta.names[-1] == "j_json"
        assert [i for i, u in enumerate(meta.unsigned or []) if u] == list(range(10, 18))
        assert meta.enum_values == {38: ("a", "b")} and meta.set_values == {39: ("1", "2")}
        assert meta.charsets is not None
        assert meta.charsets[26] == "utf8mb4" and meta.charsets[28] == "binary" and meta.charsets[34] == "utf8mb4"
        # MariaDB counts GEOMETRY among character columns; reading it as MySQL would shift later charsets.
        assert meta.charsets[41] == ("utf8mb4" if mariadb else None)
    assert parse_table_map(CAPTURED["mysql80_table_map_prim"], 8).optional.primary_key == [2, 0]
    assert parse_table_map(CAPTURED["mysql80_table_map_prim2_prefix"], 8).optional.primary_key == [1, 3]


def test_rows_v2_extra_data_and_updates() -> None:
    """ROWS v2 post-header: u48 table id, u16 flags, u16 extra-data length (counting itself), extra data."""
    feeder = Feeder(EventDecoder(FixedSchema({("test", "t10"): T10})))
    feeder.event(FORMAT_DESCRIPTION_EVENT, fde_body("8.0.19"))
    feeder.event(QUERY_EVENT, query_body("BEGIN"))
    feeder.event(TABLE_MAP_EVENT, CAPTURED["mysql_table_map_t10_json_decimal"])
    table_id = CAPTURED["mysql_table_map_t10_json_decimal"][:6]
    extra = bytes([1, 3, 0, 7])  # an extra row info field (type, length, payload) that readers skip
    row_null_json = bytes([0xFD]) + bytes.fromhex("8000000005")  # c1 NULL, c2 = 5
    row_number = bytes([0xFC]) + struct.pack("<I", 3) + bytes([5]) + struct.pack("<h", 7) + bytes.fromhex("8000000006")
    body = (
        table_id + struct.pack("<HH", 1, 2 + len(extra)) + extra + bytes([2, 0xFF, 0xFF]) + row_null_json + row_number
    )
    feeder.event(UPDATE_ROWS_EVENT_V2, body)
    feeder.event(XID_EVENT, struct.pack("<Q", 2))
    (trx,) = feeder.transactions
    (change,) = trx.changes
    assert change.kind == 2 and change.before == (None, "5") and change.after == ("7", "6")


def test_rows_v1_with_four_byte_table_ids() -> None:
    """Sources before MySQL 5.1.4 wrote 6-byte post-headers: a u32 table id and u16 flags."""
    feeder = Feeder(EventDecoder(FixedSchema({("test", "t10"): T10})))
    old_fde = fde_body("5.1.3", checksum=False, rows_post_header=6, table_map_post_header=6)
    feeder.event(FORMAT_DESCRIPTION_EVENT, old_fde, crc=False)
    table_map = CAPTURED["mysql_table_map_t10_json_decimal"]
    feeder.event(QUERY_EVENT, query_body("BEGIN"), crc=False)
    feeder.event(TABLE_MAP_EVENT, table_map[:4] + table_map[6:], crc=False)
    body = table_map[:4] + struct.pack("<H", 1) + bytes([2, 0xFF, 0xFD]) + bytes.fromhex("8000000009")
    feeder.event(WRITE_ROWS_EVENT_V1, body, crc=False)
    feeder.event(QUERY_EVENT, query_body("COMMIT"), crc=False)
    (trx,) = feeder.transactions
    assert trx.changes[0].after == (None, "9")


def test_replication_command_layouts() -> None:
    assert binlog_dump_payload("binlog.000002", 1234, 0x52454C, 1) == (
        b"\x12" + struct.pack("<IHI", 1234, 1, 0x52454C) + b"binlog.000002"
    )
    assert register_slave_payload(7, "h", "u", "", 0) == b"\x15" + struct.pack("<I", 7) + b"\x01h\x01u\x00" + bytes(10)
    gtid = "5aa72a7f-44a8-11ea-947f-0242ac190002:1-258:300"
    payload = binlog_dump_gtid_payload(gtid, 9)
    sid = bytes.fromhex("5aa72a7f44a811ea947f0242ac190002")
    encoded = struct.pack("<Q", 1) + sid + struct.pack("<Q", 2) + struct.pack("<QQQQ", 1, 259, 300, 301)
    assert payload == (
        b"\x1e" + struct.pack("<HII", 4, 9, 0) + struct.pack("<Q", 4) + struct.pack("<I", len(encoded)) + encoded
    )
    assert str(MysqlGtidSet.decode(encoded)) == gtid


# -- bad input ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_events(mariadb: MariaDB) -> tuple[str, list[bytes]]:
    """Events of a small workload as the MariaDB server wrote them (file name, events from its start)."""
    schema = new_schema(mariadb)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))",
        f"INSERT INTO `{schema}`.t VALUES (1, 'one'), (2, 'two')",
        f"UPDATE `{schema}`.t SET v = 'deux' WHERE id = 2",
    )
    path = mariadb.binlog_files()[-1]
    mariadb.execute("FLUSH BINARY LOGS")
    return path.name, list(iter_file_events(path))


def decode_all(name: str, events: list[bytes]) -> list[Transaction]:
    decoder = EventDecoder(file=name)
    return [t for t in (decoder.feed(e) for e in events) if t is not None]


def _with_crc(event: bytes) -> bytes:
    body = event[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def test_real_events_decode(real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    transactions = decode_all(name, events)
    rows = [(c.kind, c.before, c.after) for t in transactions for c in t.changes]
    assert rows == [(1, None, ("1", "one")), (1, None, ("2", "two")), (2, ("2", "two"), ("2", "deux"))]


def test_truncated_event_raises(real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == WRITE_ROWS_EVENT_V1)
    decoder = EventDecoder(file=name)
    for event in events[:index]:
        decoder.feed(event)
    with pytest.raises(TruncatedEventError, match=r"says .* bytes"):
        decoder.feed(events[index][:-7])
    # A rows event whose header agrees with its (shortened) length still cannot hold its last row.
    short = events[index][:-9]
    short = short[:9] + struct.pack("<I", len(short) + 4) + short[13:]
    with pytest.raises(TruncatedEventError, match="rows event"):
        decoder.feed(_with_crc(short + b"\0\0\0\0"))
    with pytest.raises(TruncatedEventError):
        decoder.feed(b"\x00" * 10)


def test_rows_without_a_column_in_their_image_are_refused(real_events: tuple[str, list[bytes]]) -> None:
    """A rows event whose columns-present bitmap is empty but which carries bytes: its rows would take no bytes each,
    and a decoder would make them for ever (until memory runs out)."""
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == WRITE_ROWS_EVENT_V1)
    decoder = EventDecoder(file=name)
    for event in events[:index]:
        decoder.feed(event)
    bitmap_at = 19 + decoder.fde.post_header_len(WRITE_ROWS_EVENT_V1) + 1  # after the column count (one byte)
    assert events[index][bitmap_at] == 0b11  # both columns present
    for bitmap in (0, 0b11111100):  # no bit set, or only the bitmap's padding past the two columns
        event = bytearray(events[index])
        event[bitmap_at] = bitmap
        with pytest.raises(TruncatedEventError, match="has rows but no column in its row image"):
            decoder.feed(_with_crc(bytes(event)))


@pytest.fixture(scope="module")
def typed_events(mariadb: MariaDB) -> tuple[str, list[bytes]]:
    """Events of a table of many column types (compressed and plain), inserted, updated and deleted."""
    schema = new_schema(mariadb)
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, ti TINYINT, mi MEDIUMINT UNSIGNED, bi BIGINT,"
        " d DECIMAL(30,12), d2 DECIMAL(40,38), f FLOAT, db DOUBLE, v VARCHAR(300), c CHAR(4) BINARY, b BLOB,"
        " j JSON, dt DATE, dtm DATETIME(3), ts TIMESTAMP(6) NULL, tm TIME(2), y YEAR, e ENUM('a','b'),"
        " st SET('x','y','z'), bt BIT(12), g POINT, z VARCHAR(100) COMPRESSED) CHARSET utf8mb4",
        f"INSERT INTO `{schema}`.t VALUES (1, -5, 70000, -9000000000, '-123456789.000000000001', 0.5, 1.5, -2.25,"
        " 'text é', 'ab', x'00ff', '{\"k\": [1, 2]}', '2024-02-29', '2024-02-29 12:34:56.789',"
        " '2024-01-01 00:00:01.5', '-838:59:59.99', 2024, 'b', 'x,z', b'101', POINT(1, 2), REPEAT('z', 90)),"
        " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
        " NULL, NULL, NULL, NULL)",
        f"UPDATE `{schema}`.t SET v = 'changed', d = d + 1, j = '[]' WHERE id = 1",
        f"DELETE FROM `{schema}`.t WHERE id = 2",
    )
    path = mariadb.binlog_files()[-1]
    mariadb.execute("FLUSH BINARY LOGS")
    return path.name, list(iter_file_events(path))


def test_mutated_events_end_in_a_binlog_error(typed_events: tuple[str, list[bytes]]) -> None:
    """Real events with random bytes changed, cut out or slipped in (the checksum made right again, so that the
    decoder reads them): each decodes or raises a BinlogError that names the problem; no other exception, no
    endless loop. Each is fed after the FORMAT_DESCRIPTION, the transaction's start and the TABLE_MAPs before it."""
    name, events = typed_events
    fde = next(e for e in events if e[4] == FORMAT_DESCRIPTION_EVENT)
    rng = random.Random(27)
    escaped: list[tuple[int, str, str]] = []
    for _ in range(3000):
        index = rng.randrange(len(events))
        event = bytearray(events[index])
        for _change in range(rng.choice((1, 1, 2, 4))):
            at = rng.randrange(19, max(20, len(event) - 4))
            roll = rng.random()
            if roll < 0.6:
                event[at : at + 1] = bytes([rng.randrange(256)])  # (past the end of a short event: one byte more)
            elif roll < 0.8:
                del event[at : at + rng.randint(1, 8)]
            else:
                event[at:at] = rng.randbytes(rng.randint(1, 8))
        if rng.random() < 0.8:
            event[9:13] = struct.pack("<I", len(event))  # the header's size agrees with the new length
        decoder = EventDecoder(file=name)
        decoder.feed(fde)
        start = next((e for e in reversed(events[:index]) if e[4] in (GTID_EVENT, GTID_LOG_EVENT)), None)
        if start is not None:
            decoder.feed(start)
        for earlier in events[max(0, index - 3) : index]:
            if earlier[4] == TABLE_MAP_EVENT:
                decoder.feed(earlier)
        try:
            decoder.feed(_with_crc(bytes(event)))
        except BinlogError as exc:
            assert str(exc)
        except Exception as exc:  # noqa: BLE001 - what this test looks for
            escaped.append((event[4], type(exc).__name__, str(exc)[:200]))
    assert not escaped, escaped[:5]


def test_truncated_file_raises_naming_file_and_position(tmp_path: Path, real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    data = b"\xfebin" + b"".join(events)
    path = tmp_path / name
    path.write_bytes(data[:-10])
    last_start = len(data) - len(events[-1])
    with pytest.raises(TruncatedEventError, match=rf"{name}: event at position {last_start}"):
        list(read_binlog_files([path]))


def test_bad_crc_raises_naming_file_and_position(real_events: tuple[str, list[bytes]], tmp_path: Path) -> None:
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == WRITE_ROWS_EVENT_V1)
    position = 4 + sum(len(e) for e in events[:index])
    corrupt = bytearray(events[index])
    corrupt[-6] ^= 0x01  # the "w" of the last row's "two"
    path = tmp_path / name
    path.write_bytes(b"\xfebin" + b"".join(events[:index]) + bytes(corrupt) + b"".join(events[index + 1 :]))
    with pytest.raises(ChecksumError, match=rf"{name} at position {position}"):
        list(read_binlog_files([path]))
    # Without verification the corruption would have been decoded as data.
    rows = [c.after for t in read_binlog_files([path], verify_checksum=False) for c in t.changes]
    assert rows == [("1", "one"), ("2", "tvo"), ("2", "deux")]


def test_a_damaged_checksum_is_reported_with_both_sums(real_events: tuple[str, list[bytes]], tmp_path: Path) -> None:
    name, events = real_events
    for index, event in enumerate(events):
        if event[4] == FORMAT_DESCRIPTION_EVENT:
            continue  # its checksum is checked apart (the "in use" flag)
        corrupt = bytearray(event)
        corrupt[-1] ^= 0x80  # the stored checksum itself, the event's data intact
        stored = int.from_bytes(corrupt[-4:], "little")
        path = tmp_path / name
        path.write_bytes(b"\xfebin" + b"".join(events[:index]) + bytes(corrupt) + b"".join(events[index + 1 :]))
        with pytest.raises(ChecksumError) as raised:
            list(read_binlog_files([path]))
        assert (raised.value.expected, raised.value.actual) == (stored, zlib.crc32(event[:-4])), index


def test_unknown_event_types_are_skipped_by_size(real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == TABLE_MAP_EVENT)
    unknown = make_event(222, b"future event payload \x00\xff" * 3, log_pos=0)
    transactions = decode_all(name, [*events[:index], unknown, *events[index:]])
    assert [c.after for t in transactions for c in t.changes] == [
        c.after for t in decode_all(name, events) for c in t.changes
    ]
    assert sum(t.event_counts.get(222, 0) for t in transactions) == 1


def test_unknown_table_id_raises(real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == WRITE_ROWS_EVENT_V1)
    patched = bytearray(events[index])
    patched[19:25] = (0x7FFFFF).to_bytes(6, "little")
    with pytest.raises(BinlogError, match=r"table id 8388607, which no TABLE_MAP announced"):
        decode_all(name, [*events[:index], _with_crc(bytes(patched)), *events[index + 1 :]])


def test_column_count_mismatch_raises(real_events: tuple[str, list[bytes]]) -> None:
    name, events = real_events
    index = next(i for i, e in enumerate(events) if e[4] == WRITE_ROWS_EVENT_V1)
    patched = bytearray(events[index])
    patched[27] = 3  # the lenenc column count right after the 8-byte post-header
    with pytest.raises(BinlogError, match="has 3 columns, its TABLE_MAP"):
        decode_all(name, [*events[:index], _with_crc(bytes(patched)), *events[index + 1 :]])


def test_a_transaction_without_commit_is_dropped_not_merged(caplog: pytest.LogCaptureFixture) -> None:
    """A source that crashed mid-write leaves a transaction without its commit; the next BEGIN starts afresh."""
    feeder = Feeder(EventDecoder(FixedSchema({("test", "t10"): T10})))
    feeder.event(FORMAT_DESCRIPTION_EVENT, fde_body("5.7.30-log"))
    for rows in ("mysql_rows_v2_t10_null_json", "mysql_rows_v2_t10_object"):
        feeder.event(QUERY_EVENT, query_body("BEGIN"))
        feeder.event(TABLE_MAP_EVENT, CAPTURED["mysql_table_map_t10_json_decimal"])
        feeder.event(WRITE_ROWS_EVENT_V2, CAPTURED[rows])
    feeder.event(XID_EVENT, struct.pack("<Q", 3))
    (trx,) = feeder.transactions
    assert [c.after[0] for c in trx.changes] == ['{"key1":"value1","key2":"value2"}']
    assert "had no commit event; dropping 1 changes" in caplog.text
