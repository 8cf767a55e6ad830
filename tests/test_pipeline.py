"""The PySpark usage pipeline: exact counts from real binlog files and change logs, binlogs cut at every kind of
boundary, bad inputs, outputs by URI, loopback, no litter, a standalone cluster, loading the store."""

from __future__ import annotations

import gzip
import io
import json
import logging
import shutil
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from binlog import read_binlog_files
from binlog.constants import XID_EVENT
from devtools.sandbox import MariaDB, free_tcp_port
from relay.config import LoggerConfig
from relay.pipeline import coverage, identity, inputs, job, snapshot, sources
from relay.pipeline.tally import DAY, FILE, HOUR, FileTally
from relay.worker.changelog import ChangeLog
from tests.helpers.pipeline import D1, D2, KINDS, Workload, event_map, run_workload, usagepipeline

pytestmark = pytest.mark.spark


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """pytest's tmp_path, removed after the test: copies of binlogs and Parquet outputs add up over runs."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


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
    assert len(tasks) == len(files) + 4 and all(sources.local_path(uri) for _, uri, _ in tasks)
    body = partial(job.decode_file, snapshot=None, log_timezone="UTC", coverage=None)

    def records(open_local: bool) -> list[tuple]:
        found = job.read_files(spark.sparkContext, tasks, body, open_local=open_local).collect()
        # A FILE record's eighth field is the seconds its task took.
        return sorted(r[:7] + r[8:] if r[0] == FILE else r for r in found)

    by_spark, by_task = records(False), records(True)
    assert by_spark == by_task
    file_records = [r for r in by_task if r[0] == FILE]
    assert len(file_records) == len(tasks)
    assert all(r[3] == "complete" and r[-1] is None and r[5] > 0 for r in file_records)


def test_local_paths_of_file_uris() -> None:
    assert sources.local_path("file:/archive/binlog.000001") == "/archive/binlog.000001"
    # As Hadoop lists them: the path as it is, never percent-encoded.
    assert sources.local_path("file:/a b/archive #2/x%41") == "/a b/archive #2/x%41"
    assert sources.local_path("file:///a b/binlog.000001") == "/a b/binlog.000001"
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


def test_a_binlog_given_twice_is_counted_once(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """A byte-identical copy under another name, and a file reached through a second path (a symbolic link): each
    is reported as a duplicate of the file counted, which counts once; the change log lines naming either file are
    left to it."""
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    copies = tmp_path / "copies"
    copies.mkdir()
    renamed = copies / f"renamed.{files[1].name.rpartition('.')[2]}"
    shutil.copy(files[1], renamed)  # listed first below: the copy is counted, the original named a duplicate
    folder = archive(files, tmp_path / "binlogs")
    (tmp_path / "link").symlink_to(folder)
    logs = tmp_path / "logs"
    write_change_logs(files, logs, schema, {"json"})
    cut = copies / f"cut.{files[0].name.rpartition('.')[2]}"  # taken while its server still wrote it
    cut.write_bytes(in_use(files[0].read_bytes())[: files[0].stat().st_size * 2 // 3])
    spec = f"{copies},{folder},{tmp_path / 'link' / files[2].name}"

    out = tmp_path / "out"
    report, _ = job.run(spark, inputs.collect(spark, spec, str(logs)), out, write=lambda _: None)
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    assert report.problems() == []
    assert report.skipped == [
        (f"file:{folder / files[1].name}", f"duplicate of file:{renamed}, not counted"),
        (f"file:{tmp_path / 'link' / files[2].name}", f"duplicate of file:{folder / files[2].name}, not counted"),
        (
            f"file:{cut}",
            f"the first {cut.stat().st_size:,} bytes of file:{folder / files[0].name} (a copy cut short), not counted",
        ),
    ]
    assert sorted(Path(f.path).name for f in report.files if f.source == "binlog") == sorted(
        [files[0].name, renamed.name, files[2].name]
    )
    assert column_counts(spark, out, schema) == expected_columns(w, server)
    left = {Path(binlog).name for f in report.files for binlog, _, _ in f.left_to_binlogs}
    assert left == {files[0].name, renamed.name, files[2].name}
    assert "3 skipped" in report.summary()


def test_copies_are_found_by_content_reading_no_more_than_needed() -> None:
    """Different sizes are never read; a differing head is read only that far; only equal heads are read whole."""
    head = identity.HEAD_BYTES
    contents = {
        "a": b"x" * 10,
        "b": b"x" * 10,  # a copy of a: small, read once, whole
        "c": b"y" * 10,  # same size as a, other bytes
        "d": b"z" * 11,  # a size of its own: never read
        "big1": b"h" * head + b"1",
        "big2": b"h" * head + b"2",  # same head as big1, another tail
        "big3": b"h" * head + b"1",  # a copy of big1
        "big4": b"k" * head + b"1",  # another head: read no further than it
    }
    reads: list[tuple[str, int | None]] = []

    def digest(uri: str, limit: int | None) -> bytes:
        reads.append((uri, limit))
        return contents[uri][:limit]

    copies = identity.find_copies(((uri, len(data)) for uri, data in contents.items()), digest)
    assert copies == {"b": "a", "big3": "big1"}
    heads = [(uri, head) for uri in ("a", "b", "c", "big1", "big2", "big3", "big4")]
    wholes: list[tuple[str, int | None]] = [(uri, None) for uri in ("big1", "big2", "big3")]
    assert sorted(reads, key=str) == sorted(heads + wholes, key=str)


def test_cut_copies_are_found_by_content() -> None:
    """A file whose bytes are all the start of a longer file's is a copy cut short: the longest is counted. Files
    with another start, or that go on differently, are not; a file shorter than KEY_BYTES is left alone."""
    head, key = identity.HEAD_BYTES, identity.KEY_BYTES
    whole = b"F" * key + bytes(range(256)) * (head // 64)  # longer than HEAD_BYTES
    contents = {
        "whole": whole,
        "cut": whole[: head + 1000],  # past HEAD_BYTES: compared whole against the start of "whole"
        "cut_small": whole[: key + 10],
        "cut_of_cut": whole[: head // 2],
        "other": whole[: key + 50] + b"a different tail",
        "other_start": b"G" * key + whole[key:],
        "tiny": whole[:20],
    }

    # A binlog, and a copy of it taken while its server still wrote it: the in-use flag of its format description
    # set, and that event's checksum with it.
    binlog = b"\xfebin" + bytes(9) + (100).to_bytes(4, "little") + bytes(4) + b"\x00\x00" + bytes(77) + b"CRC0"
    binlog += bytes(range(256)) * 40
    in_use = bytearray(binlog[:3000])
    in_use[21], in_use[100:104] = 1, b"CRC1"
    contents |= {"binlog": binlog, "in_use": bytes(in_use)}

    def digest(uri: str, limit: int | None, start: int = 0) -> bytes:
        return contents[uri][start:limit]

    def head(uri: str, count: int) -> bytes:
        return contents[uri][:count]

    cut = identity.find_cut_copies(((uri, len(data)) for uri, data in contents.items()), digest, head)
    assert cut == {
        "cut": "whole",
        "cut_small": "whole",
        "cut_of_cut": "whole",
        "in_use": "binlog",
    }


def test_every_file_of_an_input_directory_is_in_the_report(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A compressed binlog and a file of another name are not read, and the run says so as a problem (their bytes
    may hold changes it does not count); the binlog index is skipped (it holds none). The same for change logs."""
    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    folder = archive(files[:2], tmp_path / "binlogs")
    stem = files[0].name.rpartition(".")[0]
    (folder / f"{files[2].name}.gz").write_bytes(gzip.compress(files[2].read_bytes()))
    (folder / f"{stem}.index").write_text("".join(f"./{p.name}\n" for p in files))
    (folder / "notes.txt").write_text("archived by hand\n")
    logs = tmp_path / "logs"
    write_change_logs(files, logs, schema, {"json"})
    (logs / "relaylogs-20240303.jsonl.xz").write_bytes(b"\xfd7zXZ\x00")
    # The worker's marker of a batch it was putting in the log when the logs were copied.
    (logs / inputs.CHANGE_LOG_MARKER).write_text('{"file": "binlog.000009", "pos": 4, "sizes": {}}')

    report, _ = job.run(spark, inputs.collect(spark, str(folder), str(logs)), tmp_path / "out", write=lambda _: None)
    assert report.not_read == [
        (f"file:{folder / files[2].name}.gz", "compressed binlog: decompress it first"),
        (f"file:{folder / 'notes.txt'}", "not a binlog file name"),
        (f"file:{logs / 'relaylogs-20240303.jsonl.xz'}", "compressed change log: decompress it first"),
    ]
    assert report.skipped == [
        (f"file:{folder / stem}.index", "the binlog index, not a binlog"),
        (
            f"file:{logs / inputs.CHANGE_LOG_MARKER}",
            "the change log's marker of a batch being written, not a change log",
        ),
    ]
    assert report.problems() == [f"{what}: not read: {why}" for what, why in report.not_read]
    reported = [f.path for f in report.files] + [what for what, _ in report.skipped + report.not_read]
    listed = [f"file:{p}" for directory in (folder, logs) for p in directory.iterdir()]
    assert sorted(reported) == sorted(listed)
    assert "2 skipped, 3 not read" in report.summary()

    # A directory with nothing to read says what it holds instead.
    only = tmp_path / "only"
    only.mkdir()
    (only / f"{files[2].name}.gz").write_bytes(b"")
    assert inputs.collect(spark, str(only), None).missing == [
        (str(only), f"no binlog files in this directory ({files[2].name}.gz: compressed binlog: decompress it first)")
    ]


