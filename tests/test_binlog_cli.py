"""``python -m binlog dump|tail|check`` run as a user would run them."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from binlog import NOT_PRESENT, InformationSchemaProvider, RowChange, read_binlog_files
from binlog.cli import change_as_json, change_as_text
from binlog.table import ColumnInfo
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
    assert "WARNING binlog.schema: no column names for" in plain.stderr  # logging set up on its first message
    assert "using @1, @2" in plain.stderr
    named = run("dump", "--start-position", str(start[1]), *files, *connection_args(mariadb_no_metadata))
    assert f"insert {schema}.t after: id='1', v='é', b=0x00ff" in named.stdout
    assert f"delete {schema}.t before: id='1', v='é', b=0x00ff" in named.stdout


def test_dump_of_files_leaves_the_other_commands_modules_unimported(mariadb: MariaDB) -> None:
    # A dump is a short process: what it imports is a good part of its cost.
    _schema, start = _workload(mariadb)
    files = [str(f) for f in mariadb.binlog_files() if f.name >= start[0]]
    script = (
        "import sys, contextlib, io; from binlog.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(sys.argv[1:])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ("
        "'logging', 'json', 'uuid', 'threading', 'pymysql', 'binlog'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "dump", "--start-position", str(start[1]), *files],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    imported = set(result.stdout.split())
    assert "binlog.parser" in imported
    unneeded = {"logging", "json", "uuid", "threading", "pymysql", "binlog.stream", "binlog.settings"}
    unneeded |= {"binlog.schemahistory", "binlog.jsonb", "binlog.partialrows", "binlog.payload", "binlog.check"}
    assert imported & unneeded == set()


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


# -- dump's own text decoders against the generic path ---------------------------------------------------------------
# `dump` reads rows straight into their lines (binlog.cli.text_rows_decoder); the lines must be those of the row
# decoders' values through change_as_text, for every type, NULL pattern, partial image and UPDATE whose images share
# bytes or not. Random layouts and random rows (any bytes where a type takes any bytes) check it without a server.

_LATIN = "latin1"
_TEXTS = [*ODD_TEXTS, "x" * 300, "é" * 100, "customer-1", 'it\'s \\ "q"']


def _column_kinds() -> list[ColumnInfo]:
    from binlog import constants as c

    kinds = [
        ColumnInfo("", c.MYSQL_TYPE_TINY, "tinyint"),
        ColumnInfo("", c.MYSQL_TYPE_TINY, "tinyint unsigned", unsigned=True),
        ColumnInfo("", c.MYSQL_TYPE_SHORT, "smallint"),
        ColumnInfo("", c.MYSQL_TYPE_SHORT, "smallint unsigned", unsigned=True),
        ColumnInfo("", c.MYSQL_TYPE_INT24, "mediumint"),
        ColumnInfo("", c.MYSQL_TYPE_INT24, "mediumint unsigned", unsigned=True),
        ColumnInfo("", c.MYSQL_TYPE_LONG, "int"),
        ColumnInfo("", c.MYSQL_TYPE_LONG, "int unsigned", unsigned=True),
        ColumnInfo("", c.MYSQL_TYPE_LONGLONG, "bigint"),
        ColumnInfo("", c.MYSQL_TYPE_LONGLONG, "bigint unsigned", unsigned=True),
        ColumnInfo("", c.MYSQL_TYPE_FLOAT, "float", meta=4),
        ColumnInfo("", c.MYSQL_TYPE_DOUBLE, "double", meta=8),
        ColumnInfo("", c.MYSQL_TYPE_DATE, "date"),
        ColumnInfo("", c.MYSQL_TYPE_YEAR, "year"),
        ColumnInfo("", c.MYSQL_TYPE_NULL, "null"),
        ColumnInfo("", c.MYSQL_TYPE_ENUM, "enum", meta=1, enum_values=("a", "it's", "", "é")),
        ColumnInfo("", c.MYSQL_TYPE_ENUM, "enum", meta=2, enum_values=tuple(f"v{i}" for i in range(300))),
        ColumnInfo("", c.MYSQL_TYPE_ENUM, "enum", meta=1),  # no labels known
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varchar(50)", charset="utf8mb4", meta=200),
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varchar(300)", charset="utf8mb4", meta=1200),
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varchar(50)", charset=_LATIN, meta=50),
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varchar(20)", charset="ucs2", meta=40),
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varchar(50)", meta=50),  # charset unknown
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR, "varbinary(50)", charset="binary", meta=50),
        ColumnInfo("", c.MYSQL_TYPE_VARCHAR_COMPRESSED, "varchar(50) compressed", charset="utf8mb4", meta=200),
        ColumnInfo("", c.MYSQL_TYPE_STRING, "char(10)", charset="utf8mb4", meta=40),
        ColumnInfo("", c.MYSQL_TYPE_STRING, "binary(6)", charset="binary", meta=6),
        ColumnInfo("", c.MYSQL_TYPE_BLOB, "blob", charset="binary", meta=2),
        ColumnInfo("", c.MYSQL_TYPE_BLOB, "tinytext", charset="utf8mb4", meta=1),
        ColumnInfo("", c.MYSQL_TYPE_BLOB, "mediumtext", charset="cp1251", meta=3),
        ColumnInfo("", c.MYSQL_TYPE_BLOB, "longblob", meta=4),  # charset unknown
    ]
    for precision, scale in ((1, 0), (10, 2), (9, 9), (12, 4), (20, 6), (65, 30), (38, 38), (4, 1), (19, 9)):
        kinds.append(ColumnInfo("", c.MYSQL_TYPE_NEWDECIMAL, "decimal", meta=precision << 8 | scale))
    for fsp in range(7):
        kinds += [
            ColumnInfo("", c.MYSQL_TYPE_TIME2, "time", meta=fsp),
            ColumnInfo("", c.MYSQL_TYPE_DATETIME2, "datetime", meta=fsp),
            ColumnInfo("", c.MYSQL_TYPE_TIMESTAMP2, "timestamp", meta=fsp),
            ColumnInfo("", c.MYSQL_TYPE_TIMESTAMP, "timestamp", meta=fsp),  # MariaDB's old and hires layouts
            ColumnInfo("", c.MYSQL_TYPE_DATETIME, "datetime", meta=fsp),
            ColumnInfo("", c.MYSQL_TYPE_TIME, "time", meta=fsp),
        ]
    for size in (1, 2, 3, 4, 8):
        kinds.append(ColumnInfo("", c.MYSQL_TYPE_SET, "set", meta=size, set_values=("x", "y'", "z")[: size + 1]))
    for bits in (1, 7, 8, 9, 16, 17, 24, 31, 32, 33, 63, 64):
        kinds.append(ColumnInfo("", c.MYSQL_TYPE_BIT, f"bit({bits})", meta=(bits % 8) << 8 | bits // 8))
    return kinds


def _decimal_bytes(precision: int, scale: int, rng: random.Random) -> bytes:
    """A DECIMAL as MySQL stores it: groups of 9 digits in 4 bytes (fewer in fewer), big-endian, the first bit set
    for a positive value, every bit inverted for a negative one."""
    from binlog.values import DIG2BYTES

    whole, fraction = divmod(precision - scale, 9), divmod(scale, 9)
    groups = [whole[1]] * bool(whole[1]) + [9] * whole[0] + [9] * fraction[0] + [fraction[1]] * bool(fraction[1])
    data = bytearray(b"".join(rng.randrange(10**digits).to_bytes(DIG2BYTES[digits], "big") for digits in groups))
    if rng.random() < 0.5:
        data = bytearray(byte ^ 0xFF for byte in data)
    if data:
        data[0] ^= 0x80
    return bytes(data)


def _value_bytes(column: ColumnInfo, rng: random.Random) -> bytes:
    """A stored value of the column: any bytes of its fixed size (a valid DECIMAL, and mostly valid DATETIME2
    fractions, which index tables), or a length and text (valid or not) or bytes."""
    from binlog import constants as c
    from binlog.rowdecoder import fixed_size

    size = fixed_size(column)
    if size is not None:
        if column.type_code == c.MYSQL_TYPE_NEWDECIMAL:
            return _decimal_bytes(column.meta >> 8, column.meta & 0xFF, rng)
        if column.type_code == c.MYSQL_TYPE_DATETIME2 and column.meta in (1, 2, 3) and rng.random() < 0.9:
            # A fraction of at most 3 digits in range (DATETIME2_BYTES indexes its texts by it).
            usec = rng.randrange(10**column.meta) * 10 ** (6 - column.meta)
            frac = {1: (usec // 10000).to_bytes(1, "big"), 2: (usec // 10000).to_bytes(1, "big"),
                    3: (usec // 100).to_bytes(2, "big")}[column.meta]  # fmt: skip
            ymd = (rng.randrange(10000) * 13 + rng.randrange(13)) << 5 | rng.randrange(32)
            hms = rng.randrange(24) << 12 | rng.randrange(60) << 6 | rng.randrange(60)
            return ((ymd << 17 | hms) + 0x8000000000).to_bytes(5, "big") + frac
        if column.type_code == c.MYSQL_TYPE_TIME2 and rng.random() < 0.5:  # times of day, with their holes
            return (0x800000 + rng.randrange(24 << 12)).to_bytes(3, "big") + rng.randbytes(size - 3)
        if rng.random() < 0.15:
            return bytes(size)
        return rng.randbytes(size)
    width = 1 if column.meta < 256 else 2
    if column.type_code in (c.MYSQL_TYPE_BLOB,):
        width = column.meta
    if column.type_code == c.MYSQL_TYPE_VARCHAR_COMPRESSED:
        data = b"\x00" + rng.choice(_TEXTS).encode()[:40]  # stored as it is (header 0)
    elif column.charset == "binary" or rng.random() < 0.1:
        data = rng.randbytes(rng.randrange(7))  # binary, or text that is not valid in its charset
    else:
        text = rng.choice(_TEXTS)
        codec = {"utf8mb4": "utf-8", _LATIN: "cp1252", "ucs2": "utf-16-be", "cp1251": "cp1251"}.get(
            column.charset or "", "utf-8"
        )
        data = text.encode(codec, "replace")
    limit = column.meta if column.type_code == c.MYSQL_TYPE_STRING else 255 ** min(width, 2)
    data = data[:limit]
    return len(data).to_bytes(width, "little") + data


# An image as its columns' (null bit, stored bytes), the bytes empty for a NULL. A null bit may be set on a column
# that is not nullable too: the decoders must not look at it.
_Image = list[tuple[bool, bytes]]


def _image_values(columns: tuple[ColumnInfo, ...], present: int, rng: random.Random, nulls: float) -> _Image:
    image = []
    for index in (i for i in range(len(columns)) if present >> i & 1):
        null = rng.random() < nulls
        image.append((null, b"" if null and columns[index].nullable else _value_bytes(columns[index], rng)))
    return image


def _changed(columns: tuple[ColumnInfo, ...], present: int, image: _Image, rng: random.Random) -> _Image:
    """An UPDATE's after image: the before image with a value or two changed, NULLed or no longer NULL (a changed
    value is often all zero bytes, as the bytes that follow a NULL in the before image may be)."""
    after = []
    for (null, value), index in zip(image, (i for i in range(len(columns)) if present >> i & 1), strict=True):
        column, choice = columns[index], rng.random()
        if choice < 0.15 or (choice < 0.25 and null):
            value = _value_bytes(column, rng)
            null = False
        elif choice < 0.25 and column.nullable:
            null, value = True, b""
        after.append((null, value))
    return after


def _stored(image: _Image) -> bytes:
    bitmap = sum(1 << bit for bit, (null, _value) in enumerate(image) if null)
    return bitmap.to_bytes((len(image) + 7) // 8, "little") + b"".join(value for _null, value in image)


def _generic_lines(decode: Any, *args: Any) -> tuple[list[str], int]:
    changes, end = decode(*args)
    return [change_as_text(change) for change in changes], end


def _outcome(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except (IndexError, ValueError, UnicodeError, struct.error) as exc:  # the bytes no server writes
        return type(exc)


def test_dump_text_decoders_write_the_generic_lines_for_random_layouts_and_rows() -> None:
    from binlog import constants as c
    from binlog.cli import text_rows_decoder
    from binlog.rowdecoder import build_rows_decoder
    from binlog.table import TableInfo

    rng = random.Random(18)
    kinds = _column_kinds()
    names = ["c", "c%", "it's", "{b}", "back\\slash", "é", 'q"']
    # Wide tables (a few, of the types that take any bytes without an error, so that their rows decode) make lines
    # of thousands of parts.
    any_bytes = [k for k in kinds if k.type_code not in (c.MYSQL_TYPE_NEWDECIMAL, c.MYSQL_TYPE_DATETIME2)]
    for layout in range(400):
        wide = layout % 100 == 0
        columns = tuple(
            dataclasses.replace(rng.choice(any_bytes if wide else kinds), name=rng.choice(names) + str(i),
                                nullable=rng.random() < 0.7)
            for i in range(rng.randrange(300, 600) if wide else rng.randrange(1, 12))
        )  # fmt: skip
        count = len(columns)
        info = TableInfo("s%1", "t'%", columns)
        kind = rng.choice([c.KIND_INSERT, c.KIND_UPDATE, c.KIND_DELETE])
        full = (1 << count) - 1
        present = full if rng.random() < 0.6 else rng.randrange(1 << count)
        present_after = present if rng.random() < 0.6 else rng.randrange(1 << count)
        if kind != c.KIND_UPDATE:
            present_after = 0
        nulls = rng.choice([0.0, 0.1, 0.5])
        rows = b""
        for _ in range(rng.randrange(1, 6)):
            before = _image_values(columns, present, rng, nulls)
            rows += _stored(before)
            if kind == c.KIND_UPDATE:
                if present_after == present:
                    rows += _stored(_changed(columns, present, before, rng))
                else:
                    rows += _stored(_image_values(columns, present_after, rng, nulls))
        args = (rows, 0, len(rows), "s%1", "t'%", info.names, "binlog.%06", 1234, 99, rng.choice(["", "0-1-%d"]),
                info, rng.randrange(3))  # fmt: skip
        expected = _outcome(_generic_lines, build_rows_decoder(columns, kind, present, present_after), *args)
        got = _outcome(text_rows_decoder(info, kind, present, present_after), *args)
        assert got == expected, f"layout {layout}: {[(col.name, col.type_name) for col in columns]}"


def test_dump_text_of_an_update_whose_after_bytes_match_where_a_null_shortened_the_before_image() -> None:
    # Before: f NULL, d 0.0, n 0 (12 zero bytes after the null bitmap); after: f 0.0, d 0.0, n 0. The after image's
    # 16 zero bytes equal the 16 bytes from where the before image's block began (its 12, the after image's null
    # bitmap and three zero bytes): only the NULL tells them apart.
    from binlog import constants as c
    from binlog.cli import text_rows_decoder
    from binlog.rowdecoder import build_rows_decoder
    from binlog.table import TableInfo

    columns = (ColumnInfo("f", c.MYSQL_TYPE_FLOAT, "float", meta=4), ColumnInfo("d", c.MYSQL_TYPE_DOUBLE, "double",
               meta=8), ColumnInfo("n", c.MYSQL_TYPE_LONG, "int", nullable=False))  # fmt: skip
    info = TableInfo("s", "t", columns)
    rows = b"\x01" + bytes(12) + b"\x00" + bytes(16)
    args = (rows, 0, len(rows), "s", "t", info.names, "f.000001", 4, 0, "", info, 0)
    lines, end = text_rows_decoder(info, c.KIND_UPDATE, 0b111, 0b111)(*args)
    assert end == len(rows)
    assert lines == ["f.000001:4#0 - update s.t before: f=NULL, d='0', n='0' after: f='0', d='0', n='0'"]
    assert (lines, end) == _generic_lines(build_rows_decoder(columns, c.KIND_UPDATE, 0b111, 0b111), *args)


# Column types and layouts VARIED does not have, each table with edge values, NULLs, updates and deletes: the
# lines of `dump` must be the generic path's, on both servers (without row metadata the charsets and ENUM/SET labels
# are unknown to a dump without --host).


def _labels(prefix: str, count: int) -> str:
    return ", ".join(f"'{prefix}{i}'" for i in range(count))


_MORE_TABLES = {
    "decimals": ("d1 DECIMAL(1,0), d9 DECIMAL(9,9), d10 DECIMAL(10,10), d19 DECIMAL(19,9), d38 DECIMAL(38,38), "
                 "d65 DECIMAL(65,30), du DECIMAL(12,4) UNSIGNED, d4 DECIMAL(4,1) NOT NULL DEFAULT 0",
                 ["9, 0.999999999, 0.9999999999, 1234567890.123456789, 0.1, -12345678901234567890.5, 99999999.9999, "
                  "-999.9", "-9, -0.000000001, 0, -0.5, -0.00000000000000000000000000000000000001, 0, 0, 0",
                  "NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1.5"]),
    "labels": (f"e300 ENUM({_labels('v', 300)}), s12 SET({_labels('k', 12)}), s20 SET({_labels('m', 20)}), "
               f"s30 SET({_labels('n', 30)}), s64 SET({_labels('o', 64)}), b1 BIT(1), b9 BIT(9), b17 BIT(17), "
               "b33 BIT(33), b64 BIT(64), e ENUM('a', 'it''s', 'é')",
               ["'v299', 'k0,k11', 'm19', 'n0,n29', 'o0,o63', 1, 511, 65537, 4294967297, 18446744073709551615, "
                "'it''s'", "'v0', '', 'm0', '', 'o31,o32', 0, 0, 0, 0, 0, 'é'",
                "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"]),
    "charsets": ("u2 VARCHAR(10) CHARACTER SET ucs2, u16 VARCHAR(10) CHARACTER SET utf16, u32 CHAR(5) CHARACTER SET "
                 "utf32, cp VARCHAR(10) CHARACTER SET cp1251, l1 CHAR(5) CHARACTER SET latin1, js JSON, g GEOMETRY, "
                 "mt MEDIUMTEXT, lb LONGBLOB, bn BINARY(5)",
                 ["'ucs2 é', 'utf16 😀', 'u32', 'Привет', 'é€', '{\"a\": [1, \"x\"]}', POINT(1, 2), 'it''s', x'00ff', "
                  "x'01'", "'', '', '', '', '', '[]', NULL, REPEAT('m', 300), x'', x''",
                  "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"]),
    "clocks": (", ".join(f"t{n} TIME({n}), dt{n} DATETIME({n}), ts{n} TIMESTAMP({n}) NULL" for n in range(7)),
               [", ".join("'-838:59:59', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999'" for _ in range(7)),
                ", ".join("'12:34:56.123456', '1000-01-01 00:00:00', '1970-01-01 00:00:01'" for _ in range(7)),
                ", ".join("'-00:00:00.000001', '0000-00-00 00:00:00', NULL" for _ in range(7))]),
    "compressed": ("vc VARCHAR(2000) COMPRESSED, bl BLOB COMPRESSED, n INT",
                   ["REPEAT('abc', 600), REPEAT(x'00ff', 500), 1", "'short', x'01', NULL", "NULL, NULL, 3"]),
}  # fmt: skip


def _dump_matches_the_generic_text(server: MariaDB, schema: str, start: tuple[str, int], *host: str) -> None:
    server.execute("FLUSH BINARY LOGS")
    files = [str(f) for f in server.binlog_files() if f.name >= start[0]][:-1]
    provider = InformationSchemaProvider({**server.replication_settings(), "charset": "utf8mb4"}) if host else None
    changes = [c for t in read_binlog_files(files, schema_provider=provider, start=start[1]) for c in t.changes]
    assert any(c.schema == schema for c in changes)
    result = subprocess.run(
        [sys.executable, "-m", "binlog", "dump", "--start-position", str(start[1]), *files, *host],
        cwd=ROOT, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(reference_text(c) + "\n" for c in changes).encode()


def _write_rows(server: MariaDB, schema: str, table: str, rows: list[str]) -> None:
    server.execute(
        *(f"INSERT INTO `{schema}`.`{table}` VALUES ({i}, {row})" for i, row in enumerate(rows)),
        f"UPDATE `{schema}`.`{table}` SET id = id + 10 WHERE id < 2",
        f"DELETE FROM `{schema}`.`{table}`",
    )


def test_dump_text_of_more_types_is_the_generic_text(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    for table, (columns, _rows) in _MORE_TABLES.items():
        server.execute(f"CREATE TABLE `{schema}`.`{table}` (id INT PRIMARY KEY, {columns})")
    start = server.binlog_position()
    for table, (_columns, rows) in _MORE_TABLES.items():
        _write_rows(server, schema, table, rows)
    _dump_matches_the_generic_text(server, schema, start)
    # MariaDB's old and "hires" TIME/DATETIME/TIMESTAMP: their precision only information_schema knows.
    server.execute("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        server.execute(f"CREATE TABLE `{schema}`.old (id INT PRIMARY KEY, {_MORE_TABLES['clocks'][0]})")
    finally:
        server.execute("SET GLOBAL mysql56_temporal_format = ON")
    start = server.binlog_position()
    _write_rows(server, schema, "old", _MORE_TABLES["clocks"][1])
    for table, (_columns, rows) in _MORE_TABLES.items():
        _write_rows(server, schema, table, rows)
    _dump_matches_the_generic_text(server, schema, start, *connection_args(server))


def test_dump_text_of_mysql_payloads_and_partial_json_updates(tmp_path: Path) -> None:
    # MySQL 8 binlogs on bytes (no MySQL server here): a TRANSACTION_PAYLOAD, whose rows share the payload's position
    # and number on across its rows events, and a PARTIAL_UPDATE_ROWS event of a JSON diff.
    from binlog import constants as c
    from binlog.cli import text_lines
    from tests.helpers.binlog_events import CAPTURED, T10, FixedSchema, make_event, query_body
    from tests.helpers.jsonb import diff_entry
    from tests.helpers.mysql_payload import Binlog, mysql8_fde_body, packed, rows_v2, t10_row

    table_map = CAPTURED["mysql_table_map_t10_json_decimal"]

    def inner(event_type: int, body: bytes) -> bytes:  # inside a payload: end position 0, no checksum
        return make_event(event_type, body, log_pos=0, crc=False, timestamp=1700000100)

    events = b"".join([
        inner(c.QUERY_EVENT, query_body("BEGIN")),
        inner(c.TABLE_MAP_EVENT, table_map),
        inner(c.WRITE_ROWS_EVENT_V2, CAPTURED["mysql_rows_v2_t10_object"] + t10_row(None, 3)),
        inner(c.UPDATE_ROWS_EVENT_V2, rows_v2(table_map, 2, b"\xff\xff", t10_row({"a": 1}, 7) + t10_row([2], 8))),
        inner(c.DELETE_ROWS_EVENT_V2, rows_v2(table_map, 2, b"\xff", t10_row(None, 3))),
        inner(c.XID_EVENT, struct.pack("<Q", 77)),
    ])  # fmt: skip

    def field(kind: int, value: int) -> bytes:  # a payload header field: type, length, MySQL's packed integer
        return packed(kind) + packed(len(packed(value))) + packed(value)

    # Payload fields: compression 255 (none), the payload's size; then the end mark and the events as they are.
    payload = field(2, 255) + field(1, len(events))
    stored = Binlog("binlog.000003")
    stored.add(c.FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    stored.add(c.GTID_LOG_EVENT, CAPTURED["mysql80_gtid"])
    stored.add(c.TRANSACTION_PAYLOAD_EVENT, payload + packed(0) + events)

    # A partial update: the before document, value-options PARTIAL_JSON_UPDATES, the column's partial bit, and an
    # after image whose JSON column holds the diff.
    diff = diff_entry(0, "$.name", "new")  # REPLACE
    after = bytes([0xFC]) + struct.pack("<I", len(diff)) + diff + bytes([0x80]) + (8).to_bytes(4, "big")
    partial = Binlog("mysql-bin.000007")
    partial.add(c.FORMAT_DESCRIPTION_EVENT, mysql8_fde_body())
    partial.add(c.QUERY_EVENT, query_body("BEGIN"))
    partial.add(c.TABLE_MAP_EVENT, table_map)
    row = t10_row({"name": "old", "n": 1}, 7) + packed(1) + b"\x01" + after
    partial.add(c.PARTIAL_UPDATE_ROWS_EVENT, rows_v2(table_map, 2, b"\xff\xff", row))
    partial.add(c.XID_EVENT, struct.pack("<Q", 5))

    provider = FixedSchema({("test", "t10"): T10})
    for log, count in ((stored, 4), (partial, 1)):
        path = str(log.write(tmp_path))
        expected = [change_as_text(c) for t in read_binlog_files([path], schema_provider=provider) for c in t.changes]
        assert len(expected) == count
        assert [line for lines in text_lines([path], schema_provider=provider) for line in lines] == expected


def test_check_does_not_ask_to_turn_off_what_the_decoder_reads(
    mariadb: MariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL's compressed transactions are decoded (binlog/payload.py): a source that writes them is ready."""
    from binlog import check
    from tests.helpers.mariadb import settings_for

    real = check._variable
    mysql_only = {"binlog_transaction_compression": "ON"}
    monkeypatch.setattr(check, "_variable", lambda conn, name: mysql_only.get(name) or real(conn, name))
    assert check.preflight(settings_for(mariadb)) == []


def test_check_names_the_foreign_keys_whose_changes_the_binlog_lacks(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    mariadb.execute(
        f"CREATE TABLE `{schema}`.p (id INT PRIMARY KEY)",
        f"CREATE TABLE `{schema}`.c (id INT PRIMARY KEY, pid INT, CONSTRAINT `odd``fk` FOREIGN KEY (pid) REFERENCES"
        f" `{schema}`.p (id) ON UPDATE SET NULL ON DELETE CASCADE)",
    )
    result = run("check", *connection_args(mariadb))
    assert result.returncode == 0, result.stdout + result.stderr  # a note, not a problem
    note = f"note: the changes this foreign key makes are not in the binlog: {schema}.c (odd`fk -> {schema}.p "
    assert note + "ON DELETE CASCADE, ON UPDATE SET NULL)" in result.stdout, result.stdout
