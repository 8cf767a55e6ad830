"""geometry_to_wkt checked against the real MariaDB: the raw column value (SRID + WKB, exactly what a row event
carries) must render to what the server's own ST_AsText prints for the same row."""

from __future__ import annotations

import random
import struct

import pytest

from binlog.geometry import format_coordinate, geometry_to_wkt

# WKT accepted by MariaDB 10.11 (its parser refuses MULTIPOINT((1 1)) and nested collections in text; those are
# covered below with hand-built WKB).
SHAPES = [
    "POINT(1 2)",
    "POINT(-1.5 0.25)",
    "POINT(0 0)",
    "POINT(-0.001 -0.0001)",
    "POINT(1e20 -0.25)",
    "POINT(123456789012345678 1.5)",
    "POINT(0.000001 1e-7)",
    "POINT(1e-300 1e300)",
    "POINT(1.7976931348623157e308 5e-324)",
    "POINT(2.2250738585072014e-308 -1e100)",
    "POINT(0.1 0.3333333333333333)",
    "POINT(3.141592653589793 -2.718281828459045)",
    "POINT(100000000000000 1000000000000000)",
    "POINT(1234567890123456 12345678901234567)",
    "POINT(1234567890123456.5 999999999999999.9)",
    "POINT(1e-14 1e-15)",
    "POINT(1e-16 -1.5e-15)",
    "POINT(1.2345678901234567e-14 -1.2345678901234567e-15)",
    "POINT(1234567.125 99999999999999.9)",
    "LINESTRING(0 0,1 1,2 2)",
    "LINESTRING(1 1)",
    "LINESTRING(-10.5 20.25,30.125 -40.0625,1e10 -1e-10)",
    "POLYGON((0 0,10 0,10 10,0 10,0 0))",
    "POLYGON((0 0,10 0,10 10,0 10,0 0),(1 1,2 1,2 2,1 1),(5 5,6 5,6 6,5 5))",
    "MULTIPOINT(1 1,2 2)",
    "MULTIPOINT(-1.25 3.5)",
    "MULTILINESTRING((0 0,1 1),(2 2,3 3,4.5 -4.5))",
    "MULTIPOLYGON(((0 0,10 0,10 10,0 10,0 0)),((1 1,2 1,2 2,1 1),(1.1 1.1,1.2 1.1,1.2 1.2,1.1 1.1)))",
    "GEOMETRYCOLLECTION EMPTY",
    "GEOMETRYCOLLECTION(POINT(1 2))",
    "GEOMETRYCOLLECTION(POINT(1 2),LINESTRING(0 0,1 1),POLYGON((0 0,1 0,1 1,0 0)),MULTIPOINT(1 1,2 2))",
    "GEOMETRYCOLLECTION(MULTILINESTRING((0 0,1 1)),MULTIPOLYGON(((0 0,1 0,1 1,0 0))))",
]


@pytest.fixture
def geo_table(fresh_schema):
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.g (id INT PRIMARY KEY, g GEOMETRY)")
    return server, schema


def _check_rows(server, schema) -> int:
    rows = server.query(f"SELECT id, g, ST_AsText(g) FROM `{schema}`.g ORDER BY id")
    assert rows
    for row_id, raw, text in rows:
        assert text is not None, row_id
        assert geometry_to_wkt(raw) == text, (row_id, bytes(raw).hex())
    return len(rows)


def test_every_kind_matches_st_astext(geo_table):
    server, schema = geo_table
    rows = [(i, wkt, srid) for i, wkt in enumerate(SHAPES) for srid in (0, 4326)]
    with server.connect(schema) as conn, conn.cursor() as cur:
        for i, wkt, srid in rows:
            cur.execute("INSERT INTO g VALUES (%s, ST_GeomFromText(%s, %s))", (2 * i + (srid != 0), wkt, srid))
    assert _check_rows(server, schema) == 2 * len(SHAPES)


