"""The schema model against a real MariaDB: seeded random DDL sequences, and every form of the issue by hand.

After each statement the server accepts, the model (binlog.ddl applied to the statement text, as the binlog carries
it) must equal information_schema for every table of the test's schemas: column names, DATA_TYPE, COLUMN_TYPE (so
signedness, lengths, ENUM/SET labels), charset, nullability, primary key.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pymysql
import pytest

from binlog import read_binlog_files
from binlog.ddl import DdlError, apply_statement, tokenize
from binlog.ddltables import tables_named
from binlog.schemahistory import read_model
from binlog.schemamodel import SchemaModel
from tests.helpers.mariadb import MariaDB

_TYPES = [
    "INT",
    "INT UNSIGNED",
    "TINYINT(3)",
    "SMALLINT ZEROFILL",
    "BIGINT UNSIGNED",
    "MEDIUMINT",
    "BOOL",
    "DECIMAL(8,3)",
    "NUMERIC(5)",
    "FLOAT",
    "FLOAT(30)",
    "DOUBLE",
    "REAL",
    "BIT(5)",
    "YEAR",
    "DATE",
    "TIME(3)",
    "DATETIME",
    "DATETIME(6)",
    "TIMESTAMP(2) NULL",
    "CHAR(3)",
    "VARCHAR(20)",
    "VARCHAR(10) CHARACTER SET latin1",
    "VARCHAR(7) COLLATE utf8mb4_bin",
    "NATIONAL VARCHAR(5)",
    "CHAR(4) CHARACTER SET binary",
    "BINARY(4)",
    "VARBINARY(9)",
    "TINYTEXT",
    "TEXT",
    "TEXT(300)",
    "MEDIUMTEXT CHARSET latin1",
    "LONGTEXT",
    "BLOB",
    "TINYBLOB",
    "JSON",
    "ENUM('a','b''c','d e')",
    "SET('x','y','z')",
    "INT8",
    "POINT",
    "GEOMETRY",
    "INET6",
    "VARCHAR(12) NOT NULL",
    "INT NOT NULL DEFAULT 5 COMMENT 'PRIMARY KEY'",
    "VARCHAR(6) DEFAULT 'a,b' NOT NULL",
]
_NAMES = ["a", "b", "c", "col d", "select", "Ünï", "x1", "order", "e`q"]


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class _Scenario:
    """Random DDL over a few tables of two schemas, only the statements the server accepts applied to the model."""

    def __init__(self, server: MariaDB, schemas: list[str], seed: int) -> None:
        self.server = server
        self.schemas = schemas
        self.rnd = random.Random(seed)
        self.conn = server.connect(schemas[0])
        self.model = self._read()
        self.applied = 0

    def _query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def _read(self) -> SchemaModel:
        return read_model(self._query, self.schemas)

    def tables(self) -> list[tuple[str, str]]:
        return sorted(self.model.tables)

    def column_names(self, key: tuple[str, str]) -> list[str]:
        found = self.model.tables.get(key)
        return [c.name for c in found.columns] if found else []

    def table_ref(self, key: tuple[str, str]) -> str:
        if key[0] == self.schemas[0] and self.rnd.random() < 0.5:
            return _q(key[1])  # unqualified: the QUERY event's default database
        return f"{_q(key[0])}.{_q(key[1])}"

    def new_name(self) -> str:
        return self.rnd.choice(["t1", "t2", "t 3", "Tab", "drop", "t5"]) + str(self.rnd.randint(0, 3))

    def coldef(self, name: str) -> str:
        return f"{_q(name)} {self.rnd.choice(_TYPES)}"

    def statement(self) -> str:
        r = self.rnd
        tables = self.tables()
        forms = ["create"] * 3 + ["create_db"] if len(tables) < 2 else ["create"]
        if tables:
            forms += ["alter"] * 8 + ["rename", "drop", "like", "convert", "pk", "rename_col", "drop_db", "swap"]
        form = r.choice(forms)
        if form == "create_db":
            return f"DROP DATABASE IF EXISTS {_q(self.schemas[1])}"
        if form == "create":
            names = r.sample(_NAMES, r.randint(1, 5))
            defs = [self.coldef(n) for n in names]
            if r.random() < 0.5:
                defs.append(
                    f"PRIMARY KEY ({', '.join(_q(n) for n in r.sample(names, r.randint(1, min(2, len(names)))))})"
                )
            options = r.choice(
                ["", " ENGINE=InnoDB", " DEFAULT CHARSET=latin1", " CHARACTER SET = utf8mb3", " COLLATE utf8mb4_bin"]
            )
            schema = r.choice(self.schemas)
            ref = _q(self.new_name()) if schema == self.schemas[0] else f"{_q(schema)}.{_q(self.new_name())}"
            head = r.choice(
                ["CREATE TABLE", "CREATE TABLE IF NOT EXISTS", "CREATE OR REPLACE TABLE", "create /* c */ table"]
            )
            return f"{head} {ref} (\n  {', '.join(defs)}\n){options}"
        key = r.choice(tables)
        ref = self.table_ref(key)
        cols = self.column_names(key)
        if form == "drop_db":
            return (
                f"DROP DATABASE {_q(self.schemas[1])}"
                if r.random() < 0.3
                else f"CREATE DATABASE IF NOT EXISTS {_q(self.schemas[1])} CHARACTER SET latin1"
            )
        if form == "rename":
            other = r.choice(self.schemas)
            pairs = [f"{ref} TO {_q(other)}.{_q(self.new_name())}"]
            if len(tables) > 1 and r.random() < 0.5:
                second = r.choice([t for t in tables if t != key])
                pairs.append(f"{self.table_ref(second)} TO {_q(r.choice(self.schemas))}.{_q(self.new_name())}")
            return "RENAME TABLE " + ", ".join(pairs)
        if form == "drop":
            extra = f", {_q(self.schemas[1])}.`nonexistent`" if r.random() < 0.3 else ""
            return f"DROP TABLE IF EXISTS {ref}{extra} /* generated by server */"
        if form == "like":
            return f"CREATE TABLE {_q(r.choice(self.schemas))}.{_q(self.new_name())} LIKE {_q(key[0])}.{_q(key[1])}"
        if form == "convert":
            return f"ALTER TABLE {ref} CONVERT TO CHARACTER SET {r.choice(['latin1', 'utf8mb4', 'utf8'])}"
        if form == "pk":
            if r.random() < 0.5:
                return f"ALTER TABLE {ref} DROP PRIMARY KEY"
            return f"ALTER TABLE {ref} DROP PRIMARY KEY, ADD PRIMARY KEY ({_q(r.choice(cols))})" if cols else "DO 1"
        if form == "rename_col":
            if not cols:
                return "DO 1"
            return f"ALTER TABLE {ref} RENAME COLUMN {_q(r.choice(cols))} TO {_q(r.choice(_NAMES) + 'r')}"
        if form == "swap":  # clauses that name a column another clause renames: each names the table as it was
            if len(cols) < 2:
                return "DO 1"
            first, second = r.sample(cols, 2)
            a, b, other = _q(first), _q(second), _q(r.choice(_NAMES) + "s")
            return f"ALTER TABLE {ref} " + r.choice(
                [
                    f"RENAME COLUMN {a} TO {b}, RENAME COLUMN {b} TO {a}",
                    f"CHANGE {a} {self.coldef(second)}, CHANGE {b} {self.coldef(first)}",
                    f"CHANGE {a} {self.coldef(second)}, DROP COLUMN {b}",
                    f"RENAME COLUMN {a} TO {b}, RENAME COLUMN {b} TO {other}",
                ]
            )
        clauses = []
        used: set[str] = set()
        for _ in range(r.randint(1, 3)):
            kind = r.choice(["add", "add", "drop", "modify", "change", "add_list", "algo"])
            position = r.choice(["", "", " FIRST", f" AFTER {_q(r.choice(cols))}" if cols else ""])
            free = [n for n in _NAMES if n.casefold() not in {c.casefold() for c in cols} | used]
            if kind == "add" and free:
                name = r.choice(free)
                used.add(name)
                clauses.append(f"ADD {r.choice(['COLUMN ', ''])}{self.coldef(name)}{position}")
            elif kind == "add_list" and len(free) > 1:
                names = r.sample(free, 2)
                used.update(names)
                clauses.append(f"ADD COLUMN ({self.coldef(names[0])}, {self.coldef(names[1])})")
            elif kind == "drop" and cols:
                clauses.append(f"DROP COLUMN {_q(r.choice(cols))}")
            elif kind == "modify" and cols:
                clauses.append(f"MODIFY {self.coldef(r.choice(cols))}{position}")
            elif kind == "change" and cols and free:
                new = r.choice(free)
                used.add(new)
                clauses.append(f"CHANGE {_q(r.choice(cols))} {self.coldef(new)}{position}")
            elif kind == "algo":
                clauses.append(r.choice(["ALGORITHM=COPY", "LOCK = SHARED", "ALGORITHM=DEFAULT, LOCK=DEFAULT"]))
        if not clauses:
            return "DO 1"
        text = f"ALTER TABLE {ref} " + ", ".join(clauses)
        return f"/*!40000 {text} */" if r.random() < 0.2 else text

    def step(self) -> str | None:
        sql = self.statement()
        try:
            self._query(sql)
        except pymysql.err.MySQLError:
            return None  # refused by the server: not in the binlog either
        apply_statement(self.model, self.schemas[0], sql)
        self.applied += 1
        return sql


def _assert_same(model: SchemaModel, server: SchemaModel, sql: str) -> None:
    assert sorted(model.tables) == sorted(server.tables), sql
    for key, expected in server.tables.items():
        got = model.tables[key]
        assert got.columns == expected.columns, (key, sql)
        assert got.primary_key == expected.primary_key, (key, sql)


@pytest.mark.parametrize("seed", range(6))
def test_random_ddl_matches_information_schema(mariadb: MariaDB, seed: int) -> None:
    schemas = [f"ddl{seed}a", f"ddl{seed}b"]
    for name in schemas:
        mariadb.execute(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
    mariadb.execute(f"ALTER DATABASE {schemas[1]} CHARACTER SET latin1")
    scenario = _Scenario(mariadb, schemas, seed)
    try:
        for _ in range(60):
            sql = scenario.step()
            if sql is not None:
                _assert_same(scenario.model, scenario._read(), sql)
        assert scenario.applied > 30
    finally:
        scenario.conn.close()
        for name in schemas:
            mariadb.execute(f"DROP DATABASE IF EXISTS {name}")


def test_an_alter_places_its_columns_after_its_other_clauses(mariadb: MariaDB) -> None:
    """Each against information_schema: an AFTER names the column a CHANGE renames by its new name; a MODIFY without a
    position of a column the statement adds puts it last; a CHANGE ... AFTER moves its column once the renames are
    done."""
    schema = "ddlplacing"
    statements = [f"CREATE DATABASE {schema}"]
    for table, alter in [
        ("t1", "ADD d INT AFTER b, CHANGE b x INT, CHANGE a b INT"),  # id, b, d, x, c
        ("t2", "ADD z INT AFTER a, DROP COLUMN a, CHANGE b a INT"),  # id, a, z, c
        ("t3", "MODIFY b INT AFTER c, CHANGE a c INT, CHANGE c z INT"),  # id, c, b, z
        ("t4", "ADD x INT AFTER id, MODIFY x INT"),  # id, a, b, c, x
        ("t5", "ADD x INT, ADD y INT, MODIFY x INT"),  # id, a, b, c, y, x
        ("t6", "ADD x INT FIRST, CHANGE nope x BIGINT AFTER b"),  # id, a, b, x, c: the added x, by its new name
    ]:
        statements.append(f"CREATE TABLE {table} (id INT PRIMARY KEY, a INT, b INT, c INT)")
        statements.append(f"ALTER TABLE {table} {alter}")
    _follow(mariadb, [schema], statements, lambda sql, model: None)


def _placing_alter(rnd: random.Random, columns: list[str]) -> str:
    """An ALTER of a few clauses over a small table whose names recur (a clause may name a column another renames,
    adds or drops), most of them placing a column."""
    pool = ["a", "b", "c", "d", "x", "y"]
    named = list(columns)  # the names a clause may refer to: the table's, and those earlier clauses give
    clauses = []
    for _ in range(rnd.randint(2, 4)):
        old = rnd.choice(named if rnd.random() < 0.8 else pool)
        new = rnd.choice(pool)
        position = rnd.choice(["", "", " FIRST", f" AFTER {rnd.choice(named)}"])
        kind = rnd.choice(["add", "add", "drop", "change", "modify", "rename"])
        if kind == "add":
            clauses.append(f"ADD {new} INT{position}")
        elif kind == "drop":
            clauses.append(f"DROP COLUMN {old}")
        elif kind == "change":
            clauses.append(f"CHANGE {old} {new} {rnd.choice(['INT', 'BIGINT'])}{position}")
        elif kind == "modify":
            clauses.append(f"MODIFY {old} {rnd.choice(['INT', 'BIGINT'])}{position}")
        else:
            clauses.append(f"RENAME COLUMN {old} TO {new}")
        named.append(new)
    return "ALTER TABLE t " + ", ".join(clauses)


@pytest.mark.parametrize("seed", range(4))
def test_the_columns_an_alter_places_are_where_the_server_puts_them(mariadb: MariaDB, seed: int) -> None:
    """The server places ADDed columns and those a CHANGE or MODIFY moves once every clause without a position is
    done, in clause order, among the columns as they stand then (an AFTER names a column by its new name). Random
    ALTERs that place columns, each applied where the server took it: the history's columns are the server's, or the
    statement is unreadable (never a wrong order)."""
    schema = f"ddlplace{seed}"
    mariadb.execute(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")
    rnd = random.Random(seed)
    conn = mariadb.connect(schema)

    def query(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    applied = unreadable = 0
    try:
        for _ in range(300):
            if rnd.random() < 0.1 or not query("SHOW TABLES"):
                query("CREATE OR REPLACE TABLE t (id INT PRIMARY KEY, a INT, b INT, c INT)")
            model = read_model(query, [schema])
            sql = _placing_alter(rnd, [c.name for c in model.tables[(schema, "t")].columns])
            try:
                query(sql)
            except pymysql.err.MySQLError:
                continue  # refused by the server: not in the binlog either
            try:
                apply_statement(model, schema, sql)
            except DdlError:
                unreadable += 1
                continue
            applied += 1
            _assert_same(model, read_model(query, [schema]), sql)
        assert applied > 30 and unreadable < applied / 4, (applied, unreadable)
    finally:
        conn.close()
        mariadb.execute(f"DROP DATABASE IF EXISTS {schema}")


def test_statement_forms(mariadb: MariaDB) -> None:
    """Each form of the issue, once, in a fixed order (the random test may miss one)."""
    s1, s2 = "ddlforms1", "ddlforms2"
    statements = [
        f"CREATE DATABASE {s1}",
        f"CREATE DATABASE IF NOT EXISTS {s2} DEFAULT CHARACTER SET latin1",
        "CREATE TABLE `my t` (id INT UNSIGNED NOT NULL PRIMARY KEY, `select` VARCHAR(5)) -- c\n",
        "CREATE TABLE IF NOT EXISTS `my t` (zzz INT)",
        "# a comment\nCREATE TABLE t2 LIKE `my t`",
        f"CREATE TABLE {s2}.sel (a INT, b VARCHAR(3)) SELECT 1 AS a, 'x' AS b",
        "CREATE TEMPORARY TABLE tmp (a INT)",
        "ALTER TABLE tmp ADD COLUMN b INT",
        "CREATE VIEW v AS SELECT * FROM t2",
        "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW v2 AS SELECT 1 AS x",
        "ALTER TABLE t2 ADD COLUMN a INT AFTER id, ADD b TEXT FIRST, ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE t2 ADD COLUMN (c DATE, d ENUM('p','q'))",
        "ALTER TABLE t2 MODIFY COLUMN a BIGINT NOT NULL FIRST, CHANGE `select` s2 VARCHAR(9) AFTER d",
        "ALTER TABLE t2 RENAME COLUMN s2 TO `s 3`, DROP COLUMN c",
        "ALTER TABLE t2 DROP PRIMARY KEY, ADD PRIMARY KEY (a, `s 3`)",
        "ALTER TABLE t2 CONVERT TO CHARACTER SET latin1",
        "ALTER TABLE t2 CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "/*!40000 ALTER TABLE t2 ADD COLUMN e INT */",
        "ALTER TABLE t2 /* inline */ ADD COLUMN f INT /*!50100 AFTER e */",
        "ALTER TABLE IF EXISTS nope ADD COLUMN x INT",
        "ALTER TABLE t2 ADD COLUMN IF NOT EXISTS e INT, DROP COLUMN IF EXISTS nope",
        f"RENAME TABLE `my t` TO {s2}.moved, t2 TO t3",
        f"ALTER TABLE t3 RENAME TO {s2}.t4",
        f"DROP TABLE IF EXISTS {s2}.moved, nope",
        "DROP VIEW v",
        f"DROP DATABASE {s2}",
        "TRUNCATE TABLE t2" if False else "DO 1",
    ]
    t2_after_if_not_exists: list[tuple[list[str], tuple[str, ...]]] = []

    def check(sql: str, model: SchemaModel) -> None:
        if sql.startswith("ALTER TABLE t2 ADD COLUMN IF NOT EXISTS"):
            t2 = model.tables[(s1, "t2")]
            t2_after_if_not_exists.append(([c.name for c in t2.columns], t2.primary_key))

    model = _follow(mariadb, [s1, s2], statements, check)
    assert t2_after_if_not_exists == [(["a", "b", "id", "d", "s 3", "e", "f"], ("a", "s 3"))]
    assert model.tables == {}  # all renamed away, dropped, or gone with their database


def test_the_clauses_of_one_alter_name_the_columns_as_they_were_before_it(mariadb: MariaDB) -> None:
    """MariaDB resolves each DROP, CHANGE, MODIFY and RENAME COLUMN of an ALTER against the table before the
    statement: two names swapped in one statement are swapped, not applied one after the other."""
    schema = "ddlswap"
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE TABLE sw (id INT PRIMARY KEY, a INT, b VARCHAR(5), c DATE)",
        "ALTER TABLE sw RENAME COLUMN a TO b, RENAME COLUMN b TO a",
        "ALTER TABLE sw CHANGE a b INT, CHANGE b a VARCHAR(5)",
        "ALTER TABLE sw RENAME COLUMN a TO x, RENAME COLUMN c TO a",
        "ALTER TABLE sw CHANGE id b2 INT, RENAME COLUMN b TO id, ADD COLUMN n INT AFTER id",
        "ALTER TABLE sw DROP COLUMN x, CHANGE a x DATE FIRST",
        "ALTER TABLE sw ADD COLUMN z INT, DROP COLUMN n, RENAME COLUMN b2 TO n",
        "ALTER TABLE sw CHANGE n b INT, CHANGE x n DATE, CHANGE z x INT",
    ]
    layouts: list[tuple[list[str], tuple[str, ...]]] = []

    def check(sql: str, model: SchemaModel) -> None:
        table = model.tables.get((schema, "sw"))
        if table is not None:
            layouts.append(([c.name for c in table.columns], table.primary_key))

    _follow(mariadb, [schema], statements, check)
    assert layouts[1] == (["id", "b", "a", "c"], ("id",))  # the swap, as information_schema shows it too
    assert layouts[-1] == (["n", "b", "id", "x"], ("b",))


def _follow(
    mariadb: MariaDB,
    schemas: list[str],
    statements: list[str],
    check: Callable[[str, SchemaModel], None],
    rows: Callable[[str, SchemaModel, Any], None] | None = None,
) -> SchemaModel:
    """Runs each statement on the server (the first creates the default database), applies what the binlog carries
    to a model, and compares the model with information_schema after each; ``check`` sees the model then, and
    ``rows`` each row change of the statement with the model as it stood when the change was written."""
    for name in schemas:
        mariadb.execute(f"DROP DATABASE IF EXISTS {name}")
    conn = mariadb.connect()
    model = SchemaModel(server_charset="utf8mb4")

    def query(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    try:
        for sql in statements:
            file, pos = mariadb.binlog_position()
            query(sql)
            if sql == statements[0]:
                query(f"USE {schemas[0]}")
            # What the binlog carries (the server rewrites some statements: CREATE ... SELECT, DROP TABLE)
            for trx in read_binlog_files([mariadb.datadir / file], start=pos):
                for default, logged in zip(trx.schemas, trx.statements, strict=True):
                    apply_statement(model, default, logged)
                for change in trx.changes if rows is not None else ():
                    rows(sql, model, change)
            _assert_same(model, read_model(query, schemas), sql)
            check(sql, model)
        return model
    finally:
        conn.close()
        for name in schemas:
            mariadb.execute(f"DROP DATABASE IF EXISTS {name}")


def _names_of_rows(mariadb: MariaDB, schema: str, statements: list[str]) -> dict[str, list[str]]:
    """Each table's column names in the rows the statements wrote, as the binlog carries them (row metadata FULL),
    once checked against the model following the DDL and against the stream's information_schema look-up."""
    from binlog.schema import InformationSchemaProvider

    seen: dict[str, list[str]] = {}
    provider = InformationSchemaProvider({**mariadb.replication_settings(), "charset": "utf8mb4"})

    def rows(sql: str, model: SchemaModel, change: Any) -> None:
        binlog_names = list(change.columns)
        assert [c.name for c in model.tables[(schema, change.table)].columns] == binlog_names, sql
        provider.invalidate()
        looked_up = provider.table(schema, change.table)
        assert looked_up is not None and [c.name for c in looked_up.columns] == binlog_names, sql
        seen[change.table] = binlog_names

    try:
        _follow(mariadb, [schema], statements, lambda sql, model: None, rows)
    finally:
        provider.close()
    return seen


