"""Bulk writes: COPY text on PostgreSQL (escaping, generated line formatters) and executemany on SQLite."""

from datetime import UTC, datetime

import pytest

from relay.models import Change
from relay.worker import bulk
from relay.worker.ingest import CHANGE_COLUMNS as COLUMNS

pytestmark = pytest.mark.django_db(transaction=True)

AWKWARD = 'tab\there, new\nline, cr\r, back\\slash \\N, quote " and ü'


@pytest.mark.parametrize("kinds", [None, "issisiiiss"])
def test_rows_round_trip_with_awkward_text(kinds: str | None) -> None:
    first = bulk.allocate_ids(Change._meta.db_table, 2)
    rows = [
        (first, "s", AWKWARD, 1, "binlog.000001", 4, 0, 1_700_000_000, "", AWKWARD),
        (first + 1, "s\\", "t", 4, "f", 2**40, 3, 0, "0-1-2", "{}"),
    ]
    bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds=kinds)
    stored = list(Change.objects.order_by("id").values_list(*COLUMNS))
    assert stored == rows
    assert bulk.allocate_ids(Change._meta.db_table, 5) >= first + 2


def test_ids_are_reserved_ahead_in_one_statement_and_never_twice() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    bulk.allocate_ids(Change._meta.db_table, bulk.ID_RESERVE)  # whatever was reserved before, none is left now
    with CaptureQueriesContext(connection) as queries:
        first = bulk.allocate_ids(Change._meta.db_table, 600)
    if connection.vendor == "postgresql":
        assert len(queries) == 1  # a new reserve: one statement
        with CaptureQueriesContext(connection) as queries:  # from what the first call reserved: no statement
            second = bulk.allocate_ids(Change._meta.db_table, bulk.ID_RESERVE - 600)
        assert len(queries) == 0 and second == first + 600
        with CaptureQueriesContext(connection) as queries:  # the reserve is used up: a new one
            third = bulk.allocate_ids(Change._meta.db_table, 3)
        assert len(queries) == 1 and third >= first + bulk.ID_RESERVE
        with connection.cursor() as cursor:  # what the sequence hands out next is past every range handed out
            cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [Change._meta.db_table])
            assert cursor.fetchone()[0] >= third + bulk.ID_RESERVE


def test_upserts_many_rows_in_pages() -> None:
    from django.db import connection

    from relay.models import EventCount

    table = connection.ops.quote_name(EventCount._meta.db_table)
    conflict = f"ON CONFLICT (source, event_type) DO UPDATE SET count = {table}.count + excluded.count"
    rows = [("src", event_type, event_type) for event_type in range(1, 251)]
    bulk.upsert_rows(f"INSERT INTO {table} (source, event_type, count) VALUES", rows, conflict=conflict, page=100)
    bulk.upsert_rows(f"INSERT INTO {table} (source, event_type, count) VALUES", rows[:3], conflict=conflict)
    stored = dict(EventCount.objects.values_list("event_type", "count"))
    assert stored == {event_type: event_type * (2 if event_type <= 3 else 1) for event_type in range(1, 251)}


def test_statements_are_sent_together_and_run_in_order() -> None:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from relay.models import EventCount, WorkerStatus

    WorkerStatus.objects.create(source="src", rows=5, state=WorkerStatus.State.STARTING)
    moment = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    writes = bulk.Statements()
    first = bulk.allocate_ids(Change._meta.db_table, 2)
    rows = [
        (first, "s", AWKWARD, 1, "f", 4, 0, 1, "", "100%s %% done"),
        (first + 1, "s", "t", 2, "f", 5, 0, 1, "", "{}"),
    ]
    bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds="issisiiiss", writes=writes)
    writes.update_row(
        WorkerStatus,
        {"source": "src"},
        {"rows": bulk.Added(3), "heartbeat": moment, "state": WorkerStatus.State.CONNECTED, "lag_seconds": None},
    )
    writes.update(EventCount.objects.filter(source="nobody"), count=1)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        writes.send()
    assert len(writes) == 0
    if connection.vendor == "postgresql":  # the few rows went with the other writes: one round trip for all
        assert len(queries) == 1, [query["sql"] for query in queries]
    status = WorkerStatus.objects.get(source="src")
    assert (status.rows, status.heartbeat, status.state, status.lag_seconds) == (8, moment, "connected", None)
    assert list(Change.objects.order_by("id").values_list(*COLUMNS)) == rows  # a literal % in data arrives as is


