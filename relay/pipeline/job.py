"""The Spark job: one task per input file decodes it into partial sums; the driver adds them up and writes the
outputs (see ``aggregate`` for what they hold) under ``out``, with the run's report (``report``) beside them.

When a run has both, the binlogs are decoded first and the change logs after them: a change log line counts unless
a binlog of the run counted its change (``coverage``), which only the binlogs' own tasks can tell.

A run replaces only the days it computed, so runs over different archives add up when each day's files are in one
run: a run over part of a day replaces what another run wrote for that day (give every file of a day to one run).
``transactions`` counts committed transactions that changed the table in that hour: exact for binlog files, by GTID
for JSON change logs, 0 for the text layout (which has no transaction identity).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from relay.pipeline import sources
from relay.pipeline.aggregate import OUTPUTS, Results, Sums, frames
from relay.pipeline.coverage import Coverage
from relay.pipeline.inputs import LIVE, Inputs, base_name, last_of_series
from relay.pipeline.outputs import OutputLocation
from relay.pipeline.progress import ChunkBeacon, Progress
from relay.pipeline.report import FileReport, RunReport
from relay.pipeline.session import build_session
from relay.pipeline.tally import LIVE as LIVE_STATUS
from relay.pipeline.tally import PARTIAL, UNREADABLE

__all__ = ["OUTPUTS", "FileReport", "Results", "RunReport", "build_session", "run"]


def new_run_id(now: datetime | None = None) -> str:
    moment = now or datetime.now(UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def decode_file(
    source: str,
    path: str,
    live: bool,
    pairs: Iterable[tuple[str, bytes | None]],
    snapshot: Any,
    log_timezone: str,
    coverage: Any,
    progress: tuple[str, int] | None = None,
) -> Iterator[tuple]:
    """The body of every task: the one file Spark read for it, counted into partial sums. ``snapshot`` and
    ``coverage`` are broadcasts (or None) of the schema snapshot and of the run's binlogs' counted transactions."""
    schema = snapshot.value if snapshot is not None else None
    counted = coverage.value if coverage is not None else None
    beacon = ChunkBeacon(progress, path)

    def read(tally: Any, name: str) -> None:
        with sources.only_content(pairs) as content:
            if source == sources.BINLOG:
                sources.read_binlog(tally, name, content, schema, live=live, beacon=beacon)
            else:
                sources.read_log(tally, name, content, log_timezone, counted, beacon=beacon)

    try:
        records = list(sources.run_file(source, path, read))
    finally:
        beacon(0, 0, done=True)
        beacon.close()
    return iter(records)


def binlog_names(inputs: Inputs) -> dict[str, set[str]]:
    """Binlog URI -> the file names a change log knows it by: its own, and those of its copies (``identity``)."""
    names = {uri: {base_name(uri)} for uri in inputs.binlogs}
    for copy, original in inputs.copies.items():
        if original in names:
            names[original].add(base_name(copy))
    return names


def input_tasks(inputs: Inputs, last_binlog: str = "archived") -> list[tuple[str, str, bool]]:
    """(source, URI, may be live) of every input file, biggest first: Spark starts tasks in partition order, so no
    core is left decoding a big file alone at the end while the others have finished."""
    live = last_of_series(inputs.binlogs) if last_binlog == LIVE else set()
    tasks = [(sources.BINLOG, p, p in live) for p in inputs.binlogs] + [(sources.LOG, p, False) for p in inputs.logs]
    tasks.sort(key=lambda task: -inputs.sizes.get(task[1], 0))
    return tasks


def read_files(
    sc: Any, tasks: list[tuple[str, str, bool]], body: Callable[..., Iterator[tuple]], *, open_local: bool = True
) -> Any:
    """One RDD partition per input file: a file is the unit of work and of failure.

    A file on another file system (``hdfs://``, ``s3a://``...) comes to its task as bytes read by Spark
    (``binaryFiles``, one per file: over many files it would pack small ones into shared partitions). A ``file:``
    URI is opened by the task itself and read in chunks, so a 1 GiB binlog never sits whole in a Python worker (a
    ``file:`` path must exist on the executors either way). ``open_local=False`` has Spark read those too.
    """
    parts = []
    for source, path, live in tasks:
        task = partial(body, source, path, live)
        if open_local and sources.local_path(path) is not None:
            parts.append(sc.parallelize([(path, None)], 1).mapPartitions(task))
        else:
            parts.append(sc.binaryFiles(path).mapPartitions(task))
    return sc.union(parts)


def file_reports(sums: Sums, tasks: list[tuple[str, str, bool]], sizes: dict[str, int]) -> list[FileReport]:
    """A report per task's file; one whose partition yielded nothing would otherwise vanish without a word."""
    files = []
    for source, path, status, counted, rows, txs, seconds, note in sums.files:
        size = sizes.get(path, 0)
        left = tuple(sorted(sums.left.get(path, ()))) if status != UNREADABLE else ()
        files.append(
            FileReport(source, path, status, size if counted is None else counted, rows, txs, seconds, note, size, left)
        )
    reported = {f.path for f in files}
    files += [
        FileReport(s, p, UNREADABLE, 0, 0, 0, 0.0, "Spark read nothing of it", sizes.get(p, 0))
        for s, p, _ in tasks
        if p not in reported
    ]
    return sorted(files, key=lambda f: (f.source, f.path))


def write_outputs(sc: Any, results: Results, location: OutputLocation) -> None:
    """Writes the outputs side by side: each is a job of one small task whose time goes mostly to the driver
    (planning, committing, renaming the day folders), which the jobs of the others can use meanwhile."""

    def write_one(name: str, frame: Any) -> None:
        sc.setJobDescription(f"write {name}")
        frame.write.mode("overwrite").partitionBy("day").parquet(location.child(name))

    with ThreadPoolExecutor(max_workers=len(OUTPUTS), thread_name_prefix="pipeline-write") as pool:
        for future in [pool.submit(write_one, name, frame) for name, frame in results.frames().items()]:
            future.result()


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
    last_binlog: str = "archived",
) -> tuple[RunReport, Results | None]:
    """Decodes and counts every input file, aggregates, writes the Parquet outputs and the run report; returns the
    report and the outputs' frames.

    Unreadable files count for nothing and partial ones up to their last complete transaction; each is a line of
    ``write`` and of the report, and the run goes on with the rest. ``last_binlog`` is ``inputs.ARCHIVED`` or
    ``inputs.LIVE`` (how to take the last binlog file of each series). Raises ``OutputError`` when ``out`` cannot
    be resolved or the report cannot be written.
    """
    started = time.monotonic()
    sc = spark.sparkContext
    location = OutputLocation(spark, str(out))
    report = RunReport(
        run=run_id or new_run_id(),
        out=location.uri,
        missing=inputs.missing,
        skipped=inputs.skipped,
        not_read=inputs.not_read,
    )
    for what, why in inputs.missing:
        write(f"missing input {what}: {why}")
    for what, why in inputs.skipped:
        write(f"skipped {what}: {why}")
    for what, why in inputs.not_read:
        write(f"not read {what}: {why}")
    tasks = input_tasks(inputs, last_binlog)
    if not tasks:
        write("no input files: nothing to do")
        report.seconds = time.monotonic() - started
        return report, None

    host = sc.getConf().get("spark.driver.host", None)
    with Progress(sc, write, progress_interval, host=host, sizes=inputs.sizes) as progress:
        progress.step(f"decode {len(inputs.binlogs)} binlog and {len(inputs.logs)} change log files")
        snapshot_bc = sc.broadcast(snapshot) if snapshot else None
        body = partial(decode_file, snapshot=snapshot_bc, log_timezone=log_timezone, progress=progress.address)
        sums = Sums()
        # The partial sums are about as small as the outputs: they come back with the decode's own action.
        binlog_tasks = [task for task in tasks if task[0] == sources.BINLOG]
        if binlog_tasks:
            sc.setJobDescription("decode binlog files")
            sums.add(read_files(sc, binlog_tasks, partial(body, coverage=None)).collect())
        if snapshot_bc is not None:
            snapshot_bc.unpersist()
        log_tasks = [task for task in tasks if task[0] == sources.LOG]
        if log_tasks:
            coverage_bc = sc.broadcast(Coverage(sums.counted, binlog_names(inputs))) if sums.counted else None
            sc.setJobDescription("decode change log files")
            sums.add(read_files(sc, log_tasks, partial(body, coverage=coverage_bc)).collect())
            if coverage_bc is not None:
                coverage_bc.unpersist()
        report.files = file_reports(sums, tasks, inputs.sizes)
        report.decode_seconds = time.monotonic() - started
        for f in report.files:
            if f.status in (UNREADABLE, PARTIAL, LIVE_STATUS) or f.left_to_binlogs:
                write(f.line())
        progress.done(f"{report.rows} row changes in {report.transactions} complete transactions; {report.summary()}")

        progress.step("aggregate and write Parquet")
        aggregate_started = time.monotonic()
        results = frames(spark, sums)
        write_outputs(sc, results, location)
        report.aggregate_seconds = time.monotonic() - aggregate_started
        progress.done(location.uri)
        sc.setJobDescription(None)

    report.seconds = time.monotonic() - started
    location.write_text(f"run-{report.run}.json", report.as_json())
    return report, results
