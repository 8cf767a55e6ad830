"""Table snapshot rows (``binlog.snapshotrows``) against the binlog decoder, on the private MariaDB servers.

Each case creates a table, inserts edge values, reads the INSERTs' after images back from the binlog, then reads the
table as a snapshot does (a connection made with ``connect_kwargs()``, ``SESSION_STATEMENTS``, ``select_expressions``)
and checks that ``row_converter`` gives exactly the decoder's values, types included (str, bytes, None). Both servers
run each case: with ``binlog_row_metadata=FULL`` and without (names, charsets and labels from information_schema).
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Sequence

import pymysql
import pytest

from binlog.schema import SchemaColumn
from binlog.snapshotrows import SESSION_STATEMENTS, connect_kwargs, row_converter, select_expressions
from tests.helpers.binlog_types import (
    BITS,
    CASES,
    COMPRESSED,
    OLD_TEMPORALS,
    Column,
    changes_of,
    provider_for,
    read_span,
)
from tests.helpers.mariadb import MariaDB, new_schema

Row = tuple[str | bytes | None, ...]

# -- helpers ----------------------------------------------------------------------------------------------------------


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def snapshot_connection(server: MariaDB, *, session: bool = True) -> pymysql.Connection:
    """A snapshot connection as the relay makes one: the replication user (which has SELECT), the module's
    arguments, then its session statements."""
    conn = pymysql.connect(**server.replication_settings(), **connect_kwargs())
    if session:
        with conn.cursor() as cur:
            for statement in SESSION_STATEMENTS:
                cur.execute(statement)
    return conn


def table_columns(server: MariaDB, schema: str, table: str = "t") -> tuple[SchemaColumn, ...]:
    described = provider_for(server).table(schema, table)
    assert described is not None
    return described.columns


def snapshot(server: MariaDB, schema: str, table: str = "t", *, session: bool = True) -> list[Row]:
    """Every row of the table, read and converted as a snapshot does, in primary-key order."""
    columns = table_columns(server, schema, table)
    convert = row_converter(columns)
    query = f"SELECT {', '.join(select_expressions(columns))} FROM {quote(schema)}.{quote(table)} ORDER BY 1"
    with snapshot_connection(server, session=session) as conn, conn.cursor() as cur:
        cur.execute(query)
        return [convert(row) for row in cur.fetchall()]


def insert_images(server: MariaDB, schema: str, statements: Sequence[str], table: str = "t") -> list[Row]:
    """The after images the decoder gives for the rows the statements insert, in primary-key order (the first
    column, an integer)."""
    start = server.binlog_position()
    server.execute(*statements)
    changes = changes_of(read_span(server, start), schema, table)
    assert changes and all(c.kind == 1 for c in changes)
    images = [c.after for c in changes]
    assert all(image is not None for image in images)
    return sorted((tuple(image) for image in images if image is not None), key=lambda image: int(str(image[0])))


def assert_same(snapshot_rows: list[Row], decoded_rows: list[Row], names: Sequence[str]) -> None:
    assert len(snapshot_rows) == len(decoded_rows)
    for got, want in zip(snapshot_rows, decoded_rows, strict=True):
        assert len(got) == len(want) == len(names)
        for name, value, expected in zip(names, got, want, strict=True):
            assert type(value) is type(expected) and value == expected, (
                f"row {want[0]}, column {name}: snapshot gives {value!r}, the binlog decoder {expected!r}"
            )


def run_case(server: MariaDB, schema: str, columns: Sequence[Column], *, session_sql: Sequence[str] = ()) -> int:
    """Create ``t`` (id + ``columns``), insert row i with values[i] of each column (NULL past the end), and compare
    the snapshot of the table with the decoded inserts. ``session_sql`` runs before the inserts (e.g. a lax
    sql_mode). Returns the number of rows compared."""
    ddl = ", ".join(f"{quote(c.name)} {c.sql_type}" for c in columns)
    server.execute(f"CREATE TABLE {quote(schema)}.t (id INT PRIMARY KEY, {ddl})")
    rows = max(len(c.values) for c in columns)
    names = ", ".join(quote(c.name) for c in columns)  # named: an INVISIBLE column takes no value otherwise
    inserts = [
        f"INSERT INTO {quote(schema)}.t (id, {names}) VALUES ({i + 1}, "
        + ", ".join(c.values[i] if i < len(c.values) else "NULL" for c in columns)
        + ")"
        for i in range(rows)
    ]
    decoded = insert_images(server, schema, [*session_sql, *inserts])
    assert len(decoded) == rows
    assert_same(snapshot(server, schema), decoded, ["id", *(c.name for c in columns)])
    return rows


# -- the decoder's own type cases (tests/helpers/binlog_types.py) ----------------------------------------------------

DECODER_CASES = {**CASES, "bits": BITS, "compressed": COMPRESSED}


@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_decoder_type_cases(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str], case: str) -> None:
    server, schema = fresh_schema
    run_case(server, schema, DECODER_CASES[case])


def test_old_temporal_formats(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        run_case(server, schema, OLD_TEMPORALS)
    finally:
        server.execute("SET GLOBAL mysql56_temporal_format = ON")


# -- where SELECT's text differs from the decoder's --------------------------------------------------------------------

ZEROFILL = [
    Column("ti", "TINYINT ZEROFILL", ["0", "7", "255"]),
    Column("si", "SMALLINT(3) ZEROFILL", ["0", "65535", "10"]),
    Column("mi", "MEDIUMINT ZEROFILL", ["1", "16777215", "0"]),
    Column("i", "INT(5) ZEROFILL", ["42", "0", "4294967295"]),
    Column("bi", "BIGINT ZEROFILL", ["18446744073709551615", "0", "100"]),
    Column("d", "DECIMAL(8,3) ZEROFILL", ["1.5", "0", "99999.999", "0.001"]),
    Column("d0", "DECIMAL(5,0) ZEROFILL", ["0", "12", "99999"]),
    Column("dfrac", "DECIMAL(4,4) ZEROFILL", ["0.1234", "0", "0.0001"]),
    Column("f", "FLOAT ZEROFILL", ["1.5", "0", "0.1", "3.4e38"]),
    Column("db", "DOUBLE ZEROFILL", ["1.5", "0", "0.1", "1e300"]),
    Column("fmd", "FLOAT(7,3) ZEROFILL", ["1.5", "0", "1234.567"]),
]

FLOAT_SHAPES = [
    Column("f73", "FLOAT(7,3)", ["1.2345", "-0.001", "1234.5678", "0", "0.1"]),
    Column("d102", "DOUBLE(10,2)", ["1.005", "-12345678.99", "0.1", "0", "1.5"]),
    Column("d3010", "DOUBLE(30,10)", ["0.1", "12345678901234567890.1234567891", "-1e-10", "1", "2.5"]),
    Column("fu", "FLOAT UNSIGNED", ["0", "3.4e38", "1e-38", "16777217", "0.3"]),
    Column("f30", "FLOAT(30)", ["0.1", "1e300", "-5e-324", "123456789012345678", "1e15"]),  # a DOUBLE
    Column("f20", "FLOAT(20)", ["0.1", "1e30", "-1e-30", "16777217", "1e15"]),  # a FLOAT
    Column("r", "REAL", ["0.1", "1e-16", "1e16", "-0e0", "5e-324"]),  # -0e0: a double's negative zero
    Column("dp", "DOUBLE PRECISION", ["1e14", "1e15", "123456789012345.6", "1e-15", "1.7976931348623157e308"]),
]

FIXED_BINARY = [
    Column("i6", "INET6", ["'::'", "'::1'", "'::ffff:1.2.3.4'", "'2001:db8::ff00:42:8329'",
                           "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'", "'::1.2.3.4'"]),
    Column("i4", "INET4", ["'0.0.0.0'", "'255.255.255.255'", "'10.0.0.1'", "'1.2.3.4'"]),
    Column("u", "UUID", ["'6ccd780c-baba-1026-9564-5b8c656024db'", "'6ccd780c-baba-4026-9564-5b8c656024db'",
                         "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
                         "'00000000-0000-0000-0000-000000000001'", "'01234567-89ab-7def-8123-456789abcdef'"]),
    Column("i6nn", "INET6 NOT NULL", ["'::2'", "'fe80::1'", "'::'", "'1::'", "'::ffff:0.0.0.0'", "'::9'"]),
]  # fmt: skip

GEOMETRY_SHAPES = [
    Column("g", "GEOMETRY", [
        "ST_GeomFromText('POINT(1 2)', 4326)",
        "ST_GeomFromText('LINESTRING(0 0,1.5 -2,1e300 1e-300)', 3857)",
        "ST_GeomFromText('MULTILINESTRING((0 0,1 1),(2 2,3 3,4 4))')",
        "ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)),((5 5,6 5,6 6,5 5),(5.1 5.1,5.2 5.1,5.2 5.2,5.1 5.1)))')",
        "ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')",
        "ST_GeomFromText('POINT(0.1 -0.3333333333333333)')",
        "ST_GeomFromText('POINT(123456789012345678 1e-14)', 4326)",
        "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),MULTIPOINT(1 1,2 2),POLYGON((0 0,1 0,1 1,0 0)))')",
    ]),
    Column("pt", "POINT", ["ST_GeomFromText('POINT(-1.25 1e10)', 4326)", "POINT(0, 0)", "POINT(1e15, 1e16)"]),
    Column("ls", "LINESTRING", ["ST_GeomFromText('LINESTRING(1 1,2 2)')", "ST_GeomFromText('LINESTRING(-1 -1,0 0)')"]),
    Column("pg", "POLYGON", ["ST_GeomFromText('POLYGON((0 0,4 0,4 4,0 0))', 4326)"]),
    Column("mp", "MULTIPOINT", ["ST_GeomFromText('MULTIPOINT(1 1,2 2,3 3)')"]),
    Column("ml", "MULTILINESTRING", ["ST_GeomFromText('MULTILINESTRING((0 0,1 1))')"]),
    Column("mpg", "MULTIPOLYGON", ["ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)))')"]),
    Column("gc", "GEOMETRYCOLLECTION", ["ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1))')",
                                        "ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')"]),
    Column("gnn", "GEOMETRY NOT NULL", ["POINT(1, 1)", "POINT(2, 2)", "POINT(3, 3)", "POINT(4, 4)",
                                        "POINT(5, 5)", "POINT(6, 6)", "POINT(7, 7)", "POINT(8, 8)"]),
]  # fmt: skip

TEXTS = [
    # MySQL's latin1 is cp1252 with its five holes (0x81 0x8D 0x8F 0x90 0x9D) passed through.
    Column("l1", "VARCHAR(300) CHARACTER SET latin1", ["_latin1 x'80818d8f909d9fa0ff'", "'naïve £ € œ'", "''"]),
    Column("l1c", "CHAR(20) CHARACTER SET latin1", ["_latin1 x'818d8f909d20'", "'é  '", "' '"]),
    Column("l1t", "TEXT CHARACTER SET latin1", ["_latin1 x'81'", "REPEAT('é', 300)", "NULL"]),
    Column("u3", "VARCHAR(20) CHARACTER SET utf8mb3", ["'ünï € 日本'", "''", "'x'"]),
    Column("u16le", "VARCHAR(20) CHARACTER SET utf16le", ["'le 😀 é'", "''", "'x'"]),
    Column("u32v", "VARCHAR(20) CHARACTER SET utf32", ["'32 😀'", "''", "'x'"]),
    Column("u2t", "TEXT CHARACTER SET ucs2", ["'ucs2 text é€'", "''", "'x'"]),
    Column("js", "JSON", ["'{\"ü\": \"😀\", \"q\": \"a\\\\\"b\", \"n\": [1e300, -0.0, 12345678901234567890]}'",
                          "'\"just a string\"'", "'null'"]),
    Column("vb", "VARBINARY(20)", ["x'41ff42c3'", "x'c328'", "x'00'"]),  # not UTF-8: bytes
    Column("bl", "BLOB", ["x'ffd8ffe0'", "x''", "x'e282ac'"]),  # valid UTF-8 stays bytes too
    Column("bn", "BINARY(3)", ["x'c3'", "x''", "x'ffffff'"]),
    Column("cb", "CHAR(5) CHARACTER SET binary", ["'ab'", "x'0001'", "''"]),
]  # fmt: skip

LABELS = [
    Column("e", "ENUM('a', 'b')", ["'a'", "'nope'", "''", "2"]),  # 'nope' and '' (not a label): index 0, ''
    Column("eu2", "ENUM('é', 'ü€', '') CHARACTER SET ucs2", ["'é'", "'ü€'", "''", "3"]),
    Column("el1", "ENUM('\u0081', 'ÿ') CHARACTER SET latin1", ["_latin1 x'81'", "'ÿ'", "NULL", "'x'"]),
    Column("eb", "ENUM('x', 'y') CHARACTER SET binary", ["'y'", "'x'", "'z'", "1"]),
    Column("sl1", "SET('é', 'ß', 'x') CHARACTER SET latin1", ["'é,ß'", "''", "'x,é'", "7"]),
    Column("su16", "SET('a', 'é€') CHARACTER SET utf16", ["'é€'", "'a,é€'", "''", "0"]),
]

NAMES = [
    Column("we`ird", "INT", ["1", "2"]),
    Column("sp ace", "VARCHAR(5)", ["'a'", "'b'"]),
    Column("ünï", "VARCHAR(5) CHARACTER SET latin1", ["'é'", "'x'"]),
    Column("select", "INT", ["3", "NULL"]),
    Column("`", "INT", ["4", "5"]),
    Column("virt", "INT AS (`we``ird` * 2) VIRTUAL", ["DEFAULT", "DEFAULT"]),
    Column("stor", "VARCHAR(10) AS (CONCAT(`sp ace`, '!')) STORED", ["DEFAULT", "DEFAULT"]),
    Column("hidden", "INT INVISIBLE DEFAULT 9", ["DEFAULT", "DEFAULT"]),
]

SNAPSHOT_CASES = {
    "zerofill": ZEROFILL,
    "float_shapes": FLOAT_SHAPES,
    "fixed_binary": FIXED_BINARY,
    "geometry_shapes": GEOMETRY_SHAPES,
    "texts": TEXTS,
    "labels": LABELS,
    "names": NAMES,
}


@pytest.mark.parametrize("case", list(SNAPSHOT_CASES))
def test_snapshot_cases(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str], case: str) -> None:
    server, schema = fresh_schema
    # A lax sql_mode for the inserts: invalid ENUM values become index 0, as on a source with such rows.
    run_case(server, schema, SNAPSHOT_CASES[case], session_sql=["SET SESSION sql_mode = ''"])


@pytest.mark.parametrize(
    "server_name",
    [
        "mariadb",
        pytest.param(
            "mariadb_no_metadata",
            marks=pytest.mark.xfail(
                strict=True,
                reason="without row metadata the decoder takes ENUM/SET labels from information_schema, which MariaDB "
                "gives in utf8mb3: a label character beyond the BMP reads '?' there (SHOW CREATE TABLE too), so the "
                "decoder gives label numbers where the snapshot reads the labels",
            ),
        ),
    ],
)
def test_labels_beyond_the_bmp(request: pytest.FixtureRequest, server_name: str) -> None:
    """The snapshot gives the stored label; the decoder does with the TABLE_MAP's labels (FULL metadata)."""
    server: MariaDB = request.getfixturevalue(server_name)
    schema = new_schema(server)
    columns = [
        Column("e", "ENUM('😀', 'x')", ["'😀'", "'x'"]),
        Column("s", "SET('a', '😀') CHARACTER SET utf16", ["'😀'", "'a,😀'"]),
    ]
    run_case(server, schema, columns)