def test_lower_case_table_names() -> None:
    model = SchemaModel(lower_case_table_names=1)
    apply_statement(model, "Db", "CREATE TABLE `MyTable` (A INT)")
    apply_statement(model, "db", "ALTER TABLE mytable ADD COLUMN b INT")
    assert list(model.tables) == [("db", "mytable")]
    assert [c.name for c in model.tables[("db", "mytable")].columns] == ["A", "b"]


def test_unreadable_statements_raise() -> None:
    model = SchemaModel()
    with pytest.raises(DdlError):
        apply_statement(model, "s", "CREATE TABLE t SELECT 1 AS a")
    with pytest.raises(DdlError):
        apply_statement(model, "s", "ALTER TABLE unknown ADD COLUMN a INT")
    with pytest.raises(DdlError):
        apply_statement(model, "", "CREATE TABLE t (a INT)")  # no default database


def test_tokenizer_keeps_executable_comments_and_drops_others() -> None:
    texts = [t.text for t in tokenize("/*!40101 ALTER */ /* no */ TABLE `a``b` -- x\n ADD #y\n c /*M!100100 INT */")]
    assert texts == ["ALTER", "TABLE", "a`b", "ADD", "c", "INT"]


# Labels the server writes with escapes in COLUMN_TYPE (backslash, quote, NUL, newline, carriage return) or changes
# (trailing spaces dropped), and some it keeps as they are: each as the SQL literal and as the label it makes.
_LABELS = [
    (r"'a\\b'", "a\\b"),
    ("'it''s'", "it's"),
    (r"'\'q\"'", "'q\""),
    ("'x,y'", "x,y"),
    ("' sp  '", " sp"),
    (r"'\0\n\r'", "\0\n\r"),
    (r"'tab\t'", "tab\t"),
    (r"'\%\_\Z'", "\\%\\_\x1a"),
    ("'Ünï €'", "Ünï €"),
]


