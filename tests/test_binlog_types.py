"""Every column type MariaDB writes, decoded from the binlog and compared with what SELECT returns for the same row.

Each case creates a table, inserts edge values, updates every row (moving its id) and deletes them all, then reads the
binlog span back with ``read_binlog_files`` and checks: inserts equal the first SELECT, update before/after images
equal the SELECTs before and after the update, deletes equal the last SELECT. Both servers run each case: the one with
``binlog_row_metadata=FULL`` (names, signedness, labels from the TABLE_MAP) and the one without (information_schema).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from pymysql.converters import encoders

from binlog import NOT_PRESENT, RowChange
from tests.helpers.binlog_types import (
    BINARIES,
    BITS,
    CASES,
    COMPRESSED,
    INTEGERS,
    OLD_TEMPORALS,
    STRINGS,
    TEMPORALS,
    Column,
    changes_of,
    provider_for,
    read_span,
)
from tests.helpers.mariadb import MariaDB, new_schema

# -- helpers ------------------------------------------------------------------------------------------------------


def text_connection(server: MariaDB, database: str | None = None) -> pymysql.Connection:
    """A connection that returns every value as the server's text (no Python conversion): str, or bytes when the
    column is binary (numbers and dates come back as bytes too and are decoded by ``select_text``)."""
    return server.connect(database, conv=dict(encoders))


def select_text(server: MariaDB, sql: str, binary_columns: set[str] = frozenset(), database: str | None = None):
    """Rows of ``sql`` in the server's text form; bytes only for the named binary columns."""
    with text_connection(server, database) as conn, conn.cursor() as cur:
        cur.execute(sql)
        names = [d[0] for d in cur.description]
        rows = []
        for row in cur.fetchall():
            rows.append(
                tuple(
                    v.decode("utf-8") if isinstance(v, bytes) and names[i] not in binary_columns else v
                    for i, v in enumerate(row)
                )
            )
        return names, rows


def _same(decoded: Any, selected: Any, column: Column) -> bool:
    if decoded is None or selected is None:
        return decoded is None and selected is None
    if column.float32:
        exact = float(selected)  # CAST(col AS DOUBLE) gives the stored single exactly
        return struct.pack("<f", float(decoded)) == struct.pack("<f", exact)
    return decoded == selected


def check_image(image: tuple, expected: tuple, names: tuple[str, ...], columns: list[Column], what: str) -> None:
    by_name = {c.name: c for c in columns}
    for name, got, want in zip(names, image, expected, strict=True):
        column = by_name.get(name, Column(name, "", []))
        assert _same(got, want, column), f"{what}: column {name}: decoded {got!r}, SELECT gives {want!r}"


def run_case(server: MariaDB, schema: str, columns: list[Column], *, provider: Any = "default") -> list[RowChange]:
    """Insert/update/delete rows of ``columns`` (row i takes values[i] of each column, NULL past the end) and compare
    every decoded image with SELECT. Returns the decoded changes."""
    rows = max(len(c.values) for c in columns)
    ddl = ", ".join(f"`{c.name}` {c.sql_type}" for c in columns)
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, {ddl})")
    start = server.binlog_position()
    inserts = []
    for i in range(rows):
        literals = [c.values[i] if i < len(c.values) else "NULL" for c in columns]
        inserts.append(f"INSERT INTO `{schema}`.t VALUES ({i + 1}, {', '.join(literals)})")
    server.execute(*inserts)

    def expression(c: Column) -> str:
        if c.float32:
            return f"CAST(`{c.name}` AS DOUBLE) AS `{c.name}`"
        if c.select:
            return c.select.format(f"`{c.name}`") + f" AS `{c.name}`"
        return f"`{c.name}`"

    select_list = ", ".join(expression(c) for c in columns)
    binary = {c.name for c in columns if c.binary}
    query = f"SELECT id, {select_list} FROM `{schema}`.t ORDER BY id"
    _, first = select_text(server, query, binary)
    server.execute(f"UPDATE `{schema}`.t SET id = id + 1000 ORDER BY id DESC")
    _, second = select_text(server, query, binary)
    server.execute(f"DELETE FROM `{schema}`.t ORDER BY id")
    changes = changes_of(read_span(server, start, provider=provider), schema, "t")
    inserts_ = [c for c in changes if c.kind == 1]
    updates = sorted((c for c in changes if c.kind == 2), key=lambda c: int(c.before[0]))
    deletes = [c for c in changes if c.kind == 4]
    assert len(inserts_) == len(updates) == len(deletes) == rows
    names = ("id", *(c.name for c in columns))
    assert inserts_[0].columns == names
    for change, want in zip(inserts_, first, strict=True):
        assert change.before is None
        check_image(change.after, want, names, columns, "insert")
    for change, before, after in zip(updates, first, second, strict=True):
        check_image(change.before, before, names, columns, "update before")
        check_image(change.after, after, names, columns, "update after")
    for change, want in zip(deletes, second, strict=True):
        assert change.after is None
        check_image(change.before, want, names, columns, "delete")
    return changes


