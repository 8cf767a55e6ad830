"""Soak under faults: the whole relay for a given time on a private MariaDB, with processes killed at random moments.

    .venv/bin/python bench/soak.py --minutes 10                  # PostgreSQL on 127.0.0.1:5432 (a fresh database)
    .venv/bin/python bench/soak.py --minutes 2 --store sqlite --clients 8

This module is the engine: ``bench/soak.py`` is its command line, and tests/test_soak.py runs a short soak through
:func:`parse_args` and :class:`Soak`.

What runs (all on 127.0.0.1): a private MariaDB source with a steady mixed workload (inserts, multi-row inserts,
updates and deletes over six tables in two schemas, ADD/DROP COLUMN every few minutes, FLUSH BINARY LOGS now and
then); ``manage.py runbinlog`` twice (one active, one hot standby); ``manage.py runrelay`` twice; N clients, each its
own process with overlapping filters: half consume with manual-ack FETCH (``clientproto.RelayClient``), half with
legacy POLL. A client whose relay is unreachable moves to the other one.

Faults, at random moments (about one every ``--fault-every`` seconds, kinds in shuffled rounds so each comes up
evenly): SIGKILL of the active worker (the standby takes over; a new standby is started), SIGSTOP of the active
worker (PostgreSQL: the standby takes over once its lease is ``--takeover-after`` old; then SIGCONT, and the frozen
one waits as the standby), SIGKILL of a relay server (restarted on its port), SIGKILL of a client (restarted), and a
restart of the source.

The workload records exactly what it committed, in commit order: every row carries a unique ``op`` number (an
insert's or update's own; a delete's before image carries the row's last one), so every row change is one key
(type, schema, table, id, op) and each client's expected stream follows from its filters. After the run and a drain,
the checks are:

* manual-ack clients received every matching row, in order, none lost; an event comes twice only if it was not
  acknowledged when it came first (duplicates are deduplicated by per-client seq, cross-checked by (file, pos, row),
  and counted);
* legacy POLL clients lost at most the events in flight at a kill: one per kill of that client and one per relay
  kill (a relay kill otherwise only repeats events: at-least-once); order kept; duplicates counted;
* the worker's and the relay servers' resident memory (VmRSS, sampled every second) stayed under ``--rss-limit-mb``;
* the subscription point is exact: meanwhile a churn client subscribes fresh names with random (wildcard) filters and
  unsubscribes them a few seconds later; each one's queue holds every matching row committed between ADDFILTER's and
  REMOVEFILTER's replies, in order, and none committed after REMOVEFILTER's (:class:`FilterChurn`).

It prints a table, and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clientproto import ConnectionLost, ProtocolError, RelayClient, RelayError
from clientproto.records import Event
from devtools.sandbox import MariaDB, free_tcp_port
from devtools.wait import wait_for

REPO = Path(__file__).resolve().parent.parent

SECRET = "soak-secret"
SCHEMAS = ("sa", "sb")
TABLES = ("t0", "t1", "t2")
INSERT, UPDATE, DELETE = 1, 2, 4
KIND_LETTERS = {"I": INSERT, "U": UPDATE, "D": DELETE}
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
#: The soak's workers' --takeover-after: short, so that a frozen worker's round does not take half a minute.
FROZEN_TAKEOVER_SECONDS = 3
#: One transaction of the workload in XA_SHARE is an XA transaction (XA PREPARE, then XA COMMIT or XA ROLLBACK).
XA_SHARE = 5

#: (type, schema, table, id, op): one row change, unique over the whole run.
Row = tuple[int, str, str, int, int]


# -- filters ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterSpec:
    mask: int
    schema: str
    table: str

    def matches(self, kind: int, schema: str, table: str) -> bool:
        return (
            bool(self.mask & kind)
            and fnmatch.fnmatchcase(schema, self.schema)
            and fnmatch.fnmatchcase(table, self.table)
        )

    def text(self) -> str:
        return f"{self.mask}:{self.schema}:{self.table}"

    @classmethod
    def parse(cls, text: str) -> FilterSpec:
        mask, schema, table = text.split(":")
        return cls(int(mask), schema, table)


_BROAD = [
    FilterSpec(INSERT, "sa", "*"),
    FilterSpec(UPDATE | DELETE, "s?", "t1"),
    FilterSpec(DELETE, "*", "*"),
    FilterSpec(INSERT | UPDATE, "sb", "t2"),
]


def client_filters(index: int) -> list[FilterSpec]:
    """Overlapping filters: one table whole, one broad wildcard filter, and for every third client a filter that
    repeats part of the others (a row matching several filters must still come once)."""
    schema, table = SCHEMAS[index % 2], TABLES[(index // 2) % 3]
    filters = [FilterSpec(INSERT | UPDATE | DELETE, schema, table), _BROAD[index % 4]]
    if index % 3 == 0:
        filters.append(FilterSpec(INSERT | DELETE, "s*", "t0"))
    return filters


def wanted(filters: Sequence[FilterSpec], row: Row) -> bool:
    return any(spec.matches(row[0], row[1], row[2]) for spec in filters)


# -- the client process ---------------------------------------------------------------------------------------------


def _event_line(event: Event) -> str:
    image = event.before() if event.type == DELETE else event.after()
    row_id, op = (image.get("id") or b"?").decode(), (image.get("op") or b"?").decode()
    return (
        f"E {event.seq} {event.type} {event.schema} {event.table} {row_id} {op} {event.file or '-'} {event.pos}"
        f" {event.row}\n"
    )


def run_client(args: argparse.Namespace) -> int:
    """One soak client: logs every event it receives (and every acknowledgement once the relay confirmed it) to its
    file, one write per batch, so that a SIGKILL loses at most what was in flight."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    ports = [int(port) for port in args.ports.split(",")]
    turn = args.first
    filters = [FilterSpec.parse(text) for text in args.filters.split(",")]
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def out(lines: list[str]) -> None:
        if lines:
            os.write(fd, "".join(lines).encode())

    out(["\n"])  # ends a line a killed predecessor may have left unfinished
    client: RelayClient | None = None
    ready = False
    last = acked = 0
    parent = os.getppid()
    while not stop.is_set():
        if os.getppid() != parent:
            break  # the soak itself died: do not outlive it
        try:
            if client is None:
                client = RelayClient(
                    "127.0.0.1", ports[turn % len(ports)], SECRET, args.name, timeout=10, max_retries=2, backoff=0.2
                )
                client.max_backoff = 1.0
                client.connect()
                for spec in filters:
                    client.add_filter(spec.mask, spec.schema, spec.table)
                if not ready:
                    out(["R\n"])
                    ready = True
            if args.kind == "manual":
                ack_upto = last if last > acked else 0
                events = client.fetch(200, wait_ms=500, manual_ack=True, ack_upto=ack_upto)
                lines = []
                if ack_upto:  # the relay commits an acknowledgement before it answers the FETCH that carries it
                    acked = ack_upto
                    lines.append(f"A {ack_upto}\n")
                lines += [_event_line(event) for event in events]
                out(lines)
                if events:
                    last = max(last, events[-1].seq)
            else:
                event = client.poll()
                if event is None:
                    stop.wait(0.05)
                    continue
                out([_event_line(event)])
        except (ConnectionLost, RelayError, ProtocolError, OSError):
            if client is not None:
                client.close()
            client = None
            turn += 1  # the other relay
            stop.wait(0.2)
    if client is not None and args.kind == "manual" and last > acked:
        with contextlib.suppress(ConnectionLost, RelayError, ProtocolError, OSError):
            client.ack(last)
            out([f"A {last}\n"])
    if client is not None:
        client.close()
    os.close(fd)
    return 0


