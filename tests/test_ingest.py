"""Ingestion of a batch: queues as runs, drops within the batch, changes stored only when some queue keeps them."""

import pytest
from django.db import transaction

from binlog import Position, RowChange, Transaction
from binlog.table import ColumnInfo, TableInfo
from relay import store
from relay.models import Change, Filter, QueueEntry, QueueState, WorkerStatus
from relay.store import rowcodec
from relay.worker.ingest import Ingestor

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = TableInfo("shop", "orders", (ColumnInfo("id", 3, "int"),))


def batch(ids: range, table: TableInfo = TABLE) -> list[Transaction]:
    changes = [
        RowChange(
            table.schema,
            table.table,
            1,
            ("id",),
            None,
            (str(i),),
            "binlog.000001",
            100 + i,
            0,
            1_700_000_000,
            "",
            table,
        )
        for i in ids
    ]
    return [Transaction(changes, Position("binlog.000001", 200 + ids[-1]))]


def apply(transactions: list[Transaction]) -> None:
    WorkerStatus.objects.get_or_create(source="src")
    with transaction.atomic():
        Ingestor("src").apply(transactions)


def ids_in_queue(client_id: int) -> list[str]:
    """The id of every queued row, head first, read as the relay server reads a queue."""
    bounds = store.session_bounds(client_id)
    assert bounds is not None
    return [rowcodec.decode(entry.data)[0].after for entry in store.read_entries(client_id, bounds.acked_seq, 1000)]


def test_a_broad_subscription_is_one_run_per_batch() -> None:
    everything = store.open_session("everything")
    store.add_filter(everything.client_id, 7, "*", "*")
    apply(batch(range(1, 101)))
    assert list(QueueEntry.objects.values_list("seq", "count")) == [(1, 100)]
    apply(batch(range(101, 151)))
    assert list(QueueEntry.objects.order_by("seq").values_list("seq", "count")) == [(1, 100), (101, 50)]
    assert ids_in_queue(everything.client_id) == [str(i) for i in range(1, 151)]


def test_drops_within_a_batch_store_only_what_some_queue_keeps() -> None:
    small = store.open_session("small")
    store.add_filter(small.client_id, 1, "shop", "orders", 2, 1)  # keeps the newest two
    apply(batch(range(1, 6)))
    assert Change.objects.count() == 2  # changes 1..3 were dropped before anything was written
    assert ids_in_queue(small.client_id) == ["4", "5"]
    state = QueueState.objects.get(client_id=small.client_id)
    assert (state.last_seq, state.discarded, state.max_queue) == (5, 3, 2)

    everything = store.open_session("everything")
    store.add_filter(everything.client_id, 7, "*", "*")
    apply(batch(range(6, 11)))
    assert ids_in_queue(small.client_id) == ["9", "10"]
    assert ids_in_queue(everything.client_id) == [str(i) for i in range(6, 11)]
    # The small queue's runs point at the right changes although it skips the batch's first three.
    assert Change.objects.count() == 2 + 5


def test_a_client_that_skips_tables_gets_several_runs() -> None:
    other = TableInfo("shop", "people", (ColumnInfo("id", 3, "int"),))
    orders_only = store.open_session("orders-only")
    store.add_filter(orders_only.client_id, 1, "shop", "orders")
    everything = store.open_session("everything")
    store.add_filter(everything.client_id, 1, "shop", "*")
    mixed = batch(range(1, 4)) + batch(range(4, 6), other) + batch(range(6, 9))
    apply(mixed)
    runs = list(QueueEntry.objects.filter(client_id=orders_only.client_id).order_by("seq").values_list("seq", "count"))
    assert runs == [(1, 3), (4, 3)]
    assert ids_in_queue(orders_only.client_id) == ["1", "2", "3", "6", "7", "8"]
    assert ids_in_queue(everything.client_id) == [str(i) for i in range(1, 9)]


def test_discards_are_counted_on_the_filter_whose_limit_dropped_them() -> None:
    client = store.open_session("limited")
    store.add_filter(client.client_id, 1, "shop", "orders", 2, 2)  # ignore newest past two
    store.add_filter(client.client_id, 1, "shop", "*", 0, 0)  # matches too, but the earlier filter's policy applies
    other = store.open_session("other")
    store.add_filter(other.client_id, 1, "*", "orders", 1, 1)  # unqueue oldest past one
    apply(batch(range(1, 6)))
    limited, unlimited = Filter.objects.filter(client_id=client.client_id).order_by("id")
    assert (limited.discarded, unlimited.discarded, unlimited.last_discard) == (3, 0, None)
    assert limited.last_discard is not None
    assert Filter.objects.get(client_id=other.client_id).discarded == 4
    assert ids_in_queue(client.client_id) == ["1", "2"] and ids_in_queue(other.client_id) == ["5"]


def test_the_schema_page_keeps_enum_and_set_labels() -> None:
    from binlog.table import ColumnInfo, TableInfo
    from relay.models import SchemaColumn
    from relay.worker.ingest import column_type_text, record_table

    columns = (
        ColumnInfo("id", 3, "int"),
        ColumnInfo("state", 254, "enum", enum_values=("new", "it's")),
        ColumnInfo("tags", 254, "set", set_values=("a", "b")),
    )
    record_table(TableInfo("shop", "orders", columns))
    stored = list(SchemaColumn.objects.order_by("ordinal").values_list("name", "type_name"))
    assert stored == [("id", "int"), ("state", "enum('new','it''s')"), ("tags", "set('a','b')")]
    long = column_type_text(ColumnInfo("e", 254, "enum", enum_values=tuple(f"label{i}" for i in range(100))))
    assert len(long) == 255 and long.endswith("…)")
