"""Tables rebuilt from a client's queue: a snapshot's rows, then the changes that follow them, applied in order.

A snapshot's rows come in the client's queue in order with the stream: each row is the table's row as of its point
in the stream, and every change after that point follows it. So applying the queue in order rebuilds the table:

* a snapshot row or an INSERT: upsert of its after image (a snapshot row may meet a row already known: it is newer);
* an UPDATE: the row under the before image's key leaves, and comes back under the after image's key with the after
  image's columns applied (a partial image, ``binlog_row_image=MINIMAL``, carries only the columns that changed);
* a DELETE: the row under the before image's key leaves;
* SNAPSHOT_START and SNAPSHOT_END bracket one table's snapshot. Rows the mirror held before the start marker that
  neither the snapshot nor a change confirmed by the end marker are gone from the table (deleted while nobody
  listened): a snapshot ending "done" without a condition removes them. With a condition, or a snapshot cancelled or
  failed, they stay (the mirror cannot tell a row that is gone from a row the snapshot did not cover).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .constants import RecordType
from .records import Event

Key = tuple[bytes | None, ...]
Row = dict[str, bytes | None]
TableName = tuple[str, str]


class TableMirror:
    """The rows of the tables seen in the events given to :meth:`apply`, by table then by key.

    ``key``: the columns identifying a row (the table's primary key), for every table, or per (schema, table) with
    ``default_key`` for the others.
    """

    def __init__(
        self, key: Sequence[str] | Mapping[TableName, Sequence[str]] = ("id",), default_key: Sequence[str] = ("id",)
    ) -> None:
        if isinstance(key, Mapping):
            self._keys: dict[TableName, tuple[str, ...]] = {name: tuple(columns) for name, columns in key.items()}
            self._default_key = tuple(default_key)
        else:
            self._keys = {}
            self._default_key = tuple(key)
        self.tables: dict[TableName, dict[Key, Row]] = {}
        #: Per table under snapshot (without a condition): keys held before its start marker not confirmed since.
        self._unconfirmed: dict[TableName, set[Key]] = {}

    def rows(self, schema: str, table: str) -> dict[Key, Row]:
        return self.tables.setdefault((schema, table), {})

    def _key(self, name: TableName, image: Mapping[str, bytes | None], event: Event) -> Key:
        columns = self._keys.get(name, self._default_key)
        try:
            return tuple(image[column] for column in columns)
        except KeyError as exc:
            raise ValueError(
                f"{event.type_name} {event.seq} of {name[0]}.{name[1]}: key column {exc.args[0]!r} is not in its image"
            ) from None

    def apply(self, event: Event) -> None:
        name = (event.schema, event.table)
        rows = self.rows(*name)
        unconfirmed = self._unconfirmed.get(name)
        if event.type == RecordType.INSERT:
            after = event.after()
            key = self._key(name, after, event)
            rows[key] = after
        elif event.type == RecordType.UPDATE:
            before, after = event.before(), event.after()
            old = self._key(name, before, event)
            row = rows.pop(old, {})
            row.update(after)
            key = self._key(name, row, event)
            rows[key] = row
            if unconfirmed is not None:
                unconfirmed.discard(old)
        elif event.type == RecordType.DELETE:
            key = self._key(name, event.before(), event)
            rows.pop(key, None)
        else:
            marker = event.marker()
            if marker is None:
                return
            if marker.start:
                # A condition leaves rows outside the snapshot: only a whole table tells which rows are gone.
                if marker.where is None:
                    self._unconfirmed[name] = set(rows)
                else:
                    self._unconfirmed.pop(name, None)
            else:
                gone = self._unconfirmed.pop(name, None)
                if gone and marker.state == "done":
                    for key in gone:
                        rows.pop(key, None)
            return
        if unconfirmed is not None:
            unconfirmed.discard(key)