# -- the cases (tests/helpers/binlog_types.py) ---------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_types_match_select(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str], case: str) -> None:
    server, schema = fresh_schema
    changes = run_case(server, schema, CASES[case])
    info = changes[0].table_info
    assert info.primary_key == ("id",)
    assert info.names_known


def test_bits_match_select_as_unsigned_integers(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    ddl = ", ".join(f"`{c.name}` {c.sql_type}" for c in BITS)
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, {ddl})")
    start = server.binlog_position()
    for i in range(5):
        server.execute(f"INSERT INTO `{schema}`.t VALUES ({i}, {', '.join(c.values[i] for c in BITS)})")
    # SELECT shows BIT as raw bytes; its unsigned integer is what BIT+0 gives.
    _, rows = select_text(server, f"SELECT id, {', '.join(f'`{c.name}` + 0' for c in BITS)} FROM `{schema}`.t")
    changes = changes_of(read_span(server, start), schema, "t")
    assert [c.after for c in changes] == rows
    assert changes[0].table_info.columns[1].type_name == "bit(1)"


def test_type_names_and_signedness_are_described(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT UNSIGNED PRIMARY KEY, d DECIMAL(10,2) NOT NULL, v VARCHAR(20), "
        "c CHAR(3) CHARACTER SET latin1, b VARBINARY(5), e ENUM('x','y'))"
    )
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1, 1.5, 'v', 'c', 'b', 'y')")
    (change,) = changes_of(read_span(server, start), schema, "t")
    cols = {c.name: c for c in change.table_info.columns}
    assert cols["id"].unsigned and cols["id"].type_name.startswith("int") and "unsigned" in cols["id"].type_name
    assert cols["d"].type_name == "decimal(10,2)" and not cols["d"].nullable
    assert cols["v"].type_name == "varchar(20)" and cols["v"].charset == "utf8mb4"
    assert cols["c"].charset == "latin1"
    assert cols["b"].charset == "binary"
    assert cols["e"].enum_values == ("x", "y")
    assert change.after == ("1", "1.50", "v", "c", b"b", "y")


