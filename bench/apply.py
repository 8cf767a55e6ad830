"""A small batch's apply against the batch's own writes made directly, in the same run (PostgreSQL).

    .venv/bin/python bench/apply.py                     # 10-row batches, 1 and 20 clients, 400 of each
    .venv/bin/python bench/apply.py --rows 100 --clients 5 --batches 200

What the worker does for each batch when the source is quiet, and so what a row waits for between the source's commit
and the client's wake-up (bench/latency.py's "Ingestor.apply" and "COMMIT" stages): ``Ingestor.apply`` of a batch of
single-row INSERT transactions of an 8-column table, every client subscribed to every table, in one store transaction,
committed. The reference is the batch's own writes and nothing else, made directly with psycopg2 on a connection of
its own: the change rows, one queue run per client, the checkpoint and the wake-up NOTIFY, sent as one string of
statements, then COMMIT. Everything apply does besides (the filter version, the queue states, usage, event counts,
the worker's status, id reservation, the record form) is the difference.

The two alternate batch by batch in a fresh database, so the machine's load weighs on both alike; it prints each one's
median and 90th percentile (ms, commit included), the ratio ``reference / apply`` (1.0x: apply costs what its own
writes cost), and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ingest import drop_database, fresh_database, load  # noqa: E402

COLUMNS = ("id", "customer", "total", "status", "note", "created", "flags", "score")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10, help="rows per batch (one transaction each)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--batches", type=int, default=400, help="timed batches of each kind per client count")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    url = fresh_database(args.pg_url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "relayproject.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(f"{args.rows}-row batches, {args.batches} of each kind, alternated; load before: {load()}")
        for clients in args.clients:
            apply_ms, direct_ms = measure(url, clients, args.rows, args.batches)
            a, d = statistics.median(apply_ms), statistics.median(direct_ms)
            print(
                f"  {clients:>3} client(s): apply p50 {a:6.2f} ms  p90 {quantile(apply_ms, 0.9):6.2f} ms;"
                f"  its own writes p50 {d:6.2f} ms  p90 {quantile(direct_ms, 0.9):6.2f} ms;"
                f"  own writes / apply: {d / a:.2f}x"
            )
        print(f"load after: {load()}")
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(args.pg_url, url)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, clients: int, rows: int, batches: int) -> tuple[list[float], list[float]]:
    import psycopg2
    from django.db import connection, transaction

    from binlog import Position, RowChange, Transaction
    from binlog.table import ColumnInfo, TableInfo
    from relay import store
    from relay.models import Change, Checkpoint, Client, QueueEntry, WorkerStatus
    from relay.store import rowcodec
    from relay.worker.ingest import Ingestor

    QueueEntry.objects.all().delete()
    Change.objects.all().delete()
    Client.objects.all().delete()
    subscribed = [store.open_session(f"apply-{n}").client_id for n in range(clients)]
    for client_id in subscribed:
        store.add_filter(client_id, 7, "*", "*")
    # The reference's clients have no filter, so apply leaves them alone.
    direct_clients = [store.open_session(f"direct-{n}").client_id for n in range(clients)]
    WorkerStatus.objects.get_or_create(source="apply")
    Checkpoint.objects.update_or_create(source="direct", defaults={"binlog_file": "binlog.000001", "binlog_pos": 4})
    info = TableInfo("bench", "orders", tuple(ColumnInfo(name, 3, "int") for name in COLUMNS))
    ingestor = Ingestor("apply")
    direct = psycopg2.connect(url)
    cursor = direct.cursor()
    quote = connection.ops.quote_name
    changes, entries, checkpoints = (quote(model._meta.db_table) for model in (Change, QueueEntry, Checkpoint))
    next_row = 0
    direct_seq = 0

    def values(n: int) -> tuple[str, ...]:
        return (str(n), str(n % 977), f"{n}.25", "paid", f"note {n}", "2026-01-02 03:04:05.678", "7", "0.5")

    def batch() -> list[Transaction]:
        nonlocal next_row
        txs = []
        for _ in range(rows):
            next_row += 1
            pos = 1000 + next_row * 100
            change = RowChange(
                "bench", "orders", 1, COLUMNS, None, values(next_row), "binlog.000001", pos, 0, 1_700_000_000, "", info
            )
            txs.append(Transaction([change], Position("binlog.000001", pos + 99)))
        return txs

    def own_writes() -> None:
        """The batch's changes, one queue run per client, the checkpoint and the NOTIFY: one round trip, COMMIT."""
        nonlocal next_row, direct_seq
        first = next_row + 1
        next_row += rows
        records = [
            (
                "bench",
                "orders",
                1,
                "binlog.000001",
                1000 + n * 100,
                0,
                1_700_000_000,
                "",
                rowcodec.encode(COLUMNS, None, values(n)),
            )
            for n in range(first, first + rows)
        ]
        marks = ", ".join("(%s, %s, %s, %s, %s, %s, %s, %s, %s)" for _ in records)
        runs = ", ".join("(%s, %s, %s, currval(pg_get_serial_sequence(%s, 'id')) - %s)" for _ in direct_clients)
        seq = direct_seq + 1
        direct_seq += rows
        cursor.execute(
            f"INSERT INTO {changes} (schema_name, table_name, kind, binlog_file, binlog_pos, row_index, timestamp,"
            f" gtid, data) VALUES {marks};"
            f" INSERT INTO {entries} (client_id, seq, count, change_id) VALUES {runs};"
            f" UPDATE {checkpoints} SET binlog_pos = %s, updated = now() WHERE source = 'direct';"
            " SELECT pg_notify('relay_bench', '')",
            [value for record in records for value in record]
            + [v for client_id in direct_clients for v in (client_id, seq, rows, Change._meta.db_table, rows - 1)]
            + [1000 + next_row * 100 + 99],
        )
        direct.commit()

    def applied() -> None:
        with transaction.atomic():
            ingestor.apply(batch())

    for _ in range(30):  # warm-up: the filter index, the sequence's name, the tables' first pages
        applied()
        own_writes()
    apply_ms: list[float] = []
    direct_ms: list[float] = []
    for _ in range(batches):
        started = time.perf_counter()
        applied()
        apply_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        own_writes()
        direct_ms.append((time.perf_counter() - started) * 1000)
    direct.close()
    return apply_ms, direct_ms


if __name__ == "__main__":
    main()
