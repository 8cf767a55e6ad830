"""The binlog worker: replicate from the source and apply each committed transaction to the store, exactly once.

A reader thread runs the binlog stream and hands transactions over a bounded queue; the main thread groups them
into batches (bounded by rows and milliseconds) and applies each batch in one database transaction together with the
checkpoint. A garbage-collector thread deletes consumed entries and unreferenced changes in bounded batches.

Exit codes: 0 after SIGTERM/SIGINT (the current batch is committed first), 2 when the checkpoint's binlog has been
purged from the source (the message names the file and the flag that skips forward), 1 on any other fatal error.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from binlog import BinlogError, BinlogStream, Position, PurgedPositionError, SourceSettings, Transaction
from relay import store
from relay.config import RelayConfig
from relay.models import Checkpoint, WorkerStatus
from relay.worker import usage
from relay.worker.changelog import ChangeLog
from relay.worker.handoff import Empty, RowBoundedHandoff
from relay.worker.ingest import Ingestor
from relay.worker.leader import LeaderLock

Handoff = RowBoundedHandoff["Transaction | BaseException | None"]

log = logging.getLogger("relay.worker")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PURGED = 2


@dataclass(frozen=True)
class WorkerOptions:
    batch_rows: int = 5_000
    batch_ms: int = 100
    start: Position | None = None  # explicit --from/--from-gtid: wins over the checkpoint
    filter_check_seconds: float = 0.5
    gc_interval_seconds: float = 2.0
    max_runtime_seconds: float | None = None  # for tests and benchmarks: stop cleanly after this long
    chunk_rows: int = 5_000  # a larger binlog transaction is applied in parts, inside one store transaction


def source_key(config: RelayConfig) -> str:
    return f"{config.source.host}:{config.source.port}"


def source_settings(config: RelayConfig) -> SourceSettings:
    schema = config.schema
    return SourceSettings(
        host=config.source.host,
        port=config.source.port,
        user=config.source.user,
        password=config.source.password,
        server_id=config.source.server_id,
        heartbeat_seconds=config.source.heartbeat_seconds,
        schema_connection={"host": schema.host, "port": schema.port, "user": schema.user, "password": schema.password},
    )


class _Stop(Exception):
    pass


class _Restart(Exception):
    def __init__(self, part: Transaction) -> None:
        super().__init__("large transaction restarted")
        self.part = part


class Worker:
    def __init__(
        self,
        config: RelayConfig,
        options: WorkerOptions | None = None,
        *,
        stream_factory: Callable[..., Any] = BinlogStream,
    ) -> None:
        self.config = config
        self.options = options or WorkerOptions()
        self.source = source_key(config)
        self.stream_factory = stream_factory
        self.stop_requested = threading.Event()
        self.changelog = ChangeLog(config.logger)
        self._stream: Any = None
        self._checkpoint_at_launch: Position | None = None
        self._standby_reported = 0.0

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: object) -> None:
            log.info("signal %s: finishing the current batch, then stopping", signal.Signals(signum).name)
            self.stop_requested.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def run(self) -> int:
        lock = LeaderLock(self.source, _lock_dir(self.config))
        started = time.monotonic()
        deadline = None if self.options.max_runtime_seconds is None else started + self.options.max_runtime_seconds

        def should_stop() -> bool:
            return self.stop_requested.is_set() or (deadline is not None and time.monotonic() > deadline)

        self._checkpoint_at_launch = self._checkpoint()
        if not lock.acquire(should_stop, self._report_standby):
            self._clear_standby()
            return EXIT_OK
        try:
            return self._run_active(should_stop, lock)
        finally:
            lock.release()

    def _report_standby(self) -> None:
        """Logs once, then keeps the standby visible on the dashboard (its heartbeat every few seconds)."""
        now = time.monotonic()
        if now - self._standby_reported < 5:
            return
        if not self._standby_reported:
            log.info("standby: another worker is active for %s", self.source)
        self._standby_reported = now
        status, _ = WorkerStatus.objects.get_or_create(source=self.source)
        WorkerStatus.objects.filter(id=status.id).update(
            standby_pid=os.getpid(), standby_hostname=socket.gethostname(), standby_heartbeat=timezone.now()
        )

    def _clear_standby(self) -> None:
        if self._standby_reported:
            WorkerStatus.objects.filter(source=self.source, standby_pid=os.getpid()).update(
                standby_pid=None, standby_hostname="", standby_heartbeat=None
            )

    def _run_active(self, should_stop: Callable[[], bool], lock: LeaderLock) -> int:
        log.info("active worker for %s (pid %s)", self.source, os.getpid())
        self._clear_standby()
        self._set_status(
            WorkerStatus.State.STARTING,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            started=timezone.now(),
            rows_since_start=0,
        )
        usage.reset_since_start()
        start = self._start_position()
        log.info("starting at %s", start if start else "the source's current position")
        ingestor = Ingestor(self.source)
        self._stream = self.stream_factory(source_settings(self.config), start, chunk_rows=self.options.chunk_rows)
        handoff: Handoff = RowBoundedHandoff(max_rows=max(4 * self.options.chunk_rows, self.options.batch_rows))
        reader = threading.Thread(target=self._read, args=(handoff,), name="binlog-reader", daemon=True)
        reader.start()
        collector = _GarbageCollector(self.options.gc_interval_seconds)
        collector.start()
        try:
            self._set_status(WorkerStatus.State.CONNECTED)
            self._consume(handoff, ingestor, should_stop, lock)
        except PurgedPositionError as exc:
            message = (
                f"{exc}. The changes between the checkpoint and the oldest binlog the source still has are lost "
                f"to this relay; to skip forward explicitly, restart with --from FILE:POS (for example the "
                f"source's oldest binlog, see SHOW BINARY LOGS) or --from-gtid."
            )
            log.error("%s", message)
            self._set_status(WorkerStatus.State.FAILED, last_error=message, last_error_at=timezone.now())
            return EXIT_PURGED
        except BinlogError as exc:
            log.error("binlog stream failed: %s", exc)
            self._set_status(WorkerStatus.State.FAILED, last_error=str(exc), last_error_at=timezone.now())
            return EXIT_FAILED
        finally:
            collector.stop()
            self._stream.close()
        self._set_status(WorkerStatus.State.STOPPED)
        log.info("stopped cleanly")
        return EXIT_OK

    def _checkpoint(self) -> Position | None:
        checkpoint = Checkpoint.objects.filter(source=self.source).first()
        if checkpoint is None:
            return None
        return Position(checkpoint.binlog_file, checkpoint.binlog_pos, checkpoint.gtid)

    def _start_position(self) -> Position | None:
        checkpoint = self._checkpoint()
        if self.options.start is not None:
            if checkpoint == self._checkpoint_at_launch:
                return self.options.start
            # Another worker moved the checkpoint while this one waited as a standby: --from was meant for the
            # store as it was at launch, and applying it now would replay or skip what that worker did.
            log.warning("the checkpoint moved while on standby (now %s); ignoring --from", checkpoint)
        if checkpoint is not None:
            return checkpoint
        if self.config.source.start_from:
            file, pos = self.config.source.start_from
            return Position(file, pos)
        if self.config.source.start_gtid:
            return Position("", 4, self.config.source.start_gtid)
        return None

    # -- reading and applying -------------------------------------------------------------------------------------

    def _read(self, handoff: Handoff) -> None:
        try:
            for tx in self._stream:
                # Buffered from here on: after a reconnect the stream resumes after it, not at its first start.
                self._stream.confirm(tx.position)
                while not handoff.put(tx, len(tx.changes), timeout=0.5):
                    if self.stop_requested.is_set():
                        return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which decides
            handoff.put(exc, 0, timeout=3600)
            return
        handoff.put(None, 0, timeout=3600)

    def _items(self, handoff: Handoff, timeout: float) -> Iterator[Transaction | None]:
        """Transactions as they come; None when ``timeout`` passes without one."""
        try:
            item = handoff.get(timeout=timeout)
        except Empty:
            yield None
            return
        if isinstance(item, BaseException):
            raise item
        if item is None:
            raise _Stop
        yield item

    def _consume(
        self,
        handoff: Handoff,
        ingestor: Ingestor,
        should_stop: Callable[[], bool],
        lock: LeaderLock,
    ) -> None:
        pending: list[Transaction] = []
        pending_rows = 0
        first_at = 0.0
        last_filter_check = 0.0
        signature = store.filters_signature()
        batch_seconds = self.options.batch_ms / 1000
        try:
            while True:
                now = time.monotonic()
                if now - last_filter_check >= self.options.filter_check_seconds:
                    last_filter_check = now
                    current = store.filters_signature()
                    if current != signature:
                        if pending:  # the new filters apply from the next batch on, in binlog order
                            self._flush(ingestor, pending)
                            pending, pending_rows = [], 0
                        signature = current
                        ingestor.reload_filters()
                        log.info("filters changed: %d filters loaded", len(ingestor.index))
                if should_stop():
                    break
                wait = batch_seconds - (now - first_at) if pending else 0.25
                for tx in self._items(handoff, max(wait, 0.001)):
                    if tx is None:
                        break
                    if tx.partial:
                        if pending:
                            self._flush(ingestor, pending)
                            pending, pending_rows = [], 0
                        self._apply_large(ingestor, tx, handoff)
                        break
                    if not pending:
                        first_at = time.monotonic()
                    pending.append(tx)
                    pending_rows += len(tx.changes)
                # Group commit: a batch ends when the reader has nothing more right now (low latency when the
                # source is quiet), or at batch_rows / batch_ms (large batches when it is busy).
                if pending and (
                    pending_rows >= self.options.batch_rows
                    or handoff.empty()
                    or time.monotonic() - first_at >= batch_seconds
                ):
                    if not lock.still_held():
                        raise BinlogError("lost the worker lock (store connection gone); stopping")
                    self._flush(ingestor, pending)
                    pending, pending_rows = [], 0
        except _Stop:
            pass
        if pending:
            self._flush(ingestor, pending)

    def _next_part(self, handoff: Handoff) -> Transaction:
        while True:
            try:
                item = handoff.get(timeout=0.5)
            except Empty:
                if self.stop_requested.is_set():
                    raise _Stop from None  # the open store transaction rolls back; the checkpoint is before it
                continue
            if isinstance(item, BaseException):
                raise item
            if item is None:
                raise _Stop
            return item

    def _apply_large(self, ingestor: Ingestor, first: Transaction, handoff: Handoff) -> None:
        """A transaction that comes in parts: all of them in one store transaction, committed with the last."""
        part = first
        while True:
            try:
                rows = 0
                with transaction.atomic():
                    while True:
                        ingestor.apply([part], checkpoint=not part.partial)
                        self.changelog.write([part])
                        rows += len(part.changes)
                        if not part.partial:
                            break
                        part = self._next_part(handoff)
                        if part.part == 0:  # the stream reconnected and starts this transaction again
                            raise _Restart(part)
                log.info("applied a transaction of %d rows in parts", rows)
                self._report(part)
                return
            except _Restart as restart:
                log.warning("the source connection broke inside a large transaction; applying it again")
                part = restart.part

    def _flush(self, ingestor: Ingestor, batch: list[Transaction]) -> None:
        with transaction.atomic():
            ingestor.apply(batch)
            self._report(batch[-1])  # in the batch's transaction: one commit (one WAL flush) per batch
        self.changelog.write(batch)

    def _report(self, last: Transaction) -> None:
        stream = self._stream
        position = last.position
        WorkerStatus.objects.filter(source=self.source).update(
            state=WorkerStatus.State.CONNECTED,
            lag_seconds=getattr(stream, "lag_seconds", None),
            reconnects=getattr(stream, "reconnects", 0),
            source_file=position.file,
            source_pos=position.pos,
        )

    def _set_status(self, state: str, **fields: Any) -> None:
        WorkerStatus.objects.update_or_create(source=self.source, defaults={"state": state, **fields})


def _lock_dir(config: RelayConfig) -> Path:
    if connection.vendor == "sqlite":
        return Path(connection.settings_dict["NAME"]).resolve().parent
    return config.data_dir


class _GarbageCollector(threading.Thread):
    """Deletes consumed queue entries and unreferenced changes, in bounded batches, off the hot path."""

    def __init__(self, interval: float) -> None:
        super().__init__(name="store-gc", daemon=True)
        self.interval = interval
        self._stop_event = threading.Event()
        self._last_prune = 0.0

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                # Small slices: a large backlog must not hold the store (and the worker's commits) for long.
                store.collect_garbage(batch_size=2_000, max_seconds=0.5)
                if time.monotonic() - self._last_prune > 600:
                    usage.prune_buckets()
                    self._last_prune = time.monotonic()
            except Exception:  # collection is retried next round; the worker goes on
                log.warning("garbage collection failed; retrying later", exc_info=True)
            finally:
                close_old_connections()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