def test_random_coordinates_match_st_astext(geo_table):
    """Random doubles of every magnitude, written as exact WKB so no text parsing rounds them first."""
    server, schema = geo_table
    rng = random.Random(20240611)
    values: list[float] = []
    for _ in range(600):
        kind = rng.randrange(5)
        if kind == 0:
            values.append(rng.uniform(-1e6, 1e6))
        elif kind == 1:
            values.append(rng.randint(-(10**17), 10**17) / 10 ** rng.randint(0, 20))
        elif kind == 2:
            values.append(rng.choice([-1, 1]) * 10.0 ** rng.randint(-30, 30) * rng.choice([1, 1.5, 2.25, 7]))
        elif kind == 3:
            values.append(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(62) | (1 << 62) >> 1))[0])
        else:
            values.append(float(rng.randint(-(10**16), 10**16)))
    with server.connect(schema) as conn, conn.cursor() as cur:
        for i in range(0, len(values), 2):
            wkb = struct.pack("<BIdd", 1, 1, values[i], values[i + 1])
            cur.execute("INSERT INTO g VALUES (%s, ST_GeomFromWKB(%s))", (i, wkb))
        # one long linestring of all of them
        pts = struct.pack(f"<{len(values)}d", *values)
        cur.execute(
            "INSERT INTO g VALUES (%s, ST_GeomFromWKB(%s))",
            (10**6, struct.pack("<BII", 1, 2, len(values) // 2) + pts),
        )
    assert _check_rows(server, schema) == len(values) // 2 + 1


def _be_point(x: float, y: float) -> bytes:
    return struct.pack(">BIdd", 0, 1, x, y)


def _le_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def test_hand_built_wkb_against_server(geo_table):
    """Big-endian WKB, mixed byte orders inside collections, nested collections: the server normalises what it
    stores, so we compare the server's text for our WKB with our rendering of both our bytes and the server's."""
    server, schema = geo_table
    be_line = struct.pack(">BII", 0, 2, 3) + struct.pack(">6d", 0, 0, 1.5, -1.5, 2e20, 3e-20)
    le_line = struct.pack("<BII", 1, 2, 2) + struct.pack("<4d", 5, 6, 7, 8)
    be_poly = struct.pack(">BIII", 0, 3, 1, 4) + struct.pack(">8d", 0, 0, 1, 0, 1, 1, 0, 0)
    cases = [
        _be_point(1, 2),
        _be_point(-0.25, 1e-7),
        be_line,
        be_poly,
        struct.pack("<BII", 1, 4, 2) + _be_point(1, 1) + _le_point(2, 2),  # MULTIPOINT, mixed orders
        struct.pack(">BII", 0, 5, 2) + le_line + be_line,  # MULTILINESTRING
        struct.pack(">BII", 0, 6, 1) + be_poly,  # MULTIPOLYGON
        struct.pack("<BII", 1, 7, 2) + struct.pack("<BII", 1, 7, 1) + _le_point(2, 1) + _be_point(1, 1),
        struct.pack("<BII", 1, 7, 1) + struct.pack("<BII", 1, 7, 0),  # collection holding an empty one
        struct.pack(">BII", 0, 7, 3) + be_line + struct.pack(">BII", 0, 7, 0) + _le_point(9, 9),
        _le_point(-0.0, 5),  # negative zero prints 0
    ]
    with server.connect(schema) as conn, conn.cursor() as cur:
        for i, wkb in enumerate(cases):
            cur.execute("INSERT INTO g VALUES (%s, ST_GeomFromWKB(%s, 3857))", (i, wkb))
    rows = server.query(f"SELECT id, g, ST_AsText(g) FROM `{schema}`.g ORDER BY id")
    assert len(rows) == len(cases)
    for row_id, raw, text in rows:
        assert text is not None, row_id
        assert geometry_to_wkt(raw) == text, row_id
        assert geometry_to_wkt(struct.pack("<I", 3857) + cases[row_id]) == text, row_id
    assert rows[0][2] == "POINT(1 2)"
    assert rows[4][2] == "MULTIPOINT(1 1,2 2)"
    assert rows[7][2] == "GEOMETRYCOLLECTION(GEOMETRYCOLLECTION(POINT(2 1)),POINT(1 1))"


def test_srid_is_ignored_and_memoryview_accepted():
    wkb = _le_point(1, 2)
    assert geometry_to_wkt(struct.pack("<I", 4326) + wkb) == "POINT(1 2)"
    assert geometry_to_wkt(memoryview(bytearray(b"\xff\xff\xff\xff" + wkb))) == "POINT(1 2)"
    big = b"\x00" * 3 + struct.pack("<I", 0) + wkb + b"\x00" * 3
    assert geometry_to_wkt(memoryview(big)[3:-3]) == "POINT(1 2)"


def test_number_format():
    cases = [
        (1.0, "1"),
        (-1.0, "-1"),
        (1.5, "1.5"),
        (-0.25, "-0.25"),
        (0.0, "0"),
        (-0.0, "0"),
        (1e20, "1e20"),
        (1e15, "1e15"),
        (1e14, "100000000000000"),
        (1234567890123456.0, "1.234567890123456e15"),
        (1234567890123456.5, "1234567890123456.5"),
        (1e-7, "0.0000001"),
        (1e-15, "0.000000000000001"),
        (1e-16, "1e-16"),
        (1.5e-16, "1.5e-16"),
        (-1.2345678901234567e-15, "-0.0000000000000012345678901234568"),
        (1e300, "1e300"),
        (5e-324, "5e-324"),
        (float("nan"), "0"),
        (float("inf"), "0"),
        (float("-inf"), "0"),
    ]
    for value, text in cases:
        assert format_coordinate(value) == text, value


def test_empty_members_print_empty():
    assert geometry_to_wkt(b"\0\0\0\0" + struct.pack("<BII", 1, 7, 0)) == "GEOMETRYCOLLECTION EMPTY"
    assert geometry_to_wkt(b"\0\0\0\0" + struct.pack("<BII", 1, 4, 0)) == "MULTIPOINT EMPTY"
    assert geometry_to_wkt(b"\0\0\0\0" + struct.pack("<BII", 1, 2, 0)) == "LINESTRING EMPTY"


def test_deep_nesting_has_no_recursion_limit():
    depth = 5000
    wkb = struct.pack("<BII", 1, 7, 1) * depth + _le_point(1, 2)
    text = geometry_to_wkt(b"\0\0\0\0" + wkb)
    assert text == "GEOMETRYCOLLECTION(" * depth + "POINT(1 2)" + ")" * depth


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (b"\0\0\0\0\x01\x01\0\0", "too short"),
        (b"\0\0\0\0\x02\x01\0\0\0" + b"\0" * 16, "byte order 2 at offset 4"),
        (b"\0\0\0\0\x01\x08\0\0\0" + b"\0" * 16, "geometry type 8 at offset 5"),
        (b"\0\0\0\0\x01\xe9\x03\0\0" + b"\0" * 24, "geometry type 1001"),
        (b"\0\0\0\0\x01\x01\0\0\0" + b"\0" * 15, "truncated point coordinates at offset 9"),
        (b"\0\0\0\0\x01\x01\0\0\0" + b"\0" * 17, "1 unexpected trailing byte(s)"),
        (b"\0\0\0\0" + struct.pack("<BII", 1, 2, 3) + b"\0" * 32, "linestring point count 3 at offset 9"),
        (b"\0\0\0\0" + struct.pack("<BII", 1, 2, 0xFFFFFFFF), "count 4294967295"),
        (b"\0\0\0\0" + struct.pack("<BI", 1, 3) + b"\0\0", "truncated polygon ring count at offset 9"),
        (b"\0\0\0\0" + struct.pack("<BIII", 1, 3, 1, 0), "polygon ring with no points at offset 13"),
        (b"\0\0\0\0" + struct.pack("<BII", 1, 4, 1) + struct.pack("<BII", 1, 2, 0), "LINESTRING inside a MULTIPOINT"),
        (b"\0\0\0\0" + struct.pack("<BII", 1, 7, 2) + _le_point(1, 1), "truncated WKB header at offset 34"),
        (b"\0\0\0\0" + struct.pack("<BII", 1, 7, 1000) + _le_point(1, 1), "geometry collection count 1000"),
    ],
)
def test_malformed_input_raises_value_error(data, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        geometry_to_wkt(data)