# -- the store -------------------------------------------------------------------------------------------------------


class Store:
    """The soak's own store (a fresh PostgreSQL database or SQLite file), read directly by the orchestrator."""

    def __init__(self, kind: str, workdir: Path, pg_url: str) -> None:
        self.kind = kind
        self._admin: Any = None
        if kind == "sqlite":
            self.path = workdir / "store.sqlite3"
            self.url = f"sqlite:///{self.path}"
            return
        import psycopg2

        self.name = f"relay_soak_{os.getpid()}"
        self._admin = psycopg2.connect(pg_url.replace("postgres://", "postgresql://", 1))
        self._admin.autocommit = True
        with self._admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {self.name}")
            cursor.execute(f"CREATE DATABASE {self.name}")
        self.url = pg_url.replace("postgresql://", "postgres://", 1).rsplit("/", 1)[0] + f"/{self.name}"

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            import sqlite3

            with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as lite:
                return list(lite.execute(sql.replace("%s", "?"), params).fetchall())
        import psycopg2

        pg = psycopg2.connect(self.url.replace("postgres://", "postgresql://", 1))
        try:
            with pg.cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        finally:
            pg.close()

    def drop(self) -> None:
        if self._admin is None:
            return
        with self._admin.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [self.name],
            )
            cursor.execute(f"DROP DATABASE IF EXISTS {self.name}")
        self._admin.close()


# -- processes -------------------------------------------------------------------------------------------------------


@dataclass
class Proc:
    kind: str
    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.args, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait(30)

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signum)

    def stop(self, timeout: float = 30) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss_kb(self) -> int:
        if not self.alive():
            return 0
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0


# -- the source workload ---------------------------------------------------------------------------------------------


