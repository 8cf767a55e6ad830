"""Progress lines for long runs: one when a step starts, one per Spark stage as its tasks complete, one at the end.

Spark's own console bar redraws one terminal line, which is useless in a log file; this polls the status tracker
from a daemon thread on the driver and prints a plain line whenever a stage moves (at most every ``interval``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Progress:
    def __init__(self, spark_context: Any, write: Callable[[str], None], interval: float = 5.0) -> None:
        self._tracker = spark_context.statusTracker()
        self._write = write
        self._interval = interval
        self._step = ""
        self._step_started = time.monotonic()
        self._run_started = time.monotonic()
        self._reported: dict[int, tuple[int, int]] = {}  # stage id -> (completed, failed) last printed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeline-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 1)

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
        while not self._stop.wait(self._interval):
            self._poll()

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
