"""BinlogStream: committed transactions from a live source, resumable and self-healing.

The stream connects, asks for the binlog from its start position and decodes events into transactions. When the
connection breaks (closed, reset, a read that outlasts the heartbeat-derived timeout, a server shutdown), it
reconnects with exponential backoff from the last position the caller confirmed: transactions yielded but not yet
confirmed come again, so a caller that confirms after storing loses nothing and sees duplicates only after failures.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping

import pymysql

from binlog.changes import Transaction
from binlog.connection import ReplicationConnection
from binlog.errors import (
    BinlogError,
    ConnectionLostError,
    PurgedPositionError,
    RolledBackPartError,
    ServerError,
    UnreadablePositionError,
)
from binlog.parser import EventDecoder
from binlog.position import Position
from binlog.schema import InformationSchemaProvider, SchemaProvider
from binlog.settings import SourceSettings

log = logging.getLogger("binlog.stream")

_RETRYABLE = (ConnectionLostError, ServerError, OSError, pymysql.err.OperationalError, pymysql.err.InterfaceError)


class BinlogStream:
    """Iterate to get ``Transaction`` objects; ``confirm()`` what has been durably taken."""

    def __init__(
        self,
        settings: SourceSettings,
        start: Position | None = None,
        *,
        schema_provider: SchemaProvider | None = None,
        blocking: bool = True,
        verify_checksum: bool = True,
        chunk_rows: int | None = None,
        file_started: Mapping[str, int] | None = None,
    ) -> None:
        self.settings = settings
        #: When the source began each binlog file this stream read (EventDecoder.file_started), and those given (the
        #: start file's, kept with a checkpoint): every connection checks that a file of a known name is the same.
        self.file_started: dict[str, int] = dict(file_started or {})
        self.chunk_rows = chunk_rows  # larger transactions come in parts (Transaction.partial)
        self.blocking = blocking
        self.verify_checksum = verify_checksum
        self._requested_start = start
        self._start: Position | None = start  # resolved (concrete) start, once connected
        self._confirmed: Position | None = None
        self.provider: SchemaProvider = schema_provider or InformationSchemaProvider(settings.schema_connect_args())
        self._own_provider = schema_provider is None
        self._conn: ReplicationConnection | None = None
        self._decoder: EventDecoder | None = None
        self._closed = False
        self._lock = threading.Lock()
        self.reconnects = 0
        self._whole_at: tuple[str, int] | None = None  # a transaction to read whole (EventDecoder.whole_at)
        self.last_error: str = ""
        self.lag_seconds: float = 0.0
        self.connected_at: float = 0.0
        #: The connection is up and its dump has sent an event (False from a loss until a reconnect reads again).
        self.streaming = False
        self.server_version = ""

    # -- statistics -----------------------------------------------------------------------------------------------

    def source_position(self) -> Position | None:
        """Where the stream is reading now (the end of the last event decoded)."""
        if self._decoder is not None:
            return self._decoder.position()
        return self._confirmed or self._start

    @property
    def confirmed_position(self) -> Position | None:
        return self._confirmed

    def confirm(self, position: Position) -> None:
        """Everything up to ``position`` is durably taken: a reconnect resumes from here."""
        self._confirmed = position

    # -- life cycle -----------------------------------------------------------------------------------------------

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if self._own_provider and isinstance(self.provider, InformationSchemaProvider):
            self.provider.close()

    def __enter__(self) -> BinlogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _resume_position(self) -> Position | None:
        return self._confirmed or self._start

    def _connect(self) -> None:
        conn = ReplicationConnection(self.settings)
        with self._lock:
            if self._closed:
                raise ConnectionLostError("stream closed")
            self._conn = conn
        conn.connect()
        self.server_version = conn.version
        start = self._resume_position()
        if start is None:
            start = conn.current_position()
            self._start = start
            log.info("starting at the source's current position %s", start)
        elif start.file and not start.gtid and conn.is_mariadb:
            # Knowing the GTID state at the start lets every later Position carry one.
            start = Position(start.file, start.pos, conn.gtid_at(start.file, start.pos))
            if self._start is not None and self._confirmed is None:
                self._start = start
        rewind = getattr(self.provider, "rewind", None)  # a schema history: the layouts in force at the start
        if rewind is not None:
            rewind(start)
        conn.prepare(self.settings.heartbeat_seconds)
        conn.register(self.settings.server_id)
        conn.start_dump(start, self.settings.server_id, blocking=self.blocking, use_gtid=self.settings.use_gtid)
        self._decoder = EventDecoder(
            self.provider,
            file=start.file,
            pos=start.pos,
            gtid=start.gtid,
            checksum_alg=conn.checksum_alg,
            verify_checksum=self.verify_checksum,
            chunk_rows=self.chunk_rows,
            file_started=self.file_started,
        )
        self._decoder.whole_at = self._whole_at
        self.connected_at = time.time()

    def _drop_connection(self) -> None:
        self.streaming = False
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __iter__(self) -> Iterator[Transaction]:
        attempt = 0
        while not self._closed:
            try:
                if self._conn is None:
                    self._connect()
                assert self._conn is not None and self._decoder is not None
                events = self._conn.read_events()
                self.streaming = True
                if events is None:
                    if self.blocking:  # a blocking dump only ends when the source goes away (e.g. its shutdown)
                        raise ConnectionLostError("the source ended the binlog dump")
                    self._drop_connection()  # the end of a non-blocking dump
                    return
                index = 0
                while index < len(events):
                    index, trx = self._decoder.feed_from(events, index)
                    attempt = 0
                    if trx is None:
                        continue
                    if not trx.is_heartbeat:
                        self.lag_seconds = max(0.0, time.time() - trx.timestamp) if trx.timestamp else 0.0
                    else:
                        self.lag_seconds = 0.0  # a heartbeat: the source has nothing newer
                    yield trx
                    if self._closed:
                        return
            except RolledBackPartError as exc:
                # Rare (a large transaction, a non-transactional change, then a rollback to a savepoint set before
                # its last part): it is read again from its start and handed on whole; its parts already handed on
                # are taken back by the consumer when it sees the transaction start again (Transaction.part 0).
                log.warning("%s: reading that transaction again, whole", exc)
                self._whole_at = (exc.start.file, exc.start.pos)
                self._drop_connection()
            except (PurgedPositionError, UnreadablePositionError) as exc:
                self.last_error = str(exc)
                self._drop_connection()
                raise
            except _RETRYABLE as exc:
                self._drop_connection()
                if self._closed:
                    return
                self.last_error = str(exc)
                attempt += 1
                limit = self.settings.max_reconnect_attempts
                if limit is not None and attempt > limit:
                    raise BinlogError(f"giving up after {limit} reconnect attempts: {exc}") from exc
                delay = min(
                    self.settings.reconnect_initial_delay * 2 ** (attempt - 1), self.settings.reconnect_max_delay
                )
                log.warning(
                    "replication connection to %s:%s lost (%s); reconnect attempt %d in %.1fs from %s",
                    self.settings.host,
                    self.settings.port,
                    exc,
                    attempt,
                    delay,
                    self._resume_position(),
                )
                self.reconnects += 1
                self._sleep(delay)
            except BaseException:
                self._drop_connection()
                raise

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._closed and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
