"""Parsers of the non-row events: format description, rotate, query, xid, GTIDs, heartbeat.

Each takes the event body (the bytes after the 19-byte common header, without the checksum) and returns plain
values; the stateful interpretation lives in ``binlog.parser``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from binlog.charsets import statement_codec
from binlog.constants import (
    BINLOG_CHECKSUM_ALG_OFF,
    FL_GROUP_COMMIT_ID,
    LOG_EVENT_HEADER_LEN,
)
from binlog.errors import TruncatedEventError
from binlog.gtid import uuid_text
from binlog.reader import lenenc_int, need

HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_size, log_pos, flags


@dataclass(frozen=True, slots=True)
class FormatDescription:
    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int

    def post_header_len(self, event_type: int) -> int:
        index = event_type - 1
        return self.post_header_lengths[index] if 0 <= index < len(self.post_header_lengths) else 0

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


def _version_tuple(version: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def server_has_checksums(version: str) -> bool:
    """Whether an FDE written by this server version carries the checksum-algorithm byte (MySQL 5.6.1+, MariaDB
    5.3+)."""
    if "mariadb" in version.lower():
        return _version_tuple(version) >= (5, 3, 0)
    return _version_tuple(version) >= (5, 6, 1)


def parse_format_description(event: bytes) -> FormatDescription:
    """A whole FORMAT_DESCRIPTION event (header included: its checksum layout depends on its own length)."""
    need(event, LOG_EVENT_HEADER_LEN + 57, "FORMAT_DESCRIPTION event")
    body = LOG_EVENT_HEADER_LEN
    binlog_version = int.from_bytes(event[body : body + 2], "little")
    server_version = event[body + 2 : body + 52].split(b"\0", 1)[0].decode("ascii", "replace")
    create_timestamp = int.from_bytes(event[body + 52 : body + 56], "little")
    header_length = event[body + 56]
    if server_has_checksums(server_version):
        # The algorithm byte sits before a 4-byte checksum slot that exists even when the algorithm is OFF.
        checksum_alg = event[-5]
        post_headers = bytes(event[body + 57 : -5])
    else:
        checksum_alg = BINLOG_CHECKSUM_ALG_OFF
        post_headers = bytes(event[body + 57 :])
    return FormatDescription(
        binlog_version, server_version, create_timestamp, header_length, post_headers, checksum_alg
    )


def parse_rotate(body: bytes, post_header_len: int) -> tuple[int, str]:
    """(position, next file name)."""
    if post_header_len >= 8:
        need(body, 8, "ROTATE event")
        position = int.from_bytes(body[0:8], "little")
    else:
        position = 4
    return position, body[post_header_len:].decode("utf-8", "replace")


# QUERY status variables (MySQL's and MariaDB's log_event.h): code -> size of its value, for the fixed-size ones.
_Q_SQL_MODE_CODE = 1  # the session's sql_mode, a little-endian u64
_Q_CHARSET_CODE = 4  # character_set_client, collation_connection, collation_server: three little-endian u16
_Q_FIXED_SIZES = {
    0: 4,  # Q_FLAGS2_CODE
    _Q_SQL_MODE_CODE: 8,
    3: 4,  # Q_AUTO_INCREMENT
    _Q_CHARSET_CODE: 6,
    7: 2,  # Q_LC_TIME_NAMES_CODE
    8: 2,  # Q_CHARSET_DATABASE_CODE
    9: 8,  # Q_TABLE_MAP_FOR_UPDATE_CODE
    10: 4,  # Q_MASTER_DATA_WRITTEN_CODE
    13: 3,  # Q_MICROSECONDS
    16: 1,  # Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP
    17: 8,  # Q_DDL_LOGGED_WITH_XID
    18: 2,  # Q_DEFAULT_COLLATION_FOR_UTF8MB4
    19: 1,  # Q_SQL_REQUIRE_PRIMARY_KEY
    20: 1,  # Q_DEFAULT_TABLE_ENCRYPTION
    128: 3,  # Q_HRNOW (MariaDB)
    129: 8,  # Q_XID (MariaDB)
    130: 1,  # Q_GTID_FLAGS3 (MariaDB)
}
_Q_LENGTH_PREFIXED = frozenset({5, 6})  # Q_TIME_ZONE_CODE, Q_CATALOG_NZ_CODE: a length byte and the text


def _status_variable(status: bytes, wanted: int) -> bytes | None:
    """The value of one status variable of a QUERY event; None when absent, or when a variable we cannot step over
    comes before it (an old or newer server)."""
    pos = 0
    while pos < len(status):
        code = status[pos]
        pos += 1
        if code == wanted and code in _Q_FIXED_SIZES:
            end = pos + _Q_FIXED_SIZES[code]
            return bytes(status[pos:end]) if end <= len(status) else None
        if code in _Q_FIXED_SIZES:
            pos += _Q_FIXED_SIZES[code]
        elif code in _Q_LENGTH_PREFIXED and pos < len(status):
            pos += 1 + status[pos]
        elif code == 2 and pos < len(status):  # Q_CATALOG_CODE (5.0.0-5.0.3): length, text, NUL
            pos += 2 + status[pos]
        elif code == 11 and pos < len(status):  # Q_INVOKER: user and host, each with a length byte
            pos += 1 + status[pos]
            pos += 1 + status[pos] if pos < len(status) else 0
        elif code == 12 and pos < len(status):  # Q_UPDATED_DB_NAMES: a count, then NUL-terminated names
            count = status[pos]
            pos += 1
            for _ in range(count if count < 254 else 0):  # 254: too many databases, none listed
                end = status.find(b"\0", pos)
                pos = len(status) if end < 0 else end + 1
        else:
            return None  # a variable whose size we do not know: nothing after it can be read
    return None


def query_client_collation(status: bytes) -> int | None:
    """character_set_client of a QUERY event (the collation id of the charset its statement was sent in), from its
    status variables; None when they do not say."""
    value = _status_variable(status, _Q_CHARSET_CODE)
    return int.from_bytes(value[:2], "little") if value is not None else None


def query_sql_mode(status: bytes) -> int:
    """The session's sql_mode bits when the statement ran (0 when the event does not say): ANSI_QUOTES and
    NO_BACKSLASH_ESCAPES change how its text reads."""
    value = _status_variable(status, _Q_SQL_MODE_CODE)
    return int.from_bytes(value, "little") if value is not None else 0


def statement_text(raw: bytes, client_collation: int | None) -> str:
    """A statement's text as the server read it: its bytes are in the client's charset (identifiers included; the
    server stores them in UTF-8 after reading them so). What that charset cannot decode, and every non-ASCII byte when
    the charset is unknown, is kept as a lone surrogate (surrogateescape), never replaced by a guess: ``binlog.ddl``
    refuses a DDL statement with one, and the schema history reports its tables."""
    codec, errors = statement_codec(client_collation)
    return raw.decode(codec, errors)


class Query(NamedTuple):
    schema: str  # the default database
    text: str  # the statement, decoded in its client charset (``statement_text``)
    sql_mode: int  # the session's sql_mode bits (``query_sql_mode``)


def parse_query(body: bytes, post_header_len: int, *, uncompress: Callable[[bytes], bytes] | None = None) -> Query:
    """A QUERY event's default database, statement and sql_mode.

    ``uncompress``, for MariaDB's QUERY_COMPRESSED event, turns the stored statement into its bytes before decoding.
    """
    need(body, 13, "QUERY event")
    db_len = body[8]
    status_len = int.from_bytes(body[11:13], "little") if post_header_len >= 13 else 0
    pos = post_header_len + status_len
    need(body, pos + db_len + 1, "QUERY event")
    # The default database is in the server's system charset, UTF-8.
    schema = bytes(body[pos : pos + db_len]).decode("utf-8", "surrogateescape")
    raw = bytes(body[pos + db_len + 1 :])
    if uncompress is not None:
        raw = uncompress(raw)
    status = bytes(body[post_header_len:pos])
    return Query(schema, statement_text(raw, query_client_collation(status)), query_sql_mode(status))


def query_error_code(body: bytes) -> int:
    """The error a QUERY event's statement ended with on the source (0: none). A statement is logged with its error
    when it failed after changing something: a CREATE OR REPLACE TABLE that dropped the table it was to replace."""
    need(body, 11, "QUERY event")
    return int.from_bytes(body[9:11], "little")


def query_thread_id(body: bytes) -> int:
    """The id of the session (connection) that ran a QUERY event's statement: its temporary tables are its own."""
    need(body, 4, "QUERY event")
    return int.from_bytes(body[0:4], "little")


