"""The schema history end to end: the worker live, lagging behind DDL, and killed between a DDL and its rows.

Property: every text column holds its own name as its value, so any column delivered under another's name shows.
"""

from __future__ import annotations

import random
import threading

import pytest
from django.test import Client as HttpClient

from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from relay import store
from relay.models import Change, Client, SchemaBaseline, SchemaVersion, WorkerStatus
from relay.store import rowcodec
from relay.web.metrics import render_metrics
from tests.helpers.processes import RelayProcess, relay_env
from tests.helpers.worker import caught_up, subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def _worker(server: MariaDB, start: tuple[str, int] | None = None) -> RelayProcess:
    args = ["runbinlog", "--batch-ms", "50"]
    if start:
        args += ["--from", f"{start[0]}:{start[1]}"]
    return RelayProcess(relay_env(server), *args).start()


def _steps(schema: str) -> list[str]:
    t = f"{schema}.t"
    return [
        f"INSERT INTO {t} VALUES (1, 'a', 'b')",
        f"ALTER TABLE {t} CHANGE a c VARCHAR(20), CHANGE b a VARCHAR(20)",
        f"INSERT INTO {t} VALUES (2, 'c', 'a')",
        f"ALTER TABLE {t} ADD COLUMN `x y` VARCHAR(20) FIRST, MODIFY c VARCHAR(20) AFTER a",
        f"INSERT INTO {t} VALUES ('x y', 3, 'a', 'c')",
        f"/*!40000 ALTER TABLE {t} RENAME COLUMN `x y` TO z */",
        f"INSERT INTO {t} VALUES ('z', 4, 'a', 'c')",
        f"ALTER TABLE {t} DROP COLUMN a",
        f"INSERT INTO {t} VALUES ('z', 5, 'c')",
    ]


