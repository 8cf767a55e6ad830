"""The event decoder: binlog events in, committed transactions out.

``EventDecoder.feed()`` takes one whole event (common header, body, checksum) at a time, verifies its checksum, keeps
the state the format needs (format description, table maps, the open transaction, the GTID state, the current file
and position) and returns a ``Transaction`` when a commit completes one, an empty one for a heartbeat between
transactions, and None otherwise. The live stream and the file reader share it, so both decode identically.
"""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType

from binlog import native, xa
from binlog.changes import ROW_BYTES, RowChange, Transaction
from binlog.constants import (
    ANONYMOUS_GTID_LOG_EVENT,
    BINLOG_CHECKSUM_ALG_CRC32,
    BINLOG_CHECKSUM_ALG_OFF,
    BINLOG_CHECKSUM_LEN,
    COMPRESSED_ROWS_EVENTS,
    DELETE_ROWS_EVENT_V1,
    DELETE_ROWS_EVENT_V2,
    DELETE_ROWS_EVENTS,
    EVENT_TYPE_NAMES,
    FL_PREPARED_XA,
    FL_STANDALONE,
    FORMAT_DESCRIPTION_EVENT,
    GTID_EVENT,
    GTID_LIST_EVENT,
    GTID_LOG_EVENT,
    HEARTBEAT_LOG_EVENT,
    HEARTBEAT_LOG_EVENT_V2,
    KIND_DELETE,
    KIND_INSERT,
    KIND_UPDATE,
    LOG_EVENT_ARTIFICIAL_F,
    LOG_EVENT_BINLOG_IN_USE_F,
    LOG_EVENT_HEADER_LEN,
    PARTIAL_UPDATE_ROWS_EVENT,
    PREVIOUS_GTIDS_LOG_EVENT,
    QUERY_COMPRESSED_EVENT,
    QUERY_EVENT,
    ROTATE_EVENT,
    ROWS_EVENTS,
    ROWS_EVENTS_V2,
    START_ENCRYPTION_EVENT,
    TABLE_MAP_EVENT,
    TRANSACTION_PAYLOAD_EVENT,
    UPDATE_ROWS_EVENT_V1,
    UPDATE_ROWS_EVENT_V2,
    UPDATE_ROWS_EVENTS,
    WRITE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V2,
    XA_PREPARE_LOG_EVENT,
    XID_EVENT,
)
from binlog.ddl import statement_start, tokenize
from binlog.errors import (
    BinlogError,
    BinlogResetError,
    ChecksumError,
    RolledBackPartError,
    TruncatedEventError,
    UnreadablePositionError,
)
from binlog.events import (
    HEADER,
    FormatDescription,
    parse_format_description,
    parse_gtid_list,
    parse_heartbeat_v2,
    parse_mariadb_gtid,
    parse_mysql_gtid,
    parse_query,
    parse_rotate,
    parse_xid,
    query_error_code,
    query_thread_id,
)
from binlog.gtid import MariaGtidState, MysqlGtidSet, is_mysql_gtid_text
from binlog.logs import logger
from binlog.position import Position
from binlog.reader import lenenc_int
from binlog.rowdecoder import RowsDecoder, build_rows_decoder
from binlog.schema import SchemaProvider, TableResolver
from binlog.table import TableInfo
from binlog.tablemap import TableMap, parse_table_map

_CRC = struct.Struct("<I")
#: The CRC-32 of any bytes followed by their own CRC-32 (little-endian): an event whose whole CRC-32 is this is intact.
CRC32_RESIDUE = 0x2144DF1C

# Post-header lengths of a binlog v4 FORMAT_DESCRIPTION, used until the source's own arrives (the fake ROTATE that
# opens a dump comes before it).
_DEFAULT_FDE = FormatDescription(
    binlog_version=4,
    server_version="5.7.0",
    create_timestamp=0,
    header_length=LOG_EVENT_HEADER_LEN,
    post_header_lengths=bytes(
        [56, 13, 0, 8, 0, 18, 0, 4, 4, 4, 18, 1, 0, 0, 0, 0, 8, 8, 4, 0, 0, 0, 8, 8, 8, 8, 0, 0, 10, 10, 10, 42, 42, 0]
    ),
    checksum_alg=BINLOG_CHECKSUM_ALG_OFF,
)

_DDL_PREFIXES = ("CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", "IMPORT", "REPAIR", "OPTIMIZE")