def parse_xid(body: bytes) -> int:
    need(body, 8, "XID event")
    return int.from_bytes(body[0:8], "little")


def parse_mariadb_gtid(body: bytes) -> tuple[int, int, int, int]:
    """(sequence number, domain id, flags2, commit id) of a MariaDB GTID event."""
    need(body, 13, "MariaDB GTID event")
    seq, domain, flags = struct.unpack_from("<QIB", body, 0)
    commit_id = 0
    if flags & FL_GROUP_COMMIT_ID and len(body) >= 21:
        (commit_id,) = struct.unpack_from("<Q", body, 13)
    return seq, domain, flags, commit_id


def parse_gtid_list(body: bytes) -> list[tuple[int, int, int]]:
    """MariaDB GTID_LIST: (domain, server, sequence) of every domain, as of the start of the file."""
    need(body, 4, "GTID_LIST event")
    count = int.from_bytes(body[0:4], "little") & ((1 << 28) - 1)
    need(body, 4 + 16 * count, "GTID_LIST event")
    return [struct.unpack_from("<IIQ", body, 4 + 16 * i) for i in range(count)]


def parse_mysql_gtid(body: bytes) -> tuple[str, int]:
    """(source uuid, transaction number) of a MySQL GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT."""
    need(body, 25, "GTID event")
    sid = uuid_text(body[1:17])
    gno = int.from_bytes(body[17:25], "little", signed=True)
    return sid, gno


def parse_heartbeat_v2(body: bytes) -> tuple[str, int]:
    """MySQL 8's HEARTBEAT_LOG_EVENT_V2: type-length-value fields; 1 = log file name, 2 = position."""
    name, position, pos = "", 0, 0
    try:
        while pos < len(body):
            field_type = body[pos]
            length, pos = lenenc_int(body, pos + 1)
            value = body[pos : pos + length]
            pos += length
            if field_type == 1:
                name = value.decode("utf-8", "replace")
            elif field_type == 2:
                position = lenenc_int(value, 0)[0] if value else 0
    except TruncatedEventError:
        pass
    return name, position