def test_enum_and_set_labels_are_the_servers(mariadb: MariaDB) -> None:
    """Every label the DDL in the stream makes is the one information_schema shows (and the server stores)."""
    schema = "ddllabels"
    enum = ", ".join(sql for sql, _ in _LABELS)
    set_labels = r"'x\\y', 'z '"
    labels: dict[str, tuple[str, ...]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        table = model.tables.get((schema, "l"))
        if table is not None:
            labels.update({c.name: c.labels for c in table.columns})

    _follow(
        mariadb,
        [schema],
        [
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE l (e ENUM({enum}), s SET({set_labels}))",
            f"ALTER TABLE l ADD COLUMN e2 ENUM({enum}) CHARACTER SET latin1 FIRST",
        ],
        check,
    )
    expected = tuple(label for _, label in _LABELS)
    assert labels == {"e2": expected, "e": expected, "s": ("x\\y", "z")}


def test_forms_the_server_takes_that_a_reading_could_get_wrong(mariadb: MariaDB) -> None:
    """Each against information_schema: a DDL behind SET STATEMENT ... FOR; names the server keeps apart that
    str.casefold() folds together ('ß', 'ss'); an unqualified new name of ALTER ... RENAME TO, which is in the
    session's database; a column defined before the clause that changes the table's charset (it takes the new one);
    columns named period and system; RENAME COLUMN IF EXISTS of no column; MODIFY of a column the statement adds."""
    schema, other = "ddlhostile1", "ddlhostile2"
    statements = [
        f"CREATE DATABASE {schema}",
        f"CREATE DATABASE {other}",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))",
        "SET STATEMENT max_statement_time=100, sql_mode='' FOR "
        "ALTER TABLE t RENAME COLUMN a TO x, RENAME COLUMN b TO a",
        "CREATE TABLE u (id INT PRIMARY KEY, `ß` VARCHAR(20), ss VARCHAR(20), z VARCHAR(20))",
        "ALTER TABLE u DROP COLUMN ss, CHANGE `ß` `ẞ2` VARCHAR(20) AFTER z",
        f"CREATE TABLE {other}.o (id INT PRIMARY KEY)",
        f"ALTER TABLE {other}.o RENAME TO o2",
        "CREATE TABLE c (id INT PRIMARY KEY, keep TEXT) CHARSET=utf8mb4",
        "ALTER TABLE c ADD c1 TEXT, ADD c2 VARCHAR(5) CHARACTER SET utf8mb4, DEFAULT CHARSET=latin1",
        "ALTER TABLE c MODIFY c2 VARCHAR(6), ADD c3 TINYTEXT, CHARACTER SET utf8mb3, COLLATE utf8mb3_bin",
        "CREATE TABLE p (id INT PRIMARY KEY, period INT, system INT)",
        "ALTER TABLE p ADD COLUMN period2 INT, DROP COLUMN period",
        "ALTER TABLE p RENAME COLUMN IF EXISTS missing TO r, ADD COLUMN x INT, MODIFY COLUMN x BIGINT FIRST",
        "CREATE TABLE h (id INT PRIMARY KEY, v INT) PARTITION BY HASH(id) PARTITIONS 2",
        "CREATE TABLE r (id INT PRIMARY KEY) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), "
        "PARTITION p1 VALUES LESS THAN MAXVALUE)",
        "CREATE TABLE cv (id INT PRIMARY KEY, keep TEXT) CHARSET=latin1",
        "ALTER TABLE cv ADD c5 TEXT, ADD c6 TEXT CHARACTER SET latin1, CONVERT TO CHARACTER SET utf8mb4",
    ]
    layouts: dict[str, list[tuple[str, str | None]]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        for (_, name), table in model.tables.items():
            layouts[name] = [(c.name, c.charset) for c in table.columns]

    model = _follow(mariadb, [schema, other], statements, check)
    assert layouts["t"] == [("id", None), ("x", "utf8mb4"), ("a", "utf8mb4")]
    assert layouts["u"] == [("id", None), ("z", "utf8mb4"), ("ẞ2", "utf8mb4")]
    assert layouts["c"][1:] == [("keep", "utf8mb4"), ("c1", "latin1"), ("c2", "utf8mb3"), ("c3", "utf8mb3")]
    assert [name for name, _ in layouts["p"]] == ["x", "id", "system", "period2"]
    assert "o2" in layouts and (other, "o2") not in model.tables


def test_a_lock_wait_after_the_table_name_is_not_a_clause(mariadb: MariaDB) -> None:
    """ALTER TABLE t WAIT n (or NOWAIT) and RENAME TABLE t WAIT n TO u: the lock timeout's number is part of it, and
    the first clause after it is applied like any other."""
    schema = "ddllockwait"
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))",
        "ALTER TABLE t WAIT 5 RENAME COLUMN a TO x",
        "ALTER TABLE t NOWAIT CHANGE b y INT, ADD COLUMN z INT FIRST",
        "ALTER ONLINE TABLE t WAIT 0 DROP COLUMN z",
        "RENAME TABLE t WAIT 3 TO u",
    ]
    layouts: dict[str, list[str]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        for (_, name), table in model.tables.items():
            layouts[name] = [c.name for c in table.columns]

    _follow(mariadb, [schema], statements, check)
    assert layouts["u"] == ["id", "x", "y"]


def test_an_unquoted_name_may_begin_with_digits(mariadb: MariaDB) -> None:
    """9db.t is the table t of the database 9db, in a statement the history applies and in the tables named by one
    it cannot: digits followed by a letter begin a name, which a "." ends (digits alone and a "." are a number)."""
    schema, other = "9ddldigits", "ddldigits"
    statements = [
        f"CREATE DATABASE {other}",
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, a VARCHAR(20), b DECIMAL(4,1) DEFAULT 1.5)",
        f"ALTER TABLE {schema}.t RENAME COLUMN a TO x, RENAME COLUMN b TO a",
        f"RENAME TABLE {schema}.t TO {schema}.2u",
    ]
    layouts: dict[tuple[str, str], list[str]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        layouts.clear()
        for key, table in model.tables.items():
            layouts[key] = [c.name for c in table.columns]

    _follow(mariadb, [other, schema], statements, check)
    assert layouts == {(schema, "2u"): ["id", "x", "a"]}
    assert tables_named("ALTER TABLE 9db.t ADD c INT", "ddl") == [("9db", "t")]


def test_rename_table_if_exists_passes_over_the_tables_that_do_not_exist(mariadb: MariaDB) -> None:
    """MariaDB's RENAME TABLE IF EXISTS renames the pairs whose table exists and passes over the others."""
    schema = "ddlrenameif"
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20))",
        "CREATE TABLE v (id INT PRIMARY KEY)",
        "RENAME TABLE IF EXISTS nothere TO elsewhere, t WAIT 2 TO u, gone TO x",
        "RENAME TABLES IF EXISTS absent TO y",
        "RENAME TABLE IF EXISTS v TO w",
    ]
    names: list[set[str]] = []
    _follow(mariadb, [schema], statements, lambda sql, model: names.append({name for _, name in model.tables}))
    assert names[-3:] == [{"u", "v"}, {"u", "v"}, {"u", "w"}]


