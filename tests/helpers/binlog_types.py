"""The column type cases of the binlog decoder's tests, and the reading of a binlog span back from a private MariaDB.

Each ``Column`` is a column definition with edge values (SQL literals; row i takes ``values[i]``, NULL past the end).
``tests/test_binlog_types.py`` compares the decoder's images of these rows with SELECT; ``tests/test_snapshotrows.py``
compares them with the rows of a table snapshot (``binlog.snapshotrows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from binlog import InformationSchemaProvider, RowChange, Transaction, read_binlog_files
from tests.helpers.mariadb import MariaDB

# -- the binlog of a private server -----------------------------------------------------------------------------------


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


# -- the cases ---------------------------------------------------------------------------------------------------------


@dataclass
class Column:
    name: str
    sql_type: str
    values: list[str]  # SQL literals
    binary: bool = False
    float32: bool = False  # compare at single precision (SELECT shows FLOAT with 6 digits)
    select: str | None = None  # the SELECT expression to compare with ({} is the column), when not the column itself


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
    # The Japanese charsets where MariaDB's mapping is not Python's (binlog/charsets.py): sjis 0x815F is U+005C;
    # ujis 0xA1C0 too, and its user-defined rows are in the Private Use Area; eucjpms has NEC row 13 (0xADA1 ①) and
    # the IBM extensions (0x8FF3F3 U+2170, 0x8FA2B7 U+FF5E). cp932 is Python's.
    Column("sj", "VARCHAR(10) CHARACTER SET sjis", ["_sjis X'7E815F'", "'ｱ表'", "'~\\\\'"]),
    Column("uj", "VARCHAR(10) CHARACTER SET ujis", ["_ujis X'A1C0F5A18FFEFE'", "'表'"]),
    Column("ej", "VARCHAR(10) CHARACTER SET eucjpms", ["_eucjpms X'ADA1C9BD'", "_eucjpms X'8FF3F38FA2B7F5A1'"]),
    Column("c9", "VARCHAR(10) CHARACTER SET cp932", ["_cp932 X'87405C815F'", "'表'"]),
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
    # MariaDB's SIGNEDNESS metadata has a bit for YEAR (MySQL's has none): every signedness after it depends on it.
    "integers_after_a_year": [
        Column("y", "YEAR", ["2024", "1901", "0"]),
        Column("si", "SMALLINT", ["-1", "32767", "-32768"]),
        Column("biu", "BIGINT UNSIGNED", ["18446744073709551615", "0", "9223372036854775808"]),
        Column("ti", "TINYINT", ["-1", "-128", "127"]),
    ],
    "decimals": DECIMALS,
    "floats": FLOATS,
    "temporals": TEMPORALS,
    "strings": STRINGS,
    "binaries": BINARIES,
    "enums_sets": ENUMS,
    "geometries": GEOMETRIES,
}


# Tables created with mysql56_temporal_format=OFF keep the pre-5.6 TIME/DATETIME/TIMESTAMP encodings, and MariaDB's own
# "hires" layouts for fractional seconds (whose precision only information_schema knows).
OLD_TEMPORALS = [
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

COMPRESSED = [
    Column("vc", "VARCHAR(2000) COMPRESSED", ["REPEAT('abc', 600)", "'short'", "''", "NULL"]),
    Column("bl", "BLOB COMPRESSED", ["REPEAT(x'00ff', 5000)", "x'01'", "x''"], binary=True),
    Column("tx", "TEXT COMPRESSED CHARACTER SET latin1", ["REPEAT('é', 1000)", "'x'"]),
]
