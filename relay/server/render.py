"""Stored changes into the bytes of the wire: POLL and POLLV2 payloads, FETCH records.

A change's columns are kept in one of rowcodec's two forms (relay/store/rowcodec.py). The record form holds the FETCH
record's column bytes already: a FETCH record is its fixed fields followed by those bytes as they are. Otherwise, and
for POLL and POLLV2, the columns become the (name, before, after) tuples the clientproto encoders take: ``bytes`` for
a value, ``None`` for SQL NULL, ``ABSENT`` for an image the event does not carry or a column a partial row image left
out. The legacy encoders render NULL as the text ``NULL`` and ABSENT as ``""``, as the original clients expect.

POLL and POLLV2 replies are rendered in two steps: when a session's read-ahead is filled (in the store thread) each
entry becomes a :class:`PollRender`, the reply less its QueueSize; when the POLL is answered, :func:`poll_frame` adds
QueueSize and the frame's checksum, which is a byte sum and so needs only QueueSize's four bytes added. A change in
the record form becomes the legacy columns by copying its record's names and values as they are (both are lstrings),
with NULL and absent values replaced by the legacy texts, instead of decoding and encoding every column.

Snapshots: a snapshot's row (kind 8) goes out as an INSERT, so the original clients rebuild a table with no change;
FETCH adds RecordFlags SNAPSHOT after its columns. The markers around a table's snapshot (kinds 16 and 32) are FETCH
records of their own types (0x10 SNAPSHOT_START, 0x20 SNAPSHOT_END) with the same flag; POLL never sends them (the
session skips them, relay/server/queues.py).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from binlog.constants import KIND_DELETE, KIND_SNAPSHOT_END, KIND_SNAPSHOT_ROW, KIND_SNAPSHOT_START
from clientproto import RecordFlags, RecordType, Result, encode_columns, encode_poll, encode_pollv2
from clientproto.extensions import FETCH_REPLY_HEAD
from clientproto.header import encode_summed_reply, payload_sum
from clientproto.records import RECORD_HEAD, RECORD_TAIL_FIXED
from clientproto.wire import EMPTY_LSTRING, U32, lstring, name_lstring, text_lstring
from relay.store import KnownChange, StoredEntry, change_check
from relay.store.rowcodec import record_columns, wire_columns

#: The relay's own kinds: (EventType on the wire, RecordFlags of the FETCH record). Every other kind is a row change
#: of the binlog, sent as its own EventType (1, 2, 4) with no RecordFlags.
SNAPSHOT_WIRE = {
    KIND_SNAPSHOT_ROW: (RecordType.INSERT, RecordFlags.SNAPSHOT),
    KIND_SNAPSHOT_START: (RecordType.SNAPSHOT_START, RecordFlags.SNAPSHOT),
    KIND_SNAPSHOT_END: (RecordType.SNAPSHOT_END, RecordFlags.SNAPSHOT),
}
_SNAPSHOT_TAIL = {kind: (int(wire), bytes((flags,))) for kind, (wire, flags) in SNAPSHOT_WIRE.items()}
_LEGACY_TYPE = {KIND_SNAPSHOT_ROW: int(RecordType.INSERT)}


def event_position(entry: StoredEntry) -> int:
    """The legacy EventPosition: (event timestamp << 32) | log_pos, each half cut to 32 bits."""
    return ((entry.timestamp & 0xFFFFFFFF) << 32) | (entry.binlog_pos & 0xFFFFFFFF)


def poll_payload(entry: StoredEntry, queue_size: int) -> bytes:
    return encode_poll(
        _LEGACY_TYPE.get(entry.kind, entry.kind),
        event_position(entry),
        queue_size,
        entry.schema_name,
        entry.table_name,
        wire_columns(entry.data),
    )


def pollv2_payload(entry: StoredEntry, queue_size: int, instance_id: int) -> bytes:
    return encode_pollv2(
        _LEGACY_TYPE.get(entry.kind, entry.kind),
        event_position(entry),
        queue_size,
        instance_id,
        entry.schema_name,
        entry.table_name,
        wire_columns(entry.data),
    )


# -- POLL and POLLV2 replies, rendered ahead ------------------------------------------------------------------------

#: The reply header (Result, PayloadSize, Checksum) and POLL's fixed fields (EventType, EventPosition, QueueSize).
_POLL_FRAME_HEAD = struct.Struct("<BIIBQI")
#: The same for POLLV2, whose fixed fields go on with InstanceID and SchemaNameID (always 0).
_POLLV2_FRAME_HEAD = struct.Struct("<BIIBQIII")
_TYPE_AND_POSITION = struct.Struct("<BQ")
#: POLL's and POLLV2's fixed fields: what the payload holds before SchemaName.
_POLL_FIXED = 13
_POLLV2_FIXED = 21
_MASK32 = 0xFFFFFFFF
_ZERO_U32 = b"\x00\x00\x00\x00"
_NULL_LSTRING = lstring(b"NULL")
_unpack_u32 = U32.unpack_from
_adler32 = zlib.adler32


class PollRender(NamedTuple):
    """A POLL or POLLV2 reply of one entry, less QueueSize (which depends on the moment it is sent)."""

    v2: bool
    event_type: int
    position: int
    instance_id: int
    #: The payload after the fixed fields: SchemaName onwards.
    body: bytes
    #: PayloadSize plus the byte sum of the payload less QueueSize's bytes: the checksum less QueueSize's share.
    partial_sum: int


class PollRenderCache:
    """POLL and POLLV2 replies shared by every session of a server, as :class:`RenderCache` shares FETCH records: a
    change queued for many legacy clients is rendered once. The same two generations, keyed by the entry less its Seq
    (a reply kept for the other command or another InstanceID is rendered again), each of at most ``size / 2``
    replies and ``max_bytes / 2`` bytes; replies over ``CACHE_MAX_RECORD`` are not kept."""

    def __init__(self, size: int = 16384, max_bytes: int = 64 << 20) -> None:
        self.size = size
        self._half = max(1, size // 2)
        self._half_bytes = max_bytes // 2
        self._new: dict[tuple[object, ...], PollRender] = {}
        self._old: dict[tuple[object, ...], PollRender] = {}
        #: Bytes of the replies in the newer generation.
        self._new_bytes = 0
        self._lock = threading.Lock()

    def render(self, entry: StoredEntry, v2: bool, instance_id: int) -> PollRender:
        key = entry[1:]
        rendered = self._new.get(key)
        if rendered is None:
            rendered = self._old.get(key)
        if rendered is not None and rendered.v2 == v2 and rendered.instance_id == instance_id:
            if key in self._new:
                return rendered
        else:  # not rendered yet, or for the other command (rare: clients keep to one of POLL and POLLV2)
            rendered = poll_render(entry, v2, instance_id)
        size = len(rendered.body)
        if self.size > 0 and size <= CACHE_MAX_RECORD:
            with self._lock:
                if len(self._new) >= self._half or self._new_bytes + size > self._half_bytes:
                    self._old, self._new, self._new_bytes = self._new, {}, 0
                self._new[key] = rendered
                self._new_bytes += size
        return rendered

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def poll_render(entry: StoredEntry, v2: bool, instance_id: int) -> PollRender:
    """The reply to a POLL (or POLLV2) answered with ``entry``, less QueueSize (:func:`poll_frame`)."""
    event_type = _LEGACY_TYPE.get(entry.kind, entry.kind)
    position = event_position(entry)
    body = _poll_body(entry, v2)
    # The fixed fields but QueueSize: EventType, EventPosition, and for POLLV2 InstanceID (SchemaNameID is 0).
    head_sum = sum(_TYPE_AND_POSITION.pack(event_type, position)) + (sum(U32.pack(instance_id)) if v2 else 0)
    size = (_POLLV2_FIXED if v2 else _POLL_FIXED) + len(body)
    # Adler-32's first half is 1 + the byte sum mod 65521: the byte sum itself for up to 256 bytes, in C.
    body_sum = (_adler32(body) & 0xFFFF) - 1 if len(body) <= 256 else payload_sum(body)
    return PollRender(v2, event_type, position, instance_id, body, size + head_sum + body_sum)


def poll_frame(render: PollRender, queue_size: int) -> bytes:
    """The whole reply frame: byte for byte ``poll_reply(poll_payload(...))`` (or ``pollv2_payload``)."""
    size = min(queue_size, _MASK32)
    checksum = (render.partial_sum + (size & 0xFF) + (size >> 8 & 0xFF) + (size >> 16 & 0xFF) + (size >> 24)) & _MASK32
    body = render.body
    if render.v2:
        return (
            _POLLV2_FRAME_HEAD.pack(
                Result.OK,
                _POLLV2_FIXED + len(body),
                checksum,
                render.event_type,
                render.position,
                size,
                render.instance_id,
                0,
            )
            + body
        )
    return (
        _POLL_FRAME_HEAD.pack(Result.OK, _POLL_FIXED + len(body), checksum, render.event_type, render.position, size)
        + body
    )


def _poll_body(entry: StoredEntry, v2: bool) -> bytes:
    raw = record_columns(entry.data)
    if raw is not None:
        columns = _legacy_columns(raw, v2)
        if columns is not None:
            if v2:
                return b"".join((name_lstring(entry.schema_name), _ZERO_U32, name_lstring(entry.table_name), columns))
            return b"".join((name_lstring(entry.schema_name), name_lstring(entry.table_name), columns))
    # The JSON form (or a record this function does not take): the reference encoders, less the fixed fields.
    if v2:
        return pollv2_payload(entry, 0, 0)[_POLLV2_FIXED:]
    return poll_payload(entry, 0)[_POLL_FIXED:]


def _legacy_columns(raw: bytes, v2: bool) -> bytes | None:
    """ColumnsCount and the legacy columns from a FETCH record's columns (``raw``): the names and values are
    lstrings in both, so they are copied as they are; NULL becomes the text NULL and an absent value ``""``. None
    when ``raw`` is not exactly well-formed columns (the caller then takes the reference encoder's path)."""
    end = len(raw)
    try:
        count = _unpack_u32(raw, 0)[0]
        parts = [raw[:4]]
        append = parts.append
        o = 4
        for _ in range(count):
            e = o + 4 + _unpack_u32(raw, o)[0]  # the name lstring ends before e (its NUL at e - 1)
            if e <= o + 4 or e >= end or raw[e - 1]:
                return None
            if v2:
                append(_ZERO_U32)
            append(raw[o:e])
            flags = raw[e]
            o = e + 1
            if flags & 0xF0 or (flags & 0x05) == 0x05 or (flags & 0x0A) == 0x0A:
                return None
            if flags & 0x05:
                append(_NULL_LSTRING if flags & 0x01 else EMPTY_LSTRING)
            else:
                e = o + 4 + _unpack_u32(raw, o)[0]
                if e <= o + 4 or e > end or raw[e - 1]:
                    return None
                append(raw[o:e])
                o = e
            if flags & 0x0A:
                append(_NULL_LSTRING if flags & 0x02 else EMPTY_LSTRING)
            else:
                e = o + 4 + _unpack_u32(raw, o)[0]
                if e <= o + 4 or e > end or raw[e - 1]:
                    return None
                append(raw[o:e])
                o = e
    except (struct.error, IndexError):
        return None
    if o != end:
        return None
    return b"".join(parts)


# -- FETCH replies from shared, cached records ----------------------------------------------------------------------

_pack_record_head = RECORD_HEAD.pack
_pack_tail_fixed = RECORD_TAIL_FIXED.pack
_NAMES: dict[str, bytes] = {}


def _name(name: str) -> bytes:
    encoded = _NAMES.get(name)
    if encoded is None:
        encoded = name_lstring(name)
        if len(_NAMES) < 65536:
            _NAMES[name] = encoded
    return encoded


def fetch_tail(entry: StoredEntry) -> bytes:
    """The FETCH record of ``entry`` after its RecordSize and Seq: the same for every client queueing the change.

    Byte for byte what ``clientproto.encode_record`` makes of the entry, less its first 12 bytes: the fixed fields,
    then the stored column bytes (record form), or the columns encoded here from the JSON form (older stores, and
    text that is not valid UTF-8), then RecordFlags for a snapshot's row or marker.
    """
    columns = record_columns(entry.data)
    if columns is None:
        columns = encode_columns(wire_columns(entry.data))
    kind = entry.kind
    flags = b""
    if kind > KIND_DELETE:  # the relay's own kinds; a row change of the binlog ends with its columns
        kind, flags = _SNAPSHOT_TAIL[kind]
    return b"".join(
        (
            _pack_tail_fixed(kind, entry.timestamp & 0xFFFFFFFF, entry.binlog_pos, entry.row_index),
            _name(entry.binlog_file),
            text_lstring(entry.gtid) if entry.gtid else EMPTY_LSTRING,
            _name(entry.schema_name),
            _name(entry.table_name),
            columns,
            flags,
        )
    )


#: Records larger than this are rendered for each reply instead of being cached: a few rows of tens of MB (a row may
#: reach 1 GiB) would otherwise stay in memory until thousands of newer records pushed them out.
CACHE_MAX_RECORD = 1 << 20


class RenderCache:
    """FETCH records shared by every session of a server: a change queued for many clients is read and rendered once.

    Keyed by change id. Each record is kept with the entry it was rendered from, and served only for an entry equal
    to that one but for Seq: an entry the store read through :meth:`known` is made of the kept entry's own fields,
    so the comparison is a few identity checks; any other (a store recreated under a running server hands out ids
    again) is compared by content. Entries without a change id (not from the store) are rendered every time. A
    record is kept with its byte sum, so that a reply's checksum adds up sums instead of reading every byte again.

    Bounded to ``size`` records and ``max_bytes`` (the records and their stored text) in two generations: when the
    newer one is full it becomes the older one and the older one is dropped, so making room costs nothing per
    record (a hit in the older generation moves the record to the newer one). Used from the store threads at once,
    hence the lock around writes (reads are single dictionary lookups).
    """

    def __init__(self, size: int = 16384, max_bytes: int = 64 << 20) -> None:
        self.size = size
        self._half = max(1, size // 2)
        self._half_bytes = max_bytes // 2
        self._new: dict[int, _Kept] = {}
        self._old: dict[int, _Kept] = {}
        #: Bytes of the records and stored texts in the newer generation.
        self._new_bytes = 0
        self._lock = threading.Lock()

    def known(self, change_id: int) -> KnownChange | None:
        """The change kept for ``change_id`` (an entry less its Seq) and its check, then its record:
        ``store.read_entries`` checks the change instead of reading it."""
        generation = self._new
        kept = generation.get(change_id)
        if kept is None:
            generation = self._old
            kept = generation.get(change_id)
            if kept is None:
                return None
        if kept[1] is None:
            # Made on the change's first check rather than when it is kept: a change that one client only reads
            # (the others filter it out, or there are no others) never costs one.
            checked = (kept[0], change_check(kept[0]), kept[2], kept[3])
            with self._lock:
                if generation.get(change_id) is kept:
                    generation[change_id] = checked
            return checked
        return kept

    def record(self, entry: StoredEntry) -> tuple[bytes, int]:
        """The record of ``entry`` after RecordSize and Seq (:func:`fetch_tail`), and its byte sum."""
        key = entry.change_id
        fields = entry[1:]
        kept = self._new.get(key)
        if kept is not None and kept[0] == fields:
            return kept[2], kept[3]
        kept = self._old.get(key)
        if kept is not None and kept[0] == fields:
            check, tail, tail_sum = kept[1], kept[2], kept[3]
        else:
            check = None
            tail = fetch_tail(entry)
            tail_sum = payload_sum(tail)
        size = len(tail) + len(entry.data)
        if key and self.size > 0 and size <= CACHE_MAX_RECORD:
            with self._lock:
                if len(self._new) >= self._half or self._new_bytes + size > self._half_bytes:
                    self._old, self._new, self._new_bytes = self._new, {}, 0
                self._new[key] = (fields, check, tail, tail_sum)
                self._new_bytes += size
        return tail, tail_sum

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


#: A record kept: the entry it was rendered from less its Seq, its check (``store.change_check``; None until the change
#: is first checked), the record, its byte sum. Flat, so that a hit returns it as it is (the store reads the first
#: two items). Plain tuples of strings and numbers only, which the cyclic collector stops tracking (a StoredEntry, a
#: tuple subclass, it would walk for ever).
_Kept = tuple[Any, ...]


def fetch_frame(
    cache: RenderCache, entries: Sequence[StoredEntry], byte_budget: int, last_seq: int
) -> tuple[bytes, int]:
    """The whole FETCH reply frame for ``entries`` in order, stopping once the records reach ``byte_budget`` (one
    at least), and how many entries it holds. ``last_seq``: the newest seq of the queue (QueueSize is what follows
    the last record sent). Byte for byte ``clientproto.fetch_reply`` of the same records encoded one by one."""
    parts: list[bytes] = [b""]
    append = parts.append
    total = 0
    tails_sum = 0
    record_of = cache.record
    for entry in entries:
        tail, tail_sum = record_of(entry)
        append(_pack_record_head(len(tail) + 8, entry.seq))
        append(tail)
        tails_sum += tail_sum
        total += len(tail) + 12
        if total >= byte_budget:
            break
    count = (len(parts) - 1) // 2
    if not count:
        return b"", 0
    parts[0] = payload_head = FETCH_REPLY_HEAD.pack(count, max(0, last_seq - entries[count - 1].seq))
    # The records' heads (parts 1, 3, 5, ...) are summed together; their tails' sums were kept with them.
    byte_sum = payload_sum(payload_head) + payload_sum(b"".join(parts[1::2])) + tails_sum
    return encode_summed_reply(Result.OK, b"".join(parts), byte_sum), count


#: The POLL replies of this process's servers (content-keyed, so sharing them between servers in one process is safe).
SHARED_POLL = PollRenderCache()