def test_every_table_option_of_a_run_is_read(mariadb: MariaDB) -> None:
    """Table options separated by spaces alone (as SHOW CREATE TABLE writes them) are one ALTER clause: a charset
    after another option is the table's new default, which a column added later takes; CHARSET=DEFAULT is the
    database's. A MERGE table's UNION=(...) does not end the options of a CREATE."""
    schema = "ddloptions"
    statements = [
        f"CREATE DATABASE {schema} CHARACTER SET utf8mb3",
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20)) CHARSET=utf8mb4",
        "ALTER TABLE t ENGINE=InnoDB DEFAULT CHARSET=latin1",
        "ALTER TABLE t ADD COLUMN c TEXT",
        "ALTER TABLE t COMMENT 'x' CHARACTER SET utf8mb4, ADD d TEXT",
        "ALTER TABLE t ROW_FORMAT=DEFAULT, ADD e VARCHAR(3)",
        "ALTER TABLE t CHARSET=DEFAULT, ADD f TINYTEXT",
        "ALTER TABLE t AUTO_INCREMENT=5 COLLATE latin1_bin ENGINE InnoDB",
        "ALTER TABLE t ADD g VARCHAR(4)",
        "CREATE TABLE u (a INT, b VARCHAR(5)) ENGINE=MyISAM CHARSET=latin1",
        "CREATE TABLE m (a INT, b VARCHAR(5)) ENGINE=MRG_MyISAM UNION=(u) DEFAULT CHARSET=latin1",
    ]
    charsets: dict[str, list[str | None]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        for (_, name), table in model.tables.items():
            charsets[name] = [c.charset for c in table.columns]

    _follow(mariadb, [schema], statements, check)
    assert charsets["t"] == [None, "utf8mb4", "latin1", "utf8mb4", "utf8mb4", "utf8mb3", "latin1"]
    assert charsets["m"] == [None, "latin1"]


def test_names_that_differ_in_the_case_of_a_letter_outside_ascii(mariadb: MariaDB) -> None:
    """The server keeps 'kapal' + dotless i and 'KAPALI' apart (its case table has no dotless i to I), as the
    history does: a DROP of one leaves the other."""
    schema = "ddlcase"
    dotless = "kapal\u0131"
    statements = [
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE k (id INT PRIMARY KEY, `{dotless}` VARCHAR(20), `KAPALI` VARCHAR(20), `Ünï` INT)",
        "ALTER TABLE k DROP COLUMN `KAPALI`",
        f"ALTER TABLE k ADD COLUMN `Kapali` INT AFTER `{dotless}`",
    ]
    layouts: dict[str, list[str]] = {}

    def check(sql: str, model: SchemaModel) -> None:
        for (_, name), table in model.tables.items():
            layouts[name] = [c.name for c in table.columns]

    _follow(mariadb, [schema], statements, check)
    assert layouts["k"] == ["id", dotless, "Kapali", "Ünï"]


def test_a_name_only_the_servers_case_table_may_find_is_unreadable() -> None:
    """A column named by another case of a letter outside ASCII ('ünÏ' for 'Ünï', 'İ' for 'i') is found or not by the
    server's own case table: the statement is refused (unreadable), never applied by a guess, IF EXISTS or not."""
    model = SchemaModel(server_charset="utf8mb4")
    apply_statement(model, "", "CREATE DATABASE s")
    apply_statement(model, "s", "CREATE TABLE t (id INT PRIMARY KEY, `Ünï` TEXT, i INT)")
    for statement in (
        "ALTER TABLE t DROP COLUMN `ünÏ`",
        "ALTER TABLE t DROP COLUMN IF EXISTS `ünÏ`",
        "ALTER TABLE t DROP COLUMN IF EXISTS `İ`",
        "ALTER TABLE t MODIFY COLUMN IF EXISTS `ünÏ` INT",
        "ALTER TABLE t CHANGE COLUMN IF EXISTS `ünÏ` x INT",
        "ALTER TABLE t RENAME COLUMN IF EXISTS `ünÏ` TO x",
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS `ünÏ` INT",
        "ALTER TABLE t ADD COLUMN x INT AFTER `ünÏ`",
        "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (`İ`)",
        "CREATE TABLE u (`Ünï` TEXT, UNIQUE KEY (`ünÏ`))",
    ):
        with pytest.raises(DdlError):
            apply_statement(model, "s", statement)
    assert [c.name for c in model.tables[("s", "t")].columns] == ["id", "Ünï", "i"]


def test_the_keyword_of_a_statement_behind_set_statement_is_its_own() -> None:
    """The stream hands a DDL to the schema history by its keyword: behind SET STATEMENT it is the statement's."""
    from binlog.parser import _statement_keyword

    assert _statement_keyword("SET STATEMENT max_statement_time=100 FOR ALTER TABLE t ADD c INT") == "ALTER"
    assert _statement_keyword("set statement sql_mode='a,b', x=(1) for\nDROP TABLE t") == "DROP"
    assert _statement_keyword("SET @a = 1") == "SET"


def test_system_versioned_tables_have_the_columns_of_their_row_images(mariadb: MariaDB) -> None:
    """A table WITH SYSTEM VERSIONING that names no ROW START/END column of its own has two more in every row image
    (row_start, row_end: last, even after a column is added), which information_schema does not show. The model,
    the baseline read from information_schema and the stream's own look-ups each have them; a table with its own
    ROW START/END columns has no others. The names the binlog carries (row metadata FULL here) are the truth."""
    schema = "ddlversioned"
    keep = "SET STATEMENT system_versioning_alter_history=KEEP FOR "
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE TABLE v (id INT PRIMARY KEY, x INT) WITH SYSTEM VERSIONING",
        "INSERT INTO v VALUES (1, 2)",
        keep + "ALTER TABLE v ADD COLUMN z INT, ADD COLUMN f INT FIRST",
        "INSERT INTO v (id) VALUES (2)",
        "CREATE TABLE w (id INT PRIMARY KEY, x INT WITHOUT SYSTEM VERSIONING, y INT WITH SYSTEM VERSIONING)",
        "INSERT INTO w VALUES (1, 2, 3)",
        "CREATE TABLE e (id INT PRIMARY KEY, rs TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "re TIMESTAMP(6) GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME(rs, re), y INT) WITH SYSTEM VERSIONING",
        "INSERT INTO e (id, y) VALUES (1, 2)",
        "CREATE TABLE p (id INT, x INT)",
        "ALTER TABLE p ADD SYSTEM VERSIONING",
        "INSERT INTO p VALUES (1, 2)",
        "CREATE TABLE l LIKE v",
        "INSERT INTO l (id) VALUES (1)",
        keep + "ALTER TABLE v DROP SYSTEM VERSIONING",
        "INSERT INTO v (id) VALUES (3)",
        "CREATE TABLE q (id INT PRIMARY KEY, x INT)",
        "ALTER TABLE q ADD COLUMN rs TIMESTAMP(6) GENERATED ALWAYS AS ROW START, ADD COLUMN re TIMESTAMP(6) "
        "GENERATED ALWAYS AS ROW END, ADD PERIOD FOR SYSTEM_TIME(rs, re), ADD SYSTEM VERSIONING",
        "INSERT INTO q (id, x) VALUES (1, 2)",
        "CREATE TABLE vp (id INT, x INT) WITH SYSTEM VERSIONING "
        "PARTITION BY SYSTEM_TIME (PARTITION p0 HISTORY, PARTITION pn CURRENT)",
        "INSERT INTO vp VALUES (1, 2)",
    ]
    assert _names_of_rows(mariadb, schema, statements) == {
        "v": ["f", "id", "x", "z"],
        "w": ["id", "x", "y", "row_start", "row_end"],
        "e": ["id", "rs", "re", "y"],
        "p": ["id", "x", "row_start", "row_end"],
        "l": ["f", "id", "x", "z", "row_start", "row_end"],
        "q": ["id", "x", "rs", "re"],
        "vp": ["id", "x", "row_start", "row_end"],
    }


