"""The worker's writing side: committed binlog transactions into the store, atomically with the checkpoint.

``Ingestor.apply`` runs inside the caller's database transaction and writes, for a batch of binlog transactions: the
row changes some client wants (once each), every matching client's queue entries (once per client, however many
of its filters match; queue limits and discard policies applied), the queue states, table usage, event counts, the
schema of new table layouts, and the checkpoint. Either all of it commits or none, so after a crash the worker
resumes at the checkpoint with nothing lost and nothing queued twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from binlog.changes import Transaction
from binlog.constants import KIND_INSERT, SNAPSHOT_KINDS
from binlog.position import Position
from binlog.schemahistory import SchemaHistory
from binlog.table import ColumnInfo, TableInfo
from relay.models import (
    MAX_RUN,
    Change,
    Checkpoint,
    Client,
    DiscardPolicy,
    EventCount,
    Filter,
    QueueEntry,
    QueueState,
    SchemaColumn,
    SchemaTable,
    WorkerStatus,
)
from relay.store import rowcodec
from relay.store.channels import HEAD_CHANNEL, QUEUE_CHANNEL, queue_notice
from relay.store.filters import clients_stamped_after, filter_version, filter_version_sql
from relay.store.schemahistory import StoreHistory
from relay.store.sql import table
from relay.worker import bulk
from relay.worker.filterindex import FilterIndex, FilterSpec, Subscription
from relay.worker.usage import UsageTally

log = logging.getLogger("relay.worker")

#: Up to this many clients, a batch reads the queues of the clients it routes to by their ids; past it, every queue.
_LISTED_CLIENTS = 1000


@dataclass
class _Queue:
    """One client's queue while a batch is built: (acked, last] plus what the batch adds."""

    acked: int
    last: int
    max_queue: int
    discarded: int = 0
    read_acked: int = 0  # the head as the batch read it: the unqueue-oldest policy moves ``acked`` past it
    # Runs [first seq, first index in the batch's stored changes, count]: built as entries are added, so a client
    # that gets every stored change holds one run for the whole batch.
    runs: list[list[int]] = field(default_factory=list)

    def add_run(self, stored_index: int, count: int) -> None:
        """Queues ``count`` stored changes from ``stored_index`` on: the entries one at a time would make the same runs
        (the last run grown while it is contiguous and under MAX_RUN, then new ones)."""
        seq = self.last + 1
        self.last += count
        runs = self.runs
        if runs:
            run = runs[-1]
            if run[0] + run[2] == seq and run[1] + run[2] == stored_index and run[2] < MAX_RUN:
                grow = min(MAX_RUN - run[2], count)
                run[2] += grow
                seq, stored_index, count = seq + grow, stored_index + grow, count - grow
        while count > 0:
            size = min(count, MAX_RUN)
            runs.append([seq, stored_index, size])
            seq, stored_index, count = seq + size, stored_index + size, count - size

    def drop_consumed(self) -> bool:
        """Cuts what the unqueue-oldest policy dropped within this batch; True if anything was cut."""
        cut = False
        while self.runs and self.runs[0][0] <= self.acked:
            first_seq, first_index, count = self.runs[0]
            skip = self.acked - first_seq + 1
            if skip >= count:
                self.runs.pop(0)
            else:
                self.runs[0] = [first_seq + skip, first_index + skip, count - skip]
            cut = True
        return cut


@dataclass(frozen=True)
class BatchResult:
    transactions: int
    rows: int
    stored_changes: int
    queued_entries: int
    discarded: int


_FILTER_FIELDS = ("id", "client_id", "event_mask", "schema_name", "table_name", "queue_limit", "discard_policy")

#: Past this many clients with changed filters, a refresh loads every filter again rather than theirs.
_RELOAD_ALL_CLIENTS = 500


def load_filter_index(previous: FilterIndex | None = None) -> FilterIndex:
    """Every filter, as plain rows (20 clients of 1,000 filters each load in tens of milliseconds, not in half a
    second as model instances), with the patterns of ``previous``."""
    return FilterIndex(
        (FilterSpec(*row) for row in Filter.objects.values_list(*_FILTER_FIELDS)),
        patterns=None if previous is None else previous.patterns,
    )


