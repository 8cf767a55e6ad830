"""The schema history in the decoder: names of their own time on a source without row metadata, positional names
where the history cannot vouch for them, and ``python -m binlog dump --follow-ddl``.

The property checked: every text column holds its own name as its value, so any mix-up of names shows.
"""

from __future__ import annotations

import io
import logging
import os
import struct
from contextlib import redirect_stdout

import pymysql
import pytest

from binlog import Position, read_binlog_files
from binlog.cli import main
from binlog.ddl import apply_statement
from binlog.events import parse_query
from binlog.schemahistory import MARK_STALE, MARK_UNREADABLE, REREAD_STATEMENT, SchemaHistory, read_current, read_model
from binlog.schemamodel import SchemaModel
from tests.helpers.mariadb import MariaDB


def _ddl_and_rows(server: MariaDB, schema: str) -> None:
    """DDL and inserts back to back; each insert puts each text column's own name into it."""
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'a', 'b')",
        "ALTER TABLE t CHANGE a c VARCHAR(20), CHANGE b a VARCHAR(20)",  # same types, names swapped around
        "INSERT INTO t VALUES (2, 'c', 'a')",
        "ALTER TABLE t ADD COLUMN `x y` VARCHAR(20) FIRST, MODIFY c VARCHAR(20) AFTER a",
        "INSERT INTO t VALUES ('x y', 3, 'a', 'c')",
        "/*!40000 ALTER TABLE t RENAME COLUMN `x y` TO z */",
        "INSERT INTO t VALUES ('z', 4, 'a', 'c')",
        "RENAME TABLE t TO u",
        "INSERT INTO u VALUES ('z', 5, 'a', 'c')",
        database=schema,
    )


def _check_own_names(changes: list[tuple[str, dict[str, object]]]) -> None:
    assert len(changes) == 5
    for _table, row in changes:
        for name, value in row.items():
            if name != "id":
                assert value == name, row


def test_history_gives_names_of_their_own_time(mariadb_no_metadata: MariaDB) -> None:
    server = mariadb_no_metadata
    schema = "hist1"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    file, pos = server.binlog_position()
    query = lambda sql, *params: server.query(sql, *params)  # noqa: E731
    baseline = read_model(query, [schema])
    _ddl_and_rows(server, schema)
    history = SchemaHistory()
    history.set_baseline(baseline, Position(file, pos))
    files = [p for p in server.binlog_files() if p.name >= file]
    changes = [
        (c.table, c.as_dict("after"))
        for trx in read_binlog_files(files, schema_provider=history, start=pos)
        for c in trx.changes
        if c.schema == schema
    ]
    _check_own_names(changes)
    assert history.problems == 0
    versions = history.tables()
    assert [v.statement.split()[0] for v in versions[(schema, "t")]] == [
        "CREATE",
        "ALTER",
        "ALTER",
        "/*!40000",
        "RENAME",
    ]
    assert versions[(schema, "t")][-1].definition is None  # renamed away
    assert [c.name for c in versions[(schema, "u")][-1].definition.columns] == ["z", "id", "a", "c"]  # type: ignore[union-attr]


def test_positional_names_when_the_history_disagrees(mariadb_no_metadata: MariaDB) -> None:
    """A history that missed a DDL (here: baseline after it) yields @1, @2... and one report, never wrong names."""
    server = mariadb_no_metadata
    schema = "hist2"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20))", database=schema)
    file, pos = server.binlog_position()
    stale = read_model(lambda sql, *params: server.query(sql, *params), [schema])
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("ALTER TABLE t ADD COLUMN b INT")  # not in the binlog: the history cannot know it
        cur.execute("SET sql_log_bin = 1")
        cur.execute("INSERT INTO t VALUES (1, 'a', 7)")
        cur.execute("INSERT INTO t VALUES (2, 'a', 8)")
    problems: list[str] = []
    history = SchemaHistory(on_problem=problems.append)
    history.set_baseline(stale, Position(file, pos))
    files = [p for p in server.binlog_files() if p.name >= file]
    changes = [c for trx in read_binlog_files(files, schema_provider=history, start=pos) for c in trx.changes]
    assert [c.columns for c in changes] == [("@1", "@2", "@3")] * 2
    assert len(problems) == 1 and f"{schema}.t" in problems[0] and "id int(11)" in problems[0]


