"""Watching snapshots from a terminal: one line per table, a bar rewritten in place on a terminal, plain lines now
and then otherwise (for logs and CI); and a word when the binlog worker is not there to read them (the health rule of
relay/web/health.py). Used by ``manage.py snapshot``.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.core.management.base import OutputWrapper
from django.utils import timezone

from relay.models import Snapshot
from relay.store.snapshots import progress
from relay.templatetags.relay_tags import duration, num
from relay.web import dashboard, health

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_TIMEOUT = 2
EXIT_INTERRUPTED = 130  # the shell's own status for a process stopped by SIGINT

#: Seconds between two plain (non-terminal) progress lines of a table whose count moved; a change of state is
#: written at once.
PLAIN_INTERVAL = 10.0
BAR_WIDTH = 24
NAME_WIDTH = 40  # the table column's widest; longer names are cut on the terminal
#: The health rule's reasons that mean no worker is there to read the snapshot.
WORKER_REASONS = ("worker_not_connected", "worker_not_reporting")
CONTINUES = "the snapshot continues in the worker; run the same command again to watch it, or --cancel"
KNOWN_CLIENTS_SHOWN = 10


def table_name(snapshot: Snapshot) -> str:
    return f"{snapshot.schema_name}.{snapshot.table_name}"


def printable(text: str) -> str:
    """A line as the terminal should get it: a control character in a name or an error (an escape sequence, a line
    feed) would move the cursor or break the block rewritten in place."""
    return "".join(char if char.isprintable() else "?" for char in text)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def watch_command(client: str, tables: Sequence[tuple[str, str]], where: str) -> str:
    """The command line that attaches to these snapshots (the condition included: another one would be refused)."""
    words = ["manage.py", "snapshot", "--client", client, *(f"{schema}.{table}" for schema, table in tables)]
    if where.strip():
        words += ["--where", where.strip()]
    return shlex.join(words)


def worker_problem(now: datetime) -> str:
    """Why no worker would read a snapshot now, in the words of the health rule (empty: a worker is reporting).

    The rule is evaluated on the sources only: the relay processes and the queues' backlog, which it also reads,
    say nothing about the worker, and reading them every poll would cost a query per client."""
    sources = dashboard.source_overviews(now)
    verdict = health.evaluate(now, sources, [], dashboard.backlog([]), health.thresholds())
    return "; ".join(reason.message for reason in verdict.reasons if reason.code in WORKER_REASONS)


def rate_text(rows_per_second: float) -> str:
    return f"{num(rows_per_second, 1 if rows_per_second < 10 else 0)} rows/s"


def rows_text(snapshot: Snapshot) -> str:
    """``12,345 / ~100,000 rows``: the total is the table's estimated row count, marked as such."""
    total = f" / ~{num(snapshot.rows_total)}" if snapshot.rows_total is not None else ""
    return f"{num(snapshot.rows_done)}{total} rows"


def speed_text(snapshot: Snapshot, now: datetime) -> str:
    shown = progress(snapshot, now)
    parts = []
    if shown.rows_per_second is not None:
        parts.append(rate_text(shown.rows_per_second))
    if snapshot.active and shown.eta_seconds is not None:
        parts.append(f"ETA {duration(shown.eta_seconds)}")
    return ", ".join(parts)


def took_text(snapshot: Snapshot) -> str:
    if snapshot.started is None or snapshot.finished is None:
        return ""
    return f" in {duration((snapshot.finished - snapshot.started).total_seconds())}"


def plain_line(snapshot: Snapshot, now: datetime) -> str:
    """One line of the plain display: ``shop.orders: running, 1,200 / ~5,000 rows (24%), 400 rows/s, ETA 9 s``."""
    name = table_name(snapshot)
    state = snapshot.state
    if state == Snapshot.State.PENDING:
        return f"{name}: pending, waiting for the worker to start it"
    if state == Snapshot.State.DONE:
        rate_so_far = progress(snapshot, now).rows_per_second
        rate = f" ({rate_text(rate_so_far)})" if rate_so_far is not None else ""
        return f"{name}: done, {num(snapshot.rows_done)} rows{took_text(snapshot)}{rate}"
    if state == Snapshot.State.FAILED:
        return f"{name}: failed after {num(snapshot.rows_done)} rows: {first_line(snapshot.error) or 'no reason given'}"
    if state == Snapshot.State.CANCELLED:
        return f"{name}: cancelled after {num(snapshot.rows_done)} rows (those stay queued)"
    fraction = progress(snapshot, now).fraction
    parts = [rows_text(snapshot) + (f" ({fraction:.0%})" if fraction is not None else "")]
    speed = speed_text(snapshot, now)
    if speed:
        parts.append(speed)
    return f"{name}: {state}, " + ", ".join(parts)