class Workload:
    """Writes a steady mixed workload and records exactly what it committed, in commit order (one writer thread)."""

    def __init__(self, source: Any, rng: random.Random, rate: float, ddl_every: float, flush_every: float) -> None:
        self.source = source
        self.rng = rng
        self.rate = rate
        self.ddl_every = ddl_every
        self.flush_every = flush_every
        #: Held for each transaction and DDL, and by a source restart, so that none is cut in the middle.
        self.lock = threading.Lock()
        self.committed: list[Row] = []
        self.transactions = 0
        self.ddl = 0
        self.flushes = 0
        self.ambiguous = 0
        self.xa_committed = 0
        self.xa_rolled_back = 0
        self._live: dict[tuple[str, str], dict[int, int]] = {(s, t): {} for s in SCHEMAS for t in TABLES}
        self._next_id: dict[tuple[str, str], int] = dict.fromkeys(self._live, 1)
        self._op = 0
        self._extra: dict[tuple[str, str], str] = {}
        self._conn: Any = None

    def create_tables(self) -> None:
        statements = []
        for schema in SCHEMAS:
            statements.append(f"CREATE DATABASE {schema}")
            statements += [
                f"CREATE TABLE {schema}.{table} (id INT PRIMARY KEY, op BIGINT NOT NULL, pad VARCHAR(64))"
                for table in TABLES
            ]
        self.source.execute(*statements)

    def _plan(self) -> list[tuple[int, str, str, list[tuple[int, int]]]]:
        """One transaction: 1-4 statements, each (type, schema, table, [(id, op), ...]); a statement touches
        rows no other statement of the transaction touches."""
        plan = []
        used: set[tuple[str, str, int]] = set()
        for _ in range(self.rng.randint(1, 4)):
            schema, table = self.rng.choice(SCHEMAS), self.rng.choice(TABLES)
            live = self._live[(schema, table)]
            free = [row_id for row_id in live if (schema, table, row_id) not in used] if len(live) >= 30 else []
            kind = self.rng.choices((INSERT, UPDATE, DELETE), (5, 3, 2))[0] if free else INSERT
            if kind == INSERT:
                rows = []
                for _ in range(self.rng.choice((1, 1, 1, 2, 5))):
                    row_id = self._next_id[(schema, table)]
                    self._next_id[(schema, table)] += 1
                    self._op += 1
                    rows.append((row_id, self._op))
            else:
                row_id = self.rng.choice(free)
                if kind == UPDATE:
                    self._op += 1
                    rows = [(row_id, self._op)]
                else:
                    rows = [(row_id, live[row_id])]  # the before image carries the row's last op
            used.update((schema, table, row_id) for row_id, _ in rows)
            plan.append((kind, schema, table, rows))
        return plan

    def _connect(self) -> Any:
        if self._conn is None:
            self._conn = self.source.connect(autocommit=False)
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def _execute(
        self, plan: list[tuple[int, str, str, list[tuple[int, int]]]], xa: str = "", keep: bool = True
    ) -> None:
        """Commits ``plan``; as the XA transaction ``xa`` when given: prepared, a moment (when a fault may land),
        then committed, or rolled back when not ``keep`` (its rows must reach no client)."""
        conn = self._connect()
        with conn.cursor() as cursor:
            if xa:
                cursor.execute(f"XA START '{xa}'")
            for kind, schema, table, rows in plan:
                if kind == INSERT:
                    marks = ", ".join("(%s, %s, %s)" for _ in rows)
                    values = [v for row_id, op in rows for v in (row_id, op, f"pad-{op}")]
                    cursor.execute(f"INSERT INTO {schema}.{table} (id, op, pad) VALUES {marks}", values)
                elif kind == UPDATE:
                    (row_id, op) = rows[0]
                    cursor.execute(
                        f"UPDATE {schema}.{table} SET op = %s, pad = %s WHERE id = %s", (op, f"u{op}", row_id)
                    )
                else:
                    cursor.execute(f"DELETE FROM {schema}.{table} WHERE id = %s", (rows[0][0],))
            if xa:
                cursor.execute(f"XA END '{xa}'")
                cursor.execute(f"XA PREPARE '{xa}'")
                time.sleep(self.rng.uniform(0, 0.02))
                cursor.execute(f"XA {'COMMIT' if keep else 'ROLLBACK'} '{xa}'")
                return
        conn.commit()

    def _end_prepared(self, xa: str) -> None:
        """After a broken connection: an XA transaction it left prepared outlives it, holding its rows' locks, and
        would block the next writer of those rows: it is rolled back (and then counts as not landed)."""
        with contextlib.suppress(Exception):
            prepared = {
                row[3].decode() if isinstance(row[3], bytes) else row[3] for row in self.source.query("XA RECOVER")
            }
            if xa in prepared:
                self.source.execute(f"XA ROLLBACK '{xa}'")

    def _landed(self, plan: list[tuple[int, str, str, list[tuple[int, int]]]]) -> bool:
        """After an error during COMMIT: did the transaction commit? (It is atomic: its first row tells.)"""
        kind, schema, table, rows = plan[0]
        row_id, op = rows[0]
        for _ in range(600):
            try:
                found = self.source.query(f"SELECT op FROM {schema}.{table} WHERE id = %s", row_id)
                break
            except Exception:  # noqa: BLE001 - the source may be restarting: ask again
                time.sleep(0.1)
        else:
            raise RuntimeError("the source stayed unreachable for a minute")
        return not found if kind == DELETE else bool(found) and int(found[0][0]) == op

    def _record(self, plan: list[tuple[int, str, str, list[tuple[int, int]]]]) -> None:
        for kind, schema, table, rows in plan:
            live = self._live[(schema, table)]
            for row_id, op in rows:
                self.committed.append((kind, schema, table, row_id, op))
                if kind == DELETE:
                    del live[row_id]
                else:
                    live[row_id] = op
        self.transactions += 1

    def transaction(self) -> None:
        state = (dict(self._next_id), self._op)
        plan = self._plan()
        # One transaction in XA_SHARE is an XA transaction, and one of those in 4 is rolled back after its prepare.
        xa = f"soak-{self.transactions}-{self._op}" if self.rng.random() < 1 / XA_SHARE else ""
        keep = not xa or self.rng.random() >= 0.25
        with self.lock:
            try:
                self._execute(plan, xa, keep)
            except Exception:  # noqa: BLE001 - the connection broke: find out whether the COMMIT happened
                self._drop_connection()
                self.ambiguous += 1
                if xa:
                    self._end_prepared(xa)
                if not self._landed(plan):
                    self._next_id, self._op = state  # keep the id and op sequences dense
                    return
            if not keep:
                # Rolled back: the ids and ops are written again by later transactions, so a rolled-back row that
                # reached a client shows as a row twice, or out of order.
                self._next_id, self._op = state
                self.xa_rolled_back += 1
                return
            self.xa_committed += bool(xa)
            self._record(plan)

    def alter(self) -> None:
        """ADD COLUMN to one table, or DROP the one added before."""
        key = (self.rng.choice(SCHEMAS), self.rng.choice(TABLES))
        with self.lock:
            self._drop_connection()
            column = self._extra.pop(key, None)
            if column is None:
                column = f"x{self.ddl}"
                self.source.execute(f"ALTER TABLE {key[0]}.{key[1]} ADD COLUMN {column} INT DEFAULT {self.ddl}")
                self._extra[key] = column
            else:
                self.source.execute(f"ALTER TABLE {key[0]}.{key[1]} DROP COLUMN {column}")
            self.ddl += 1

    def flush_logs(self) -> None:
        with self.lock:
            self.source.execute("FLUSH BINARY LOGS")
            self.flushes += 1

    def restart_source(self) -> None:
        with self.lock:
            self._drop_connection()
            self.source.restart()

    def run(self, deadline: float, stop: threading.Event) -> None:
        started = time.monotonic()
        next_ddl = started + self.ddl_every / 2
        next_flush = started + self.rng.uniform(0.5, 1.5) * self.flush_every
        while not stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_ddl:
                self.alter()
                next_ddl = now + self.ddl_every
            if now >= next_flush:
                self.flush_logs()
                next_flush = now + self.rng.uniform(0.5, 1.5) * self.flush_every
            self.transaction()
            # Pace to the target rate: rows so far against the time it took.
            ahead = len(self.committed) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                stop.wait(min(ahead, 1.0))
        self._drop_connection()


