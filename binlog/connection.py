"""The replication connection: PyMySQL for the handshake and queries, then the binlog dump protocol on its socket.

PyMySQL does the handshake, so every authentication plugin it has (``mysql_native_password``,
``caching_sha2_password`` with or without TLS, ``sha256_password``, ``ed25519``...) and TLS work unchanged. After
COM_BINLOG_DUMP the server only sends packets, one event each (``00`` + event), an error (``ff``) or, for a
non-blocking dump at the end of the binlog, EOF (``fe``); this module reads those itself from PyMySQL's buffered socket
file, reassembling events larger than one 16 MiB packet.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
from collections.abc import Iterator
from typing import Any, cast

import pymysql

from binlog import native
from binlog.constants import (
    BINLOG_CHECKSUM_ALG_CRC32,
    BINLOG_CHECKSUM_ALG_OFF,
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_THROUGH_GTID,
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_REGISTER_SLAVE,
    ER_MASTER_FATAL_ERROR_READING_BINLOG,
    MARIA_SLAVE_CAPABILITY_GTID,
)
from binlog.errors import (
    AccessDeniedError,
    BinlogError,
    ConnectionLostError,
    PurgedPositionError,
    ServerError,
    UnreadablePositionError,
)
from binlog.gtid import MysqlGtidSet
from binlog.position import Position
from binlog.settings import SourceSettings

log = logging.getLogger("binlog.connection")

MAX_PACKET_LEN = 0xFFFFFF

# Refusals that no retry can fix: the login (wrong user or password, host not allowed, database not granted) or a
# missing privilege. The stream does not retry them (AccessDeniedError is neither a ConnectionLostError nor a
# ServerError), so a misconfigured relay stops at once instead of retrying forever.
LOGIN_REFUSED = frozenset({1044, 1045, 1130, 1698})  # DBACCESS_DENIED, ACCESS_DENIED, HOST_NOT_PRIVILEGED, NO_PASSWORD
ER_ERROR_WHEN_EXECUTING_COMMAND = 1220  # SHOW BINLOG EVENTS: "Wrong offset or I/O error"
PRIVILEGE_MISSING = 1227  # ER_SPECIFIC_ACCESS_DENIED_ERROR: "you need (at least one of) the X privilege(s)"
_NEEDED = re.compile(r"the (?P<privileges>[A-Z ,_]+?) privilege")
#: Error 1236's messages that mean the source no longer has what was asked for (MariaDB's and MySQL's wordings): a
#: file not in its binlog index, a GTID not in its binlogs, binlogs with the needed GTIDs purged; the next file gone
#: from the index while the dump read (PURGE or RESET MASTER meanwhile).
_PURGED = re.compile(
    r"could not find first log file name|could not find next log|not in the master's binlog|could not find gtid state"
    r"|purged",
    re.IGNORECASE,
)
_HEADER = struct.Struct("<HBB")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("-", 1)[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def register_slave_payload(server_id: int, host: str, user: str, password: str, port: int) -> bytes:
    """COM_REGISTER_SLAVE: server id, then 1-byte-length host, user, password, u16 port, u32 rank, u32 master id."""
    h, u, p = (x.encode("utf-8")[:255] for x in (host, user, password))
    return (
        bytes([COM_REGISTER_SLAVE])
        + struct.pack("<I", server_id)
        + bytes([len(h)])
        + h
        + bytes([len(u)])
        + u
        + bytes([len(p)])
        + p
        + struct.pack("<HII", port & 0xFFFF, 0, 0)
    )


def binlog_dump_payload(file: str, pos: int, server_id: int, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP: u32 position, u16 flags, u32 server id, file name (to the end of the packet)."""
    return bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", pos & 0xFFFFFFFF, flags, server_id) + file.encode("utf-8")


