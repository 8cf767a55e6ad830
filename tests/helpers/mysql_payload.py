"""MySQL 8.0 binlogs on bytes for the tests that run no MySQL server: the FORMAT_DESCRIPTION of a captured MySQL
8.0.27 server (``tests/data/binlog/captured_payload.json``, hex, with its source), MySQL's packed integers, ROWS v2
bodies and rows of the captured table t10 (a JSON and a DECIMAL(10,0) column), and a binlog file assembled event by
event."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from binlog import EventDecoder, Transaction
from binlog.schema import SchemaProvider
from tests.helpers.binlog_events import make_event
from tests.helpers.jsonb import encode

DATA = Path(__file__).resolve().parent.parent / "data" / "binlog"
CAPTURED_PAYLOAD = json.loads((DATA / "captured_payload.json").read_text())


def packed(n: int) -> bytes:
    """MySQL's net_store_length."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + struct.pack("<Q", n)


def mysql8_fde_body() -> bytes:
    """FORMAT_DESCRIPTION of the captured MySQL 8.0.27 server: u16 binlog version 4, 50-byte server version, u32
    create time, u8 header length 19, its post-header lengths (type 39: 10, type 40: 40), checksum algorithm CRC32."""
    version = CAPTURED_PAYLOAD["server_version"].encode().ljust(50, b"\0")
    lengths = bytes.fromhex(CAPTURED_PAYLOAD["fde_post_header_lengths"])
    return struct.pack("<H", 4) + version + struct.pack("<IB", 0, 19) + lengths + b"\x01"


def rows_v2(table_map: bytes, ncols: int, bitmaps: bytes, rows: bytes) -> bytes:
    """ROWS v2 body: u48 table id (the TABLE_MAP's first 6 bytes), u16 flags (STMT_END_F), u16 extra-data length 2
    (no extra data), packed column count, the present-columns bitmap(s), the rows."""
    return table_map[:6] + struct.pack("<HH", 1, 2) + packed(ncols) + bitmaps + rows


def t10_row(document: object, number: int) -> bytes:
    """A full t10 image: null bitmap (c1 JSON, c2 DECIMAL(10,0); unused bits set, as MySQL writes them), the JSON as
    u32 length + binary JSON, the DECIMAL as one leading digit byte and a 9-digit group, sign bit flipped."""
    if document is None:
        return bytes([0xFD]) + bytes([0x80]) + number.to_bytes(4, "big")
    doc = encode(document)
    return bytes([0xFC]) + struct.pack("<I", len(doc)) + doc + bytes([0x80]) + number.to_bytes(4, "big")


class Binlog:
    """Events of one binlog file with consecutive end positions (from 4, after the magic), CRC32 on each."""

    def __init__(self, name: str = "binlog.000003") -> None:
        self.name = name
        self.events: list[bytes] = []
        self.pos = 4

    def add(self, event_type: int, body: bytes, timestamp: int = 1700000000) -> tuple[int, int]:
        """Append an event; returns its (start, end) positions."""
        start = self.pos
        self.pos += 19 + len(body) + 4
        self.events.append(make_event(event_type, body, log_pos=self.pos, timestamp=timestamp))
        return start, self.pos

    def feed(self, provider: SchemaProvider | None = None, **kwargs: object) -> list[Transaction]:
        decoder = EventDecoder(provider, file=self.name, **kwargs)  # type: ignore[arg-type]
        return [t for t in (decoder.feed(e) for e in self.events) if t is not None]

    def write(self, directory: Path) -> Path:
        path = directory / self.name
        path.write_bytes(b"\xfebin" + b"".join(self.events))
        return path