def test_change_log_lines_are_left_only_to_the_binlog_that_counted_them(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """Lines of transactions a binlog of the run counted are left to it; those of the transactions a partial binlog
    does not count are counted from the log, and so are another server's lines naming a binlog of the same name.
    The log's report says how many lines and bytes it left to which binlog, and counts only the rest."""
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    logs = tmp_path / "logs"
    write_change_logs(files, logs, schema, {"json"})
    folder = archive(files[:1], tmp_path / "binlogs")
    partial_end = next(end for _, end, kind in reversed(event_map(files[1])[:-3]) if kind == XID_EVENT)
    (folder / files[1].name).write_bytes(files[1].read_bytes()[:partial_end])  # its last transactions cut away
    # Server B logged changes of its own binlog of the same name as server A's first file, in its own GTIDs.
    other_schema = f"{schema}_b"
    other_logs = tmp_path / "other-logs"
    other_logs.mkdir()
    first_day = (logs / "relaylogs-20240301.jsonl").read_text().splitlines()
    other_lines = [other_server_line(line, other_schema) for line in first_day if files[0].name in line]
    (other_logs / "relaylogs-20240301.jsonl").write_text("".join(other_lines))

    out = tmp_path / "out"
    listed = inputs.collect(spark, str(folder), f"{logs},{other_logs}")
    report, _ = job.run(spark, listed, out, write=lambda _: None)
    # Every change of the workload once: the binlogs' from them, the cut transactions' from the log.
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    assert sum(r.rows for r in spark.read.parquet(str(out / "usage_daily")).where(
        f"schema_name = '{other_schema}'").collect()) == len(other_lines)  # fmt: skip

    by_name = {(Path(f.path).parent.name, Path(f.path).name): f for f in report.files}
    log = by_name[("logs", "relaylogs-20240301.jsonl")]
    records = [json.loads(line) for line in first_day]
    first = [r for r in records if r["file"] == files[0].name]
    counted_cut = [r for r in records if r["file"] == files[1].name and r["pos"] <= partial_end]
    size = (logs / "relaylogs-20240301.jsonl").stat().st_size
    left = [
        (f"file:{folder / files[0].name}", len(first), line_bytes(first_day, files[0].name, None)),
        (f"file:{folder / files[1].name}", len(counted_cut), line_bytes(first_day, files[1].name, partial_end)),
    ]
    assert 0 < len(counted_cut) < len([r for r in records if r["file"] == files[1].name])
    assert (log.status, log.left_to_binlogs) == ("complete", tuple(sorted(left)))
    assert log.counted_bytes == size - sum(b for _, _, b in left)
    assert log.rows == len(records) - len(first) - len(counted_cut)
    assert log.line().endswith(f"left to {left[1][0]}, which counted their changes")
    other = by_name[("other-logs", "relaylogs-20240301.jsonl")]
    assert (other.left_to_binlogs, other.rows, other.counted_bytes) == ((), len(other_lines), other.size)
    saved = json.loads((out / f"run-{report.run}.json").read_text())
    saved_log = next(f for f in saved["files"] if f["path"] == log.path)
    assert saved_log["left_to_binlogs"] == [list(entry) for entry in sorted(left)]


def other_server_line(line: str, schema: str) -> str:
    """A change log line as another server would have written it: its own GTIDs (another server id) and schema."""
    record = json.loads(line)
    domain, server_id, sequence = record["gtid"].split("-")
    record["gtid"], record["schema"] = f"{domain}-{int(server_id) + 1000}-{sequence}", schema
    return json.dumps(record) + "\n"


def line_bytes(lines: list[str], binlog: str, up_to: int | None) -> int:
    """Bytes (with their LF) of the change log lines of ``binlog`` at or before position ``up_to``."""
    chosen = (line for line in lines if json.loads(line)["file"] == binlog)
    return sum(len(line) + 1 for line in chosen if up_to is None or json.loads(line)["pos"] <= up_to)


def test_counted_spans_follow_gtids_and_stop_at_an_uncounted_transaction() -> None:
    spans = coverage.CountedSpans()
    spans.add("0-1-5", 100, 200)
    spans.add("0-1-6", 200, 300)
    spans.add("0-2-9", 300, 400)  # another source, interleaved: spans of its own
    spans.add("0-1-7", 400, 500)
    spans.interrupt()  # a transaction not counted: 0-1-8
    spans.add("0-1-9", 600, 700)
    spans.add("3E11FA47-71CA-11E1-9E33-C80AA9429562:23", 700, 800)
    spans.add("", 800, 900)
    spans.add("", 900, 950)
    assert [tuple(s) for s in spans.spans] == [
        ("0-1", 5, 7, 100, 500),
        ("0-2", 9, 9, 300, 400),
        ("0-1", 9, 9, 600, 700),
        ("3E11FA47-71CA-11E1-9E33-C80AA9429562", 23, 23, 700, 800),
        ("", 0, 0, 800, 950),
    ]
    cover = coverage.Coverage({"file:/a/binlog.000003": [tuple(s) for s in spans.spans]},
                              {"file:/a/binlog.000003": {"binlog.000003", "copy.000003"}})  # fmt: skip
    assert cover.owner("binlog.000003", "0-1-6", 250) == "file:/a/binlog.000003"
    assert cover.owner("copy.000003", "0-1-9", 650) == "file:/a/binlog.000003"
    assert cover.owner("binlog.000003", "", 900) == "file:/a/binlog.000003"
    assert cover.owner("binlog.000003", "0-1-8", 550) is None  # the transaction not counted
    assert cover.owner("binlog.000003", "0-1-7", 550) is None  # a position the span does not hold
    assert cover.owner("binlog.000003", "0-3-6", 250) is None  # another server's GTID
    assert cover.owner("binlog.000004", "0-1-6", 250) is None  # another file
    assert cover.owner("binlog.000003", "", 960) is None


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
    sources.read_log(tally, str(path), path.read_bytes(), "Europe/Brussels", None)
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
    (folder / "binlog.900002").write_bytes(b"\xfebin" + bytes(range(256)) * 8)  # garbage after the magic
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (folder / "binlog.900003").write_bytes(bytes(flipped))  # a checksum mismatch
    (folder / "binlog.900004").write_bytes(b"not a binlog at all")
    (folder / "binlog.900005").write_bytes(b"")  # an empty file: its task gets zero bytes
    logs = tmp_path / "logs"
    write_change_logs(files, logs, schema, {"json"})
    good_json = (logs / "relaylogs-20240301.jsonl").read_bytes()
    # A truncated last line (of a log that is no other's cut copy: it begins at the other's second line).
    (logs / "relaylogs-20240305.jsonl").write_bytes(good_json.split(b"\n", 1)[1][:-20])
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
        "binlog.900002",
        "binlog.900003",
        "binlog.900004",
        "binlog.900005",
        "relaylogs-20240305.jsonl",
        "relaylogs-20240306.txt",
    }
    assert "checksum" in failed["binlog.900003"]
    assert "not a binlog file" in failed["binlog.900004"] and "not a binlog file" in failed["binlog.900005"]
    assert "truncated" in failed["relaylogs-20240305.jsonl"]
    assert "line 2: not a change log line" in failed["relaylogs-20240306.txt"]
    # The good binlogs and logs still count (the JSON logs of the same binlog files are not counted twice).
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    saved = json.loads((out / f"run-{report.run}.json").read_text())
    assert len([f for f in saved["files"] if f["status"] == "unreadable"]) == 6
    assert saved["totals"]["unreadable"]["files"] == 6 and saved["totals"]["complete"]["files"] == 3 + 2


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
        binlogs=f"{folder}/binlog.*",
        logs=str(logs),
        out=str(tmp_path / "out"),
        schema_snapshot=str(tmp_path / "s.json"),
        master="local[2]",
        stdout=stdout,
        stderr=stderr,
    )
    output = stdout.getvalue()
    assert "schema snapshot:" in output and "loaded" in output and "decode 3 binlog and 1 change log files" in output
    assert stderr.getvalue() == ""
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