def test_dump_follow_ddl(mariadb_no_metadata: MariaDB) -> None:
    server = mariadb_no_metadata
    schema = "hist3"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    server.execute("FLUSH BINARY LOGS")  # the dump reads the files from here on
    start_file, _ = server.binlog_position()
    _ddl_and_rows_after_create(server, schema)
    files = [str(p) for p in server.binlog_files() if p.name >= start_file]
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            ["dump", "--follow-ddl", "--host", server.host, "--port", str(server.port), "--user", "root", *files]
        )
    assert code == 0
    lines = [line for line in out.getvalue().splitlines() if f"{schema}.v" in line]
    assert lines and all("after: id='1', a='a', b='b'" in line for line in lines), lines
    assert os.path.basename(files[0]) == start_file


def _ddl_and_rows_after_create(server: MariaDB, schema: str) -> None:
    server.execute(
        "CREATE TABLE v (id INT PRIMARY KEY, b VARCHAR(20), a VARCHAR(20))",
        "ALTER TABLE v CHANGE a tmp VARCHAR(20)",
        "ALTER TABLE v CHANGE b a VARCHAR(20), CHANGE tmp b VARCHAR(20)",
        "INSERT INTO v VALUES (1, 'a', 'b')",
        "ALTER TABLE v ADD COLUMN c INT",
        "ALTER TABLE v DROP COLUMN c",
        database=schema,
    )


def test_a_lost_table_is_re_read_only_when_provably_current(mariadb_no_metadata: MariaDB) -> None:
    """After a mismatch the table keeps positional names until the decoder stands at the source's position with
    nothing read meanwhile; then information_schema is taken as the table's version from that position on."""
    server = mariadb_no_metadata
    schema = "hist4"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20))", database=schema)
    query = lambda sql, *params: server.query(sql, *params)  # noqa: E731
    file, pos = server.binlog_position()
    stale = read_model(query, [schema])
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("ALTER TABLE t ADD COLUMN b VARCHAR(20)")  # not in the binlog: the history cannot know it
        cur.execute("SET sql_log_bin = 1")
        cur.execute("INSERT INTO t VALUES (1, 'a', 'b')")
    problems: list[str] = []
    history = SchemaHistory(on_problem=problems.append, reread=lambda schemas: read_current(query, schemas))
    history.set_baseline(stale, Position(file, pos))

    def read(start_file: str, start: int) -> list[tuple[str, ...]]:
        files = [p for p in server.binlog_files() if p.name >= start_file]
        return [
            c.columns
            for trx in read_binlog_files(files, schema_provider=history, start=start)
            for c in trx.changes
            if c.schema == schema
        ]

    assert read(file, pos) == [("@1", "@2", "@3")]
    decoder_at = server.binlog_position()
    server.execute("INSERT INTO t VALUES (2, 'a', 'b')", database=schema)  # the source moves on: not current
    assert not history.caught_up(Position(*decoder_at))
    # No new layout, only the mark (kept with the versions, so that a restart keeps it too).
    assert [(v.baseline, v.mark) for v in history.tables()[(schema, "t")]] == [(True, ""), (False, MARK_STALE)]
    assert read(*decoder_at) == [("@1", "@2", "@3")]  # still lost: positional, never guessed
    now = server.binlog_position()
    assert history.caught_up(Position(*now))
    reread = history.tables()[(schema, "t")][-1]
    assert (reread.statement, reread.position.file, reread.position.pos) == (REREAD_STATEMENT, *now)
    assert reread.definition is not None and [c.name for c in reread.definition.columns] == ["id", "a", "b"]
    server.execute("INSERT INTO t VALUES (3, 'a', 'b')", database=schema)
    assert read(*now) == [("id", "a", "b")]
    assert len(problems) == 2 and "does not match" in problems[0] and "re-read" in problems[1], problems


