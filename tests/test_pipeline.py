"""The PySpark usage pipeline: exact counts from real binlog files and change logs, bad inputs, loading the store."""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from binlog import read_binlog_files
from devtools.sandbox import MariaDB
from relay.config import LoggerConfig
from relay.pipeline import inputs, job, snapshot, sources
from relay.pipeline.tally import DAY, FILE, HOUR, FileTally
from relay.worker.changelog import ChangeLog

pytestmark = pytest.mark.spark

D1 = 1709251200  # 2024-03-01 00:00:00 UTC
D2 = D1 + DAY
KINDS = {"insert": 0, "update": 1, "delete": 2}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = job.build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
        },
        app_name="relay-tests",
    )
    yield session
    session.stop()
    # py4j logs its connection closing from __del__ at exit, after pytest has closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)


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


def archive(files: list[Path], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, folder / path.name)
    return folder


def table_counts(spark: Any, out: Path, name: str, schema: str, start: str) -> dict[tuple[int, str], tuple]:
    frame = spark.read.parquet(str(out / name)).where(f"schema_name = '{schema}'")
    rows = frame.selectExpr(
        f"CAST({start} AS LONG) AS ts", "table_name", "inserts", "updates", "deletes", "transactions"
    ).collect()
    return {(r.ts, r.table_name): (r.inserts, r.updates, r.deletes, r.transactions) for r in rows}


def column_counts(spark: Any, out: Path, schema: str) -> dict[tuple[str, str], tuple[int, int]]:
    frame = spark.read.parquet(str(out / "column_changes")).where(f"schema_name = '{schema}'")
    result: Counter[tuple[str, str, str]] = Counter()
    for r in frame.collect():
        result[(r.table_name, r.column_name, "changed")] += r.changed
        result[(r.table_name, r.column_name, "compared")] += r.compared
    return {(t, c): (result[(t, c, "changed")], result[(t, c, "compared")]) for t, c, _ in result}


def expected_columns(w: Workload, server: MariaDB) -> dict[tuple[str, str], tuple[int, int]]:
    expected = {}
    for table, updates in w.updates.items():
        names = [r[0] for r in server.query(f"SHOW COLUMNS FROM `{w.schema}`.`{table}`")]
        for name in names:
            expected[(table, name)] = (w.changed[(table, name)], updates)
    return expected