#: Statements that change rows. In a binlog of row events they come as statements only when the source logged
#: their changes so: TRUNCATE always, the others from a session whose binlog_format is STATEMENT or MIXED. Their row
#: changes are then nowhere in the binlog, and no reader of rows can hand them on.
ROW_CHANGING_KEYWORDS = frozenset(("INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "TRUNCATE"))


def changes_rows_as_statement(query: str) -> bool:
    """The statement changed rows, and the binlog holds it instead of its row changes."""
    return _statement_keyword(query) in ROW_CHANGING_KEYWORDS


def _statement_keyword(query: str) -> str:
    """The first keyword of a statement, upper-cased, past leading comments and whitespace."""
    text = query.lstrip()
    while text.startswith("/*") or text.startswith("#") or text.startswith("--"):
        if text.startswith("/*"):
            end = text.find("*/")
            if end < 0:
                return ""
            if text.startswith("/*!") or text.startswith("/*M!"):
                # Versioned comments are executed: their content is the statement.
                inner = text[2:end].lstrip("!M0123456789 ")
                return inner.split(None, 1)[0].upper() if inner.strip() else ""
            text = text[end + 2 :].lstrip()
        else:
            newline = text.find("\n")
            if newline < 0:
                return ""
            text = text[newline + 1 :].lstrip()
    word = text[:16].split(None, 1)[0].upper() if text else ""
    if word == "SET" and text[3:].lstrip()[:9].upper() == "STATEMENT":
        # SET STATEMENT var = value FOR <statement>: the statement's own keyword says what it is.
        tokens = tokenize(text)
        start = statement_start(tokens)
        if start and start < len(tokens):
            return tokens[start].text.upper()
    return word


class _TableEntry:
    """A TABLE_MAP with its resolved TableInfo and the row decoders built for it, by present-columns bitmap."""

    __slots__ = ("decoders", "info", "map")

    def __init__(self, table_map: TableMap, info: TableInfo) -> None:
        self.map = table_map
        self.info = info
        self.decoders: dict[tuple[int, int, int], RowsDecoder] = {}

    def rows_decoder(self, kind: int, present: int, present_after: int) -> RowsDecoder:
        key = (kind, present, present_after)
        decoder = self.decoders.get(key)
        if decoder is None:
            decoder = self.decoders[key] = build_rows_decoder(self.info.columns, kind, present, present_after)
        return decoder

    def partial_update_decoder(self, present: int, present_after: int) -> RowsDecoder:
        key = (PARTIAL_UPDATE_ROWS_EVENT, present, present_after)  # apart from the kinds (1, 2, 4) of rows_decoder
        decoder = self.decoders.get(key)
        if decoder is None:
            from binlog.partialrows import build_partial_update_decoder  # MySQL's JSON diffs only: imports json

            decoder = self.decoders[key] = build_partial_update_decoder(self.info.columns, present, present_after)
        return decoder


class EventDecoder:
    """Stateful decoder of one stream of events (one source, consecutive files)."""

    def __init__(
        self,
        schema_provider: SchemaProvider | None = None,
        *,
        file: str = "",
        pos: int = 4,
        gtid: str = "",
        checksum_alg: int | None = None,
        verify_checksum: bool = True,
        chunk_rows: int | None = None,
        file_started: dict[str, int] | None = None,
    ) -> None:
        self.provider = schema_provider
        #: A stream's: when the source began each binlog file read so far (its FORMAT_DESCRIPTION's header
        #: timestamp), by name, filled here; it may name files read before (by an earlier connection, a
        #: checkpoint): a file of one of those names begun at another time raises BinlogResetError. None for files
        #: read from disk, which may come from several sources.
        self.file_started = file_started
        self.chunk_rows = chunk_rows  # a transaction with more rows comes in parts (see Transaction.partial)
        self.chunk_bytes = (chunk_rows or 0) * ROW_BYTES  # or as many bytes of rows events
        #: The transaction starting at this position comes whole, whatever its size: read in parts, a ROLLBACK TO
        #: SAVEPOINT in it took back rows of a part already handed on (binlog.stream reads it again).
        self.whole_at: tuple[str, int] | None = None
        self._part = 0
        self._emitted = 0  # rows of the open transaction already handed on in parts
        self.resolver = TableResolver(schema_provider)
        self.file = file
        self.pos = pos
        self.fde = _DEFAULT_FDE
        self.checksum_alg = BINLOG_CHECKSUM_ALG_OFF if checksum_alg is None else checksum_alg
        self.verify_checksum = verify_checksum
        self.tables: dict[int, _TableEntry] = {}
        self._map_cache: dict[bytes, _TableEntry] = {}
        self.mysql_gtids = MysqlGtidSet(gtid) if is_mysql_gtid_text(gtid) else MysqlGtidSet()
        self.maria_gtids = MariaGtidState(gtid) if gtid and not is_mysql_gtid_text(gtid) else MariaGtidState()
        self._flavor = "mysql" if is_mysql_gtid_text(gtid) else ("mariadb" if gtid else "")
        self._start_gtid = gtid
        #: A transaction's start (a GTID event, BEGIN) was read: before it, a TABLE_MAP means the reading began inside
        #: a transaction, whose rows after that point are not the whole of it.
        self._group_started = False
        #: An event of the binlog itself (not the source's artificial ROTATE or the file's FORMAT_DESCRIPTION it sends
        #: first) has been read whole: the start position was an event's start.
        self._past_start = False
        self.last_timestamp = 0
        self.events = 0
        self._reset_transaction()
        self.counts: defaultdict[int, int] = defaultdict(int)
        self._committed = Position(file, pos, gtid)  # where a reader resumes: after the last complete transaction

    # -- transaction state ----------------------------------------------------------------------------------------

    def _reset_transaction(self) -> None:
        self.in_transaction = False
        self._xa_open = False  # an XA transaction: its rows end with XA PREPARE, so none may go out in parts before
        self.changes: list[RowChange] = []
        #: The open transaction's savepoints, oldest first: (name as the server compares it, rows of the transaction
        #: before it). The source logs SAVEPOINT always, and ROLLBACK TO when the rows after it stay in its binlog
        #: (a non-transactional table changed meanwhile): those rows are then not committed data.
        self._savepoints: list[tuple[str, int]] = []
        self._rows_bytes = 0  # of the rows events since the transaction (or its last part) began
        self.statements: list[str] = []
        self.statement_schemas: list[str] = []
        self.trx_gtid = ""
        self.trx_timestamp = 0
        self._pending_maria: tuple[int, int, int] | None = None
        self._pending_mysql: tuple[str, int] | None = None

    @property
    def transaction_open(self) -> bool:
        """Events of a transaction (its GTID at least) were read and its commit not yet."""
        return bool(self.in_transaction or self.changes or self.trx_gtid or self.trx_timestamp)

    def gtid_text(self) -> str:
        if self._flavor == "mariadb":
            return str(self.maria_gtids)
        if self._flavor == "mysql":
            return str(self.mysql_gtids)
        return self._start_gtid

    def position(self) -> Position:
        return Position(self.file, self.pos, self.gtid_text())

    def _commit(self, timestamp: int) -> Transaction:
        if self._pending_maria is not None:
            self.maria_gtids.update(*self._pending_maria)
        if self._pending_mysql is not None:
            self.mysql_gtids.add(*self._pending_mysql)
        trx = Transaction(
            self.changes,
            Position(self.file, self.pos, self.gtid_text()),
            self.trx_timestamp or timestamp,
            self.trx_gtid,
            tuple(self.statements),
            dict(self.counts),
            tuple(self.statement_schemas),
            part=self._part,
            size=self._rows_bytes,
        )
        self.counts.clear()
        self._reset_transaction()
        self._part = 0
        self._emitted = 0
        self._committed = trx.position
        return trx

    def _chunk(self) -> Transaction:
        """The rows so far of an open transaction, as a partial part; the transaction goes on."""
        trx = Transaction(
            self.changes,
            self._committed,
            self.trx_timestamp or self.last_timestamp,
            self.trx_gtid,
            (),
            dict(self.counts),
            partial=True,
            part=self._part,
            size=self._rows_bytes,
        )
        self._part += 1
        self._emitted += len(self.changes)
        self.changes = []
        self._rows_bytes = 0
        self.counts.clear()
        return trx

    def _chunk_due(self) -> bool:
        """The open transaction holds a part's worth of rows (``chunk_rows``) and may be handed on in parts."""
        return (
            (len(self.changes) >= (self.chunk_rows or 0) or self._rows_bytes >= self.chunk_bytes)
            and not self._xa_open
            and (self._committed.file, self._committed.pos) != self.whole_at
        )

    def _tick(self, file: str, pos: int) -> Transaction | None:
        """An empty Transaction that only moves the position (heartbeat), unless a transaction is open."""
        if self.in_transaction or self.changes:
            return None
        if file and file != self.file:
            self.file, self.pos = file, max(pos, 4)
        elif pos > self.pos:
            self.pos = pos
        trx = Transaction([], self.position(), self.last_timestamp, "", (), dict(self.counts))
        self.counts.clear()
        self._committed = trx.position
        # A schema history may re-read tables it lost now that nothing is pending (binlog.schemahistory.caught_up);
        # the layouts cached for their TABLE_MAPs are then out of date.
        caught_up = getattr(self.provider, "caught_up", None)
        if caught_up is not None and caught_up(trx.position):
            self._map_cache.clear()
        return trx

    # -- events ---------------------------------------------------------------------------------------------------

    def feed(self, event: bytes) -> Transaction | None:
        """Decode one whole event; returns the transaction it completes, if any."""
        size_available = len(event)
        if size_available < LOG_EVENT_HEADER_LEN:
            raise TruncatedEventError(
                f"event of {size_available} bytes is shorter than the event header ({self.file} after {self.pos})"
            )
        timestamp, event_type, server_id, size, log_pos, flags = HEADER.unpack_from(event, 0)
        if size != size_available:
            raise TruncatedEventError(
                f"event at {self.file}:{log_pos - size if log_pos else self.pos} says {size} bytes but "
                f"{size_available} arrived"
            )
        self.events += 1
        self.counts[event_type] += 1
        if event_type == FORMAT_DESCRIPTION_EVENT:
            fde = parse_format_description(event)
            has_crc = fde.checksum_alg == BINLOG_CHECKSUM_ALG_CRC32
        else:
            fde = None
            has_crc = self.checksum_alg == BINLOG_CHECKSUM_ALG_CRC32
        end = size
        if has_crc:
            end -= BINLOG_CHECKSUM_LEN
            if end < LOG_EVENT_HEADER_LEN:
                raise TruncatedEventError(f"event at {self.file}:{self.pos} too short for its checksum")
            if self.verify_checksum:
                if event_type == FORMAT_DESCRIPTION_EVENT and flags & LOG_EVENT_BINLOG_IN_USE_F:
                    # The source clears "in use" in place when it closes the file, after computing the checksum.
                    actual = zlib.crc32(event[18:end], zlib.crc32(event[:17] + bytes([flags & 0xFE])))
                    intact = actual == _CRC.unpack_from(event, end)[0]
                else:
                    # The whole event, checksum included, in one call: no slice, no unpack (most events are small,
                    # and the call's overhead is most of their cost).
                    intact = zlib.crc32(event) == CRC32_RESIDUE
                if not intact:
                    expected = _CRC.unpack_from(event, end)[0]
                    actual = zlib.crc32(memoryview(event)[:end])
                    if not self._past_start and event_type != FORMAT_DESCRIPTION_EVENT and self._committed.pos > 4:
                        # The first event read at a start position inside a file: bytes from the middle of an event
                        # read as one (the source sends them as they are) fail here, not as a damaged binlog.
                        raise UnreadablePositionError(
                            self._committed.file,
                            self._committed.pos,
                            f"no event starts there (the bytes read as one fail their checksum: {expected:#010x} "
                            f"against {actual:#010x}), or the binlog is damaged there",
                        )
                    raise ChecksumError(self.file, log_pos - size if log_pos >= size else self.pos, expected, actual)
        if not self._past_start and log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and fde is None:
            self._past_start = True
        if timestamp:
            self.last_timestamp = timestamp
        if event_type in ROWS_EVENTS:
            if log_pos > self.pos:
                self.pos = log_pos
            self._rows(event, event_type, end, timestamp, log_pos)
            self._rows_bytes += size
            if self.chunk_rows is not None and self._chunk_due():
                return self._chunk()
            return None
        if event_type == TRANSACTION_PAYLOAD_EVENT:
            if log_pos > self.pos:
                self.pos = log_pos
            self._rows_bytes += size  # the whole transaction, compressed: its parts are not counted apart
            return self._payload(event, end, timestamp, log_pos)
        if fde is not None:
            self._format_description(fde, timestamp, log_pos, flags)
            return None
        return self._event(event, event_type, server_id, end, timestamp, log_pos, flags)

    def feed_from(self, events: list[bytes], index: int) -> tuple[int, Transaction | None]:
        """Decode ``events`` from ``index`` on until one completes a transaction: (the index after it, that
        transaction), else (``len(events)``, None). The same as ``feed`` of each in turn; the compiled event path
        (``binlog/_events.c``) takes the runs of events it is sure of (TABLE_MAPs met before, rows events, events
        skipped by their size) in one call, and ``feed`` the others."""
        if _compiled_events is not None:
            index, chunk_due = _compiled_events.feed_events(self, events, index)
            if chunk_due and self._chunk_due():
                return index, self._chunk()
            if index == len(events):
                return index, None
        return index + 1, self.feed(events[index])

    def _event(
        self, event: bytes, event_type: int, server_id: int, end: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction | None:
        """Any event but rows events, payloads and FORMAT_DESCRIPTIONs, its header read and its checksum checked
        (``end``: its body's): the method ``_HANDLERS`` names for its type decodes its body."""
        handler = _HANDLERS.get(event_type)
        if handler is None:
            # INTVAR, RAND, USER_VAR, ANNOTATE_ROWS, BINLOG_CHECKPOINT, ROWS_QUERY, STOP and unknown types carry nothing
            # the relay needs: they are skipped by their size.
            self._move_past(log_pos, flags)
            return None
        return handler(self, event[LOG_EVENT_HEADER_LEN:end], event_type, server_id, timestamp, log_pos, flags)

    def _move_past(self, log_pos: int, flags: int) -> None:
        """The position moves past an event that completes nothing, unless the source made it up (artificial)."""
        if log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and log_pos > self.pos:
            self.pos = log_pos

    def _format_description(self, fde: FormatDescription, timestamp: int, log_pos: int, flags: int) -> None:
        """A FORMAT_DESCRIPTION, parsed by ``feed`` (its checksum algorithm says how the event itself is checked).

        Its header's timestamp is when the source began the file: the source sends it as written, also before the
        events of a start inside the file. The same name begun at another time is another file."""
        started = self.file_started
        if started is not None and timestamp and self.file:
            known = started.get(self.file)
            if known and known != timestamp:
                raise BinlogResetError(self.file, known, timestamp)
            started[self.file] = timestamp
        self.fde = fde
        self.checksum_alg = fde.checksum_alg
        if fde.is_mariadb and not self._flavor:
            self._flavor = "mariadb"
        if log_pos and not flags & LOG_EVENT_ARTIFICIAL_F and fde.create_timestamp:
            # A file's first FDE (create_timestamp set) means the source (re)started the file: no table ids survive.
            self.tables.clear()
        self._move_past(log_pos, flags)

    # The handlers of _HANDLERS, one per event type, all called alike (``body``: the event without its header and
    # checksum). Those that complete nothing end in ``_move_past``; the others set the position themselves.

    def _table_map(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        if not self._group_started:
            raise UnreadablePositionError(
                self._committed.file,
                self._committed.pos,
                f"it is inside a transaction (a TABLE_MAP at {self.file}:{log_pos} comes before any transaction "
                "start): its rows from there on are not the whole transaction. Start at the transaction's first event "
                "(its GTID event or BEGIN) or after its commit; SHOW BINLOG EVENTS lists the events",
            )
        body = bytes(body)
        entry = self._map_cache.get(body)
        if entry is None:
            try:
                table_map = parse_table_map(
                    body, self.fde.post_header_len(TABLE_MAP_EVENT), mariadb=self.fde.is_mariadb
                )
            except (IndexError, struct.error, ValueError, OverflowError) as exc:
                raise TruncatedEventError(f"TABLE_MAP event at {self.file}:{log_pos} is malformed: {exc}") from exc
            entry = _TableEntry(table_map, self.resolver.resolve(table_map))
            if len(self._map_cache) > 10000:
                self._map_cache.clear()
            self._map_cache[body] = entry
        self.tables[entry.map.table_id] = entry
        self._move_past(log_pos, flags)

    def _xid(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction:
        if log_pos > self.pos:
            self.pos = log_pos
        parse_xid(body)
        return self._commit(timestamp)

    def _xa_prepare(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction:
        if log_pos > self.pos:
            self.pos = log_pos
        one_phase, xid = xa.parse_xa_prepare(body)
        if one_phase:  # XA COMMIT ... ONE PHASE: committed here
            return self._commit(timestamp)
        prepared, self.changes = self.changes, []
        trx = self._commit(timestamp)
        trx.xa, trx.xid, trx.prepared = "prepare", xid, prepared
        return trx

    def _mariadb_gtid(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        seq, domain, flags2, _commit_id = parse_mariadb_gtid(body)
        self._flavor = "mariadb"
        self._start_open(timestamp)
        self._pending_maria = (domain, server_id, seq)
        self.trx_gtid = f"{domain}-{server_id}-{seq}"
        # Without FL_STANDALONE the GTID event stands for BEGIN; with it, the next statement is the whole group.
        self.in_transaction = not flags2 & FL_STANDALONE
        self._xa_open = bool(flags2 & FL_PREPARED_XA)  # MariaDB's GTID event stands for XA START too
        self._move_past(log_pos, flags)

    def _mysql_gtid(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        sid, gno = parse_mysql_gtid(body)
        self._flavor = "mysql"
        self._start_open(timestamp)
        self._pending_mysql = (sid, gno)
        self.trx_gtid = f"{sid}:{gno}"
        self._move_past(log_pos, flags)

    def _anonymous_gtid(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        self._start_open(timestamp)
        self._move_past(log_pos, flags)

    def _gtid_list(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        self._flavor = "mariadb"
        self.maria_gtids.replace(parse_gtid_list(body))
        self._move_past(log_pos, flags)

    def _previous_gtids(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        self._flavor = "mysql"
        self.mysql_gtids.union(MysqlGtidSet.decode(body))
        self._move_past(log_pos, flags)

    def _rotate(self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int) -> None:
        position, name = parse_rotate(body, self.fde.post_header_len(ROTATE_EVENT))
        if name != self.file:
            self.tables.clear()
        self.file, self.pos = name, position

    def _heartbeat(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction | None:
        return self._tick(bytes(body).decode("utf-8", "replace"), log_pos)

    def _heartbeat_v2(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction | None:
        name, position = parse_heartbeat_v2(body)
        return self._tick(name, position or log_pos)

    def _start_encryption(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> None:
        raise BinlogError(f"{self.file} is encrypted (binlog encryption); read it through the server instead")

    def _start_open(self, timestamp: int) -> None:
        self._group_started = True
        if self.changes or self.in_transaction:
            # A transaction that never committed (the source crashed, or we joined mid-stream) is dropped: the binlog
            # contains only committed transactions, so this cannot happen with a healthy source.
            logger("binlog.parser").warning(
                "transaction at %s:%d had no commit event; dropping %d changes", *self._where(), len(self.changes)
            )
            self._reset_transaction()
        self.trx_timestamp = timestamp

    def _where(self) -> tuple[str, int]:
        return self.file, self.pos

    def _query(
        self, body: bytes, event_type: int, server_id: int, timestamp: int, log_pos: int, flags: int
    ) -> Transaction | None:
        if log_pos > self.pos:
            self.pos = log_pos
        schema, query, sql_mode = parse_query(
            body,
            self.fde.post_header_len(QUERY_EVENT),
            uncompress=_uncompress_block if event_type == QUERY_COMPRESSED_EVENT else None,
        )
        keyword = _statement_keyword(query)
        if keyword == "BEGIN" or (keyword == "XA" and query.split()[1:2] in (["START"], ["BEGIN"])):
            self._group_started = True
            self._xa_open = keyword == "XA"
            if self.changes:
                self._start_open(timestamp)  # the previous transaction never committed: drop its changes
            if not self.in_transaction:
                self.trx_timestamp = self.trx_timestamp or timestamp
            self.in_transaction = True
            return None
        if keyword == "COMMIT" or (keyword == "ROLLBACK" and "TO" not in query.upper().split()[1:3]):
            # ROLLBACK is logged only when non-transactional changes in it stayed: they are committed data.
            return self._commit(timestamp)
        if keyword in ("SAVEPOINT", "ROLLBACK", "RELEASE"):
            self._savepoint(keyword, query)
            return None
        if keyword == "XA":
            words = query.upper().split()
            if len(words) < 2 or words[1] not in ("COMMIT", "PREPARE", "ROLLBACK"):
                return None  # XA END
            ended = xa.ending(query) if words[1] != "PREPARE" and not self.changes else None
            trx = self._commit(timestamp)  # with rows of its own: a one-phase XA COMMIT
            if ended is not None:
                trx.xa, trx.xid = ended[0].lower(), ended[1]
            elif words[1] != "PREPARE" and not trx.changes:
                logger("binlog.parser").warning(
                    "%s at %s:%d names its XA transaction in a form this reader cannot match to its prepare: %r",
                    words[1],
                    *self._where(),
                    query[:200],
                )
            return trx
        self.statements.append(query)
        self.statement_schemas.append(schema)
        if keyword in ROW_CHANGING_KEYWORDS:
            logger("binlog.parser").warning(
                "%r at %s:%d changed rows as a statement: the binlog holds no row changes of it to hand on",
                query[:300],
                *self._where(),
            )
        if keyword in _DDL_PREFIXES:
            self.schema_changed()
            follow = getattr(self.provider, "statement", None)  # a schema history (binlog.schemahistory) follows DDL
            if follow is not None:
                where = Position(self.file, self.pos, self.trx_gtid)
                follow(schema, query, where, sql_mode, session=query_thread_id(body), error_code=query_error_code(body))
        if not self.in_transaction:
            self.trx_timestamp = self.trx_timestamp or timestamp
            return self._commit(timestamp)
        return None

    def _savepoint(self, keyword: str, query: str) -> None:
        """SAVEPOINT, ROLLBACK TO (SAVEPOINT) and RELEASE SAVEPOINT: the rows a rollback to a savepoint takes back
        leave the transaction (the source logs it only when they stayed in its binlog, after a change it could not
        take back: that change stays)."""
        tokens = tokenize(query)
        words = tokens[statement_start(tokens) + 1 :]  # past SAVEPOINT, RELEASE [SAVEPOINT], ROLLBACK [WORK] TO
        for optional in ("WORK", "TO", "SAVEPOINT"):
            if len(words) > 1 and words[0].is_word(optional):
                words = words[1:]
        if not words or words[0].kind not in ("word", "name"):
            raise BinlogError(f"{query[:200]!r} at {self.file}:{self.pos} names no savepoint this reader can read")
        name = _savepoint_name(words[0].text)
        marks = [index for index, (held, _rows) in enumerate(self._savepoints) if held == name]
        if keyword == "SAVEPOINT":
            if marks:  # set again: the savepoint moves, the others stay
                del self._savepoints[marks[-1]]
            self._savepoints.append((name, self._emitted + len(self.changes)))
            return
        if not marks:
            raise BinlogError(
                f"{query[:200]!r} at {self.file}:{self.pos} names a savepoint this transaction never set: which of "
                "its rows it took back cannot be told"
            )
        index = marks[-1]
        rows = self._savepoints[index][1]
        if keyword == "RELEASE":
            del self._savepoints[index:]
            return
        del self._savepoints[index + 1 :]  # a rollback to a savepoint ends those set after it, not itself
        if rows < self._emitted:
            raise RolledBackPartError(
                self._committed,
                f"{query[:200]!r} at {self.file}:{self.pos} takes back rows of the transaction after "
                f"{self._committed} that were handed on in parts",
            )
        del self.changes[rows - self._emitted :]

    def schema_changed(self) -> None:
        """A DDL statement passed: forget cached table layouts and names so later events are read afresh."""
        self._map_cache.clear()
        if self.provider is not None:
            self.provider.invalidate()

    def _rows(self, event: bytes, event_type: int, end: int, timestamp: int, log_pos: int, first_row: int = 0) -> int:
        """Decode a rows event into ``self.changes``, numbering its rows from ``first_row``; returns how many."""
        post_len = self.fde.post_header_len(event_type)
        p = LOG_EVENT_HEADER_LEN
        if post_len == 6:
            table_id = int.from_bytes(event[p : p + 4], "little")
        else:
            table_id = int.from_bytes(event[p : p + 6], "little")
        p += post_len
        if event_type in ROWS_EVENTS_V2:
            extra_len = int.from_bytes(event[p - 2 : p], "little")
            p += extra_len - 2  # the length counts its own two bytes
        entry = self.tables.get(table_id)
        if entry is None:
            raise BinlogError(
                f"rows event at {self.file}:{log_pos} refers to table id {table_id}, which no TABLE_MAP announced"
            )
        ncols, p = lenenc_int(event, p)
        info = entry.info
        if ncols != len(info.columns):
            raise BinlogError(
                f"rows event at {self.file}:{log_pos} has {ncols} columns, its TABLE_MAP "
                f"({info.schema}.{info.table}) {len(info.columns)}"
            )
        bitmap_len = (ncols + 7) >> 3
        columns = (1 << ncols) - 1  # bits past the last column (the bitmap's padding) name no column
        present = int.from_bytes(event[p : p + bitmap_len], "little") & columns
        p += bitmap_len
        update = event_type in UPDATE_ROWS_EVENTS
        if update:
            present_after = int.from_bytes(event[p : p + bitmap_len], "little") & columns
            p += bitmap_len
        if p > end:
            raise TruncatedEventError(f"rows event at {self.file}:{log_pos} ends inside its header")
        if not present and not (update and present_after) and p < end:
            # A row of no columns takes no bytes: its rows would never end (every decoder would loop for ever).
            raise TruncatedEventError(
                f"rows event at {self.file}:{log_pos} ({info.schema}.{info.table}) has rows but no column in its "
                "row image"
            )
        if event_type in COMPRESSED_ROWS_EVENTS:
            event = _uncompress_block(event[p:end])
            p, end = 0, len(event)
        elif not isinstance(event, bytes):
            event = bytes(event)
        kind = KIND_UPDATE if update else (KIND_DELETE if event_type in DELETE_ROWS_EVENTS else KIND_INSERT)
        if event_type == PARTIAL_UPDATE_ROWS_EVENT:
            decode = entry.partial_update_decoder(present, present_after)
        else:
            decode = entry.rows_decoder(kind, present, present_after if update else 0)
        changes = self.changes
        if not self.in_transaction and not changes:
            self.trx_timestamp = self.trx_timestamp or timestamp
        self.in_transaction = True
        try:
            rows, p = decode(
                event,
                p,
                end,
                info.schema,
                info.table,
                info.names,
                self.file,
                log_pos,
                timestamp,
                self.trx_gtid,
                info,
                first_row,
            )
        except (IndexError, struct.error, ValueError, OverflowError, zlib.error) as exc:
            raise TruncatedEventError(
                f"rows event at {self.file}:{log_pos} ({info.schema}.{info.table}) is malformed: {exc}"
            ) from exc
        if p != end:
            raise TruncatedEventError(
                f"rows event at {self.file}:{log_pos} ({info.schema}.{info.table}): last row runs {p - end} bytes "
                "past the event"
            )
        changes += rows
        return len(rows)

    def _payload(self, event: bytes, end: int, timestamp: int, log_pos: int) -> Transaction | None:
        """A TRANSACTION_PAYLOAD: its events, decoded in order as if they stood in the binlog themselves.

        As MySQL reports them, every event inside has the payload's own end position (their headers say 0), so all
        the rows of the transaction share one position and are told apart by their row index, which runs on across
        the rows events of the payload. The inner events carry no checksum (the payload's covers them). The
        transaction comes out whole when its commit inside the payload is decoded: a large one is not split into
        parts here (see ``chunk_rows``), since one event yields at most one Transaction.
        """
        from binlog.payload import parse_transaction_payload, split_events, uncompress_payload  # MySQL 8.0.20+ only

        start = log_pos - len(event) if log_pos >= len(event) else self.pos
        where = f"transaction payload in {self.file} at position {start}"
        try:
            inner = split_events(uncompress_payload(parse_transaction_payload(event[LOG_EVENT_HEADER_LEN:end])))
        except BinlogError as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        result = None
        row = 0
        for index, data in enumerate(inner):
            if result is not None:
                raise BinlogError(f"{where}: event {index} follows the commit inside the payload")
            inner_time, event_type, server_id, size, _zero, flags = HEADER.unpack_from(data, 0)
            self.events += 1
            self.counts[event_type] += 1
            inner_time = inner_time or timestamp
            if event_type in ROWS_EVENTS:
                row += self._rows(data, event_type, size, inner_time, log_pos, row)
            elif event_type in _NOT_IN_PAYLOADS:
                raise BinlogError(f"{where}: a {EVENT_TYPE_NAMES[event_type]} cannot be inside a payload")
            else:
                result = self._event(data, event_type, server_id, size, inner_time, log_pos, flags)
        return result


# Events that would change the decoder's file, format or nesting: never part of a transaction's payload.
_NOT_IN_PAYLOADS = frozenset({FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT, TRANSACTION_PAYLOAD_EVENT})

# The decoder's method for each event type that reaches ``_event``; any other type is skipped.
_HANDLERS: dict[int, Callable[[EventDecoder, bytes, int, int, int, int, int], Transaction | None]] = {
    TABLE_MAP_EVENT: EventDecoder._table_map,
    QUERY_EVENT: EventDecoder._query,
    QUERY_COMPRESSED_EVENT: EventDecoder._query,
    XID_EVENT: EventDecoder._xid,
    XA_PREPARE_LOG_EVENT: EventDecoder._xa_prepare,
    GTID_EVENT: EventDecoder._mariadb_gtid,
    GTID_LOG_EVENT: EventDecoder._mysql_gtid,
    ANONYMOUS_GTID_LOG_EVENT: EventDecoder._anonymous_gtid,
    GTID_LIST_EVENT: EventDecoder._gtid_list,
    PREVIOUS_GTIDS_LOG_EVENT: EventDecoder._previous_gtids,
    ROTATE_EVENT: EventDecoder._rotate,
    HEARTBEAT_LOG_EVENT: EventDecoder._heartbeat,
    HEARTBEAT_LOG_EVENT_V2: EventDecoder._heartbeat_v2,
    START_ENCRYPTION_EVENT: EventDecoder._start_encryption,
}


def configure_compiled_events(module: ModuleType | None) -> ModuleType | None:
    """binlog/_events.c, told which events it takes: TABLE_MAPs (those met before), the rows events of binlog
    versions 1 and 2 uncompressed, and the events ``_event`` skips by their size; ``feed`` decodes the others."""
    if module is None:
        return None
    takes, kinds, v2, update = (bytearray(256) for _ in range(4))
    for event_type in range(256):
        if event_type not in _HANDLERS and event_type not in _DECODED_BY_FEED:
            takes[event_type] = _COMPILED_SKIP
    takes[TABLE_MAP_EVENT] = _COMPILED_TABLE_MAP
    for event_type in _COMPILED_ROWS_EVENTS:
        takes[event_type] = _COMPILED_ROWS
        update[event_type] = event_type in UPDATE_ROWS_EVENTS
        v2[event_type] = event_type in ROWS_EVENTS_V2
        kinds[event_type] = (
            KIND_UPDATE if update[event_type] else KIND_DELETE if event_type in DELETE_ROWS_EVENTS else KIND_INSERT
        )
    module.configure(bytes(takes), bytes(kinds), bytes(v2), bytes(update), BINLOG_CHECKSUM_ALG_CRC32)
    return module


# What binlog/_events.c does with an event type (its K_ values): 0, leave it to ``feed``.
_COMPILED_SKIP, _COMPILED_TABLE_MAP, _COMPILED_ROWS = 1, 2, 3
_COMPILED_ROWS_EVENTS = frozenset(
    {
        WRITE_ROWS_EVENT_V1,
        UPDATE_ROWS_EVENT_V1,
        DELETE_ROWS_EVENT_V1,
        WRITE_ROWS_EVENT_V2,
        UPDATE_ROWS_EVENT_V2,
        DELETE_ROWS_EVENT_V2,
    }
)
# Decoded by ``feed`` before ``_event`` (never skipped by their size).
_DECODED_BY_FEED = ROWS_EVENTS | {TRANSACTION_PAYLOAD_EVENT, FORMAT_DESCRIPTION_EVENT}
#: The compiled event path, or None where it is not built or RELAY_NATIVE=0 turns it off (``feed`` of each event).
_compiled_events = configure_compiled_events(native.events)


def _uncompress_block(data: bytes) -> bytes:
    """MariaDB's compressed event payload: header byte 0x80|alg<<4|width, big-endian length, zlib stream."""
    if not data or not data[0] & 0x80:
        raise BinlogError("compressed event payload has no compression header")
    width = data[0] & 0x07
    try:
        return zlib.decompress(bytes(data[1 + width :]))
    except zlib.error as exc:
        raise BinlogError(f"compressed event payload does not decompress: {exc}") from exc


def _savepoint_name(name: str) -> str:
    """A savepoint's name as SAVEPOINT and ROLLBACK TO compare it: without case, a character at a time."""
    return "".join(upper if len(upper := ch.upper()) == 1 else ch for ch in name)
