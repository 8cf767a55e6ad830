"""The private MariaDB of the tests: the same sandbox server the demo runs (devtools/sandbox.py); fresh schemas on
it, and its binlog read back with the live stream."""

from __future__ import annotations

import itertools
import os

from binlog import BinlogStream, Position, SourceSettings, Transaction
from devtools.sandbox import REPLICATION_PASSWORD, REPLICATION_USER, MariaDB, free_tcp_port

__all__ = [
    "REPLICATION_PASSWORD",
    "REPLICATION_USER",
    "MariaDB",
    "drain",
    "free_tcp_port",
    "new_schema",
    "settings_for",
]

_schema_numbers = itertools.count(1)


def new_schema(server: MariaDB) -> str:
    """A fresh database on a given server (``fresh_schema`` picks the server by fixture name)."""
    name = f"b{os.getpid()}_{next(_schema_numbers)}"
    server.execute(f"CREATE DATABASE `{name}`")
    return name


def settings_for(server: MariaDB, **overrides: object) -> SourceSettings:
    """The stream's settings for ``server``: short heartbeats and reconnect delays, then ``overrides``."""
    base = dict(server.replication_settings())
    base.update(heartbeat_seconds=0.5, reconnect_initial_delay=0.05, reconnect_max_delay=0.2)
    base.update(overrides)
    return SourceSettings(**base)  # type: ignore[arg-type]


def drain(server: MariaDB, start: Position, **overrides: object) -> list[Transaction]:
    """Everything from ``start`` to the current end of the binlog (a non-blocking dump)."""
    with BinlogStream(settings_for(server, **overrides), start, blocking=False) as stream:
        return [t for t in stream if t.changes or t.statements]
