"""manage.py snapshot: ask for the current rows of tables in a client's queue, and watch the binlog worker read them.

    manage.py snapshot --client NAME SCHEMA.TABLE [SCHEMA.TABLE ...] [--where COND] [--no-wait] [--timeout S]
    manage.py snapshot --client NAME SCHEMA.TABLE [...] --cancel

The request goes through relay/store/snapshots.py (the admin's client action and the protocol's SNAPSHOT command ask
the same way, so all refuse the same things with the same words). The worker (``manage.py runbinlog``) does the
reading; this command only asks and watches. Asking again for a table under way for the client attaches to that
snapshot, so an interrupted watch is resumed by running the same command again.

While it waits it shows one line per table: a bar rewritten in place when stdout is a terminal, plain lines now and
then otherwise (for logs and CI). When the worker is not reporting, by the health rule of relay/web/health.py, it
says so once rather than waiting in silence.

Exit status: 0 when every snapshot is done (with --no-wait: once asked for; with --cancel: once cancelled); 1 for a
request that cannot be carried out (unknown client, a refusal, whose message says why) and when any snapshot failed
(its error printed) or was cancelled; 2 when --timeout passed first; 130 on Ctrl-C. Neither a timeout nor Ctrl-C
stops the snapshot: the worker goes on with it.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser, OutputWrapper
from django.utils import timezone

from relay.models import Client, Snapshot
from relay.startup import check_store, command_config, fail
from relay.store.snapshots import SnapshotRefused, cancel_snapshots, parse_table, progress, request_snapshots
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


class Command(BaseCommand):
    help = (
        "Queue the current rows of tables into a client's queue, read by the binlog worker in key order, in order "
        "with the stream; wait and show the progress (or --no-wait), or --cancel."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", help="path of replicaterelay.conf (default: $RELAY_CONFIG or ./)")
        parser.add_argument("--client", required=True, help="the client's name, as it registers over the protocol")
        parser.add_argument(
            "tables",
            nargs="+",
            metavar="SCHEMA.TABLE",
            help="the tables (the client needs a filter that covers inserts on each)",
        )
        parser.add_argument("--where", default="", metavar="COND", help="only the rows meeting this SQL condition")
        parser.add_argument("--no-wait", action="store_true", help="ask, and return without watching")
        parser.add_argument(
            "--cancel", action="store_true", help="cancel the client's snapshots of these tables under way instead"
        )
        parser.add_argument(
            "--poll-seconds", type=float, default=0.5, metavar="S", help="how often to read the progress (0.5)"
        )
        parser.add_argument(
            "--timeout",
            type=float,
            metavar="S",
            help="stop watching after this many seconds, with exit status 2 (the snapshot goes on)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        command_config(options["config"])
        if not options["poll_seconds"] > 0:
            raise fail("--poll-seconds must be more than 0")
        if options["timeout"] is not None and not options["timeout"] > 0:
            raise fail("--timeout must be more than 0")
        if options["cancel"] and options["where"]:
            raise fail("--cancel takes no --where: it cancels the client's snapshots of those tables, whatever rows")
        try:
            tables = list(dict.fromkeys(parse_table(name) for name in options["tables"]))
        except SnapshotRefused as exc:
            raise fail(f"snapshot: {exc}") from None
        check_store()
        client = self._client(options["client"])
        if options["cancel"]:
            self._cancel(client, tables)
            return
        under_way = set(client.snapshots.filter(state__in=Snapshot.ACTIVE).values_list("id", flat=True))
        try:
            snapshots = request_snapshots(client, tables, options["where"])
        except SnapshotRefused as exc:
            raise fail(f"snapshot refused: {exc}") from None
        for snapshot in snapshots:
            if snapshot.id in under_way:
                done = f", {num(snapshot.rows_done)} rows so far" if snapshot.rows_done else ""
                what = f"already under way ({snapshot.state}{done})" + ("" if options["no_wait"] else ": watching it")
            else:
                what = "asked for"
            condition = f" where {snapshot.where}" if snapshot.where else ""
            self.stdout.write(
                f"snapshot #{snapshot.id} of {table_name(snapshot)}{condition} for client {client.name}: {what}"
            )
        if options["no_wait"]:
            self.stdout.write(f"watch it with: {watch_command(client.name, tables, options['where'])}")
            return
        display = Display(self.stdout, self.stdout.isatty(), [table_name(s) for s in snapshots], time.monotonic)
        watch = Watch([s.id for s in snapshots], display, self.stderr, options["poll_seconds"], options["timeout"])
        try:
            status = watch.run()
        except KeyboardInterrupt:
            display.close()
            self.stderr.write(f"interrupted: {CONTINUES}")
            raise SystemExit(EXIT_INTERRUPTED) from None
        if status != EXIT_DONE:
            raise SystemExit(status)

    def _client(self, name: str) -> Client:
        client = Client.objects.filter(name=name).first()
        if client is not None:
            return client
        known = list(Client.objects.order_by("name").values_list("name", flat=True)[: KNOWN_CLIENTS_SHOWN + 1])
        listed = ", ".join(known[:KNOWN_CLIENTS_SHOWN]) + (", ..." if len(known) > KNOWN_CLIENTS_SHOWN else "")
        hint = f" (clients: {listed})" if known else " (no client has registered yet)"
        raise fail(
            f"snapshot: no client named {name!r}{hint}; a client registers by connecting over the relay protocol"
        )

    def _cancel(self, client: Client, tables: list[tuple[str, str]]) -> None:
        for schema, table in tables:
            active = list(client.snapshots.filter(schema_name=schema, table_name=table, state__in=Snapshot.ACTIVE))
            if not active or not cancel_snapshots(active):
                self.stdout.write(
                    f"{schema}.{table}: no snapshot under way for client {client.name}, nothing to cancel"
                )
                continue
            for snapshot in Snapshot.objects.filter(id__in=[s.id for s in active]):
                self.stdout.write(
                    f"snapshot #{snapshot.id} of {table_name(snapshot)} for client {client.name}: {snapshot.state} "
                    f"after {num(snapshot.rows_done)} rows (those stay queued)"
                )
