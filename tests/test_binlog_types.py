"""Every column type MariaDB writes, decoded from the binlog and compared with what SELECT returns for the same row.

Each case creates a table, inserts edge values, updates every row (moving its id) and deletes them all, then reads the
binlog span back with ``read_binlog_files`` and checks: inserts equal the first SELECT, update before/after images
equal the SELECTs before and after the update, deletes equal the last SELECT. Both servers run each case: the one with
``binlog_row_metadata=FULL`` (names, signedness, labels from the TABLE_MAP) and the one without (information_schema).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest
from pymysql.converters import encoders

from binlog import NOT_PRESENT, InformationSchemaProvider, RowChange, Transaction, read_binlog_files
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


def provider_for(server: MariaDB) -> InformationSchemaProvider:
    settings = server.replication_settings()
    return InformationSchemaProvider({**settings, "charset": "utf8mb4"})


def read_span(server: MariaDB, start: tuple[str, int], *, provider: Any = "default") -> list[Transaction]:
    """Transactions the server wrote from ``start`` to now, read from its binlog files."""
    server.execute("FLUSH BINARY LOGS")  # closes the file so everything is on disk
    files = [f for f in server.binlog_files() if f.name >= start[0]]
    if provider == "default":
        provider = provider_for(server)
    return list(read_binlog_files(files, schema_provider=provider, start=start[1]))


def changes_of(transactions: list[Transaction], schema: str, table: str) -> list[RowChange]:
    return [c for t in transactions for c in t.changes if c.schema == schema and c.table == table]


@dataclass
class Column:
    name: str
    sql_type: str
    values: list[str]  # SQL literals
    binary: bool = False
    float32: bool = False  # compare at single precision (SELECT shows FLOAT with 6 digits)
    select: str | None = None  # the SELECT expression to compare with ({} is the column), when not the column itself


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


# -- the cases ------------------------------------------------------------------------------------------------------

INTEGERS = [
    Column("ti", "TINYINT", ["-128", "127", "0", "-1"]),
    Column("tiu", "TINYINT UNSIGNED", ["0", "255", "200", "1"]),
    Column("si", "SMALLINT", ["-32768", "32767", "0", "-1"]),
    Column("siu", "SMALLINT UNSIGNED", ["0", "65535", "40000", "1"]),
    Column("mi", "MEDIUMINT", ["-8388608", "8388607", "0", "-1"]),
    Column("miu", "MEDIUMINT UNSIGNED", ["0", "16777215", "9000000", "1"]),
    Column("i", "INT", ["-2147483648", "2147483647", "0", "-1"]),
    Column("iu", "INT UNSIGNED", ["0", "4294967295", "3000000000", "1"]),
    Column("bi", "BIGINT", ["-9223372036854775808", "9223372036854775807", "0", "-1"]),
    Column("biu", "BIGINT UNSIGNED", ["0", "18446744073709551615", "10000000000000000000", "1"]),
    Column("nn", "INT NOT NULL DEFAULT 7", ["-5", "5", "0", "2147483647"]),
]


def _decimal_values(precision: int, scale: int) -> list[str]:
    digits = "9" * (precision - scale)
    frac = "9" * scale
    biggest = (digits or "0") + ("." + frac if scale else "")
    small = "0." + "0" * (scale - 1) + "1" if scale else "1"
    return [biggest, "-" + biggest, "0", small, "-" + small, "1" if precision > scale else "0", "NULL"]


DECIMAL_SHAPES = [(1, 0), (5, 0), (9, 0), (10, 0), (18, 0), (10, 2), (9, 9), (10, 10), (18, 9), (19, 9), (20, 10),
                  (30, 10), (38, 38), (65, 0), (65, 30), (65, 38), (12, 4), (4, 1)]  # fmt: skip
DECIMALS = [Column(f"d{p}_{s}", f"DECIMAL({p},{s})", _decimal_values(p, s)) for p, s in DECIMAL_SHAPES] + [
    Column("du", "DECIMAL(10,3) UNSIGNED", ["0", "9999999.999", "0.001", "12.5"]),
    Column("dmid", "DECIMAL(20,6)", ["123456789.123456", "-0.000001", "-12345678901234.5", "100"]),
]

FLOATS = [
    Column("db", "DOUBLE", ["0", "-0.0", "1.5", "0.1", "-2.5", "1e-30", "1.7976931348623157e308", "5e-324",
                            "123456789012345678", "3.141592653589793", "1e15", "1e14", "1e-15", "1e-16", "NULL"]),
    Column("fl", "FLOAT", ["0", "1.5", "0.1", "-2.5", "3.4e38", "1.17549435e-38", "1.23456789", "16777217", "1e-30",
                           "-7e10", "1e15", "0.3", "100", "1e-7", "NULL"], float32=True),
    Column("du", "DOUBLE UNSIGNED", ["0", "12.25", "1e300"]),
]  # fmt: skip

TEMPORALS = [
    Column("y", "YEAR", ["1901", "2155", "0", "2024", "NULL"]),
    Column("dt", "DATE", ["'1000-01-01'", "'9999-12-31'", "'0000-00-00'", "'2024-02-29'", "'1970-01-01'"]),
    *[
        Column(f"dtm{fsp}", f"DATETIME({fsp})" if fsp else "DATETIME",
               ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "'0000-00-00 00:00:00'",
                "'2024-02-29 12:34:56.123456'", "'1970-01-01 00:00:00.5'"])
        for fsp in range(7)
    ],
    *[
        Column(f"ts{fsp}", f"TIMESTAMP({fsp}) NULL" if fsp else "TIMESTAMP NULL",
               ["'1970-01-01 00:00:01'", "'2038-01-19 03:14:07.999999'", "'0000-00-00 00:00:00'",
                "'2024-02-29 12:34:56.123456'", "NULL"])
        for fsp in range(7)
    ],
    *[
        Column(f"tm{fsp}", f"TIME({fsp})" if fsp else "TIME",
               ["'-838:59:59'", "'838:59:59'", "'00:00:00'", "'-00:00:01.5'", "'-12:34:56.789012'",
                "'00:00:00.000001'", "'-00:00:00.000001'", "'100:00:00.1'"])
        for fsp in range(7)
    ],
]  # fmt: skip

STRINGS = [
    Column("c", "CHAR(10)", ["''", "'a'", "'héllo'", "'trailing  '", "'  lead'", "NULL"]),
    Column("c4", "CHAR(255) CHARACTER SET utf8mb4", ["'😀 emoji'", "REPEAT('é', 255)", "''"]),
    Column("cl", "CHAR(10) CHARACTER SET latin1", ["'é€'", "'abc'", "''"]),
    Column("vc", "VARCHAR(20)", ["''", "'a'", "'héllo wörld €'", "'trailing  '", "'😀'", "NULL"]),
    Column("vcl", "VARCHAR(300) CHARACTER SET latin1", ["REPEAT('x', 300)", "'naïve £ €'", "''"]),
    Column("vc4", "VARCHAR(300)", ["REPEAT('€', 300)", "'x'", "''"]),
    Column("tt", "TINYTEXT", ["'tiny ü'", "''"]),
    Column("tx", "TEXT", ["REPEAT('text ', 2000)", "'é'", "''"]),
    Column("mt", "MEDIUMTEXT CHARACTER SET latin1", ["'medium ÿ'", "REPEAT('m', 70000)"]),
    Column("lt", "LONGTEXT", ["'long 🙂'", "''"]),
    Column("u2", "VARCHAR(10) CHARACTER SET ucs2", ["'ucs2 é'", "''"]),
    Column("u16", "VARCHAR(10) CHARACTER SET utf16", ["'utf16 😀'"]),
    Column("u32", "CHAR(5) CHARACTER SET utf32", ["'u32'"]),
    Column("cp", "VARCHAR(10) CHARACTER SET cp1251", ["'Привет'"]),
    Column("js", "JSON", ['\'{"a": [1, 2.5, "x"], "b": null}\'', "'[]'", "NULL"]),
]

BINARIES = [
    Column("b", "BINARY(4)", ["x''", "x'00'", "x'00ff10'", "x'01020304'", "NULL"], binary=True),
    Column("vb", "VARBINARY(300)", ["x''", "x'00'", "REPEAT(x'ff', 300)", "x'000102'"], binary=True),
    Column("tb", "TINYBLOB", ["x'00ff'", "x''"], binary=True),
    Column("bl", "BLOB", ["REPEAT(x'a5', 65535)", "x'00'"], binary=True),
    Column("mb", "MEDIUMBLOB", ["REPEAT(x'5a', 100000)", "x''"], binary=True),
    Column("lb", "LONGBLOB", ["x'deadbeef'", "NULL"], binary=True),
]

ENUM_LABELS = ["a", "b,c", "it''s", "", "Ünï"]
ENUMS = [
    Column("e", "ENUM(" + ", ".join(f"'{x}'" for x in ENUM_LABELS) + ")", ["'a'", "'b,c'", "'it''s'", "''", "'Ünï'"]),
    Column("e300", "ENUM(" + ", ".join(f"'v{i}'" for i in range(300)) + ")", ["'v0'", "'v299'", "'v150'"]),
    Column("s", "SET('x', 'yz', 'w')", ["''", "'x'", "'x,w'", "'x,yz,w'", "NULL"]),
    Column("s12", "SET(" + ", ".join(f"'k{i}'" for i in range(12)) + ")", ["'k0,k11'", "'k8'", "''", "'k1,k9'"]),
    Column("s64", "SET(" + ", ".join(f"'m{i}'" for i in range(64)) + ")", ["'m0,m63'", "'m31,m32'", "''"]),
    Column("el", "ENUM('é', 'ß') CHARACTER SET latin1", ["'é'", "'ß'"]),
]

BITS = [
    Column(f"bit{n}", f"BIT({n})", ["0", str(2**n - 1), str(2 ** (n - 1)), "1", "NULL"])
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 63, 64)
]


GEOMETRIES = [
    Column("g", "GEOMETRY", ["ST_GeomFromText('POINT(1 2)')", "ST_GeomFromText('LINESTRING(0 0,1.5 -2,3 4)')",
                             "ST_GeomFromText('POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1,2 1,2 2,1 1))')", "NULL",
                             "ST_GeomFromText('MULTIPOINT(1 1,2 2)')",
                             "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))')"],
           select="ST_AsText({})"),
    Column("p", "POINT", ["POINT(-1.25, 1e10)", "POINT(0, 0)"], select="ST_AsText({})"),
    Column("after_geometry", "VARCHAR(10) CHARACTER SET latin1", ["'é'", "'x'"]),  # charset metadata stays aligned
]  # fmt: skip

CASES: dict[str, list[Column]] = {
    "integers": INTEGERS,
    "decimals": DECIMALS,
    "floats": FLOATS,
    "temporals": TEMPORALS,
    "strings": STRINGS,
    "binaries": BINARIES,
    "enums_sets": ENUMS,
    "geometries": GEOMETRIES,
}


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
        columns = [
            Column("dt", "DATETIME", ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'", "'0000-00-00 00:00:00'"]),
            Column("ts", "TIMESTAMP NULL", ["'1970-01-01 00:00:01'", "'2038-01-19 03:14:07'", "NULL"]),
            Column("tm", "TIME", ["'-838:59:59'", "'838:59:59'", "'-00:00:01'"]),
            *[
                Column(f"dt{fsp}", f"DATETIME({fsp})", ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'",
                                                        "'2020-01-02 03:04:05.123456'", "'0000-00-00 00:00:00'"])
                for fsp in range(1, 7)
            ],
            *[
                Column(f"ts{fsp}", f"TIMESTAMP({fsp}) NULL", ["'1970-01-01 00:00:01.5'", "'2038-01-19 03:14:07.999999'",
                                                              "'2020-01-02 03:04:05.123456'", "NULL"])
                for fsp in range(1, 7)
            ],
            *[
                Column(f"tm{fsp}", f"TIME({fsp})", ["'-838:59:59'", "'838:59:59'", "'-00:00:01.5'",
                                                    "'-12:34:56.789012'"])
                for fsp in range(1, 7)
            ],
        ]  # fmt: skip
        changes = run_case(server, schema, columns)
    finally:
        server.execute("SET GLOBAL mysql56_temporal_format = ON")
    assert {c.type_code for c in changes[0].table_info.columns[1:]} == {7, 11, 12}
    assert changes[0].table_info.columns[4].meta == 1  # dt1: precision from information_schema


def test_compressed_columns(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    columns = [
        Column("vc", "VARCHAR(2000) COMPRESSED", ["REPEAT('abc', 600)", "'short'", "''", "NULL"]),
        Column("bl", "BLOB COMPRESSED", ["REPEAT(x'00ff', 5000)", "x'01'", "x''"], binary=True),
        Column("tx", "TEXT COMPRESSED CHARACTER SET latin1", ["REPEAT('é', 1000)", "'x'"]),
    ]
    run_case(server, schema, columns)


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
