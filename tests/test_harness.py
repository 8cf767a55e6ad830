"""The harness really starts MariaDB with the binlog on, and the store is the one asked for."""

import os

from django.db import connection

from tests.helpers.mariadb import MariaDB


def test_mariadb_writes_rows_to_its_binlog(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    assert server.query("SELECT @@log_bin, @@binlog_format, @@binlog_row_image") == [(1, "ROW", "FULL")]
    before_file, before_pos = server.binlog_position()
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(10))", f"INSERT INTO `{schema}`.t VALUES (1, 'x')"
    )
    events = server.query(f"SHOW BINLOG EVENTS IN '{before_file}' FROM {before_pos}")
    kinds = [row[2] for row in events]
    assert "Table_map" in kinds
    assert "Write_rows_v1" in kinds
    assert server.binlog_position()[1] > before_pos


def test_both_servers_differ_only_in_row_metadata(mariadb: MariaDB, mariadb_no_metadata: MariaDB) -> None:
    assert mariadb.query("SELECT @@binlog_row_metadata") == [("FULL",)]
    assert mariadb_no_metadata.query("SELECT @@binlog_row_metadata") == [("NO_LOG",)]
    assert mariadb.port != mariadb_no_metadata.port


def test_replication_user_can_read_the_binlog(mariadb: MariaDB) -> None:
    import pymysql

    with pymysql.connect(**mariadb.replication_settings()) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        assert cur.fetchone()[0].startswith("binlog.")


def test_store_is_the_one_asked_for(db: None) -> None:
    expected = os.environ.get("RELAY_TEST_STORE", "postgres")
    assert connection.vendor == ("postgresql" if expected == "postgres" else "sqlite")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