def bar_line(snapshot: Snapshot, now: datetime, name_width: int) -> str:
    """One line of the terminal display: the table, a bar, the percentage, rows, rate and ETA."""
    name = table_name(snapshot)
    if len(name) > name_width:
        name = name[: name_width - 1] + "~"
    shown = progress(snapshot, now)
    filled = round((shown.fraction or 0.0) * BAR_WIDTH)
    bar = "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"
    percent = f"{shown.fraction:4.0%}" if shown.fraction is not None else "   ?"
    state = snapshot.state
    if state == Snapshot.State.PENDING:
        tail = "pending: waiting for the worker to start it"
    elif state == Snapshot.State.RUNNING:
        tail = "  ".join(part for part in (rows_text(snapshot), speed_text(snapshot, now)) if part)
    elif state == Snapshot.State.DONE:
        tail = f"done: {num(snapshot.rows_done)} rows{took_text(snapshot)}"
    elif state == Snapshot.State.FAILED:
        tail = f"FAILED after {num(snapshot.rows_done)} rows: {first_line(snapshot.error)}"
    else:
        tail = f"{state} after {num(snapshot.rows_done)} rows"
    return f"{name:<{name_width}}  {bar} {percent}  {tail}"


class Display:
    """Writes the watch's lines: a block of bars rewritten in place on a terminal, plain lines elsewhere."""

    def __init__(self, out: OutputWrapper, tty: bool, names: Sequence[str], clock: Callable[[], float]) -> None:
        self.out = out
        self.tty = tty
        self.clock = clock
        self.name_width = min(NAME_WIDTH, max((len(name) for name in names), default=0))
        self.drawn = 0  # lines of the block on the screen, the cursor at the end of its last one
        self.lines: list[str] = []  # what they say
        self.last: dict[int, tuple[str, int, float]] = {}  # per snapshot: state, rows and clock of its last line

    def show(self, snapshots: Sequence[Snapshot], now: datetime) -> None:
        if self.tty:
            self._redraw(snapshots, now)
            return
        moment = self.clock()
        for snapshot in snapshots:
            before = self.last.get(snapshot.id)
            changed = before is None or before[0] != snapshot.state
            moved = before is not None and before[1] != snapshot.rows_done and moment - before[2] >= PLAIN_INTERVAL
            if changed or moved:
                self.out.write(printable(plain_line(snapshot, now)))
                self.last[snapshot.id] = (snapshot.state, snapshot.rows_done, moment)

    def note(self, text: str) -> None:
        """A message between updates: the block so far stays above it, and a new one starts below."""
        self.close()
        self.out.write(printable(text))

    def close(self) -> None:
        if self.drawn:
            self.out.write("")  # ends the block's last line
            self.drawn = 0

    def _redraw(self, snapshots: Sequence[Snapshot], now: datetime) -> None:
        width = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line would break the rewriting
        lines = [printable(bar_line(snapshot, now, self.name_width))[:width] for snapshot in snapshots]
        if self.drawn and lines == self.lines:
            return  # nothing moved since the last poll
        # Back to the start of the block: \r for its last line, one line up for each line above it.
        up = f"\x1b[{self.drawn - 1}A" if self.drawn > 1 else ""
        text = "\r" + up + "\n".join("\r" + line + "\x1b[K" for line in lines)
        self.out.write(text, ending="")
        self.out.flush()
        self.drawn = len(lines)
        self.lines = lines


@dataclass
class Watch:
    """Polls the snapshots until none is under way, the deadline passes, or the user interrupts."""

    ids: list[int]
    display: Display
    err: OutputWrapper
    poll_seconds: float
    timeout: float | None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def run(self) -> int:
        deadline = None if self.timeout is None else self.clock() + self.timeout
        worker_down = ""  # the reason last said, while the worker is not reporting
        while True:
            now = timezone.now()
            found = Snapshot.objects.in_bulk(self.ids)
            missing = [sid for sid in self.ids if sid not in found]
            if missing:
                self.display.close()
                ids = ", ".join(f"#{sid}" for sid in missing)
                self.err.write(f"snapshot {ids} is gone: its client was deleted")
                return EXIT_FAILED
            snapshots = [found[sid] for sid in self.ids]
            under_way = [s for s in snapshots if s.active]
            if under_way:
                problem = worker_problem(now)
                if problem and problem != worker_down:
                    self.display.note(f"waiting for the binlog worker: {problem}")
                elif worker_down and not problem:
                    self.display.note("the binlog worker is reporting again")
                worker_down = problem
            self.display.show(snapshots, now)
            if not under_way:
                self.display.close()
                self._report_ended(snapshots)
                return EXIT_DONE if all(s.state == Snapshot.State.DONE for s in snapshots) else EXIT_FAILED
            if deadline is not None and self.clock() >= deadline:
                self.display.close()
                self._report_ended(snapshots)
                names = ", ".join(f"{table_name(s)} ({s.state})" for s in under_way)
                self.err.write(f"timed out after {self.timeout:g} s with {names} under way; {CONTINUES}")
                return EXIT_TIMEOUT
            self.sleep(self.poll_seconds)

    def _report_ended(self, snapshots: Sequence[Snapshot]) -> None:
        """On stderr, each snapshot that failed, with the worker's whole error, and each that was cancelled."""
        for snapshot in snapshots:
            if snapshot.state == Snapshot.State.FAILED:
                error = "\n".join(printable(line) for line in snapshot.error.strip().splitlines()) or "no reason given"
                self.err.write(f"{table_name(snapshot)}: failed after {num(snapshot.rows_done)} rows: {error}")
            elif snapshot.state == Snapshot.State.CANCELLED:
                self.err.write(f"{table_name(snapshot)}: cancelled after {num(snapshot.rows_done)} rows")