def load_client_filters(client_ids: Sequence[int]) -> list[FilterSpec]:
    return [FilterSpec(*row) for row in Filter.objects.filter(client_id__in=client_ids).values_list(*_FILTER_FIELDS)]


class Ingestor:
    def __init__(self, source: str) -> None:
        self.source = source
        self.filter_version: int | None = None  # of the loaded index; None: not loaded yet
        self.index = FilterIndex(())
        self._recorded_layouts: dict[tuple[str, str], int] = {}  # table -> layout signature
        # The source's schema history (binlog.schemahistory), when the worker follows DDL: the versions its DDL made
        # are written with the checkpoint of their batch.
        self.history: SchemaHistory | None = None
        # The source's clock minus this host's, whole seconds, when it matters (runner._measure_source_clock).
        self.clock_offset = 0
        # When the source began each binlog file (BinlogStream.file_started): kept with the checkpoint.
        self.file_started: Mapping[str, int] = {}

    def refresh_filters(self) -> bool:
        """Reloads the filters written since they were loaded, if any were; True if some were.

        Called inside the batch's transaction, before routing: that read sees every filter write committed before
        the batch's changes were read from the source (relay/store/filters.py explains why that makes the
        subscription point exact). Only the clients stamped past the loaded version have their filters read again,
        so one client rewriting its filters costs every batch its own filters, not all of them.
        """
        version = filter_version()
        if version == self.filter_version:
            return False
        if self.filter_version is None or version < self.filter_version:  # the first load, or a store made again
            self.index = load_filter_index(self.index)
        else:
            changed = clients_stamped_after(self.filter_version)
            if len(changed) > _RELOAD_ALL_CLIENTS:
                self.index = load_filter_index(self.index)
            else:
                self.index.update(changed, load_client_filters(changed))
        self.filter_version = version
        return True

    def apply(
        self,
        transactions: Sequence[Transaction],
        *,
        checkpoint: bool = True,
        refresh_filters: bool = True,
        status: Mapping[str, Any] | None = None,
    ) -> BatchResult:
        """Writes a batch; the caller holds the database transaction (``transaction.atomic``).

        ``refresh_filters=False`` keeps the filters of the previous call: the later parts of a transaction that
        comes in parts are routed like its first part. ``status``: more WorkerStatus fields (the worker's state and
        position; a ``bulk.Added`` number adds to its field), written by the batch's one status update.
        """
        changes = [change for tx in transactions for change in tx.changes]
        runs, queues = self._routing_for(changes, refresh_filters)
        stored: list[int] = []  # indexes into ``changes`` of the changes some queue keeps
        by_filter: Counter[int] = Counter()  # entries dropped, by the filter whose limit and policy dropped them
        usage = UsageTally(self.clock_offset)
        for start, stop, subscriptions in runs:
            first = changes[start]
            if first.kind not in SNAPSHOT_KINDS:
                usage.add_many(first.schema, first.table, first.kind, [c.timestamp for c in changes[start:stop]])
            if subscriptions:
                kept = self._route_run(subscriptions, queues, len(stored), stop - start, by_filter)
                if kept:
                    stored.extend(range(start, start + kept))

        # The batch's small writes go together at its end (one round trip on PostgreSQL): its latency is mostly
        # round trips when the batch is small.
        writes = bulk.Statements()
        if connection.vendor == "postgresql":
            self._hold_clients(queues)
        queued = self._write_queues(changes, queues, stored, writes)
        discarded = sum(queue.discarded for queue in queues.values())
        if by_filter:
            moment = timezone.now()
            for filter_id, count in by_filter.items():
                writes.update_row(Filter, {"id": filter_id}, {"discarded": bulk.Added(count), "last_discard": moment})
        usage.write(writes)
        self._record_layouts(changes)
        self._count_events(transactions, writes)
        rows = sum(len(tx.changes) for tx in transactions if _from_source(tx))
        writes.update_row(
            WorkerStatus,
            {"source": self.source},
            {
                "rows": bulk.Added(rows),
                "rows_since_start": bulk.Added(rows),
                "transactions": bulk.Added(sum(1 for tx in transactions if _from_source(tx))),
                "heartbeat": timezone.now(),
                **(status or {}),
            },
        )
        if checkpoint and transactions:
            end = transactions[-1].position
            writes.add(*checkpoint_upsert(self.source, end, self.file_started.get(end.file, 0)))
            if self.history is not None:
                StoreHistory(self.source).save(self.history.take_pending(upto=end))
        if queued and connection.vendor == "postgresql":  # delivered at commit: wakes those clients' long-polls
            notice = queue_notice(client_id for client_id, queue in queues.items() if queue.runs)
            writes.add("SELECT pg_notify(%s, %s)", [QUEUE_CHANNEL, notice])
        moved = [client_id for client_id, queue in queues.items() if queue.acked > queue.read_acked]
        if moved and connection.vendor == "postgresql":  # the relays drop what they read ahead of those queues
            writes.add("SELECT pg_notify(%s, %s)", [HEAD_CHANNEL, queue_notice(moved)])
        writes.send()
        return BatchResult(len(transactions), rows, len(stored), queued, discarded)

    # -- queues ---------------------------------------------------------------------------------------------------

    @staticmethod
    def _route_run(
        subscriptions: Sequence[Any], queues: dict[int, _Queue], stored_index: int, count: int, by_filter: Counter[int]
    ) -> int:
        """Queues a run of ``count`` changes (stored from ``stored_index`` on) for its subscriptions; returns how many
        of its first changes some client keeps.

        Entry by entry, a limit drops when the queue is full before an entry is added: unqueue-oldest drops the oldest
        entry for each new one (the original's rule: a queue another filter filled past this limit keeps its length,
        it is not cut to the limit), ignore-newest drops the new entry (so the client keeps the run's first changes
        while there is room), and no-discard keeps everything.
        """
        kept = 0
        for sub in subscriptions:
            queue = queues.get(sub.client_id)
            if queue is None:
                # Deleted since the filters were loaded (a large transaction's later part reads the clients again,
                # the filters of its first part stay): the changes go nowhere, as they would after the delete.
                continue
            size = queue.last - queue.acked
            take = count
            limit = sub.queue_limit
            if limit > 0 and size + count > limit:  # some entry of the run finds the queue full
                if sub.discard_policy == DiscardPolicy.UNQUEUE_OLDEST:
                    dropped = count - max(limit - size, 0)
                    queue.acked += dropped
                    queue.discarded += dropped
                    by_filter[sub.filter_id] += dropped
                elif sub.discard_policy == DiscardPolicy.IGNORE_NEWEST:
                    take = max(limit - size, 0)
                    queue.discarded += count - take
                    by_filter[sub.filter_id] += count - take
            if take:
                queue.add_run(stored_index, take)
                if take > kept:
                    kept = take
                if queue.last - queue.acked > queue.max_queue:
                    queue.max_queue = queue.last - queue.acked
        return kept

    def _runs(self, changes: Sequence[Any]) -> list[tuple[int, int, tuple[Subscription, ...]]]:
        """The batch's changes as runs [start, stop) with the subscriptions each run goes to.

        Consecutive changes of one table and kind have the same subscriptions, so each client takes a prefix of the
        run (all of it, or what its limit leaves room for under ignore-newest) as one queue run, and the kept changes
        are the longest prefix any client took: what routing the changes one at a time gives, at a cost per run and
        client instead of per change and client.
        """
        match = self.index.match
        runs = []
        total = len(changes)
        start = 0
        while start < total:
            first = changes[start]
            schema, table, kind = first.schema, first.table, first.kind
            stop = start + 1
            # A snapshot's rows go to the client that asked for them alone, under its filter's limit and policy; none
            # when its filters no longer cover the table (as the table's changes then go nowhere).
            snapshot = kind in SNAPSHOT_KINDS
            client_id: int = getattr(first, "client_id", 0) if snapshot else 0  # a SnapshotRow (worker/snapshots.py)
            while stop < total:
                change = changes[stop]
                if (
                    change.kind != kind
                    or change.table != table
                    or change.schema != schema
                    or (snapshot and getattr(change, "client_id", 0) != client_id)
                ):
                    break
                stop += 1
            if snapshot:
                subscriptions = tuple(sub for sub in match(schema, table, KIND_INSERT) if sub.client_id == client_id)
            else:
                subscriptions = match(schema, table, kind)
            runs.append((start, stop, subscriptions))
            start = stop
        return runs

    def _routing_for(
        self, changes: Sequence[Any], refresh_filters: bool
    ) -> tuple[list[tuple[int, int, tuple[Subscription, ...]]], dict[int, _Queue]]:
        """The batch's runs and the queues of the clients they go to, as the batch starts, after refreshing the
        filters if ``refresh_filters``.

        Only those clients' queues are read: clients whose filters the batch does not touch (however many) cost it
        nothing. While filters are loaded, the version check rides in that read (one statement). When it finds the
        filters changed, they are reloaded, the runs routed again and the queues read again after them: a client the
        new filters name then has its queue in the read.
        """
        if changes and len(self.index):
            runs = self._runs(changes)
            version, queues = self._read_queues(_clients_of(runs))
            if not refresh_filters or version == self.filter_version:
                return runs, queues
        if refresh_filters:
            self._log_refresh(self.refresh_filters())
        runs = self._runs(changes)
        if not changes or not len(self.index):
            return runs, {}
        return runs, self._read_queues(_clients_of(runs))[1]

    def _log_refresh(self, changed: bool) -> None:
        if changed:
            log.info("filters changed: %d filters loaded (version %s)", len(self.index), self.filter_version)

    @staticmethod
    def _read_queues(client_ids: Sequence[int]) -> tuple[int, dict[int, _Queue]]:
        """(the filter version, the queues of ``client_ids`` that still exist) in one statement."""
        if len(client_ids) <= _LISTED_CLIENTS:
            chosen, params = "c.id IN (NULL" + ", %s" * len(client_ids) + ")", list(client_ids)
        else:  # read them all rather than send thousands of parameters (a broad batch of a large installation)
            chosen, params = "1 = 1", []
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT ({filter_version_sql()}), c.id, c.acked_seq, q.last_seq, q.max_queue FROM (SELECT 1) AS one"
                f" LEFT JOIN {table(Client)} c ON {chosen} LEFT JOIN {table(QueueState)} q ON q.client_id = c.id"
                " ORDER BY c.id",
                params,
            )
            rows = cursor.fetchall()
        wanted = set(client_ids)
        queues: dict[int, _Queue] = {}
        for _version, client_id, acked_seq, last_seq, max_queue in rows:
            if client_id is None or client_id not in wanted:  # the version's row when no client is read
                continue
            if last_seq is None:  # no state yet (a client made before states were, or by hand)
                # Ignoring a conflict: an AUTH committing the client's state meanwhile must not stop the worker.
                QueueState.objects.bulk_create([QueueState(client_id=client_id)], ignore_conflicts=True)
                last_seq = max_queue = 0
            queues[client_id] = _Queue(
                acked=acked_seq, last=max(last_seq, acked_seq), max_queue=max_queue, read_acked=acked_seq
            )
        return int(rows[0][0] or 0), queues

    @staticmethod
    def _hold_clients(queues: dict[int, _Queue]) -> None:
        """Locks the clients the batch writes to (FOR KEY SHARE: a deletion of one waits for the batch's commit,
        relay.store.queues.lock_for_deletion) and drops the queues of those deleted since the batch read them: their
        entries would fail the commit on the foreign key, and the worker start over."""
        wanted = sorted(client_id for client_id, queue in queues.items() if queue.runs or queue.discarded)
        if not wanted:
            return
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {table(Client)} WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE", [wanted])
            live = {row[0] for row in cursor.fetchall()}
        for client_id in wanted:
            if client_id not in live:
                del queues[client_id]

    def _write_queues(
        self, changes: Sequence, queues: dict[int, _Queue], stored: list[int], writes: bulk.Statements
    ) -> int:
        # An entry the unqueue-oldest policy dropped within this same batch is never written, nor is a change that
        # only such entries pointed at.
        trimmed = [queue.drop_consumed() for queue in queues.values()]
        live: Sequence[int]
        if any(trimmed):
            live = sorted(
                {
                    index
                    for queue in queues.values()
                    for _, start, count in queue.runs
                    for index in range(start, start + count)
                }
            )
        else:
            live = range(len(stored))  # every stored change is in some queue
        first = bulk.allocate_ids(Change._meta.db_table, len(live)) if live else 0
        if live:
            rows = []
            for offset, index in enumerate(live):
                change = changes[stored[index]]
                rows.append(
                    (
                        first + offset,
                        change.schema,
                        change.table,
                        change.kind,
                        change.file,
                        change.pos,
                        change.row,
                        change.timestamp,
                        change.gtid,
                        rowcodec.encode(change.columns, change.before, change.after),
                    )
                )
            insert_change_rows(rows)
        if any(trimmed):
            # Some stored changes were dropped: change ids are no longer the stored index plus ``first``.
            change_id = {index: first + offset for offset, index in enumerate(live)}
            entry_rows = [
                run
                for client_id, queue in queues.items()
                for run in entry_runs(
                    client_id,
                    [
                        (seq + step, change_id[index + step])
                        for seq, index, count in queue.runs
                        for step in range(count)
                    ],
                )
            ]
        else:
            entry_rows = [
                (client_id, seq, count, first + index)
                for client_id, queue in queues.items()
                for seq, index, count in queue.runs
            ]
        bulk.insert_rows(
            QueueEntry._meta.db_table,
            ("client_id", "seq", "count", "change_id"),
            entry_rows,
            kinds="iiii",
            writes=writes,
        )
        states = [
            (client_id, queue.last, queue.discarded, queue.max_queue)
            for client_id, queue in queues.items()
            if queue.runs or queue.discarded
        ]
        writes.extend(queue_state_updates(states))
        for client_id, queue in queues.items():
            if queue.discarded:
                writes.update(
                    Client.objects.filter(id=client_id),
                    acked_seq=Greatest(F("acked_seq"), Value(queue.acked)),
                    delivered_seq=Greatest(F("delivered_seq"), Value(queue.acked)),
                )
        return sum(run[2] for run in entry_rows)

    # -- statistics and schema ------------------------------------------------------------------------------------

    def _count_events(self, transactions: Sequence[Transaction], writes: bulk.Statements) -> None:
        counts: Counter[int] = Counter()
        for tx in transactions:
            counts.update(tx.event_counts)
        if not counts:
            return
        events = table(EventCount)
        writes.extend(
            bulk.upsert_statements(
                f"INSERT INTO {events} (source, event_type, count) VALUES",
                [(self.source, event_type, count) for event_type, count in sorted(counts.items())],
                conflict=f"ON CONFLICT (source, event_type) DO UPDATE SET count = {events}.count + excluded.count",
            )
        )

    def _record_layouts(self, changes: Sequence) -> None:
        seen: dict[tuple[str, str], tuple[TableInfo, int]] = {}
        last_info: TableInfo | None = None
        for change in changes:
            info = change.table_info
            if (
                info is last_info or change.kind in SNAPSHOT_KINDS
            ):  # rows of one event share their TableInfo: skip the signature then
                continue
            last_info = info
            key = (info.schema, info.table)
            signature = hash(
                tuple((c.name, c.type_name, c.type_code, c.unsigned, c.enum_values, c.set_values) for c in info.columns)
            )
            if self._recorded_layouts.get(key) != signature:
                seen[key] = (info, signature)
        for key, (info, signature) in seen.items():
            record_table(info)
            self._recorded_layouts[key] = signature


