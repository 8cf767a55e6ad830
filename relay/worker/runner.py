"""The binlog worker: replicate from the source and apply each committed transaction to the store, exactly once.

A reader thread runs the binlog stream and hands transactions over a bounded queue; the main thread groups them
into batches (bounded by rows and milliseconds) and applies each batch in one database transaction together with the
checkpoint. A garbage-collector thread deletes consumed entries and unreferenced changes in bounded batches.

A first start (no checkpoint) stores the position it chose (--from, [Server] StartFrom / StartGTID, or the source's
current position) as the checkpoint before it reads a single event, so a kill at any instant of it loses nothing: the
next start resumes there. A source that cannot be reached is retried with backoff, a line per attempt, and the stored
status says "reconnecting"; a store that goes away while running is retried the same way (re-taking the worker lock).
A source that refuses the user, or lacks a privilege, stops the worker with one line: no retry can fix that.

Exit codes: 0 after SIGTERM/SIGINT (the current batch is committed first), 2 when the checkpoint's binlog has been
purged from the source (the message names the file and the flag that skips forward), 1 when the source refuses the
user or a privilege, and on any other fatal error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pymysql
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.utils import timezone

from binlog import BinlogError, BinlogResetError, Position, PurgedPositionError, SourceSettings, Transaction
from binlog.check import cascading_foreign_keys
from binlog.connection import ReplicationConnection
from binlog.errors import AccessDeniedError, ConnectionLostError, UnreadablePositionError
from binlog.parser import changes_rows_as_statement
from binlog.stream import BinlogStream
from relay import store
from relay.config import RelayConfig
from relay.models import Checkpoint, WorkerStatus
from relay.startup import first_line
from relay.store.errors import refused_as_read_only
from relay.store.schemahistory import open_history
from relay.store.sql import table
from relay.worker import bulk, usage, xa
from relay.worker.changelog import ChangeLog
from relay.worker.handoff import Empty, RowBoundedHandoff
from relay.worker.ingest import Ingestor, write_checkpoint
from relay.worker.leader import LeaderLock, process_label
from relay.worker.samples import Sampler
from relay.worker.snapshots import SnapshotCoordinator

Handoff = RowBoundedHandoff["Transaction | BaseException | None"]

log = logging.getLogger("relay.worker")
_T = TypeVar("_T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PURGED = 2


@dataclass(frozen=True)
class WorkerOptions:
    batch_rows: int = 5_000
    batch_ms: int = 100
    start: Position | None = None  # explicit --from/--from-gtid: wins over the checkpoint
    gc_interval_seconds: float = 2.0
    max_runtime_seconds: float | None = None  # for tests and benchmarks: stop cleanly after this long
    chunk_rows: int = 5_000  # a larger binlog transaction is applied in parts, inside one store transaction
    # A standby takes over from an active worker whose lock session has been idle this long (frozen, paused, cut off
    # from the store): relay/worker/leader.py. 0: only when it dies.
    takeover_seconds: float = 30.0
    # A first start with other sources' checkpoints in the store begins at the source's current position only when
    # told that this is indeed another source (--new-source): it may be one of them under another address.
    new_source: bool = False


class StartRefused(Exception):
    """The worker cannot choose where to start without being told."""


def _clock_offset(conn: ReplicationConnection) -> float:
    """The source's clock minus this host's, seconds (this host's time taken halfway through the query)."""
    before = time.time()
    # @@timestamp is the server's clock as seconds since the epoch: NOW() would go through the session's time zone,
    # an hour off during a DST change's repeated hour.
    rows = conn.query("SELECT @@timestamp")
    after = time.time()
    return float(rows[0][0]) - (before + after) / 2


def _where_among(file: str, logs: list[tuple[str, int]]) -> str:
    """Where a binlog file the source lacks stands among those it has (``logs``, oldest first): purged (older than
    the oldest) or never written there (newer than the newest, or of another name: another source's file, or the
    source's binlog was reset)."""
    oldest, newest = logs[0][0], logs[-1][0]
    (base, number), (newest_base, newest_number) = _binlog_order(file), _binlog_order(newest)
    if base != newest_base or number > newest_number:
        return (
            f" The source's binlogs run from {oldest} to {newest}: {file} is not of that sequence or newer than all of "
            "them, so it was never written there (a file of another source, or the source's binlog was reset)."
        )
    return f" The source's binlogs run from {oldest} to {newest}: {file} was purged."


def _binlog_order(name: str) -> tuple[str, int]:
    """A binlog file's place in its sequence: its base name, then its number (binlog.000010 after binlog.000009, and
    after binlog.999999 comes binlog.1000000)."""
    base, _, number = name.rpartition(".")
    return (base, int(number)) if number.isdigit() else (name, -1)


def source_key(config: RelayConfig) -> str:
    """The source's name in the store: [Server] SourceName, or host:port."""
    return config.source.name or f"{config.source.host}:{config.source.port}"


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


class _StoreLost(Exception):
    """The store connection (and with it the PostgreSQL worker lock) went away while running."""


def _store_errors() -> tuple[type[BaseException], ...]:
    """What a store that cannot be reached raises: Django's wrappers, and psycopg2's own from the worker lock."""
    errors: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, _StoreLost)
    try:
        import psycopg2
    except ImportError:  # a SQLite-only installation
        return errors
    return (*errors, psycopg2.OperationalError, psycopg2.InterfaceError)


