"""Relay server benchmark, on loopback (run by hand: ``.venv/bin/python bench/serve.py [--store sqlite]``).

Measures, against ``manage.py runrelay`` in its own process and a fresh store:

1. legacy POLL round trips per second, one client, against a reference measured in the same run: a blocking
   plain-socket server in its own process that answers each 32-byte request with a frame of the POLL reply's size,
   driven by the same client loop (target >= 0.25x the reference). Runs of the two alternate, so the machine's load
   weighs on both; the relay's CPU time per POLL (user + system, every thread of its process) is printed too;
2. events per second with FETCH batches of 500, auto-ack, one client and 50 concurrent clients (targets >= 150,000/s
   and >= 300,000/s). Each client opens its session, drains its queue and closes: the 50 clients' runs include their
   50 AUTHs and closes;
3. commit-to-client latency, p50 and p99, of a long-polling FETCH client under a steady 1,000 rows/s
   (target p99 < 20 ms). With the binlog stream available this is end to end: rows inserted on a private MariaDB,
   replicated by ``manage.py runbinlog --batch-ms 10``, measured from the source's COMMIT. Otherwise (``--synthetic``
   or no binlog stream) a writer commits queue entries the way the worker does, every 10 ms.

4. fairness: the round trip of a FETCH that finds its queue empty (so the relay reads the store for it), p50 and p99,
   alone and while another client pipelines PINGs as fast as the relay answers them (a flooder in its own process;
   the relay answers those in its event loop, without the store), and that client's own PINGs meanwhile. Runs of the
   two alternate; the ratio of the p99s says how much one client's flood delays another's request.

Each figure is a median: of 7 POLL runs (``--poll-runs``) and of 3 runs for the others (``--runs``); ``--only``
runs one measure, ``--event-loop`` picks the relay's event loop. The store is a new PostgreSQL database (the test
suite's server) or a new SQLite file, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from clientproto import (  # noqa: E402 - after the path set-up
    REPLY_HEADER_SIZE,
    REQUEST_HEADER_SIZE,
    Command,
    Result,
    decode_fetch_reply,
    encode_addfilter,
    encode_auth,
    encode_fetch,
    encode_request,
    server_key,
)

SECRET = "bench-secret"
ROW = {"id": "0", "customer": "ACME Corporation", "amount": "1234.50", "status": "paid", "note": None, "at": "x"}
TARGETS = {"poll_ratio": 0.25, "p99_ms": 20}
#: FETCH events per second, by the number of concurrent clients.
FETCH_TARGETS = {1: 150_000, 50: 300_000}


# -- store and processes ------------------------------------------------------------------------------------------


def prepare_store(kind: str, workdir: Path) -> tuple[str, Any]:
    """A fresh store URL and a function that drops it."""
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'bench.sqlite3'}", lambda: None
    import psycopg2

    from tests.helpers.postgres import postgres_url

    base = postgres_url()
    name = f"relay_bench_{os.getpid()}"
    admin = psycopg2.connect(base.replace("postgres://", "postgresql://"))
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")

    return base.rsplit("/", 1)[0] + f"/{name}", drop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )


def wait_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the relay server did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.1)


# -- queue filling ------------------------------------------------------------------------------------------------


#: Changes a filled queue holds per run: as the worker stores a broad subscription's 100-row transactions.
FILL_BATCH = 100


def fill(client_ids: list[int], count: int) -> None:
    """Appends ``count`` changes to every listed client's queue, stored once and shared, as the worker stores them."""
    from django.db import OperationalError

    for attempt in range(20):
        try:
            return _fill(client_ids, count)
        except OperationalError:  # SQLite: the relay's write-behind took the write lock under this transaction
            if attempt == 19:
                raise
            time.sleep(0.1)


