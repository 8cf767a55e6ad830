"""Differential test: a mixed workload decoded by this package and by python-mysql-replication must give the same rows.

python-mysql-replication (``pymysqlreplication``) is a test-only oracle here. Both read the same binlog span from the
private MariaDB (with row metadata, which is where that library gets column names). Values are compared after
mapping its Python objects onto our text forms; the differences of rendering only (not of data) are:

* numbers: it returns int / Decimal / float, we return MySQL's text ("-5", "12.50"); FLOAT it widens to double
  (1.2345678806304932), we give the shortest single-precision text ("1.2345679"): compared at single precision;
* DATE/DATETIME/TIME: it returns date / datetime / timedelta, we return "YYYY-MM-DD hh:mm:ss[.ffffff]" and
  "[-]hh:mm:ss[.ff]"; it returns None for zero dates where we return "0000-00-00";
* TIMESTAMP: it returns a naive datetime in the local time zone, we return UTC text: compared as instants;
* YEAR: int vs "2024"; BIT: a string of binary digits vs the unsigned integer text; SET: a Python set vs
  "a,b" in definition order, and None for the empty set where we (and SELECT) give "".
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlog import ColumnInfo, Position
from binlog.constants import (
    MYSQL_TYPE_BIT,
    MYSQL_TYPE_FLOAT,
    MYSQL_TYPE_SET,
    MYSQL_TYPE_TIMESTAMP2,
)
from tests.helpers.mariadb import MariaDB, drain, new_schema

WORKLOAD_TABLES = {
    "mixed": """(id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
        d DECIMAL(12,4), dz DECIMAL(5,0), f FLOAT, db DOUBLE, v VARCHAR(30), c CHAR(5) CHARACTER SET latin1,
        tx TEXT, bl BLOB, vb VARBINARY(8), dte DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(1), y YEAR,
        e ENUM('red','green','blue'), s SET('a','b','c'), bt BIT(12), js JSON)""",
    "small": "(k VARCHAR(10) PRIMARY KEY, n INT NULL)",
}


def _workload(server: MariaDB, schema: str) -> None:
    statements = []
    for i in range(1, 41):
        sign = -1 if i % 2 else 1
        statements.append(
            f"INSERT INTO `{schema}`.mixed VALUES ({i}, {sign * i}, {200 + i % 50}, {sign * 9007199254740993 * i}, "
            f"{18446744073709551615 - i}, {sign * i}.{i:04d}, {sign * i * 7}, {i}.{i}, {sign}e{i % 20}, "
            f"'row {i} é', 'ç{i}', REPEAT('t', {i * 10}), REPEAT(x'ab', {i}), x'{i:02x}00', "
            f"'20{i % 30:02d}-0{1 + i % 9}-1{i % 9}', '2001-02-03 04:05:06.{i:06d}', "
            f"FROM_UNIXTIME({1600000000 + i * 1000}.5), '{sign * i}:30:15.5', {1990 + i}, "
            f'{1 + i % 3}, {i % 8}, {i * 97 % 4096}, \'{{"i": {i}, "l": [1, "x"]}}\')'
        )
        statements.append(f"INSERT INTO `{schema}`.small VALUES ('k{i}', {i if i % 3 else 'NULL'})")
    statements += [
        f"INSERT INTO `{schema}`.mixed (id) VALUES (100)",  # all NULLs
        f"UPDATE `{schema}`.mixed SET v = CONCAT(v, '!'), d = -d, s = 'a,c', e = NULL WHERE id % 3 = 0",
        f"UPDATE `{schema}`.small SET n = n + 1 WHERE n IS NOT NULL",
        f"DELETE FROM `{schema}`.mixed WHERE id % 5 = 0",
        f"DELETE FROM `{schema}`.small WHERE k LIKE 'k1%'",
    ]
    server.execute(*statements)


def _theirs(server: MariaDB, schema: str, start: tuple[str, int]) -> list[tuple[str, int, dict | None, dict | None]]:
    settings = server.replication_settings()
    reader = BinLogStreamReader(
        {"host": settings["host"], "port": settings["port"], "user": "root", "passwd": ""},
        server_id=0x5245,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[schema],
        is_mariadb=False,  # its MariaDB mode starts by GTID and ignores log_file/log_pos
    )
    rows = []
    try:
        for event in reader:
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    rows.append((event.table, 1, None, row["values"]))
                elif isinstance(event, UpdateRowsEvent):
                    rows.append((event.table, 2, row["before_values"], row["after_values"]))
                else:
                    rows.append((event.table, 4, row["values"], None))
    finally:
        reader.close()
    return rows


def _as_ours(value: Any, column: ColumnInfo) -> Any:
    """Their value in our rendering (see the module docstring for each rule)."""
    if value is None:
        return None
    if column.type_code == MYSQL_TYPE_BIT:
        return str(int(value, 2))
    if column.type_code == MYSQL_TYPE_SET:
        return ",".join(label for label in column.set_values if label in value)
    if isinstance(value, bool | int | Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        total = value.days * 86400_000000 + value.seconds * 1000000 + value.microseconds
        sign, total = ("-" if total < 0 else ""), abs(total)
        seconds, usec = divmod(total, 1000000)
        fsp = int(column.type_name.partition("(")[2].rstrip(")") or 0)
        text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return text + (f".{usec:06d}"[: fsp + 1] if fsp else "")
    if isinstance(value, dt.datetime):
        if column.type_code == MYSQL_TYPE_TIMESTAMP2:
            value = dt.datetime.fromtimestamp(value.timestamp(), dt.UTC).replace(tzinfo=None)
        fsp = int(column.type_name.partition("(")[2].rstrip(")") or 0)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{value.microsecond:06d}"[: fsp + 1] if fsp else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _same(ours: Any, theirs: Any, column: ColumnInfo) -> bool:
    if column.type_code == MYSQL_TYPE_SET and theirs is None and ours == "":
        return True  # its rendering of the empty set
    if isinstance(theirs, float):
        if column.type_code == MYSQL_TYPE_FLOAT:
            return struct.pack("<f", float(ours)) == struct.pack("<f", theirs)
        return float(ours) == theirs
    return ours == _as_ours(theirs, column)


def test_same_rows_as_python_mysql_replication(mariadb: MariaDB) -> None:
    schema = new_schema(mariadb)
    for table, ddl in WORKLOAD_TABLES.items():
        mariadb.execute(f"CREATE TABLE `{schema}`.{table} {ddl}")
    start = mariadb.binlog_position()
    _workload(mariadb, schema)
    ours = [c for t in drain(mariadb, Position(*start)) for c in t.changes if c.schema == schema]
    theirs = _theirs(mariadb, schema, start)
    assert len(ours) == len(theirs) > 100
    compared = 0
    for change, (table, kind, before, after) in zip(ours, theirs, strict=True):
        assert (change.table, change.kind) == (table, kind)
        for image, their_image in ((change.before, before), (change.after, after)):
            assert (image is None) == (their_image is None)
            if image is None:
                continue
            assert tuple(their_image) == change.columns
            for column, value in zip(change.table_info.columns, image, strict=True):
                assert _same(value, their_image[column.name], column), (
                    f"{table}.{column.name}: ours {value!r}, theirs {their_image[column.name]!r}"
                )
                compared += 1
    assert compared > 1900