def test_every_charset(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """A column in each charset the server has: text converted into it, and (single-byte charsets) every byte
    0x20-0xFF as stored, which Python's codec may not even define; the snapshot decodes as the decoder does."""
    server, schema = fresh_schema
    charsets = [(str(r[0]), int(r[3])) for r in server.query("SHOW CHARACTER SET") if r[0] != "binary"]
    assert len(charsets) > 30
    every_byte = bytes(range(0x20, 0x100)).hex()
    sample = "'abc é ß € Ж ÿ 日本語 한국 😀'"
    columns = []
    for name, maxlen in charsets:
        values = [f"CONVERT({sample} USING {name})", "''"]
        if maxlen == 1:
            values.append(f"_{name} x'{every_byte}'")
        columns.append(Column(f"c_{name}", f"VARCHAR(300) CHARACTER SET {name}", values))
        columns.append(Column(f"t_{name}", f"TINYTEXT CHARACTER SET {name}", values[:1]))
    run_case(server, schema, columns, session_sql=["SET SESSION sql_mode = ''"])


def test_every_year(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """YEAR and YEAR(2) over their whole range and the zero year (SELECT shows YEAR(2) with two digits, 2000 and the
    zero year both as "00")."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE {quote(schema)}.t (id INT PRIMARY KEY, y4 YEAR, y2 YEAR(2), y2nn YEAR(2) NOT NULL)")
    years = [0, *range(1901, 2156)]
    literals = ["'0000'" if y == 0 else str(y) for y in years]  # the number 0 is the year 2000 for YEAR(2)
    values = ", ".join(f"({i}, {y}, {y}, {y})" for i, y in enumerate(literals))
    decoded = insert_images(server, schema, [f"INSERT INTO {quote(schema)}.t VALUES {values}, (1000, NULL, NULL, 0)"])
    assert len(decoded) == 257
    assert decoded[0] == ("0", "0000", "0000", "0000")
    assert ("100", "2000", "2000", "2000") in decoded
    assert_same(snapshot(server, schema), decoded, ["id", "y4", "y2", "y2nn"])


def _float_literal(value: float) -> str:
    text = repr(value)
    return text if "e" in text else text + "e0"  # an approximate-value literal: read as a double


def test_random_floats_and_doubles(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """Random bit patterns (subnormals included): FLOAT's text is the shortest that reads back to the single, which
    SELECT's 6 digits are not; DOUBLE's the shortest in MariaDB's notation."""
    server, schema = fresh_schema
    rng = random.Random(20240229)
    singles: list[float] = []
    while len(singles) < 400:
        (single,) = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))
        if single == single and abs(single) != float("inf"):
            singles.append(single)
    doubles: list[float] = []
    while len(doubles) < 400:
        (double,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if double == double and abs(double) != float("inf"):
            doubles.append(double)
    # and values near the notation's borders, where shortest digits and fixed/exponent layout change
    doubles += [s * 10.0**e for e in range(-17, 18) for s in (1.0, 1.5, 0.999999999999, 9.999999999999999)]
    singles += [s * 10.0**e for e in range(-17, 18) for s in (1.0, 1.5, 0.9999999, 9.999999)]
    server.execute(f"CREATE TABLE {quote(schema)}.t (id INT PRIMARY KEY, f FLOAT, d DOUBLE)")
    rows = [
        f"({i}, {_float_literal(s)}, {_float_literal(d)})"
        for i, (s, d) in enumerate(zip(singles, doubles, strict=True))
    ]
    decoded = insert_images(server, schema, [f"INSERT INTO {quote(schema)}.t VALUES {', '.join(rows)}"])
    assert len(decoded) == len(rows)
    assert_same(snapshot(server, schema), decoded, ["id", "f", "d"])


def test_random_timestamps(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    rng = random.Random(7)
    server.execute(f"CREATE TABLE {quote(schema)}.t (id INT PRIMARY KEY, ts TIMESTAMP(6) NULL, t0 TIMESTAMP NULL)")
    rows = []
    for i in range(300):
        seconds = rng.randrange(1, 2**31 - 1)
        rows.append(f"({i}, FROM_UNIXTIME({seconds}.{rng.randrange(10**6):06d}), FROM_UNIXTIME({seconds}))")
    inserts = [f"INSERT INTO {quote(schema)}.t VALUES {', '.join(rows)}"]
    decoded = insert_images(server, schema, ["SET SESSION time_zone = '+00:00'", *inserts])  # FROM_UNIXTIME's zone
    assert_same(snapshot(server, schema), decoded, ["id", "ts", "t0"])


def test_session_statements_undo_the_servers_defaults(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """A source whose defaults pad CHARs (PAD_CHAR_TO_FULL_LENGTH), refuse backslash escapes and show TIMESTAMPs in
    another time zone: the session statements make the snapshot what the binlog says all the same."""
    server, schema = fresh_schema
    columns = [
        Column("c", "CHAR(10)", ["'a'", "'trailing  '", "''"]),
        Column("cl", "CHAR(5) CHARACTER SET latin1", ["'é'", "''", "'x'"]),
        Column(
            "ts", "TIMESTAMP(3) NULL", ["'2024-02-29 12:34:56.789'", "'1970-01-01 00:00:01'", "'2038-01-19 03:14:07'"]
        ),
    ]
    ddl = ", ".join(f"{quote(c.name)} {c.sql_type}" for c in columns)
    server.execute(f"CREATE TABLE {quote(schema)}.t (id INT PRIMARY KEY, {ddl})")
    decoded = insert_images(
        server,
        schema,
        [f"INSERT INTO {quote(schema)}.t VALUES ({i}, {', '.join(c.values[i] for c in columns)})" for i in range(3)],
    )
    (saved_mode, saved_zone) = server.query("SELECT @@GLOBAL.sql_mode, @@GLOBAL.time_zone")[0]
    server.execute(
        "SET GLOBAL sql_mode = 'PAD_CHAR_TO_FULL_LENGTH,NO_BACKSLASH_ESCAPES,ANSI_QUOTES'",
        "SET GLOBAL time_zone = '+05:00'",
    )
    try:
        names = ["id", "c", "cl", "ts"]
        assert_same(snapshot(server, schema), decoded, names)
        plain = snapshot(server, schema, session=False)
        assert plain[0][1] == "a         " and plain[0][3] == "2024-02-29 17:34:56.789"  # what they would give
        # Chunk bounds are parameters: PyMySQL's quoting works with the session's sql_mode.
        columns_ = table_columns(server, schema)
        with snapshot_connection(server) as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT {', '.join(select_expressions(columns_))} FROM {quote(schema)}.t WHERE c > %s ORDER BY id",
                ("it's a \\ backslash",),
            )
            convert = row_converter(columns_)
            assert [convert(r) for r in cur.fetchall()] == [r for r in decoded if str(r[1]) > "it's a \\ backslash"]
    finally:
        server.execute(f"SET GLOBAL sql_mode = '{saved_mode}'", f"SET GLOBAL time_zone = '{saved_zone}'")


def test_chunks_in_primary_key_order(any_mariadb: MariaDB, fresh_schema: tuple[MariaDB, str]) -> None:
    """Read in primary-key chunks as a snapshot does, each chunk's bounds being the last row's converted key: the
    rows are the decoder's, each once."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE {quote(schema)}.t (n INT, k VARCHAR(10) CHARACTER SET latin1, d DATETIME(3), v TEXT, "
        "PRIMARY KEY (n, k, d))"
    )
    rows = [
        f"({i // 7}, '{'éa'[i % 2]}{i % 7}', '2024-01-0{1 + i % 3} 00:00:0{i % 5}.{i:03d}', REPEAT('x', {i}))"
        for i in range(200)
    ]
    decoded = insert_images(server, schema, [f"INSERT INTO {quote(schema)}.t VALUES {', '.join(rows)}"])
    columns = table_columns(server, schema)
    convert = row_converter(columns)
    select = f"SELECT {', '.join(select_expressions(columns))} FROM {quote(schema)}.t"
    got: list[Row] = []
    with snapshot_connection(server) as conn, conn.cursor() as cur:
        last: Row | None = None
        while True:
            if last is None:
                cur.execute(f"{select} ORDER BY n, k, d LIMIT 17")
            else:
                cur.execute(f"{select} WHERE (n, k, d) > (%s, %s, %s) ORDER BY n, k, d LIMIT 17", last[:3])
            chunk = [convert(r) for r in cur.fetchall()]
            if not chunk:
                break
            got += chunk
            assert len(got) <= 200, "the chunks do not advance: a converted key does not select what it was read as"
            last = chunk[-1]

    def key(row: Row) -> tuple[int, str, str]:
        return int(str(row[0])), str(row[1]), str(row[2])

    assert len(got) == 200
    assert_same(sorted(got, key=key), sorted(decoded, key=key), ["n", "k", "d", "v"])


# -- the converter alone --------------------------------------------------------------------------------------------


def _column(name: str, data_type: str, column_type: str | None = None, charset: str | None = None) -> SchemaColumn:
    return SchemaColumn(name, data_type, column_type or data_type, charset)


def test_select_expressions_quote_and_never_alias() -> None:
    columns = [
        _column("a`b", "int"),
        _column("f", "float"),
        _column("y", "year", "year(2)"),
        _column("y4", "year", "year(4)"),
        _column("u", "uuid"),
        _column("g", "point"),
    ]
    assert select_expressions(columns) == [
        "`a``b`",
        "CAST(`f` AS DOUBLE)",
        "YEAR(`y`)",
        "`y4`",
        "CAST(`u` AS BINARY(16))",
        "`g`",
    ]


def test_invalid_utf8_is_decoded_as_the_decoder_does() -> None:
    """A utf8mb4 value that is not UTF-8 (the server refuses to store one, but a converter must not fail on it):
    U+FFFD replacements, as the decoder's ``errors="replace"``, for that row only."""
    convert = row_converter(
        [_column("id", "int"), _column("v", "varchar", "varchar(10)", "utf8mb4"), _column("b", "blob")]
    )
    assert convert([b"1", b"a\xffb", b"\xff"]) == ("1", "a\ufffdb", b"\xff")
    assert convert([b"2", "é".encode(), None]) == ("2", "é", None)
    with pytest.raises(ValueError):
        convert([b"1", b"x"])


def test_types_without_a_known_rendering_are_refused() -> None:
    with pytest.raises(ValueError, match="'v'"):
        select_expressions([_column("v", "sys_refcursor")])
    assert row_converter([])([]) == ()


def test_conversion_speed() -> None:
    """Well over 100,000 rows/s for ten columns of integers and UTF-8 text (it runs at millions on a laptop; the
    bound is loose for slow CI machines)."""
    columns = [_column(f"i{k}", "int") for k in range(5)] + [
        _column(f"v{k}", "varchar", "varchar(50)", "utf8mb4") for k in range(5)
    ]
    convert = row_converter(columns)
    row = [b"123456", b"-7", b"0", None, b"2147483647", b"hello world", "héllo wörld".encode(), b"", None, b"x" * 40]
    count = 100_000
    started = time.perf_counter()
    for _ in range(count):
        convert(row)
    elapsed = time.perf_counter() - started
    assert count / elapsed > 200_000, f"{count / elapsed:.0f} rows/s"