def _from_source(tx: Transaction) -> bool:
    """A transaction read from the binlog (not a snapshot's chunk placed in the batch), with something in it."""
    if tx.partial or not (tx.changes or tx.statements):
        return False
    return not tx.changes or tx.changes[0].kind not in SNAPSHOT_KINDS


CHANGE_COLUMNS = (
    "id",
    "schema_name",
    "table_name",
    "kind",
    "binlog_file",
    "binlog_pos",
    "row_index",
    "timestamp",
    "gtid",
    "data",
)


def _clients_of(runs: Sequence[tuple[int, int, tuple[Subscription, ...]]]) -> list[int]:
    return sorted({sub.client_id for _, _, subscriptions in runs for sub in subscriptions})


def insert_change_rows(rows: Sequence[tuple]) -> None:
    """Writes change rows given in CHANGE_COLUMNS order (ids allocated with bulk.allocate_ids).

    By COPY even when they are few: a multi-row INSERT of their records, bound and parsed as SQL text, costs more
    than COPY's own round trip, from 10 rows on (bench/apply.py's batches)."""
    bulk.insert_rows(Change._meta.db_table, CHANGE_COLUMNS, rows, kinds="issisiiiss")


def queue_state_updates(states: Sequence[tuple[int, int, int, int]]) -> list[tuple[str, list[int]]]:
    """(client, last seq, newly discarded, max queue) into each client's QueueState: on PostgreSQL one statement for
    them all; on SQLite, in process, one per client."""
    if not states:
        return []
    queue_states = table(QueueState)
    if connection.vendor == "postgresql":
        values = ", ".join("(%s, %s, %s, %s)" for _ in states)
        return [
            (
                f"UPDATE {queue_states} AS q SET last_seq = v.last_seq, discarded = q.discarded + v.discarded,"
                f" max_queue = v.max_queue FROM (VALUES {values}) AS v(client_id, last_seq, discarded, max_queue)"
                " WHERE q.client_id = v.client_id",
                [value for state in sorted(states) for value in state],
            )
        ]
    return [
        (
            f"UPDATE {queue_states} SET last_seq = %s, discarded = discarded + %s, max_queue = %s WHERE client_id = %s",
            [last, discarded, max_queue, client_id],
        )
        for client_id, last, discarded, max_queue in states
    ]


