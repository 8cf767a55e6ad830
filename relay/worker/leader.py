"""One active worker per source: a PostgreSQL advisory lock, or a lock file next to the SQLite store.

A second worker blocks in :meth:`LeaderLock.acquire` as a hot standby and takes over as soon as the first one dies
(the database releases an advisory lock when its session ends; the kernel releases a flock when its process ends).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection


def lock_key(source: str) -> int:
    """A stable signed 64-bit advisory lock key for a source."""
    digest = hashlib.sha256(f"binlog-relay worker {source}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class LeaderLock:
    def __init__(self, source: str, lock_dir: Path) -> None:
        self.source = source
        self.lock_dir = lock_dir
        self._pg: Any = None
        self._file: int | None = None

    def try_acquire(self) -> bool:
        if connection.vendor == "postgresql":
            return self._try_postgres()
        return self._try_file()

    def acquire(self, should_stop: Callable[[], bool], while_waiting: Callable[[], None], poll: float = 1.0) -> bool:
        """Blocks until this process holds the lock (True) or ``should_stop`` says to give up (False).

        ``while_waiting`` runs after each failed attempt (the standby reports itself).
        """
        while not should_stop():
            if self.try_acquire():
                return True
            while_waiting()
            time.sleep(poll)
        return False

    def still_held(self) -> bool:
        """False when the session that holds the advisory lock has gone (the lock went with it)."""
        if self._pg is None:
            return self._file is not None
        try:
            with self._pg.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except Exception:  # noqa: BLE001 - any failure of the lock's session means the lock is gone
            return False

    def release(self) -> None:
        if self._pg is not None:
            try:
                self._pg.close()
            finally:
                self._pg = None
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            os.close(self._file)
            self._file = None

    def _try_postgres(self) -> bool:
        import psycopg2

        if self._pg is None:
            params = connection.get_connection_params()
            self._pg = psycopg2.connect(**params)
            self._pg.autocommit = True
        with self._pg.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(self.source)])
            held = bool(cursor.fetchone()[0])
        if not held:
            self._pg.close()
            self._pg = None
        return held

    def _try_file(self) -> bool:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        safe = "".join(char if char.isalnum() else "_" for char in self.source)
        fd = os.open(self.lock_dir / f"worker-{safe}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._file = fd
        return True