def _fill(client_ids: list[int], count: int) -> None:
    from django.db import transaction

    from relay.models import Change, QueueEntry, QueueState
    from relay.store import rowcodec
    from relay.worker import bulk
    from relay.worker.ingest import insert_change_rows

    names = list(ROW)
    with transaction.atomic():
        first = bulk.allocate_ids(Change._meta.db_table, count)
        rows = []
        for i in range(count):
            values = [str(i) if name == "id" else ROW[name] for name in names]
            data = rowcodec.encode(names, None, values)
            rows.append((first + i, "shop", "orders", 1, "mysql-bin.000001", 1000 + i, 0, 1_700_000_000, "", data))
        insert_change_rows(rows)
        for client_id in client_ids:
            state, _ = QueueState.objects.get_or_create(client_id=client_id)
            # The worker writes a client's entries of one batch as one run (QueueEntry): a run per FILL_BATCH.
            runs = [
                (client_id, state.last_seq + 1 + at, min(FILL_BATCH, count - at), first + at)
                for at in range(0, count, FILL_BATCH)
            ]
            bulk.insert_rows(QueueEntry._meta.db_table, ("client_id", "seq", "count", "change_id"), runs)
            QueueState.objects.filter(client_id=client_id).update(last_seq=state.last_seq + count)


# -- a minimal client ---------------------------------------------------------------------------------------------


