"""The usage pipeline's tests share: a workload on the private MariaDB at chosen event times with the counts it must
produce, the events of a binlog file, and ``manage.py usagepipeline`` run as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from binlog.files import iter_events
from devtools.sandbox import MariaDB
from relay.pipeline.tally import DAY, HOUR
from tests.helpers.processes import REPO

D1 = 1709251200  # 2024-03-01 00:00:00 UTC
D2 = D1 + DAY
KINDS = {"insert": 0, "update": 1, "delete": 2}


class Workload:
    """Runs statements at chosen event times (SET TIMESTAMP) and keeps the counts they must produce."""

    def __init__(self, server: MariaDB, schema: str) -> None:
        self.schema = schema
        self.conn = server.connect(schema)
        self.rows: Counter[tuple[int, str, int]] = Counter()  # (hour, table, kind index) -> rows
        self.transactions: Counter[tuple[int, str]] = Counter()  # (hour, table) -> transactions
        self.changed: Counter[tuple[str, str]] = Counter()  # (table, column) -> UPDATE rows that changed it
        self.updates: Counter[str] = Counter()  # table -> UPDATE rows

    def _statement(self, at: int, kind: str, table: str, sql: str, changes: tuple[str, ...]) -> int:
        with self.conn.cursor() as cur:
            cur.execute(f"SET TIMESTAMP = {at}")
            cur.execute(sql)
            count = cur.rowcount
        assert count > 0, sql
        self.rows[(at - at % HOUR, table, KINDS[kind])] += count
        if kind == "update":
            self.updates[table] += count
            for column in changes:
                self.changed[(table, column)] += count
        return count

    def run(self, at: int, kind: str, table: str, sql: str, changes: tuple[str, ...] = ()) -> None:
        """One autocommitted statement: one transaction."""
        self._statement(at, kind, table, sql, changes)
        self.transactions[(at - at % HOUR, table)] += 1

    def transaction(self, at: int, *steps: tuple[str, str, str, tuple[str, ...]]) -> None:
        """Several statements in one committed transaction."""
        with self.conn.cursor() as cur:
            cur.execute(f"SET TIMESTAMP = {at}")
            cur.execute("BEGIN")
        for kind, table, sql, changes in steps:
            self._statement(at, kind, table, sql, changes)
        with self.conn.cursor() as cur:
            cur.execute("COMMIT")
        for table in {step[1] for step in steps}:
            self.transactions[(at - at % HOUR, table)] += 1

    def hourly(self) -> dict[tuple[int, str], tuple[int, int, int, int]]:
        keys = {(hour, table) for hour, table, _ in self.rows}
        return {
            (hour, table): (*(self.rows[(hour, table, k)] for k in range(3)), self.transactions[(hour, table)])
            for hour, table in keys
        }

    def daily(self) -> dict[tuple[int, str], tuple[int, int, int, int]]:
        days: dict[tuple[int, str], list[int]] = {}
        for (hour, table), counts in self.hourly().items():
            total = days.setdefault((hour - hour % DAY, table), [0, 0, 0, 0])
            for i, value in enumerate(counts):
                total[i] += value
        return {key: tuple(value) for key, value in days.items()}  # type: ignore[misc]


def run_workload(server: MariaDB, schema: str) -> tuple[Workload, list[Path]]:
    """Three tables, three binlog files, single- and multi-statement transactions over two days and four hours."""
    server.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, customer VARCHAR(40), amount DECIMAL(10,2),"
        " status ENUM('new','paid','sent') NOT NULL DEFAULT 'new', note TEXT)",
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), visits INT UNSIGNED NOT NULL DEFAULT 0)",
        "CREATE TABLE events (id BIGINT PRIMARY KEY AUTO_INCREMENT, payload JSON, at DATETIME(3))",
        database=schema,
    )
    server.execute("FLUSH BINARY LOGS")
    first = server.binlog_position()[0]
    w = Workload(server, schema)
    orders = ",".join(f"('c{i % 7}', {i}.50, 'new', 'n{i}')" for i in range(50))
    w.run(
        D1 + 10 * HOUR + 300, "insert", "orders", f"INSERT INTO orders (customer, amount, status, note) VALUES {orders}"
    )
    people = ",".join(f"({i}, 'p{i}', 0)" for i in range(1, 21))
    w.run(D1 + 10 * HOUR + 301, "insert", "customers", f"INSERT INTO customers VALUES {people}")
    w.transaction(
        D1 + 10 * HOUR + 2400,
        ("update", "orders", "UPDATE orders SET status = 'paid' WHERE id <= 10", ("status",)),
        ("update", "customers", "UPDATE customers SET visits = visits + 1 WHERE id <= 5", ("visits",)),
        (
            "insert",
            "events",
            "INSERT INTO events (payload, at) VALUES ('{\"a\":1}', NOW(3)), (NULL, NOW(3)), ('[1,2]', NOW(3))",
            (),
        ),
    )
    server.execute("FLUSH BINARY LOGS")
    w.run(D1 + 11 * HOUR, "delete", "orders", "DELETE FROM orders WHERE id > 45")
    w.run(
        D1 + 11 * HOUR + 1,
        "update",
        "orders",
        "UPDATE orders SET amount = amount + 1, status = 'sent' WHERE id BETWEEN 11 AND 20",
        ("amount", "status"),
    )
    w.run(D1 + DAY - 1, "insert", "events", "INSERT INTO events (payload) VALUES " + ",".join(["('{}')"] * 7))
    server.execute("FLUSH BINARY LOGS")
    w.run(D2, "update", "customers", "UPDATE customers SET name = CONCAT(name, 'x')", ("name",))
    w.run(D2 + 5, "delete", "events", "DELETE FROM events WHERE id <= 2")
    w.transaction(
        D2 + 3 * HOUR,
        ("insert", "orders", "INSERT INTO orders (customer) VALUES ('a'), ('b'), ('c'), ('d')", ()),
        ("delete", "orders", "DELETE FROM orders WHERE id = 1", ()),
    )
    w.conn.close()
    server.execute("FLUSH BINARY LOGS")
    last = server.binlog_position()[0]
    names = [p for p in server.binlog_files() if first <= p.name < last]
    assert len(names) == 3
    return w, names


def event_map(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, event type) of every event of a binlog file."""
    events, position = [], 4
    for event in iter_events(path.read_bytes()):
        events.append((position, position + len(event), event[4]))
        position += len(event)
    return events


def command_env(folder: Path) -> dict[str, str]:
    """The command's environment: its own data folder and store, and temporary folders the test can inspect."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RELAY_", "SPARK_", "PYSPARK_"))}
    for name in ("data", "tmp", "spark-local"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DJANGO_SECRET_KEY="pipeline-tests",
        RELAY_DATA_DIR=str(folder / "data"),
        DATABASE_URL=f"sqlite:///{folder / 'data' / 'store.sqlite3'}",
        TMPDIR=str(folder / "tmp"),
        SPARK_LOCAL_DIRS=str(folder / "spark-local"),
        PYTHONUNBUFFERED="1",
    )
    return env


def usagepipeline(folder: Path, *args: str, timeout: float = 120) -> tuple[int, str, str, float]:
    """Runs the command; returns (exit status, stdout, stderr, seconds)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "manage.py", "usagepipeline", *args],
        cwd=REPO,
        env=command_env(folder),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr, time.monotonic() - started
