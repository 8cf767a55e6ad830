"""Ingest benchmark: rows/s from the binlog to committed client queues, and the worker's peak memory.

Run by hand (needs PostgreSQL on 127.0.0.1:5432 or --pg-url, and the installed mariadbd):

    .venv/bin/python bench/ingest.py                     # 200,000 rows; 1 and 5 clients; a 1,000,000-row transaction
    .venv/bin/python bench/ingest.py --rows 50000 --big-rows 0 --runs 3

For each client count it writes the workload to a private MariaDB first, then starts ``manage.py runbinlog`` at the
workload's first position and times it until the checkpoint reaches the end (so the figure is the worker's own
speed: decoding, routing, and the store writes). Prints the median of --runs and the peak RSS (VmHWM) of the worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg2

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devtools.sandbox import MariaDB  # noqa: E402

TABLE = """CREATE TABLE bench.orders (
  id INT PRIMARY KEY, customer INT NOT NULL, total DECIMAL(12,2), status VARCHAR(20), note TEXT,
  created DATETIME(3), flags TINYINT UNSIGNED, score DOUBLE)"""


def fresh_database(admin_url: str) -> str:
    name = f"relay_bench_{os.getpid()}_{int(time.time())}"
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    base = admin_url.rsplit("/", 1)[0]
    return f"{base}/{name}"


def drop_database(admin_url: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    conn.close()


def relay_env(server: MariaDB, store_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_")}
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=store_url,
        RELAY_DATA_DIR=tempfile.mkdtemp(prefix="relay-bench-"),
        **server.source_env(),
        RELAY_LOG_LEVEL="WARNING",
    )
    return env


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, check=True, capture_output=True)


def subscribe(env: dict[str, str], clients: int) -> None:
    code = (
        "from relay import store\n"
        f"for n in range({clients}):\n"
        "    s = store.open_session(f'client-{n}')\n"
        "    store.add_filter(s.client_id, 7, '*', '*')\n"
    )
    manage(env, "shell", "-c", code)


def write_workload(server: MariaDB, rows: int, per_transaction: int, start_id: int) -> None:
    with server.connect("bench") as conn, conn.cursor() as cur:
        for first in range(start_id, start_id + rows, per_transaction):
            ids = range(first, min(first + per_transaction, start_id + rows))
            cur.execute("BEGIN")
            cur.executemany(
                "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, NOW(3), %s, %s)",
                [(i, i % 977, f"{i % 10000}.{i % 100:02d}", "new", f"note {i}", i % 256, i / 7) for i in ids],
            )
            cur.execute("COMMIT")


def checkpoint(store_url: str) -> tuple[str, int] | None:
    conn = psycopg2.connect(store_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT binlog_file, binlog_pos FROM relay_checkpoint")
            row = cur.fetchone()
            return (row[0], row[1]) if row else None
    finally:
        conn.close()


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run_worker(server: MariaDB, env: dict[str, str], start: tuple[str, int], store_url: str) -> tuple[float, float]:
    """Seconds from the worker's start until its checkpoint reaches the source's end, and its peak RSS in MB."""
    target = server.binlog_position()
    began = time.monotonic()
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runbinlog", "--from", f"{start[0]}:{start[1]}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak = 0.0
    try:
        while True:
            peak = max(peak, peak_rss_mb(worker.pid))
            position = checkpoint(store_url)
            if position is not None and position >= target:
                break
            if worker.poll() is not None:
                raise SystemExit(f"worker exited: {worker.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        peak = max(peak, peak_rss_mb(worker.pid))
    finally:
        worker.terminate()
        worker.wait(60)
    return elapsed, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--per-transaction", type=int, default=100)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--big-rows", type=int, default=1_000_000, help="rows of the single-transaction test (0: skip)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    server = MariaDB(Path(tempfile.mkdtemp(prefix="relay-bench-mariadb-")), row_metadata_full=True).start()
    try:
        server.execute("CREATE DATABASE bench", TABLE)
        print(f"{args.rows:,} rows in transactions of {args.per_transaction}, 8 columns, PostgreSQL store")
        next_id = 1
        start = server.binlog_position()
        write_workload(server, args.rows, args.per_transaction, next_id)
        next_id += args.rows
        for clients in args.clients:
            rates, peaks = [], []
            for _ in range(args.runs):
                url = fresh_database(args.pg_url)
                try:
                    env = relay_env(server, url)
                    manage(env, "migrate", "--noinput")
                    subscribe(env, clients)
                    seconds, peak = run_worker(server, env, start, url)
                finally:
                    drop_database(args.pg_url, url)
                rates.append(args.rows / seconds)
                peaks.append(peak)
            print(
                f"  {clients} client(s): median {statistics.median(rates):,.0f} rows/s "
                f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; target >= 20,000 with 5), "
                f"peak RSS {max(peaks):.0f} MB"
            )
        if args.big_rows:
            start = server.binlog_position()
            write_workload(server, args.big_rows, args.big_rows, next_id)
            url = fresh_database(args.pg_url)
            try:
                env = relay_env(server, url)
                manage(env, "migrate", "--noinput")
                subscribe(env, 1)
                seconds, peak = run_worker(server, env, start, url)
            finally:
                drop_database(args.pg_url, url)
            print(
                f"  one {args.big_rows:,}-row transaction, 1 client: {args.big_rows / seconds:,.0f} rows/s, "
                f"peak RSS {peak:.0f} MB (target < 300 MB)"
            )
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