def test_binlog_counts_equal_the_workload(
    spark: Any, any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    folder = archive(files, tmp_path / "binlogs")
    # Without row metadata the names come from a snapshot of the source's information_schema.
    names = None if server.row_metadata_full else snapshot.snapshot_from_source(server.replication_settings())
    out = tmp_path / "out"
    messages: list[str] = []
    listed = inputs.collect(spark, str(folder), None)
    report, results = job.run(spark, listed, out, snapshot=names, write=messages.append)

    assert results is not None and report.problems() == []
    assert [Path(f.path).name for f in report.files] == [p.name for p in files]
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    assert table_counts(spark, out, "usage_daily", schema, "start") == w.daily()
    assert column_counts(spark, out, schema) == expected_columns(w, server)
    # The workload's transactions, each in the hour of its commit, among whatever else the server logged.
    per_hour = {
        r.hour_ts: r.transactions
        for r in spark.read.parquet(str(out / "transactions_hourly"))
        .selectExpr("CAST(hour AS LONG) AS hour_ts", "transactions")
        .collect()
    }
    for hour in (D1 + 10 * HOUR, D1 + 11 * HOUR, D1 + 23 * HOUR, D2, D2 + 3 * HOUR):
        assert per_hour[hour] >= len({t for (h, t) in w.transactions if h == hour}) > 0
    busiest = spark.read.parquet(str(out / "busiest_tables")).where("day = '2024-03-01'").orderBy("rank").collect()
    assert next((r.schema_name, r.table_name) for r in busiest if r.schema_name == schema) == (schema, "orders")
    assert any("decode 3 binlog" in m for m in messages) and any("done in" in m for m in messages)


def test_binlogs_named_by_uris_and_hadoop_globs(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """Names only Hadoop resolves: a file:// URI of a directory and of a file, and a brace glob over two folders
    (Python's open() takes none of them)."""
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    first = archive(files[:1], tmp_path / "first")
    rest = archive(files[1:], tmp_path / "rest")
    names = {
        "glob": f"file://{tmp_path}/{{first,rest}}/{{{','.join(p.name for p in files)}}}",
        "uris": f"file://{rest},file://{first / files[0].name}",
    }
    for how, spec in names.items():
        out = tmp_path / f"out-{how}"
        listed = inputs.collect(spark, spec, None)
        assert listed.missing == [] and len(listed.binlogs) == 3, how
        assert all(uri.startswith("file:/") for uri in listed.binlogs), how
        report, _ = job.run(spark, listed, out, write=lambda _: None)
        assert report.problems() == [] and sorted(Path(f.path).name for f in report.files) == [p.name for p in files]
        assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly(), how
        assert table_counts(spark, out, "usage_daily", schema, "start") == w.daily(), how
        assert column_counts(spark, out, schema) == expected_columns(w, server), how


def test_bytes_read_by_spark_and_local_files_read_in_chunks_count_the_same(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A file of a distributed file system reaches its task as the bytes Spark read (binaryFiles); a local one is
    opened by its task and read in chunks. Forcing the first way on local files gives the same records."""
    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    write_change_logs(files, tmp_path / "json", schema, {"json"})
    write_change_logs(files, tmp_path / "text", schema, {"text"})
    listed = inputs.collect(spark, ",".join(map(str, files)), f"{tmp_path / 'json'},{tmp_path / 'text'}")
    tasks = job.input_tasks(listed)
    assert len(tasks) == len(files) + 4 and all(sources.local_path(uri) for _, uri in tasks)
    body = partial(job.decode_file, snapshot=None, log_timezone="UTC", skip_binlogs=frozenset())

    def records(open_local: bool) -> list[tuple]:
        found = job.read_files(spark.sparkContext, tasks, body, open_local=open_local).collect()
        # A FILE record's fifth field is the seconds its task took.
        return sorted(r[:5] + r[6:] if r[0] == FILE else r for r in found)

    by_spark, by_task = records(False), records(True)
    assert by_spark == by_task
    file_records = [r for r in by_task if r[0] == FILE]
    assert len(file_records) == len(tasks) and all(r[-1] is None and r[3] > 0 for r in file_records)


def test_local_paths_of_file_uris() -> None:
    assert sources.local_path("file:/archive/binlog.000001") == "/archive/binlog.000001"
    assert sources.local_path("file:///a%20b/binlog.000001") == "/a b/binlog.000001"
    assert sources.local_path("file://localhost/x") == "/x"
    assert sources.local_path("hdfs://nn:8020/x") is None
    assert sources.local_path("file://otherhost/x") is None


def test_input_names_split_on_commas_outside_glob_braces() -> None:
    assert inputs.split_names(" a/b.*, hdfs://nn/x/{c,d}/binlog.{000001,000002} ,,e ") == [
        "a/b.*",
        "hdfs://nn/x/{c,d}/binlog.{000001,000002}",
        "e",
    ]


def test_binlog_without_names_uses_positions(spark: Any, mariadb_no_metadata: MariaDB, tmp_path: Path) -> None:
    """No metadata and no snapshot: counts are still exact, columns are @1, @2..."""
    server = mariadb_no_metadata
    schema = f"nometa_{tmp_path.name[-8:]}".replace("-", "_")
    server.execute(f"CREATE DATABASE `{schema}`")
    try:
        w, files = run_workload(server, schema)
    finally:
        server.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    out = tmp_path / "out"
    job.run(spark, inputs.collect(spark, ",".join(str(p) for p in files), None), out, write=lambda _: None)
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    columns = column_counts(spark, out, schema)
    assert columns[("orders", "@4")] == (w.changed[("orders", "status")], w.updates["orders"])
    assert columns[("customers", "@3")] == (w.changed[("customers", "visits")], w.updates["customers"])


def write_change_logs(files: list[Path], folder: Path, schema: str, formats: set[str]) -> None:
    """What the worker's logger writes for the same transactions."""
    log = ChangeLog(LoggerConfig(folder, (schema,), frozenset(), frozenset(formats)))
    log.write(read_binlog_files(files))
    log.close()


def test_change_logs_count_like_the_workload(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    write_change_logs(files, tmp_path / "text", schema, {"text"})
    write_change_logs(files, tmp_path / "json", schema, {"json"})
    assert sorted(p.name for p in (tmp_path / "text").iterdir()) == ["relaylogs-20240301.txt", "relaylogs-20240302.txt"]

    out = tmp_path / "out-json"
    report, _ = job.run(spark, inputs.collect(spark, None, str(tmp_path / "json")), out, write=lambda _: None)
    assert report.problems() == [] and len(report.files) == 2
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    assert table_counts(spark, out, "usage_daily", schema, "start") == w.daily()
    assert column_counts(spark, out, schema) == expected_columns(w, server)

    # The text layout has no transaction identity (0), and leaves TEXT columns out.
    out = tmp_path / "out-text"
    report, _ = job.run(spark, inputs.collect(spark, None, str(tmp_path / "text")), out, write=lambda _: None)
    assert report.problems() == []
    no_transactions = {key: (*counts[:3], 0) for key, counts in w.hourly().items()}
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == no_transactions
    expected = {key: value for key, value in expected_columns(w, server).items() if key != ("orders", "note")}
    assert column_counts(spark, out, schema) == expected

    # Both layouts of a day, and the binlog files they came from: every change is counted once.
    both = tmp_path / "both"
    write_change_logs(files, both, schema, {"text", "json"})
    out = tmp_path / "out-both"
    archived = archive(files, tmp_path / "binlogs")
    report, _ = job.run(spark, inputs.collect(spark, str(archived), str(both)), out, write=lambda _: None)
    assert [s[1] for s in report.skipped] == ["the same day's .jsonl file is read instead"] * 2
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()


def test_text_log_of_the_original(tmp_path: Path) -> None:
    """Local clock times, quoted ';', escaped quotes and a value spanning lines, as the original wrote them."""
    path = tmp_path / "relaylogs-20240310.txt"
    path.write_bytes(
        b'01:30:00;shop;orders;I;id;1;name;"a;b"\n'
        b'01:59:59;shop;orders;U;id;1;1;name;"a;b";"multi\nline"\n'
        b'03:00:00;shop;orders;U;id;1;1;name;"say \\"hi\\"";"say \\"hi\\""\n'
        b"23:10:00;shop;items;D;id;NULL\n"
    )
    tally = FileTally(sources.LOG, str(path))
    sources.read_log(tally, str(path), path.read_bytes(), "Europe/Brussels", frozenset())
    day = D1 + 9 * DAY  # 2024-03-10, UTC+1 in Brussels
    assert tally.usage == {
        (day, "shop", "orders"): [1, 1, 0, 0],  # 01:30 and 01:59 local = 00:xx UTC
        (day + 2 * HOUR, "shop", "orders"): [0, 1, 0, 0],
        (day + 22 * HOUR, "shop", "items"): [0, 0, 1, 0],
    }
    assert tally.columns == {(day, "shop", "orders", "id"): [0, 2], (day, "shop", "orders", "name"): [1, 2]}


def test_bad_inputs_are_reported_and_skipped(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    folder = archive(files, tmp_path / "binlogs")
    data = files[0].read_bytes()
    (folder / "binlog.900001").write_bytes(data[: len(data) // 2])  # cut in the middle of an event
    (folder / "binlog.900002").write_bytes(b"\xfebin" + bytes(range(256)) * 8)  # garbage after the magic
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (folder / "binlog.900003").write_bytes(bytes(flipped))  # a checksum mismatch
    (folder / "binlog.900004").write_bytes(b"not a binlog at all")
    (folder / "binlog.900005").write_bytes(b"")  # an empty file: its task gets zero bytes
    logs = tmp_path / "logs"
    write_change_logs(files, logs, schema, {"json"})
    good_json = (logs / "relaylogs-20240301.jsonl").read_bytes()
    (logs / "relaylogs-20240305.jsonl").write_bytes(good_json[:-20])  # truncated last line
    (logs / "relaylogs-20240306.txt").write_bytes(b"12:00:00;shop;t;I;id;1\n\x00\x9f\xffgarbage\n")

    out = tmp_path / "out"
    report, _ = job.run(
        spark,
        inputs.collect(
            spark,
            f"{folder},{tmp_path / 'nowhere'},nosuch://archive/binlog.*,{folder}/nothing.*",
            str(logs / "*.jsonl") + "," + str(logs / "*.txt"),
        ),
        out,
        write=lambda _: None,
    )
    problems = "\n".join(report.problems())
    assert f"{tmp_path / 'nowhere'}: no such file or directory" in problems
    assert 'nosuch://archive/binlog.*: No FileSystem for scheme "nosuch"' in problems
    assert f"{folder}/nothing.*: no file matches" in problems
    failed = {Path(f.path).name: f.error for f in report.failed}
    assert set(failed) == {
        "binlog.900001",
        "binlog.900002",
        "binlog.900003",
        "binlog.900004",
        "binlog.900005",
        "relaylogs-20240305.jsonl",
        "relaylogs-20240306.txt",
    }
    assert "needs" in failed["binlog.900001"] and "left" in failed["binlog.900001"]
    assert "checksum" in failed["binlog.900003"]
    assert "not a binlog file" in failed["binlog.900004"] and "not a binlog file" in failed["binlog.900005"]
    assert "truncated" in failed["relaylogs-20240305.jsonl"]
    assert "line 2: not a change log line" in failed["relaylogs-20240306.txt"]
    # The good binlogs and logs still count (the JSON logs of the same binlog files are not counted twice).
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    saved = json.loads((out / f"run-{report.run}.json").read_text())
    assert len([f for f in saved["files"] if f["error"]]) == 7


@pytest.mark.django_db
def test_results_load_into_the_store(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from relay.models import ColumnChangeHistory, UsageHistory
    from relay.pipeline.load import load_results

    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    for attempt in (1, 2):  # a second run over the same archives replaces, never adds
        report, results = job.run(
            spark, inputs.collect(spark, ",".join(map(str, files)), None), tmp_path / "out", write=lambda _: None
        )
        loaded = load_results(results, report.run)
        assert loaded["hour"] >= len(w.hourly()) and loaded["day"] >= len(w.daily()), attempt
        assert loaded["columns"] >= len(expected_columns(w, server)), attempt

    def stored(period: str) -> dict[tuple[int, str], tuple[int, int, int, int]]:
        rows = UsageHistory.objects.filter(period=period, schema_name=schema)
        assert all(r.run == report.run for r in rows)
        return {
            (int(r.start.timestamp()), r.table_name): (r.inserts, r.updates, r.deletes, r.transactions) for r in rows
        }

    assert stored("hour") == w.hourly()
    assert stored("day") == w.daily()

    # Column changes per UTC day: orders and customers are updated on the first day, customers' names on the second.
    columns = list(ColumnChangeHistory.objects.filter(schema_name=schema))
    assert all(r.run == report.run for r in columns)
    assert {str(r.day) for r in columns} == {"2024-03-01", "2024-03-02"}
    second_day = {(r.table_name, r.column_name): r.changed for r in columns if str(r.day) == "2024-03-02"}
    assert second_day[("customers", "name")] == w.changed[("customers", "name")]
    changed: Counter[tuple[str, str]] = Counter()
    compared: Counter[tuple[str, str]] = Counter()
    for r in columns:
        changed[(r.table_name, r.column_name)] += r.changed
        compared[(r.table_name, r.column_name)] += r.compared
    assert {key: (changed[key], compared[key]) for key in compared} == expected_columns(w, server)

    # The table usage page lists, per table, each column's changed and compared UPDATE rows over the loaded days.
    browser = Client()
    browser.force_login(User.objects.create_user("viewer", password="x" * 12))
    page = browser.get("/usage/", {"q": schema}).content.decode()
    assert "Column changes on UPDATE" in page
    for table in w.updates:
        assert f'<h3 class="mono">{schema}.{table} <span class="muted">2024-03-01' in page
    for (table, column), (times, rows) in expected_columns(w, server).items():
        section = page[page.index(f'<h3 class="mono">{schema}.{table} ') :].split("</table>")[0]
        cells = f'<td><span class="mono">{column}</span></td><td class="num">{times}</td><td class="num">{rows}</td>'
        assert cells in section, (table, column)


def test_partial_row_images_compare_only_present_columns(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A MINIMAL image carries the key before and the changed columns after: nothing can be compared."""
    server, schema = fresh_schema
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, qty INT, note TEXT)",
        "INSERT INTO t VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')",
        database=schema,
    )
    server.execute("FLUSH BINARY LOGS")
    first = server.binlog_position()[0]
    server.execute(
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "UPDATE t SET qty = qty + 1",
        "SET SESSION binlog_row_image = 'FULL'",
        "UPDATE t SET qty = qty + 1 WHERE id <= 2",
        database=schema,
    )
    server.execute("FLUSH BINARY LOGS")
    last = server.binlog_position()[0]
    files = [str(p) for p in server.binlog_files() if first <= p.name < last]
    out = tmp_path / "out"
    job.run(spark, inputs.collect(spark, ",".join(files), None), out, write=lambda _: None)
    daily = spark.read.parquet(str(out / "usage_daily")).where(f"schema_name = '{schema}'").collect()
    assert [(r.table_name, r.updates) for r in daily] == [("t", 5)]
    assert column_counts(spark, out, schema) == {("t", "id"): (0, 2), ("t", "qty"): (2, 2), ("t", "note"): (0, 2)}


def test_shipped_zip_holds_what_the_tasks_import(tmp_path: Path) -> None:
    import zipfile

    from relay.pipeline.shipping import build_zip

    names = set(zipfile.ZipFile(build_zip(tmp_path / "tasks.zip")).namelist())
    assert {"binlog/__init__.py", "binlog/files.py", "relay/__init__.py", "relay/pipeline/sources.py"} <= names
    assert not any(
        name.startswith("relay/") and "pipeline" not in name and name != "relay/__init__.py" for name in names
    )
    for name in ("relay/pipeline/sources.py", "relay/pipeline/tally.py", "relay/pipeline/snapshot.py"):
        text = zipfile.ZipFile(tmp_path / "tasks.zip").read(name).decode()
        assert "import django" not in text and "from django" not in text and "pyspark" not in text


@pytest.mark.django_db
def test_command_loads_history_that_the_usage_page_shows(
    spark: Any, mariadb_no_metadata: MariaDB, tmp_path: Path
) -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from relay.models import UsageHistory

    server = mariadb_no_metadata
    schema = f"cmd_{tmp_path.name[-8:]}".replace("-", "_")
    server.execute(f"CREATE DATABASE `{schema}`")
    try:
        w, files = run_workload(server, schema)
        snapshot.save_snapshot(snapshot.snapshot_from_source(server.replication_settings()), tmp_path / "s.json")
    finally:
        server.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    folder = archive(files, tmp_path / "binlogs")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "relaylogs-20240309.txt").write_bytes(b"12:00:00;other;t;I;id;1\n12:00:01;other;t;I;id;2\n")
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command(
        "usagepipeline",
        binlogs=f"{folder}/binlog.*,{tmp_path / 'missing'}",
        logs=str(logs),
        out=str(tmp_path / "out"),
        schema_snapshot=str(tmp_path / "s.json"),
        master="local[2]",
        stdout=stdout,
        stderr=stderr,
    )
    output = stdout.getvalue()
    assert "schema snapshot:" in output and "loaded" in output and "decode 3 binlog and 1 change log files" in output
    assert f"not counted: {tmp_path / 'missing'}: no such file or directory" in stderr.getvalue()
    stored = {
        (int(r.start.timestamp()), r.table_name): (r.inserts, r.updates, r.deletes, r.transactions)
        for r in UsageHistory.objects.filter(period="day", schema_name=schema)
    }
    assert stored == w.daily()
    assert UsageHistory.objects.get(period="hour", schema_name="other").inserts == 2

    run = UsageHistory.objects.filter(schema_name=schema).values_list("run", flat=True).first()
    browser = Client()
    browser.force_login(User.objects.create_user("viewer", password="x" * 12))
    page = browser.get("/usage/", {"q": schema}).content.decode()
    assert "History from the pipeline" in page and run in page
    day_total = sum(sum(c[:3]) for (day, _), c in w.daily().items() if day == D1)
    assert f"<title>2024-03-01: {day_total}</title>" in page