# -- subscriptions made and ended while rows flow ---------------------------------------------------------------------


@dataclass
class Subscription:
    """One churn client's subscription: its filter, and the slice of the committed rows written while it existed."""

    name: str
    spec: FilterSpec
    start: int  # len(committed) right after ADDFILTER's reply
    end: int  # len(committed) right after REMOVEFILTER's reply


class FilterChurn:
    """Subscribes fresh clients and unsubscribes them again while the workload writes, to check that the subscription
    point is exact: every matching row committed after ADDFILTER's reply and before REMOVEFILTER's reply is queued, and
    none committed after REMOVEFILTER's reply.

    The workload's lock is held across each ADDFILTER and REMOVEFILTER, so no transaction is in flight at that moment:
    the rows recorded before it were committed before the reply, and every row recorded after it was committed after.
    A change is routed by the filters in force when the worker applies it, so before REMOVEFILTER the churn waits
    (still holding the lock) until the worker has applied everything the source wrote: otherwise the rows of the
    window that a lagging worker had not reached yet would rightly not be queued.
    """

    def __init__(
        self, workload: Workload, ports: Sequence[int], rng: random.Random, applied: Callable[[], bool]
    ) -> None:
        self.workload = workload
        self.ports = list(ports)
        self.rng = rng
        self.applied = applied  # has the worker applied everything the source wrote?
        self.subscriptions: list[Subscription] = []
        self.abandoned = 0  # a relay died during ADDFILTER or REMOVEFILTER: that subscription's window is unknown

    def _spec(self) -> FilterSpec:
        schema = self.rng.choice([*SCHEMAS, "s?", "*"])
        table = self.rng.choice([*TABLES, "t*", "?1"])
        return FilterSpec(self.rng.randint(1, 7), schema, table)

    def _client(self, name: str) -> RelayClient:
        client = RelayClient("127.0.0.1", self.rng.choice(self.ports), SECRET, name, timeout=10, reconnect=False)
        client.connect()
        return client

    def cycle(self, number: int, stop: threading.Event) -> None:
        name, spec = f"churn-{number:04d}", self._spec()
        committed = self.workload.committed
        try:
            client = self._client(name)
            with self.workload.lock:
                client.add_filter(spec.mask, spec.schema, spec.table)
                start = len(committed)
        except (ConnectionLost, RelayError, ProtocolError, OSError):
            self.abandoned += 1
            return
        stop.wait(self.rng.uniform(0.5, 3.0))
        end = None
        while end is None:
            try:
                if not client.connected:
                    client = self._client(name)
                with self.workload.lock:
                    try:
                        wait_for(self.applied, 30, 0.02, "the worker to apply the source's writes")
                    except TimeoutError:
                        self.abandoned += 1
                        self._remove_for_good(name, spec)
                        return
                    client.remove_filter(spec.mask, spec.schema, spec.table)
                    end = len(committed)
            except (ConnectionLost, RelayError, ProtocolError, OSError):
                # The reply may or may not have been sent: the window's end is unknown, so it is not checked; the
                # filter must still go, or this queue would grow for the rest of the run.
                client.close()
                self.abandoned += 1
                self._remove_for_good(name, spec)
                return
        client.close()
        self.subscriptions.append(Subscription(name, spec, start, end))

    def _remove_for_good(self, name: str, spec: FilterSpec) -> None:
        for _ in range(60):
            try:
                with self._client(name) as client:
                    client.remove_filter(spec.mask, spec.schema, spec.table)
                return
            except (ConnectionLost, RelayError, ProtocolError, OSError):
                time.sleep(0.5)

    def run(self, deadline: float, stop: threading.Event) -> None:
        number = 0
        while not stop.is_set() and time.monotonic() < deadline - 5:
            self.cycle(number, stop)
            number += 1

    def received(self, port: int, name: str) -> list[Row]:
        """Everything in a churn client's queue, in order (read after the drain)."""
        rows: list[Row] = []
        with RelayClient("127.0.0.1", port, SECRET, name, timeout=30) as client:
            while events := client.fetch(500, wait_ms=0):
                for event in events:
                    parts = _event_line(event).split()
                    rows.append((int(parts[2]), parts[3], parts[4], int(parts[5]), int(parts[6])))
        return rows

    def check(self, port: int) -> tuple[Counter[str], list[str]]:
        counts: Counter[str] = Counter()
        problems: list[str] = []
        committed = self.workload.committed
        for sub in self.subscriptions:
            got = self.received(port, sub.name)
            inside = [row for row in committed[sub.start : sub.end] if sub.spec.matches(row[0], row[1], row[2])]
            earlier = {row for row in committed[: sub.start] if sub.spec.matches(row[0], row[1], row[2])}
            late = [row for row in got if row not in earlier and row not in set(inside)]
            in_window = [row for row in got if row not in earlier]
            counts["subscriptions"] += 1
            counts["checked"] += len(inside)
            counts["before the reply"] += len(got) - len(in_window)
            if in_window != inside:
                missing = [row for row in inside if row not in set(got)]
                counts["missing"] += len(missing)
                counts["late"] += len(late)
                problems.append(
                    f"{sub.name} {sub.spec.text()}: {len(inside)} rows committed while subscribed, got {len(in_window)}"
                    f" ({len(missing)} missing, first {missing[:1]}; {len(late)} after REMOVEFILTER or unmatched,"
                    f" first {late[:1]})"
                )
        counts["abandoned"] = self.abandoned
        return counts, problems


