"""The private MariaDB of the tests: the same sandbox server the demo runs (devtools/sandbox.py)."""

from devtools.sandbox import REPLICATION_PASSWORD, REPLICATION_USER, MariaDB, free_tcp_port

__all__ = ["REPLICATION_PASSWORD", "REPLICATION_USER", "MariaDB", "free_tcp_port"]