# -- files cut at every kind of boundary ------------------------------------------------------------------------


def complete_counts(path: Path, schema: str, cut: int) -> tuple[dict[tuple[int, str], list[int]], int, int]:
    """The oracle of a file cut at ``cut``: (hour, table) -> [inserts, updates, deletes, transactions] of the
    transactions whose commit ends at or before the cut, their row changes, and where the last of them ends."""
    counts: dict[tuple[int, str], list[int]] = {}
    rows, end = 0, 0
    for tx in read_binlog_files([path]):
        if tx.position.pos > cut:
            break
        end = tx.position.pos
        touched = set()
        for change in tx.changes:
            rows += 1
            if change.schema == schema:
                key = (change.timestamp - change.timestamp % HOUR, change.table)
                counts.setdefault(key, [0, 0, 0, 0])[KINDS[{1: "insert", 2: "update", 4: "delete"}[change.kind]]] += 1
                touched.add(key)
        for key in touched:
            counts[key][3] += 1
    return counts, rows, end


def in_use(data: bytes) -> bytes:
    """A closed binlog as it was while its server wrote it: its format description's in-use flag set (and that
    event's checksum made again)."""
    size = int.from_bytes(data[4 + 9 : 4 + 13], "little")
    event = bytearray(data[4 : 4 + size])
    event[17] |= 0x01  # LOG_EVENT_BINLOG_IN_USE_F
    event[-4:] = zlib.crc32(bytes(event[:-4])).to_bytes(4, "little")
    return data[:4] + bytes(event) + data[4 + size :]


