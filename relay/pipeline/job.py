"""The Spark job: one task per input file, then usage per hour and day, busiest tables, column changes, transactions.

Outputs (Parquet under ``out``, each partitioned by ``day``, yyyy-MM-dd in UTC; a run replaces only the days it
computed, so runs over different archives add up):

* ``usage_hourly``   hour, schema_name, table_name, inserts, updates, deletes, rows, transactions
* ``usage_daily``    start, schema_name, table_name, inserts, updates, deletes, rows, transactions
* ``busiest_tables`` rank, schema_name, table_name, rows, inserts, updates, deletes, share (of the day's rows)
* ``column_changes`` schema_name, table_name, column_name, changed, compared, ratio: UPDATE rows in which the
  column's value really changed, out of those whose both images carried the column
* ``transactions_hourly`` hour, transactions, row_changes

``transactions`` counts committed transactions that changed the table in that hour: exact for binlog files, by GTID
for JSON change logs, 0 for the text layout (which has no transaction identity).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from relay.pipeline import sources
from relay.pipeline.inputs import Inputs, base_name
from relay.pipeline.progress import Progress
from relay.pipeline.tally import COLUMN, FILE, HOURLY, USAGE

OUTPUTS = ("usage_hourly", "usage_daily", "busiest_tables", "column_changes", "transactions_hourly")


@dataclass(frozen=True)
class FileReport:
    source: str
    path: str
    rows: int
    transactions: int
    seconds: float
    error: str | None


@dataclass
class RunReport:
    run: str
    out: str
    files: list[FileReport] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if f.error is None)

    @property
    def transactions(self) -> int:
        return sum(f.transactions for f in self.files if f.error is None)

    @property
    def failed(self) -> list[FileReport]:
        return [f for f in self.files if f.error is not None]

    def problems(self) -> list[str]:
        """One line per input that was not counted: file name and reason."""
        lines = [f"{what}: {why}" for what, why in self.missing]
        lines += [f"{f.path}: {f.error} (skipped)" for f in self.failed]
        return lines

    def as_json(self) -> str:
        data = asdict(self)
        data["rows"], data["transactions"] = self.rows, self.transactions
        return json.dumps(data, indent=1)


def new_run_id(now: datetime | None = None) -> str:
    moment = now or datetime.now(UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def build_session(master: str = "local[*]", conf: dict[str, str] | None = None, app_name: str = "relay-usage") -> Any:
    """A SparkSession in UTC (hours and days are UTC buckets), replacing only the partitions a run writes, with the
    tasks' packages shipped to its executors."""
    from pyspark.sql import SparkSession

    from relay.pipeline.shipping import ship_packages

    # Local executors must run this interpreter (the one with binlog/'s dependencies), not whatever "python" is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {
        # What is shuffled is partial sums (tables x hours), never rows: a few partitions do, 200 only cost tasks.
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.ui.showConsoleProgress": "false",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines about connections are noise in a report
    ship_packages(session.sparkContext)
    return session


def decode_file(
    source: str,
    path: str,
    pairs: Iterable[tuple[str, bytes | None]],
    snapshot: Any,
    log_timezone: str,
    skip_binlogs: frozenset[str],
) -> Iterator[tuple]:
    """The body of every task: the one file Spark read for it, counted into partial sums."""
    schema = snapshot.value if snapshot is not None else None

    def read(tally: Any, name: str) -> None:
        with sources.only_content(pairs) as content:
            if source == sources.BINLOG:
                sources.read_binlog(tally, name, content, schema)
            else:
                sources.read_log(tally, name, content, log_timezone, skip_binlogs)

    return sources.run_file(source, path, read)


def input_tasks(inputs: Inputs) -> list[tuple[str, str]]:
    """(source, URI) of every input file, biggest first: Spark starts tasks in partition order, so no core is left
    decoding a big file alone at the end while the others have finished."""
    tasks = [(sources.BINLOG, p) for p in inputs.binlogs] + [(sources.LOG, p) for p in inputs.logs]
    tasks.sort(key=lambda task: -inputs.sizes.get(task[1], 0))
    return tasks


def read_files(
    sc: Any, tasks: list[tuple[str, str]], body: Callable[..., Iterator[tuple]], *, open_local: bool = True
) -> Any:
    """One RDD partition per input file: a file is the unit of work and of failure.

    A file on another file system (``hdfs://``, ``s3a://``...) comes to its task as bytes read by Spark
    (``binaryFiles``, one per file: over many files it would pack small ones into shared partitions). A ``file:``
    URI is opened by the task itself and read in chunks, so a 1 GiB binlog never sits whole in a Python worker (a
    ``file:`` path must exist on the executors either way). ``open_local=False`` has Spark read those too.
    """
    parts = []
    for source, path in tasks:
        task = partial(body, source, path)
        if open_local and sources.local_path(path) is not None:
            parts.append(sc.parallelize([(path, None)], 1).mapPartitions(task))
        else:
            parts.append(sc.binaryFiles(path).mapPartitions(task))
    return sc.union(parts)


def _schemas() -> dict[str, Any]:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    def struct(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(name, kind(), False) for name, kind in fields])

    return {
        USAGE: struct(
            ("hour_ts", LongType),
            ("schema_name", StringType),
            ("table_name", StringType),
            ("inserts", LongType),
            ("updates", LongType),
            ("deletes", LongType),
            ("transactions", LongType),
        ),
        COLUMN: struct(
            ("day_ts", LongType),
            ("schema_name", StringType),
            ("table_name", StringType),
            ("column_name", StringType),
            ("changed", LongType),
            ("compared", LongType),
        ),
        HOURLY: struct(("hour_ts", LongType), ("transactions", LongType), ("row_changes", LongType)),
        "double": DoubleType,
    }


