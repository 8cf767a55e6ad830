"""The partial counts of one input file, accumulated inside its Spark task before anything is shuffled.

Decoding yields one Python object per row change; turning each into a Spark row would cost more than decoding it.
So each task folds its file into a few small dictionaries (per hour and table, per day and column, per hour) and
emits only those: the shuffle then moves thousands of partial sums instead of millions of rows.

Times are unix seconds; hours and days are UTC-aligned buckets (``ts - ts % 3600``, ``ts - ts % 86400``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from binlog.constants import KIND_ORDER
from relay.pipeline.coverage import CountedSpans

HOUR = 3600
DAY = 86400

# Row change kinds (the relay protocol's bits) -> index in a usage counter list.
KIND_INDEX = {kind: index for index, kind in enumerate(KIND_ORDER)}

# Tags of the records a task emits (the first field of each tuple).
USAGE = "usage"  # (tag, hour, schema, table, inserts, updates, deletes, transactions)
COLUMN = "column"  # (tag, day, schema, table, column, changed, compared)
HOURLY = "hourly"  # (tag, hour, transactions, row_changes)
FILE = "file"  # (tag, source, path, status, counted_bytes, rows, transactions, seconds, note)
# (tag, path, GTID source, first and last sequence number, first and last byte): transactions a binlog counted, for
# the change log tasks to leave alone (see ``coverage``)
COUNTED = "counted"
LEFT = "left"  # (tag, path, binlog URI, lines, bytes): change log lines left to the binlog that counted their changes

# What became of a file, in its FILE record. Rows and transactions are those of complete transactions only.
COMPLETE = "complete"  # read to the end, which is the end a closed file has
PARTIAL = "partial"  # counted up to its last complete transaction; the rest of it is not (the note says why)
LIVE = "live"  # a server's live binlog: counted up to its last complete transaction, the rest still being written
UNREADABLE = "unreadable"  # corrupt, or not what it claims to be: counts nothing (the note says why)
STATUSES = (COMPLETE, PARTIAL, LIVE, UNREADABLE)


def hour_of(timestamp: int) -> int:
    return timestamp - timestamp % HOUR


def day_of(timestamp: int) -> int:
    return timestamp - timestamp % DAY


def changed_columns(
    columns: Sequence[str], before: Sequence[Any], after: Sequence[Any], absent: Any
) -> Iterator[tuple[str, bool]]:
    """(column, changed) for each column present in both images of an UPDATE; ``absent`` marks a missing value.

    A column left out of either image (MINIMAL/NOBLOB row images) says nothing about whether it changed, so it is
    neither counted as changed nor as compared.
    """
    for name, old, new in zip(columns, before, after, strict=False):
        if old is absent or new is absent:
            continue
        yield name, old != new


class FileTally:
    """Counts of one file: usage per (hour, schema, table), column changes per (day, schema, table, column)."""

    __slots__ = (
        "columns",
        "counted_bytes",
        "counted_spans",
        "hours",
        "left_to_binlogs",
        "note",
        "path",
        "rows",
        "source",
        "status",
        "transactions",
        "usage",
    )

    def __init__(self, source: str, path: str) -> None:
        self.source = source
        self.path = path
        self.usage: dict[tuple[int, str, str], list[int]] = {}  # -> [inserts, updates, deletes, transactions]
        self.columns: dict[tuple[int, str, str, str], list[int]] = {}  # -> [changed, compared]
        self.hours: dict[int, list[int]] = {}  # -> [transactions, row changes]
        self.rows = 0
        self.transactions = 0
        self.status = COMPLETE
        self.note: str | None = None
        self.counted_bytes: int | None = None  # None: the whole file (a reader that does not track positions)
        self.counted_spans = CountedSpans()  # a binlog's counted transactions
        self.left_to_binlogs: dict[str, list[int]] = {}  # a change log's: binlog URI -> [lines, bytes] it counted

    def end(self, status: str, note: str | None, counted_bytes: int | None) -> None:
        """How the file ended: a reader that counted only part of it says so here, with the bytes it accounts for."""
        self.status, self.note, self.counted_bytes = status, note, counted_bytes

    def leave_to_binlog(self, binlog: str, line_bytes: int) -> None:
        """A change log line whose change ``binlog`` counted: not counted here, its bytes not among those counted."""
        left = self.left_to_binlogs.get(binlog)
        if left is None:
            left = self.left_to_binlogs[binlog] = [0, 0]
        left[0] += 1
        left[1] += line_bytes

    def add_row(self, schema: str, table: str, kind: int, timestamp: int) -> tuple[int, str, str]:
        """Counts one row change; returns its (hour, schema, table) key for the transaction's set of tables."""
        key = (timestamp - timestamp % HOUR, schema, table)
        counts = self.usage.get(key)
        if counts is None:
            counts = self.usage[key] = [0, 0, 0, 0]
        counts[KIND_INDEX[kind]] += 1
        hour = self.hours.get(key[0])
        if hour is None:
            hour = self.hours[key[0]] = [0, 0]
        hour[1] += 1
        self.rows += 1
        return key

    def add_column_changes(self, schema: str, table: str, timestamp: int, changes: Iterable[tuple[str, bool]]) -> None:
        day = timestamp - timestamp % DAY
        columns = self.columns
        for name, changed in changes:
            key = (day, schema, table, name)
            counts = columns.get(key)
            if counts is None:
                counts = columns[key] = [0, 0]
            counts[1] += 1
            if changed:
                counts[0] += 1

    def add_transaction(self, timestamp: int, touched: Iterable[tuple[int, str, str]]) -> None:
        """One committed transaction: +1 for its hour, and +1 for each (hour, table) it changed rows of."""
        hour_key = timestamp - timestamp % HOUR
        hour = self.hours.get(hour_key)
        if hour is None:
            hour = self.hours[hour_key] = [0, 0]
        hour[0] += 1
        self.transactions += 1
        for key in touched:
            self.usage[key][3] += 1

    def records(self, seconds: float, error: str | None = None) -> Iterator[tuple]:
        """The task's output. An unreadable file contributes its FILE record only: it is skipped as a whole."""
        if error is not None:
            yield (FILE, self.source, self.path, UNREADABLE, 0, 0, 0, seconds, error)
            return
        yield (
            FILE,
            self.source,
            self.path,
            self.status,
            self.counted_bytes,
            self.rows,
            self.transactions,
            seconds,
            self.note,
        )
        for (hour, schema, table), (ins, upd, dele, txs) in self.usage.items():
            yield (USAGE, hour, schema, table, ins, upd, dele, txs)
        for (day, schema, table, column), (changed, compared) in self.columns.items():
            yield (COLUMN, day, schema, table, column, changed, compared)
        for hour, (txs, rows) in self.hours.items():
            yield (HOURLY, hour, txs, rows)
        for span in self.counted_spans.spans:
            yield (COUNTED, self.path, *span)
        for binlog, (lines, line_bytes) in self.left_to_binlogs.items():
            yield (LEFT, self.path, binlog, lines, line_bytes)