def _execute(server: MariaDB, statement: str) -> str:
    """Runs a statement; its GTID."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(statement)
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])


def _rows(client_name: str) -> list[dict[str, str | None]]:
    client = Client.objects.get(name=client_name)
    changes = [Change.objects.get(id=change_id) for _, change_id in store.entry_change_ids(client.id, 0, 100)]
    return [{col.name: col.after for col in rowcodec.decode(change.data)} for change in changes]


SERVERS = {"none": "mariadb_no_metadata", "minimal": "mariadb_minimal_metadata", "full": "mariadb"}


@pytest.mark.parametrize("mode", ["live", "lagging", "kill"])
@pytest.mark.parametrize("metadata", ["none", "minimal", "full"])
def test_each_text_column_holds_its_own_name(metadata: str, mode: str, request: pytest.FixtureRequest) -> None:
    server: MariaDB = request.getfixturevalue(SERVERS[metadata])
    schema = f"sh_{metadata}_{mode}_{random.randrange(10**6)}"
    server.execute(
        f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))"
    )
    subscribe("c", 7, schema, "t")
    worker = _worker(server, server.binlog_position())
    wait_for(SchemaBaseline.objects.exists, timeout=60, message="the schema baseline")  # at the start position
    if mode == "lagging":
        assert worker.stop() == 0
    ddl_gtids = []
    for statement in _steps(schema):
        gtid = _execute(server, statement)
        if "ALTER" in statement:
            ddl_gtids.append(gtid)
        if mode == "kill" and "ALTER" in statement:
            caught_up(server, worker)  # the DDL is in the store with its checkpoint
            worker.kill()
            worker.wait()
            worker = _worker(server)
    if mode == "lagging":
        worker = _worker(server)
    caught_up(server, worker)
    rows = _rows("c")
    assert [row["id"] for row in rows] == ["1", "2", "3", "4", "5"]
    for row in rows:
        for name, value in row.items():
            if name != "id":
                assert value == name, rows
    versions = SchemaVersion.objects.filter(schema_name=schema, table_name="t", baseline=False)
    assert [v.gtid for v in versions.order_by("binlog_file", "binlog_pos")] == ddl_gtids  # a position's GTID part
    assert WorkerStatus.objects.get().schema_problems == 0
    worker.stop()
    server.execute(f"DROP DATABASE {schema}")


def _table_followed_by_a_worker(server: MariaDB, kind: str) -> tuple[str, RelayProcess]:
    """A new schema with a table t that client "c" subscribes to, and a worker caught up from the current position."""
    schema = f"sh_{kind}_{random.randrange(10**6)}"
    server.execute(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20))")
    subscribe("c", 7, schema, "t")
    worker = _worker(server, server.binlog_position())
    caught_up(server, worker)
    # The first start stores its checkpoint before it reads the baseline: wait for the baseline too, or an incident
    # made right now (invisible in the binlog) would already be part of it.
    wait_for(
        lambda: SchemaVersion.objects.filter(schema_name=schema, table_name="t").exists(),
        timeout=30,
        message="the baseline of the new table",
    )
    return schema, worker


def _lose_the_table(server: MariaDB, schema: str) -> None:
    """An incident: a column added with sql_log_bin=0, so the history cannot know it."""
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("ALTER TABLE t ADD COLUMN b VARCHAR(20)")
        cur.execute("SET sql_log_bin = 1")


def test_a_lost_table_is_re_read_once_the_worker_is_current(mariadb_no_metadata: MariaDB, viewer: HttpClient) -> None:
    """Rows after the incident go out with positional names and the problem is counted (/metrics, dashboard); at
    the next heartbeat with nothing pending the table is re-read, and later rows have their names again."""
    server = mariadb_no_metadata
    schema, worker = _table_followed_by_a_worker(server, "reread")
    _lose_the_table(server, schema)
    server.execute(f"INSERT INTO {schema}.t VALUES (1, 'a', 'b')")
    caught_up(server, worker)
    wait_for(
        lambda: SchemaVersion.objects.filter(schema_name=schema, statement__startswith="-- re-read").exists(),
        timeout=30,
        message="the table re-read from information_schema",
    )
    server.execute(f"INSERT INTO {schema}.t VALUES (2, 'a', 'b')")
    caught_up(server, worker)
    assert _rows("c") == [{"@1": "1", "@2": "a", "@3": "b"}, {"id": "2", "a": "a", "b": "b"}]
    reread = SchemaVersion.objects.get(schema_name=schema, statement__startswith="-- re-read")
    assert [c[0] for c in reread.columns] == ["id", "a", "b"]
    status = WorkerStatus.objects.get()
    assert status.schema_problems == 1 and f"{schema}.t" in status.last_schema_problem
    assert f'relay_schema_mismatches_total{{source="{status.source}"}} 1' in render_metrics()
    overview = viewer.get("/").content.decode()
    assert "Schema history problems" in overview and "does not match the history" in overview
    page = viewer.get("/schema/", {"q": f"{schema}.t"}).content.decode()
    assert f"{reread.binlog_file}:{reread.binlog_pos}" in page and "re-read from information_schema" in page
    worker.stop()
    server.execute(f"DROP DATABASE {schema}")


def test_rebaseline_command(mariadb_no_metadata: MariaDB) -> None:
    """manage.py rebaseline --table after an incident gives the table a version from the source's position on;
    without --table the whole history starts again there."""
    server = mariadb_no_metadata
    schema, worker = _table_followed_by_a_worker(server, "rebase")
    assert worker.stop() == 0
    _lose_the_table(server, schema)

    refused = RelayProcess(relay_env(server), "rebaseline", "--table", "t").start()
    assert refused.wait() == 1 and "expected SCHEMA.TABLE" in refused.output
    command = RelayProcess(relay_env(server), "rebaseline", "--table", f"{schema}.t").start()
    assert command.wait() == 0, command.output
    file, pos = server.binlog_position()
    assert f"{schema}.t from {file}:{pos}" in command.output and "b varchar(20)" in command.output
    version = SchemaVersion.objects.get(schema_name=schema, statement__contains="manage.py rebaseline")
    assert (version.binlog_file, version.binlog_pos, [c[0] for c in version.columns]) == (file, pos, ["id", "a", "b"])
    assert SchemaVersion.objects.filter(schema_name=schema, baseline=True).count() == 1  # the older one stays

    server.execute(f"INSERT INTO {schema}.t VALUES (1, 'a', 'b')")
    worker = _worker(server)  # from its checkpoint, before the re-read version: the history rewinds to it
    caught_up(server, worker)
    assert _rows("c") == [{"id": "1", "a": "a", "b": "b"}]
    assert WorkerStatus.objects.get().schema_problems == 0
    assert worker.stop() == 0

    whole = RelayProcess(relay_env(server), "rebaseline").start()
    assert whole.wait() == 0, whole.output
    base = SchemaBaseline.objects.get()
    assert (base.binlog_file, base.binlog_pos) == server.binlog_position() and base.gtid
    assert not SchemaVersion.objects.filter(baseline=False).exists()
    assert SchemaVersion.objects.filter(schema_name=schema, table_name="t", baseline=True).count() == 1
    server.execute(f"DROP DATABASE {schema}")


def test_a_start_by_gtid_alone_rewinds_the_history(mariadb_no_metadata: MariaDB) -> None:
    """--from-gtid at a state before all the DDL: the rows are delivered again, each under the names of its time,
    and the versions are made again once each."""
    server = mariadb_no_metadata
    schema = f"sh_gtid_{random.randrange(10**6)}"
    server.execute(
        f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))"
    )
    subscribe("c", 7, schema, "t")
    worker = _worker(server, server.binlog_position())
    wait_for(SchemaBaseline.objects.exists, timeout=60, message="the schema baseline")
    start_gtid = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    for statement in _steps(schema):
        server.execute(statement)
    caught_up(server, worker)
    assert worker.stop() == 0
    worker = RelayProcess(relay_env(server), "runbinlog", "--batch-ms", "50", "--from-gtid", start_gtid).start()
    wait_for(lambda: len(_rows("c")) == 10, timeout=60, message="the rows delivered again")
    rows = _rows("c")
    assert [row["id"] for row in rows] == ["1", "2", "3", "4", "5"] * 2
    for row in rows:
        for name, value in row.items():
            if name != "id":
                assert value == name, rows
    assert SchemaVersion.objects.filter(schema_name=schema, baseline=False).count() == 4
    assert WorkerStatus.objects.get().schema_problems == 0
    assert worker.stop() == 0
    server.execute(f"DROP DATABASE {schema}")


def test_uncertain_labels_are_kept_in_the_store() -> None:
    """A column whose labels information_schema may have mangled stays so across a save and a load; a baseline
    stored before that was recorded is told again from its labels."""
    from binlog.position import Position
    from binlog.schemahistory import Version
    from binlog.schemamodel import Column, TableDef
    from relay.store.schemahistory import StoreHistory

    mangled = Column("e", "enum", "enum('?','?x','a')", "utf8mb4", True, labels_uncertain=True)
    plain = Column("f", "enum", "enum('?','a')", "latin1", True)
    definition = TableDef((mangled, plain), (), "utf8mb4")
    history = StoreHistory("labels")
    history.save([Version("s", "t", Position("binlog.000001", 4), definition, "CREATE TABLE t LIKE u")])
    assert [v.definition for v in history.load()] == [definition]

    SchemaVersion.objects.filter(source="labels").update(
        columns=[list(c[:5]) for c in SchemaVersion.objects.get(source="labels").columns], baseline=True
    )
    assert [v.definition for v in history.load()] == [definition]
    SchemaVersion.objects.filter(source="labels").update(baseline=False)  # from DDL: its labels are the server's
    loaded = history.load()[0].definition
    assert loaded is not None and [c.labels_uncertain for c in loaded.columns] == [False, False]


def test_a_system_versioned_tables_hidden_columns_are_kept_in_the_store() -> None:
    """row_start and row_end stay hidden across a save and a load: a column added later still goes before them."""
    from binlog.ddl import apply_statement
    from binlog.position import Position
    from binlog.schemahistory import Version
    from binlog.schemamodel import SchemaModel
    from relay.store.schemahistory import StoreHistory

    model = SchemaModel()
    apply_statement(
        model, "s", "CREATE TABLE t (id INT PRIMARY KEY, e ENUM('?') CHARSET utf8mb4) WITH SYSTEM VERSIONING"
    )
    definition = model.tables[("s", "t")]
    assert [(c.name, c.hidden) for c in definition.columns] == [
        ("id", False),
        ("e", False),
        ("row_start", True),
        ("row_end", True),
    ]
    history = StoreHistory("versioned")
    history.save([Version("s", "t", Position("binlog.000001", 4), definition, "CREATE TABLE t ...")])
    loaded = history.load()[0].definition
    assert loaded == definition
    model.tables[("s", "t")] = loaded
    apply_statement(model, "s", "ALTER TABLE t ADD COLUMN z INT")
    assert [c.name for c in model.tables[("s", "t")].columns] == ["id", "e", "z", "row_start", "row_end"]


_SWAP = "RENAME COLUMN a TO b, RENAME COLUMN b TO a"


@pytest.mark.parametrize(
    ("statements", "subscribed"),
    [
        ([f"ALTER TABLE /* swap */ t {_SWAP}"], "t"),
        (["SET SESSION sql_mode = 'ANSI_QUOTES'", f'ALTER TABLE "t" {_SWAP}'], "t"),
        ([f"ALTER TABLE t {_SWAP}", "RENAME TABLE t TO t2"], "t2"),
        ([f"ALTER TABLE t {_SWAP}", "CREATE TABLE t2 LIKE t"], "t2"),
    ],
    ids=["comment", "ansi_quotes", "rename", "like"],
)
def test_a_table_after_an_unreadable_ddl_gets_positional_names(
    mariadb_no_metadata: MariaDB, statements: list[str], subscribed: str
) -> None:
    """Any ALTER of a table with a long UNIQUE key is unreadable to the history: the table it names (however the
    statement writes the name), and any table that takes its layout, get positional names, never the old ones."""
    server = mariadb_no_metadata
    schema = f"sh_unreadable_{random.randrange(10**6)}"
    server.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20), u TEXT, UNIQUE KEY (u))",
    )
    subscribe("c", 7, schema, subscribed)
    worker = _worker(server, server.binlog_position())
    wait_for(SchemaBaseline.objects.exists, timeout=60, message="the schema baseline")
    with server.connect(schema) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"INSERT INTO {subscribed} (id, a, b, u) VALUES (1, 'a', 'b', 'u')")
    caught_up(server, worker)
    rows = _rows("c")
    assert len(rows) == 1
    assert "@1" in rows[0] or (rows[0]["a"], rows[0]["b"]) == ("a", "b"), rows
    assert WorkerStatus.objects.get().schema_problems > 0
    worker.stop()
    server.execute(f"DROP DATABASE {schema}")


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_a_table_after_an_unreadable_ddl_keeps_positional_names_across_a_restart(
    mariadb_no_metadata: MariaDB, stop: str
) -> None:
    """The mark of an unreadable DDL is stored with the checkpoint that passes it: a worker stopped after it, before
    a re-read could happen (the source keeps writing elsewhere, so no heartbeat finds it still), gives the table's
    rows positional names after its restart too, not the layout from before the DDL."""
    server = mariadb_no_metadata
    schema = f"sh_restart_{stop}_{random.randrange(10**6)}"
    server.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20), u TEXT, UNIQUE KEY (u))",
        f"CREATE TABLE {schema}.busy (id INT AUTO_INCREMENT PRIMARY KEY)",
    )
    subscribe("c", 7, schema, "t")
    worker = _worker(server, server.binlog_position())
    wait_for(SchemaBaseline.objects.exists, timeout=60, message="the schema baseline")
    busy = threading.Event()

    def keep_writing() -> None:
        with server.connect(schema) as conn, conn.cursor() as cur:
            while not busy.is_set():
                cur.execute("INSERT INTO busy VALUES ()")
                busy.wait(0.02)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        server.execute(f"ALTER TABLE {schema}.t {_SWAP}", f"INSERT INTO {schema}.t VALUES (1, 'b', 'a', 'u1')")
        caught_up(server, worker)
        if stop == "clean":
            assert worker.stop() == 0
        else:
            worker.kill()
            worker.wait()
        server.execute(f"INSERT INTO {schema}.t VALUES (2, 'b', 'a', 'u2')")
        worker = _worker(server)
        caught_up(server, worker)
    finally:
        busy.set()
        writer.join()
    rows = _rows("c")
    assert [row.get("id", row.get("@1")) for row in rows] == ["1", "2"], rows
    assert "@1" in rows[0], rows
    for row in rows:  # a re-read may have come after all: then the names are the new ones
        assert "@1" in row or (row["a"], row["b"]) == ("a", "b"), rows
    assert WorkerStatus.objects.get().schema_problems > 0
    worker.stop()
    server.execute(f"DROP DATABASE {schema}")


def test_ddl_on_a_temporary_table_of_a_mixed_session_leaves_the_table_it_hides(mariadb_no_metadata: MariaDB) -> None:
    """A MIXED (or STATEMENT) session logs CREATE TEMPORARY TABLE, then its DDL on that temporary table as on any
    table: the ALTER changes the temporary t, not the real t it hides, and CREATE TABLE ... LIKE it takes the
    temporary layout; LIKE a temporary table whose layout the history cannot know (made by CREATE ... SELECT) gives
    a table of unknown layout, not that of the real table of its name. Later ROW inserts keep their own names, or
    get positional ones."""
    server = mariadb_no_metadata
    schema = f"sh_temporary_{random.randrange(10**6)}"
    server.execute(
        f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))"
    )
    subscribe("c", 7, schema, "t")
    subscribe("d", 7, schema, "u")
    subscribe("e", 7, schema, "v")
    worker = _worker(server, server.binlog_position())
    wait_for(SchemaBaseline.objects.exists, timeout=60, message="the schema baseline")
    with server.connect(schema) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = MIXED")
        cur.execute("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY, b VARCHAR(20), a VARCHAR(20))")
        cur.execute("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN b TO a")  # logged as is
        cur.execute("CREATE TABLE u LIKE t")  # id, a, b
        cur.execute("DROP TEMPORARY TABLE t")
        cur.execute(
            "CREATE TEMPORARY TABLE t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20)) "
            "SELECT 1 AS id, 'a' AS a, 'b' AS b"
        )
        cur.execute("CREATE TABLE v LIKE t")  # id, a, b
        cur.execute("DROP TEMPORARY TABLE t")
    server.execute(
        "INSERT INTO t (id, a, b) VALUES (1, 'a', 'b')",
        "INSERT INTO u (id, a, b) VALUES (2, 'a', 'b')",
        "INSERT INTO v (id, a, b) VALUES (3, 'a', 'b')",
        database=schema,
    )
    caught_up(server, worker)
    rows = {name: _rows(name) for name in "cde"}
    assert rows["c"] == [{"id": "1", "a": "a", "b": "b"}], rows
    assert rows["d"] == [{"id": "2", "a": "a", "b": "b"}], rows
    assert rows["e"] == [{"@1": "3", "@2": "a", "@3": "b"}], rows
    assert f"{schema}.v" in WorkerStatus.objects.get().last_schema_problem
    assert not SchemaVersion.objects.filter(schema_name=schema, table_name="t", baseline=False).exists()
    worker.stop()
    server.execute(f"DROP DATABASE {schema}")
