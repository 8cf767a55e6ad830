"""Where commit-to-client latency goes (run by hand: ``.venv/bin/python bench/latency.py [--seconds 10]``).

The set-up of ``bench/serve.py``'s end-to-end latency measure (a private MariaDB, ``runbinlog --batch-ms N``,
``runrelay``, a long-polling FETCH client, 1,000 rows/s in transactions of 10 rows every 10 ms), with every stage
of each row timed on the machine's monotonic clock (shared by all processes):

1. source COMMIT returned (the writer);
2. the transaction came out of the binlog stream in the worker's reader thread;
3. the worker started applying the batch holding it (``Ingestor.apply``);
4. that batch committed in the store (the queue entries and the NOTIFY become visible);
5. the NOTIFY reached a LISTEN connection of this process (what the relay's own LISTEN sees as well);
6. the row's FETCH reply reached the client.

The worker runs unmodified in its own process; this script wraps its stream and ``Ingestor.apply`` from the
outside (``worker`` mode below) and writes the timings to a file when the worker stops.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _worker_main(out: Path, manage_args: list[str]) -> None:
    """The worker process: runbinlog with its stream and batch apply timed, timings written at exit."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from relay.worker import ingest
    from relay.worker import runner as worker

    arrivals: list[tuple[float, list[int]]] = []
    batches: list[tuple[float, float, float, list[int]]] = []

    def ids_of(tx: Any) -> list[int]:
        ids = []
        for change in tx.changes:
            if change.table == "events" and change.after:
                ids.append(int(change.after[0]))
        return ids

    real_factory = worker.BinlogStream

    class TimedStream:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._stream = real_factory(*args, **kwargs)

        def __iter__(self) -> Any:
            for tx in self._stream:
                arrivals.append((time.monotonic(), ids_of(tx)))
                yield tx

        def __getattr__(self, name: str) -> Any:
            return getattr(self._stream, name)

    real_init = worker.Worker.__init__

    def init(self: Any, config: Any, options: Any = None, **kwargs: Any) -> None:
        real_init(self, config, options, stream_factory=TimedStream)

    worker.Worker.__init__ = init  # type: ignore[method-assign]
    real_apply = ingest.Ingestor.apply

    def timed_apply(self: Any, transactions: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        result = real_apply(self, transactions, **kwargs)
        applied = time.monotonic()
        ids = [i for tx in transactions for i in ids_of(tx)]
        transaction.on_commit(lambda: batches.append((started, applied, time.monotonic(), ids)))
        return result

    ingest.Ingestor.apply = timed_apply  # type: ignore[method-assign]
    try:
        call_command("runbinlog", *manage_args)
    except SystemExit:
        pass
    finally:
        out.write_text(json.dumps({"arrivals": arrivals, "batches": batches}))


def _listen(url: str, stop: threading.Event, notes: list[float]) -> None:
    import psycopg2
    import psycopg2.extensions

    from relay.store.channels import QUEUE_CHANNEL

    conn = psycopg2.connect(url.replace("postgres://", "postgresql://"))
    conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    with conn.cursor() as cursor:
        cursor.execute(f"LISTEN {QUEUE_CHANNEL}")
    while not stop.is_set():
        if select.select([conn], [], [], 0.2)[0]:
            conn.poll()
            if conn.notifies:
                now = time.monotonic()
                notes.extend(now for _ in conn.notifies)
                conn.notifies.clear()
    conn.close()


def _stats(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name:<44} (none)"
    values = sorted(values)
    p99 = values[max(0, int(len(values) * 0.99) - 1)]
    return (
        f"  {name:<44} p50 {statistics.median(values):7.1f}  p90 {values[int(len(values) * 0.9) - 1]:7.1f}"
        f"  p99 {p99:7.1f}  max {values[-1]:7.1f} ms"
    )


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        _worker_main(Path(sys.argv[2]), sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--batch-ms", type=int, default=10)
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="consumed queue entries left in the store beforehand (what bench/serve.py's throughput runs leave)",
    )
    args = parser.parse_args()

    import serve as bench

    workdir = Path(tempfile.mkdtemp(prefix="relay-latency-"))
    url, drop = bench.prepare_store("postgres", workdir)
    port = bench.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=url,
        RELAY_DATA_DIR=str(workdir),
        RELAY_SERVER_AUTHSECRET=bench.SECRET,
        RELAY_LOG_LEVEL="WARNING",
    )
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    from devtools.sandbox import MariaDB

    call_command("migrate", verbosity=0)
    log = workdir / "relay.log"
    relay = bench.start(env, log, "runrelay", "--address", "127.0.0.1", "--port", str(port))
    source = MariaDB(workdir / "mariadb", row_metadata_full=True).start()
    worker = None
    stop = threading.Event()
    notes: list[float] = []
    timings = workdir / "worker-timings.json"
    try:
        bench.wait_port(port, relay, log)
        if args.backlog:
            from relay import store
            from relay.models import Client as ClientRow

            backlog = store.open_session("bench-backlog")
            bench.fill([backlog.client_id], args.backlog)
            # Consumed, as a FETCH leaves them: the entries and their changes wait for the garbage collector.
            ClientRow.objects.filter(id=backlog.client_id).update(acked_seq=args.backlog, delivered_seq=args.backlog)
        source.execute("CREATE DATABASE bench", "CREATE TABLE bench.events (id INT PRIMARY KEY, v VARCHAR(40))")
        file, pos = source.binlog_position()
        worker_env = dict(env, **source.source_env())
        got: dict[int, float] = {}
        bench.latency_consumer(port, "bench-latency-probe", stop, got, add_filter=True)
        threading.Thread(target=_listen, args=(url, stop, notes), daemon=True).start()
        start = f"{file}:{pos}"
        with open(workdir / "worker.log", "ab") as out:
            worker = subprocess.Popen(
                [sys.executable, __file__, "worker", str(timings), "--batch-ms", str(args.batch_ms), "--from", start],
                cwd=REPO,
                env=worker_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        time.sleep(3)
        commit = bench.event_inserter(source.connect("bench"))
        load_before = os.getloadavg()[0]
        committed = bench.pace(1000, args.seconds, commit)
        time.sleep(2)
        stop.set()
        worker.terminate()
        worker.wait(30)
        data = json.loads(timings.read_text())
    finally:
        stop.set()
        if worker is not None and worker.poll() is None:
            worker.kill()
        source.destroy()
        relay.terminate()
        relay.wait(30)
        from django.db import connections

        connections.close_all()
        drop()

    arrived = {i: t for t, ids in data["arrivals"] for i in ids}
    started, applied, flushed = {}, {}, {}
    sizes = []
    for start, apply_end, commit_at, ids in data["batches"]:
        sizes.append(len(ids))
        for i in ids:
            started[i], applied[i], flushed[i] = start, apply_end, commit_at
    notes.sort()

    def first_note(after: float) -> float | None:
        import bisect

        k = bisect.bisect_left(notes, after - 0.0005)  # the clocks agree; allow for the order of the two wake-ups
        return notes[k] if k < len(notes) else None

    ms = 1000.0
    stages: dict[str, list[float]] = {k: [] for k in ("source", "batch", "apply", "commit", "notify", "relay", "all")}
    for i, at in committed.items():
        if i not in got or i not in flushed or i not in arrived:
            continue
        note = first_note(flushed[i])
        stages["source"].append((arrived[i] - at) * ms)
        stages["batch"].append((started[i] - arrived[i]) * ms)
        stages["apply"].append((applied[i] - started[i]) * ms)
        stages["commit"].append((flushed[i] - applied[i]) * ms)
        if note is not None:
            stages["notify"].append((note - flushed[i]) * ms)
            stages["relay"].append((got[i] - note) * ms)
        stages["all"].append((got[i] - at) * ms)
    print(
        f"commit-to-client latency by stage: {len(stages['all'])} of {len(committed)} rows, "
        f"{len(sizes)} batches (median {statistics.median(sizes) if sizes else 0} rows), "
        f"--batch-ms {args.batch_ms}, backlog {args.backlog:,}, load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    labels = {
        "source": "source COMMIT -> worker reader thread",
        "batch": "reader thread -> batch apply starts",
        "apply": "Ingestor.apply (SQL of the batch)",
        "commit": "apply end -> store COMMIT done",
        "notify": "store COMMIT -> NOTIFY received",
        "relay": "NOTIFY received -> FETCH reply at client",
        "all": "source COMMIT -> client (total)",
    }
    for key, label in labels.items():
        print(_stats(label, stages[key]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