def test_long_unique_keys_have_their_hidden_hash_columns(mariadb: MariaDB) -> None:
    """A UNIQUE key the server cannot keep in a B-tree (over a TEXT or BLOB column's whole value, USING HASH, or
    longer than any engine's key) is kept by a hidden DB_ROW_HASH_n column after the others, in every row image,
    which information_schema does not list. The model from CREATE TABLE, the baseline and the stream's look-ups each
    have them (a MEMORY table's HASH index is an ordinary one). The names the binlog carries (metadata FULL) are the
    truth."""
    schema = "ddllongunique"
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE TABLE t (id INT PRIMARY KEY, a TEXT, b BLOB, c VARCHAR(10), UNIQUE KEY ua (a), UNIQUE KEY ub (b(10)),"
        " UNIQUE KEY uc (c) USING HASH, CONSTRAINT ud UNIQUE (a, c))",
        "INSERT INTO t VALUES (1, 'x', 'y', 'z')",
        "CREATE TABLE u (id INT PRIMARY KEY, a TEXT UNIQUE, b INT UNIQUE KEY, c JSON, UNIQUE INDEX (c))",
        "INSERT INTO u VALUES (1, 'x', 2, '[]')",
        "CREATE TABLE l (id INT PRIMARY KEY, a VARCHAR(1000), b VARCHAR(1000), UNIQUE KEY (a, b)) CHARSET=utf8mb4",
        "INSERT INTO l VALUES (1, 'a', 'b')",
        "CREATE TABLE y (id INT PRIMARY KEY, a TEXT, UNIQUE (a)) ENGINE=MyISAM",
        "INSERT INTO y VALUES (1, 'x')",
        "CREATE TABLE m (engine INT PRIMARY KEY, a VARCHAR(10), UNIQUE KEY (a) USING HASH) ENGINE=MEMORY",
        "INSERT INTO m VALUES (1, 'a')",
    ]
    assert _names_of_rows(mariadb, schema, statements) == {
        "t": ["id", "a", "b", "c", "DB_ROW_HASH_1", "DB_ROW_HASH_2", "DB_ROW_HASH_3"],
        "u": ["id", "a", "b", "c", "DB_ROW_HASH_1", "DB_ROW_HASH_2"],
        "l": ["id", "a", "b", "DB_ROW_HASH_1"],
        "y": ["id", "a", "DB_ROW_HASH_1"],
        "m": ["engine", "a"],
    }