def _store_failed(exc: BaseException) -> bool:
    """The store cannot be reached, or refuses writes: what waiting for it can fix (the process keeps running)."""
    return isinstance(exc, _store_errors()) or refused_as_read_only(exc)


#: PostgreSQL's foreign_key_violation: a batch's queue entries name a client deleted after the batch read the clients.
_FOREIGN_KEY_VIOLATION = "23503"


def _still_active(lock: LeaderLock) -> None:
    """Before a batch is written: this worker still holds the lock (a takeover also ends its sessions, leader.py)."""
    if not lock.still_held():
        raise _StoreLost("lost the worker lock (store connection gone)")


def _client_deleted_under_batch(exc: IntegrityError) -> bool:
    """The batch's commit found a client its entries name gone: deleted (the admin's delete, a client's own) while the
    batch was written. The foreign keys are checked at COMMIT, so nothing locked the client until then."""
    return getattr(exc.__cause__, "pgcode", None) == _FOREIGN_KEY_VIOLATION


# Failures of the first connection to the source that a retry can fix (it is down, restarting, or the network is).
_SOURCE_UNREACHABLE = (ConnectionLostError, OSError, pymysql.err.OperationalError, pymysql.err.InterfaceError)
STORE_RETRY_MAX_SECONDS = 30.0
#: A skew between the source's clock and this host's that is worth a warning (smaller ones are the query's own time).
CLOCK_WARNING_SECONDS = 2.0
CLOCK_MEASURE_SECONDS = 600.0
#: Events (as SHOW BINLOG EVENTS names them) that only come inside a transaction, after its start.
_INSIDE_A_TRANSACTION = (
    "Table_map",
    "Write_rows",
    "Update_rows",
    "Delete_rows",
    "Partial_update_rows",
    "Annotate_rows",
    "Rows_query",
    "Xid",
    "XA_prepare",
)
#: PostgreSQL's SQLSTATE for a lock not granted within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"


def _refused_by_the_server(exc: BaseException) -> bool:
    """A server's own error (1044, 1045, 1142, 1227...: codes under 2000) that PyMySQL raises as OperationalError,
    like its client-side connection errors (2003, 2013...)."""
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    return isinstance(code, int) and code < 2000


def _with_connection(settings: SourceSettings, use: Callable[[ReplicationConnection], _T]) -> _T:
    """``use`` over a short connection to the source of its own, closed after."""
    conn = ReplicationConnection(settings)
    try:
        conn.connect()
        return use(conn)
    finally:
        conn.close()