def test_old_temporal_formats(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """Tables created with mysql56_temporal_format=OFF keep the pre-5.6 TIME/DATETIME/TIMESTAMP encodings, and
    MariaDB's own "hires" layouts for fractional seconds (whose precision only information_schema knows)."""
    server, schema = fresh_schema
    server.execute("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        changes = run_case(server, schema, OLD_TEMPORALS)
    finally:
        server.execute("SET GLOBAL mysql56_temporal_format = ON")
    assert {c.type_code for c in changes[0].table_info.columns[1:]} == {7, 11, 12}
    assert changes[0].table_info.columns[4].meta == 1  # dt1: precision from information_schema


def test_compressed_columns(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    run_case(server, schema, COMPRESSED)


def _image_matches(image: tuple, expected: tuple) -> None:
    for got, want in zip(image, expected, strict=True):
        assert got is NOT_PRESENT or got == want


@pytest.mark.parametrize("row_image", ["MINIMAL", "NOBLOB"])
def test_partial_row_images(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str], row_image: str) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c BLOB, d TEXT)")
    start = server.binlog_position()
    server.execute(
        f"SET SESSION binlog_row_image = {row_image}",
        f"INSERT INTO `{schema}`.t (id, a, b, c, d) VALUES (1, 10, 'x', x'00', 'text'), (2, NULL, 'y', NULL, 't2')",
        f"UPDATE `{schema}`.t SET a = 11 WHERE id = 1",
        f"UPDATE `{schema}`.t SET c = x'ff' WHERE id = 2",
        f"DELETE FROM `{schema}`.t WHERE id = 1",
    )
    changes = changes_of(read_span(server, start), schema, "t")
    assert [c.kind for c in changes] == [1, 1, 2, 2, 4]
    ins1, ins2, upd1, upd2, dele = changes
    if row_image == "MINIMAL":
        assert upd1.before == ("1", NOT_PRESENT, NOT_PRESENT, NOT_PRESENT, NOT_PRESENT)
        assert upd1.after == (NOT_PRESENT, "11", NOT_PRESENT, NOT_PRESENT, NOT_PRESENT)
        assert upd2.after == (NOT_PRESENT, NOT_PRESENT, NOT_PRESENT, b"\xff", NOT_PRESENT)
        assert dele.before == ("1", NOT_PRESENT, NOT_PRESENT, NOT_PRESENT, NOT_PRESENT)
        _image_matches(ins1.after, ("1", "10", "x", b"\x00", "text"))
    else:
        # NOBLOB: every non-BLOB/TEXT column; BLOB/TEXT only when the statement needs them.
        assert upd1.before == ("1", "10", "x", NOT_PRESENT, NOT_PRESENT)
        assert upd1.after == ("1", "11", "x", NOT_PRESENT, NOT_PRESENT)
        assert upd2.after == ("2", None, "y", b"\xff", NOT_PRESENT)
        assert dele.before == ("1", "11", "x", NOT_PRESENT, NOT_PRESENT)
        assert ins1.after == ("1", "10", "x", b"\x00", "text")
    _image_matches(ins2.after, ("2", None, "y", None, "t2"))
    assert NOT_PRESENT is not None and not NOT_PRESENT


def test_names_fall_back_to_positions_without_metadata_or_schema(
    mariadb_no_metadata: MariaDB, caplog: pytest.LogCaptureFixture
) -> None:
    server = mariadb_no_metadata
    schema = new_schema(server)
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(5))")
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1, 'é')")
    (change,) = changes_of(read_span(server, start, provider=None), schema, "t")
    assert change.columns == ("@1", "@2")
    assert change.after == ("1", "é")
    assert not change.table_info.names_known
    assert "using @1, @2" in caplog.text


def test_metadata_alone_needs_no_schema(mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT UNSIGNED PRIMARY KEY, e ENUM('p','q'), b BLOB)")
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (4294967295, 'q', x'00')")
    (change,) = changes_of(read_span(server, start, provider=None), schema, "t")
    assert change.columns == ("id", "e", "b")
    assert change.after == ("4294967295", "q", b"\x00")


def test_schema_cache_refreshes_on_ddl_and_column_count(mariadb_no_metadata: MariaDB) -> None:
    server = mariadb_no_metadata
    schema = new_schema(server)
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, a INT)")
    provider = provider_for(server)
    assert provider.table(schema, "t") is not None  # cached with two columns
    start = server.binlog_position()
    server.execute(
        f"INSERT INTO `{schema}`.t VALUES (1, 2)",
        f"ALTER TABLE `{schema}`.t ADD COLUMN b VARCHAR(3)",
        f"INSERT INTO `{schema}`.t VALUES (2, 3, 'x')",
    )
    transactions = read_span(server, start, provider=provider)
    changes = changes_of(transactions, schema, "t")
    # The first insert is read with the names cached before the ALTER; the ALTER in the stream drops the cache, so
    # the second is read with the new column.
    assert changes[0].columns == ("id", "a") and changes[0].after == ("1", "2")
    assert changes[1].columns == ("id", "a", "b") and changes[1].after == ("2", "3", "x")
    assert any("ALTER TABLE" in s for t in transactions for s in t.statements)

    # A DDL the stream never sees (it happened before the span) is noticed by the column count.
    stale = provider_for(server)
    assert len(stale.table(schema, "t").columns) == 3
    server.execute(f"ALTER TABLE `{schema}`.t ADD COLUMN c INT")
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (3, 4, 'y', 5)")
    (change,) = changes_of(read_span(server, start, provider=stale), schema, "t")
    assert change.columns == ("id", "a", "b", "c") and change.after == ("3", "4", "y", "5")
    assert stale.queries == 2


