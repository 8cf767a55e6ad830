"""The MySQL side of the replication protocol, on bytes: a scripted server speaks MySQL 8.3's handshake with
``caching_sha2_password``, answers the set-up queries, and streams a MySQL binlog (MySQL GTID events, ROWS v2,
binary JSON; event bodies captured from real servers, see tests/helpers/binlog_events.py).

The server follows the documented packet layouts field by field: 3-byte length + sequence number framing,
HandshakeV10, HandshakeResponse41, the caching_sha2_password fast path (scramble = SHA256(password) XOR
SHA256(SHA256(SHA256(password)) + nonce); 0x01 0x03 = fast auth success), text result sets, OK/ERR/EOF packets.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from binlog import BinlogStream, Position, SourceSettings
from binlog.connection import ReplicationConnection, binlog_dump_gtid_payload
from binlog.constants import (
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_REGISTER_SLAVE,
    FORMAT_DESCRIPTION_EVENT,
    GTID_LOG_EVENT,
    HEARTBEAT_LOG_EVENT,
    LOG_EVENT_ARTIFICIAL_F,
    PREVIOUS_GTIDS_LOG_EVENT,
    QUERY_EVENT,
    ROTATE_EVENT,
    TABLE_MAP_EVENT,
    WRITE_ROWS_EVENT_V2,
    XID_EVENT,
)
from binlog.errors import AccessDeniedError, ConnectionLostError
from binlog.gtid import MysqlGtidSet
from tests.helpers.binlog_events import CAPTURED, FixedSchema, fde_body, make_event, query_body

PASSWORD = "s3cret-sha2"
NONCE = bytes(range(65, 85))  # 20 bytes of auth-plugin data
SID = "5aa72a7f-44a8-11ea-947f-0242ac190002"
EXECUTED = f"{SID}:1-258"

CLIENT_LONG_PASSWORD = 0x1
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_PROTOCOL_41 = 0x200
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x200000
CAPABILITIES = (
    CLIENT_LONG_PASSWORD
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
)


def sha2_scramble(password: str, nonce: bytes) -> bytes:
    p1 = hashlib.sha256(password.encode()).digest()
    p2 = hashlib.sha256(hashlib.sha256(p1).digest() + nonce).digest()
    return bytes(a ^ b for a, b in zip(p1, p2, strict=True))


def lenenc(data: bytes) -> bytes:
    assert len(data) < 251
    return bytes([len(data)]) + data


class ScriptedMySQL:
    """One-connection-at-a-time MySQL 8.3 look-alike."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.queries: list[str] = []
        self.commands: list[bytes] = []
        self.auth_ok: list[bool] = []
        threading.Thread(target=self._serve, daemon=True).start()

    # framing
    def _send(self, conn: socket.socket, seq: int, payload: bytes) -> int:
        conn.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload)
        return seq + 1

    def _recv(self, conn: socket.socket) -> tuple[int, bytes]:
        header = self._exact(conn, 4)
        length = header[0] | header[1] << 8 | header[2] << 16
        return header[3], self._exact(conn, length)

    @staticmethod
    def _exact(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("client went away")
            data += chunk
        return data

    def _ok(self, conn: socket.socket, seq: int) -> int:
        return self._send(conn, seq, b"\x00\x00\x00\x02\x00\x00\x00")  # affected 0, insert id 0, autocommit, 0 warnings

    def _error(self, conn: socket.socket, seq: int, code: int, message: str) -> int:
        return self._send(conn, seq, b"\xff" + struct.pack("<H", code) + b"#HY000" + message.encode())

    def _result(self, conn: socket.socket, seq: int, names: list[str], rows: list[list[str]]) -> int:
        seq = self._send(conn, seq, bytes([len(names)]))
        for name in names:
            column = (
                lenenc(b"def") + lenenc(b"") + lenenc(b"") + lenenc(b"") + lenenc(name.encode()) + lenenc(b"")
                + b"\x0c" + struct.pack("<HIBHB", 45, 255, 253, 0, 0) + b"\x00\x00"
            )  # fmt: skip
            seq = self._send(conn, seq, column)
        seq = self._send(conn, seq, b"\xfe\x00\x00\x02\x00")
        for row in rows:
            seq = self._send(conn, seq, b"".join(lenenc(v.encode()) for v in row))
        return self._send(conn, seq, b"\xfe\x00\x00\x02\x00")

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                self._session(conn)
            except (ConnectionError, OSError):
                pass
            finally:
                conn.close()

    def _session(self, conn: socket.socket) -> None:
        greeting = (
            b"\x0a" + b"8.3.0\x00" + struct.pack("<I", 7) + NONCE[:8] + b"\x00"
            + struct.pack("<H", CAPABILITIES & 0xFFFF) + bytes([255]) + struct.pack("<H", 0x0002)
            + struct.pack("<H", CAPABILITIES >> 16) + bytes([21]) + bytes(10) + NONCE[8:] + b"\x00"
            + b"caching_sha2_password\x00"
        )  # fmt: skip
        self._send(conn, 0, greeting)
        seq, response = self._recv(conn)
        caps = struct.unpack_from("<I", response, 0)[0]
        pos = 32
        user_end = response.index(b"\x00", pos)
        pos = user_end + 1
        length = response[pos]
        auth = response[pos + 1 : pos + 1 + length]
        good = auth == sha2_scramble(PASSWORD, NONCE) and caps & CLIENT_PROTOCOL_41
        self.auth_ok.append(bool(good))
        if not good:
            self._error(conn, seq + 1, 1045, "Access denied for user")
            return
        seq = self._send(conn, seq + 1, b"\x01\x03")  # caching_sha2 fast auth succeeded
        self._ok(conn, seq)
        while True:
            _seq, packet = self._recv(conn)
            command, data = packet[0], packet[1:]
            if command == 0x03:
                query = data.decode()
                self.queries.append(query)
                if query.upper().startswith("SHOW MASTER STATUS"):
                    self._error(conn, 1, 1064, "You have an error in your SQL syntax (removed in 8.4)")
                elif query == "SHOW BINARY LOG STATUS":
                    names = ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"]
                    self._result(conn, 1, names, [["mysql-bin.000003", "4", "", "", EXECUTED]])
                elif query == "SELECT @@global.binlog_checksum":
                    self._result(conn, 1, ["@@global.binlog_checksum"], [["CRC32"]])
                else:
                    self._ok(conn, 1)
            elif command == COM_REGISTER_SLAVE:
                self.commands.append(packet)
                self._ok(conn, 1)
            elif command in (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID):
                self.commands.append(packet)
                seq = 1
                for event in self.events:
                    seq = self._send(conn, seq, b"\x00" + event)
                flags = struct.unpack_from("<H", data, 0 if command == COM_BINLOG_DUMP_GTID else 4)[0]
                if flags & 1:  # BINLOG_DUMP_NON_BLOCK
                    self._send(conn, seq, b"\xfe\x00\x00\x02\x00")
                else:
                    self._exact(conn, 1)  # wait until the client goes away
                return
            elif command == 0x01:  # COM_QUIT
                return

    def close(self) -> None:
        self.listener.close()


def mysql_binlog() -> list[bytes]:
    """A fake ROTATE, then a MySQL 8 file: FDE, PREVIOUS_GTIDS, one transaction, a heartbeat."""
    rotate = struct.pack("<Q", 4) + b"mysql-bin.000003"
    events = [make_event(ROTATE_EVENT, rotate, log_pos=0, timestamp=0, flags=LOG_EVENT_ARTIFICIAL_F)]
    pos = 4
    for event_type, body in (
        (FORMAT_DESCRIPTION_EVENT, fde_body("8.3.0")),
        (PREVIOUS_GTIDS_LOG_EVENT, MysqlGtidSet(EXECUTED).encode()),
        (GTID_LOG_EVENT, CAPTURED["mysql80_gtid_from_57_master"][:1] + bytes.fromhex(SID.replace("-", ""))
         + struct.pack("<Q", 259) + CAPTURED["mysql80_gtid_from_57_master"][25:]),
        (QUERY_EVENT, query_body("BEGIN")),
        (TABLE_MAP_EVENT, CAPTURED["mysql_table_map_t10_json_decimal"]),
        (WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_t10_object"]),
        (XID_EVENT, struct.pack("<Q", 9)),
    ):  # fmt: skip
        pos += 19 + len(body) + 4
        events.append(make_event(event_type, body, log_pos=pos))
    events.append(make_event(HEARTBEAT_LOG_EVENT, b"mysql-bin.000003", log_pos=pos, timestamp=0))
    return events


@pytest.fixture
def scripted() -> Iterator[ScriptedMySQL]:
    server = ScriptedMySQL(mysql_binlog())
    yield server
    server.close()


def settings(server: ScriptedMySQL, password: str = PASSWORD, **extra: object) -> SourceSettings:
    return SourceSettings(
        host="127.0.0.1", port=server.port, user="repl", password=password, heartbeat_seconds=1.0,
        reconnect_initial_delay=0.05, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def test_caching_sha2_handshake_status_and_gtid_dump(scripted: ScriptedMySQL) -> None:
    # No information_schema here (and the scripted server takes one connection at a time).
    with BinlogStream(settings(scripted, use_gtid=True), blocking=False, schema_provider=FixedSchema({})) as stream:
        transactions = list(stream)
    assert scripted.auth_ok == [True]
    assert "SHOW BINARY LOG STATUS" in scripted.queries and not any("MASTER STATUS" in q for q in scripted.queries)
    assert "SET @source_binlog_checksum = @@global.binlog_checksum" in scripted.queries
    assert "SET @source_heartbeat_period = 1000000000" in scripted.queries
    register, dump = scripted.commands
    assert register[0] == COM_REGISTER_SLAVE and struct.unpack_from("<I", register, 1)[0] == 0x52454C
    # Started at the source's position, by GTID (use_gtid), non-blocking: flags = NON_BLOCK | THROUGH_GTID.
    assert dump == binlog_dump_gtid_payload(EXECUTED, 0x52454C, "", 4, 1)
    trx, tick = transactions
    assert trx.gtid == f"{SID}:259"
    assert trx.position == Position("mysql-bin.000003", trx.position.pos, f"{SID}:1-259")
    (change,) = trx.changes
    assert change.after == ('{"key1":"value1","key2":"value2"}', "1")
    assert change.columns == ("@1", "@2")  # no metadata, and no information_schema on this server
    assert change.file == "mysql-bin.000003"
    assert tick.changes == [] and tick.position.pos == trx.position.pos


def test_file_position_dump_and_wrong_password(scripted: ScriptedMySQL) -> None:
    start = Position("mysql-bin.000003", 4)
    with BinlogStream(settings(scripted), start, blocking=False, schema_provider=FixedSchema({})) as stream:
        transactions = list(stream)
    assert [len(t.changes) for t in transactions] == [1, 0]
    dump = scripted.commands[-1]
    assert dump[0] == COM_BINLOG_DUMP and dump.endswith(b"mysql-bin.000003")
    conn = ReplicationConnection(settings(scripted, password="wrong"))
    # A refused login is not retried (not a ConnectionLostError): the worker stops with one line instead.
    with pytest.raises(AccessDeniedError, match="Access denied") as refused:
        conn.connect()
    assert not isinstance(refused.value, ConnectionLostError) and refused.value.code == 1045
    assert scripted.auth_ok[-1] is False
