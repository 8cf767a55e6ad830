"""SourceSettings: how to reach the source server and how to replicate from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from binlog.constants import DEFAULT_SERVER_ID


@dataclass(slots=True)
class SourceSettings:
    """Connection and replication settings of one source.

    ``server_id`` is the id this replica registers with (it must differ from every real replica's id; it is never
    derived from the process). ``heartbeat_seconds`` is the period the source is asked to send heartbeats at when
    idle; a read that waits longer than ``read_timeout`` (by default three periods plus a margin) is taken as a dead
    connection. ``schema_connection`` gives other credentials for the information_schema look-ups (defaults to the
    replication credentials).
    """

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = ""
    server_id: int = DEFAULT_SERVER_ID
    heartbeat_seconds: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float | None = None
    ssl: dict[str, Any] | None = None  # passed to PyMySQL as its ``ssl`` argument (ca, cert, key, check_hostname...)
    schema_connection: dict[str, Any] | None = None
    use_gtid: bool = False  # resume by GTID (MariaDB @slave_connect_state / MySQL COM_BINLOG_DUMP_GTID) when known
    reconnect_initial_delay: float = 0.5
    reconnect_max_delay: float = 30.0
    max_reconnect_attempts: int | None = None  # None: keep trying forever
    extra: dict[str, Any] = field(default_factory=dict)  # further PyMySQL connect() arguments

    @property
    def effective_read_timeout(self) -> float:
        if self.read_timeout is not None:
            return self.read_timeout
        return max(self.heartbeat_seconds, 0.1) * 3 + 2.0

    def connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout,
            "charset": "utf8mb4",
            "autocommit": True,
        }
        if self.ssl:
            args["ssl"] = self.ssl
        args.update(self.extra)
        return args

    def schema_connect_args(self) -> dict[str, Any]:
        args = self.connect_args()
        if self.schema_connection:
            args.update(self.schema_connection)
        return args
