"""Snapshots in the worker: a table's current rows, read a chunk at a time and queued where the stream makes them exact.

One snapshot runs at a time (clients take turns: relay.store.snapshots.next_snapshot). A thread reads its next chunk
from the source (binlog/snapshot.py) while the main thread goes on applying the stream; the main thread queues the
chunk in the batch that reaches the chunk's point of the stream, placed between the transactions before that point
and those after it, and writes the snapshot's progress (its last key) in that same store transaction, with the
checkpoint. So the client's queue holds, in order: every change up to the point, then the chunk's rows as they were
at that point, then the changes after it. Applied in order (rows as upserts, deletes as deletes), the client's copy
equals the table. A worker killed at any instant resumes at the checkpoint, and the snapshot after its stored last
key.

The chunk's point is (binlog/snapshot.py):

* the consistent snapshot's binlog position: queued after the last transaction ending at or before it, without the
  rows whose keys an XA COMMIT touched since the previous chunk was queued (MariaDB writes an XA COMMIT to the binlog
  before the engine commits it, so a snapshot taken in between reports a position past the XA COMMIT but reads the
  rows as they were before it; the XA COMMIT, queued before the chunk, carries the newer image or the delete);
* or the high watermark's transaction: queued right after it, without the rows whose keys a change between the two
  watermarks touched (that change, queued before, carries the newer image or the delete), nor those of an XA COMMIT
  since the previous chunk (for the same reason as above).

A DDL on the table: the reader reports it (binlog.snapshot.TableChanged) instead of a chunk in the old layout; the
chunk is read again in the new one, which the stream's own changes have from the DDL on, or the snapshot fails with
the reason when it cannot go on exactly. A cancel: the UPDATE that counts a chunk, in the batch's transaction, checks
the snapshot is still active, so a cancelled snapshot's chunk is never queued and the end marker counts what was.

A chunk is read only after the previous one was queued, and no sooner than the rate limit allows, so at most one
chunk is held in memory and a snapshot never takes more of the worker than its settings give it. While the stream is
live, chunks are sized so that writing one takes about 15 ms: a live row waits for the chunk written in its batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pymysql
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from binlog.changes import NOT_PRESENT, RowChange, Transaction
from binlog.constants import KIND_INSERT, KIND_SNAPSHOT_END, KIND_SNAPSHOT_ROW, KIND_SNAPSHOT_START
from binlog.ddl import DdlError, tokenize
from binlog.parser import changes_rows_as_statement
from binlog.position import Position
from binlog.snapshot import (
    CONSISTENT,
    WATERMARK,
    Chunk,
    ChunkReader,
    SignalTable,
    SnapshotError,
    TableChanged,
    TablePlan,
    decode_key,
    encode_key,
    new_mark,
)
from binlog.table import TableInfo
from relay.config import SnapshotConfig
from relay.models import Snapshot
from relay.store.snapshots import next_snapshot

log = logging.getLogger("relay.worker")

#: How often the store is asked for new, cancelled or resumed snapshots.
CHECK_SECONDS = 0.5
#: The longest the stream waits for a chunk it has reached (the read of one chunk: milliseconds, normally).
CHUNK_WAIT_SECONDS = 15.0
#: While the stream is live, a chunk is sized to be written in about this long (a live row may wait that much).
LIVE_CHUNK_SECONDS = 0.015
MIN_CHUNK_ROWS = 50
#: After a source error, the next chunk read waits this long.
RETRY_SECONDS = 2.0
#: MySQL client errors that a later attempt can get past (the source or the network went away; 1412: the table was
#: rebuilt, in the same layout, after the consistent snapshot began: the next read sees the rebuilt table).
_TRANSIENT_ERRORS = frozenset({2003, 2006, 2013, 2055, 1205, 1213, 1412})


class SnapshotRow(RowChange):
    """A row of a snapshot (or one of its markers), routed to the one client that asked for it."""

    __slots__ = ("client_id", "snapshot_id")

    def __init__(self, client_id: int, snapshot_id: int, *args: Any) -> None:
        super().__init__(*args)
        self.client_id = client_id
        self.snapshot_id = snapshot_id


@dataclass
class _Job:
    """The snapshot being read."""

    snapshot_id: int
    client_id: int
    schema: str
    table: str
    where: str
    last_key: tuple[object, ...] | None
    first: bool  # nothing queued yet: the next chunk carries the start marker
    plan: TablePlan | None = None
    pending: Future[Any] | None = None  # the plan, then each chunk, read by the thread
    marks: tuple[str, str] = ("", "")  # watermarks of the chunk being read
    window: set[tuple[object, ...]] | None = None  # keys changed since the low watermark was seen
    # Keys of the window's or the XA COMMITs' changes whose newer image is partial (binlog_row_image MINIMAL or
    # NOBLOB in the session that wrote them): a chunk leaving such a row out would leave the client a partial row.
    partial: set[tuple[object, ...]] = field(default_factory=set)
    not_before: float = 0.0  # the rate limit's next read
    # The rate limit as a rate: rows read since ``paced_from`` may not pass RowsPerSecond times the time since.
    paced_from: float = 0.0
    paced_rows: int = 0
    # Consistent snapshot: the position of the chunk being read, known (from the reader thread) before its rows.
    point: Position | None = None
    point_known: threading.Event = field(default_factory=threading.Event)
    info: TableInfo | None = None
    estimate: int | None = None
    # record() found the snapshot cancelled (or gone) when its chunk came to be queued, and queued no more of it.
    withdrawn: bool = False
    # Consistent snapshot: the table's rows of the XA COMMITs the stream passed since the last chunk was queued
    # (SnapshotCoordinator._note_xa_commits).
    xa_rows: list[RowChange] = field(default_factory=list)


@dataclass
class _Placed:
    """A chunk put into a batch: the store progress written with it."""

    job: _Job
    rows: int
    last_key: tuple[object, ...] | None
    done: bool
    # The very list of the batch transaction's changes that queues the chunk: record() rewrites it, in the batch's
    # store transaction, when the snapshot turns out to be cancelled.
    changes: list[RowChange] = field(default_factory=list)
    failure: str = ""  # the snapshot failed: its state and error, written with its end marker
    at: Position | None = None  # the point of the stream the chunk is queued at


def _position_key(position: Position) -> tuple[int, str, int]:
    """Binlog positions in stream order: the file's sequence number, then the offset."""
    stem, _, number = position.file.rpartition(".")
    return (int(number), stem, position.pos) if number.isdigit() else (0, position.file, position.pos)


