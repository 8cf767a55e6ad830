"""What the stream yields: row changes grouped into committed transactions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlog.constants import KIND_NAMES

if TYPE_CHECKING:
    from binlog.position import Position
    from binlog.table import TableInfo


class _NotPresent:
    """The value of a column that a MINIMAL or NOBLOB row image left out (distinct from SQL NULL)."""

    __slots__ = ()
    _instance: _NotPresent | None = None

    def __new__(cls) -> _NotPresent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_PRESENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NOT_PRESENT"  # pickles (e.g. into Spark tasks) as the module-level singleton


NOT_PRESENT = _NotPresent()

# A column value: MySQL's text form, bytes for a binary string, None for NULL, NOT_PRESENT for a column left out.
Value = str | bytes | _NotPresent | None
Row = tuple[Value, ...]


class RowChange:
    """One row of a rows event. Built in the hot path, so a plain slotted class with positional construction."""

    __slots__ = (
        "after",
        "before",
        "columns",
        "file",
        "gtid",
        "kind",
        "pos",
        "row",
        "schema",
        "table",
        "table_info",
        "timestamp",
    )

    def __init__(
        self,
        schema: str,
        table: str,
        kind: int,
        columns: tuple[str, ...],
        before: Row | None,
        after: Row | None,
        file: str,
        pos: int,
        row: int,
        timestamp: int,
        gtid: str,
        table_info: TableInfo,
    ) -> None:
        self.schema = schema
        self.table = table
        self.kind = kind
        self.columns = columns
        self.before = before
        self.after = after
        self.file = file
        self.pos = pos
        self.row = row
        self.timestamp = timestamp
        self.gtid = gtid
        self.table_info = table_info

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, str(self.kind))

    def as_dict(self, values: str = "before") -> dict[str, object]:
        """The before (or after) image as a column → value dict."""
        image = self.before if values == "before" else self.after
        return dict(zip(self.columns, image, strict=True)) if image is not None else {}

    def __repr__(self) -> str:
        return (
            f"RowChange({self.kind_name} {self.schema}.{self.table} {self.file}:{self.pos}#{self.row} "
            f"before={self.before!r} after={self.after!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RowChange):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__ if name != "table_info")

    # Unhashable: equal by value, and mutable. The ignore: typeshed declares object.__hash__ a method, never None.
    __hash__ = None  # type: ignore[assignment]


#: Bytes of rows events that count as one row where sizes are bounded in rows (Transaction.weight; a transaction
#: comes in parts at ``chunk_rows`` rows or ``chunk_rows * ROW_BYTES`` bytes, whichever comes first).
ROW_BYTES = 4096


@dataclass(slots=True)
class Transaction:
    """A committed transaction (or, with ``changes == []``, a heartbeat/idle tick that only moves the position)."""

    changes: list[RowChange]
    position: Position
    timestamp: int = 0
    gtid: str = ""
    statements: tuple[str, ...] = ()
    event_counts: dict[int, int] = field(default_factory=dict)
    schemas: tuple[str, ...] = ()  # the default database of each statement in ``statements``
    # A transaction larger than the stream's chunk size comes in parts, so that no process ever holds a million rows
    # at once: ``partial`` parts (numbered by ``part`` from 0) then a last, complete one. ``position`` of a partial
    # part is the resume point *before* the transaction, so confirming it is harmless. A part 0 arriving while a
    # transaction's parts are open means the stream reconnected and starts that transaction again.
    partial: bool = False
    part: int = 0
    #: Bytes of the rows events its changes came from (what a reader holds for it, about): bounds set in rows alone
    #: would let a few hundred wide rows (large JSON or BLOB values) fill the memory.
    size: int = 0
    #: XA (two-phase) transactions, binlog/xa.py. "prepare": the group ended with XA PREPARE, so its rows are not
    #: committed: they are in ``prepared``, not in ``changes``, and a reader holds them until an XA COMMIT of ``xid``
    #: delivers them (or an XA ROLLBACK drops them). "commit" / "rollback": that second group, naming ``xid``; its
    #: ``changes`` are empty (the rows are those its prepare held). "" for every other transaction.
    xa: str = ""
    xid: str = ""
    prepared: list[RowChange] = field(default_factory=list)

    @property
    def weight(self) -> int:
        """What it counts for against bounds set in rows (a reader's hand-off, a batch): its rows, and one more per
        ROW_BYTES of its rows events, so that wide rows are held and batched a few at a time."""
        return len(self.changes) + self.size // ROW_BYTES

    @property
    def is_heartbeat(self) -> bool:
        """Only moves the position: the source had nothing newer (an XA PREPARE or ROLLBACK has no changes, but is a
        transaction of its own time)."""
        return not self.changes and not self.statements and not self.gtid and not self.xa
