"""Stored changes into the bytes of the wire: POLL and POLLV2 payloads, FETCH records.

A change's columns are kept as rowcodec JSON (relay/rowcodec.py); this module turns them straight into the
(name, before, after) tuples the clientproto encoders take: ``bytes`` for a value, ``None`` for SQL NULL, ``ABSENT``
for an image the event does not carry or a column a partial row image left out. The legacy encoders render NULL as
the text ``NULL`` and ABSENT as ``""``, as the original clients expect.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from clientproto import ABSENT, encode_poll, encode_pollv2, encode_record
from clientproto.records import InValue
from relay.store import StoredEntry

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
