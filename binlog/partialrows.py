"""PARTIAL_UPDATE_ROWS: MySQL's UPDATE rows event whose JSON after-values may be diffs of the before values.

Written with ``binlog_row_value_options=PARTIAL_JSON`` (MySQL 8.0.3+). The event is laid out as UPDATE_ROWS v2
(post-header, extra data, column count, the two present-column bitmaps), and each row is (MySQL ``sql/rpl_record.cc``
``pack_row``; ``Rows_log_event::print_verbose_one_row`` reads it the same way)::

    before-image  value-options  [partial-bits]  after-image

``value-options`` is a packed integer (net_field_length). When its PARTIAL_JSON_UPDATES bit is set, ``partial-bits``
follows: ceil(J/8) bytes, least significant bit first, one bit per JSON column of the table in column order, J
counting every JSON column of the TABLE_MAP whether the after image includes it or not. A JSON column whose bit is
set holds, where a full value would be (4-byte length, binary JSON), the 4-byte length of a diff vector and the
vector (``binlog.jsonb.apply_json_diff``); other columns, and JSON columns whose bit is clear, are as in any row.

The images are decoded by the ordinary generated decoders (``binlog.rowdecoder``), one image per call, with JSON
columns read as raw bytes, so that a diff can be applied to the binary before value; the JSON text is rendered here.
A diff needs its before value: with ``binlog_row_image=MINIMAL``/``NOBLOB`` the before image leaves JSON columns
out, and such a row raises BinlogError rather than invent an after value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from binlog.changes import NOT_PRESENT, Row, RowChange, Value
from binlog.constants import KIND_INSERT, KIND_UPDATE, MYSQL_TYPE_BLOB, MYSQL_TYPE_JSON, PARTIAL_JSON_UPDATES
from binlog.errors import BinlogError
from binlog.jsonb import apply_json_diff, decode_json
from binlog.reader import lenenc_int
from binlog.rowdecoder import RowsDecoder, build_rows_decoder
from binlog.table import ColumnInfo, TableInfo


def _raw_json(column: ColumnInfo) -> ColumnInfo:
    """A JSON column read as the bytes after its length prefix (a binary BLOB of the same length width)."""
    if column.type_code != MYSQL_TYPE_JSON:
        return column
    return replace(column, type_code=MYSQL_TYPE_BLOB, charset="binary", is_json=False)


def _json_text(value: Value) -> Value:
    # As the row decoders render JSON: an empty document is MySQL's JSON null.
    return decode_json(value) if isinstance(value, bytes) else value


def build_partial_update_decoder(columns: Sequence[ColumnInfo], present: int, present_after: int) -> RowsDecoder:
    """A decoder of all the rows of one PARTIAL_UPDATE_ROWS event, with the RowsDecoder signature."""
    raw_columns = tuple(_raw_json(c) for c in columns)
    json_indexes = [i for i, c in enumerate(columns) if c.type_code == MYSQL_TYPE_JSON]
    is_json = frozenset(json_indexes)
    partial_bytes = (len(json_indexes) + 7) // 8
    before_image = _one_image(build_rows_decoder(raw_columns, KIND_INSERT, present), present, len(columns))
    after_image = _one_image(build_rows_decoder(raw_columns, KIND_INSERT, present_after), present_after, len(columns))

    def decode_rows(
        buf: bytes,
        p: int,
        end: int,
        schema: str,
        table: str,
        names: tuple[str, ...],
        file: str,
        pos: int,
        timestamp: int,
        gtid: str,
        info: TableInfo,
        row: int,
    ) -> tuple[list[RowChange], int]:
        out: list[RowChange] = []
        while p < end:
            before, p = before_image(buf, p, info)
            options, p = lenenc_int(buf, p)
            partial = 0
            if options & PARTIAL_JSON_UPDATES:
                partial = int.from_bytes(buf[p : p + partial_bytes], "little")
                p += partial_bytes
            after_raw, p = after_image(buf, p, info)
            after: list[Value] = list(after_raw)
            for bit, index in enumerate(json_indexes):
                value = after[index]
                if partial >> bit & 1 and isinstance(value, bytes):
                    after[index] = _apply(before[index], value, file, pos, info, index)
                else:
                    after[index] = _json_text(value)
            before_text = tuple(_json_text(v) if i in is_json else v for i, v in enumerate(before))
            out.append(
                RowChange(
                    schema, table, KIND_UPDATE, names, before_text, tuple(after), file, pos, row, timestamp, gtid, info
                )
            )
            row += 1
        return out, p

    return decode_rows


def _one_image(decoder: RowsDecoder, present: int, ncols: int) -> Callable[[bytes, int, TableInfo], tuple[Row, int]]:
    """One row image at ``p``: (values, position after it), through a one-image (insert-layout) row decoder."""
    if not present:
        # No column in the image: no null bitmap, no values (and the generated loop would not advance).
        empty = (NOT_PRESENT,) * ncols
        return lambda buf, p, info: (empty, p)

    def read(buf: bytes, p: int, info: TableInfo) -> tuple[Row, int]:
        # The generated loop decodes images while p < end: an end just past p stops it after exactly one.
        (change,), p = decoder(buf, p, p + 1, "", "", (), "", 0, 0, "", info, 0)
        assert change.after is not None  # an insert's decoder fills the after image
        return change.after, p

    return read


def _apply(before: Value, diff: bytes, file: str, pos: int, info: TableInfo, index: int) -> str:
    where = f"partial JSON update at {file}:{pos} ({info.schema}.{info.table} column {info.names[index]!r})"
    if before is NOT_PRESENT:
        raise BinlogError(
            f"{where}: the before image leaves the column out, so its diff cannot be applied "
            "(set binlog_row_image=FULL, or binlog_row_value_options='' on the source)"
        )
    if not isinstance(before, bytes):  # None: the JSON columns are read raw, so any other value is bytes
        raise BinlogError(f"{where}: the column is NULL before the update; a diff cannot apply to NULL")
    try:
        return apply_json_diff(before, diff)
    except ValueError as exc:
        raise BinlogError(f"{where}: {exc}") from exc
