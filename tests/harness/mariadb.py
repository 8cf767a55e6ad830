"""The private MariaDB of the tests: the same sandbox server the demo runs (relay/sandbox.py)."""

from relay.sandbox import REPLICATION_PASSWORD, REPLICATION_USER, MariaDB, free_tcp_port

__all__ = ["REPLICATION_PASSWORD", "REPLICATION_USER", "MariaDB", "free_tcp_port"]
