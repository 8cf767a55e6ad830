"""The store's disk fills while the worker writes: nothing already stored is lost, the worker says why and waits,
and once there is room again every row arrives, once.

A SQLite store on a tmpfs of a few megabytes, with the real worker and relay processes. SQLite fails the batch's
transaction with "database or disk is full" and rolls it back; the worker retries from its checkpoint with backoff.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from tests.helpers.processes import REPO, relay_env, start_relay
from tests.helpers.scratch import small_disk as scratch_disk
from tests.helpers.worker import fetch_events, filtered_client, start_worker

STORE_MEGABYTES = 6
ROWS = 3_000
VALUE = "x" * 2_000  # 3,000 rows of 2 kB: about 6 MB as changes alone, more than the disk holds


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with scratch_disk(tmp_path, STORE_MEGABYTES) as mount:
        yield mount


def grow(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=200m", str(mount)], check=True)


def test_a_full_store_disk_loses_nothing_and_every_row_arrives_once_after(
    fresh_schema: tuple[MariaDB, str], small_disk: Path
) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v TEXT)")
    store = {"DATABASE_URL": f"sqlite:///{small_disk}/relay.sqlite3", "RELAY_DATA_DIR": str(small_disk / "data")}
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=REPO,
        env=relay_env(server, **store),
        capture_output=True,
        text=True,
    )
    assert migrated.returncode == 0, migrated.stderr
    relay, port = start_relay(server, **store)
    client = filtered_client(port, "full", "I", schema, "t", max_retries=3, timeout=10)
    worker = start_worker(server, server.binlog_position(), **store)

    for first in range(0, ROWS, 50):
        server.executemany(f"INSERT INTO `{schema}`.t VALUES (%s, %s)", [(n, VALUE) for n in range(first, first + 50)])
    wait_for(lambda: "database or disk is full" in worker.output, timeout=60, message="the worker's store error")
    # The worker waits for room rather than exiting, and says why; the relay still answers.
    wait_for(lambda: worker.output.count("database or disk is full") >= 3, timeout=30, message="retries")
    assert worker.alive(), worker.output[-3000:]
    assert "Traceback" not in worker.output, worker.output[-3000:]
    store_errors = [line for line in worker.output.splitlines() if "database or disk is full" in line]
    assert all("WARNING" in line and "nothing is lost" in line and "retrying" in line for line in store_errors), (
        store_errors
    )
    assert relay.alive(), relay.output[-3000:]

    grow(small_disk)
    events = fetch_events(client, worker, ROWS, timeout=120, manual_ack=True)
    ids = [int(event.columns[0].after) for event in events]
    assert sorted(ids) == list(range(ROWS)), f"{len(ids)} events, {len(set(ids))} distinct"
    assert [event.columns[1].after for event in events[:1]] == [VALUE.encode()]
