"""One active worker per source: a PostgreSQL advisory lock, or a lock file next to the SQLite store.

A second worker blocks in :meth:`LeaderLock.acquire` as a hot standby and takes over as soon as the first one dies
(the database releases an advisory lock when its session ends; the kernel releases a flock when its process ends).

**A frozen worker is taken over too (PostgreSQL).** A process stopped with SIGSTOP, paused by its host or cut off
from the store keeps its sessions, and with them the lock: it is not dead, yet nothing moves. The active worker's lock
session shows it is alive with a statement every :data:`LEASE_INTERVAL` (a thread of its own, so a long batch does
not stop it). A standby that finds the lock held by a session idle for longer than its takeover time ends every
store session of that process (they carry its label, :func:`process_label`, as their application name), then takes
the lock. Ending the sessions is what makes this safe: whatever the frozen process had in flight rolls back, and when
it runs again its next statement fails, so it goes back to being a standby without writing anything; what it had
committed is before the checkpoint the new worker starts from. PostgreSQL's clock alone judges the idle time.

**Every takeover fences the previous worker (PostgreSQL).** The lock can also go while its holder runs on: its lock
session alone ended (a network blip on that one connection, an operator's pg_terminate_backend), while its batch
session goes on writing. So a worker that becomes active ends the store sessions that the previous active worker left
(:meth:`LeaderLock.fence`, by the label the store keeps for it) before it reads the checkpoint: the batch in flight
rolls back or has committed, and the old process, finding its sessions gone, goes back to being a standby.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection

log = logging.getLogger("relay.worker")

#: Seconds between two statements of the active worker's lock session (its lease).
LEASE_INTERVAL = 1.0
#: What every store session of a worker process is named (``application_name``), followed by the process's own
#: token: a standby ends the sessions of a frozen worker by it.
LABEL_PREFIX = "relay-worker "
#: Seconds a standby that ended a frozen worker's sessions waits for their backends to exit and free the lock.
TAKEOVER_WAIT = 5.0
_label: str | None = None


def process_label() -> str:
    """This process's label: a random token first (PostgreSQL keeps 63 bytes of a name), then its pid and host."""
    global _label
    if _label is None:
        _label = f"{LABEL_PREFIX}{secrets.token_hex(6)} {os.getpid()}@{socket.gethostname()}"[:63]
    return _label


