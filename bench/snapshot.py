"""Table snapshot benchmark, on loopback (run by hand: ``.venv/bin/python bench/snapshot.py [--rows 200000]``).

Against a private MariaDB (binlog on), ``manage.py runbinlog --batch-ms 10``, ``manage.py runrelay`` and a fresh
store (PostgreSQL by default, or SQLite), it measures:

1. **Snapshot rows per second** of a table of ``--rows`` rows (6 columns, filled from MariaDB's ``seq_1_to_N``
   without writing the binlog, as a table older than the relay would be), for each ``--chunk-rows`` size, with
   ``[Snapshot] RowsPerSecond`` unlimited: from the request (``relay.store.snapshots.request_snapshots``) until the
   bench sees the Snapshot row done; from its ``started`` (first chunk queued) to ``finished``; and until a FETCH
   client of the snapshot's own client has received every row. Read in the same run for reference: the table by
   plain PyMySQL (an unbuffered full scan, and key-ordered chunks of the same size, each ``WHERE id > last ORDER BY
   id LIMIT n``) and by the worker's own chunk reader alone (binlog/snapshot.py: a consistent-snapshot transaction
   per chunk, values converted to the decoder's), both over the snapshot connection's settings (no Python
   conversion of values). The ratio snapshot / raw chunked read says what the queueing costs over the read itself.
   The source's stream is idle meanwhile, unless ``--background-rate`` rows/s (no subscriber) keep it busy.
2. **Live stream latency with a snapshot running**: a long-polling FETCH client subscribed to ``bench.events``,
   which receives 1,000 rows/s in 10 ms transactions (bench/serve.py's machinery); p50 and p99 from the source's
   COMMIT to the client, for ``--latency-seconds`` without a snapshot, then while another client's snapshot of the
   big table runs (its rows drained by a FETCH client in another process), with RowsPerSecond unlimited and with
   ``--limit`` rows/s (the worker pauses ``chunk / limit`` seconds after queueing each chunk, so the rate reached is
   below the limit). The output says if a snapshot ended before the window did, and how many chunks the worker read
   again because the stream had passed a chunk's position before it was queued (from the worker's log).
3. A compact table for the README's performance table: date, load average, figures and ratios.

The load average (1, 5, 15 minutes) is printed before and after each part. With the defaults (1,000,000 rows, chunks
of 2,000 and 10,000, three snapshots each) a run takes 7 to 10 minutes on a 2-core machine; ``--rows 200000 --runs 1
--latency-seconds 5`` about 2. ``--skip-throughput``, ``--skip-latency``, ``--no-drain`` (the snapshots' rows stay
queued) and ``--latency-chunk-rows`` isolate one effect at a time.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serve import (  # noqa: E402 - after the path set-up
    SECRET,
    Client,
    event_inserter,
    free_port,
    latency_consumer,
    pace,
    percentiles,
    prepare_store,
    start,
    wait_port,
)
from clientproto import Command, Result, encode_addfilter, encode_fetch  # noqa: E402

SCHEMA, TABLE = "bench", "t"
#: The big table: the shape of bench/serve.py's orders rows, with an integer key.
CREATE_TABLE = (
    "CREATE TABLE t (id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount DECIMAL(12,2) NOT NULL,"
    " status VARCHAR(16) NOT NULL, note VARCHAR(100) NULL, at DATETIME NOT NULL) ENGINE=InnoDB"
)
FILL = (
    "INSERT INTO t SELECT seq, CONCAT('customer ', seq % 1000), (seq % 100000) / 100,"
    " ELT(1 + seq % 3, 'paid', 'open', 'void'), IF(seq % 5 = 0, NULL, CONCAT('note ', seq)),"
    " '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_{rows}"
)
LATENCY_RATE = 1_000  # rows/s on bench.events
#: Markers a snapshot queues around its rows (start and end), received by FETCH like rows.
MARKERS = 2
TIMES, DASH = "\u00d7", "\u2013"  # as the README writes ratios and ranges


def load() -> tuple[float, float, float]:
    return os.getloadavg()


def show_load(when: str, samples: list[tuple[float, float, float]]) -> None:
    avg = load()
    samples.append(avg)
    print(f"load average {when}: {avg[0]:.2f} {avg[1]:.2f} {avg[2]:.2f}", flush=True)


# -- the snapshot's own client, in another process ------------------------------------------------------------------


def drain(port: int, name: str, expected: int, pipe: Connection) -> None:
    """Fetches the client's queue (auto-ack, long-poll) until ``expected`` records came; reports when (monotonic
    time, which is the same clock in every process) and how many."""
    client = Client(port, name)
    pipe.send(("ready", time.monotonic(), 0))
    frame = encode_fetch(1000, 1000)
    received = 0
    while received < expected:
        result, payload = client.request(Command.FETCH, frame)
        if result == Result.EMPTY:  # nothing queued within the wait
            continue
        if result != Result.OK:
            pipe.send((f"failed: result 0x{result:02x} {payload[:200]!r}", time.monotonic(), received))
            return
        received += struct.unpack_from("<I", payload)[0]
    pipe.send(("done", time.monotonic(), received))


class Drainer:
    """The snapshot's client reading its rows, in a process of its own: decoding a snapshot's replies in this process
    would take the interpreter from the live stream's client thread, and inflate the latencies measured here."""

    def __init__(self, port: int, name: str, expected: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe(duplex=False)
        self.process = context.Process(target=drain, args=(port, name, expected, child), daemon=True)
        self.process.start()
        child.close()
        if not self.pipe.poll(60):
            raise SystemExit(f"the FETCH client of {name} did not start")
        self.pipe.recv()

    def finished(self, timeout: float) -> tuple[str, float, int]:
        if self.pipe.poll(timeout):
            message: tuple[str, float, int] = self.pipe.recv()
            return message
        return ("timeout", time.monotonic(), -1)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(10)


# -- processes ------------------------------------------------------------------------------------------------------


class Worker:
    """``manage.py runbinlog``, restarted for each setting (the worker reads [Snapshot] at start)."""

    def __init__(self, env: dict[str, str], workdir: Path, source: Any, start_at: tuple[str, int]) -> None:
        # INFO: the worker logs each chunk it reads again (counted by rereads()).
        self.env = dict(env, RELAY_LOG_LEVEL="INFO")
        self.workdir, self.source, self.start_at = workdir, source, start_at
        self.process: Any = None
        self.started_once = False
        self.log = workdir / "worker.log"

    def start(self, chunk_rows: int, rows_per_second: int, method: str, batch_ms: int) -> None:
        self.stop()
        env = dict(
            self.env,
            RELAY_SNAPSHOT_CHUNKROWS=str(chunk_rows),
            RELAY_SNAPSHOT_ROWSPERSECOND=str(rows_per_second),
            RELAY_SNAPSHOT_METHOD=method,
        )
        args = ["runbinlog", "--batch-ms", str(batch_ms)]
        if not self.started_once:
            args += ["--from", f"{self.start_at[0]}:{self.start_at[1]}"]
        self.process = start(env, self.log, *args)
        self.started_once = True
        self.caught_up()

    def alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise SystemExit(f"the worker exited:\n{self.log.read_text()[-3000:]}")

    def caught_up(self, timeout: float = 90) -> None:
        """Waits until the worker's checkpoint passes a transaction written now."""
        from relay.models import Checkpoint

        self.source.execute("INSERT INTO ping VALUES ()", database=SCHEMA)
        target = self.source.binlog_position()
        deadline = time.monotonic() + timeout
        while True:
            self.alive()
            checkpoint = Checkpoint.objects.first()
            if checkpoint is not None and (checkpoint.binlog_file, checkpoint.binlog_pos) >= target:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the worker did not reach {target}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(60)
            self.process = None


# -- reference reads ------------------------------------------------------------------------------------------------


def snapshot_connection(source: Any) -> Any:
    """A PyMySQL connection set up as the snapshot reader's (values as the server's bytes, no conversion)."""
    import pymysql

    from binlog import snapshotrows

    conn = pymysql.connect(
        host=source.host, port=source.port, user="root", password="", autocommit=True, **snapshotrows.connect_kwargs()
    )
    with conn.cursor() as cursor:
        for statement in snapshotrows.SESSION_STATEMENTS:
            cursor.execute(statement)
    return conn


def raw_full_scan(source: Any) -> tuple[float, int]:
    """Seconds to read the whole table with one unbuffered SELECT, every row fetched; and the rows."""
    import pymysql.cursors

    conn = snapshot_connection(source)
    rows = 0
    started = time.perf_counter()
    with conn.cursor(pymysql.cursors.SSCursor) as cursor:
        cursor.execute(f"SELECT * FROM {SCHEMA}.{TABLE}")
        while batch := cursor.fetchmany(10_000):
            rows += len(batch)
    seconds = time.perf_counter() - started
    conn.close()
    return seconds, rows


def raw_chunked(source: Any, chunk_rows: int) -> tuple[float, int]:
    """Seconds to read the table in key order, ``chunk_rows`` rows per SELECT after the previous chunk's last key."""
    conn = snapshot_connection(source)
    rows, last = 0, 0
    started = time.perf_counter()
    with conn.cursor() as cursor:
        while True:
            cursor.execute(f"SELECT * FROM {SCHEMA}.{TABLE} WHERE id > %s ORDER BY id LIMIT {chunk_rows}", (last,))
            batch = cursor.fetchall()
            rows += len(batch)
            if len(batch) < chunk_rows:
                break
            last = int(batch[-1][0])
    seconds = time.perf_counter() - started
    conn.close()
    return seconds, rows


def reader_chunked(source: Any, chunk_rows: int, method: str) -> tuple[float, int]:
    """Seconds for the worker's chunk reader alone to read the table (no store, no queue)."""
    from binlog.snapshot import CONSISTENT, ChunkReader, SignalTable

    resolved = CONSISTENT if method == "auto" else method
    signal = SignalTable.parse("relay.snapshot_signal") if resolved != CONSISTENT else None
    reader = ChunkReader(dict(source.replication_settings()), resolved, signal)
    rows = 0
    started = time.perf_counter()
    plan = reader.plan(SCHEMA, TABLE)
    last = None
    while True:
        chunk = reader.read(plan, last, chunk_rows)
        rows += len(chunk.rows)
        last = chunk.last_key
        if chunk.complete:
            break
    seconds = time.perf_counter() - started
    reader.close()
    return seconds, rows


# -- snapshots ------------------------------------------------------------------------------------------------------


def new_snapshot_client(port: int, name: str) -> None:
    """A client with a filter on the big table's inserts (a snapshot needs one), through the relay protocol."""
    client = Client(port, name)
    result, _ = client.request(Command.ADDFILTER, encode_addfilter(1, SCHEMA, TABLE))
    assert result == Result.OK, result
    client.sock.close()


def request(name: str) -> Any:
    from relay.models import Client as ClientRow
    from relay.store.snapshots import request_snapshots

    return request_snapshots(ClientRow.objects.get(name=name), [(SCHEMA, TABLE)])[0]


def snapshot_run(port: int, worker: Worker, name: str, rows: int, drain_rows: bool) -> dict[str, Any]:
    """One snapshot of the big table from request to done; its timings."""
    from relay.models import Snapshot

    new_snapshot_client(port, name)
    drainer = Drainer(port, name, rows + MARKERS) if drain_rows else None
    try:
        requested = time.monotonic()
        snapshot = request(name)
        while True:
            worker.alive()
            snapshot.refresh_from_db()
            if snapshot.state not in Snapshot.ACTIVE:
                seen_done = time.monotonic()
                break
            if time.monotonic() - requested > 1800:
                raise SystemExit(f"snapshot #{snapshot.id} not done after 30 minutes ({snapshot.rows_done} rows)")
            time.sleep(0.02)
        if snapshot.state != Snapshot.State.DONE:
            raise SystemExit(f"snapshot #{snapshot.id}: {snapshot.state} {snapshot.error}")
        received_at = received = None
        status = "not drained"
        if drainer is not None:
            status, at, received = drainer.finished(120)
            received_at = at if status == "done" else None
    finally:
        if drainer is not None:
            drainer.stop()
    assert snapshot.started is not None and snapshot.finished is not None
    worker_seconds = (snapshot.finished - snapshot.started).total_seconds()
    return {
        "rows": snapshot.rows_done,
        "outside": seen_done - requested,
        "created_to_finished": (snapshot.finished - snapshot.created).total_seconds(),
        "worker": worker_seconds,
        "chunks": snapshot.chunks_done,
        "client": None if received_at is None else received_at - requested,
        "received": received,
        "drain": status,
        "rereads": rereads(worker, snapshot.id),
    }


def rereads(worker: Worker, snapshot_id: int) -> int:
    """Chunks of the snapshot the worker read again because the stream had passed the chunk's position before the
    chunk was queued (the worker logs each one)."""
    needle = f"snapshot #{snapshot_id}: the stream"
    with open(worker.log, errors="replace") as log:
        return sum(needle in line and "reading it again" in line for line in log)


def collect(label: str) -> None:
    """Deletes what the previous runs' clients consumed, so that the worker's background collection of it does not
    run inside the next measurement (bench/serve.py does the same)."""
    from relay import store

    started = time.perf_counter()
    entries, changes = store.collect_garbage()
    if entries or changes:
        print(
            f"  ({label}: collected {entries:,} entries, {changes:,} changes in {time.perf_counter() - started:.1f}s)",
            flush=True,
        )


class Background(threading.Thread):
    """A steady stream nobody subscribes to: a source transaction every 10 ms (keys of their own in bench.events)."""

    def __init__(self, source: Any, rate_rows: int) -> None:
        super().__init__(daemon=True)
        self.insert = event_inserter(source.connect(SCHEMA))
        self.per_tick = max(1, rate_rows // 100)
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        next_id = 2_000_000_000 - 100_000_000  # above every latency window's keys
        tick = time.monotonic()
        while not self.halt.is_set():
            self.insert(list(range(next_id, next_id + self.per_tick)))
            next_id += self.per_tick
            tick += 0.01
            time.sleep(max(0.0, tick - time.monotonic()))

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


# -- latency --------------------------------------------------------------------------------------------------------


class Stream:
    """The live stream: 1,000 rows/s into bench.events and one long-polling FETCH client subscribed to it. One
    client for every window (a client per window would leave the earlier ones' filters routing rows); each window
    inserts keys of its own."""

    def __init__(self, port: int, source: Any) -> None:
        self.got: dict[int, float] = {}
        self.stop = threading.Event()
        latency_consumer(port, "bench-live", self.stop, self.got, add_filter=True)
        self.insert = event_inserter(source.connect(SCHEMA))
        self.offset = 0

    def measure(self, seconds: float) -> tuple[float, float, int]:
        offset = self.offset
        self.offset += 10_000_000

        def commit(ids: list[int]) -> None:
            self.insert([offset + i for i in ids])

        committed = pace(LATENCY_RATE, seconds, commit)
        time.sleep(2)  # the last rows' way to the client
        got = {key - offset: at for key, at in list(self.got.items()) if offset < key <= offset + len(committed)}
        return percentiles(committed, got)


def latency_with_snapshot(
    port: int, worker: Worker, stream: Stream, name: str, rows: int, seconds: float, drain_rows: bool
) -> dict[str, Any]:
    """The stream's percentiles while a snapshot of the big table runs; cancelled after the window."""
    from django.utils import timezone

    from relay.models import Snapshot
    from relay.store.snapshots import cancel_snapshots

    new_snapshot_client(port, name)
    drainer = Drainer(port, name, rows + MARKERS) if drain_rows else None
    try:
        snapshot = request(name)
        deadline = time.monotonic() + 120
        while snapshot.state == Snapshot.State.PENDING or not snapshot.rows_done:  # its first chunk is queued
            worker.alive()
            if time.monotonic() > deadline or snapshot.state not in Snapshot.ACTIVE:
                raise SystemExit(f"snapshot #{snapshot.id} did not start: {snapshot.state} {snapshot.error}")
            time.sleep(0.02)
            snapshot.refresh_from_db()
        rows_before, window_start = snapshot.rows_done, timezone.now()
        p50, p99, lost = stream.measure(seconds)
        window_end = timezone.now() - datetime.timedelta(seconds=2)  # measure() waits 2 s after the last commit
        snapshot.refresh_from_db()
        finished = snapshot.finished
        early = None
        if snapshot.state == Snapshot.State.DONE and finished is not None and finished < window_end:
            early = (window_end - finished).total_seconds()
        # Rows queued during the window (until now when it was still running at the window's end).
        until = finished if early is not None else timezone.now()
        span = (until - window_start).total_seconds()
        rate = (snapshot.rows_done - rows_before) / span if span > 0 else float("nan")
        cancel_snapshots([snapshot])
        chunks = snapshot.chunks_done
    finally:
        if drainer is not None:
            drainer.stop()
    return {
        "p50": p50,
        "p99": p99,
        "lost": lost,
        "early": early,
        "rate": rate,
        "chunks": chunks,
        "rereads": rereads(worker, snapshot.id),
    }


# -- main -----------------------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rate(value: float) -> str:
    return f"{value:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the snapshot table")
    parser.add_argument("--chunk-rows", default="2000,10000", help="[Snapshot] ChunkRows values, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="snapshots per chunk size (medians printed)")
    parser.add_argument("--latency-seconds", type=float, default=10)
    parser.add_argument(
        "--latency-chunk-rows", type=int, help="ChunkRows while latency is measured (default: the first)"
    )
    parser.add_argument("--limit", type=int, default=20_000, help="[Snapshot] RowsPerSecond of the limited run")
    parser.add_argument("--method", choices=("auto", "consistent-snapshot", "watermark"), default="auto")
    parser.add_argument("--batch-ms", type=int, default=10, help="runbinlog --batch-ms")
    parser.add_argument("--no-drain", action="store_true", help="leave the snapshots' rows in their queues")
    parser.add_argument(
        "--background-rate",
        type=int,
        default=0,
        help="rows/s inserted into bench.events (no subscriber) while part 1 runs, 10 ms transactions; 0: none",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    chunk_sizes = [int(size) for size in args.chunk_rows.split(",") if size.strip()]
    args.latency_chunk_rows = args.latency_chunk_rows or chunk_sizes[0]
    drain_rows = not args.no_drain
    loads: list[tuple[float, float, float]] = []
    show_load("at start", loads)

    from devtools.sandbox import MariaDB

    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-snapshot-"))
    url, drop = prepare_store(args.store, workdir)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=url,
        RELAY_DATA_DIR=str(workdir),
        RELAY_SERVER_AUTHSECRET=SECRET,
        RELAY_SERVER_HEARTBEATSECONDS="1",
        RELAY_LOG_LEVEL="WARNING",
    )
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    # A buffer pool that holds the table, as a production source's would: the reads measure the relay, not the disk.
    source = MariaDB(workdir / "mariadb", row_metadata_full=True, extra_args=["--innodb-buffer-pool-size=1G"]).start()
    relay = worker = None
    throughput: dict[int, dict[str, list[float]]] = {}
    full_scans: list[float] = []
    latency: list[tuple[str, dict[str, Any], tuple[float, float, int]]] = []
    try:
        source.execute(f"CREATE DATABASE {SCHEMA}")
        source.execute(
            CREATE_TABLE,
            "CREATE TABLE events (id INT PRIMARY KEY, v VARCHAR(40))",
            "CREATE TABLE ping (id INT AUTO_INCREMENT PRIMARY KEY)",
            database=SCHEMA,
        )
        if args.method == "watermark":
            source.execute("GRANT CREATE, INSERT, DELETE ON relay.* TO 'relay_repl'@'%'")
        started = time.perf_counter()
        # Not in the binlog: the rows predate the relay, which is what a snapshot is for.
        source.execute("SET SESSION sql_log_bin = 0", FILL.format(rows=args.rows), "ANALYZE TABLE t", database=SCHEMA)
        print(f"filled {SCHEMA}.{TABLE} with {args.rows:,} rows in {time.perf_counter() - started:.1f}s", flush=True)
        start_at = source.binlog_position()

        log = workdir / "relay.log"
        relay = start(env, log, "runrelay", "--address", "127.0.0.1", "--port", str(port))
        wait_port(port, relay, log)
        worker = Worker(dict(env, **source.source_env()), workdir, source, start_at)

        if not args.skip_throughput:
            busy = f", {args.background_rate:,} rows/s on the stream" if args.background_rate else ", the stream idle"
            print(f"\n1. snapshot of the whole table, RowsPerSecond unlimited{busy}", flush=True)
            show_load("before", loads)
            background = Background(source, args.background_rate) if args.background_rate else None
            for chunk_rows in chunk_sizes:
                worker.start(chunk_rows, 0, args.method, args.batch_ms)
                figures: dict[str, list[float]] = {}
                throughput[chunk_rows] = figures
                for run in range(args.runs):
                    collect("before the run")
                    if chunk_rows == chunk_sizes[0]:  # a full scan does not depend on the chunk size
                        full, full_rows = raw_full_scan(source)
                        assert full_rows == args.rows, full_rows
                        full_scans.append(args.rows / full)
                    chunked, chunked_rows = raw_chunked(source, chunk_rows)
                    reader, reader_rows = reader_chunked(source, chunk_rows, args.method)
                    assert chunked_rows == reader_rows == args.rows, (chunked_rows, reader_rows)
                    result = snapshot_run(port, worker, f"bench-snap-{chunk_rows}-{run}", args.rows, drain_rows)
                    assert result["rows"] == args.rows, result
                    n = args.rows
                    figures.setdefault("chunked", []).append(n / chunked)
                    figures.setdefault("reader", []).append(n / reader)
                    figures.setdefault("outside", []).append(n / result["outside"])
                    figures.setdefault("worker", []).append(n / result["worker"])
                    figures.setdefault("seconds", []).append(result["outside"])
                    figures.setdefault("rereads", []).append(result["rereads"])
                    if result["client"] is not None:
                        figures.setdefault("client", []).append(n / result["client"])
                    client_text = (
                        f"client got all {result['received']:,} records at {result['client']:.1f}s"
                        if result["client"] is not None
                        else (
                            "not drained"
                            if not drain_rows
                            else f"client got {result['received']} records only ({result['drain']})"
                        )
                    )
                    print(
                        f"  chunk {chunk_rows:,}, run {run + 1}: request to done {result['outside']:.1f}s"
                        f" = {n / result['outside']:,.0f} rows/s (Snapshot row: created to finished"
                        f" {result['created_to_finished']:.1f}s, started to finished {result['worker']:.1f}s ="
                        f" {n / result['worker']:,.0f} rows/s, {result['chunks']} chunks); {client_text}."
                        f" {result['rereads']} chunks read again. Reads alone: full scan {full_scans[-1]:,.0f} rows/s,"
                        f" chunked {n / chunked:,.0f} rows/s,"
                        f" the worker's chunk reader {n / reader:,.0f} rows/s",
                        flush=True,
                    )
            if background is not None:
                background.stop()
            show_load("after", loads)

        if not args.skip_latency:
            chunk_rows = args.latency_chunk_rows
            print(
                f"\n2. live stream latency, {LATENCY_RATE:,} rows/s, {args.latency_seconds:g}s windows,"
                f" snapshot chunks of {chunk_rows:,} rows",
                flush=True,
            )
            show_load("before", loads)
            stream: Stream | None = None
            for label, limit in (("unlimited", 0), (f"{args.limit:,} rows/s", args.limit)):
                worker.start(chunk_rows, limit, args.method, args.batch_ms)
                if stream is None:
                    stream = Stream(port, source)
                    worker.caught_up()  # the consumer's filter is in force
                    stream.measure(2)  # warm-up, not counted
                collect("before the window")
                without = stream.measure(args.latency_seconds)
                print(
                    f"  worker with RowsPerSecond {label}, no snapshot: p50 {without[0]:.1f} ms,"
                    f" p99 {without[1]:.1f} ms, {without[2]} rows not received",
                    flush=True,
                )
                collect("before the window")
                name = f"bench-snap-live-{limit}"
                result = latency_with_snapshot(port, worker, stream, name, args.rows, args.latency_seconds, drain_rows)
                note = (
                    f"; THE SNAPSHOT FINISHED {result['early']:.1f}s BEFORE THE WINDOW'S END"
                    if result["early"] is not None
                    else "; the snapshot ran during the whole window (cancelled after it)"
                )
                print(
                    f"  snapshot running, RowsPerSecond {label} ({result['rate']:,.0f} rows/s queued in the window):"
                    f" p50 {result['p50']:.1f} ms, p99 {result['p99']:.1f} ms, {result['lost']} rows not received;"
                    f" p50 x{result['p50'] / without[0]:.2f}, p99 x{result['p99'] / without[1]:.2f}{note}",
                    flush=True,
                )
                latency.append((label, result, without))
            if stream is not None:
                stream.stop.set()
            show_load("after", loads)
    finally:
        if worker is not None:
            worker.stop()
        if relay is not None:
            relay.terminate()
            relay.wait(30)
        from django.db import connections

        connections.close_all()
        source.destroy()
        drop()
        for store_file in workdir.glob("bench.sqlite3*"):
            store_file.unlink()
    show_load("at the end", loads)
    print(f"the worker's and the relay server's logs: {workdir}")
    report(args, throughput, full_scans, latency, loads)
    return 0


def report(
    args: argparse.Namespace,
    throughput: dict[int, dict[str, list[float]]],
    full_scans: list[float],
    latency: list[tuple[str, dict[str, Any], tuple[float, float, int]]],
    loads: list[tuple[float, float, float]],
) -> None:
    today = datetime.date.today().isoformat()
    ones = [sample[0] for sample in loads]
    load_text = f"load {min(ones):.1f}{DASH}{max(ones):.1f}"
    store = "PostgreSQL" if args.store == "postgres" else "SQLite"
    method = "consistent snapshot" if args.method in ("auto", "consistent-snapshot") else "watermarks"
    busy = f", {args.background_rate:,} rows/s on the stream in part 1" if args.background_rate else ""
    print(f"\nsnapshot benchmark ({store} store, MariaDB {method}, {args.rows:,} rows{busy}, loopback)")
    if throughput:
        print(f"  rows/s, median of {args.runs} (a full scan by PyMySQL: {rate(median(full_scans))} rows/s):")
        header = ("chunk", "request→done", "started→finished", "client got all", "raw chunked", "chunk reader")
        print("  " + "  ".join(f"{h:>16}" for h in header) + "  snapshot/raw chunked  chunks read again")
        for chunk_rows, figures in throughput.items():
            cells = [
                f"{chunk_rows:,}",
                *(rate(median(figures.get(key, []))) for key in ("outside", "worker", "client", "chunked", "reader")),
            ]
            ratio = median(figures["outside"]) / median(figures["chunked"])
            again = ", ".join(f"{count:.0f}" for count in figures["rereads"])
            print("  " + "  ".join(f"{c:>16}" for c in cells) + f"  {ratio:20.2f}x  {again}")
    if latency:
        print(f"  live stream, {LATENCY_RATE:,} rows/s, source commit to client, ms:")
        for label, result, without in latency:
            early = f" (snapshot ended {result['early']:.1f}s early)" if result["early"] is not None else ""
            print(
                f"    RowsPerSecond {label:>14}: without p50 {without[0]:6.1f} p99 {without[1]:6.1f};"
                f" with p50 {result['p50']:6.1f} p99 {result['p99']:6.1f}; ratio p50 x{result['p50'] / without[0]:.2f}"
                f" p99 x{result['p99'] / without[1]:.2f}; snapshot {result['rate']:,.0f} rows/s,"
                f" {result['chunks']} chunks queued, {result['rereads']} read again{early}"
            )

    print("\nfor the README's performance table:")
    if throughput:
        parts = []
        for chunk_rows, figures in throughput.items():
            ratio = median(figures["outside"]) / median(figures["chunked"])
            parts.append(
                f"chunks of {chunk_rows:,}: {rate(median(figures['outside']))} rows/s request to done"
                f" ({median(figures['seconds']):.1f} s; first to last chunk {rate(median(figures['worker']))}),"
                f" {ratio:.2f}{TIMES} the same chunked SELECT by PyMySQL ({rate(median(figures['chunked']))} rows/s;"
                f" the worker's chunk reader alone {rate(median(figures['reader']))})"
            )
        print(
            f"| `snapshot.py`: {args.rows:,}-row table, 6 columns, {store}, MariaDB {method}, RowsPerSecond"
            f" unlimited, {'rows drained by a FETCH client' if not args.no_drain else 'rows left queued'},"
            f" {f'{args.background_rate:,} rows/s on the stream' if args.background_rate else 'the stream idle'}"
            f" (median of {args.runs}, {today}, {load_text}) | {'; '.join(parts)}; a full scan by PyMySQL"
            f" {rate(median(full_scans))} rows/s | — |"
        )
    if latency:
        parts = []
        for label, result, without in latency:
            early = f", the snapshot ended {result['early']:.1f} s early" if result["early"] is not None else ""
            parts.append(
                f"RowsPerSecond {label} ({result['rate']:,.0f} rows/s queued): without p50 {without[0]:.1f} /"
                f" p99 {without[1]:.1f} ms, with p50 {result['p50']:.1f} / p99 {result['p99']:.1f} ms"
                f" ({TIMES}{result['p50'] / without[0]:.2f} / {TIMES}{result['p99'] / without[1]:.2f}{early})"
            )
        print(
            f"| `snapshot.py`: live stream, {LATENCY_RATE:,} rows/s to a long-polling FETCH client, while another"
            f" client's snapshot of the {args.rows:,}-row table runs, chunks of {args.latency_chunk_rows:,}"
            f" ({args.latency_seconds:g} s windows, {today}, {load_text}) | {'; '.join(parts)} | p99 < 100 ms |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
