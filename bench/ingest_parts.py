"""Where an ingested row's time goes, part by part, and what each worker shape could reach at best (PostgreSQL).

    .venv/bin/python bench/ingest_parts.py                    # 100,000 rows, 5 clients, the worker's 5,000-row batches
    .venv/bin/python bench/ingest_parts.py --rows 50000 --clients 20 --runs 5

``bench/ingest.py`` times the worker as a whole against the COPY ceiling. This script times its two halves apart, on
the same workload (``ingest.py``'s table, rows and transactions), each alone on the machine:

* the reader: ``BinlogStream`` over the replication connection, reading and decoding the workload (CPU per row);
* the apply: ``Ingestor.apply`` of those decoded transactions in batches of the worker's commit size, each batch in
  one store transaction, committed (wall and CPU per row: the wall includes PostgreSQL's own work on the batch);
* a process boundary: pickling the decoded transactions and reading them back (per row), what a reader in a process
  of its own would add on each side of a pipe; and the same for changes sent as the rows the store keeps (their
  record form made on the reader's side, timed on its own);

then the COPY ceiling of the rows the apply stored (``ingest.py``'s ``copy_ceiling``, at the same commit size).

From those it prints two bounds, each as rows/s and as a ratio of the ceiling:

* one interpreter (today's worker: a reader thread and the apply sharing one GIL): at best the reader's and the apply's
  CPU back to back, the store's waits fully overlapped by the reader;
* decoding in a process of its own: the slower of the reader plus pickling, and the apply's wall plus unpickling;
* decoding and the record form in a process of its own: the same with the record form moved to the reader's side;
* every part in parallel: the machine's cores over the CPU a row costs in all (the reader, the apply, and the store
  backend's own CPU for the apply's writes, read from /proc): no arrangement of today's code goes past it.

Bounds, not predictions: each is what that shape could do with nothing lost to scheduling between its parts.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ingest import TABLE, copy_ceiling, drop_database, fresh_database, load, write_workload  # noqa: E402

from devtools.sandbox import MariaDB  # noqa: E402


def cpu_and_wall(work: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = work()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def read_all(settings: dict[str, Any], start: tuple[str, int]) -> list[Any]:
    from binlog import BinlogStream, Position
    from binlog.settings import SourceSettings

    stream = BinlogStream(SourceSettings(**settings), Position(*start), blocking=False)
    try:
        return [tx for tx in stream if tx.changes]
    finally:
        stream.close()


def batches_of(transactions: list[Any], rows: int) -> list[list[Any]]:
    """Consecutive transactions grouped as the worker groups them when busy: a batch ends at ``rows`` rows."""
    batches: list[list[Any]] = [[]]
    size = 0
    for tx in transactions:
        batches[-1].append(tx)
        size += len(tx.changes)
        if size >= rows:
            batches.append([])
            size = 0
    return [batch for batch in batches if batch]


def backend_cpu(pid: int) -> float:
    """CPU seconds a PostgreSQL backend of this machine has used (user and system, from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apply_all(batches: list[list[Any]], clients: int) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, the store backend's CPU seconds) of applying every batch into the current (fresh)
    store, ``clients`` clients subscribed to every table, each batch committed."""
    from django.db import connection, transaction

    from relay import store
    from relay.worker.ingest import Ingestor

    for n in range(clients):
        store.add_filter(store.open_session(f"parts-{n}").client_id, 7, "*", "*")
    ingestor = Ingestor("parts")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    backend_before = backend_cpu(backend)

    def work() -> None:
        for batch in batches:
            with transaction.atomic():
                ingestor.apply(batch)

    cpu, wall, _ = cpu_and_wall(work)
    return cpu, wall, backend_cpu(backend) - backend_before


def measure(server: MariaDB, start: tuple[str, int], url: str, clients: int, batch_rows: int) -> tuple[float, ...]:
    """One run, each figure per row: (reader CPU, pickle CPU, unpickle CPU, apply CPU, apply wall, then the COPY
    ceiling in rows/s) with the apply writing into the empty store ``url``."""
    from django.core.management import call_command
    from django.db import connection, connections

    cpu, _, transactions = cpu_and_wall(partial(read_all, server.replication_settings(), start))
    rows = sum(len(tx.changes) for tx in transactions)
    reader = cpu / rows
    cpu, _, pickled = cpu_and_wall(partial(list, (pickle.dumps(tx, pickle.HIGHEST_PROTOCOL) for tx in transactions)))
    dumps = cpu / rows
    cpu, _, _ = cpu_and_wall(partial(list, map(pickle.loads, pickled)))
    loads = cpu / rows
    # The record form of every change (part of the apply today; a reader process could make it instead), and the
    # boundary for changes sent as their stored row (the record and the few fields routing and the store need).
    from relay.store import rowcodec

    changes = [change for tx in transactions for change in tx.changes]
    cpu, _, records = cpu_and_wall(partial(list, (rowcodec.encode(c.columns, c.before, c.after) for c in changes)))
    encode = cpu / rows
    stored = [
        (c.schema, c.table, c.kind, c.file, c.pos, c.row, c.timestamp, c.gtid, record)
        for c, record in zip(changes, records, strict=True)
    ]
    cpu, _, slim = cpu_and_wall(partial(pickle.dumps, stored, pickle.HIGHEST_PROTOCOL))
    slim_dumps = cpu / rows
    cpu, _, _ = cpu_and_wall(partial(pickle.loads, slim))
    slim_loads = cpu / rows
    connections.close_all()
    connection.settings_dict["NAME"] = url.rsplit("/", 1)[1]
    call_command("migrate", verbosity=0)
    apply_cpu, apply_wall, store_cpu = apply_all(batches_of(transactions, batch_rows), clients)
    connections.close_all()
    ceiling = copy_ceiling(url, batch_rows)
    per_row = (apply_cpu, apply_wall, store_cpu)
    return reader, dumps, loads, *(part / rows for part in per_row), encode, slim_dumps, slim_loads, ceiling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=100)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--batch-rows", type=int, default=5000, help="rows a commit (the worker's: --batch-rows)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "relayproject.settings")
    server = MariaDB(Path(tempfile.mkdtemp(prefix="relay-bench-mariadb-")), row_metadata_full=True).start()
    urls: list[str] = []
    try:
        server.execute("CREATE DATABASE bench", TABLE)
        start = server.binlog_position()
        write_workload(server, args.rows, args.per_transaction, 1)
        print(
            f"{args.rows:,} rows in transactions of {args.per_transaction}, 8 columns, {args.clients} client(s), "
            f"batches of {args.batch_rows} rows; {args.runs} runs; load {load()}",
            flush=True,
        )
        # One database per run, made before Django connects (its settings read DATABASE_URL once).
        urls = [fresh_database(args.pg_url) for _ in range(args.runs)]
        os.environ["DATABASE_URL"] = urls[0]
        import django

        django.setup()

        runs = [measure(server, start, url, args.clients, args.batch_rows) for url in urls]
        r, d, lo, ac, aw, pg, e, sd, sl = (statistics.median(run[part] for run in runs) for part in range(9))
        ceiling = max(run[9] for run in runs)
        us = 1e6
        print(f"  reader alone (read and decode):     {r * us:6.2f} us/row CPU ({1 / r:,.0f} rows/s)")
        print(f"  apply alone (store writes, commit): {aw * us:6.2f} us/row wall ({1 / aw:,.0f} rows/s)")
        print(f"    CPU: the apply's {ac * us:.2f} (record form {e * us:.2f}), the store backend's {pg * us:.2f}")
        print(f"  a process boundary: pickle {d * us:.2f} + unpickle {lo * us:.2f} us/row (decoded changes);")
        print(f"    {sd * us:.2f} + {sl * us:.2f} us/row (changes as their stored rows, the record form made)")
        print(f"  COPY ceiling (best of the runs' bests): {ceiling:,.0f} rows/s at {args.batch_rows} rows a commit")
        one = 1 / (r + ac)
        split = min(1 / (r + d), 1 / (aw + lo))
        print(f"  bound, one interpreter:            {one:>9,.0f} rows/s, {one / ceiling:.2f} of the ceiling")
        print(f"  bound, decoding in its own process: {split:>9,.0f} rows/s, {split / ceiling:.2f} of the ceiling")
        slim_split = min(1 / (r + e + sd), 1 / (aw - e + sl))
        print(
            f"  bound, decoding and the record form in their own process: {slim_split:,.0f} rows/s,"
            f" {slim_split / ceiling:.2f} of the ceiling"
        )
        cores = os.cpu_count() or 1
        every = cores / (r + ac + pg)
        print(
            f"  bound, every part in parallel on {cores} cores (reader, apply and the store's backend CPU):"
            f" {every:,.0f} rows/s, {every / ceiling:.2f} of the ceiling"
        )
        print(f"load after: {load()}")
    finally:
        from django.db import connections

        connections.close_all()
        for url in urls:
            drop_database(args.pg_url, url)
        server.stop()


if __name__ == "__main__":
    main()
