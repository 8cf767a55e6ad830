"""Stored changes into the bytes of the wire: POLL and POLLV2 payloads, FETCH records.

A change's columns are kept in one of rowcodec's two forms (relay/store/rowcodec.py). The record form holds the FETCH
record's column bytes already: a FETCH record is its fixed fields followed by those bytes as they are. Otherwise, and
for POLL and POLLV2, the columns become the (name, before, after) tuples the clientproto encoders take: ``bytes`` for
a value, ``None`` for SQL NULL, ``ABSENT`` for an image the event does not carry or a column a partial row image left
out. The legacy encoders render NULL as the text ``NULL`` and ABSENT as ``""``, as the original clients expect.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from clientproto import Result, encode_columns, encode_poll, encode_pollv2
from clientproto.extensions import FETCH_REPLY_HEAD
from clientproto.header import encode_reply
from clientproto.records import RECORD_HEAD, RECORD_TAIL_FIXED
from clientproto.wire import EMPTY_LSTRING, name_lstring, text_lstring
from relay.store import StoredEntry
from relay.store.rowcodec import record_columns, wire_columns


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
        wire_columns(entry.data),
    )


def pollv2_payload(entry: StoredEntry, queue_size: int, instance_id: int) -> bytes:
    return encode_pollv2(
        entry.kind,
        event_position(entry),
        queue_size,
        instance_id,
        entry.schema_name,
        entry.table_name,
        wire_columns(entry.data),
    )


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
    text that is not valid UTF-8).
    """
    columns = record_columns(entry.data)
    if columns is None:
        columns = encode_columns(wire_columns(entry.data))
    return b"".join(
        (
            _pack_tail_fixed(entry.kind, entry.timestamp & 0xFFFFFFFF, entry.binlog_pos, entry.row_index),
            _name(entry.binlog_file),
            text_lstring(entry.gtid) if entry.gtid else EMPTY_LSTRING,
            _name(entry.schema_name),
            _name(entry.table_name),
            columns,
        )
    )


#: Records larger than this are rendered for each reply instead of being cached: a few rows of tens of MB (a row may
#: reach 1 GiB) would otherwise stay in memory until thousands of newer records pushed them out.
CACHE_MAX_RECORD = 1 << 20


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
            if self.size > 0 and len(tail) <= CACHE_MAX_RECORD:
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
    the last record sent). Byte for byte ``clientproto.fetch_reply`` of the same records encoded one by one."""
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
    parts[0] = FETCH_REPLY_HEAD.pack(count, max(0, last_seq - entries[count - 1].seq))
    return encode_reply(Result.OK, b"".join(parts)), count


#: The cache of this process's server (content-keyed, so sharing it between servers in one process is safe too).
SHARED = RenderCache()
