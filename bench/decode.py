"""Row decoding speed: this package vs python-mysql-replication vs ``mariadb-binlog -v``, on the same binlog span.

    .venv/bin/python bench/decode.py                 # 100,000 inserts + 100,000 updates on a 21-column table
    .venv/bin/python bench/decode.py --rows 20000 --runs 3
    .venv/bin/python bench/decode.py --rows 20000 --statement-rows 1 --ours-only   # per-event cost: a row a commit

It starts a private MariaDB (``--binlog-row-metadata=FULL``), writes the workload to its binlog, then times each
decoder over that span ``--runs`` times (ours with its value memos emptied before each run) and prints the median
rows/s (a row is one row change: an insert, or an update with its before and after images) and the ratios. Rates are
per CPU second of the decoding process (and, for ``mariadb-binlog``, of the child process), so a busy machine skews
them less than wall time (shown too); the stream decoders' figures leave out the server's own work of sending the
events. The decoders:

* ours, files: ``read_binlog_files`` on the binlog files;
* ours, stream: ``BinlogStream`` (non-blocking) over the replication protocol;
* python-mysql-replication: ``BinLogStreamReader`` over the replication protocol, touching ``event.rows``;
* mariadb-binlog -v: the server's own tool decoding the files into pseudo-SQL (output to /dev/null).

``--statement-rows 1`` makes every row its own transaction (GTID, TABLE_MAP, rows event and XID each), so the work
done per event rather than per row decides the rate; ``--ours-only`` leaves the other decoders out, to compare this
package before and after a change.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from binlog import BinlogStream, Position, SourceSettings, read_binlog_files  # noqa: E402
from binlog.values import clear_memos  # noqa: E402
from tests.helpers.mariadb import MariaDB  # noqa: E402

TABLE = """CREATE TABLE bench.t21 (
    id INT PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, i INT, bi BIGINT, d DECIMAL(12,2),
    f FLOAT, db DOUBLE, v VARCHAR(50), c CHAR(10), tx TEXT, bl BLOB, dt DATE, dtm DATETIME(3), ts TIMESTAMP NULL,
    tm TIME, y YEAR, e ENUM('new','paid','shipped','done'), s SET('a','b','c','d'), bt BIT(8)
)"""


def _row(i: int, rng: random.Random) -> str:
    null = rng.random() < 0.1
    text = "NULL" if null else f"'note {rng.randrange(10**6)} é'"
    return (
        f"({i}, {rng.randrange(-128, 128)}, {rng.randrange(65536)}, {rng.randrange(-8388608, 8388607)}, "
        f"{rng.randrange(-(2**31), 2**31)}, {rng.randrange(-(2**63), 2**63)}, "
        f"{rng.randrange(-(10**9), 10**9)}.{i % 100:02d}, "
        f"{rng.random() * 1000:.3f}, {rng.random() * 1e6}, 'customer-{rng.randrange(10**8)}', 'c{i % 1000}', {text}, "
        f"x'{rng.randrange(16**8):08x}', '20{rng.randrange(10, 30)}-0{rng.randrange(1, 10)}-1{rng.randrange(10)}', "
        f"'2024-01-02 03:04:05.{rng.randrange(1000):03d}', FROM_UNIXTIME({1700000000 + i}), "
        f"'{rng.randrange(-800, 800)}:{rng.randrange(60):02d}:00', {rng.randrange(1901, 2155)}, "
        f"{rng.randrange(1, 5)}, {rng.randrange(16)}, {rng.randrange(256)})"
    )


def write_workload(server: MariaDB, rows: int, statement_rows: int | None = None) -> tuple[str, int, int]:
    server.execute("CREATE DATABASE IF NOT EXISTS bench", "DROP TABLE IF EXISTS bench.t21", TABLE)
    server.execute("FLUSH BINARY LOGS")
    file, pos = server.binlog_position()
    rng = random.Random(21)
    batch = statement_rows or 500
    statements = []
    for start in range(0, rows, batch):
        values = ", ".join(_row(i, rng) for i in range(start, min(start + batch, rows)))
        statements.append(f"INSERT INTO bench.t21 VALUES {values}")
    server.execute(*statements)
    batch = statement_rows or 5000
    server.execute(*(f"UPDATE bench.t21 SET i = i + 1, v = 'updated' WHERE id >= {s} AND id < {s + batch}"
                     for s in range(0, rows, batch)))  # fmt: skip
    server.execute("FLUSH BINARY LOGS")
    return file, pos, rows * 2


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children: what decoding costs, whatever else the machine runs."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def time_runs(name: str, runs: int, decode: Callable[[], int], expected: int) -> float:
    """Median rows per CPU second over ``runs`` runs (wall-clock rates shown alongside).

    Each run starts with this package's value memos empty, as a new process would: a value rendered in an earlier run
    of the same span must not make a later run look faster.
    """
    rates, walls = [], []
    for _ in range(runs):
        clear_memos()
        started, cpu = time.perf_counter(), _cpu_seconds()
        count = decode()
        elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
        if count != expected:
            raise SystemExit(f"{name}: decoded {count} rows, expected {expected}")
        rates.append(count / cpu)
        walls.append(count / elapsed)
    median = statistics.median(rates)
    print(f"  {name:<34} {median:>10,.0f} rows/CPU-s   wall {statistics.median(walls):>10,.0f} rows/s", flush=True)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--statement-rows", type=int, help="rows per INSERT and per UPDATE (default: 500 per INSERT, 5000 per UPDATE)"
    )
    parser.add_argument("--ours-only", action="store_true", help="time only this package's two decoders")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="relay-bench-decode-"))
    server = MariaDB(base, row_metadata_full=True).start()
    try:
        file, pos, expected = write_workload(server, args.rows, args.statement_rows)
        files = [f for f in server.binlog_files() if f.name >= file][:-1]  # the span: closed files only
        settings = server.replication_settings()
        per = f", {args.statement_rows:,} row(s) per statement" if args.statement_rows else ""
        print(f"{args.rows:,} inserts + {args.rows:,} updates of a 21-column table{per}, {len(files)} binlog file(s), "
              f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB; median of {args.runs} runs")  # fmt: skip

        def ours_files() -> int:
            return sum(len(t.changes) for t in read_binlog_files(files, start=pos))

        def ours_stream() -> int:
            stream = BinlogStream(SourceSettings(**settings), Position(file, pos), blocking=False)
            try:
                return sum(len(t.changes) for t in stream if t.changes and t.changes[0].schema == "bench")
            finally:
                stream.close()

        def theirs() -> int:
            from pymysqlreplication import BinLogStreamReader
            from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

            reader = BinLogStreamReader(
                {"host": settings["host"], "port": settings["port"], "user": "root", "password": ""},
                server_id=0x5246,
                log_file=file,
                log_pos=pos,
                resume_stream=True,
                blocking=False,
                only_events=[WriteRowsEvent, UpdateRowsEvent],
                only_schemas=["bench"],
                is_mariadb=False,  # its MariaDB mode starts by GTID and ignores log_file/log_pos
            )
            count = 0
            try:
                for event in reader:
                    count += len(event.rows)
            finally:
                reader.close()
            return count

        tool = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")

        def mariadb_binlog() -> int:
            assert tool is not None
            subprocess.run([tool, "-v", f"--start-position={pos}", *map(str, files)], stdout=subprocess.DEVNULL,
                           check=True)  # fmt: skip
            return expected

        ours = time_runs("ours (binlog files)", args.runs, ours_files, expected)
        ours_net = time_runs("ours (replication stream)", args.runs, ours_stream, expected)
        if args.ours_only:
            return
        peer = time_runs("python-mysql-replication (stream)", max(1, min(args.runs, 3)), theirs, expected)
        native = time_runs("mariadb-binlog -v (files)", args.runs, mariadb_binlog, expected) if tool else 0.0
        print()
        print(f"  ours (files)  / python-mysql-replication: {ours / peer:6.1f}x")
        print(f"  ours (stream) / python-mysql-replication: {ours_net / peer:6.1f}x")
        if native:
            print(f"  ours (files)  / mariadb-binlog -v:        {ours / native:6.2f}x")
            print(f"  ours (stream) / mariadb-binlog -v:        {ours_net / native:6.2f}x")
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
