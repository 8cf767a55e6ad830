"""The source side of snapshots (binlog/snapshot.py): which conditions run, how chunk keys are kept, and chunked
reads over composite and unique keys against a real MariaDB."""

from __future__ import annotations

import pytest

from binlog.snapshot import (
    CONSISTENT,
    WATERMARK,
    ChunkReader,
    SignalTable,
    SnapshotError,
    TableChanged,
    TablePlan,
    WhereError,
    check_where,
    decode_key,
    encode_key,
)
from devtools.sandbox import MariaDB


@pytest.mark.parametrize(
    "where",
    [
        "",
        "id > 10",
        "status IN ('new', 'paid') AND created >= '2024-01-01'",
        "name LIKE 'a;b%' OR note = 'select -- not a comment'",  # inside literals: text, not SQL
        "`weird``name` = 1",
        "(a = 1 OR b = 2) AND NOT c",
    ],
)
def test_plain_conditions_are_accepted(where: str) -> None:
    check_where(where)


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("1; DROP TABLE t", "a second statement"),
        ("id > 0 -- and more", "a comment"),
        ("id > 0 /* hidden */", "a comment"),
        ("id IN (SELECT id FROM secrets)", "SELECT"),
        ("id > 0 AND SLEEP(5)", "SLEEP"),
        ("BENCHMARK(1000000, MD5('x'))", "BENCHMARK"),
        ("id > NEXTVAL(s)", "NEXTVAL"),
        ("id > SETVAL(s, 1)", "SETVAL"),
        ("id > NEXT VALUE FOR s", "NEXT VALUE FOR"),
        ("id > 0 UNION ALL", "UNION"),
        ("name = 'open", "unterminated quote"),
        ("(id > 0", "parentheses"),
        ("x" * 5000, "limit is 4096"),
    ],
)
def test_other_conditions_are_refused_with_the_reason(where: str, reason: str) -> None:
    with pytest.raises(WhereError, match=reason):
        check_where(where)


def test_keys_round_trip_text_and_binary() -> None:
    key = ("42", "naïve", b"\x00\xff", "2024-01-02 03:04:05.678")
    assert decode_key(encode_key(key)) == key
    assert decode_key("") is None


def test_settings_are_checked() -> None:
    with pytest.raises(SnapshotError, match="not one of"):
        ChunkReader({}, "lock")
    with pytest.raises(SnapshotError, match="needs a signal table"):
        ChunkReader({}, WATERMARK)
    with pytest.raises(SnapshotError, match=r"not SCHEMA\.TABLE"):
        SignalTable.parse("marks")


def _reader(server: MariaDB, method: str = CONSISTENT) -> ChunkReader:
    return ChunkReader({**server.replication_settings(), "user": "root", "password": ""}, method)


def _read_all(reader: ChunkReader, schema: str, table: str, chunk_rows: int) -> list[tuple[object, ...]]:
    return _read_after(reader, reader.plan(schema, table), None, chunk_rows)


def _read_after(
    reader: ChunkReader, plan: TablePlan, after: tuple[object, ...] | None, chunk_rows: int
) -> list[tuple[object, ...]]:
    """Every row after the key ``after``, chunk by chunk, each chunk read at a position of its own."""
    rows: list[tuple[object, ...]] = []
    while True:
        chunk = reader.read(plan, after, chunk_rows)
        rows += chunk.rows
        assert chunk.position is not None
        if chunk.complete:
            return rows
        after = chunk.last_key


def test_composite_and_unique_keys_read_every_row_once(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.pair (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b))",
        f"INSERT INTO `{schema}`.pair SELECT CONCAT('k', seq % 7), seq, seq FROM seq_1_to_500",
        f"CREATE TABLE `{schema}`.uniq (code CHAR(6) NOT NULL, maybe INT NULL, UNIQUE KEY (maybe), UNIQUE KEY (code))",
        f"INSERT INTO `{schema}`.uniq SELECT LPAD(seq, 6, '0'), seq FROM seq_1_to_300",
        database=schema,
    )
    reader = _reader(server)
    try:
        pair = _read_all(reader, schema, "pair", 37)
        assert len(pair) == 500 and len({row[:2] for row in pair}) == 500
        assert reader.plan(schema, "pair").key == ("a", "b")
        plan = reader.plan(schema, "uniq")
        assert plan.key == ("code",)  # the unique key over a NULLable column cannot tell rows apart
        uniq = _read_all(reader, schema, "uniq", 64)
        assert [row[0] for row in uniq] == [f"{n:06d}" for n in range(1, 301)]
    finally:
        reader.close()


