"""``python -m binlog dump|tail|check`` run as a user would run them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.mariadb import MariaDB, new_schema

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "binlog", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def connection_args(server: MariaDB, user: str | None = None, password: str | None = None) -> list[str]:
    settings = server.replication_settings()
    return [
        "--host",
        settings["host"],
        "--port",
        str(settings["port"]),
        "--user",
        user or settings["user"],
        "--password",
        settings["password"] if password is None else password,
    ]


def _workload(server: MariaDB) -> tuple[str, tuple[str, int]]:
    schema = new_schema(server)
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(10), b VARBINARY(4))")
    start = server.binlog_position()
    server.execute(
        f"INSERT INTO `{schema}`.t VALUES (1, 'é', x'00ff'), (2, NULL, NULL)",
        f"UPDATE `{schema}`.t SET v = 'x' WHERE id = 2",
        f"DELETE FROM `{schema}`.t WHERE id = 1",
    )
    server.execute("FLUSH BINARY LOGS")
    return schema, start


def test_dump_json(mariadb: MariaDB) -> None:
    schema, start = _workload(mariadb)
    files = [str(f) for f in mariadb.binlog_files() if f.name >= start[0]]
    result = run("dump", "--json", "--start-position", str(start[1]), *files)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    mine = [x for x in lines if x["schema"] == schema]
    assert [x["type"] for x in mine] == ["insert", "insert", "update", "delete"]
    first = mine[0]
    assert first["after"] == {"id": "1", "v": "é", "b": base64.b64encode(b"\x00\xff").decode()}
    assert first["before"] is None and first["table"] == "t" and first["row"] == 0 and mine[1]["row"] == 1
    assert mine[1]["after"] == {"id": "2", "v": None, "b": None}
    assert mine[2]["before"]["v"] is None and mine[2]["after"]["v"] == "x"
    assert first["file"] == start[0] and first["pos"] > start[1] and first["gtid"].count("-") == 2
    assert isinstance(first["timestamp"], int)


def test_dump_text_names_columns_from_the_server(mariadb_no_metadata: MariaDB) -> None:
    schema, start = _workload(mariadb_no_metadata)
    files = [str(f) for f in mariadb_no_metadata.binlog_files() if f.name >= start[0]]
    plain = run("dump", "--start-position", str(start[1]), *files)
    assert plain.returncode == 0, plain.stderr
    assert f"insert {schema}.t after: @1='1', @2='é', @3=0x00ff" in plain.stdout
    assert "using @1, @2" in plain.stderr
    named = run("dump", "--start-position", str(start[1]), *files, *connection_args(mariadb_no_metadata))
    assert f"insert {schema}.t after: id='1', v='é', b=0x00ff" in named.stdout
    assert f"delete {schema}.t before: id='1', v='é', b=0x00ff" in named.stdout


def test_tail_streams_from_a_position(mariadb: MariaDB) -> None:
    schema, start = _workload(mariadb)
    result = run(
        "tail", "--json", "--stop-at-end", "--start-file", start[0], "--start-position", str(start[1]),
        *connection_args(mariadb),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    mine = [json.loads(line) for line in result.stdout.splitlines() if f'"{schema}"' in line]
    assert [x["type"] for x in mine] == ["insert", "insert", "update", "delete"]


def test_check_passes_on_a_ready_source(mariadb: MariaDB) -> None:
    result = run("check", *connection_args(mariadb))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK: version=") and "binlog_format=ROW" in result.stdout


def test_check_names_each_missing_item(mariadb_no_metadata: MariaDB) -> None:
    server = mariadb_no_metadata
    server.execute(
        "CREATE USER IF NOT EXISTS 'weak'@'%' IDENTIFIED BY 'weak'",
        "SET GLOBAL binlog_format = 'STATEMENT'",
        "SET GLOBAL binlog_row_image = 'MINIMAL'",
    )
    try:
        result = run("check", *connection_args(server, "weak", "weak"))
    finally:
        server.execute("SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'")
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert "binlog_format is STATEMENT: set binlog_format=ROW" in lines
    assert any(line.startswith("binlog_row_image is MINIMAL: set binlog_row_image=FULL") for line in lines)
    assert any(line.startswith("binlog_row_metadata is NO_LOG: set binlog_row_metadata=FULL") for line in lines)
    assert any(line.startswith("privilege: REPLICATION CLIENT") for line in lines)
    assert any(line.startswith("privilege: REPLICATION SLAVE is missing") for line in lines)


def test_check_reports_an_unreachable_source(mariadb: MariaDB) -> None:
    result = run("check", *connection_args(mariadb, "nobody", "wrong"))
    assert result.returncode == 1
    assert result.stdout.startswith("connection: cannot connect")
