"""The reference FETCH records of stored changes, encoded one by one by clientproto's own encoder: the oracle that the
relay server's cached, pre-rendered frames (relay/server/render.py) must equal byte for byte."""

from __future__ import annotations

from collections.abc import Sequence

from clientproto import encode_record
from relay.store import StoredEntry
from relay.store.rowcodec import wire_columns


def reference_record(entry: StoredEntry) -> bytes:
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
        wire_columns(entry.data),
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