def another_file(data: bytes, seconds: int) -> bytes:
    """The same binlog as if its server had begun it ``seconds`` later: its format description's time moved (and its
    checksum made again), so that its bytes begin no other file's."""
    size = int.from_bytes(data[4 + 9 : 4 + 13], "little")
    event = bytearray(data[4 : 4 + size])
    event[0:4] = (int.from_bytes(event[0:4], "little") + seconds).to_bytes(4, "little")
    event[-4:] = zlib.crc32(bytes(event[:-4])).to_bytes(4, "little")
    return data[:4] + bytes(event) + data[4 + size :]


def test_binlogs_cut_at_every_kind_of_boundary_are_reported_exactly(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """Mid-event, at an event boundary inside a transaction (after its TABLE_MAP, after a rows event), at a
    transaction boundary, and just before the final ROTATE: each file is partial, says where and why, and counts
    exactly its complete transactions; the unfinished one's rows are never counted."""
    from binlog.constants import GTID_EVENT, ROTATE_EVENT, TABLE_MAP_EVENT, XID_EVENT

    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    source = files[0]  # orders insert, customers insert, then a three-statement transaction; ends with a ROTATE
    events = event_map(source)
    begins = [start for start, _, kind in events if kind == GTID_EVENT]
    xids = [end for _, end, kind in events if kind == XID_EVENT]
    table_maps = [end for _, end, kind in events if kind == TABLE_MAP_EVENT]
    rows_events = [(start, end) for start, end, kind in events if kind in (23, 24, 25, 30, 31, 32)]
    assert events[-1][2] == ROTATE_EVENT and len(xids) >= 3
    second, third = begins[-2], begins[-1]  # the GTIDs of the customers insert and the three-statement transaction
    second_rows = next(r for r in rows_events if r[0] > second)
    third_first_rows = next(r for r in rows_events if r[0] > third)
    third_map = next(end for end in table_maps if end > third)
    cuts = {
        "binlog.900001": (
            second_rows[0] + 10,
            f"cut in the middle of the event at position {second_rows[0]},"
            f" inside the transaction begun at position {second}",
        ),
        "binlog.900002": (third_map, f"ends inside the transaction begun at position {third}, before its commit"),
        "binlog.900003": (
            third_first_rows[1],
            f"ends inside the transaction begun at position {third}, before its commit",
        ),
        "binlog.900004": (
            xids[-2],
            f"ends at position {xids[-2]} without the ROTATE or STOP event a closed binlog ends with",
        ),
        "binlog.900005": (events[-1][0], f"ends at position {events[-1][0]} without the ROTATE or STOP event"),
    }
    folder = tmp_path / "cut"
    folder.mkdir()
    data = source.read_bytes()
    expected: dict[tuple[int, str], list[int]] = {}
    oracle = {}
    for number, (name, (cut, _)) in enumerate(cuts.items(), start=1):
        # Each cut from a file of its own (no cut is another's cut copy, which a run would count once).
        (folder / name).write_bytes(another_file(data, number)[:cut])
        counts, rows, end = complete_counts(source, schema, cut)
        oracle[name] = (rows, end)
        for key, values in counts.items():
            total = expected.setdefault(key, [0, 0, 0, 0])
            for i, value in enumerate(values):
                total[i] += value
    shutil.copy(source, folder / "binlog.900000")  # the whole file: complete

    messages: list[str] = []
    out = tmp_path / "out"
    report, _ = job.run(spark, inputs.collect(spark, str(folder), None), out, write=messages.append)
    by_name = {Path(f.path).name: f for f in report.files}
    assert by_name["binlog.900000"].status == "complete" and by_name["binlog.900000"].counted_bytes == len(data)
    for name, (cut, reason) in cuts.items():
        f = by_name[name]
        assert (f.status, f.size) == ("partial", cut), name
        assert f.note is not None and f.note.startswith(reason), (name, f.note)
        assert (f.rows, f.counted_bytes) == oracle[name], name
        line = f"{f.path}: partial: {f.note}; {f.counted_bytes:,} of {cut:,} bytes counted ({f.rows:,} row changes)"
        assert f"{line}, {cut - f.counted_bytes:,} bytes not" in messages, name
    assert [line.split(": partial")[0] for line in report.problems()] == [by_name[n].path for n in sorted(cuts)]
    totals = report.totals()
    assert totals["partial"] == {
        "files": 5,
        "bytes": sum(c for c, _ in cuts.values()),
        "counted_bytes": sum(end for _, end in oracle.values()),
    }
    assert totals["complete"] == {"files": 1, "bytes": len(data), "counted_bytes": len(data)}
    assert report.rows == sum(rows for rows, _ in oracle.values()) + by_name["binlog.900000"].rows
    whole, _, _ = complete_counts(source, schema, len(data))
    for key, values in whole.items():
        total = expected.setdefault(key, [0, 0, 0, 0])
        for i, value in enumerate(values):
            total[i] += value
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == {k: tuple(v) for k, v in expected.items()}
    saved = json.loads((out / f"run-{report.run}.json").read_text())
    assert saved["totals"]["partial"]["files"] == 5 and saved["rows"] == report.rows


def test_the_live_binlog_of_a_server(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """A copy of the binlog the server is writing ends open (no ROTATE, the format description's in-use flag
    set): reported partial by default, with a hint; with last_binlog=live it is the series' live file, counted up to
    its last transaction and not a problem. An earlier file of the series ending open stays partial either way."""
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    w = Workload(server, schema)
    w.run(D2 + 5 * HOUR, "insert", "customers", "INSERT INTO customers VALUES (900, 'live', 1)")
    current = server.binlog_files()[-1]
    folder = archive([*files, current], tmp_path / "binlogs")
    data = current.read_bytes()
    (folder / files[0].name).write_bytes(files[0].read_bytes()[: event_map(files[0])[-1][0]])  # no ROTATE
    out = tmp_path / "out"
    for mode in ("archived", "live"):
        report, _ = job.run(
            spark, inputs.collect(spark, str(folder), None), out, write=lambda _: None, last_binlog=mode
        )
        by_name = {Path(f.path).name: f for f in report.files}
        live, first = by_name[current.name], by_name[files[0].name]
        assert first.status == "partial" and "its server still had it open" not in (first.note or ""), mode
        assert live.counted_bytes == len(data) and live.rows >= 1, mode
        assert live.note is not None and "without the ROTATE or STOP" in live.note, mode
        if mode == "archived":
            assert live.status == "partial" and "its server still had it open (a live binlog?)" in live.note
            assert len(report.problems()) == 2
        else:
            assert live.status == "live" and report.problems() == [first.line()]
            assert live.line().endswith("the rest is still being written")
        hourly = table_counts(spark, out, "usage_hourly", schema, "hour")
        assert hourly[(D2 + 5 * HOUR, "customers")] == (1, 0, 0, 1), mode


def test_binlog_reader_reports_progress_per_chunk(fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """A task says how far it is within its file every CHUNK_BYTES, and the driver prints a line for it."""
    from relay.pipeline import progress

    server, schema = fresh_schema
    _w, files = run_workload(server, schema)
    calls: list[tuple[int, int]] = []
    tally = FileTally(sources.BINLOG, str(files[0]))
    sources.read_binlog(tally, str(files[0]), files[0].read_bytes(), None, beacon=lambda p, r: calls.append((p, r)))
    assert calls[-1] == (files[0].stat().st_size, tally.rows) and len(calls) == len(event_map(files[0]))

    class Tracker:
        def getActiveStageIds(self) -> list[int]:  # Spark's name
            return []

    class Context:
        def statusTracker(self) -> Tracker:  # Spark's name
            return Tracker()

    lines: list[str] = []
    size = 10 * progress.CHUNK_BYTES
    uri = "file:/archive/binlog.000007"
    with progress.Progress(Context(), lines.append, 0.1, host="127.0.0.1", sizes={uri: size}) as shown:
        assert shown.address is not None and shown.address[0] == "127.0.0.1"
        beacon = progress.ChunkBeacon(shown.address, uri)
        for position in range(0, size // 2 + 1, 65536):
            beacon(position, position // 100)
        deadline = time.monotonic() + 5
        while not any("binlog.000007" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        beacon.close()
    assert any("] binlog.000007 21.0 MB read (50%), 209,715 row changes" in line for line in lines), lines


# -- outputs by URI, loopback, litter ---------------------------------------------------------------------------


def test_outputs_by_uri_keep_their_scheme(spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path) -> None:
    """--out file:///... writes the Parquet outputs and the run report there, not under ./file:/..."""
    import os

    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    out = f"file://{tmp_path}/by-uri"
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        report, _ = job.run(spark, inputs.collect(spark, ",".join(map(str, files)), None), out, write=lambda _: None)
    finally:
        os.chdir(here)
    assert report.out == f"file:{tmp_path}/by-uri"
    assert not (tmp_path / "file:").exists()
    assert (tmp_path / "by-uri" / f"run-{report.run}.json").is_file()
    assert not list((tmp_path / "by-uri").glob(".*.crc"))  # the report is written without Hadoop's sidecar
    assert table_counts(spark, tmp_path / "by-uri", "usage_hourly", schema, "hour") == w.hourly()


def test_local_masters_bind_the_driver_to_loopback(spark: Any) -> None:
    from relay.pipeline.session import parse_master, session_settings

    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1" and conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert session_settings(parse_master("local[2]"))["spark.driver.host"] == "127.0.0.1"
    cluster = session_settings(parse_master("spark://10.0.0.5:7077"), {"spark.driver.host": "10.0.0.9"})
    assert cluster["spark.driver.host"] == "10.0.0.9" and "spark.driver.bindAddress" not in cluster
    assert "spark.driver.host" not in session_settings(parse_master("spark://10.0.0.5:7077"))


def test_shipped_zip_lives_in_sparks_own_scratch_space(spark: Any) -> None:
    """Spark removes it with the context (the command-line tests check that nothing is left behind)."""
    from pyspark import SparkFiles

    shipped = spark.sparkContext._relay_shipped
    assert shipped.is_file() and Path(SparkFiles.getRootDirectory()) in shipped.parents


# -- a standalone cluster ---------------------------------------------------------------------------------------


def test_standalone_cluster_counts_like_the_workload(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A master and two workers started from the pyspark installation on 127.0.0.1; the command runs against it in
    its own process, its executors decode from the shipped zip, and the outputs match the workload exactly."""
    import os
    import signal
    import subprocess

    from pyspark.find_spark_home import _find_spark_home

    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    folder = archive(files, tmp_path / "binlogs")
    spark_class = str(Path(_find_spark_home()) / "bin" / "spark-class")
    port = free_tcp_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m", SPARK_LOCAL_DIRS=str(tmp_path / "local"))
    daemons: list[subprocess.Popen[bytes]] = []
    logs = tmp_path / "daemons"
    logs.mkdir()

    def start(name: str, *args: str) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            daemons.append(
                subprocess.Popen(
                    [spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(free_tcp_port()))  # fmt: skip
        for n in (1, 2):
            start(f"worker{n}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "900m", "--webui-port", "0", "--work-dir", str(tmp_path / f"work{n}"),
                  f"spark://127.0.0.1:{port}")  # fmt: skip
        deadline = time.monotonic() + 60
        while (logs / "master.log").read_text(errors="replace").count("Registering worker") < 2:
            assert time.monotonic() < deadline, (logs / "master.log").read_text(errors="replace")[-3000:]
            time.sleep(0.25)
        out = tmp_path / "out"
        code, stdout, stderr, _seconds = usagepipeline(
            tmp_path,
            "--binlogs", f"file://{folder}", "--out", f"file://{out}", "--no-load",
            "--master", f"spark://127.0.0.1:{port}",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
            # Tasks wait for both executors: by default the driver starts once 80% of the cores are registered or
            # 30 s have passed, and on a loaded machine one executor could then do all the work.
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=90s",
            timeout=150,
        )  # fmt: skip
        assert code == 0, stderr[-3000:]
        assert "decode 3 binlog" in stdout and "files: 3 complete" in stdout
        # Both workers ran an executor of the application.
        for n in (1, 2):
            daemon_logs = {log.name: log.read_text(errors="replace")[-2000:] for log in sorted(logs.iterdir())}
            assert list((tmp_path / f"work{n}").glob("app-*/*")), (n, daemon_logs)
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == w.hourly()
    assert table_counts(spark, out, "usage_daily", schema, "start") == w.daily()
    assert column_counts(spark, out, schema) == expected_columns(w, server)


def test_local_binlogs_in_a_folder_whose_name_has_url_characters_are_read(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """Hadoop lists a local file as the path it is: "#" and "%41" in a folder's name are characters, not a URL's
    fragment and escape (every file there was "unreadable", or another folder's read)."""
    server, schema = fresh_schema
    w, files = run_workload(server, schema)
    folder = archive(files, tmp_path / "archive #2%41")
    report, _ = job.run(spark, inputs.collect(spark, str(folder), None), tmp_path / "out", write=lambda _: None)
    assert [f.line() for f in report.failed] == []
    assert table_counts(spark, tmp_path / "out", "usage_hourly", schema, "hour") == w.hourly()


def test_an_xa_transaction_is_one_transaction_of_its_hour(
    spark: Any, fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """Its rows end with XA PREPARE and its fate comes in a later group (XA COMMIT, here in another file): one
    transaction, counted at its prepare, not one more for the group of its end."""
    server, schema = fresh_schema
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database=schema)
    server.execute("FLUSH BINARY LOGS")
    first = server.binlog_position()[0]
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute(f"SET TIMESTAMP = {D1 + HOUR}")
        for sql in ("XA START 'x'", "INSERT INTO t VALUES (1,1),(2,2),(3,3)", "XA END 'x'", "XA PREPARE 'x'"):
            cur.execute(sql)
        server.execute("FLUSH BINARY LOGS")
        cur.execute("XA COMMIT 'x'")
    server.execute("FLUSH BINARY LOGS")
    files = [p for p in server.binlog_files() if first <= p.name < server.binlog_position()[0]]
    out = tmp_path / "out"
    job.run(spark, inputs.collect(spark, str(archive(files, tmp_path / "b")), None), out, write=lambda _: None)
    assert table_counts(spark, out, "usage_hourly", schema, "hour") == {(D1 + HOUR, "t"): (3, 0, 0, 1)}
    hourly = spark.read.parquet(str(out / "transactions_hourly")).selectExpr("CAST(hour AS LONG) AS h", "transactions")
    assert sum(r.transactions for r in hourly.where(f"h >= {D1} AND h < {D1 + DAY}").collect()) == 1
