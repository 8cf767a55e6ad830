"""The change log's disk fills, its files go bad: real worker processes, a tmpfs of a few megabytes (needs root to
mount; the tests skip when mount is not permitted)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client as HttpClient

from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay.web.metrics import render_metrics
from tests.helpers.scratch import small_disk as scratch_disk
from tests.helpers.worker import caught_up, queue_of, start_worker, subscribe

pytestmark = pytest.mark.django_db(transaction=True)

DISK_MEGABYTES = 4
VALUE = "x" * 300  # about 480 bytes a JSON line


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with scratch_disk(tmp_path, DISK_MEGABYTES) as mount:
        yield mount


def fill(mount: Path, leave: int) -> Path:
    """A file that takes all but ``leave`` bytes of the disk."""
    stat = os.statvfs(mount)
    filler = mount / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


def logged_lines(logs: Path) -> list[str]:
    return [line for path in sorted(logs.glob("*.jsonl")) for line in path.read_text(errors="replace").splitlines()]


def source_ids(server: MariaDB, schema: str) -> list[str]:
    return [str(row[0]) for row in server.query(f"SELECT id FROM `{schema}`.t ORDER BY id")]


def insert(server: MariaDB, schema: str, first: int, count: int) -> None:
    server.executemany(f"INSERT INTO `{schema}`.t VALUES (%s, %s)", [(n, VALUE) for n in range(first, first + count)])


def whole_lines(logs: Path) -> tuple[list[str], list[str]]:
    """The ids of the log's lines, and its lines that are not whole JSON objects."""
    ids, broken = [], []
    for line in logged_lines(logs):
        try:
            ids.append(json.loads(line)["after"]["id"])
        except ValueError:
            broken.append(line[:80] + " ... " + line[-40:])
    return ids, broken


def logger_env(logs: Path, schema: str) -> dict[str, object]:
    return {"RELAY_LOGGER_PATH": logs, "RELAY_LOGGER_SCHEMA": schema, "RELAY_LOGGER_FORMAT": "json"}


def test_a_change_log_disk_that_fills_while_a_batch_goes_in_leaves_every_line_whole(
    fresh_schema: tuple[MariaDB, str], small_disk: Path
) -> None:
    """Room for the batch's spool and the marker, not for all of its lines: the append stops inside a line, the
    batch commits, and the next batch (after space is back) is glued to the cut line."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    subscribe("c", 1, schema, "t")
    logs = small_disk / "logs"
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 1)
    caught_up(server, worker)
    filler = fill(small_disk, 300_000)
    insert(server, schema, 1, 400)  # one transaction, about 190 kB of lines: the spool fits, the append does not
    caught_up(server, worker)
    filler.unlink()
    insert(server, schema, 401, 10)
    caught_up(server, worker)
    assert [key for *_, key in queue_of("c")] == source_ids(server, schema)  # the store is right
    _, broken = whole_lines(logs)
    assert broken == []
    assert worker.stop() == 0


def test_the_lines_of_batches_committed_while_its_disk_is_full_are_left_out_whole_and_counted(
    fresh_schema: tuple[MariaDB, str], small_disk: Path, viewer: HttpClient
) -> None:
    """A full disk must not stop replication: the store and the queues have every row. The lines of the batches it
    could not take are left out whole, counted in the worker's status, /metrics and the dashboard, and the lines
    after space is back go in as before."""
    from relay.models import WorkerStatus

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    subscribe("c", 1, schema, "t")
    logs = small_disk / "logs"
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 1)
    caught_up(server, worker)
    filler = fill(small_disk, 0)
    insert(server, schema, 1, 20)
    caught_up(server, worker)
    filler.unlink()
    insert(server, schema, 21, 5)
    caught_up(server, worker)
    wait_for(lambda: WorkerStatus.objects.get().change_log_lost == 20, timeout=30, message="20 lost lines counted")
    assert [key for *_, key in queue_of("c")] == source_ids(server, schema)
    ids, broken = whole_lines(logs)
    assert broken == [] and ids == ["0", *map(str, range(21, 26))]
    status = WorkerStatus.objects.get()
    assert "No space left on device" in status.last_change_log_error
    assert f'relay_change_log_lost_total{{source="{status.source}"}} 20' in render_metrics()
    overview = viewer.get("/").content.decode()
    assert "Change log lines lost" in overview and "No space left on device" in overview
    assert worker.stop() == 0


def test_a_change_log_directory_deleted_while_the_worker_runs_loses_no_line_silently(
    fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """The day's file stays open: after the folder is removed, every line of the rest of the day goes to the
    deleted file. The worker recreates the folder (for its spool and marker) but not the file, and says nothing."""
    import shutil

    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    logs = tmp_path / "logs"
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 5)
    caught_up(server, worker)
    shutil.rmtree(logs)
    insert(server, schema, 5, 5)
    caught_up(server, worker)
    ids, _ = whole_lines(logs) if logs.exists() else ([], [])
    said = [line for line in worker.output.splitlines() if "relay.worker.changelog" in line]
    assert ids == [str(n) for n in range(5, 10)] or said, f"lines {ids}, nothing in the log; folder {os.listdir(logs)}"
    assert worker.stop() == 0


@pytest.mark.parametrize(
    "marker", ["null", "{}", '{"file": "binlog.000001", "pos": 4}', '{"file": "x", "pos": 4, "sizes": null}']
)
def test_a_pending_marker_of_the_wrong_shape_does_not_stop_the_worker(
    fresh_schema: tuple[MariaDB, str], tmp_path: Path, marker: str
) -> None:
    """recover() catches OSError and ValueError only: a marker that is JSON but not the marker's object raises
    KeyError/TypeError/AttributeError out of the worker's start, every start (a crash loop with a traceback)."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / ".relaylogs-pending.json").write_text(marker)
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 3)
    caught_up(server, worker)  # raises when the worker exited
    assert "Traceback" not in worker.output, worker.output[-2000:]
    assert worker.stop() == 0