def test_what_an_alter_does_to_long_unique_keys_is_not_told_by_the_statement() -> None:
    """A rebuild may keep a table's long UNIQUE keys otherwise (a short key USING HASH becomes a B-tree), and an
    engine's own key length decides for keys between 1,000 and 3,072 bytes: such statements are unreadable (the table
    is then read from information_schema, its rows get positional names until then), never guessed."""
    model = SchemaModel(server_charset="utf8mb4")
    apply_statement(model, "", "CREATE DATABASE s")
    apply_statement(model, "s", "CREATE TABLE t (id INT PRIMARY KEY, a TEXT, UNIQUE (a))")
    apply_statement(model, "s", "CREATE TABLE p (id INT PRIMARY KEY, a TEXT, b VARCHAR(10))")
    for statement in (
        "ALTER TABLE t ADD COLUMN z INT",
        "ALTER TABLE p ADD UNIQUE KEY (a)",
        "ALTER TABLE p ADD CONSTRAINT k UNIQUE (b) USING HASH",
        "ALTER TABLE p ADD COLUMN c BLOB UNIQUE",
        "ALTER TABLE p MODIFY b TEXT UNIQUE",
        "CREATE TABLE q (id INT PRIMARY KEY, a VARCHAR(300), UNIQUE (a)) CHARSET=utf8mb4",
    ):
        with pytest.raises(DdlError, match="UNIQUE"):
            apply_statement(model, "s", statement)
    apply_statement(model, "s", "ALTER TABLE p ADD UNIQUE KEY (a(20)), ADD UNIQUE (b)")  # B-trees
    assert [c.name for c in model.tables[("s", "p")].columns] == ["id", "a", "b"]