def lock_key(source: str) -> int:
    """A stable signed 64-bit advisory lock key for a source."""
    digest = hashlib.sha256(f"binlog-relay worker {source}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class LeaderLock:
    def __init__(self, source: str, lock_dir: Path, takeover_seconds: float = 0.0) -> None:
        """``takeover_seconds``: how long the holder's lock session may stay idle before this process, waiting as a
        standby, ends that worker's sessions and takes over (0: only when it dies)."""
        self.source = source
        self.lock_dir = lock_dir
        self.takeover_seconds = takeover_seconds
        self._pg: Any = None
        self._file: int | None = None
        self._lease: threading.Thread | None = None
        self._lease_stop = threading.Event()
        self._warned = False

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
        self._lease_stop.set()
        if self._lease is not None:
            self._lease.join(10)
            self._lease = None
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
            self._pg = psycopg2.connect(**{**params, "application_name": process_label()})
            self._pg.autocommit = True
        key = lock_key(self.source)
        with self._pg.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            held = bool(cursor.fetchone()[0])
            if not held and self.takeover_seconds > 0 and self._end_frozen_holder(cursor, key):
                # The ended sessions' backends exit (and release the lock) a moment after they are told to.
                deadline = time.monotonic() + TAKEOVER_WAIT
                while not held and time.monotonic() < deadline:
                    time.sleep(0.05)
                    cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
                    held = bool(cursor.fetchone()[0])
        if not held:
            self._pg.close()
            self._pg = None
            return False
        self._lease_stop.clear()
        self._lease = threading.Thread(target=self._renew, args=(self._pg,), name="worker-lease", daemon=True)
        self._lease.start()
        return True

    def fence(self, previous_label: str) -> None:
        """Ends the store sessions of the previous active worker (``previous_label``, their application name) and
        waits until they are gone, so that nothing of its still commits; PostgreSQL only, where a worker can lose the
        lock while it runs on."""
        if self._pg is None or not previous_label.startswith(LABEL_PREFIX) or previous_label == process_label():
            return
        with self._pg.cursor() as cursor:
            cursor.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
                " AND pid <> pg_backend_pid()",
                [previous_label],
            )
            ended = [backend for backend, done in cursor.fetchall() if done]
            if not ended:
                return  # it stopped, or died: nothing of it can commit
            log.warning(
                "the previous active worker %r still had %d store session(s) (backends %s): ended them, so that "
                "nothing it had in flight commits after this worker starts",
                previous_label[len(LABEL_PREFIX) :],
                len(ended),
                ", ".join(map(str, ended)),
            )
            deadline = time.monotonic() + TAKEOVER_WAIT
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [ended])
                if not cursor.fetchone()[0]:
                    return
                time.sleep(0.05)
            log.warning("the previous active worker's sessions are still closing after %.0fs", TAKEOVER_WAIT)

    def _renew(self, session: Any) -> None:
        """The lease: a statement on the lock session every LEASE_INTERVAL while the lock is held (psycopg2
        serializes it with the main thread's :meth:`still_held` on the same connection)."""
        while not self._lease_stop.wait(LEASE_INTERVAL):
            try:
                with session.cursor() as cursor:
                    cursor.execute("SELECT 1")
            except Exception:  # noqa: BLE001 - the session is gone; still_held() tells the main thread
                return

    def _note_once(self, message: str) -> None:
        if not self._warned:
            log.warning("%s", message)
            self._warned = True

    def _end_frozen_holder(self, cursor: Any, key: int) -> bool:
        """Ends the store sessions of the worker holding the lock if its lock session has been idle longer than
        ``takeover_seconds`` (by PostgreSQL's clock); True if it did."""
        cursor.execute(
            "SELECT a.pid, a.application_name, a.state, EXTRACT(EPOCH FROM now() - a.state_change)"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.classid = %s::oid AND l.objid = %s::oid"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
        )
        row = cursor.fetchone()
        if row is None:  # released meanwhile: the next attempt gets it
            return False
        pid, label, state, idle = row
        if state is None:
            # PostgreSQL hides the state of another role's sessions: this standby cannot tell a frozen worker.
            self._note_once(
                f"cannot see the state of the active worker's lock session (backend {pid}, another role's): a frozen"
                " active worker will not be taken over; run every worker as the same role, or grant this one"
                " pg_read_all_stats and pg_signal_backend"
            )
            return False
        if state != "idle" or idle is None or float(idle) < self.takeover_seconds:
            return False
        if not (label or "").startswith(LABEL_PREFIX):
            # A holder that does not name its sessions (an older version) cannot be fenced whole: ending only its
            # lock session would leave its batch session free to commit once it runs again.
            self._note_once(
                f"the active worker's lock session (backend {pid}) has been idle for {float(idle):.0f}s, but it does"
                " not name its store sessions, so this standby cannot end them safely: stop that worker by hand"
            )
            return False
        cursor.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
            " AND pid <> pg_backend_pid()",
            [label],
        )
        ended = [backend for backend, done in cursor.fetchall() if done]
        log.warning(
            "the active worker %r has not renewed its lease for %.0fs (the limit is %.0fs): frozen, paused or cut off"
            " from the store; ended its %d store session(s) (backends %s) and taking over",
            label[len(LABEL_PREFIX) :],
            float(idle),
            self.takeover_seconds,
            len(ended),
            ", ".join(map(str, ended)),
        )
        return True

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