@dataclass
class Results:
    """The run's DataFrames (cached): what is written and what ``load`` puts into the store."""

    usage_hourly: Any
    usage_daily: Any
    busiest_tables: Any
    column_changes: Any
    transactions_hourly: Any

    def frames(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OUTPUTS}


def aggregate(spark: Any, records: Any) -> Results:
    """From the tasks' partial counts to the outputs; every sum here adds partial sums of different files."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    schemas = _schemas()

    def frame(tag: str) -> Any:
        return spark.createDataFrame(records.filter(lambda r, t=tag: r[0] == t).map(lambda r: r[1:]), schemas[tag])

    counters = ("inserts", "updates", "deletes", "transactions")
    hourly = (
        frame(USAGE)
        .groupBy("hour_ts", "schema_name", "table_name")
        .agg(*(F.sum(c).alias(c) for c in counters))
        .withColumn("rows", F.col("inserts") + F.col("updates") + F.col("deletes"))
        .withColumn("hour", F.timestamp_seconds("hour_ts"))
        .withColumn("day", F.date_format("hour", "yyyy-MM-dd"))
        .select("day", "hour", "schema_name", "table_name", "inserts", "updates", "deletes", "rows", "transactions")
        .cache()
    )
    daily = (
        hourly.groupBy("day", "schema_name", "table_name")
        .agg(*(F.sum(c).alias(c) for c in (*counters, "rows")))
        .withColumn("start", F.to_timestamp("day", "yyyy-MM-dd"))
        .select("day", "start", "schema_name", "table_name", "inserts", "updates", "deletes", "rows", "transactions")
        .cache()
    )
    by_day = Window.partitionBy("day")
    busiest = daily.select(
        "day",
        F.rank().over(by_day.orderBy(F.desc("rows"), "schema_name", "table_name")).alias("rank"),
        "schema_name",
        "table_name",
        "rows",
        "inserts",
        "updates",
        "deletes",
        (F.col("rows") / F.sum("rows").over(by_day)).alias("share"),
    )
    columns = (
        frame(COLUMN)
        .groupBy("day_ts", "schema_name", "table_name", "column_name")
        .agg(F.sum("changed").alias("changed"), F.sum("compared").alias("compared"))
        .withColumn("ratio", F.col("changed") / F.col("compared"))
        .withColumn("day", F.date_format(F.timestamp_seconds("day_ts"), "yyyy-MM-dd"))
        .select("day", "schema_name", "table_name", "column_name", "changed", "compared", "ratio")
    )
    transactions = (
        frame(HOURLY)
        .groupBy("hour_ts")
        .agg(F.sum("transactions").alias("transactions"), F.sum("row_changes").alias("row_changes"))
        .withColumn("hour", F.timestamp_seconds("hour_ts"))
        .withColumn("day", F.date_format("hour", "yyyy-MM-dd"))
        .select("day", "hour", "transactions", "row_changes")
    )
    return Results(hourly, daily, busiest, columns, transactions)


def run(
    spark: Any,
    inputs: Inputs,
    out: str | Path,
    *,
    snapshot: dict[str, Any] | None = None,
    log_timezone: str = "UTC",
    write: Callable[[str], None] = print,
    progress_interval: float = 5.0,
    run_id: str | None = None,
) -> tuple[RunReport, Results | None]:
    """Decodes and counts every input file, aggregates, writes the Parquet outputs; returns the report and frames.

    Files that fail are in the report (file name and reason) and count for nothing; the rest of the run goes on.
    """
    from pyspark import StorageLevel

    started = time.monotonic()
    sc = spark.sparkContext
    report = RunReport(run=run_id or new_run_id(), out=str(out), missing=inputs.missing, skipped=inputs.skipped)
    for what, why in inputs.missing:
        write(f"missing input {what}: {why}")
    for what, why in inputs.skipped:
        write(f"skipped {what}: {why}")
    tasks = input_tasks(inputs)
    if not tasks:
        write("no input files: nothing to do")
        report.seconds = time.monotonic() - started
        return report, None

    with Progress(sc, write, progress_interval) as progress:
        progress.step(f"decode {len(inputs.binlogs)} binlog and {len(inputs.logs)} change log files")
        snapshot_bc = sc.broadcast(snapshot) if snapshot else None
        skip_binlogs = frozenset(base_name(p) for p in inputs.binlogs)
        body = partial(decode_file, snapshot=snapshot_bc, log_timezone=log_timezone, skip_binlogs=skip_binlogs)
        records = read_files(sc, tasks, body).persist(StorageLevel.MEMORY_AND_DISK)
        sc.setJobDescription("decode input files")
        report.files = [FileReport(*r[1:]) for r in records.filter(lambda r: r[0] == FILE).collect()]
        # A file whose partition yielded nothing would otherwise vanish from the report without a word.
        reported = {f.path for f in report.files}
        report.files += [FileReport(s, p, 0, 0, 0.0, "Spark read nothing of it") for s, p in tasks if p not in reported]
        report.files.sort(key=lambda f: (f.source, f.path))
        report.decode_seconds = time.monotonic() - started
        for failed in report.failed:
            write(f"corrupt or unreadable input {failed.path}: {failed.error} (skipped)")
        progress.done(f"{report.rows} row changes, {report.transactions} transactions, {len(report.failed)} failed")

        progress.step("aggregate and write Parquet")
        results = aggregate(spark, records)
        for name, frame in results.frames().items():
            sc.setJobDescription(f"write {name}")
            frame.write.mode("overwrite").partitionBy("day").parquet(str(Path(out) / name))
        progress.done(str(out))
        sc.setJobDescription(None)

    report.seconds = time.monotonic() - started
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"run-{report.run}.json").write_text(report.as_json(), encoding="utf-8")
    return report, results
