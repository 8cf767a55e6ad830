"""The reference FETCH records of stored changes, encoded one by one by clientproto's own encoder: the oracle that the
relay server's cached, pre-rendered frames (relay/server/render.py) must equal byte for byte."""

from __future__ import annotations

from collections.abc import Sequence

from clientproto import RecordFlags, RecordType, encode_record
from relay.store import StoredEntry
from relay.store.rowcodec import wire_columns

#: Stored kinds of the relay's own (PROTOCOL.md section 5.10), written out here rather than taken from the server:
#: a snapshot row is an INSERT, the markers have types of their own, and all three carry RecordFlags SNAPSHOT.
WIRE_OF_KIND = {
    8: (RecordType.INSERT, RecordFlags.SNAPSHOT),
    16: (RecordType.SNAPSHOT_START, RecordFlags.SNAPSHOT),
    32: (RecordType.SNAPSHOT_END, RecordFlags.SNAPSHOT),
}


def reference_record(entry: StoredEntry) -> bytes:
    event_type, flags = WIRE_OF_KIND.get(entry.kind, (entry.kind, 0))
    return encode_record(
        entry.seq,
        event_type,
        entry.timestamp & 0xFFFFFFFF,
        entry.binlog_file,
        entry.binlog_pos,
        entry.row_index,
        entry.gtid,
        entry.schema_name,
        entry.table_name,
        wire_columns(entry.data),
        flags,
    )


def reference_records(entries: Sequence[StoredEntry], byte_budget: int) -> list[bytes]:
    """Records for ``entries`` in order, stopping once their total reaches ``byte_budget`` (always one at least)."""
    records: list[bytes] = []
    total = 0
    for entry in entries:
        record = reference_record(entry)
        records.append(record)
        total += len(record)
        if total >= byte_budget:
            break
    return records
