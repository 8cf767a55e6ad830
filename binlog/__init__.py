"""A pure-Python MySQL/MariaDB replication client and binlog decoder.

Usage::

    from binlog import BinlogStream, SourceSettings, Position

    stream = BinlogStream(SourceSettings(host="db", user="repl", password="..."), Position("binlog.000042", 4))
    for trx in stream:                      # committed transactions; an empty one on each heartbeat/idle tick
        for change in trx.changes:          # RowChange: schema, table, kind (1 insert, 2 update, 4 delete),
            ...                             # columns, before, after, file, pos, row, timestamp, gtid, table_info
        stream.confirm(trx.position)        # after storing: a reconnect resumes from here

API
---
``Position(file, pos, gtid="")``
    Where to resume: binlog file and the end position of the last event taken; ``gtid`` is the GTID state after it
    (MariaDB "0-1-42,1-1-7", MySQL "uuid:1-42"). A position with an empty file and a gtid starts by GTID.
``SourceSettings``
    host, port, user, password, server_id (the replica id, default 0x52454C), heartbeat_seconds (5.0),
    connect_timeout, read_timeout (default 3 heartbeats + 2 s), ssl (PyMySQL ``ssl`` dict), schema_connection
    (other credentials for information_schema), use_gtid (resume by GTID even when a file is known),
    reconnect_initial_delay / reconnect_max_delay / max_reconnect_attempts (None: forever), extra (more PyMySQL
    connect arguments).
``BinlogStream(settings, start=None, *, schema_provider=None, blocking=True, verify_checksum=True)``
    ``start=None`` starts at the source's current position (SHOW MASTER STATUS, or SHOW BINARY LOG STATUS on MySQL
    8.2+). Iterating yields ``Transaction`` objects: ``changes`` (list of ``RowChange``), ``position`` (resume point
    after it), ``timestamp``, ``gtid``, ``statements`` (DDL texts in it), ``event_counts`` (events by type since the
    previous yield) and ``schemas`` (the default database of each statement). Lost connections are retried with
    exponential backoff from the last ``confirm()``-ed position (the start position until the first confirm), each
    attempt logged. ``blocking=False`` stops at the end of the source's binlog. Statistics: ``source_position()``,
    ``confirmed_position``, ``lag_seconds``, ``reconnects``, ``last_error``, ``server_version``.
``RowChange``
    Slotted; fields as listed in the usage above, plus ``kind_name`` ("insert"/"update"/"delete") and
    ``as_dict("before"|"after")``. ``table_info`` is a ``TableInfo`` (schema, table, columns of ``ColumnInfo``:
    name, type_code, type_name, unsigned, charset, nullable, meta, enum_values, set_values; primary_key).
``read_binlog_files(paths, *, schema_provider=None, start=4, verify_checksum=True)``
    The same transactions from binlog files on disk (``start``: a position in the first file).
``EventDecoder``, ``InformationSchemaProvider``, ``SchemaProvider``
    The decoder both of them use (feed it whole events), and the information_schema look-up (a ``SchemaProvider``
    is anything with ``table(schema, table)`` and ``invalidate(schema=None, table=None)``).

Values
------
Each image (``before``/``after``) is a tuple aligned with ``columns``: ``str`` in MySQL's text form for numbers,
DECIMAL, dates and times (TIMESTAMP in UTC), text (decoded from its column charset), ENUM/SET labels, BIT (as an
unsigned integer), JSON (compact text) and GEOMETRY (WKT); ``bytes`` for BINARY/VARBINARY/BLOB; ``None`` for SQL
NULL; ``NOT_PRESENT`` for a column a MINIMAL/NOBLOB image left out. FLOAT and DOUBLE are the shortest text that
reads back to the same value (FLOAT at single precision, so "1.2345679" where MariaDB's SELECT prints "1.23457").

Column names come from the TABLE_MAP optional metadata (``binlog_row_metadata=FULL``), else from information_schema
(refreshed when DDL passes or the column count disagrees), else ``@1``, ``@2``... with a logged warning. Without
either metadata or schema, signedness is taken as signed and strings of unknown charset as UTF-8 (bytes if invalid).

Errors
------
``BinlogError`` (base), ``ChecksumError`` (CRC32 mismatch; names file and position), ``PurgedPositionError`` (the
start file or GTID is gone from the source: server error 1236 saying so; never retried; its ``BinlogResetError``: a
file of a name read before, begun at another time: RESET MASTER, or another server), ``UnreadablePositionError``
(any other error 1236: a position inside an event or past its file's end, a truncated binlog, an event over the
source's max_allowed_packet; never retried), ``TruncatedEventError`` (an event shorter
than its layout), ``ConnectionLostError`` and ``ServerError`` (retried by the stream). A rows event for a table id no
TABLE_MAP announced raises ``BinlogError``; unknown event types are skipped by size.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from binlog.changes import NOT_PRESENT, RowChange, Transaction
    from binlog.errors import (
        BinlogError,
        BinlogResetError,
        ChecksumError,
        ConnectionLostError,
        PurgedPositionError,
        ServerError,
        TruncatedEventError,
        UnreadablePositionError,
    )
    from binlog.files import read_binlog_files
    from binlog.parser import EventDecoder
    from binlog.position import Position
    from binlog.schema import InformationSchemaProvider, SchemaProvider
    from binlog.settings import SourceSettings
    from binlog.stream import BinlogStream
    from binlog.table import ColumnInfo, TableInfo

__all__ = [
    "NOT_PRESENT",
    "BinlogError",
    "BinlogResetError",
    "BinlogStream",
    "ChecksumError",
    "ColumnInfo",
    "ConnectionLostError",
    "EventDecoder",
    "InformationSchemaProvider",
    "Position",
    "PurgedPositionError",
    "RowChange",
    "SchemaProvider",
    "ServerError",
    "SourceSettings",
    "TableInfo",
    "Transaction",
    "TruncatedEventError",
    "UnreadablePositionError",
    "read_binlog_files",
]


# Each name's module, imported when the name is first asked for: ``python -m binlog dump`` imports the package too,
# and it needs neither the stream (PyMySQL) nor the settings, the schema look-up or the error classes of the API.
_MODULES = {
    "NOT_PRESENT": "changes",
    "RowChange": "changes",
    "Transaction": "changes",
    "BinlogError": "errors",
    "ChecksumError": "errors",
    "ConnectionLostError": "errors",
    "BinlogResetError": "errors",
    "PurgedPositionError": "errors",
    "UnreadablePositionError": "errors",
    "ServerError": "errors",
    "TruncatedEventError": "errors",
    "read_binlog_files": "files",
    "EventDecoder": "parser",
    "Position": "position",
    "InformationSchemaProvider": "schema",
    "SchemaProvider": "schema",
    "SourceSettings": "settings",
    "BinlogStream": "stream",
    "ColumnInfo": "table",
    "TableInfo": "table",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'binlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"binlog.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])
