"""Row changes per second of the usage pipeline in local[1] and local[2], over binlog files of a private MariaDB.

Run by hand: ``.venv/bin/python bench/pipeline.py [--rows 1200000] [--keep DIR]``. It starts a throwaway MariaDB
(devtools.sandbox), writes at least ``--rows`` row changes (inserts, updates, deletes over four tables, in transactions
of a few thousand rows) across several binlog files, then runs the pipeline (decode, aggregate, write Parquet; no
store) once per master, each in a fresh process after a warm-up run, and prints the rates, the speed-up, and how the
time splits between the decode (the tasks) and aggregating and writing the outputs (the driver). ``--binlogs DIR``
measures existing binlog files instead (a ``--keep`` folder's ``binlogs``), whose rows it cannot check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.sandbox import MariaDB
from relay.pipeline import inputs, job

TABLES = ("orders", "customers", "events", "stock")
CHUNK = 5000  # rows per statement (and per transaction)


def generate(server: MariaDB, rows: int) -> int:
    """Writes about ``rows`` row changes; returns the exact number (from the statements' affected rows)."""
    server.execute("CREATE DATABASE bench")
    for table in TABLES:
        server.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2), qty INT,"
            " updated DATETIME, note VARCHAR(100))",
            database="bench",
        )
    # Per table: insert n rows, update all of them twice, delete half: n * 3.5 row changes.
    per_table = int(rows / len(TABLES) / 3.5) + 1
    total = 0
    with server.connect("bench") as conn, conn.cursor() as cur:
        for table in TABLES:
            for start in range(1, per_table + 1, CHUNK):
                end = min(start + CHUNK - 1, per_table)
                cur.execute(
                    f"INSERT INTO {table} SELECT seq, CONCAT('name-', seq), seq / 100, seq % 17, NOW(),"
                    f" REPEAT('x', seq % 50) FROM seq_{start}_to_{end}"
                )
                total += cur.rowcount
        for step in ("qty = qty + 1", "amount = amount * 2, updated = NOW()"):
            for table in TABLES:
                for start in range(1, per_table + 1, CHUNK):
                    cur.execute(f"UPDATE {table} SET {step} WHERE id BETWEEN {start} AND {start + CHUNK - 1}")
                    total += cur.rowcount
        for table in TABLES:
            for start in range(1, per_table + 1, 2 * CHUNK):
                cur.execute(f"DELETE FROM {table} WHERE id BETWEEN {start} AND {start + CHUNK - 1}")
                total += cur.rowcount
    server.execute("FLUSH BINARY LOGS")
    return total


def measure(master: str, files: list[str], out: Path) -> dict[str, float]:
    """One master, in this (fresh) process: a warm-up run over the smallest file, then the timed run over all.

    The warm-up keeps the JVM's class loading and JIT out of the figures, so that the first master measured is not
    penalised; each master runs in its own process so that neither inherits the other's warm JVM.
    """
    spark = job.build_session(master, {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"})
    try:
        smallest = min(files, key=os.path.getsize)
        job.run(spark, inputs.collect(spark, smallest, None), out / "warm-up", write=lambda line: None)
        report, _ = job.run(
            spark, inputs.collect(spark, ",".join(files), None), out / "run", write=lambda line: print("  " + line)
        )
        cores = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    if report.problems():
        raise SystemExit("bench inputs failed: " + "; ".join(report.problems()))
    return {
        "seconds": report.seconds,
        "decode": report.decode_seconds,
        "aggregate": report.aggregate_seconds,
        "rows": report.rows,
        "cores": cores,
    }


def measure_in_subprocess(master: str, files: list[str], out: Path) -> dict[str, float]:
    command = [sys.executable, __file__, "--measure", master, "--out", str(out), *files]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = result.stdout.splitlines()
    for line in lines[:-1]:
        print(line)
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{master} failed: {result.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_200_000, help="row changes to generate (at least)")
    parser.add_argument("--keep", help="keep the binlog files and outputs in this directory")
    parser.add_argument("--binlogs", help="measure the binlog files of this directory instead of generating them")
    parser.add_argument("--measure", metavar="MASTER", help=argparse.SUPPRESS)  # the child process of one master
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.files, Path(args.out))))
        return

    base = Path(args.keep or tempfile.mkdtemp(prefix="relay-bench-pipeline-"))
    try:
        run_masters(args, base)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def run_masters(args: argparse.Namespace, base: Path) -> None:
    if args.binlogs:
        files = sorted(str(p) for p in Path(args.binlogs).iterdir() if p.is_file())
        written = None
    else:
        files, written = generate_files(args, base)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {}
    for master in ("local[1]", "local[2]"):
        print(f"{master}:")
        figures = measure_in_subprocess(master, files, base / f"out-{master[6]}")
        seconds, decode, aggregate = figures["seconds"], figures["decode"], figures["aggregate"]
        counted = int(figures["rows"])
        if written is not None and counted != written:
            raise SystemExit(f"{master}: counted {counted:,} row changes, the workload wrote {written:,}")
        results[master] = (counted / seconds, counted / decode)
        print(
            f"{master} ({int(figures['cores'])} cores): {counted:,} row changes in {seconds:.1f}s"
            f" = {counted / seconds:,.0f} row changes/s; decode {decode:.1f}s = {counted / decode:,.0f}/s,"
            f" aggregate and write {aggregate:.1f}s (load average {os.getloadavg()[0]:.2f})"
        )
    one, two = results["local[1]"], results["local[2]"]
    print(f"speed-up local[2] / local[1]: {two[0] / one[0]:.2f}x (decode stage alone {two[1] / one[1]:.2f}x)")


def generate_files(args: argparse.Namespace, base: Path) -> tuple[list[str], int]:
    server = MariaDB(base / "mariadb", extra_args=["--max-binlog-size=8M"]).start()
    try:
        started = time.monotonic()
        written = generate(server, args.rows)
        last = server.binlog_position()[0]
        binlogs = base / "binlogs"
        binlogs.mkdir(parents=True, exist_ok=True)
        files = []
        for path in server.binlog_files():
            if path.name < last:
                shutil.copy(path, binlogs / path.name)
                files.append(str(binlogs / path.name))
        size = sum(os.path.getsize(f) for f in files)
        print(
            f"generated {written:,} row changes in {time.monotonic() - started:.0f}s:"
            f" {len(files)} binlog files, {size / 1e6:.0f} MB"
        )
    finally:
        server.stop()
    return files, written


if __name__ == "__main__":
    main()
