"""Stored changes into the bytes of the wire: POLL and POLLV2 payloads, FETCH records.

A change's columns are kept in one of rowcodec's two forms (relay/store/rowcodec.py). The record form holds the FETCH
record's column bytes already: a FETCH record is its fixed fields followed by those bytes as they are. Otherwise, and
for POLL and POLLV2, the columns become the (name, before, after) tuples the clientproto encoders take: ``bytes`` for
a value, ``None`` for SQL NULL, ``ABSENT`` for an image the event does not carry or a column a partial row image left
out. The legacy encoders render NULL as the text ``NULL`` and ABSENT as ``""``, as the original clients expect.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Sequence

from clientproto import ABSENT, Result, decode_columns, encode_columns, encode_poll, encode_pollv2, encode_record
from clientproto.header import encode_reply
from clientproto.records import InValue
from clientproto.wire import EMPTY_LSTRING, name_lstring, text_lstring
from relay.store import StoredEntry
from relay.store.rowcodec import record_columns

ColumnTuple = tuple[str, InValue, InValue]

_loads = json.loads


def _text_bytes(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        # A badly encoded source column can leave lone surrogates in the stored text: send their raw bytes back
        # (surrogateescape) or, failing that, their UTF-8-like form, rather than failing the whole delivery.
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")


def _value(value: object) -> InValue:
    if value is None:
        return None
    if type(value) is str:
        return _text_bytes(value)
    if isinstance(value, dict):
        if "x" in value:
            return base64.b64decode(value["x"])
        return ABSENT  # {"m": 1}: left out of a partial row image
    return _text_bytes(str(value))


def columns_of(data: str) -> list[ColumnTuple]:
    """The (name, before, after) tuples of a stored change, in ordinal order."""
    raw = record_columns(data)
    if raw is not None:
        return decode_columns(raw)  # type: ignore[return-value]
    parsed = _loads(data)
    names: list[str] = parsed["c"]
    before = parsed["b"]
    after = parsed["a"]
    if before is None:
        return [(name, ABSENT, _value(value)) for name, value in zip(names, after or (), strict=False)]
    if after is None:
        return [(name, _value(value), ABSENT) for name, value in zip(names, before, strict=False)]
    return [(name, _value(b), _value(a)) for name, b, a in zip(names, before, after, strict=False)]


def event_position(entry: StoredEntry) -> int:
    """The legacy EventPosition: (event timestamp << 32) | log_pos, each half cut to 32 bits."""
    return ((entry.timestamp & 0xFFFFFFFF) << 32) | (entry.binlog_pos & 0xFFFFFFFF)


def poll_payload(entry: StoredEntry, queue_size: int) -> bytes:
    return encode_poll(
        entry.kind,
        event_position(entry),
        queue_size,
        entry.schema_name,
        entry.table_name,
        columns_of(entry.data),
    )


def pollv2_payload(entry: StoredEntry, queue_size: int, instance_id: int) -> bytes:
    return encode_pollv2(
        entry.kind,
        event_position(entry),
        queue_size,
        instance_id,
        entry.schema_name,
        entry.table_name,
        columns_of(entry.data),
    )


def fetch_record(entry: StoredEntry) -> bytes:
    return encode_record(
        entry.seq,
        entry.kind,
        entry.timestamp & 0xFFFFFFFF,
        entry.binlog_file,
        entry.binlog_pos,
        entry.row_index,
        entry.gtid,
        entry.schema_name,
        entry.table_name,
        columns_of(entry.data),
    )


def fetch_records(entries: Sequence[StoredEntry], byte_budget: int) -> list[bytes]:
    """Records for ``entries`` in order, stopping once their total reaches ``byte_budget`` (always one at least)."""
    records: list[bytes] = []
    total = 0
    for entry in entries:
        record = fetch_record(entry)
        records.append(record)
        total += len(record)
        if total >= byte_budget:
            break
    return records


# -- FETCH replies from shared, cached records ----------------------------------------------------------------------

#: A record after its RecordSize and Seq: EventType, Timestamp, Position, Row (clientproto/records.py).
_TAIL_HEAD = struct.Struct("<BIQI")
#: RecordSize and Seq: the only per-client part of a record.
_RECORD_HEAD = struct.Struct("<IQ")
#: The FETCH reply payload's head: RecordCount, QueueSize.
_FETCH_HEAD = struct.Struct("<IQ")
_pack_record_head = _RECORD_HEAD.pack
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

    Byte for byte ``fetch_record(entry)[12:]``: the fixed fields, then the stored column bytes (record form), or the
    columns encoded here from the JSON form (older stores, and text that is not valid UTF-8).
    """
    columns = record_columns(entry.data)
    if columns is None:
        columns = encode_columns(columns_of(entry.data))
    return b"".join(
        (
            _TAIL_HEAD.pack(entry.kind, entry.timestamp & 0xFFFFFFFF, entry.binlog_pos, entry.row_index),
            _name(entry.binlog_file),
            text_lstring(entry.gtid) if entry.gtid else EMPTY_LSTRING,
            _name(entry.schema_name),
            _name(entry.table_name),
            columns,
        )
    )


class RenderCache:
    """FETCH records shared by every session of a server: a change queued for many clients is rendered once.

    Keyed by everything a record is made of except the per-client Seq (the entry's other fields), so a hit is
    the same bytes by construction, whatever the store did meanwhile. Bounded to ``size`` records in two
    generations: when the newer one is full it becomes the older one and the older one is dropped, so making room
    costs nothing per record (a hit in the older generation moves the record to the newer one). Used from the store
    threads at once, hence the lock around writes (reads are single dictionary lookups).
    """

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self._half = max(1, size // 2)
        self._new: dict[tuple[object, ...], bytes] = {}
        self._old: dict[tuple[object, ...], bytes] = {}
        self._lock = threading.Lock()

    def tail(self, entry: StoredEntry) -> bytes:
        """The record of ``entry`` after RecordSize and Seq (:func:`fetch_tail`)."""
        key = entry[1:]
        tail = self._new.get(key)
        if tail is None:
            tail = self._old.get(key)
            if tail is None:
                tail = fetch_tail(entry)
            if self.size > 0:
                with self._lock:
                    if len(self._new) >= self._half:
                        self._old, self._new = self._new, {}
                    self._new[key] = tail
        return tail

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def fetch_frame(
    cache: RenderCache, entries: Sequence[StoredEntry], byte_budget: int, last_seq: int
) -> tuple[bytes, int]:
    """The whole FETCH reply frame for ``entries`` in order, stopping once the records reach ``byte_budget`` (one
    at least), and how many entries it holds. ``last_seq``: the newest seq of the queue (QueueSize is what follows
    the last record sent). Byte for byte ``fetch_reply(queue_size, fetch_records(entries, byte_budget))``."""
    parts: list[bytes] = [b""]
    append = parts.append
    total = 0
    tail_of = cache.tail
    for entry in entries:
        tail = tail_of(entry)
        append(_pack_record_head(len(tail) + 8, entry.seq))
        append(tail)
        total += len(tail) + 12
        if total >= byte_budget:
            break
    count = (len(parts) - 1) // 2
    if not count:
        return b"", 0
    parts[0] = _FETCH_HEAD.pack(count, max(0, last_seq - entries[count - 1].seq))
    return encode_reply(Result.OK, b"".join(parts)), count


#: The cache of this process's server (content-keyed, so sharing it between servers in one process is safe too).
SHARED = RenderCache()