class SnapshotCoordinator:
    def __init__(
        self, connect_args: dict[str, Any], settings: SnapshotConfig, server_version: Callable[[], str]
    ) -> None:
        self.settings = settings
        self._connect_args = connect_args
        self._server_version = server_version  # of the stream's source; "" until it connected
        self.method = settings.method
        self.signal: SignalTable | None = None
        self.reader: ChunkReader | None = None
        self._threads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-reader")
        self._job: _Job | None = None
        self._checked = 0.0
        self._finishing: list[tuple[_Job, str, str]] = []  # (job, state, error): end markers to queue
        self._inflight: Future[Any] | None = None  # the reader thread's current task
        self._chunk_rows = settings.chunk_rows  # the next chunk's size: smaller while the stream is live

    @property
    def busy(self) -> bool:
        """A snapshot is under way: the worker looks at it more often than an idle stream needs."""
        return self._job is not None or bool(self._finishing)

    @property
    def reading(self) -> bool:
        """A chunk is being read or waits to be queued: the worker looks for it every few milliseconds, so an idle
        stream does not slow a snapshot down."""
        job = self._job
        return job is not None and job.pending is not None

    def _ready_reader(self) -> ChunkReader | None:
        """The chunk reader, once the method is known (``auto`` needs the source's version)."""
        if self.reader is None:
            method = self.method
            if method == "auto":
                version = self._server_version()
                if not version:
                    return None
                method = CONSISTENT if "mariadb" in version.lower() else WATERMARK
            self.method = method
            self.signal = SignalTable.parse(self.settings.signal_table) if method == WATERMARK else None
            self.reader = ChunkReader(self._connect_args, method, self.signal)
        return self.reader

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self.reader is not None:
            self.reader.close()

    # -- the store's side: what to do next --------------------------------------------------------------------------

    def tick(self) -> None:
        """Between batches: picks up, cancels and advances snapshots (reads run in the thread)."""
        now = time.monotonic()
        if self._ready_reader() is None:
            return
        if now - self._checked >= CHECK_SECONDS:
            self._checked = now
            self._check_store()
        job = self._job
        if job is not None and job.withdrawn:
            log.info("snapshot #%s: cancelled; stopping it", job.snapshot_id)
            self._job = job = None
        if job is None:
            return
        if job.pending is not None and job.pending.done() and job.plan is None:
            self._planned(job)
        elif job.pending is None and job.plan is not None and now >= job.not_before and self._thread_free():
            low, high = (new_mark("low"), new_mark("high")) if self.method == WATERMARK else ("", "")
            job.marks, job.window = (low, high), None
            job.point = None
            job.point_known = threading.Event()
            known = job.point_known

            def found(position: Position, job: _Job = job) -> None:
                job.point = position
                known.set()

            assert self.reader is not None
            job.pending = self._inflight = self._threads.submit(
                self.reader.read, job.plan, job.last_key, self._chunk_rows, job.where, (low, high), found
            )
            # A read that ends without a position (it failed first: the table changed, the source went away) must
            # not leave the stream waiting for one.
            job.pending.add_done_callback(lambda _: known.set())

    def _thread_free(self) -> bool:
        """No read given up on is still running: a new one would only queue behind it, and the stream would wait
        for a position that cannot come before it."""
        return self._inflight is None or self._inflight.done()

    def _check_store(self) -> None:
        job = self._job
        if job is not None:
            state = Snapshot.objects.filter(id=job.snapshot_id).values_list("state", flat=True).first()
            if state not in Snapshot.ACTIVE:  # cancelled (or deleted with its client) meanwhile
                log.info("snapshot #%s: %s; stopping it", job.snapshot_id, state or "deleted")
                # A chunk record() withdrew queued the end marker itself, in the transaction that found the cancel.
                if state == Snapshot.State.CANCELLED and not job.first and not job.withdrawn:
                    self._finishing.append((job, "cancelled", ""))
                self._job = None
            return
        # A snapshot whose end marker waits for the next batch is still active in the store until that batch
        # commits: picked again now, it would fail (or end) a second time, with a second end marker.
        snapshot = next_snapshot([ended.snapshot_id for ended, _, _ in self._finishing])
        if snapshot is None:
            return
        self._job = _Job(
            snapshot.id,
            snapshot.client_id,
            snapshot.schema_name,
            snapshot.table_name,
            snapshot.where,
            decode_key(snapshot.last_key),
            first=snapshot.chunks_done == 0,
        )
        if not self._thread_free():
            self._job = None  # picked up again once the thread is free
            return
        assert self.reader is not None
        self._job.pending = self._inflight = self._threads.submit(
            self.reader.plan, snapshot.schema_name, snapshot.table_name
        )
        log.info(
            "snapshot #%s of %s.%s for client #%s: %s (%s)",
            snapshot.id,
            snapshot.schema_name,
            snapshot.table_name,
            snapshot.client_id,
            "resuming after its last key" if snapshot.last_key else "starting",
            self.method,
        )

    def _planned(self, job: _Job) -> None:
        assert job.pending is not None
        future, job.pending = job.pending, None
        error = future.exception()
        if error is not None:
            self._read_failed(job, error)
            return
        plan: TablePlan = future.result()
        if not job.first:
            # Resumed (a worker restart): the chunks queued were bounded in the stored key's order; a table whose key
            # changed while no worker ran cannot be continued in another's.
            stored = Snapshot.objects.filter(id=job.snapshot_id).values_list("key_columns", flat=True).first()
            old = decode_key(stored or "")
            if old is not None and tuple(old) != plan.key:
                self._read_failed(
                    job,
                    TableChanged(
                        f"{job.schema}.{job.table} changed during the snapshot (its chunk key "
                        f"({', '.join(map(str, old))}) is now ({', '.join(plan.key)})), so the chunks read cannot be "
                        "continued exactly; ask for it again",
                        None,
                    ),
                )
                return
        self._use_plan(job, plan)
        # Started when its reading starts (the rate shown is rows over the time since then).
        now = timezone.now()
        Snapshot.objects.filter(id=job.snapshot_id, state__in=Snapshot.ACTIVE).update(
            state=Snapshot.State.RUNNING,
            started=Coalesce(F("started"), Value(now)),
            updated=now,
            **({"rows_total": plan.estimated_rows, "key_columns": encode_key(plan.key)} if job.first else {}),
        )

    @staticmethod
    def _use_plan(job: _Job, plan: TablePlan) -> None:
        job.plan = plan
        job.info = TableInfo(plan.schema, plan.table, (), primary_key=plan.key)

    def _read_failed(self, job: _Job, error: BaseException) -> None:
        if isinstance(error, TableChanged) and error.plan is not None:
            # A DDL on the table: the chunk read is dropped and read again in the table's new layout, the one the
            # stream has from the DDL on (the reader checked that the key did not change). The rows queued before
            # are exact at their points; the DDL reaches the client through the stream, as for any copy it holds.
            log.warning("snapshot #%s: %s", job.snapshot_id, error)
            self._use_plan(job, error.plan)
            return
        code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else None
        if isinstance(error, OSError | pymysql.err.OperationalError | pymysql.err.InterfaceError) and (
            code is None or code in _TRANSIENT_ERRORS
        ):
            log.warning("snapshot #%s: reading the source failed (%s); retrying", job.snapshot_id, error)
            job.not_before = time.monotonic() + RETRY_SECONDS
            if job.plan is None:
                self._job = None  # planned again after the delay
                self._checked = job.not_before
            return
        message = str(error) if isinstance(error, SnapshotError) else f"reading the table failed: {error}"
        if code in (1044, 1142) and self.signal is not None:
            message += (
                f"; the watermark method writes its marks to {self.signal.schema}.{self.signal.table}: grant the "
                f"[MySQL] user CREATE, INSERT and DELETE on {self.signal.schema}, and SELECT on the table"
            )
        log.error("snapshot #%s of %s.%s failed: %s", job.snapshot_id, job.schema, job.table, message)
        # The state is written with the end marker, in the transaction that queues it.
        self._finishing.append((job, "failed", message))
        self._job = None

    # -- the stream's side: where a chunk goes ----------------------------------------------------------------------

    def arrange(self, batch: Sequence[Transaction], applied: Position) -> tuple[list[Transaction], list[_Placed]]:
        """The batch with the snapshot transactions due in it put in their places, and what they placed.

        ``applied``: the position the store's checkpoint is at (everything before the batch). An empty ``batch``
        asks what is due while the stream is idle.
        """
        out: list[Transaction] = []
        placed: list[_Placed] = []
        for ended, state, error in self._finishing:
            done = Snapshot.objects.filter(id=ended.snapshot_id).values_list("rows_done", flat=True).first()
            # Each end marker in a transaction of its own: record() may take a failure's marker back.
            changes: list[RowChange] = [self._end_marker(ended, applied, done or 0, state, error)]
            if state == "failed":
                placed.append(_Placed(ended, 0, ended.last_key, False, changes, failure=error, at=applied))
            out.append(Transaction(changes, applied))
        self._finishing.clear()
        job = self._job
        statement = self._rows_changed_as_statement(job, batch)
        if job is not None and statement:
            # Its rows' changes are not in the binlog: the rows queued so far cannot be kept exact.
            self._drop_read(job)
            self._read_failed(
                job,
                TableChanged(
                    f"{job.schema}.{job.table} changed during the snapshot by a statement the binlog holds instead of "
                    f"its row changes ({statement[:200]!r}), so the copy cannot be kept exact; ask for it again",
                    None,
                ),
            )
            job = None
        reading = job is not None and job.plan is not None and job.pending is not None and not job.pending.done()
        if self.method == CONSISTENT and reading:
            # A chunk is being read: its position may come before some of this batch (a transaction is in the
            # binlog, and sent, a moment before it is visible to a new snapshot). Wait for the position (it comes
            # first, within milliseconds) so that nothing past it is applied before the chunk.
            assert job is not None
            if not job.point_known.wait(timeout=CHUNK_WAIT_SECONDS):
                self._give_up(job)
        chunk = self._ready_chunk(job)
        if job is None or job.plan is None or (self.method == CONSISTENT and job.point is None):
            self._note_xa_commits(job, batch)
            out.extend(self._without_marks(batch))
            return out, placed
        if self.method == CONSISTENT:
            assert job.point is not None
            point = _position_key(job.point)
            if _position_key(applied) > point:
                # A transaction the stream had already applied was not yet visible to the snapshot (it is in the
                # binlog a moment before its commit), or the source failed over and positions do not compare: the
                # chunk cannot be placed exactly, so it is read again.
                log.info(
                    "snapshot #%s: the stream (%s) is past the chunk's position %s; reading it again",
                    job.snapshot_id,
                    applied,
                    job.point,
                )
                self._drop_read(job)
                self._note_xa_commits(job, batch)
                out.extend(batch)
                return out, placed
            cut = 0
            while cut < len(batch) and _position_key(batch[cut].position) <= point:
                cut += 1
            reached = batch[cut - 1].position if cut else applied
            if cut < len(batch) or _position_key(reached) == point:
                # The chunk belongs here: wait for its rows if they are still coming (the read of one chunk).
                chunk = chunk or self._wait_chunk(job)
                if chunk is None:  # the read failed: nothing is held back, the chunk is read again
                    self._note_xa_commits(job, batch)
                    out.extend(batch)
                    return out, placed
                # An XA COMMIT at or before the point may not be visible to the snapshot yet: its rows are left out
                # of the chunk (the XA COMMIT, queued before it, holds their newer image or their delete).
                self._note_xa_commits(job, batch[:cut])
                committed = self._xa_keys(job)
                job.xa_rows = []
                out.extend(batch[:cut])
                if self._placeable(job, chunk):
                    out.append(self._place(job, chunk, reached, committed, placed))
                    self._note_xa_commits(job, batch[cut:])
                out.extend(batch[cut:])
            else:
                self._note_xa_commits(job, batch)
                out.extend(batch)
            return out, placed
        # Watermarks: the chunk goes right after the transaction that holds its high mark.
        for tx in batch:
            high = self.observe(tx)
            self._note_xa_commits(job, [tx])
            out.extend(self._without_marks([tx]))
            if high:
                chunk = self._wait_chunk(job)
                if chunk is None:
                    continue
                # An XA COMMIT before the low mark may have been invisible to the chunk's read all the same.
                changed = (job.window or set()) | self._xa_keys(job)
                job.xa_rows = []
                if self._placeable(job, chunk):
                    out.append(self._place(job, chunk, tx.position, changed, placed))
                job.window = None
        return out, placed

    @staticmethod
    def _rows_changed_as_statement(job: _Job | None, batch: Sequence[Transaction]) -> str:
        """A statement in ``batch`` that changed rows and may have changed the job's table (TRUNCATE, or a session's
        binlog_format STATEMENT: the binlog holds it instead of its row changes), or ""."""
        if job is None:
            return ""
        for tx in batch:
            for query in tx.statements:
                if not changes_rows_as_statement(query):
                    continue
                try:
                    names = {token.text for token in tokenize(query[:65536]) if token.kind in ("word", "name")}
                except DdlError:  # cut inside a quoted text: taken as naming it if its text holds the name at all
                    names = {job.table} if job.table in query else set()
                if job.table in names:
                    return query
        return ""

    def _note_xa_commits(self, job: _Job | None, batch: Sequence[Transaction]) -> None:
        """Keeps the job's table's rows of each XA COMMIT in ``batch`` until the next chunk is queued. MariaDB
        completes an XA COMMIT in the binlog first and in the engine after it (ha_commit_or_rollback_by_xid),
        outside the commit order that START TRANSACTION WITH CONSISTENT SNAPSHOT reads its position under: a
        snapshot taken in between reports a position at or past the XA COMMIT, and reads the rows as they were
        before it; a watermark chunk's read, after a low mark the XA COMMIT precedes, may not see it either."""
        if job is None:
            return
        for tx in batch:
            if tx.xa == "commit":
                job.xa_rows.extend(c for c in tx.changes if c.table == job.table and c.schema == job.schema)

    @staticmethod
    def _xa_keys(job: _Job) -> set[tuple[object, ...]]:
        """The keys (before and after images) of the rows in ``job.xa_rows``."""
        keys: set[tuple[object, ...]] = set()
        key = job.plan.key if job.plan else ()
        for change in job.xa_rows:
            indexes = _key_indexes(change.columns, key)
            if indexes is None:
                continue
            for image in (change.before, change.after):
                if image is not None:
                    keys.add(tuple(image[i] for i in indexes))
            if change.after is not None and NOT_PRESENT in change.after:
                job.partial.update(_keys(change, indexes))
        return keys

    def _placeable(self, job: _Job, chunk: Chunk) -> bool:
        """False, and the snapshot failed with the reason, when a row the chunk leaves out (a newer image of it is
        queued before) has only a partial newer image: the client's copy of it could not be whole."""
        partial, job.partial = job.partial, set()
        doomed = next((key for key in chunk.keys if key in partial), None)
        if doomed is None:
            return True
        self._drop_read(job)
        self._read_failed(
            job,
            SnapshotError(
                f"a change of {job.schema}.{job.table} (key {', '.join(map(str, doomed))}) during the snapshot has a "
                "partial row image (binlog_row_image MINIMAL or NOBLOB in the session that wrote it): the snapshot "
                "cannot give that row whole; set binlog_row_image=FULL, then ask for it again"
            ),
        )
        return False

    def _without_marks(self, batch: Sequence[Transaction]) -> list[Transaction]:
        """The batch without the signal table's rows: the relay's own marks are no client's business."""
        signal = self.signal
        if signal is None:
            return list(batch)
        out = []
        for tx in batch:
            if any(c.table == signal.table and c.schema == signal.schema for c in tx.changes):
                kept = [c for c in tx.changes if not (c.table == signal.table and c.schema == signal.schema)]
                tx = dataclasses.replace(tx, changes=kept)
            out.append(tx)
        return out

    def observe(self, tx: Transaction) -> bool:
        """Follows the watermark window through ``tx`` (parts of a large transaction too); True when ``tx`` holds the
        current chunk's high mark."""
        job = self._job
        if job is None or self.method != WATERMARK or not job.marks[0] or self.signal is None:
            return False
        signal = self.signal
        low, high = job.marks
        indexes = None
        found_high = False
        for change in tx.changes:
            if change.schema == signal.schema and change.table == signal.table:
                if change.kind == KIND_INSERT and change.after is not None:
                    if low in change.after:
                        job.window = set()
                    elif high in change.after and job.window is not None:
                        found_high = True
                continue
            if job.window is None or change.schema != job.schema or change.table != job.table:
                continue
            if indexes is None:
                indexes = _key_indexes(change.columns, job.plan.key if job.plan else ())
            if indexes is None:
                continue
            for image in (change.before, change.after):
                if image is not None:
                    job.window.add(tuple(image[i] for i in indexes))
            if change.after is not None and NOT_PRESENT in change.after:
                job.partial.update(_keys(change, indexes))
        return found_high

    def _ready_chunk(self, job: _Job | None) -> Chunk | None:
        if job is None or job.plan is None or job.pending is None or not job.pending.done():
            return None
        error = job.pending.exception()
        if error is not None:
            self._drop_read(job)
            self._read_failed(job, error)
            return None
        chunk: Chunk = job.pending.result()
        return chunk

    def _drop_read(self, job: _Job) -> None:
        """Forgets the chunk read in flight or done (its result, when it comes, is not used)."""
        job.pending = None
        job.point = None

    def _wait_chunk(self, job: _Job) -> Chunk | None:
        """The chunk the stream has reached (its position, or its high mark): its read has returned or is about to."""
        if job.pending is None:
            return None
        with contextlib.suppress(Exception):  # reported by _ready_chunk
            job.pending.result(timeout=CHUNK_WAIT_SECONDS)
        if not job.pending.done():
            self._give_up(job)
            return None
        return self._ready_chunk(job)

    def _give_up(self, job: _Job) -> None:
        """The chunk's read outlasted what the stream may wait: the stream goes on, the chunk is read again."""
        log.warning(
            "snapshot #%s: reading a chunk of %s.%s took over %ss; the stream goes on and the chunk is read again",
            job.snapshot_id,
            job.schema,
            job.table,
            CHUNK_WAIT_SECONDS,
        )
        self._drop_read(job)
        job.not_before = time.monotonic() + RETRY_SECONDS

    def _place(
        self, job: _Job, chunk: Chunk, at: Position, changed: set[tuple[object, ...]], placed: list[_Placed]
    ) -> Transaction:
        assert job.info is not None
        moment = int(time.time())
        names = chunk.plan.names
        changes: list[RowChange] = []
        if job.first:
            changes.append(
                self._marker(
                    job,
                    KIND_SNAPSHOT_START,
                    at,
                    ("snapshot", "where", "rows_estimate"),
                    (str(job.snapshot_id), job.where or None, _text_or_none(chunk.plan.estimated_rows)),
                )
            )
        rows = 0
        for row, key in zip(chunk.rows, chunk.keys, strict=True):
            if key in changed:
                continue  # a change inside the watermark window (or an XA COMMIT), queued before, holds its newer image
            changes.append(
                SnapshotRow(
                    job.client_id,
                    job.snapshot_id,
                    job.schema,
                    job.table,
                    KIND_SNAPSHOT_ROW,
                    names,
                    None,
                    row,
                    at.file,
                    at.pos,
                    rows,
                    moment,
                    "",
                    job.info,
                )
            )
            rows += 1
        last_key = chunk.last_key if chunk.last_key is not None else job.last_key
        record = _Placed(job, rows, last_key, chunk.complete, changes, at=at)
        if chunk.complete:
            changes.append(self._end_marker(job, at, -1, "done", ""))
        placed.append(record)
        # The next read starts after this chunk whatever becomes of the transaction: a batch that rolls back ends
        # the worker's run, and the next run starts from the store's last key.
        job.last_key = last_key
        job.first = False
        self._drop_read(job)
        rate = self.settings.rows_per_second
        if rate > 0:
            now = time.monotonic()
            if not job.paced_from or now - job.not_before > 1.0:  # the first chunk, or one that waited on the stream
                job.paced_from, job.paced_rows = now, 0
            job.paced_rows += len(chunk.rows)
            job.not_before = job.paced_from + job.paced_rows / rate
        if chunk.complete:
            self._job = None
        return Transaction(changes, at)

    @staticmethod
    def _marker(job: _Job, kind: int, at: Position, names: tuple[str, ...], values: tuple[object, ...]) -> RowChange:
        assert job.info is not None or kind == KIND_SNAPSHOT_END
        info = job.info or TableInfo(job.schema, job.table, ())
        return SnapshotRow(
            job.client_id,
            job.snapshot_id,
            job.schema,
            job.table,
            kind,
            names,
            None,
            values,
            at.file,
            at.pos,
            0,
            int(time.time()),
            "",
            info,
        )

    @staticmethod
    def _end_marker(job: _Job, at: Position, rows: int, state: str, error: str) -> RowChange:
        # rows < 0: the total is filled in by record(), which knows what the store counted.
        return SnapshotCoordinator._marker(
            job,
            KIND_SNAPSHOT_END,
            at,
            ("snapshot", "rows", "state", "error"),
            (str(job.snapshot_id), str(rows) if rows >= 0 else None, state, error or None),
        )

    @property
    def next_chunk_rows(self) -> int:
        return self._chunk_rows

    def applied(self, seconds: float, live: bool) -> None:
        """How long the batch that queued a chunk took, and whether it held the stream's transactions too.

        A live row that comes while a chunk is written waits for that write: while the stream is live, chunks are
        sized so that one is written in about LIVE_CHUNK_SECONDS; on a quiet stream they grow back to ChunkRows.
        """
        ceiling = self.settings.chunk_rows
        if live:
            scaled = int(self._chunk_rows * LIVE_CHUNK_SECONDS / max(seconds, 0.001))
            self._chunk_rows = max(min(scaled, 2 * self._chunk_rows, ceiling), min(MIN_CHUNK_ROWS, ceiling))
        else:
            self._chunk_rows = min(2 * self._chunk_rows, ceiling)

    # -- progress, in the batch's transaction -----------------------------------------------------------------------

    @staticmethod
    def record(placed: Sequence[_Placed]) -> None:
        """Writes each placed chunk's progress; the caller holds the batch's store transaction, and queues the chunks
        after this returns."""
        now = timezone.now()
        for item in placed:
            job = item.job
            if item.failure:
                # The end marker goes with the state it reports: a snapshot cancelled (or ended) meanwhile keeps
                # the store's state, and its marker says that or is not queued.
                if not Snapshot.objects.filter(id=job.snapshot_id, state__in=Snapshot.ACTIVE).update(
                    state=Snapshot.State.FAILED, error=item.failure[:4000], finished=now, updated=now
                ):
                    SnapshotCoordinator._withdraw(item, "its failure")
                continue
            fields: dict[str, Any] = {
                "last_key": encode_key(item.last_key) if item.last_key is not None else "",
                "rows_done": F("rows_done") + item.rows,
                "chunks_done": F("chunks_done") + 1,
                "updated": now,
                "started": Coalesce(F("started"), Value(now)),
                "state": Snapshot.State.DONE if item.done else Snapshot.State.RUNNING,
            }
            if item.done:
                fields["finished"] = now
            # The state is checked by the UPDATE that counts the chunk, which locks the snapshot's row until the
            # batch commits: a cancel committed before it finds no active row here, and one that comes after waits
            # for this transaction and then sees the chunk counted. So the rows queued are the rows counted.
            if not Snapshot.objects.filter(id=job.snapshot_id, state__in=Snapshot.ACTIVE).update(**fields):
                SnapshotCoordinator._withdraw(item, "its chunk")
                continue
            if item.done:
                total = Snapshot.objects.filter(id=job.snapshot_id).values_list("rows_done", flat=True).first()
                end = item.changes[-1] if item.changes else None
                if end is not None and end.kind == KIND_SNAPSHOT_END and end.after is not None:
                    end.after = (end.after[0], str(total or 0), *end.after[2:])
                log.info("snapshot #%s of %s.%s done: %s rows", job.snapshot_id, job.schema, job.table, total)

    @staticmethod
    def _withdraw(item: _Placed, what: str) -> None:
        """The snapshot was cancelled (or deleted with its client, or had already ended) before ``what`` (its chunk,
        or its failure's end marker) could be queued: none of it is, and a cancelled snapshot's end marker takes its
        place, with the rows queued before."""
        job = item.job
        job.withdrawn = True
        stored = Snapshot.objects.filter(id=job.snapshot_id).values_list("state", "chunks_done", "rows_done").first()
        item.changes.clear()
        if stored is None:
            log.info("snapshot #%s: deleted; %s is not queued", job.snapshot_id, what)
            return
        state, chunks_done, rows_done = stored
        log.info("snapshot #%s: %s; %s is not queued (%s rows were)", job.snapshot_id, state, what, rows_done)
        # A snapshot with nothing queued yet has no start marker to close: no end marker either (PROTOCOL.md 5.10).
        if state == Snapshot.State.CANCELLED and chunks_done and item.at is not None:
            item.changes.append(SnapshotCoordinator._end_marker(job, item.at, rows_done, "cancelled", ""))


def _keys(change: RowChange, indexes: tuple[int, ...]) -> list[tuple[object, ...]]:
    """The keys of a change's images that hold their key columns."""
    keys = [tuple(image[i] for i in indexes) for image in (change.before, change.after) if image is not None]
    return [key for key in keys if NOT_PRESENT not in key]


def _key_indexes(columns: Sequence[str], key: Sequence[str]) -> tuple[int, ...] | None:
    try:
        return tuple(columns.index(name) for name in key)
    except ValueError:  # names unknown (@1, @2...): the history could not name this table's columns
        return None


def _text_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)
