"""Ingest benchmark: rows/s from the binlog to committed client queues, and the worker's peak memory.

Run by hand (needs PostgreSQL on 127.0.0.1:5432 or --pg-url, and the installed mariadbd):

    .venv/bin/python bench/ingest.py            # 200,000 rows; 1, 5 and 20 clients; a 1,000,000-row transaction
    .venv/bin/python bench/ingest.py --rows 50000 --big-rows 0 --runs 3

For each client count it writes the workload to a private MariaDB first, then starts ``manage.py runbinlog`` at the
workload's first position and times it until the checkpoint reaches the end (so the figure is the worker's own
speed: decoding, routing, and the store writes). Prints the median of --runs and the peak RSS (VmHWM) of the worker.

Two rates per run: from the worker's start (Python, Django, the store and source connections, the schema history
included: about a second here), and its steady rate, from its first committed batch to the end (rows counted by the
worker's own WorkerStatus.rows_since_start). The worker's bytecode is compiled by a first, untimed start into a cache
of the bench's own (``PYTHONPYCACHEPREFIX``), as an installed package has it; where ``PYTHONDONTWRITEBYTECODE`` is set,
every start would otherwise compile the project first.

The reference, measured in the same run: the COPY ceiling. After each worker run, the rows the worker stored (its
changes and queue entries) are read back as COPY text and written again directly by COPY, in transactions of the
worker's own mean commit size (its batches counted by PostgreSQL as the writes of its checkpoint row while it ran). The
ratio is the worker's median steady rows/s over the best ceiling of its runs (the ratio of the rate from its start is
printed too); the load average is printed with each figure.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import psycopg2

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devtools.sandbox import MariaDB  # noqa: E402

TABLE = """CREATE TABLE bench.orders (
  id INT PRIMARY KEY, customer INT NOT NULL, total DECIMAL(12,2), status VARCHAR(20), note TEXT,
  created DATETIME(3), flags TINYINT UNSIGNED, score DOUBLE)"""


_databases = itertools.count()


def fresh_database(admin_url: str) -> str:
    name = f"relay_bench_{os.getpid()}_{int(time.time())}_{next(_databases)}"
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


_scratch: list[Path] = []


def scratch() -> Path:
    """The bench's own folder (made on first use, removed by ``main``): the worker's data folders, and the bytecode
    cache written by the first starts of manage.py (migrate and the subscriptions, untimed)."""
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="relay-bench-ingest-")))
    return _scratch[0]


def relay_env(server: MariaDB, store_url: str) -> dict[str, str]:
    # Without PYTHONDONTWRITEBYTECODE, so that the first start fills the bytecode cache (PYTHONPYCACHEPREFIX holds the
    # bytecode of everything imported, the installed packages' too).
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RELAY_") and key != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=store_url,
        RELAY_DATA_DIR=tempfile.mkdtemp(prefix="data-", dir=scratch()),
        PYTHONPYCACHEPREFIX=str(scratch() / "bytecode"),
        **server.source_env(),
        RELAY_LOG_LEVEL="WARNING",
    )
    return env


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, check=True, capture_output=True)


def subscribe(env: dict[str, str], clients: int, idle: int = 0) -> None:
    """``clients`` subscribed to every table, and ``idle`` more to a table the workload never writes."""
    code = (
        "from relay import store\n"
        f"for n in range({clients}):\n"
        "    s = store.open_session(f'client-{n}')\n"
        "    store.add_filter(s.client_id, 7, '*', '*')\n"
        f"for n in range({idle}):\n"
        "    s = store.open_session(f'idle-{n}')\n"
        "    store.add_filter(s.client_id, 7, 'elsewhere', f'table_{n}')\n"
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


def progress(conn: Any) -> tuple[tuple[str, int] | None, int]:
    """The worker's checkpoint and the rows it has applied since its start (one committed view of both), read on the
    bench's one connection (a new connection every poll would charge the store a backend's start every time)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT c.binlog_file, c.binlog_pos, s.rows_since_start FROM relay_checkpoint c"
            " LEFT JOIN relay_workerstatus s ON s.source = c.source"
        )
        row = cur.fetchone()
    conn.rollback()  # not counted as a commit, and the next poll sees what committed since
    return ((row[0], row[1]), row[2] or 0) if row else (None, 0)


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def batches(store_url: str) -> int:
    """The worker's batches so far: each writes the checkpoint once, in its own store transaction. (The database's
    commit count says more: the worker's lease renewals, its garbage collector and its statements outside a batch
    commit too, which would make its batches look smaller than they are, and the ceiling lower.)"""
    conn = psycopg2.connect(store_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'relay_checkpoint'")
            return int(cur.fetchone()[0])
    finally:
        conn.rollback()
        conn.close()


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


class WorkerRun(NamedTuple):
    seconds: float  # from the worker's start until its checkpoint reaches the source's end
    steady: float  # rows/s from its first committed batch to the end (nan when it took one batch)
    peak_mb: float  # peak RSS
    commits: int  # the worker's batches meanwhile (its checkpoint's writes)


def run_worker(server: MariaDB, env: dict[str, str], start: tuple[str, int], store_url: str) -> WorkerRun:
    target = server.binlog_position()
    batches_before = batches(store_url)
    began = time.monotonic()
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runbinlog", "--from", f"{start[0]}:{start[1]}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak = 0.0
    first: tuple[float, int] | None = None  # (when, rows) at the first poll that saw a batch committed
    polls = psycopg2.connect(store_url)
    try:
        while True:
            peak = max(peak, peak_rss_mb(worker.pid))
            position, rows = progress(polls)
            if rows and first is None:
                first = (time.monotonic(), rows)
            if position is not None and position >= target:
                break
            if worker.poll() is not None:
                raise SystemExit(f"worker exited: {worker.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        ended = time.monotonic()
        peak = max(peak, peak_rss_mb(worker.pid))
    finally:
        polls.close()
        worker.terminate()
        worker.wait(60)
    steady = float("nan")
    if first is not None and ended > first[0] and rows > first[1]:
        steady = (rows - first[1]) / (ended - first[0])
    time.sleep(0.5)  # a backend's statistics are flushed when it exits
    return WorkerRun(ended - began, steady, peak, batches(store_url) - batches_before)


STORED = ("relay_change", "relay_queueentry")


def copy_ceiling(store_url: str, commit_rows: int, repeats: int = 3) -> float:
    """Changes/s of writing the rows the worker stored again, directly by COPY, ``commit_rows`` changes a commit.

    Each transaction writes a slice of the changes and the queue entries that start in it: the same rows the worker
    wrote, without its Python. The tables are emptied first (the worker has stopped); the best of ``repeats``.
    """
    conn = psycopg2.connect(store_url)
    try:
        with conn.cursor() as cur:
            columns = {}
            for table in STORED:
                cur.execute(
                    "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute"
                    " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                    [table],
                )
                columns[table] = cur.fetchone()[0]
            dumps = {}
            for table, order in (("relay_change", "id"), ("relay_queueentry", "change_id, client_id, seq")):
                out = io.StringIO()
                cur.copy_expert(f"COPY (SELECT {columns[table]} FROM {table} ORDER BY {order}) TO STDOUT", out)
                dumps[table] = [line + "\n" for line in out.getvalue().split("\n")[:-1]]  # COPY escapes newlines
            change_column = columns["relay_queueentry"].split(", ").index("change_id")
            entry_change = [int(line.split("\t")[change_column]) for line in dumps["relay_queueentry"]]
            change_ids = [int(line.split("\t", 1)[0]) for line in dumps["relay_change"]]  # id comes first
            changes = dumps["relay_change"]
            if not changes:
                return float("nan")
            best = 0.0
            for _ in range(repeats):  # the best of a few: a ceiling
                cur.execute("TRUNCATE relay_queueentry, relay_change")
                conn.commit()
                began = time.monotonic()
                entry = 0
                for offset in range(0, len(changes), commit_rows):
                    cur.copy_expert(
                        f"COPY relay_change ({columns['relay_change']}) FROM STDIN",
                        io.StringIO("".join(changes[offset : offset + commit_rows])),
                    )
                    end = offset + commit_rows
                    end_id = change_ids[end] if end < len(change_ids) else None
                    last = entry
                    while last < len(entry_change) and (end_id is None or entry_change[last] < end_id):
                        last += 1
                    if last > entry:
                        cur.copy_expert(
                            f"COPY relay_queueentry ({columns['relay_queueentry']}) FROM STDIN",
                            io.StringIO("".join(dumps["relay_queueentry"][entry:last])),
                        )
                        entry = last
                    conn.commit()
                best = max(best, len(changes) / (time.monotonic() - began))
            return best
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--per-transaction", type=int, default=100)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--big-rows", type=int, default=1_000_000, help="rows of the single-transaction test (0: skip)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--idle-clients", type=int, default=0, help="more clients, subscribed to a table the workload never writes"
    )
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    server = MariaDB(Path(tempfile.mkdtemp(prefix="relay-bench-mariadb-")), row_metadata_full=True).start()
    try:
        server.execute("CREATE DATABASE bench", TABLE)
        # Fills the bytecode cache with what the worker imports (migrate and shell do not import it all).
        manage(relay_env(server, args.pg_url), "runbinlog", "--help")
        print(
            f"{args.rows:,} rows in transactions of {args.per_transaction}, 8 columns, PostgreSQL store, "
            f"{args.idle_clients} idle clients; load {load()}",
            flush=True,
        )
        next_id = 1
        start = server.binlog_position()
        write_workload(server, args.rows, args.per_transaction, next_id)
        next_id += args.rows
        medians: dict[int, float] = {}
        for clients in args.clients:
            rates, steadies, peaks, ceilings, sizes = [], [], [], [], []
            for _ in range(args.runs):
                url = fresh_database(args.pg_url)
                try:
                    env = relay_env(server, url)
                    manage(env, "migrate", "--noinput")
                    subscribe(env, clients, args.idle_clients)
                    run = run_worker(server, env, start, url)
                    size = max(1, round(args.rows / max(run.commits, 1)))
                    ceilings.append(copy_ceiling(url, size))
                finally:
                    drop_database(args.pg_url, url)
                rates.append(args.rows / run.seconds)
                steadies.append(run.steady)
                peaks.append(run.peak_mb)
                sizes.append(size)
            rate, steady, ceiling = statistics.median(rates), statistics.median(steadies), max(ceilings)
            medians[clients] = steady
            print(
                f"  {clients} client(s): steady median {steady:,.0f} rows/s "
                f"(runs: {', '.join(f'{r:,.0f}' for r in steadies)}); from its start {rate:,.0f} rows/s "
                f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}); peak RSS {max(peaks):.0f} MB; "
                f"COPY ceiling (best) {ceiling:,.0f} rows/s at {statistics.median(sizes):,.0f} rows a commit "
                f"(runs: {', '.join(f'{c:,.0f}' for c in ceilings)}); ratio {steady / ceiling:.2f} "
                f"(from its start {rate / ceiling:.2f}; target >= 0.5); load {load()}",
                flush=True,
            )
        if 1 in medians and len(medians) > 1:
            most = max(medians)
            print(
                f"  {most} clients vs 1 (steady): {medians[most] / medians[1]:.2f} (target >= 0.90)",
                flush=True,
            )
        if args.big_rows:
            start = server.binlog_position()
            write_workload(server, args.big_rows, args.big_rows, next_id)
            url = fresh_database(args.pg_url)
            try:
                env = relay_env(server, url)
                manage(env, "migrate", "--noinput")
                subscribe(env, 1)
                run = run_worker(server, env, start, url)
            finally:
                drop_database(args.pg_url, url)
            print(
                f"  one {args.big_rows:,}-row transaction, 1 client: {args.big_rows / run.seconds:,.0f} rows/s, "
                f"peak RSS {run.peak_mb:.0f} MB (target < 300 MB)"
            )
    finally:
        server.destroy()
        for folder in _scratch:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