def iter_values(changes: list[RowChange]) -> Iterator[Any]:
    for change in changes:
        for image in (change.before, change.after):
            if image is not None:
                yield from image


def test_values_are_only_str_bytes_none_or_not_present(mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    changes = run_case(server, schema, INTEGERS[:2] + BINARIES[:1] + STRINGS[:1] + TEMPORALS[:2])
    kinds: set[type] = {type(v) for v in iter_values(changes)}
    assert kinds <= {str, bytes, type(None)}


def test_compressed_binlog_events(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """log_bin_compress=ON: MariaDB writes QUERY_COMPRESSED and *_ROWS_COMPRESSED events (zlib payloads)."""
    server, schema = fresh_schema
    server.execute("SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    try:
        columns = [
            Column("v", "VARCHAR(500)", ["REPEAT('compressible ', 30)", "'short'", "NULL"]),
            Column("n", "INT", ["1", "2", "3"]),
        ]
        changes = run_case(server, schema, columns)
        server.execute("FLUSH BINARY LOGS")
        kinds = {row[2] for row in server.query(f"SHOW BINLOG EVENTS IN '{changes[0].file}'")}
    finally:
        server.execute("SET GLOBAL log_bin_compress = OFF")
    assert {
        "Write_rows_compressed_v1",
        "Update_rows_compressed_v1",
        "Delete_rows_compressed_v1",
        "Query_compressed",
    } <= kinds


def test_update_after_images_keep_or_decode_costly_columns(
    any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]
) -> None:
    # The after image of an UPDATE keeps the before image's text of a FLOAT, DOUBLE or DECIMAL whose bytes did not
    # change, and decodes one that did, also when the column or a neighbour turns NULL or stops being NULL.
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, n INT, f FLOAT, d DOUBLE, m DECIMAL(10,2))")
    columns = [Column("n", "INT", []), Column("f", "FLOAT", [], float32=True), Column("d", "DOUBLE", []),
               Column("m", "DECIMAL(10,2)", [])]  # fmt: skip
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1, 1, 1.5, 2.5, 3.25), (2, 1, NULL, 0.1, -7.5), "
                   f"(3, 1, 0.25, NULL, NULL), (4, 1, 1e10, 1e-300, 99999999.99), (5, 1, NULL, 2.5, 1)")  # fmt: skip
    query = f"SELECT id, n, CAST(f AS DOUBLE) AS f, d, m FROM `{schema}`.t ORDER BY id"
    snapshots = [select_text(server, query)[1]]
    # First: row 5's FLOAT goes from NULL to 0, whose 4 bytes are zeros like the low half of the DOUBLE 2.5 that
    # follows it in the before image (where the NULL FLOAT takes no bytes): only the NULL test tells them apart.
    assignments = ["f = IF(f IS NULL AND d = 2.5, 0, f)", "n = n + 1", "f = f * 2", "d = d + 1, n = 5", "m = -m",
                   "f = NULL", "f = 3.5, d = NULL", "d = 2.25, m = 0", "f = 1.5, d = 0.1, m = 3.25"]  # fmt: skip
    for assignment in assignments:  # n changes every time, so that every row is written
        server.execute(f"UPDATE `{schema}`.t SET {assignment}, n = n + 1 ORDER BY id")
        snapshots.append(select_text(server, query)[1])
    updates = [c for c in changes_of(read_span(server, start), schema, "t") if c.kind == 2]
    assert len(updates) == 5 * len(assignments)
    names = ("id", "n", "f", "d", "m")
    for number, change in enumerate(updates):
        statement, row = divmod(number, 5)
        check_image(change.before, snapshots[statement][row], names, columns, f"{assignments[statement]}: before")
        check_image(change.after, snapshots[statement + 1][row], names, columns, f"{assignments[statement]}: after")