def test_gtid_positions_and_a_start_by_gtid_alone(
    mariadb_no_metadata: MariaDB, caplog: pytest.LogCaptureFixture
) -> None:
    """Each version carries its DDL's GTID; a start by GTID alone drops the versions the GTID state does not contain;
    a start before the baseline says so in the log."""
    server = mariadb_no_metadata
    schema = "hist5"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    before_baseline = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=schema)
    read = read_current(lambda sql, *params: server.query(sql, *params), [schema])
    assert read is not None
    baseline, at = read
    assert at.gtid == str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    gtids = []
    for statement in ("ALTER TABLE t ADD COLUMN a INT", "ALTER TABLE t ADD COLUMN b INT"):
        with server.connect(schema) as conn, conn.cursor() as cur:
            cur.execute(statement)
            cur.execute("SELECT @@last_gtid")
            gtids.append(str(cur.fetchone()[0]))
    history = SchemaHistory()
    history.set_baseline(baseline, at)
    files = [p for p in server.binlog_files() if p.name >= at.file]
    for _ in read_binlog_files(files, schema_provider=history, start=at.pos):
        pass
    assert [v.position.gtid for v in history.tables()[(schema, "t")]] == [at.gtid, *gtids]

    history.rewind(Position("", 4, gtids[0]))  # after the first ALTER, before the second
    assert [v.position.gtid for v in history.tables()[(schema, "t")]] == [at.gtid, gtids[0]]
    assert [c.name for c in history.model.get(schema, "t").columns] == ["id", "a"]  # type: ignore[union-attr]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="binlog.schemahistory"):
        history.rewind(Position("", 4, gtids[1]))
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        history.rewind(Position("", 4, before_baseline))
        history.rewind(Position(at.file, 4))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and all("before the schema baseline" in w for w in warnings), warnings
    assert f"GTID {before_baseline}" in warnings[0] and f"{at.file}:4" in warnings[1]


def _rows_by_table(server: MariaDB, schema: str, history: SchemaHistory, start: tuple[str, int]) -> dict[str, list]:
    files = [p for p in server.binlog_files() if p.name >= start[0]]
    rows: dict[str, list] = {}
    for trx in read_binlog_files(files, schema_provider=history, start=start[1]):
        for change in trx.changes:
            if change.schema == schema:
                rows.setdefault(change.table, []).append(change.as_dict("after"))
    return rows


def _fresh_history(server: MariaDB, schema: str, *tables: str) -> tuple[SchemaHistory, tuple[str, int], list[str]]:
    """``schema`` made anew with ``tables`` (each "name (columns)", as CREATE TABLE takes it), and a history whose
    baseline is read now; the problems it reports come in the list."""
    server.execute(
        f"DROP DATABASE IF EXISTS {schema}",
        f"CREATE DATABASE {schema}",
        *(f"CREATE TABLE {schema}.{t}" for t in tables),
    )
    problems: list[str] = []
    history, start = _history_from_now(server, schema, problems)
    return history, start, problems


def _history_from_now(server: MariaDB, schema: str, problems: list[str]) -> tuple[SchemaHistory, tuple[str, int]]:
    read = read_current(lambda sql, *params: server.query(sql, *params), [schema])
    assert read is not None
    model, at = read
    history = SchemaHistory(on_problem=problems.append)
    history.set_baseline(model, at)
    return history, (at.file, at.pos)


def latin1_connection(server: MariaDB, database: str | None = None) -> pymysql.Connection:
    """A session in latin1 (SET NAMES latin1, as legacy PHP applications send their statements)."""
    return server.connect(database, charset="latin1")