class Client:
    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = self.token = 0
        result, payload = self.request(Command.AUTH, encode_auth(server_key(SECRET), name))
        assert result == Result.OK, result
        _, self.token, self.client_id = struct.unpack("<QII", payload)

    def _recv(self, size: int) -> bytes:
        buf = bytearray()
        while len(buf) < size:
            chunk = self.sock.recv(size - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def request(self, command: int, payload: bytes = b"") -> tuple[int, bytes]:
        self.sock.sendall(encode_request(command, payload, client_id=self.client_id, token=self.token))
        head = self._recv(REPLY_HEADER_SIZE)
        size = struct.unpack_from("<I", head, 1)[0]
        return head[0], self._recv(size) if size else b""


async def fetch_client(port: int, name: str, expected: int) -> int:
    """Drains a queue with FETCH batches of 500 (auto-ack) on its own session; returns the events received."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer.write(encode_request(Command.AUTH, encode_auth(server_key(SECRET), name)))
    head = await reader.readexactly(REPLY_HEADER_SIZE)
    _, token, client_id = struct.unpack("<QII", await reader.readexactly(16))
    assert head[0] == Result.OK
    frame = encode_request(Command.FETCH, encode_fetch(500, 0), client_id=client_id, token=token)
    received = 0
    while received < expected:
        writer.write(frame)
        head = await reader.readexactly(REPLY_HEADER_SIZE)
        size = struct.unpack_from("<I", head, 1)[0]
        body = await reader.readexactly(size) if size else b""
        if head[0] != Result.OK:
            break
        received += struct.unpack_from("<I", body)[0]
    writer.close()
    return received


# -- the measures -------------------------------------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reference_server(reply: bytes) -> None:
    """The reference (``--reference-server``): blocking, one connection, the same reply to every 32-byte request.
    Prints its port, then serves the first connection until it closes."""
    request_size = REQUEST_HEADER_SIZE  # a POLL request is its header alone
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(listener.getsockname()[1], flush=True)
        conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while True:
            buf = b""
            while len(buf) < request_size:
                chunk = conn.recv(request_size - len(buf))
                if not chunk:
                    return
                buf += chunk
            conn.sendall(reply)


def start_reference(reply: bytes) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen([sys.executable, __file__, "--reference-server", reply.hex()], stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise SystemExit("the reference server did not start")
    return process, int(line)


def poll_loop(client: Client, count: int) -> float:
    """Round trips per second of ``count`` POLLs (or requests to the reference) answered with an event."""
    request = client.request
    started = time.perf_counter()
    for _ in range(count):
        result, _ = request(Command.POLL)
        assert result == Result.OK, result
    return count / (time.perf_counter() - started)


def pin(pid: int, cpus: set[int]) -> None:
    """Sets the CPUs of every thread of a process (a thread started later inherits its starter's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def bench_poll(
    port: int, relay_pid: int, runs: int, per_run: int, cpu: int | None
) -> tuple[list[float], list[float], list[float]]:
    """(relay POLLs/s, reference round trips/s, relay CPU microseconds per POLL) per run, the two alternating.

    With ``cpu``, the client and each server (every thread of the relay) run on that one CPU: where the scheduler
    puts a client and its server changes a round trip here several times over (on this 2-core VM a blocking echo
    makes 55-65 k round trips/s on one CPU, 12-18 k across two), so unpinned runs of either side fall in one mode or
    the other by chance. The relay's threads stay on the one CPU too: a hand-over between CPUs costs more here than
    the work it would move off the event loop's CPU (measured: more CPU per POLL, no more POLLs).
    """
    from relay.models import Client as ClientRow

    client = Client(port, "bench-poll")
    fill([client.client_id], per_run * runs + 1)
    assert ClientRow.objects.filter(id=client.client_id).exists()
    # The reference answers with a frame of the size of a real POLL reply of these rows.
    client.sock.sendall(encode_request(Command.POLL, client_id=client.client_id, token=client.token))
    head = client._recv(REPLY_HEADER_SIZE)
    reply = head + client._recv(struct.unpack_from("<I", head, 1)[0])
    reference, reference_port = start_reference(reply)
    unpinned = {"client": os.sched_getaffinity(0), "relay": os.sched_getaffinity(relay_pid)}
    try:
        if cpu is not None:
            pin(os.getpid(), {cpu})
            pin(reference.pid, {cpu})
        echo = Client.__new__(Client)
        echo.sock = socket.create_connection(("127.0.0.1", reference_port))
        echo.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        echo.client_id, echo.token = client.client_id, client.token
        rates, references, cpu_used = [], [], []
        for _ in range(runs):
            references.append(poll_loop(echo, per_run))
            if cpu is not None:
                pin(relay_pid, {cpu})
            before = process_cpu(relay_pid)
            rates.append(poll_loop(client, per_run))
            cpu_used.append((process_cpu(relay_pid) - before) / per_run * 1e6)
        echo.sock.close()
    finally:
        reference.terminate()
        reference.wait(10)
        pin(os.getpid(), unpinned["client"])
        pin(relay_pid, unpinned["relay"])
    return rates, references, cpu_used


def bench_fetch(port: int, clients: int, runs: int, per_client: int) -> list[float]:
    sessions = [Client(port, f"bench-fetch-{clients}-{i}") for i in range(clients)]
    rates = []
    for _ in range(runs):
        fill([s.client_id for s in sessions], per_client)

        async def drain() -> int:
            counts = await asyncio.gather(
                *(fetch_client(port, f"bench-fetch-{clients}-{i}", per_client) for i in range(clients))
            )
            return sum(counts)

        started = time.perf_counter()
        total = asyncio.run(drain())
        rates.append(total / (time.perf_counter() - started))
        assert total == clients * per_client, total
    return rates


def latency_consumer(port: int, name: str, stop: threading.Event, got: dict[int, float], add_filter: bool) -> Client:
    client = Client(port, name)
    if add_filter:
        result, _ = client.request(Command.ADDFILTER, encode_addfilter(1, "bench", "events"))
        assert result == Result.OK

    def run() -> None:
        while not stop.is_set():
            result, payload = client.request(Command.FETCH, encode_fetch(1000, 1000))
            now = time.monotonic()
            if result == Result.OK:
                for event in decode_fetch_reply(payload).events:
                    got[int(event.after()["id"])] = now

    threading.Thread(target=run, daemon=True).start()
    return client


def pace(rate_rows: int, seconds: float, commit: Any) -> dict[int, float]:
    """Commits 1/100 of the rate every 10 ms; returns each row's commit time (monotonic)."""
    committed: dict[int, float] = {}
    per_tick = max(1, rate_rows // 100)
    next_id = 1
    tick = time.monotonic()
    end = tick + seconds
    while tick < end:
        ids = list(range(next_id, next_id + per_tick))
        next_id += per_tick
        commit(ids)
        now = time.monotonic()
        for i in ids:
            committed[i] = now
        tick += 0.01
        time.sleep(max(0.0, tick - time.monotonic()))
    return committed


def event_inserter(conn: Any) -> Any:
    """``commit(ids)`` for ``pace``: one source transaction inserting rows ``ids`` into ``bench.events``."""

    def commit(ids: list[int]) -> None:
        with conn.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.executemany("INSERT INTO events VALUES (%s, 'payload')", [(i,) for i in ids])
            cursor.execute("COMMIT")

    return commit


def percentiles(committed: dict[int, float], got: dict[int, float]) -> tuple[float, float, int]:
    delays = sorted((got[i] - committed[i]) * 1000 for i in committed if i in got)
    if not delays:
        return float("nan"), float("nan"), len(committed)
    return statistics.median(delays), delays[int(len(delays) * 0.99) - 1], len(committed) - len(delays)


def bench_latency_synthetic(port: int, seconds: float) -> tuple[float, float, int]:
    from django.db import connection, transaction

    from relay.models import Change, QueueEntry, QueueState
    from relay.store import rowcodec
    from relay.store.channels import QUEUE_CHANNEL
    from relay.worker import bulk
    from relay.worker.ingest import insert_change_rows

    got: dict[int, float] = {}
    stop = threading.Event()
    consumer = latency_consumer(port, "bench-latency", stop, got, add_filter=False)
    client_id = consumer.client_id
    names = list(ROW)

    def commit(ids: list[int]) -> None:
        with transaction.atomic():
            state = QueueState.objects.select_for_update().get(client_id=client_id)
            first = bulk.allocate_ids(Change._meta.db_table, len(ids))
            rows = [
                (
                    first + k,
                    "bench",
                    "events",
                    1,
                    "f",
                    i,
                    0,
                    0,
                    "",
                    rowcodec.encode(names, None, [str(i) if n == "id" else ROW[n] for n in names]),
                )
                for k, i in enumerate(ids)
            ]
            insert_change_rows(rows)
            entries = [(client_id, state.last_seq + 1 + k, first + k) for k in range(len(ids))]
            bulk.insert_rows(QueueEntry._meta.db_table, ("client_id", "seq", "change_id"), entries)
            QueueState.objects.filter(client_id=client_id).update(last_seq=state.last_seq + len(ids))
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, '')", [QUEUE_CHANNEL])

    from relay.models import QueueState as QS

    QS.objects.get_or_create(client_id=client_id)
    committed = pace(1000, seconds, commit)
    time.sleep(1.5)
    stop.set()
    return percentiles(committed, got)


def bench_latency_binlog(port: int, env: dict[str, str], workdir: Path, seconds: float) -> tuple[float, float, int]:
    from devtools.sandbox import MariaDB

    source = MariaDB(workdir / "mariadb", row_metadata_full=True).start()
    worker = None
    try:
        source.execute("CREATE DATABASE bench", "CREATE TABLE bench.events (id INT PRIMARY KEY, v VARCHAR(40))")
        file, pos = source.binlog_position()
        worker_env = dict(env, **source.source_env())
        got: dict[int, float] = {}
        stop = threading.Event()
        latency_consumer(port, "bench-latency-binlog", stop, got, add_filter=True)
        worker = start(worker_env, workdir / "worker.log", "runbinlog", "--batch-ms", "10", "--from", f"{file}:{pos}")
        time.sleep(3)  # the worker connects and loads its filters
        committed = pace(1000, seconds, event_inserter(source.connect("bench")))
        time.sleep(2)
        stop.set()
        return percentiles(committed, got)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        source.destroy()


def measure_poll(port: int, relay_pid: int, runs: int, per_run: int, pin_cpu: int) -> list[tuple[str, str, str]]:
    load = os.getloadavg()[0]
    poll, reference, cpu = bench_poll(port, relay_pid, runs, per_run, pin_cpu if pin_cpu >= 0 else None)
    ratio = statistics.median(poll) / statistics.median(reference)
    results = [
        ("POLL round trips/s, 1 client", f"{statistics.median(poll):,.0f}", ""),
        ("reference round trips/s (blocking socket server)", f"{statistics.median(reference):,.0f}", ""),
        ("POLL / reference", f"{ratio:.3f}x", f">= {TARGETS['poll_ratio']}x"),
        ("relay CPU per POLL, microseconds", f"{statistics.median(cpu):.1f}", ""),
    ]
    for line in results:
        print(line, flush=True)
    print(
        f"  runs: POLL {', '.join(f'{r:,.0f}' for r in poll)};"
        f" reference {', '.join(f'{r:,.0f}' for r in reference)};"
        f" CPU/POLL {', '.join(f'{c:.1f}' for c in cpu)} us; load {load:.2f} -> {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return results


def bench_latency(
    port: int, env: dict[str, str], workdir: Path, synthetic: bool, seconds: float
) -> list[tuple[str, str, str]]:
    try:
        from binlog import BinlogStream  # noqa: F401

        binlog_ready = True
    except ImportError:
        binlog_ready = False
    # The throughput runs leave a few hundred thousand consumed entries: the worker's garbage collector would
    # spend the latency run deleting them (measured: p50 ~30 -> ~130 ms, p99 ~70 -> ~430 ms). That backlog is
    # not a steady 1,000 rows/s, so it is collected first (bench/latency.py --backlog measures it).
    from relay import store

    started = time.perf_counter()
    entries, changes = store.collect_garbage()
    print(
        f"collected the throughput runs' backlog first: {entries:,} entries, {changes:,} changes"
        f" in {time.perf_counter() - started:.1f}s",
        flush=True,
    )
    if synthetic or not binlog_ready:
        how = "synthetic commits (worker-like, every 10 ms)"
        p50, p99, lost = bench_latency_synthetic(port, seconds)
    else:
        how = "MariaDB -> runbinlog --batch-ms 10 -> runrelay"
        p50, p99, lost = bench_latency_binlog(port, env, workdir, seconds)
    return [
        (f"commit-to-client p50 ms, 1,000 rows/s, {how}", f"{p50:.1f}", ""),
        (f"commit-to-client p99 ms ({lost} rows not received)", f"{p99:.1f}", f"< {TARGETS['p99_ms']}"),
    ]


def flooder(port: int) -> None:
    """The flooding client (``--flood``): a session that pipelines PINGs, 256 at a time, and reads every reply, until
    its stdin closes. Prints a line once its session is open."""
    client = Client(port, "bench-flood")
    batch = encode_request(Command.PING, client_id=client.client_id, token=client.token) * 256
    client.request(Command.PING)  # the session's first PING reads the store: the flood itself never does
    done = threading.Event()

    def send() -> None:
        with contextlib.suppress(OSError):
            while not done.is_set():
                client.sock.sendall(batch)

    threading.Thread(target=send, daemon=True).start()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("flooding", flush=True)
    with contextlib.suppress(OSError):
        while not done.is_set():
            if not client.sock.recv(1 << 16):
                break


def victim_round_trips(client: Client, count: int, command: int = Command.FETCH) -> list[float]:
    """Milliseconds of each of ``count`` FETCHes that find the queue empty (each read from the store), or PINGs."""
    frame = encode_fetch(100, 0) if command == Command.FETCH else b""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        result, _ = client.request(command, frame)
        times.append((time.perf_counter() - started) * 1000)
        assert result in (Result.OK, Result.EMPTY), result
    return times


def measure_fairness(port: int, runs: int, per_run: int = 300) -> list[tuple[str, str, str]]:
    load = os.getloadavg()[0]
    victim = Client(port, "bench-victim")
    alone: list[float] = []
    flooded: list[float] = []
    pings: list[float] = []
    for _ in range(runs):
        alone += victim_round_trips(victim, per_run)
        flood = subprocess.Popen(
            [sys.executable, __file__, "--flood", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert flood.stdout is not None and flood.stdout.readline() == b"flooding\n"
            time.sleep(0.2)
            flooded += victim_round_trips(victim, per_run)
            pings += victim_round_trips(victim, per_run, Command.PING)
        finally:
            assert flood.stdin is not None
            flood.stdin.close()
            flood.wait(10)
    quiet_p99, flood_p99, ping_p99 = (sorted(times)[int(len(times) * 0.99) - 1] for times in (alone, flooded, pings))
    results = [
        ("store-read FETCH round trip p50 / p99 ms, alone", f"{statistics.median(alone):.2f} / {quiet_p99:.2f}", ""),
        (
            "the same while another client pipelines PINGs",
            f"{statistics.median(flooded):.2f} / {flood_p99:.2f}",
            f"p99 {flood_p99 / quiet_p99:.1f}x alone",
        ),
    ]
    # Its PINGs are answered in the loop's turn: what the flood costs a request that needs no store.
    ping = f"{statistics.median(pings):.2f} / {ping_p99:.2f}"
    results.append(("a PING of that client meanwhile, p50 / p99 ms", ping, ""))
    for line in results:
        print(line, flush=True)
    print(f"  {runs} x {per_run} round trips each; load {load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    return results


# -- main ---------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--synthetic", action="store_true", help="latency without MariaDB and the worker")
    parser.add_argument("--latency-seconds", type=float, default=10)
    parser.add_argument(
        "--poll-runs",
        type=int,
        default=7,
        help="POLL runs, each after a run of the reference (default 7: short, alternating runs keep a burst of load"
        " from weighing on one side only)",
    )
    parser.add_argument("--polls", type=int, default=10_000, help="POLL round trips per run (default 10,000)")
    parser.add_argument(
        "--pin-cpu",
        type=int,
        default=0,
        help="the CPU that the POLL client and its server (the reference, the relay's threads) share; -1: leave"
        " them where the scheduler puts them (default 0)",
    )
    parser.add_argument(
        "--only", choices=("poll", "fetch", "latency", "fairness"), help="run one of the measures (default: all)"
    )
    parser.add_argument(
        "--event-loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the relay server's event loop (RELAY_EVENT_LOOP; default auto: uvloop when installed)",
    )
    parser.add_argument("--reference-server", metavar="REPLY_HEX", help=argparse.SUPPRESS)
    parser.add_argument("--flood", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_server:
        reference_server(bytes.fromhex(args.reference_server))
        return 0
    if args.flood:
        flooder(args.flood)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    url, drop = prepare_store(args.store, workdir)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=url,
        RELAY_DATA_DIR=str(workdir),
        RELAY_SERVER_AUTHSECRET=SECRET,
        RELAY_LOG_LEVEL="WARNING",
        RELAY_EVENT_LOOP=args.event_loop,
    )
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    log = workdir / "relay.log"
    relay = start(env, log, "runrelay", "--address", "127.0.0.1", "--port", str(port))
    results: list[tuple[str, str, str]] = []
    try:
        wait_port(port, relay, log)
        if args.only in (None, "poll"):
            results += measure_poll(port, relay.pid, args.poll_runs, args.polls, args.pin_cpu)
        for clients, per_client in ((1, 50_000), (50, 2_000)) if args.only in (None, "fetch") else ():
            rates = bench_fetch(port, clients, args.runs, per_client)
            results.append(
                (
                    f"FETCH x500 events/s, {clients} client(s)",
                    f"{statistics.median(rates):,.0f}",
                    f">= {FETCH_TARGETS[clients]:,}",
                )
            )
            print(results[-1], flush=True)
        if args.only in (None, "fairness"):
            results += measure_fairness(port, args.runs)
        if args.only in (None, "latency"):
            results += bench_latency(port, env, workdir, args.synthetic, args.latency_seconds)
    except BaseException:
        print(f"the relay's log and data are kept in {workdir}", file=sys.stderr)
        raise
    finally:
        relay.terminate()
        relay.wait(30)
        from django.db import connections

        connections.close_all()
        drop()
    shutil.rmtree(workdir, ignore_errors=True)  # a run that went well leaves nothing behind
    print(
        f"\nrelay server benchmark ({args.store} store, {args.event_loop} event loop, medians of {args.poll_runs} POLL"
        f" and {args.runs} FETCH runs, loopback)"
    )
    width = max(len(name) for name, _, _ in results)
    for name, value, target in results:
        print(f"  {name:<{width}}  {value:>10}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