def _say_cascades(source: str, connect_args: dict[str, Any]) -> None:
    """Names, at every start, the source's foreign keys whose changes the binlog does not hold (CASCADE, SET NULL):
    what they change reaches no client. In the log, and in the worker's status (the dashboard, /metrics)."""
    try:
        lines = cascading_foreign_keys(connect_args)
    except (pymysql.err.MySQLError, OSError) as exc:
        log.warning("cannot read the source's foreign keys (%s): changes they cascade are not in the binlog", exc)
        return
    if lines:
        shown = "; ".join(lines[:20]) + (f"; and {len(lines) - 20} more" if len(lines) > 20 else "")
        log.warning(
            "the source does not write the changes its foreign keys cascade to the binlog: no client receives what "
            "these change in their tables: %s",
            shown,
        )
    try:
        WorkerStatus.objects.filter(source=source).update(cascading_foreign_keys="\n".join(lines))
    except DatabaseError as exc:  # the store gone meanwhile: the log has said it
        log.debug("the cascading foreign keys were not stored: %s", exc)
    finally:
        connection.close()  # this thread's own


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
        stream_factory: Callable[..., BinlogStream] = BinlogStream,
    ) -> None:
        self.config = config
        self.options = options or WorkerOptions()
        self.source = source_key(config)
        self.stream_factory = stream_factory
        self.stop_requested = threading.Event()
        self.changelog = ChangeLog(config.logger)
        self._stream: Any = None
        self._checkpoint_at_launch: Position | None = None
        self._explicit_start_stored = False  # --from is applied once; later runs (after a store outage) resume
        self._standby_reported = 0.0
        self._last_item_at = 0.0  # when the reader last received anything (a heartbeat at least) from the source
        self._reported_reconnects = 0
        self._clock_measured = 0.0  # monotonic time of the last measure of the source's clock
        self._clock_warned: float | None = None  # the offset last warned about
        self._clock_offset = 0.0  # the source's clock minus this host's, as last measured
        self._lag: float | None = None  # the lag when the last batch was applied, on this host's clock
        self._sampler = Sampler(self.source)
        # Reported by the schema history in the reader thread (list.append is atomic); written with the next report.
        self._schema_problems: list[str] = []
        self._snapshots: SnapshotCoordinator | None = None
        self._applied: Position | None = None  # where the store's checkpoint is: the end of the last batch applied

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: object) -> None:
            log.info("signal %s: finishing the current batch, then stopping", signal.Signals(signum).name)
            self.stop_requested.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

    def run(self) -> int:
        # Every store session of this process carries its label, so that a standby can end them all if this process
        # freezes while it holds the lock (relay/worker/leader.py); the sessions opened so far are reopened with it.
        connection_created.connect(_name_store_session, dispatch_uid="relay.worker.session_label")
        if not connection.in_atomic_block:
            connection.close()
        try:
            return self._run()
        finally:
            connection_created.disconnect(dispatch_uid="relay.worker.session_label")

    def _run(self) -> int:
        lock = LeaderLock(self.source, _lock_dir(self.config), self.options.takeover_seconds)
        started = time.monotonic()
        deadline = None if self.options.max_runtime_seconds is None else started + self.options.max_runtime_seconds

        def should_stop() -> bool:
            return self.stop_requested.is_set() or (deadline is not None and time.monotonic() > deadline)

        self._checkpoint_at_launch = self._checkpoint()
        attempt = 0
        while True:
            run_started = time.monotonic()
            try:
                if not lock.acquire(should_stop, self._report_standby):
                    self._clear_standby()
                    return EXIT_OK
                try:
                    return self._run_active(should_stop, lock)
                finally:
                    lock.release()
            except Exception as exc:  # noqa: BLE001 - every failure ends in a stored state (_stopped_by)
                deleted = isinstance(exc, IntegrityError) and _client_deleted_under_batch(exc)
                if not deleted and not _store_failed(exc):
                    return self._stopped_by(exc)
                # The batch's transaction rolled back whole, the checkpoint is before it: start over from the
                # checkpoint (as a standby first if another worker took the lock meanwhile), once the store is back.
                # A client deleted under the batch: written again, it finds the client gone with its filters, and
                # the others lose nothing and get nothing twice.
                with contextlib.suppress(Exception):  # closing a connection to a store that is gone may fail anyhow
                    connection.close()
                # Unreachable, restarting, or refusing writes (its disk is full): the same wait, named by its error.
                what = "a client was deleted while a batch for it was written" if deleted else "store failed"
                if should_stop():
                    log.warning("%s (%s); stopping as asked", what, first_line(exc))
                    return EXIT_OK
                attempt = 1 if time.monotonic() - run_started > 60 else attempt + 1
                delay = min(0.5 * 2 ** (attempt - 1), STORE_RETRY_MAX_SECONDS)
                log.warning(
                    "%s (%s); nothing is lost: attempt %d, retrying from the checkpoint in %.1fs",
                    what,
                    first_line(exc),
                    attempt,
                    delay,
                )
                if self._pause(delay, should_stop):
                    return EXIT_OK

    def _stopped_by(self, exc: Exception) -> int:
        """A failure no wait can fix (the store refusing a batch for good: a constraint, a trigger, a value it cannot
        take; or a fault of the worker's own): one ERROR line, and the stored state says failed, with the error, so
        that the dashboard, /metrics and /healthz do not show the last state of a process that is gone. The batch's
        transaction rolled back whole: nothing after the checkpoint was applied."""
        log.debug("the failure, in full:", exc_info=exc)
        with contextlib.suppress(Exception):  # the failed batch's connection may be unusable
            connection.close()
        message = f"stopping: {type(exc).__name__}: {first_line(exc)}; nothing after the checkpoint was applied"
        try:
            return self._failed(message)
        except Exception as status_error:  # noqa: BLE001 - the store refusing this too: the log says both
            log.error("%s (the failed state could not be stored: %s)", message, first_line(status_error))
            return EXIT_FAILED

    def _pause(self, seconds: float, should_stop: Callable[[], bool]) -> bool:
        """Sleeps ``seconds``; True when a stop was asked for meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if should_stop():
                return True
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return should_stop()

    def _report_standby(self) -> None:
        """Logs once, then keeps the standby visible on the dashboard (its heartbeat every few seconds)."""
        now = time.monotonic()
        if now - self._standby_reported < 5:
            return
        if not self._standby_reported:
            log.info("standby: another worker is active for %s", self.source)
        self._standby_reported = now
        WorkerStatus.objects.get_or_create(source=self.source)
        # One statement that commits as it runs (no transaction of the standby's own holds the row between two of its
        # statements): a standby frozen mid-report never blocks the active worker's batches, which write that row.
        values: list[Any] = [
            os.getpid(),
            socket.gethostname(),
            connection.ops.adapt_datetimefield_value(timezone.now()),
        ]
        update = (
            f"UPDATE {table(WorkerStatus)} SET standby_pid = %s, standby_hostname = %s, standby_heartbeat = %s"
            " WHERE source = %s"
        )
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    # The active worker's open batch may hold the row: this waits a moment at most, so that a standby
                    # never hangs on a frozen worker's row lock instead of taking over from it. One message, one
                    # implicit transaction: the setting goes with it, whatever happens.
                    cursor.execute(f"SET lock_timeout = '500ms'; {update}; RESET lock_timeout", [*values, self.source])
                else:
                    cursor.execute(update, [*values, self.source])
        except OperationalError as exc:
            if getattr(exc.__cause__, "pgcode", None) != LOCK_NOT_AVAILABLE:
                raise
            self._standby_reported = now - 4  # reported again at the next attempt

    def _clear_standby(self) -> None:
        if self._standby_reported:
            WorkerStatus.objects.filter(source=self.source, standby_pid=os.getpid()).update(
                standby_pid=None, standby_hostname="", standby_heartbeat=None
            )

    def _run_active(self, should_stop: Callable[[], bool], lock: LeaderLock) -> int:
        log.info("active worker for %s (pid %s)", self.source, os.getpid())
        bulk.drop_reserved_ids()  # another worker may have written changes since this process last was the active one
        # Before anything is read: the previous active worker may have lost the lock and run on (leader.py).
        lock.fence(
            WorkerStatus.objects.filter(source=self.source).values_list("session_label", flat=True).first() or ""
        )
        self.changelog.recover(self._checkpoint())  # a batch's lines published before a kill: kept if it committed
        self._clear_standby()
        self._set_status(
            WorkerStatus.State.STARTING,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            session_label=process_label() if connection.vendor == "postgresql" else "",
            started=timezone.now(),
            rows_since_start=0,
        )
        usage.reset_since_start()
        try:
            start = self._start_position(should_stop)
        except AccessDeniedError as exc:
            return self._refused(exc)
        except (BinlogError, StartRefused) as exc:  # e.g. no binary log on the source: a set-up problem no retry fixes
            return self._failed(f"cannot start: {exc}")
        if start is None:  # stopped while waiting for the source
            return self._stopped_cleanly()
        log.info("starting at %s", start)
        ingestor = Ingestor(self.source)
        self._measure_source_clock(ingestor)
        settings = source_settings(self.config)
        # Column names of their own time: the schema history follows the stream's DDL (relay/store/schemahistory.py).
        # Its first baseline reads the source (a start at a given position stores the checkpoint before it): an
        # outage then is waited out like any other, not a failure that every later start would meet again.
        history = self._while_unreachable(
            lambda: open_history(
                self.source, settings.schema_connect_args(), start, on_problem=self._schema_problems.append
            ),
            should_stop,
        )
        if history is None:
            return self._stopped_cleanly()
        ingestor.history = history
        # Beside the start, not in its way: the foreign keys are read from every table's definition.
        threading.Thread(target=_say_cascades, args=(self.source, settings.schema_connect_args()), daemon=True).start()
        self._stream = self.stream_factory(
            settings,
            start,
            chunk_rows=self.options.chunk_rows,
            schema_provider=ingestor.history,
            file_started=self._file_started(start),
        )
        stream = self._stream
        ingestor.file_started = getattr(stream, "file_started", {})
        self._snapshots = SnapshotCoordinator(
            settings.schema_connect_args(), self.config.snapshot, lambda: getattr(stream, "server_version", "") or ""
        )
        self._applied = start
        handoff: Handoff = RowBoundedHandoff(max_rows=max(4 * self.options.chunk_rows, self.options.batch_rows))
        run_over = threading.Event()  # ends this run's reader even when the process goes on (store outage)
        self._last_item_at = time.monotonic()
        self._reported_reconnects = 0
        reader = threading.Thread(target=self._read, args=(handoff, run_over), name="binlog-reader", daemon=True)
        reader.start()
        collector = _GarbageCollector(self.options.gc_interval_seconds)
        collector.start()
        try:
            # The state stays "starting" until the first batch read from the stream commits (its report says
            # "connected"): a source that refuses the replication connection is not shown as connected meanwhile.
            self._consume(handoff, ingestor, should_stop, lock)
        except AccessDeniedError as exc:  # e.g. REPLICATION SLAVE missing: the dump is refused after the position
            return self._refused(exc)
        except BinlogResetError as exc:
            return self._failed(
                f"{exc}. The checkpoint's position means nothing in the new file, and the changes after it that the "
                f"old one held are lost to this relay; to go on from the new binlog, restart with --from FILE:POS "
                f"(for example its first file at 4, see SHOW BINARY LOGS).",
                EXIT_PURGED,
            )
        except PurgedPositionError as exc:
            return self._failed(
                f"{exc}.{self._what_the_source_has(exc.file)} The changes between the checkpoint and the oldest "
                f"binlog the source still has are lost to this relay; to skip forward explicitly, restart with --from "
                f"FILE:POS (for example the source's oldest binlog, see SHOW BINARY LOGS) or --from-gtid.",
                EXIT_PURGED,
            )
        except UnreadablePositionError as exc:
            return self._failed(
                f"{exc}. Nothing after the checkpoint was applied; if the position came from --from or StartFrom, "
                f"start again with --from at an event's start (SHOW BINLOG EVENTS lists them)"
            )
        except BinlogError as exc:
            log.error("binlog stream failed: %s", exc)
            self._set_status(WorkerStatus.State.FAILED, last_error=str(exc), last_error_at=timezone.now())
            return EXIT_FAILED
        finally:
            run_over.set()
            collector.stop()
            self._snapshots.close()
            self._stream.close()
        return self._stopped_cleanly()

    def _stopped_cleanly(self) -> int:
        self._set_status(WorkerStatus.State.STOPPED)
        log.info("stopped cleanly")
        return EXIT_OK

    def _checkpoint(self) -> Position | None:
        checkpoint = Checkpoint.objects.filter(source=self.source).first()
        if checkpoint is None:
            return None
        return Position(checkpoint.binlog_file, checkpoint.binlog_pos, checkpoint.gtid)

    def _file_started(self, start: Position) -> dict[str, int]:
        """When the source began the start's file, as the checkpoint knows it ({} if not known): the stream checks
        that the file it reads under that name is still the one."""
        started = (
            Checkpoint.objects.filter(source=self.source, binlog_file=start.file, binlog_pos=start.pos)
            .values_list("binlog_file_started", flat=True)
            .first()
        )
        return {start.file: started} if started else {}

    def _start_position(self, should_stop: Callable[[], bool]) -> Position | None:
        """Where this run starts; None when a stop was asked for while waiting for the source.

        A position chosen here (not read from the checkpoint) is stored as the checkpoint before the stream reads
        anything: a worker killed before its first batch then resumes at the same place, instead of choosing again
        (the source's current position would by then be past what was written in between).
        """
        checkpoint = self._checkpoint()
        if self.options.start is not None and not self._explicit_start_stored:
            if checkpoint == self._checkpoint_at_launch:
                self._check_start(self.options.start, "--from")
                self._store_start(self.options.start, "--from")
                self._explicit_start_stored = True
                return self.options.start
            # Another worker moved the checkpoint while this one waited as a standby: --from was meant for the
            # store as it was at launch, and applying it now would replay or skip what that worker did.
            log.warning("the checkpoint moved while on standby (now %s); ignoring --from", checkpoint)
            self._explicit_start_stored = True
        if checkpoint is not None:
            return checkpoint
        if self.config.source.start_from:
            file, pos = self.config.source.start_from
            chosen, why = Position(file, pos), "[Server] StartFrom"
            self._check_start(chosen, why)
        elif self.config.source.start_gtid:
            chosen, why = Position("", 4, self.config.source.start_gtid), "[Server] StartGTID"
        else:
            self._refuse_a_second_name()
            current = self._source_position(should_stop)
            if current is None:
                return None
            chosen, why = current, "the source's current position"
        self._store_start(chosen, why)
        return chosen

    def _refuse_a_second_name(self) -> None:
        """Before a first start at the source's current position: the store's other checkpoints may be this very
        source's under the name of another address (a DNS name, a VIP, a proxy). Starting afresh would skip what it
        wrote since that checkpoint, and two workers could then both be active for it. Unless told it is another
        source, the worker stops and says how to go on."""
        if self.options.new_source:
            return
        others = list(Checkpoint.objects.exclude(source=self.source).order_by("-updated")[:3])
        if not others:
            return
        known = "; ".join(f"{c.source} at {c.binlog_file}:{c.binlog_pos}" for c in others)
        raise StartRefused(
            f"the store has no checkpoint for source {self.source} but has other sources' ({known}). If {self.source} "
            f"is one of them reached by another address, set [Server] SourceName to that one's name to go on from its "
            f"checkpoint; if it is another server, start once with --new-source (its current position), --from "
            f"FILE:POS or --from-gtid GTID"
        )

    def _ask_source(self, ask: Callable[[ReplicationConnection], _T]) -> _T | None:
        """``ask`` over a short connection of its own; None when the source cannot be asked (unreachable, or the
        user may not): what is asked so is only ever a check or a hint."""
        try:
            return _with_connection(source_settings(self.config), ask)
        except (*_SOURCE_UNREACHABLE, BinlogError):
            return None

    def _binary_logs(self) -> list[tuple[str, int]] | None:
        """The source's binlogs and their sizes, oldest first."""
        return self._ask_source(ReplicationConnection.binary_logs)

    def _check_start(self, start: Position, origin: str) -> None:
        """Refuses a chosen FILE:POS (``origin``: --from, StartFrom) the source cannot start from, before it becomes
        the checkpoint (every later start would otherwise fail the same way): a file it does not have, a position past
        the file's end, one where no event starts, one inside a transaction. What the source will not tell (the user
        may not list its binlogs or events) is left to the stream, which stops there with the reason."""
        if not start.file:
            return  # --from-gtid: the source itself says whether it has that GTID
        logs = self._binary_logs()
        if not logs:
            return
        sizes = dict(logs)
        if start.file not in sizes:
            raise BinlogError(
                f"{origin} {start.file}:{start.pos}: the source has no binlog {start.file}."
                + _where_among(start.file, logs)
            )
        if not 4 <= start.pos <= sizes[start.file]:
            raise BinlogError(
                f"{origin} {start.file}:{start.pos}: outside {start.file}, whose events run from 4 to "
                f"{sizes[start.file]}"
            )
        event = self._ask_source(lambda conn: conn.event_at(start.file, start.pos))
        if event == "":
            raise BinlogError(
                f"{origin} {start.file}:{start.pos}: no event starts there (the source says so); give an event's start "
                "(SHOW BINLOG EVENTS lists them)"
            )
        if event is not None and event.startswith(_INSIDE_A_TRANSACTION):
            raise BinlogError(
                f"{origin} {start.file}:{start.pos}: the event there ({event}) is inside a transaction, whose rows "
                "from there on are not the whole of it; start at the transaction's GTID event or BEGIN, or after its "
                "commit"
            )

    def _measure_source_clock(self, ingestor: Ingestor) -> None:
        """The source's clock against this host's, stored for the health rule (binlog timestamps are the source's
        time, so a skew would read as lag, or hide it) and given to the usage tally; measured when the worker becomes
        active and every CLOCK_MEASURE_SECONDS after (clocks drift, NTP steps them). Kept as it was when the source
        cannot be asked."""
        self._clock_measured = time.monotonic()
        offset = self._ask_source(_clock_offset)
        if offset is None:
            return
        self._clock_offset = offset
        ingestor.clock_offset = round(offset) if abs(offset) > CLOCK_WARNING_SECONDS else 0
        warned = self._clock_warned
        if abs(offset) > CLOCK_WARNING_SECONDS and (warned is None or abs(offset - warned) > CLOCK_WARNING_SECONDS):
            self._clock_warned = offset
            log.warning(
                "the source's clock is %.1f s %s this host's: lag and queue ages are corrected by it; synchronise the "
                "clocks (NTP)",
                abs(offset),
                "ahead of" if offset > 0 else "behind",
            )
        WorkerStatus.objects.filter(source=self.source).update(clock_offset_seconds=offset)

    def _what_the_source_has(self, file: str) -> str:
        """Where a missing binlog file stands among those the source has: purged (older than its oldest) or never
        written there (newer than its newest: another source's file, or the source's binlog was reset)."""
        logs = self._binary_logs()
        return _where_among(file, logs) if file and logs else ""

    def _store_start(self, position: Position, why: str) -> None:
        write_checkpoint(self.source, position)
        log.info("start position %s (%s) stored as the checkpoint", position, why)

    def _source_position(self, should_stop: Callable[[], bool]) -> Position | None:
        """The source's current position, retried with backoff while the source cannot be reached."""
        settings = source_settings(self.config)
        return self._while_unreachable(
            lambda: _with_connection(settings, ReplicationConnection.current_position), should_stop
        )

    def _while_unreachable(self, ask: Callable[[], _T], should_stop: Callable[[], bool]) -> _T | None:
        """``ask()``, tried again with backoff while the source cannot be reached; None when a stop was asked for
        meanwhile. Refused access is no outage: it is raised at once."""
        settings = source_settings(self.config)
        attempt = 0
        while True:
            try:
                return ask()
            except AccessDeniedError:
                raise
            except _SOURCE_UNREACHABLE as exc:
                if _refused_by_the_server(exc):  # a login or privilege refused: no outage, no wait fixes it
                    raise
                attempt += 1
                delay = min(settings.reconnect_initial_delay * 2 ** (attempt - 1), settings.reconnect_max_delay)
                self._source_unreachable(str(exc), f"attempt {attempt}, retrying in {delay:.1f}s")
                if self._pause(delay, should_stop):
                    return None

    def _source_unreachable(self, error: str, what_next: str) -> None:
        """One line per attempt, and the stored status says so (for the dashboard and /healthz)."""
        log.warning("source %s unreachable (%s); %s", self.source, error, what_next)
        where = error if self.source in error else f"{self.source}: {error}"  # a driver's error may not say which
        self._set_status(WorkerStatus.State.RECONNECTING, last_error=where, last_error_at=timezone.now())

    def _watch_source(self) -> None:
        """Called while no transaction arrives: after a new failed attempt, the stream is reconnecting (it logs each
        attempt itself) while its connection is down, or when it stays silent longer than a connected source may (a
        heartbeat every HeartbeatSeconds). The next batch (a heartbeat's at least) sets the state back to connected."""
        reconnects = getattr(self._stream, "reconnects", 0)
        if reconnects <= self._reported_reconnects:
            return
        down = not getattr(self._stream, "streaming", True)
        silent = time.monotonic() - self._last_item_at > 2 * self.config.source.heartbeat_seconds + 1
        if down or silent:
            self._reported_reconnects = reconnects
            WorkerStatus.objects.filter(source=self.source).update(
                state=WorkerStatus.State.RECONNECTING,
                last_error=getattr(self._stream, "last_error", "") or "",
                last_error_at=timezone.now(),
                reconnects=reconnects,
            )

    def _refused(self, exc: AccessDeniedError) -> int:
        if exc.privilege:
            return self._failed(f"stopping: {exc}; grant it to '{exc.user}' on the source, then start again")
        return self._failed(f"stopping: {exc}; check [Server] Login and Password")

    def _failed(self, message: str, exit_code: int = EXIT_FAILED) -> int:
        log.error("%s", message)
        self._set_status(WorkerStatus.State.FAILED, last_error=message, last_error_at=timezone.now())
        return exit_code

    # -- reading and applying -------------------------------------------------------------------------------------

    def _read(self, handoff: Handoff, run_over: threading.Event) -> None:
        def hand(item: Transaction | BaseException | None, rows: int) -> bool:
            while not handoff.put(item, rows, timeout=0.5):
                if self.stop_requested.is_set() or run_over.is_set():
                    return False
            return True

        try:
            for tx in self._stream:
                self._last_item_at = time.monotonic()
                # Buffered from here on: after a reconnect the stream resumes after it, not at its first start.
                self._stream.confirm(tx.position)
                if not hand(tx, tx.weight):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which decides
            hand(exc, 0)
            return
        hand(None, 0)

    def _items(self, handoff: Handoff, timeout: float) -> Iterator[Transaction | None]:
        """Transactions as they come; None when ``timeout`` passes without one."""
        try:
            item = handoff.get(timeout=timeout)
        except Empty:
            self._watch_source()
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
        batch_seconds = self.options.batch_ms / 1000
        try:
            while True:
                now = time.monotonic()
                if should_stop():
                    break
                if now - self._clock_measured >= CLOCK_MEASURE_SECONDS and not pending:
                    self._measure_source_clock(ingestor)
                wait = batch_seconds - (now - first_at) if pending else 0.25
                if self._snapshots is not None:
                    self._snapshots.tick()
                    if self._snapshots.busy:
                        wait = min(wait, 0.005 if self._snapshots.reading else 0.05)
                for tx in self._items(handoff, max(wait, 0.001)):
                    if tx is None:
                        if not pending:
                            self._place_idle(ingestor)
                        break
                    if tx.partial:
                        _still_active(lock)
                        if pending:
                            self._flush(ingestor, pending)
                            pending, pending_rows = [], 0
                        self._apply_large(ingestor, tx, handoff)
                        break
                    if not pending:
                        first_at = time.monotonic()
                    pending.append(tx)
                    pending_rows += tx.weight
                # Group commit: a batch ends when the reader has nothing more right now (low latency when the
                # source is quiet), or at batch_rows / batch_ms (large batches when it is busy).
                if pending and (
                    pending_rows >= self.options.batch_rows
                    or handoff.empty()
                    or time.monotonic() - first_at >= batch_seconds
                ):
                    _still_active(lock)
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
            # Its change log lines are spooled, and go in as the last step of its store transaction (taken back if
            # it does not commit): applied again, it would otherwise write them twice.
            spool = self.changelog.spool()
            try:
                rows = 0
                with transaction.atomic():
                    while True:
                        if self._snapshots is not None:
                            self._snapshots.observe(part)
                        ingestor.apply(
                            [part],
                            checkpoint=not part.partial,
                            refresh_filters=part.part == 0,
                            status=None if part.partial else self._progress(part),
                        )
                        spool.write([part])
                        rows += len(part.changes)
                        if not part.partial:
                            break
                        part = self._next_part(handoff)
                        if part.part == 0:  # the stream reconnected and starts this transaction again
                            raise _Restart(part)
                    self._sample()
                    spool.publish(part.position)  # last: its lines are taken back if the commit fails
            except _Restart as restart:
                spool.revert()
                log.warning("the source connection broke inside a large transaction; applying it again")
                part = restart.part
                continue
            except BaseException:
                spool.revert()
                raise
            spool.finish()
            self._applied = part.position
            log.info("applied a transaction of %d rows in parts", rows)
            return

    def _flush(self, ingestor: Ingestor, batch: list[Transaction]) -> None:
        xa.release(self.source, batch)  # an XA COMMIT's rows are those its prepare held: before anything reads them
        # A snapshot's chunk due in this batch goes between the transactions before its point and those after it,
        # and its progress commits with them (relay/worker/snapshots.py).
        items, placed = (
            (batch, [])
            if self._snapshots is None or self._applied is None
            else self._snapshots.arrange(batch, self._applied)
        )
        # The status report rides in the batch's transaction (one WorkerStatus write, one commit, one WAL flush).
        started = time.monotonic()
        spool = self.changelog.spool()
        spool.write(batch)
        try:
            with transaction.atomic():
                xa.record(self.source, batch)
                SnapshotCoordinator.record(placed)
                ingestor.apply(items, status=self._progress(batch[-1], batch))
                self._sample()
                spool.publish(items[-1].position)  # last: its lines are taken back if the commit fails
        except BaseException:
            spool.revert()
            raise
        spool.finish()
        if placed and self._snapshots is not None:
            self._snapshots.applied(time.monotonic() - started, live=any(tx.changes for tx in batch))
        self._applied = items[-1].position

    def _place_idle(self, ingestor: Ingestor) -> None:
        """While the stream is quiet: a chunk read at the position the worker is at, or a snapshot's end marker."""
        if self._snapshots is None or self._applied is None:
            return
        items, placed = self._snapshots.arrange([], self._applied)
        if not items:
            return
        started = time.monotonic()
        with transaction.atomic():
            SnapshotCoordinator.record(placed)
            ingestor.apply(items)
        if placed:
            self._snapshots.applied(time.monotonic() - started, live=False)

    def _progress(self, last: Transaction, batch: Sequence[Transaction] = ()) -> dict[str, Any]:
        """The WorkerStatus fields a batch ending with ``last`` reports (written by the ingest's one status update);
        ``batch``: its transactions, ``last`` among them."""
        stream = self._stream
        position = last.position
        # The dashboard computes the lag when it reads (relay/web/health.py): from the source time of the newest
        # event applied, or from the last heartbeat applied, which says the source had nothing newer. So the lag
        # grows while this process is stuck, instead of freezing at the last number it wrote.
        progress: dict[str, Any] = {}
        if not last.is_heartbeat:  # an XA PREPARE or ROLLBACK carries no changes, and is no heartbeat either
            if last.timestamp:
                progress["source_timestamp"] = datetime.fromtimestamp(last.timestamp, UTC)
                # The source's time on this host's clock: a skewed source clock is not shown as lag (or hidden).
                self._lag = max(0.0, time.time() - (last.timestamp - self._clock_offset))
        elif not last.partial:
            progress["caught_up"] = timezone.now()
            self._lag = 0.0  # a heartbeat: the source had nothing newer
        if self._schema_problems:  # counted for /metrics and the dashboard (relay_schema_mismatches_total)
            problems = len(self._schema_problems)
            progress["last_schema_problem"] = self._schema_problems[problems - 1]
            progress["last_schema_problem_at"] = timezone.now()
            progress["schema_problems"] = bulk.Added(problems)
            # Counted once the batch's transaction commits; a batch that rolls back leaves them for the next one.
            transaction.on_commit(lambda: self._drop_problems(problems))
        lost = self.changelog.lost
        if lost:  # counted for /metrics and the dashboard (relay_change_log_lost_total); a batch's own, in the next
            progress["change_log_lost"] = bulk.Added(lost)
            progress["last_change_log_error"] = self.changelog.last_error
            progress["last_change_log_error_at"] = timezone.now()
            transaction.on_commit(lambda: self._drop_lost(lost))
        unrelayed = [query for tx in batch or (last,) for query in tx.statements if changes_rows_as_statement(query)]
        if unrelayed:  # logged by the decoder; counted for /metrics and the dashboard (relay_unrelayed_statements)
            progress["last_unrelayed_statement"] = unrelayed[-1][:2000]
            progress["last_unrelayed_statement_at"] = timezone.now()
            progress["unrelayed_statements"] = bulk.Added(len(unrelayed))
        return {
            "state": WorkerStatus.State.CONNECTED,
            "lag_seconds": self._lag,
            "reconnects": getattr(stream, "reconnects", 0),
            "source_file": position.file,
            "source_pos": position.pos,
            **progress,
        }

    def _drop_lost(self, count: int) -> None:
        self.changelog.lost -= count  # the main thread alone counts them (publish) and reports them

    def _drop_problems(self, count: int) -> None:
        del self._schema_problems[:count]  # the reader thread only appends: the first ``count`` are the counted ones

    def _sample(self) -> None:
        if self._sampler.due():  # queue and lag history for the dashboard, once a minute
            self._sampler.write(timezone.now(), self._lag)

    def _set_status(self, state: str, **fields: Any) -> None:
        # Each status write is a report; the heartbeat period tells the health rule how often a connected worker
        # reports (relay/web/health.py).
        defaults = {
            "state": state,
            "heartbeat": timezone.now(),
            "heartbeat_seconds": self.config.source.heartbeat_seconds,
            **fields,
        }
        WorkerStatus.objects.update_or_create(source=self.source, defaults=defaults)


def _name_store_session(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET application_name = %s", [process_label()])


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