def test_labels_and_names_of_ddl_in_the_stream_are_the_servers(mariadb_no_metadata: MariaDB) -> None:
    """A label with a backslash, and names and labels of DDL sent from a latin1 connection (SET NAMES latin1, as
    legacy PHP applications do), come out as SELECT shows them."""
    server = mariadb_no_metadata
    schema = "hist6"
    history, start, problems = _fresh_history(server, schema)
    server.execute(
        r"CREATE TABLE t1 (id INT PRIMARY KEY, e ENUM('a\\b', 'plain'), s SET('x\\y', 'z'))",
        r"INSERT INTO t1 VALUES (1, 'a\\b', 'x\\y,z')",
        database=schema,
    )
    with latin1_connection(server, schema) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t2 (id INT PRIMARY KEY, e ENUM('café', 'thé'), `prénom` VARCHAR(20))")
        cur.execute("INSERT INTO t2 VALUES (1, 'thé', 'x')")
    assert server.query(f"SELECT e, s FROM {schema}.t1") == [("a\\b", "x\\y,z")]
    rows = _rows_by_table(server, schema, history, start)
    assert rows == {
        "t1": [{"id": "1", "e": "a\\b", "s": "x\\y,z"}],
        "t2": [{"id": "1", "e": "thé", "prénom": "x"}],
    }
    assert problems == []