def test_tables_that_cannot_be_read_exactly_are_refused(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.heap (id INT PRIMARY KEY) ENGINE=Aria",
        f"CREATE VIEW `{schema}`.v AS SELECT 1 AS id",
    )
    reader = _reader(server)
    try:
        with pytest.raises(SnapshotError, match="Aria engine, which has no consistent snapshot"):
            reader.plan(schema, "heap")
        with pytest.raises(SnapshotError, match="is a view"):
            reader.plan(schema, "v")
        with pytest.raises(SnapshotError, match="does not exist"):
            reader.plan(schema, "missing")
    finally:
        reader.close()


def test_a_chunk_stops_at_its_byte_budget(fresh_schema: tuple[MariaDB, str], monkeypatch: pytest.MonkeyPatch) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.wide (id INT PRIMARY KEY, body MEDIUMBLOB)",
        f"INSERT INTO `{schema}`.wide SELECT seq, REPEAT('x', 400) FROM seq_1_to_20",
        database=schema,
    )
    monkeypatch.setattr("binlog.snapshot.CHUNK_BYTES", 1_000)
    reader = _reader(server)
    try:
        plan = reader.plan(schema, "wide")
        first = reader.read(plan, None, 1_000)
        assert len(first.rows) == 3 and not first.complete  # 3 x 400 bytes pass the budget; the rest waits
        rows = first.rows + _read_after(reader, plan, first.last_key, 1_000)
        assert [row[0] for row in rows] == [str(n) for n in range(1, 21)]
    finally:
        reader.close()


def test_keys_of_other_forms_bound_chunks_and_float_keys_are_refused(fresh_schema: tuple[MariaDB, str]) -> None:
    """A UUID key's rows carry 16 bytes and a BIT key's a number's text: as bounds, the server compares them as the
    column sorts. A FLOAT key's text is not its stored value: refused, rather than a chunk read twice or never."""
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.u (id UUID PRIMARY KEY, n INT)",
        f"INSERT INTO `{schema}`.u SELECT UUID(), seq FROM seq_1_to_200",
        f"CREATE TABLE `{schema}`.bits (id BIT(12) PRIMARY KEY, n INT)",
        f"INSERT INTO `{schema}`.bits SELECT seq * 13, seq FROM seq_1_to_200",
        f"CREATE TABLE `{schema}`.byte (id BIT(8) PRIMARY KEY, n INT)",
        f"INSERT INTO `{schema}`.byte SELECT seq * 3 - 3, seq FROM seq_1_to_200 WHERE seq <= 86",
        f"CREATE TABLE `{schema}`.wide (id BIT(64) PRIMARY KEY, n INT)",
        f"INSERT INTO `{schema}`.wide VALUES (0, 1), (1, 2), (2, 3), (255, 4), (256, 5), (9007199254740992, 6),"
        " (9007199254740993, 7), (9223372036854775808, 8), (18446744073709551615, 9)",
        f"CREATE TABLE `{schema}`.floaty (id FLOAT PRIMARY KEY)",
        database=schema,
    )
    reader = _reader(server)
    try:
        for table, rows_in_table, chunk_rows in (("u", 200, 17), ("bits", 200, 17), ("byte", 86, 2), ("wide", 9, 2)):
            rows = _read_all(reader, schema, table, chunk_rows)
            assert sorted(int(row[1]) for row in rows) == list(range(1, rows_in_table + 1)), table
        with pytest.raises(SnapshotError, match="key column 'id' is FLOAT"):
            reader.plan(schema, "floaty")
    finally:
        reader.close()


def _ddl_reader(server: MariaDB, schema: str, method: str) -> ChunkReader:
    args = {**server.replication_settings(), "user": "root", "password": ""}
    return ChunkReader(args, method, SignalTable(schema, "signal") if method == WATERMARK else None)


def _latin1_table(server: MariaDB, schema: str, rows: int) -> None:
    """Table ``t``: a key, a latin1 text ('café1', 'café2'...) and a number, ``rows`` rows."""
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET latin1, n INT)",
        f"INSERT INTO `{schema}`.t SELECT seq, CONCAT('café', seq), seq FROM seq_1_to_{int(rows)}",
        database=schema,
    )


