"""``python -m binlog dump|tail|check`` run as a user would run them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from binlog import NOT_PRESENT, RowChange, read_binlog_files
from binlog.cli import change_as_json, change_as_text
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


# The line formats as first written, value by value: the fast renderers in binlog.cli must give the same bytes.
def _reference_text_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def reference_text(change: RowChange) -> str:
    parts = [f"{change.file}:{change.pos}#{change.row}", change.gtid or "-", change.kind_name,
             f"{change.schema}.{change.table}"]  # fmt: skip
    for label, image in (("before", change.before), ("after", change.after)):
        if image is not None:
            values = ", ".join(
                f"{name}={_reference_text_value(v)}"
                for name, v in zip(change.columns, image, strict=True)
                if v is not NOT_PRESENT
            )
            parts.append(f"{label}: {values}")
    return " ".join(parts)


def _reference_image(change: RowChange, image: Any) -> dict[str, Any] | None:
    if image is None:
        return None
    return {
        name: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v
        for name, v in zip(change.columns, image, strict=True)
        if v is not NOT_PRESENT
    }


def reference_json(change: RowChange) -> str:
    return json.dumps(
        {
            "file": change.file,
            "pos": change.pos,
            "row": change.row,
            "timestamp": change.timestamp,
            "gtid": change.gtid,
            "schema": change.schema,
            "table": change.table,
            "type": change.kind_name,
            "before": _reference_image(change, change.before),
            "after": _reference_image(change, change.after),
        },
        ensure_ascii=False,
    )


# Strings the repr escapes or quotes differently, and ones it shows as they are.
ODD_TEXTS = ["it's", 'say "hi"', "both ' and \"", "back\\slash", "tab\there", "new\nline", "bell\x07", "del\x7f",
             "nbsp\xa0", "soft\xadhyphen", "é à ü", "ÿ", "\u0100 Ā", "emoji 😀", "zero\u200bwidth", "%s %r %%", "",
             " "]  # fmt: skip

VARIED = """CREATE TABLE `{schema}`.v (
    id INT PRIMARY KEY, `odd%name` TINYINT, `it's` TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
    bi BIGINT UNSIGNED, d DECIMAL(20,6), f FLOAT, db DOUBLE, bt BIT(12), y YEAR, dt DATE, tm TIME, tm3 TIME(3),
    dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL, c CHAR(20), v VARCHAR(40),
    l1 VARCHAR(40) CHARACTER SET latin1, bn BINARY(4), vb VARBINARY(10), tb TINYBLOB, bl BLOB, tx TEXT,
    lt LONGTEXT, e ENUM('a','b''q','c'), s SET('x','y','z'), j JSON, g POINT NULL
)"""


def _varied_workload(server: MariaDB) -> tuple[str, tuple[str, int]]:
    schema = new_schema(server)
    server.execute(VARIED.format(schema=schema))
    start = server.binlog_position()
    rows = []
    for n, text in enumerate(ODD_TEXTS, start=1):
        quoted = "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
        latin = quoted if all(ord(ch) < 256 for ch in text) else "'plain'"
        rows.append(
            f"({n}, {n - 60}, {n * 7}, -{n * 300}, {n * 1000}, {-(n**7)}, {2**64 - n}, {n}.{n:06d}, {n / 3}, {n / 7}, "
            f"b'{n:012b}', {1990 + n}, '2024-0{n % 9 + 1}-1{n % 10}', '-{n}:0{n % 10}:59', '{n}:00:01.{n:03d}', "
            f"'2001-02-03 04:05:0{n % 10}', '2001-02-03 04:05:06.{n:06d}', FROM_UNIXTIME({1_700_000_000 + n}), "
            f"FROM_UNIXTIME({1_700_000_000 + n}.5), {quoted}, {quoted}, {latin}, x'{n:08x}', x'00{n:02x}ff', "
            f"x'{n:02x}', {quoted}, {quoted}, {quoted}, {n % 3 + 1}, {n % 8}, JSON_OBJECT('k', {quoted}, 'n', {n}), "
            f"POINT({n}, -{n}))"
        )
    rows.append("(100" + ", NULL" * 31 + ")")
    rows.append("(101, 1" + ", NULL" * 17 + ", 'x', NULL, NULL, x'00000000'" + ", NULL" * 9 + ")")
    server.execute(
        f"INSERT INTO `{schema}`.v VALUES {', '.join(rows)}",
        f"UPDATE `{schema}`.v SET v = CONCAT(v, '!'), i = NULL WHERE id <= 5",
        f"UPDATE `{schema}`.v SET bl = NULL, tx = 'set' WHERE id IN (6, 100)",
        "SET SESSION binlog_row_image = MINIMAL",
        f"UPDATE `{schema}`.v SET si = si + 1 WHERE id <= 8",
        f"DELETE FROM `{schema}`.v WHERE id IN (9, 100)",
        "SET SESSION binlog_row_image = NOBLOB",
        f"UPDATE `{schema}`.v SET c = 'nb' WHERE id >= 10",
        f"DELETE FROM `{schema}`.v WHERE id = 11",
        "SET SESSION binlog_row_image = FULL",
        f"DELETE FROM `{schema}`.v WHERE id >= 12",
    )
    server.execute("FLUSH BINARY LOGS")
    return schema, start


def test_dump_output_is_the_value_by_value_format(mariadb: MariaDB) -> None:
    schema, start = _varied_workload(mariadb)
    files = [str(f) for f in mariadb.binlog_files() if f.name >= start[0]][:-1]
    changes = [c for t in read_binlog_files(files, start=start[1]) for c in t.changes]
    mine = [c for c in changes if c.schema == schema]
    images = [image for c in mine for image in (c.before, c.after) if image is not None]
    assert len(mine) > 50
    assert any(NOT_PRESENT in image for image in images) and any(None in image for image in images)
    assert {type(v) for image in images for v in image} == {str, bytes, type(None), type(NOT_PRESENT)}
    assert [change_as_text(c) for c in changes] == [reference_text(c) for c in changes]
    assert [change_as_json(c) for c in changes] == [reference_json(c) for c in changes]
    for flags, reference in (([], reference_text), (["--json"], reference_json)):
        result = subprocess.run(
            [sys.executable, "-m", "binlog", "dump", *flags, "--start-position", str(start[1]), *files],
            cwd=ROOT, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout == "".join(reference(c) + "\n" for c in changes).encode()


def _change(columns: tuple[str, ...], before: Any, after: Any, kind: int = 2, schema: str = "s") -> RowChange:
    return RowChange(schema, "t%", kind, columns, before, after, "f.000001", 4, 0, 0, "", None)  # type: ignore[arg-type]


def test_text_and_json_of_shapes_that_change_row_by_row() -> None:
    columns = ("a", "b%", "c'", "d")
    values: list[Any] = [None, NOT_PRESENT, b"", b"\x00\xff", "\ud800", *ODD_TEXTS, *(chr(c) for c in range(0x300))]
    images = [tuple(values[(i * k) % len(values)] for k in (1, 3, 5, 7)) for i in range(len(values) * 2)]
    changes = [_change(columns, before, after) for before, after in zip(images, reversed(images), strict=True)]
    changes += [_change(columns, None, image, kind=1) for image in images]
    changes += [_change(("x",), None, (v,), kind=1) for v in values] + [_change((), (), None, kind=4)]
    changes += [_change(("x",), None, ("v",), kind=1, schema=schema) for schema in ('q"uote', "back\\slash", "é\n")]
    for change in changes:
        assert change_as_text(change) == reference_text(change)
        assert change_as_json(change) == reference_json(change)
