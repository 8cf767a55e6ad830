"""Parsers of the non-row events: format description, rotate, query, xid, GTIDs, heartbeat.

Each takes the event body (the bytes after the 19-byte common header, without the checksum) and returns plain
values; the stateful interpretation lives in ``binlog.parser``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

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


def parse_query(body: bytes, post_header_len: int) -> tuple[str, str]:
    """(default database, statement text)."""
    need(body, 13, "QUERY event")
    db_len = body[8]
    status_len = int.from_bytes(body[11:13], "little") if post_header_len >= 13 else 0
    pos = post_header_len + status_len
    need(body, pos + db_len + 1, "QUERY event")
    schema = body[pos : pos + db_len].decode("utf-8", "replace")
    query = body[pos + db_len + 1 :].decode("utf-8", "replace")
    return schema, query


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
