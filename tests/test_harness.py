"""The harness really starts MariaDB with the binlog on, and the store is the one asked for."""

import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.helpers.mariadb import MariaDB
from tests.helpers.processes import REPO


def test_mariadb_writes_rows_to_its_binlog(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    assert server.query("SELECT @@log_bin, @@binlog_format, @@binlog_row_image") == [(1, "ROW", "FULL")]
    before_file, before_pos = server.binlog_position()
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO `{schema}`.t VALUES (1, 'x')"
    )
    events = server.query(f"SHOW BINLOG EVENTS IN '{before_file}' FROM {before_pos}")
    kinds = [row[2] for row in events]
    assert "Table_map" in kinds
    assert "Write_rows_v1" in kinds
    assert server.binlog_position()[1] > before_pos


def test_both_servers_differ_only_in_row_metadata(mariadb: MariaDB, mariadb_no_metadata: MariaDB) -> None:
    assert mariadb.query("SELECT @@binlog_row_metadata") == [("FULL",)]
    assert mariadb_no_metadata.query("SELECT @@binlog_row_metadata") == [("NO_LOG",)]
    assert mariadb.port != mariadb_no_metadata.port


def test_replication_user_can_read_the_binlog(mariadb: MariaDB) -> None:
    import pymysql

    with pymysql.connect(**mariadb.replication_settings()) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        assert cur.fetchone()[0].startswith("binlog.")


def test_store_is_the_one_asked_for(db: None) -> None:
    expected = os.environ.get("RELAY_TEST_STORE", "postgres")
    assert connection.vendor == ("postgresql" if expected == "postgres" else "sqlite")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_process_removes_its_scratch_folder_when_it_exits_but_not_a_forked_child(tmp_path: Path) -> None:
    # A run starts hundreds of processes, each with a log and a data folder: they go into one folder of the run,
    # removed at its end, so that runs on the same machine do not fill its /tmp.
    script = """
import os, sys
from tests.helpers.scratch import scratch_dir, scratch_file
folder, log = scratch_dir("data-"), scratch_file("proc-", ".log")
(folder / "x").write_text("x")
print(folder.parent, flush=True)
if os.fork() == 0:
    sys.exit(0)  # a forked child exits normally (atexit handlers run) while the parent still uses the folder
os.wait()
assert folder.exists() and log.exists(), "a forked child removed its parent's folder"
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True
    )
    assert result.returncode == 0, result.stderr.decode()
    root = Path(result.stdout.decode().strip())
    assert root.parent == tmp_path and root.name.startswith("relay-tests-")
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []
