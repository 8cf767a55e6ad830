"""Progress lines for long runs: one when a step starts, one per Spark stage as its tasks complete, one per file being
decoded as its chunks go by, one at the end.

Spark's own console bar redraws one terminal line, which is useless in a log file; this polls the status tracker
from a daemon thread on the driver and prints a plain line whenever a stage moves (at most every ``interval``).

Spark tells the driver nothing about a task until it ends, and one task decodes a whole file, so a large file would
show nothing for minutes. Each task therefore sends a UDP datagram per chunk it has read (``ChunkBeacon``) to a
socket of the driver (``Progress.address``): fire and forget, so a lost datagram costs a progress line, never the
run, and a task never waits for the driver. This module imports neither Spark nor Django: the tasks use it too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

# Bytes of a file between two datagrams of its task: a line per few seconds of decoding at worst.
CHUNK_BYTES = 4 << 20


class ChunkBeacon:
    """Inside a task: says how far the task is in its file. ``address`` None makes it silent."""

    __slots__ = ("_address", "_next", "_path", "_socket")

    def __init__(self, address: tuple[str, int] | None, path: str) -> None:
        self._address = address
        self._path = path
        self._next = CHUNK_BYTES
        self._socket: socket.socket | None = None
        if address is not None:
            try:
                self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            except OSError:
                self._socket = None

    def __call__(self, position: int, rows: int, *, done: bool = False) -> None:
        """``position``: bytes of the file read so far; sends only when a chunk boundary has passed (or at the end)."""
        if self._socket is None or (position < self._next and not done):
            return
        self._next = position + CHUNK_BYTES
        message = f"{position}\t{rows}\t{int(done)}\t{self._path}".encode()
        with contextlib.suppress(OSError):  # the driver is gone or unreachable: progress is best effort
            self._socket.sendto(message, self._address)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class Progress:
    def __init__(
        self,
        spark_context: Any,
        write: Callable[[str], None],
        interval: float = 5.0,
        *,
        host: str | None = None,
        sizes: dict[str, int] | None = None,
    ) -> None:
        self._tracker = spark_context.statusTracker()
        self._write = write
        self._interval = interval
        self._step = ""
        self._step_started = time.monotonic()
        self._run_started = time.monotonic()
        self._reported: dict[int, tuple[int, int]] = {}  # stage id -> (completed, failed) last printed
        self._sizes = sizes or {}
        self._files: dict[str, tuple[int, int]] = {}  # file -> (bytes read, rows) of a task still decoding it
        self._printed_files: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socket: socket.socket | None = None
        if host is not None:
            # Bound to the address the executors reach the driver at (loopback for a local master). A host this
            # machine cannot bind to costs the per-file lines, not the run.
            try:
                self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._socket.bind((host, 0))
                self._socket.settimeout(0.2)
            except OSError:
                if self._socket is not None:
                    self._socket.close()
                self._socket = None
        self._thread = threading.Thread(target=self._loop, name="pipeline-progress", daemon=True)

    @property
    def address(self) -> tuple[str, int] | None:
        """Where the tasks send their ChunkBeacon datagrams."""
        return self._socket.getsockname() if self._socket is not None else None

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 1)
        if self._socket is not None:
            self._socket.close()

    def step(self, name: str) -> None:
        """A new step of the run (decode, aggregate, write, load): printed at once."""
        self._poll()
        self._step = name
        self._step_started = time.monotonic()
        self.say(f"{name} ...")

    def done(self, detail: str = "") -> None:
        self._poll()
        elapsed = time.monotonic() - self._step_started
        self.say(f"{self._step} done in {elapsed:.1f}s{': ' + detail if detail else ''}")

    def say(self, text: str) -> None:
        self._write(f"[{time.monotonic() - self._run_started:7.1f}s] {text}")

    def _loop(self) -> None:
        next_poll = time.monotonic() + self._interval
        while not self._stop.is_set():
            if self._socket is not None:
                self._receive()
            else:
                self._stop.wait(min(self._interval, 0.2))
            if time.monotonic() >= next_poll:
                self._poll()
                next_poll = time.monotonic() + self._interval

    def _receive(self) -> None:
        try:
            message = self._socket.recv(4096)  # type: ignore[union-attr]
        except (TimeoutError, OSError):
            return
        try:
            position, rows, done, path = message.decode().split("\t", 3)
        except (UnicodeDecodeError, ValueError):
            return
        with self._lock:
            if done == "1":
                self._files.pop(path, None)
                self._printed_files.pop(path, None)
            else:
                self._files[path] = (int(position), int(rows))

    def _poll(self) -> None:
        try:
            stage_ids = self._tracker.getActiveStageIds()
        except Exception:  # noqa: BLE001 - the context may be stopping; progress is best effort
            return
        for stage_id in sorted(stage_ids):
            info = self._tracker.getStageInfo(stage_id)
            if info is None:
                continue
            state = (info.numCompletedTasks, info.numFailedTasks)
            if self._reported.get(stage_id) == state:
                continue
            self._reported[stage_id] = state
            # Completed and failed only: the tracker's running count lags (it can say 2 running in local[1]).
            failed = f", {info.numFailedTasks} failed attempts" if info.numFailedTasks else ""
            self.say(f"{self._step}: stage {stage_id} {info.numCompletedTasks}/{info.numTasks} tasks done{failed}")
        with self._lock:
            moved = {path: state for path, state in self._files.items() if self._printed_files.get(path) != state}
            self._printed_files.update(moved)
        for path, (position, rows) in sorted(moved.items()):
            size = self._sizes.get(path)
            share = f" ({100 * position / size:.0f}%)" if size else ""
            name = path.rstrip("/").rpartition("/")[2]
            step = f"{self._step}: " if self._step else ""
            self.say(f"{step}{name} {position / 1e6:,.1f} MB read{share}, {rows:,} row changes")
