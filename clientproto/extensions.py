"""Payloads of the commands this relay adds: FETCH, ACK, REMOVEFILTER, STATUS and SNAPSHOT.

They follow the original's conventions (little-endian integers, lstrings, result codes) so that a PHP client can
parse them with ``unpack("V")``/``unpack("P")`` and the same string reader it already has. FETCH records are in
:mod:`clientproto.records`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from .constants import (
    MAX_FETCH_EVENTS,
    MAX_WAIT_MS,
    UNKNOWN_ROWS,
    FetchFlags,
    SnapshotAction,
    SnapshotState,
)
from .payloads import FilterIdentity, check_types, encode_filter_names, read_filter_names
from .records import Event, decode_record
from .wire import U32, U64, Reader, name_lstring, text_lstring

_FETCH = struct.Struct("<IIIQ")
#: The FETCH reply payload's head: RecordCount, QueueSize.
FETCH_REPLY_HEAD = struct.Struct("<IQ")
_ACK_REPLY = struct.Struct("<QQ")
_STATUS_COUNTERS = struct.Struct("<QQQQQQQ")
_STATUS_FILTER = struct.Struct("<BBi")
_KNOWN_FETCH_FLAGS = int(FetchFlags.MANUAL_ACK)
_SNAPSHOT_HEAD = struct.Struct("<BI")
#: A SNAPSHOT reply item: SnapshotId, State, RowsDone, RowsTotal.
_SNAPSHOT_ITEM = struct.Struct("<QBQQ")


# --------------------------------------------------------------------------------------------------------- FETCH


@dataclass(frozen=True, slots=True)
class FetchRequest:
    #: At most this many records (1..MAX_FETCH_EVENTS).
    max_events: int
    #: Long-poll: when nothing is pending, wait up to this many ms for new entries (0 = answer at once).
    wait_ms: int
    #: MANUAL_ACK: records stay queued until ACKed (and come again in the next session if never ACKed).
    #: Without it, records are acknowledged as they are sent.
    manual_ack: bool
    #: Acknowledge every entry with Seq <= this before fetching, as ACK does (0 = no acknowledgement).
    ack_upto: int


def encode_fetch(max_events: int, wait_ms: int, *, manual_ack: bool = False, ack_upto: int = 0) -> bytes:
    """FETCH payload: u32 MaxEvents, u32 WaitMs, u32 Flags, u64 AckUpTo."""
    return _FETCH.pack(max_events, wait_ms, FetchFlags.MANUAL_ACK if manual_ack else 0, ack_upto)


def decode_fetch(payload: bytes) -> FetchRequest:
    reader = Reader(payload, "FETCH")
    max_events, wait_ms, flags, ack_upto = reader.unpack(_FETCH, "MaxEvents/WaitMs/Flags/AckUpTo")
    reader.end()
    if not 1 <= max_events <= MAX_FETCH_EVENTS:
        raise reader.fail(f"MaxEvents {max_events} at offset 0 is not within 1..{MAX_FETCH_EVENTS}")
    if wait_ms > MAX_WAIT_MS:
        raise reader.fail(f"WaitMs {wait_ms} at offset 4 is over the limit of {MAX_WAIT_MS}")
    if flags & ~_KNOWN_FETCH_FLAGS:
        raise reader.fail(f"Flags 0x{flags:08x} at offset 8 has unknown bits (known: 0x01 manual ack)")
    return FetchRequest(max_events, wait_ms, bool(flags & FetchFlags.MANUAL_ACK), ack_upto)


@dataclass(slots=True)
class FetchReply:
    #: Entries still queued that this session has not received yet.
    queue_size: int
    events: list[Event] = field(default_factory=list)


def encode_fetch_reply(queue_size: int, records: Sequence[bytes]) -> list[bytes]:
    """The FETCH reply payload as pieces for :func:`clientproto.header.encode_reply_parts`.

    ``records`` come from :func:`clientproto.records.encode_record`; the server stops adding records once their
    total reaches FETCH_BYTE_BUDGET (always sending at least one), so that one batch of big rows stays bounded.
    """
    return [FETCH_REPLY_HEAD.pack(len(records), queue_size), *records]


def decode_fetch_reply(payload: bytes) -> FetchReply:
    reader = Reader(payload, "FETCH reply")
    count, queue_size = reader.unpack(FETCH_REPLY_HEAD, "RecordCount/QueueSize")
    # A record takes at least 4 + 25 + 4 * 5 + 4 bytes: refuse absurd counts before looping.
    if count * 53 > reader.remaining():
        raise reader.fail(f"RecordCount {count} at offset 0 cannot fit in the {reader.remaining()} bytes left")
    events = [decode_record(reader, i) for i in range(count)]
    reader.end()
    return FetchReply(queue_size, events)


# ----------------------------------------------------------------------------------------------------------- ACK


@dataclass(frozen=True, slots=True)
class AckRequest:
    #: Acknowledge every queue entry with sequence <= seq (cumulative; acknowledging again is a no-op).
    seq: int


@dataclass(frozen=True, slots=True)
class AckReply:
    #: The client's acknowledged high-water mark after this request.
    acked_seq: int
    #: Entries this request removed (0 when everything up to seq was already acknowledged).
    removed: int


def encode_ack(seq: int) -> bytes:
    """ACK payload: u64 Seq."""
    return U64.pack(seq)


def decode_ack(payload: bytes) -> AckRequest:
    reader = Reader(payload, "ACK")
    seq = reader.u64("Seq")
    reader.end()
    return AckRequest(seq)


def encode_ack_reply(acked_seq: int, removed: int) -> bytes:
    """ACK reply payload: u64 AckedSeq, u64 Removed."""
    return _ACK_REPLY.pack(acked_seq, removed)


def decode_ack_reply(payload: bytes) -> AckReply:
    reader = Reader(payload, "ACK reply")
    acked_seq, removed = reader.unpack(_ACK_REPLY, "AckedSeq/Removed")
    reader.end()
    return AckReply(acked_seq, removed)


# -------------------------------------------------------------------------------------------------- REMOVEFILTER


def encode_removefilter(types: int, schema: str, table: str) -> bytes:
    """REMOVEFILTER payload: u8 FilterType, lstring SchemaName, lstring TableName (ADDFILTER's identity)."""
    return bytes((types,)) + encode_filter_names(schema, table)


def decode_removefilter(payload: bytes) -> FilterIdentity:
    reader = Reader(payload, "REMOVEFILTER")
    types = reader.u8("FilterType")
    check_types(reader, types, 0)
    schema, table = read_filter_names(reader)
    return FilterIdentity(types, schema, table)


def encode_removefilter_reply(removed: bool) -> bytes:
    """REMOVEFILTER reply payload: u32 Removed (1 when the filter existed, 0 when there was none: idempotent)."""
    return U32.pack(1 if removed else 0)


def decode_removefilter_reply(payload: bytes) -> bool:
    reader = Reader(payload, "REMOVEFILTER reply")
    removed = reader.u32("Removed")
    reader.end()
    return bool(removed)


# -------------------------------------------------------------------------------------------------------- STATUS


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """STATUS: no payload (any sent is ignored)."""


def decode_status(payload: bytes) -> StatusRequest:
    return StatusRequest()


@dataclass(frozen=True, slots=True)
class FilterInfo:
    types: int
    policy: int
    limit: int
    schema: str
    table: str


@dataclass(slots=True)
class Status:
    client_id: int
    name: str
    #: Entries in the queue, delivered-but-unacknowledged ones included.
    queue_size: int = 0
    #: Entries delivered in this session and not acknowledged yet.
    pending: int = 0
    #: Highest acknowledged sequence number.
    acked_seq: int = 0
    #: Highest sequence number ever assigned to this client.
    last_seq: int = 0
    served: int = 0
    discarded: int = 0
    max_queue: int = 0
    #: The relay's checkpoint in the source's binlog.
    binlog_file: str = ""
    binlog_pos: int = 0
    filters: list[FilterInfo] = field(default_factory=list)


def encode_status_reply(status: Status) -> bytes:
    """STATUS reply payload (see PROTOCOL.md): id, name, seven u64 counters, checkpoint, filters."""
    parts = [
        U32.pack(status.client_id),
        text_lstring(status.name),
        _STATUS_COUNTERS.pack(
            status.queue_size,
            status.pending,
            status.acked_seq,
            status.last_seq,
            status.served,
            status.discarded,
            status.max_queue,
        ),
        name_lstring(status.binlog_file),
        U64.pack(status.binlog_pos),
        U32.pack(len(status.filters)),
    ]
    for f in status.filters:
        parts.append(_STATUS_FILTER.pack(f.types, f.policy, f.limit))
        parts.append(encode_filter_names(f.schema, f.table))
    return b"".join(parts)


def decode_status_reply(payload: bytes) -> Status:
    reader = Reader(payload, "STATUS reply")
    client_id = reader.u32("ClientID")
    name = reader.text("ClientName")
    counters = reader.unpack(_STATUS_COUNTERS, "QueueSize/Pending/AckedSeq/LastSeq/Served/Discarded/MaxQueue")
    binlog_file = reader.text("BinlogFile")
    binlog_pos = reader.u64("BinlogPos")
    at = reader.offset
    count = reader.u32("FilterCount")
    if count * 16 > reader.remaining():
        raise reader.fail(f"FilterCount {count} at offset {at} cannot fit in the {reader.remaining()} bytes left")
    filters = []
    for i in range(count):
        types, policy, limit = reader.unpack(_STATUS_FILTER, f"filter {i} FilterType/DiscardType/QueueLimit")
        schema = reader.text(f"filter {i} SchemaName")
        table = reader.text(f"filter {i} TableName")
        filters.append(FilterInfo(types, policy, limit, schema, table))
    reader.end()
    queue_size, pending, acked_seq, last_seq, served, discarded, max_queue = counters
    return Status(
        client_id,
        name,
        queue_size,
        pending,
        acked_seq,
        last_seq,
        served,
        discarded,
        max_queue,
        binlog_file,
        binlog_pos,
        filters,
    )


# ------------------------------------------------------------------------------------------------------ SNAPSHOT


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    #: SnapshotAction: START, CANCEL or STATUS.
    action: int
    #: (schema, table) pairs, in the order of the reply's items.
    tables: tuple[tuple[str, str], ...]
    #: START: the SQL condition the rows must meet ("" for every row); always "" for CANCEL and STATUS.
    where: str = ""


def encode_snapshot(action: int, tables: Sequence[tuple[str, str]], where: str = "") -> bytes:
    """SNAPSHOT payload: u8 Action, u32 TableCount, TableCount x (lstring Schema, lstring Table), lstring Where."""
    parts = [_SNAPSHOT_HEAD.pack(action, len(tables))]
    parts.extend(encode_filter_names(schema, table) for schema, table in tables)
    parts.append(text_lstring(where))
    return b"".join(parts)


def decode_snapshot(payload: bytes) -> SnapshotRequest:
    reader = Reader(payload, "SNAPSHOT")
    action, count = reader.unpack(_SNAPSHOT_HEAD, "Action/TableCount")
    if action not in SnapshotAction._value2member_map_:
        raise reader.fail(f"Action 0x{action:02x} at offset 0 is not 0x00 START, 0x01 CANCEL or 0x02 STATUS")
    # Each table takes at least two lstrings (10 bytes), and Where one (5): refuse absurd counts before looping.
    if not count or count * 10 > reader.remaining() - 5:
        raise reader.fail(f"TableCount {count} at offset 1 is 0 or cannot fit in the {reader.remaining()} bytes left")
    tables = []
    for i in range(count):
        for what in ("Schema", "Table"):
            at = reader.offset
            name = reader.text(f"table {i} {what}")
            if not name:
                raise reader.fail(f"table {i} {what} at offset {at} is empty")
            tables.append(name)
    where_at = reader.offset
    where = reader.text("Where", None)
    reader.end()
    if where and action != SnapshotAction.START:
        raise reader.fail(f"Where at offset {where_at} must be empty for {SnapshotAction(action).name}")
    pairs = tuple(zip(tables[::2], tables[1::2], strict=True))
    return SnapshotRequest(action, pairs, where)


@dataclass(frozen=True, slots=True)
class SnapshotItem:
    """One table's snapshot in a SNAPSHOT reply (the items follow the request's tables)."""

    #: 0 when the client never asked a snapshot of the table (state NONE).
    snapshot_id: int
    #: SnapshotState.
    state: int
    #: Rows queued so far.
    rows_done: int = 0
    #: The table's estimated row count (an estimate: rows_done may pass it); None when not known yet.
    rows_total: int | None = None

    @property
    def state_name(self) -> str:
        try:
            return SnapshotState(self.state).name.lower()
        except ValueError:
            return f"0x{self.state:02x}"

    @property
    def active(self) -> bool:
        """Pending or running: its rows are still to come."""
        return self.state in (SnapshotState.PENDING, SnapshotState.RUNNING)


def encode_snapshot_reply(items: Sequence[SnapshotItem]) -> bytes:
    """SNAPSHOT reply payload: u32 Count, then per table u64 SnapshotId, u8 State, u64 RowsDone, u64 RowsTotal
    (2^64 - 1: not known)."""
    parts = [U32.pack(len(items))]
    for item in items:
        total = UNKNOWN_ROWS if item.rows_total is None else item.rows_total
        parts.append(_SNAPSHOT_ITEM.pack(item.snapshot_id, item.state, item.rows_done, total))
    return b"".join(parts)


def decode_snapshot_reply(payload: bytes) -> list[SnapshotItem]:
    reader = Reader(payload, "SNAPSHOT reply")
    count = reader.u32("Count")
    if count * _SNAPSHOT_ITEM.size != reader.remaining():
        raise reader.fail(f"Count {count} at offset 0 does not match the {reader.remaining()} bytes left")
    items = []
    for i in range(count):
        snapshot_id, state, rows_done, total = reader.unpack(_SNAPSHOT_ITEM, f"item {i}")
        items.append(SnapshotItem(snapshot_id, state, rows_done, None if total == UNKNOWN_ROWS else total))
    return items