@pytest.mark.parametrize("method", [CONSISTENT, WATERMARK])
def test_a_chunk_after_a_ddl_is_read_in_the_tables_new_layout(fresh_schema: tuple[MariaDB, str], method: str) -> None:
    """A DDL between two chunks: the next read with the old plan is refused with the new plan (never rows decoded by
    the old one: latin1 bytes of a column now utf8mb4 would be mojibake), and the new plan reads the rows exactly."""
    server, schema = fresh_schema
    _latin1_table(server, schema, 100)
    reader = _ddl_reader(server, schema, method)
    try:
        plan = reader.plan(schema, "t")
        first = reader.read(plan, None, 30)
        assert first.rows[0] == ("1", "café1", "1")
        server.execute(f"ALTER TABLE `{schema}`.t MODIFY v VARCHAR(20) CHARACTER SET utf8mb4")
        with pytest.raises(TableChanged, match="changed during the snapshot") as changed:
            reader.read(plan, first.last_key, 30)
        assert "column v varchar(20) latin1" in str(changed.value) and "-> varchar(20) utf8mb4" in str(changed.value)
        assert changed.value.plan is not None
        plan = changed.value.plan
        second = reader.read(plan, first.last_key, 30)
        assert second.rows[0] == ("31", "café31", "31")

        server.execute(f"ALTER TABLE `{schema}`.t ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'dflt'")
        with pytest.raises(TableChanged, match="column c added") as changed:
            reader.read(plan, second.last_key, 30)
        assert changed.value.plan is not None
        plan = changed.value.plan
        third = reader.read(plan, second.last_key, 30)
        assert plan.names == ("id", "v", "n", "c") and third.rows[0] == ("61", "café61", "61", "dflt")

        server.execute(f"ALTER TABLE `{schema}`.t ADD INDEX by_n (n)")  # the key is the same: reading goes on
        with pytest.raises(TableChanged, match="indexes changed") as changed:
            reader.read(plan, third.last_key, 30)
        assert changed.value.plan is not None and changed.value.plan.key == ("id",)
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("ddl", "names"),
    [
        ("ALTER TABLE t DROP COLUMN n", ("id", "v")),  # the SELECT names a column that is gone
        ("ALTER TABLE t ADD COLUMN c INT DEFAULT 5", ("id", "v", "n", "c")),  # instant: the SELECT would see c
        ("ALTER TABLE t MODIFY v VARCHAR(20) CHARACTER SET utf8mb4", ("id", "v", "n")),  # the table is rebuilt
    ],
    ids=["drop", "add", "charset"],
)
def test_a_ddl_between_the_snapshots_start_and_its_select_is_told_as_the_tables_change(
    fresh_schema: tuple[MariaDB, str], ddl: str, names: tuple[str, ...]
) -> None:
    """The DDL ends after the consistent snapshot's position and before the SELECT (run from ``on_position``, which
    comes between them): the chunk would be read in a layout the stream only has after that position. It is
    reported as the table's change, with its new plan, never as rows or as "reading the table failed"."""
    server, schema = fresh_schema
    _latin1_table(server, schema, 10)
    reader = _ddl_reader(server, schema, CONSISTENT)
    try:
        plan = reader.plan(schema, "t")
        with pytest.raises(
            TableChanged, match=r"changed during the snapshot \(.*\); reading on in its new layout"
        ) as changed:
            reader.read(plan, None, 5, on_position=lambda _: server.execute(ddl, database=schema))
        assert changed.value.plan is not None and changed.value.plan.names == names
        assert reader.read(changed.value.plan, None, 5).rows[0][:2] == ("1", "café1")
    finally:
        reader.close()


def test_a_table_renamed_or_rekeyed_during_its_snapshot_cannot_go_on(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, n INT NOT NULL)",
        f"INSERT INTO `{schema}`.t SELECT seq, 100 - seq FROM seq_1_to_50",
        f"CREATE TABLE `{schema}`.k (id INT PRIMARY KEY, n INT NOT NULL)",
        f"INSERT INTO `{schema}`.k SELECT seq, 100 - seq FROM seq_1_to_50",
        database=schema,
    )
    reader = _ddl_reader(server, schema, CONSISTENT)
    try:
        plan = reader.plan(schema, "t")
        first = reader.read(plan, None, 20)
        server.execute(f"RENAME TABLE `{schema}`.t TO `{schema}`.t2")
        with pytest.raises(TableChanged, match=r"renamed or dropped\); ask for it again") as changed:
            reader.read(plan, first.last_key, 20)
        assert changed.value.plan is None

        plan = reader.plan(schema, "k")
        first = reader.read(plan, None, 20)
        server.execute(f"ALTER TABLE `{schema}`.k DROP PRIMARY KEY, ADD PRIMARY KEY (n)")
        with pytest.raises(TableChanged, match=r"chunk key \(id\) is not the same.*ask for it again") as changed:
            reader.read(plan, first.last_key, 20)
        assert changed.value.plan is None  # the chunks so far went by id: another key's order cannot continue them
    finally:
        reader.close()
