"""The schema history in the decoder: names of their own time on a source without row metadata, positional names
where the history cannot vouch for them, and ``python -m binlog dump --follow-ddl``.

The property checked: every text column holds its own name as its value, so any mix-up of names shows.
"""

from __future__ import annotations

import io
import logging
import os
from contextlib import redirect_stdout

import pytest

from binlog import Position, read_binlog_files
from binlog.cli import main
from binlog.schemahistory import REREAD_STATEMENT, SchemaHistory, read_current, read_model
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
    assert [v.baseline for v in history.tables()[(schema, "t")]] == [True]
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