def test_taking_back_a_batch_never_pads_a_shorter_log_with_zero_bytes(
    fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """A marker of a batch that did not commit records the log's size before the batch. When the log is shorter than
    that at the next start (cut by a host crash before its data reached the disk, or by an operator), recover()
    calls os.truncate(path, size), which EXTENDS the file with NUL bytes: a run of zeros in the log, and the next
    batch's first line glued to them."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    logs = tmp_path / "logs"
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 4)
    caught_up(server, worker)
    assert worker.stop() == 0
    (log_file,) = logs.glob("*.jsonl")
    data = log_file.read_bytes()
    kept = data[: data.index(b"\n") + 1]  # the first line only: a cut at a line's end
    log_file.write_bytes(kept)
    marker = {"file": "binlog.000001", "pos": 4, "sizes": {str(log_file): len(data)}}  # not the checkpoint
    (logs / ".relaylogs-pending.json").write_text(json.dumps(marker))
    worker = start_worker(server, None, **logger_env(logs, schema))
    insert(server, schema, 4, 2)
    caught_up(server, worker)
    assert b"\0" not in log_file.read_bytes()
    ids, broken = whole_lines(logs)
    assert broken == [] and ids == ["0", "4", "5"], (ids, broken)
    assert worker.stop() == 0


def test_a_log_cut_inside_a_line_while_the_worker_was_down_does_not_swallow_the_next_line(
    fresh_schema: tuple[MariaDB, str], tmp_path: Path
) -> None:
    """The worker appends where the file ends, even inside a line: the next committed row's line is glued to the
    cut one, so a row that was written correctly is unreadable too."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(300))")
    logs = tmp_path / "logs"
    worker = start_worker(server, server.binlog_position(), **logger_env(logs, schema))
    insert(server, schema, 0, 2)
    caught_up(server, worker)
    assert worker.stop() == 0
    (log_file,) = logs.glob("*.jsonl")
    data = log_file.read_bytes()
    log_file.write_bytes(data[: len(data) - 40])  # the last line cut short
    worker = start_worker(server, None, **logger_env(logs, schema))
    insert(server, schema, 2, 1)
    caught_up(server, worker)
    ids, broken = whole_lines(logs)
    assert "2" in ids, (ids, broken)
    assert worker.stop() == 0
