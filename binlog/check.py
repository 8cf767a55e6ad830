"""The preflight check: what a source lacks for row-based replication to the relay, one line per item."""

from __future__ import annotations

import re
from typing import Any

import pymysql

from binlog.connection import ReplicationConnection
from binlog.errors import BinlogError
from binlog.settings import SourceSettings


def _variable(conn: ReplicationConnection, name: str) -> str | None:
    try:
        rows = conn.query(f"SELECT @@global.{name}")
    except pymysql.err.MySQLError:
        return None  # the server has no such variable
    value = rows[0][0] if rows else None
    if isinstance(value, bytes):
        value = value.decode()
    return None if value is None else str(value)


def preflight(settings: SourceSettings) -> list[str]:
    """Problems found (empty when the source is ready). Each is one line saying what to change."""
    problems: list[str] = []
    conn = ReplicationConnection(settings)
    try:
        conn.connect()
    except BinlogError as exc:
        return [f"connection: {exc}"]
    try:
        if _variable(conn, "log_bin") not in ("1", "ON"):
            problems.append("log_bin is OFF: start the source with --log-bin (no binary log to read)")
        binlog_format = (_variable(conn, "binlog_format") or "").upper()
        if binlog_format != "ROW":
            problems.append(f"binlog_format is {binlog_format or 'unknown'}: set binlog_format=ROW")
        row_image = (_variable(conn, "binlog_row_image") or "FULL").upper()
        if row_image != "FULL":
            problems.append(
                f"binlog_row_image is {row_image}: set binlog_row_image=FULL (otherwise before images hold only the "
                "key and updates only the changed columns)"
            )
        metadata = _variable(conn, "binlog_row_metadata")
        if metadata is None:
            problems.append(
                "binlog_row_metadata is not supported by this server version: column names will come from "
                "information_schema (needs SELECT on the tables)"
            )
        elif metadata.upper() != "FULL":
            problems.append(
                f"binlog_row_metadata is {metadata.upper()}: set binlog_row_metadata=FULL so column names, "
                "signedness and ENUM/SET labels travel with the events"
            )
        if "PARTIAL_JSON" in (_variable(conn, "binlog_row_value_options") or "").upper():
            problems.append("binlog_row_value_options is PARTIAL_JSON: set binlog_row_value_options=''")
        if (_variable(conn, "encrypt_binlog") or "0") in ("1", "ON"):
            problems.append("encrypt_binlog is ON: fine for replication, but binlog files cannot be read from disk")
        try:
            if not conn.query(conn.master_status_statement()):
                problems.append("no binary log status: the user lacks REPLICATION CLIENT (BINLOG MONITOR on MariaDB)")
        except pymysql.err.MySQLError as exc:
            problems.append(f"privilege: REPLICATION CLIENT (BINLOG MONITOR on MariaDB) is missing ({exc.args[-1]})")
        try:
            conn.register(settings.server_id)
        except BinlogError as exc:
            problems.append(f"privilege: REPLICATION SLAVE is missing ({exc})")
    finally:
        conn.close()
    try:
        schema = pymysql.connect(**settings.schema_connect_args())
        try:
            with schema.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS")
        finally:
            schema.close()
    except pymysql.err.MySQLError as exc:
        problems.append(f"information_schema cannot be read with the schema credentials ({exc.args[-1]})")
    return problems


#: The tables with foreign keys (REFERENTIAL_CONSTRAINTS, which has their rules, shows only tables the user holds
#: more than SELECT on; KEY_COLUMN_USAGE shows them to SELECT, and SHOW CREATE TABLE has the rules).
FOREIGN_KEY_TABLES_SQL = (
    "SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE"
    " WHERE REFERENCED_TABLE_NAME IS NOT NULL ORDER BY TABLE_SCHEMA, TABLE_NAME"
)
_CONSTRAINT = re.compile(r"^\s*CONSTRAINT `((?:[^`]|``)*)` FOREIGN KEY \(.*?\) REFERENCES (.+?) \(.*?\)(.*?),?$")
_ACTION = re.compile(r"ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT)")


def cascading_foreign_keys(connect_args: dict[str, Any]) -> list[str]:
    """The source's foreign keys that change rows of their own table when the parent's change (ON DELETE or ON
    UPDATE CASCADE, SET NULL, SET DEFAULT), one line each. The source applies those changes inside the statement
    and writes none of them to the binlog (a replica's own foreign keys repeat them), so no reader of rows sees
    them."""

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def quoted(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    conn = pymysql.connect(**connect_args)
    lines = []
    try:
        with conn.cursor() as cur:
            cur.execute(FOREIGN_KEY_TABLES_SQL)
            for schema, table in [(text(a), text(b)) for a, b in cur.fetchall()]:
                cur.execute(f"SHOW CREATE TABLE {quoted(schema)}.{quoted(table)}")
                for line in text(cur.fetchone()[1]).splitlines():
                    found = _CONSTRAINT.match(line)
                    actions = _ACTION.findall(found.group(3)) if found else []
                    if found and actions:
                        parent = found.group(2).replace("`", "")
                        parent = parent if "." in parent else f"{schema}.{parent}"
                        done = ", ".join(f"ON {verb} {rule}" for verb, rule in actions)
                        lines.append(f"{schema}.{table} ({found.group(1).replace('``', '`')} -> {parent} {done})")
    finally:
        conn.close()
    return lines


def summary(settings: SourceSettings) -> dict[str, Any]:
    """The source's replication-relevant settings, for display."""
    conn = ReplicationConnection(settings)
    conn.connect()
    try:
        names = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "binlog_checksum", "server_id")
        info: dict[str, Any] = {"version": conn.version}
        for name in names:
            info[name] = _variable(conn, name)
        return info
    finally:
        conn.close()