def test_sequences_are_tables_of_their_own_columns(mariadb: MariaDB) -> None:
    """NEXTVAL, SETVAL and ALTER SEQUENCE write a sequence's one row to the binlog: the model knows its columns from
    CREATE SEQUENCE (and OR REPLACE, IF NOT EXISTS), follows RENAME TABLE and DROP SEQUENCE, and the baseline reads
    sequences from information_schema too."""
    schema = "ddlsequence"
    statements = [
        f"CREATE DATABASE {schema}",
        "CREATE SEQUENCE s1",
        "SELECT NEXTVAL(s1)",
        "CREATE OR REPLACE SEQUENCE s1 START WITH 10 INCREMENT BY 5",
        "CREATE SEQUENCE IF NOT EXISTS s1",
        "CREATE TABLE t (id INT PRIMARY KEY DEFAULT NEXTVAL(s1), v INT)",
        "INSERT INTO t (v) VALUES (1)",
        "RENAME TABLE s1 TO s2",
        "SELECT SETVAL(s2, 100)",
        "ALTER SEQUENCE s2 RESTART 7",
        "SELECT NEXTVAL(s2)",
        "DROP SEQUENCE IF EXISTS s2, nope",
    ]
    seen: dict[str, list[str]] = {}

    def rows(sql: str, model: SchemaModel, change: Any) -> None:
        assert [c.name for c in model.tables[(schema, change.table)].columns] == list(change.columns), sql
        seen.setdefault(change.table, list(change.columns))

    model = _follow(mariadb, [schema], statements, lambda sql, model: None, rows)
    assert set(seen) == {"s1", "s2", "t"} and seen["s2"][0] == "next_not_cached_value"
    assert list(model.tables) == [(schema, "t")]  # the sequence dropped