def test_ddl_is_read_under_its_sessions_sql_mode(mariadb_no_metadata: MariaDB) -> None:
    """ANSI_QUOTES makes "..." a name, NO_BACKSLASH_ESCAPES makes a backslash itself: the event carries the session's
    sql_mode, and the DDL is read as the server read it."""
    server = mariadb_no_metadata
    schema = "hist8"
    history, start, problems = _fresh_history(server, schema)
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES'")
        cur.execute("CREATE TABLE \"quoted t\" (\"my id\" INT PRIMARY KEY, e ENUM('it''s', 'x'))")
        cur.execute("INSERT INTO \"quoted t\" VALUES (1, 'it''s')")
        cur.execute("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
        cur.execute("CREATE TABLE plain (id INT PRIMARY KEY, e ENUM('a\\b', 'c\\'))")
        cur.execute("INSERT INTO plain VALUES (1, 'a\\b'), (2, 'c\\')")
    assert server.query(f"SELECT e FROM {schema}.plain ORDER BY id") == [("a\\b",), ("c\\",)]
    assert _rows_by_table(server, schema, history, start) == {
        "quoted t": [{"my id": "1", "e": "it's"}],
        "plain": [{"id": "1", "e": "a\\b"}, {"id": "2", "e": "c\\"}],
    }
    assert problems == []


def test_compressed_columns_keep_their_names(mariadb_no_metadata: MariaDB) -> None:
    """A COMPRESSED VARCHAR's TABLE_MAP length counts one byte more than its declared bytes (the byte that says how a
    value is compressed): its table has its names, from the baseline and from DDL in the stream alike."""
    server = mariadb_no_metadata
    schema = "hist9"
    history, start, problems = _fresh_history(
        server,
        schema,
        "old (id INT PRIMARY KEY, v VARCHAR(64) COMPRESSED, w VARCHAR(10) CHARSET latin1 COMPRESSED)",
    )
    server.execute(
        "INSERT INTO old VALUES (1, 'v', 'w')",
        "CREATE TABLE new (id INT PRIMARY KEY, a VARBINARY(300) COMPRESSED, b TEXT COMPRESSED)",
        "INSERT INTO new VALUES (1, 'a', 'b')",
        "ALTER TABLE new CHANGE a c VARCHAR(20) COMPRESSED FIRST",
        "INSERT INTO new VALUES ('c', 2, 'b')",
        database=schema,
    )
    assert _rows_by_table(server, schema, history, start) == {
        "old": [{"id": "1", "v": "v", "w": "w"}],
        "new": [{"id": "1", "a": b"a", "b": "b"}, {"c": "c", "id": "2", "b": "b"}],
    }
    assert problems == []


def test_a_temporary_table_renamed_onto_a_tables_name_leaves_both_in_doubt(mariadb_no_metadata: MariaDB) -> None:
    """A session logging rows renames its temporary table to the name of a table (the server allows it, and logs the
    RENAME as if of the table its old name hides): the tables it names go out with positional names, never the one
    under the other's names."""
    server = mariadb_no_metadata
    schema = "hist10"
    history, start, problems = _fresh_history(
        server,
        schema,
        "u (id INT PRIMARY KEY, a VARCHAR(20))",
        "u2 (id INT PRIMARY KEY, b VARCHAR(20))",
    )
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'ROW'")
        cur.execute("CREATE TEMPORARY TABLE u (z INT)")
        cur.execute("RENAME TABLE u TO u2")
        server.execute("INSERT INTO u VALUES (1, 'a')", "INSERT INTO u2 VALUES (2, 'b')", database=schema)
    assert _rows_by_table(server, schema, history, start) == {
        "u": [{"@1": "1", "@2": "a"}],
        "u2": [{"@1": "2", "@2": "b"}],
    }
    assert "RENAME TABLE onto hist10.u2, which exists" in problems[0]


def test_a_ddl_that_failed_on_the_source_leaves_its_tables_in_doubt(mariadb_no_metadata: MariaDB) -> None:
    """A CREATE OR REPLACE TABLE that fails drops the table and makes none, and is logged with its error: the history
    takes nothing from its text, so the table a CREATE TABLE IF NOT EXISTS then makes is not given the failed
    statement's names."""
    server = mariadb_no_metadata
    schema = "hist11"
    history, start, problems = _fresh_history(
        server,
        schema,
        "v (id INT PRIMARY KEY, a VARCHAR(20))",
    )
    with pytest.raises(pymysql.err.OperationalError):
        server.execute(
            "CREATE OR REPLACE TABLE v (id INT PRIMARY KEY, b VARCHAR(20), c INT, "
            "FOREIGN KEY (c) REFERENCES nothere(id))",
            database=schema,
        )
    server.execute(
        "CREATE TABLE IF NOT EXISTS v (id INT PRIMARY KEY, x VARCHAR(20), y INT)",
        "INSERT INTO v VALUES (1, 'x', 2)",
        database=schema,
    )
    assert _rows_by_table(server, schema, history, start) == {"v": [{"@1": "1", "@2": "x", "@3": "2"}]}
    assert "it failed on the source (error 1005)" in problems[0]


def test_a_ddl_behind_set_statement_sql_mode_is_read_only_where_every_sql_mode_reads_it_alike(
    mariadb_no_metadata: MariaDB,
) -> None:
    """SET STATEMENT sql_mode = ... FOR: the server reads the statement under the session's sql_mode and runs it
    under the one given, which the binlog carries. A text that reads alike under either is applied; one that does
    not ("a\\b" is a name under ANSI_QUOTES, a string with an escape without) leaves its table in doubt."""
    server = mariadb_no_metadata
    schema = "hist12"
    history, start, problems = _fresh_history(
        server,
        schema,
        "t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))",
        "u (id INT PRIMARY KEY, a VARCHAR(20))",
    )
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES'")
        cur.execute("SET STATEMENT sql_mode = '' FOR ALTER TABLE t RENAME COLUMN a TO x, RENAME COLUMN b TO a")
        cur.execute("SET STATEMENT sql_mode = '' FOR ALTER TABLE u ADD \"c\\b\" VARCHAR(20) FIRST")
        cur.execute("INSERT INTO t VALUES (1, 'x', 'a')")
        cur.execute("INSERT INTO u VALUES ('c', 2, 'a')")
    assert [row[0] for row in server.query(f"SHOW COLUMNS FROM {schema}.u")] == ["c\\b", "id", "a"]
    assert _rows_by_table(server, schema, history, start) == {
        "t": [{"id": "1", "x": "x", "a": "a"}],
        "u": [{"@1": "c", "@2": "2", "@3": "a"}],
    }
    assert "SET STATEMENT sets the sql_mode" in problems[0]


def test_compressed_ddl_is_read_in_its_client_charset(mariadb_no_metadata: MariaDB) -> None:
    """MariaDB's log_bin_compress writes a long statement as a QUERY_COMPRESSED event: it is uncompressed to its bytes,
    then read in the client's charset like any other (a latin1 session's names come out right)."""
    server = mariadb_no_metadata
    schema = "hist7"
    history, start, problems = _fresh_history(server, schema)
    server.execute("SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    try:
        with latin1_connection(server, schema) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t3 (id INT PRIMARY KEY, `prénom` VARCHAR(20), e ENUM('café', 'thé'))")
            cur.execute("INSERT INTO t3 VALUES (1, 'x', 'café')")
    finally:
        server.execute("SET GLOBAL log_bin_compress = OFF")
    with latin1_connection(server) as conn, conn.cursor() as cur:  # the events' text is in their own charset
        cur.execute(f"SHOW BINLOG EVENTS IN '{start[0]}' FROM {start[1]}")
        assert "Query_compressed" in [row[2] for row in cur.fetchall()]
    assert _rows_by_table(server, schema, history, start) == {"t3": [{"id": "1", "prénom": "x", "e": "café"}]}
    assert problems == []


def _query_event_body(collation_id: int, schema: bytes, statement: bytes) -> bytes:
    """A QUERY event's body: the post-header (13 bytes), status variables Q_FLAGS2, Q_SQL_MODE and Q_CHARSET_CODE
    (character_set_client, collation_connection, collation_server), the default database and the statement."""
    status = bytes([0]) + bytes(4) + bytes([1]) + bytes(8) + bytes([4]) + struct.pack("<HHH", collation_id, 45, 45)
    post_header = struct.pack("<IIBHH", 1, 0, len(schema), 0, len(status))
    return post_header + status + schema + b"\0" + statement


def test_ddl_its_charset_cannot_decode_makes_the_table_positional() -> None:
    """A statement is read in its client charset; one whose bytes that charset cannot decode (here: an unknown
    charset id) is reported as unreadable, with the tables it may name, and never applied with a guessed name."""
    statement = "ALTER TABLE `café` RENAME COLUMN a TO b".encode("latin1")
    schema, text, _ = parse_query(_query_event_body(8, b"s", statement), 13)  # 8: latin1_swedish_ci
    assert (schema, text) == ("s", "ALTER TABLE `café` RENAME COLUMN a TO b")
    schema, unknown, _ = parse_query(_query_event_body(0xFFF0, b"s", statement), 13)
    assert unknown == "ALTER TABLE `caf\udce9` RENAME COLUMN a TO b"

    problems: list[str] = []
    history = SchemaHistory(on_problem=problems.append)
    model = SchemaModel()
    apply_statement(model, "s", "CREATE TABLE `café` (a INT)")
    apply_statement(model, "s", "CREATE TABLE `caf` (a INT)")
    history.set_baseline(model, Position("binlog.000001", 4))
    history.statement(schema, unknown, Position("binlog.000001", 400))
    assert len(problems) == 1 and "client charset" in problems[0] and "caf\\xe9" in problems[0], problems
    # Every table whose name those bytes may be (any characters in their place), and only those.
    assert ("s", "café") in history.unreadable and ("s", "caf") not in history.unreadable
    # Nothing applied: only the mark, on the layout from before.
    assert [(v.table, v.statement, v.mark) for v in history.versions[2:]] == [("café", unknown, MARK_UNREADABLE)]
    assert history.versions[2].definition == model.get("s", "café")
    # A new table with a label those bytes are in: not made with a guessed label (its rows get positional names).
    history.statement(schema, "CREATE TABLE t (e ENUM('caf\udce9'))", Position("binlog.000001", 450))
    assert len(problems) == 2 and history.model.get("s", "t") is None
    history.statement(schema, text, Position("binlog.000001", 500))
    assert [c.name for c in history.model.get("s", "café").columns] == ["b"]  # type: ignore[union-attr]


def test_labels_information_schema_cannot_show_are_not_given(mariadb_no_metadata: MariaDB) -> None:
    """information_schema (utf8mb3) shows 4-byte characters of labels as "?": a table read from it gives such
    columns' values as label numbers, reported once; the same table made by DDL in the stream has the labels."""
    server = mariadb_no_metadata
    schema = "hist7"
    server.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    columns = (
        "id INT PRIMARY KEY, eu ENUM('😀','𝄞x','a') COLLATE utf8mb4_bin, su SET('😀','ü','𝄞') COLLATE utf8mb4_bin, "
        "el ENUM('?','a') CHARACTER SET latin1"
    )
    server.execute(f"CREATE TABLE b ({columns})", database=schema)
    problems: list[str] = []
    history, start = _history_from_now(server, schema, problems)
    server.execute(f"CREATE TABLE s ({columns})", database=schema)
    for table in ("b", "s"):
        server.execute(
            f"INSERT INTO {table} VALUES (1, '😀', '😀,𝄞', '?'), (2, 'a', 'ü', 'a'), (3, '𝄞x', '', '?')",
            database=schema,
        )
    rows = _rows_by_table(server, schema, history, start)
    assert rows["s"] == [
        {"id": "1", "eu": "😀", "su": "😀,𝄞", "el": "?"},
        {"id": "2", "eu": "a", "su": "ü", "el": "a"},
        {"id": "3", "eu": "𝄞x", "su": "", "el": "?"},
    ]
    assert rows["b"] == [
        {"id": "1", "eu": "1", "su": "5", "el": "?"},
        {"id": "2", "eu": "3", "su": "2", "el": "a"},
        {"id": "3", "eu": "2", "su": "0", "el": "?"},
    ]
    assert len(problems) == 1, problems
    assert f"{schema}.b" in problems[0] and "eu enum(" in problems[0] and "su set(" in problems[0]
    assert "el enum(" not in problems[0]  # latin1 has no character information_schema cannot show


@pytest.mark.parametrize("prefix", ["", "SET STATEMENT max_statement_time=0 FOR "])
def test_a_create_redefines_a_table_whose_last_ddl_could_not_be_read(mariadb_no_metadata: MariaDB, prefix: str) -> None:
    """After DDL the history cannot read, the table's rows get positional names until a CREATE defines it whole
    again; a CREATE behind SET STATEMENT ... FOR does too (it was taken for another statement: names stayed @1...)."""
    server = mariadb_no_metadata
    schema = "histredefine"
    history, start, problems = _fresh_history(server, schema)
    with server.connect(schema) as conn, conn.cursor() as cur:
        # A byte the history cannot decode (armscii8 has no exact codec here): it cannot read the statement.
        cur.execute("SET NAMES armscii8")
        cur.execute(b"CREATE TABLE t (id INT PRIMARY KEY, v INT) COMMENT '\xe9'")
        cur.execute("SET NAMES utf8mb4")
        cur.execute("INSERT INTO t VALUES (3, 4)")
        cur.execute(f"{prefix}CREATE OR REPLACE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t VALUES (5, 6)")
    rows = _rows_by_table(server, schema, history, start)["t"]
    assert [sorted(row) for row in rows] == [["@1", "@2"], ["id", "v"]]
    assert len(problems) == 2 and "cannot apply the DDL" in problems[0] and "could not be read" in problems[1]


def test_an_unreadable_ddl_marks_the_tables_the_server_read_in_it() -> None:
    """The tables of a DDL the history cannot apply are read as the server read the statement (comments dropped,
    "..." a name under ANSI_QUOTES, every table of a list); one whose tables cannot be told marks every table."""
    from binlog.ddl import MODE_ANSI_QUOTES

    def history_of(*tables: str) -> tuple[SchemaHistory, list[str]]:
        problems: list[str] = []
        history = SchemaHistory(on_problem=problems.append)
        model = SchemaModel()
        for table in tables:
            apply_statement(model, "s", f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT)")
        history.set_baseline(model, Position("binlog.000001", 4))
        return history, problems

    unknown_column = "RENAME COLUMN nope TO b"  # a clause the history cannot apply
    for statement, sql_mode, marked in [
        (f"ALTER TABLE /* c */ t {unknown_column}", 0, {("s", "t")}),
        (f"/*!40000 ALTER TABLE s . /* c */ `t` {unknown_column} */", 0, {("s", "t")}),
        (f'ALTER TABLE "t" {unknown_column}', MODE_ANSI_QUOTES, {("s", "t")}),
        ("RENAME TABLE nope TO t2, u TO u2", 0, {("s", "nope"), ("s", "t2"), ("s", "u"), ("s", "u2")}),
    ]:
        history, problems = history_of("t", "u")
        history.statement("s", statement, Position("binlog.000001", 100), sql_mode)
        assert history.unreadable == marked, statement
        assert len(problems) == 1 and "cannot apply the DDL" in problems[0]
    history, problems = history_of("t", "u")
    history.statement("s", "ALTER TABLE `t ADD COLUMN b INT", Position("binlog.000001", 100))  # no words to read
    assert history.unreadable == {("s", "t"), ("s", "u")}
    assert len(problems) == 1 and "every table" in problems[0]


def test_a_tables_marks_go_with_its_layout() -> None:
    """A table whose layout the history doubts (its last DDL unreadable, or reported and waiting to be re-read)
    hands the doubt on with the layout: RENAME TABLE and ALTER TABLE ... RENAME TO move it to the new name (a swap
    through a third name too), CREATE TABLE ... LIKE copies it (it is no CREATE that says all of the table)."""
    history = SchemaHistory(reread=lambda schemas: None)
    model = SchemaModel()
    for table in ("t", "u"):
        apply_statement(model, "s", f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT, b INT)")
    history.set_baseline(model, Position("binlog.000001", 4))
    at = iter(range(100, 10_000, 100))
    for statement in [
        "ALTER TABLE t RENAME COLUMN nope TO b",  # unreadable
        "RENAME TABLE t TO t2",
        "CREATE TABLE l LIKE t2",
        "ALTER TABLE t2 RENAME TO t3",
        "RENAME TABLE t3 TO tmp, u TO t3, tmp TO u",
    ]:
        history.statement("s", statement, Position("binlog.000001", next(at)))
    assert history.unreadable == {("s", "l"), ("s", "u")}
    assert history.stale == {("s", "l"): ("s", "l"), ("s", "u"): ("s", "u")}
    history.statement("s", "CREATE OR REPLACE TABLE l (id INT PRIMARY KEY)", Position("binlog.000001", next(at)))
    assert history.unreadable == {("s", "u")}


def test_a_sessions_temporary_tables_end_with_its_drop() -> None:
    """The DROP TEMPORARY TABLE IF EXISTS the server logs for a session's temporary tables as it ends frees its
    thread id: a later session of that id altering t alters the real t."""
    model = SchemaModel()
    apply_statement(model, "s", "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(20))")
    history = SchemaHistory()
    history.set_baseline(model, Position("binlog.000001", 4))
    history.statement("s", "CREATE TEMPORARY TABLE t (x INT)", Position("binlog.000001", 100), session=8)
    history.statement("s", "ALTER TABLE t ADD COLUMN y INT", Position("binlog.000001", 200), session=8)
    history.statement("s", "ALTER TABLE t ADD COLUMN c INT", Position("binlog.000001", 300), session=9)
    history.statement("s", "DROP /*!40005 TEMPORARY */ TABLE IF EXISTS `t`", Position("binlog.000001", 400), session=8)
    assert history.temporary == {}
    history.statement("s", "ALTER TABLE t DROP COLUMN a", Position("binlog.000001", 500), session=8)
    definition = history.model.get("s", "t")
    assert definition is not None and [c.name for c in definition.columns] == ["id", "b", "c"]