def binlog_dump_gtid_payload(gtid_set: str, server_id: int, file: str = "", pos: int = 4, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP_GTID (MySQL): u16 flags, u32 server id, u32 name length, name, u64 position, then with
    BINLOG_THROUGH_GTID a u32 length and the encoded GTID set."""
    name = file.encode("utf-8")
    data = MysqlGtidSet(gtid_set).encode() if gtid_set else b""
    if data:
        flags |= BINLOG_THROUGH_GTID
    out = bytes([COM_BINLOG_DUMP_GTID]) + struct.pack("<HII", flags, server_id, len(name)) + name
    out += struct.pack("<Q", pos)
    if flags & BINLOG_THROUGH_GTID:
        out += struct.pack("<I", len(data)) + data
    return out


class ReplicationConnection:
    """One connection to the source, used for set-up queries and then for one binlog dump."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.conn: Any = None
        self._rfile: Any = None
        self.version = ""
        self.is_mariadb = False
        self.checksum_alg = BINLOG_CHECKSUM_ALG_OFF
        self.dumping = False

    # -- set-up ---------------------------------------------------------------------------------------------------

    def connect(self) -> None:
        args = self.settings.connect_args()
        args.setdefault("read_timeout", self.settings.effective_read_timeout)
        try:
            self.conn = pymysql.connect(**args)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in LOGIN_REFUSED:
                raise self._denied(code, _server_text(exc), "") from exc
            raise ConnectionLostError(f"cannot connect to {self.settings.host}:{self.settings.port}: {exc}") from exc
        self.version = self.conn.get_server_info() or ""
        self.is_mariadb = "mariadb" in self.version.lower()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def master_status_statement(self) -> str:
        if not self.is_mariadb and _version_tuple(self.version) >= (8, 2):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    def binary_logs(self) -> list[tuple[str, int]] | None:
        """The source's binlog files and their sizes, oldest first (SHOW BINARY LOGS); None when the user may not
        list them (REPLICATION CLIENT, BINLOG MONITOR on MariaDB)."""
        try:
            rows = self.query("SHOW BINARY LOGS")
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in (PRIVILEGE_MISSING, *LOGIN_REFUSED):
                return None
            raise
        return [(_text(row[0]), int(row[1])) for row in rows]

    def event_at(self, file: str, pos: int) -> str | None:
        """The type of the event that starts at ``file:pos`` as SHOW BINLOG EVENTS names it ("Gtid", "Table_map"...);
        "" when no event starts there (the source says "Wrong offset"), None at the file's end or when the user may
        not ask."""
        try:
            rows = self.query(f"SHOW BINLOG EVENTS IN %s FROM {int(pos)} LIMIT 1", file)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == ER_ERROR_WHEN_EXECUTING_COMMAND and "offset" in _server_text(exc).lower():
                return ""
            if code in (PRIVILEGE_MISSING, *LOGIN_REFUSED):
                return None
            raise
        return _text(rows[0][2]) if rows else None

    def current_position(self) -> Position:
        """The source's current end of binlog (and, where available, its GTID state there)."""
        try:
            rows = self.query(self.master_status_statement())
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in (PRIVILEGE_MISSING, *LOGIN_REFUSED):
                raise self._denied(
                    exc.args[0], _server_text(exc), "REPLICATION CLIENT (BINLOG MONITOR on MariaDB)"
                ) from exc
            raise
        if not rows:
            raise BinlogError("the source has no binary log (log_bin is OFF, or the user lacks REPLICATION CLIENT)")
        row = rows[0]
        file, pos = _text(row[0]), int(row[1])
        gtid = ""
        if self.is_mariadb:
            gtid = self.gtid_at(file, pos)
        elif len(row) >= 5 and row[4]:
            gtid = _text(row[4]).replace("\n", "")
        return Position(file, pos, gtid)

    def gtid_at(self, file: str, pos: int) -> str:
        """MariaDB: the GTID state at a binlog coordinate (BINLOG_GTID_POS); "" when unknown."""
        if not self.is_mariadb:
            return ""
        try:
            rows = self.query("SELECT BINLOG_GTID_POS(%s, %s)", file, pos)
        except pymysql.err.MySQLError:
            return ""
        return _text(rows[0][0]) if rows and rows[0][0] is not None else ""

    def prepare(self, heartbeat_seconds: float) -> None:
        """Session variables the dump thread reads: checksum, capability, heartbeat period."""
        try:
            rows = self.query("SELECT @@global.binlog_checksum")
            algorithm = _text(rows[0][0]).upper() if rows and rows[0][0] is not None else "NONE"
            aware = True
        except pymysql.err.MySQLError:
            algorithm, aware = "NONE", False  # servers before checksums (MySQL < 5.6.2)
        if aware:
            # Tells the source we read checksums: it then sends events as written, CRC or not. Said even when it
            # writes none now: its older files may have them, and to a reader that says nothing it refuses those.
            self.query("SET @master_binlog_checksum = @@global.binlog_checksum")
            self.query("SET @source_binlog_checksum = @@global.binlog_checksum")
        self.checksum_alg = BINLOG_CHECKSUM_ALG_CRC32 if algorithm == "CRC32" else BINLOG_CHECKSUM_ALG_OFF
        if self.is_mariadb:
            # Without this MariaDB rewrites its GTID events into BEGIN queries for "old" replicas.
            self.query(f"SET @mariadb_slave_capability = {MARIA_SLAVE_CAPABILITY_GTID}")
        if heartbeat_seconds > 0:
            nanoseconds = int(heartbeat_seconds * 1_000_000_000)
            self.query(f"SET @master_heartbeat_period = {nanoseconds}")
            self.query(f"SET @source_heartbeat_period = {nanoseconds}")

    def register(self, server_id: int) -> None:
        host = socket.gethostname()[:60]
        payload = register_slave_payload(server_id, host, self.settings.user, "", 0)
        self._command(payload)
        try:
            self.conn._read_ok_packet()
        except pymysql.err.MySQLError as exc:
            code = getattr(exc, "args", (0,))[0]
            # MariaDB answers a register without REPLICATION SLAVE with 1045 ("Access denied for user"), not 1227.
            if code == PRIVILEGE_MISSING or code in LOGIN_REFUSED:
                raise self._denied(code, _server_text(exc), "REPLICATION SLAVE") from exc
            raise ServerError(code, str(exc)) from exc

    def _command(self, payload: bytes) -> None:
        conn = self.conn
        conn._next_seq_id = 0
        # The command fits one packet (its only variable part is a file name or a GTID set).
        conn._write_bytes(struct.pack("<I", len(payload))[:3] + b"\x00" + payload)
        conn._next_seq_id = 1

    def start_dump(self, start: Position, server_id: int, *, blocking: bool, use_gtid: bool) -> None:
        flags = 0 if blocking else BINLOG_DUMP_NON_BLOCK
        by_gtid = bool(start.gtid) and (use_gtid or not start.file)
        if by_gtid and self.is_mariadb:
            self.query("SET @slave_connect_state = %s", start.gtid)
            self.query("SET @slave_gtid_strict_mode = 0")
            self.query("SET @slave_gtid_ignore_duplicates = 0")
            payload = binlog_dump_payload("", 4, server_id, flags)
        elif by_gtid:
            payload = binlog_dump_gtid_payload(start.gtid, server_id, "", 4, flags)
        else:
            payload = binlog_dump_payload(start.file, start.pos, server_id, flags)
        self._command(payload)
        # PyMySQL's write switched the socket to the (unlimited) write timeout: reads must time out again.
        timeout = self.settings.effective_read_timeout
        self.conn._sock.settimeout(timeout)
        self.conn._current_timeout = timeout
        self.dumping = True
        self._rfile = self.conn._rfile
        self._start = start

    # -- the event stream -----------------------------------------------------------------------------------------

    def _read_exact(self, n: int) -> bytes:
        data: bytes | None = self._rfile.read(n)
        if data is None or len(data) < n:
            raise ConnectionLostError(
                f"the source closed the connection in the middle of a packet ({len(data or b'')} of {n} bytes)"
            )
        return data

    def read_events(self) -> list[bytes] | None:
        """The events that have arrived, at least one (waiting for it), or None at the end of a non-blocking dump.

        The compiled event path cuts the whole event packets the connection's buffer holds in one call; a packet
        not all there yet, or any other (an error, the end, an event of 16 MiB or more), is read by ``read_event``."""
        split = native.events.split_packets if native.events is not None else None
        if split is not None:
            with self._reading():
                buffered = self._rfile.peek(1)  # what the buffer holds, filled by one read of the socket if empty
            events, used = split(buffered)
            if events:
                self._rfile.read(used)  # already buffered: no wait
                return cast(list[bytes], events)
        event = self.read_event()
        return None if event is None else [event]

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Failures of reading the dump, as the stream's errors."""
        try:
            yield
        except TimeoutError as exc:
            raise ConnectionLostError(
                f"no data from the source for {self.settings.effective_read_timeout:.1f}s (heartbeats missing)"
            ) from exc
        except OSError as exc:
            raise ConnectionLostError(f"replication connection failed: {exc}") from exc
        except ValueError as exc:  # reading a file closed by close() from another thread
            raise ConnectionLostError(f"replication connection closed: {exc}") from exc

    def read_event(self) -> bytes | None:
        """The next event, or None at the end of a non-blocking dump."""
        with self._reading():
            header = self._read_exact(4)
            low, high, _seq = _HEADER.unpack(header)
            length = low | high << 16
            payload = self._read_exact(length)
            if length == MAX_PACKET_LEN:
                # An event of 16 MiB or more continues in further packets until a shorter one.
                parts = [payload]
                while length == MAX_PACKET_LEN:
                    low, high, _seq = _HEADER.unpack(self._read_exact(4))
                    length = low | high << 16
                    parts.append(self._read_exact(length))
                payload = b"".join(parts)
        if not payload:
            raise ConnectionLostError("empty packet from the source")
        marker = payload[0]
        if marker == 0x00:
            return payload[1:]
        if marker == 0xFE and len(payload) < 9:
            return None
        if marker == 0xFF:
            self._raise_error(payload)
        raise BinlogError(f"unexpected packet from the source (first byte {marker:#x})")

    def _raise_error(self, payload: bytes) -> None:
        code = int.from_bytes(payload[1:3], "little")
        message = payload[3:]
        if message[:1] == b"#":
            message = message[6:]
        text = message.decode("utf-8", "replace")
        if code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
            # One code for every reason the dump stops: only a file or GTID the source no longer has is "purged"
            # (the changes since are lost to the reader); the others are a wrong position or a broken binlog.
            if _PURGED.search(text):
                raise PurgedPositionError(self._start.file, f"source error {code}: {text}")
            raise UnreadablePositionError(self._start.file, self._start.pos, f"source error {code}: {text}")
        if code == PRIVILEGE_MISSING or code in LOGIN_REFUSED:
            raise self._denied(code, text, "REPLICATION SLAVE")
        raise ServerError(code, text)

    def _denied(self, code: int, text: str, needed: str) -> AccessDeniedError:
        """The refusal, naming the privilege the server's message names, else the one the operation needs."""
        match = _NEEDED.search(text) if code == PRIVILEGE_MISSING else None
        return AccessDeniedError(code, self.settings.user, match["privileges"] if match else needed, text)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        # A socket in the middle of a dump cannot be told to quit politely: shut it down (which also wakes a reader
        # blocked in another thread) and close it.
        with contextlib.suppress(OSError):
            if conn._sock is not None:
                conn._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):  # the connection may be in any state here
            conn._force_close()


def _server_text(exc: BaseException) -> str:
    """The server's message of a PyMySQL error (its args are (code, message))."""
    return str(exc.args[1]) if len(exc.args) > 1 else str(exc)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