def test_many_rows_are_copied_at_once_whatever_the_batch_writes() -> None:
    writes = bulk.Statements()
    first = bulk.allocate_ids(Change._meta.db_table, bulk.FEW_ROWS + 1)
    rows = [(first + n, "s", "t", 1, "f", n, 0, 1, "", "{}") for n in range(bulk.FEW_ROWS + 1)]
    bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds="issisiiiss", writes=writes)
    assert len(writes) == 0 and Change.objects.count() == bulk.FEW_ROWS + 1


def test_a_large_row_is_written_without_copying_its_text_into_a_wider_buffer() -> None:
    """A row of tens of MB (a large BLOB's record) costs its COPY text once more, plus chunks: the worker's peak
    memory for a large row is a few copies of it, not a buffer of 4 bytes a character besides."""
    import tracemalloc

    size = 20_000_000
    record = "R" + "x" * size
    first = bulk.allocate_ids(Change._meta.db_table, 3)
    rows = [
        (first + n, "s", "t", 1, "binlog.000001", 4, n, 1_700_000_000, "", text)
        for n, text in enumerate(("a", record, "ü" * 70_000))
    ]
    tracemalloc.start()
    try:
        bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds="issisiiiss")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * size, f"{peak / size:.1f} times the row"
    assert list(Change.objects.order_by("id").values_list("data", flat=True)) == ["a", record, "ü" * 70_000]


def test_the_compiled_copy_text_is_the_python_formatters() -> None:
    """relay/worker/_copytext.c (loaded here whatever RELAY_NATIVE says; scripts/bootstrap builds it): the UTF-8 of
    the Python line formatter's text for rows of plain ints and strs, and None, so that the formatter runs, for any
    other row."""
    import importlib
    import random

    compiled = importlib.import_module("relay.worker._copytext")
    rng = random.Random(3)
    texts = ["", "x", AWKWARD, "\\\\N", "\t\n\r\\", "ü中😀", "a" * 300, "nul\x00in\tside\x00", "\x00"]
    numbers = [0, 1, -1, 9, 10, -10, 2**31, 2**63 - 1, -(2**63), 1_700_000_000]
    for _ in range(500):
        kinds = "".join(rng.choice("is") for _ in range(rng.randrange(1, 8)))
        rows = [
            tuple(rng.choice(numbers) if kind == "i" else rng.choice(texts) for kind in kinds)
            for _ in range(rng.randrange(0, 5))
        ]
        expected = "".join(map(bulk._line_formatter(kinds), rows))
        assert compiled.copy_text(rows, kinds) == expected.encode("utf-8")
    formatter_only = [
        [(2**63,)],  # past 64 bits
        [(True,)],  # not an int itself ("True" in the formatter's text)
        [[1]],  # not a tuple
        [(1, 2)],  # another width
    ]
    for rows in formatter_only:
        assert compiled.copy_text(rows, "i") is None
    assert compiled.copy_text([("lone \udc80",)], "s") is None  # not UTF-8: the driver refuses it as before
    assert compiled.copy_text([(_Text("x"),)], "s") is None
    with pytest.raises(ValueError, match="'x' is not a column kind"):
        compiled.copy_text([], "ix")


@pytest.mark.parametrize("path", ["compiled", "formatter"])
def test_copy_text_of_both_paths_is_stored_alike(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    monkeypatch.setattr(
        bulk, "_compiled", importlib.import_module("relay.worker._copytext") if path == "compiled" else None
    )
    first = bulk.allocate_ids(Change._meta.db_table, 60)
    rows = [
        (first + n, "s", AWKWARD, 1, "binlog.000001", n, -n, 1_700_000_000, "0-1-2", AWKWARD * n) for n in range(60)
    ]
    bulk.insert_rows(Change._meta.db_table, COLUMNS, rows, kinds="issisiiiss")
    assert list(Change.objects.order_by("id").values_list(*COLUMNS)) == rows


class _Text(str):
    """Text of a str subclass: not what the compiled path takes as it is."""