# -- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    faults: Counter[str] = field(default_factory=Counter)
    takeovers: list[float] = field(default_factory=list)
    frozen_takeovers: list[float] = field(default_factory=list)  # from SIGSTOP to the standby's takeover
    client_kills: Counter[str] = field(default_factory=Counter)
    rss_max_kb: dict[str, int] = field(default_factory=lambda: {"worker": 0, "relay": 0})
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = Path(tempfile.mkdtemp(prefix="relay-soak-"))
        self.result = Result()
        self.stop = threading.Event()
        self.store: Store | None = None
        self.source: Any = None
        self.workers: list[Proc] = []
        self.relays: dict[int, Proc] = {}
        self.clients: dict[str, Proc] = {}
        self.filters: dict[str, list[FilterSpec]] = {}
        self.kinds: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.workload: Workload | None = None
        self.churn: FilterChurn | None = None
        self._procs_lock = threading.Lock()

    # -- set-up ---------------------------------------------------------------------------------------------------

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    def manage(self, kind: str, name: str, *args: str) -> Proc:
        return Proc(kind, [sys.executable, "manage.py", *args], self.env, self.workdir / f"{name}.log")

    def setup(self) -> None:
        args = self.args
        self.store = Store(args.store, self.workdir, args.pg_url)
        self.source = MariaDB(self.workdir / "mariadb", row_metadata_full=True).start()
        self.workload = Workload(self.source, self.rng, args.rate, args.ddl_every, args.flush_every)
        self.workload.create_tables()
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("RELAY_", "DJANGO_"))}
        self.env.update(
            DJANGO_SETTINGS_MODULE="relayproject.settings",
            DATABASE_URL=self.store.url,
            RELAY_DATA_DIR=str(self.workdir / "data"),
            RELAY_SERVER_AUTHSECRET=SECRET,
            RELAY_SERVER_HEARTBEATSECONDS="1",
            **self.source.source_env(),
            RELAY_LOG_LEVEL="INFO",
            PYTHONUNBUFFERED="1",
        )
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
        )
        if migrate.returncode:
            raise RuntimeError(f"migrate failed:\n{migrate.stdout}{migrate.stderr}")
        for number in range(2):
            self.start_relay(free_tcp_port(), number)
        for index in range(args.clients):
            name = f"soak-{index:02d}"
            self.kinds[name] = "manual" if index % 2 == 0 else "legacy"
            self.filters[name] = client_filters(index)
            self.start_client(name, index % 2)
        wait_for(lambda: all(self.client_ready(name) for name in self.clients), 120, 0.1, "clients ready")
        # The worker's first start (no checkpoint yet) is here; a restarted worker resumes at the checkpoint.
        file, pos = self.source.binlog_position()
        self.env["RELAY_SERVER_STARTFROM"] = f"{file}:{pos}"
        self.start_worker()
        wait_for(self.active_worker, 60, 0.1, "an active worker")
        self.start_worker()

    def start_relay(self, port: int, number: int | None = None) -> None:
        name = f"relay-{port}"
        proc = self.manage(
            "relay", name, "runrelay", "--address", "127.0.0.1", "--port", str(port), "--idle-timeout", "600"
        ).start()
        with self._procs_lock:
            self.relays[port] = proc

        def listening() -> bool:
            if not proc.alive():
                raise RuntimeError(f"runrelay exited:\n{proc.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(listening, 60, 0.1, f"relay on port {port}")

    def client_ready(self, name: str) -> bool:
        path = self.client_log(name)
        return path.exists() and "R\n" in path.read_text()

    def client_log(self, name: str) -> Path:
        return self.workdir / f"{name}.events"

    def start_client(self, name: str, first: int = 0) -> None:
        args = [
            sys.executable,
            "-m",
            "devtools.soak",
            "client",
            "--name",
            name,
            "--kind",
            self.kinds[name],
            "--ports",
            ",".join(str(port) for port in self.relays),
            "--first",
            str(first),
            "--log",
            str(self.client_log(name)),
            "--filters",
            ",".join(spec.text() for spec in self.filters[name]),
        ]
        proc = Proc("client", args, self.env, self.workdir / f"{name}.log").start()
        with self._procs_lock:
            self.clients[name] = proc

    def start_worker(self) -> Proc:
        proc = self.manage(
            "worker",
            f"worker-{len(self.workers)}",
            "runbinlog",
            "--batch-ms",
            "50",
            "--takeover-after",
            str(FROZEN_TAKEOVER_SECONDS),
        ).start()
        with self._procs_lock:
            self.workers = [w for w in self.workers if w.alive()] + [proc]
        return proc

    def active_worker(self) -> Proc | None:
        assert self.store is not None
        rows = self.store.query("SELECT pid FROM relay_workerstatus WHERE state = %s", ["connected"])
        pids = {row[0] for row in rows}
        return next((w for w in self.workers if w.alive() and w.pid in pids), None)

    # -- faults ---------------------------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        active = self.active_worker() or next((w for w in self.workers if w.alive()), None)
        if active is None:
            self.start_worker()
            return
        active.kill()
        killed = time.monotonic()
        self.start_worker()  # the next standby
        # The waiting standby takes over, normally; the one just started may win the lock if it comes free late.
        successor = self.successor_of(active)
        self.result.takeovers.append(time.monotonic() - killed)
        self.log(f"worker {active.pid} killed: worker {successor.pid} took over in {self.result.takeovers[-1]:.1f}s")

    def freeze_worker(self) -> None:
        """SIGSTOP of the active worker at a random moment of its work: the standby takes over once the frozen one's
        lease is FROZEN_TAKEOVER_SECONDS old; then SIGCONT, and the frozen one, whose store sessions were ended, must
        write nothing more (the checks at the end) and wait as the standby."""
        active = self.active_worker()
        if active is None or not any(w.alive() and w is not active for w in self.workers):
            self.start_worker()  # no standby to take over: this round makes one instead
            return
        active.signal(signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            successor = self.successor_of(active)
            self.result.frozen_takeovers.append(time.monotonic() - frozen)
        finally:
            active.signal(signal.SIGCONT)
        self.log(f"worker {active.pid} frozen: worker {successor.pid} took over in {time.monotonic() - frozen:.1f}s")

    def successor_of(self, previous: Proc) -> Proc:
        """The worker that became active after ``previous`` (waits for it)."""

        def other_active() -> Proc | None:
            worker = self.active_worker()
            return worker if worker is not None and worker is not previous else None

        successor = wait_for(other_active, 60, 0.1, "a standby to take over")
        assert successor is not None  # wait_for returns only a true value
        return successor

    def kill_relay(self) -> None:
        port = self.rng.choice(sorted(self.relays))
        self.relays[port].kill()
        time.sleep(self.rng.uniform(0, 1.0))  # its clients notice and move to the other relay meanwhile
        self.start_relay(port)

    def kill_client(self) -> None:
        name = self.rng.choice(sorted(self.clients))
        self.clients[name].kill()
        self.result.client_kills[name] += 1
        self.start_client(name, self.rng.randrange(2))

    def restart_source(self) -> None:
        assert self.workload is not None
        self.workload.restart_source()

    def inject_faults(self, deadline: float) -> None:
        actions = {
            "worker": self.kill_worker,
            "freeze": self.freeze_worker,
            "relay": self.kill_relay,
            "client": self.kill_client,
            "source": self.restart_source,
        }
        deck: list[str] = []
        mean = self.args.fault_every
        next_at = time.monotonic() + self.rng.uniform(0.3, 0.7) * mean
        while not self.stop.is_set():
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            if self.stop.is_set() or time.monotonic() >= deadline - 3:
                return
            if not deck:
                deck = [kind for kind in actions if kind in self.args.faults.split(",")]
                if self.args.store == "sqlite":  # a frozen worker keeps SQLite's file lock: no takeover to test
                    deck = [kind for kind in deck if kind != "freeze"]
                self.rng.shuffle(deck)
            kind = deck.pop()
            self.log(f"injecting: {kind}")
            try:
                actions[kind]()
            except Exception as exc:  # noqa: BLE001 - a fault that cannot be carried out fails the soak
                self.result.failures.append(f"fault {kind} failed: {exc}")
                self.stop.set()
                return
            self.result.faults[kind] += 1
            self.log(f"fault {sum(self.result.faults.values())}: {kind}")
            next_at = time.monotonic() + self.rng.uniform(0.5, 1.5) * mean

    def sample_rss(self) -> None:
        while not self.stop.wait(1.0):
            with self._procs_lock:
                procs = [*self.workers, *self.relays.values()]
            for proc in procs:
                kb = proc.rss_kb()
                self.result.rss_max_kb[proc.kind] = max(self.result.rss_max_kb[proc.kind], kb)

    # -- the run --------------------------------------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        started_setup = time.monotonic()
        try:
            self.setup()
            assert self.workload is not None and self.store is not None
            self.log(f"set up in {time.monotonic() - started_setup:.0f}s; running for {args.minutes} min")
            started = time.monotonic()
            deadline = started + args.minutes * 60
            self.churn = FilterChurn(self.workload, sorted(self.relays), random.Random(args.seed + 1), self.applied)
            threads = [
                threading.Thread(target=self.inject_faults, args=(deadline,), name="faults"),
                threading.Thread(target=self.sample_rss, name="rss"),
                threading.Thread(target=self.churn.run, args=(deadline, self.stop), name="churn"),
            ]
            for thread in threads:
                thread.start()
            writer_error: list[BaseException] = []

            def write() -> None:
                try:
                    self.workload.run(deadline, self.stop)  # type: ignore[union-attr]
                except BaseException as exc:  # noqa: BLE001 - reported as a failure
                    writer_error.append(exc)
                    self.stop.set()

            writer = threading.Thread(target=write, name="writer")
            writer.start()
            while writer.is_alive():
                writer.join(10)
                if writer.is_alive():
                    self.log(f"{len(self.workload.committed):,} rows written")
            duration = time.monotonic() - started
            if writer_error:
                self.result.failures.append(f"the workload failed: {writer_error[0]!r}")
            self.stop.set()
            threads[0].join(120)
            threads[2].join(120)
            drained = self.drain()
            threads[1].join(5)
            for proc in self.clients.values():
                proc.stop()
            self.check(duration, drained)
        finally:
            self.stop.set()
            self.teardown()
        if self.result.failures:
            return 1  # the logs, the clients' event files and the source's binlogs stay for the diagnosis
        shutil.rmtree(self.workdir, ignore_errors=True)
        return 0

    def applied(self) -> bool:
        """Whether the worker's checkpoint has reached the source's current position."""
        assert self.store is not None and self.source is not None
        target = self.source.binlog_position()
        checkpoint = self.store.query("SELECT binlog_file, binlog_pos FROM relay_checkpoint")
        return bool(checkpoint) and (checkpoint[0][0], checkpoint[0][1]) >= target

    def drain(self) -> float:
        """Waits until the worker has applied everything and every client has consumed its queue."""
        assert self.store is not None and self.source is not None
        started = time.monotonic()
        for proc in self.workers:
            if not proc.alive():
                self.start_worker()
        target = self.source.binlog_position()

        def done() -> bool:
            checkpoint = self.store.query("SELECT binlog_file, binlog_pos FROM relay_checkpoint")  # type: ignore[union-attr]
            if not checkpoint or (checkpoint[0][0], checkpoint[0][1]) < target:
                return False
            queues = self.store.query(  # type: ignore[union-attr]
                "SELECT c.acked_seq, COALESCE(q.last_seq, 0) FROM relay_client c"
                " LEFT JOIN relay_queuestate q ON q.client_id = c.id WHERE c.name LIKE %s",
                ["soak-%"],
            )
            return len(queues) == len(self.clients) and all(acked >= last for acked, last in queues)

        try:
            wait_for(done, self.args.drain_timeout, 0.1, "the drain")
        except TimeoutError as exc:
            self.result.failures.append(str(exc))
        return time.monotonic() - started

    def teardown(self) -> None:
        for proc in [*self.clients.values(), *self.relays.values(), *self.workers]:
            with contextlib.suppress(Exception):
                proc.stop(10)
        if self.source is not None:
            with contextlib.suppress(Exception):
                self.source.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.drop()

    # -- checks ---------------------------------------------------------------------------------------------------

    def read_log(self, name: str) -> Iterator[list[str]]:
        for line in self.client_log(name).read_text().splitlines():
            parts = line.split()
            if parts and parts[0] in ("E", "A") and len(parts) == (10 if parts[0] == "E" else 2):
                yield parts

    def check(self, duration: float, drain: float) -> None:
        assert self.workload is not None
        result = self.result
        committed = self.workload.committed
        relay_kills = result.faults["relay"]
        stats = {"manual": Counter[str](), "legacy": Counter[str]()}
        for name, kind in sorted(self.kinds.items()):
            expected = [row for row in committed if wanted(self.filters[name], row)]
            check = self.check_manual if kind == "manual" else self.check_legacy
            counts, problems = check(name, expected, relay_kills)
            stats[kind].update(counts)
            result.failures += [f"{name}: {problem}" for problem in problems]
        if result.faults.total() < self.args.min_faults:
            result.failures.append(f"{result.faults.total()} faults injected, fewer than {self.args.min_faults}")
        for kind, kb in result.rss_max_kb.items():
            if kb > self.args.rss_limit_mb * 1024:
                result.failures.append(f"{kind} RSS reached {kb / 1024:.0f} MB (limit {self.args.rss_limit_mb} MB)")
        if result.takeovers and max(result.takeovers) > 15:
            result.failures.append(f"a standby took {max(result.takeovers):.1f}s to take over")
        if self.churn is not None:
            stats["churn"], problems = self.churn.check(min(self.relays))
            result.failures += problems
        self.report(duration, drain, stats)

    def check_manual(self, name: str, expected: list[Row], relay_kills: int) -> tuple[Counter[str], list[str]]:
        counts: Counter[str] = Counter()
        problems: list[str] = []
        by_seq: dict[int, tuple[Row, tuple[str, int, int]]] = {}
        positions: set[tuple[str, int, int]] = set()
        acked = 0
        for parts in self.read_log(name):
            if parts[0] == "A":
                acked = max(acked, int(parts[1]))
                continue
            seq = int(parts[1])
            row: Row = (int(parts[2]), parts[3], parts[4], int(parts[5]), int(parts[6]))
            where = (parts[7], int(parts[8]), int(parts[9]))
            counts["received"] += 1
            if seq <= acked:
                problems.append(f"seq {seq} came again after it was acknowledged (up to {acked})")
            if seq in by_seq:
                counts["duplicates"] += 1
                if by_seq[seq] != (row, where):
                    problems.append(f"seq {seq} came twice with different contents: {by_seq[seq]} / {(row, where)}")
                continue
            if where in positions:
                problems.append(f"(file, pos, row) {where} came under two seqs")
            positions.add(where)
            by_seq[seq] = (row, where)
        got = [by_seq[seq][0] for seq in sorted(by_seq)]
        counts["checked"] = len(got)
        if sorted(by_seq) != list(range(1, len(by_seq) + 1)):
            problems.append(f"seqs are not 1..{len(by_seq)}")
        lost = max(0, len(expected) - len(got))
        counts["lost"] = lost
        if got != expected:
            first = next(
                (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
            )
            was = got[first] if first < len(got) else None
            should = expected[first] if first < len(expected) else None
            problems.append(
                f"{len(got)} rows received, {len(expected)} expected; first difference at #{first}: "
                f"got {was}, expected {should}"
            )
        return counts, problems

    def check_legacy(self, name: str, expected: list[Row], relay_kills: int) -> tuple[Counter[str], list[str]]:
        counts: Counter[str] = Counter()
        problems: list[str] = []
        index = {row: i for i, row in enumerate(expected)}
        seen: set[Row] = set()
        last_index = -1
        for parts in self.read_log(name):
            if parts[0] != "E":
                continue
            row: Row = (int(parts[2]), parts[3], parts[4], int(parts[5]), int(parts[6]))
            counts["received"] += 1
            if row in seen:
                counts["duplicates"] += 1
                continue
            seen.add(row)
            position = index.get(row)
            if position is None:
                problems.append(f"received a row no filter of it matches, or never committed: {row}")
                continue
            if position < last_index:
                problems.append(f"row {row} came out of order")
            last_index = max(last_index, position)
        lost = len(expected) - len(seen & set(index))
        bound = self.result.client_kills[name] + relay_kills
        counts["checked"] = len(seen)
        counts["lost"] = lost
        counts["bound"] = bound
        if lost > bound:
            problems.append(f"lost {lost} rows, more than the {bound} in flight at its kills and the relays'")
        return counts, problems

    def report(self, duration: float, drain: float, stats: dict[str, Counter[str]]) -> None:
        assert self.workload is not None
        result, workload, args = self.result, self.workload, self.args
        written = len(workload.committed)
        delivered = stats["manual"]["checked"] + stats["legacy"]["checked"]
        manual_n = sum(1 for kind in self.kinds.values() if kind == "manual")
        legacy_n = len(self.kinds) - manual_n
        kinds = ("worker", "freeze", "relay", "client", "source")
        faults = ", ".join(f"{kind} {result.faults[kind]}" for kind in kinds)

        def spread(times: list[float]) -> str:
            return f"max {max(times):.1f} s, mean {sum(times) / len(times):.1f} s" if times else "-"

        takeover = f"after a kill {spread(result.takeovers)}; after a SIGSTOP {spread(result.frozen_takeovers)}"
        m, lg, ch = stats["manual"], stats["legacy"], stats.get("churn", Counter[str]())
        rows = [
            (
                "store",
                f"{args.store}, {args.clients} clients ({manual_n} manual-ack FETCH, {legacy_n} legacy POLL),"
                f" seed {args.seed}",
            ),
            ("duration", f"{duration:.0f} s of load, then {drain:.0f} s of drain"),
            (
                "load written",
                f"{written:,} rows ({written / duration:.0f} rows/s) in {workload.transactions:,} transactions,"
                f" {workload.ddl} DDL, {workload.flushes} FLUSH BINARY LOGS; XA transactions: {workload.xa_committed:,}"
                f" committed, {workload.xa_rolled_back:,} rolled back after their prepare",
            ),
            ("load delivered", f"{delivered:,} rows to clients ({delivered / (duration + drain):.0f} rows/s)"),
            ("faults injected", f"{result.faults.total()}: {faults}"),
            ("standby takeover", takeover),
            (
                "manual-ack clients",
                f"{m['checked']:,} rows checked in order, {m['lost']} lost, {m['duplicates']:,} duplicates"
                " (all unacknowledged at a kill)",
            ),
            (
                "legacy POLL clients",
                f"{lg['checked']:,} rows checked in order, {lg['lost']} lost (bound {lg['bound']}),"
                f" {lg['duplicates']:,} duplicates",
            ),
            (
                "filter churn",
                f"{ch['subscriptions']} subscriptions made and ended while rows flowed, {ch['checked']:,} rows"
                f" committed while subscribed: {ch['missing']} missing, {ch['late']} after REMOVEFILTER"
                f" ({ch['before the reply']:,} committed before ADDFILTER's reply came too;"
                f" {ch['abandoned']} windows unknown after a relay kill)",
            ),
            (
                "max RSS",
                f"worker {result.rss_max_kb['worker'] / 1024:.0f} MB,"
                f" relay server {result.rss_max_kb['relay'] / 1024:.0f} MB"
                f" (limit {args.rss_limit_mb} MB)",
            ),
            ("result", "PASS" if not result.failures else f"FAIL ({len(result.failures)} problems)"),
        ]
        width = max(len(label) for label, _ in rows)
        print()
        print(f"| {'measure'.ljust(width)} | value |")
        print(f"|{'-' * (width + 2)}|-------|")
        for label, value in rows:
            print(f"| {label.ljust(width)} | {value} |")
        for failure in result.failures[:50]:
            print(f"FAIL: {failure}")
        if result.failures:
            print(f"logs kept in {self.workdir}")
        sys.stdout.flush()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The soak's options (``client ...``: one client process's, which the soak starts itself)."""
    argv = list(argv)
    if argv[:1] == ["client"]:
        parser = argparse.ArgumentParser(prog="soak.py client")
        parser.add_argument("--name", required=True)
        parser.add_argument("--kind", choices=("manual", "legacy"), required=True)
        parser.add_argument("--ports", required=True)
        parser.add_argument("--first", type=int, default=0)
        parser.add_argument("--log", required=True)
        parser.add_argument("--filters", required=True)
        return parser.parse_args(argv[1:], argparse.Namespace(client=True))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="a PostgreSQL server to create the soak's database on")
    parser.add_argument("--clients", type=int, default=20, help="half manual-ack FETCH, half legacy POLL")
    parser.add_argument("--rate", type=float, default=150.0, help="rows per second written to the source")
    parser.add_argument("--fault-every", type=float, default=14.0, help="mean seconds between faults")
    parser.add_argument("--faults", default="worker,freeze,relay,client,source", help="kinds of fault to inject")
    parser.add_argument("--min-faults", type=int, default=0, help="fail unless at least this many faults happened")
    parser.add_argument("--ddl-every", type=float, default=150.0, help="seconds between ADD/DROP COLUMN")
    parser.add_argument("--flush-every", type=float, default=45.0, help="mean seconds between FLUSH BINARY LOGS")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--rss-limit-mb", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv, argparse.Namespace(client=False))
    if args.min_faults == 0 and args.minutes >= 10:
        args.min_faults = 30
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_client(args) if args.client else Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