def checkpoint_upsert(source: str, position: Position, file_started: int = 0) -> tuple[str, list[Any]]:
    """The statement that sets the source's checkpoint, in the caller's transaction, whether or not its row exists.
    ``file_started``: when the source began the position's file (Checkpoint.binlog_file_started), 0 if not known."""
    checkpoints = table(Checkpoint)
    return (
        f"INSERT INTO {checkpoints} (source, binlog_file, binlog_pos, gtid, binlog_file_started, updated)"
        " VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (source) DO UPDATE SET binlog_file = excluded.binlog_file, binlog_pos = excluded.binlog_pos,"
        " gtid = excluded.gtid, binlog_file_started = excluded.binlog_file_started, updated = excluded.updated",
        [
            source,
            position.file,
            position.pos,
            position.gtid,
            file_started,
            connection.ops.adapt_datetimefield_value(timezone.now()),
        ],
    )


def write_checkpoint(source: str, position: Position) -> None:
    """The source's checkpoint, now, in the caller's transaction (a position chosen, in a file not read yet)."""
    with connection.cursor() as cursor:
        cursor.execute(*checkpoint_upsert(source, position))


def entry_runs(client_id: int, entries: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(client, first seq, count, first change) rows for a client's new (seq, change id) entries, in order.

    Consecutive entries whose seq and change id both go up by one share a row (see QueueEntry).
    """
    runs: list[tuple[int, int, int, int]] = []
    if not entries:
        return runs
    first_seq, first_change = entries[0]
    count = 1
    for seq, change_id in entries[1:]:
        if seq == first_seq + count and change_id == first_change + count and count < MAX_RUN:
            count += 1
        else:
            runs.append((client_id, first_seq, count, first_change))
            first_seq, first_change, count = seq, change_id, 1
    runs.append((client_id, first_seq, count, first_change))
    return runs


def column_type_text(column: ColumnInfo, limit: int = 255) -> str:
    """The column's type for the schema page: ENUM and SET with their labels, as MySQL writes them (``enum('a','b')``),
    cut to ``limit`` characters with a visible mark when the labels are too long."""
    labels = column.enum_values or column.set_values
    name = column.type_name or ""
    if labels:
        quoted = ",".join("'" + label.replace("'", "''") + "'" for label in labels)
        name = f"{name}({quoted})"
    return name if len(name) <= limit else name[: limit - 2] + "…)"


def record_table(info: TableInfo) -> None:
    """Keeps the schema page's view of a table: its latest columns and types."""
    table, _ = SchemaTable.objects.update_or_create(
        schema_name=info.schema,
        table_name=info.table,
        defaults={"primary_key": ",".join(info.primary_key)[:1000]},
    )
    columns = [
        SchemaColumn(
            table=table,
            ordinal=ordinal,
            name=column.name,
            type_name=column_type_text(column),
            type_code=column.type_code,
            unsigned=bool(column.unsigned),
            nullable=bool(column.nullable),
            charset=(column.charset or "")[:64] if isinstance(column.charset, str) else str(column.charset or ""),
        )
        for ordinal, column in enumerate(info.columns, start=1)
    ]
    existing = list(table.columns.values_list("ordinal", "name", "type_name", "type_code", "unsigned"))
    wanted = [(c.ordinal, c.name, c.type_name, c.type_code, c.unsigned) for c in columns]
    if existing != wanted:
        table.columns.all().delete()
        SchemaColumn.objects.bulk_create(columns)
