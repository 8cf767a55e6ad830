"""Ingestion of a batch: queues as runs, drops within the batch, changes stored only when some queue keeps them."""

import pytest
from django.db import transaction

from binlog import Position, RowChange, Transaction
from binlog.table import ColumnInfo, TableInfo
from devtools.wait import wait_for
from relay import store
from relay.models import Change, Filter, QueueEntry, QueueState, UsageMinute, WorkerStatus
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


def test_a_queue_run_is_the_runs_entries_one_at_a_time_would_make() -> None:
    from relay.models import MAX_RUN
    from relay.worker.ingest import _Queue

    def one_at_a_time(queue: _Queue, stored_index: int) -> None:  # the entry-by-entry rule
        queue.last += 1
        if queue.runs:
            run = queue.runs[-1]
            if run[0] + run[2] == queue.last and run[1] + run[2] == stored_index and run[2] < MAX_RUN:
                run[2] += 1
                return
        queue.runs.append([queue.last, stored_index, 1])

    steps = [(0, 3), (3, MAX_RUN - 1), (MAX_RUN + 2, 5), (MAX_RUN + 7, 2 * MAX_RUN + 1), (4 * MAX_RUN, 1)]
    bulk_queue, single_queue = _Queue(acked=5, last=7, max_queue=2), _Queue(acked=5, last=7, max_queue=2)
    for start, count in steps:
        bulk_queue.add_run(start, count)
        for index in range(start, start + count):
            one_at_a_time(single_queue, index)
    assert bulk_queue.runs == single_queue.runs and bulk_queue.last == single_queue.last


@pytest.mark.parametrize("listed", [1000, 0], ids=["queues-by-id", "every-queue"])
def test_routing_a_run_at_a_time_is_routing_each_change(listed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a model of the original's rules, entry by entry; with the queues read by the routed clients' ids and
    (past ``_LISTED_CLIENTS`` routed clients) every queue."""
    monkeypatch.setattr("relay.worker.ingest._LISTED_CLIENTS", listed)
    """Limits, policies and several filters per client over mixed tables and kinds, against the per-change rule."""
    import random

    from relay.models import DiscardPolicy

    tables = {name: TableInfo("shop", name, (ColumnInfo("id", 3, "int"),)) for name in ("orders", "people")}
    setups = [  # per client: its filters (mask, schema, table, limit, policy), earliest first
        [(7, "*", "*", 0, 0)],
        [(1, "shop", "orders", 5, DiscardPolicy.UNQUEUE_OLDEST)],
        [(5, "shop", "*", 13, DiscardPolicy.IGNORE_NEWEST), (7, "*", "*", 0, 0)],
        [(2, "*", "people", 2, DiscardPolicy.NO_DISCARD), (4, "shop", "orders", 1, DiscardPolicy.UNQUEUE_OLDEST)],
        [(1, "shop", "people", 9, DiscardPolicy.IGNORE_NEWEST)],
    ]
    clients = []
    for n, filters in enumerate(setups):
        session = store.open_session(f"client-{n}")
        made = [store.add_filter(session.client_id, *spec) for spec in filters]
        clients.append((session.client_id, made))

    # The model: each client's queue as a list of row ids, entry by entry, with the filter that matched first.
    queue_of: dict[int, list[str]] = {client_id: [] for client_id, _ in clients}
    model_state = {client_id: [0, 0, 0] for client_id, _ in clients}  # last seq, discarded, max queue
    model_discards = {spec.id: 0 for _, made in clients for spec in made}
    rng = random.Random(18)
    next_id = 1
    for _ in range(6):
        changes = []
        for _ in range(rng.randint(1, 5)):  # rows events: a table and kind, several rows
            info = tables[rng.choice(list(tables))]
            kind = rng.choice((1, 2, 4))
            for _ in range(rng.randint(1, 7)):
                row = (str(next_id),)
                before, after = (None, row) if kind == 1 else (row, None) if kind == 4 else (row, row)
                changes.append(
                    RowChange(
                        "shop", info.table, kind, ("id",), before, after, "b.1", next_id, 0, 1_700_000_000, "", info
                    )
                )
                next_id += 1
        for change in changes:
            for client_id, made in clients:
                spec = next(
                    (f for f in made if f.event_mask & change.kind and f.table_name in ("*", change.table)), None
                )
                if spec is None:
                    continue
                queue, state = queue_of[client_id], model_state[client_id]
                if spec.queue_limit > 0 and len(queue) >= spec.queue_limit:
                    if spec.discard_policy == DiscardPolicy.UNQUEUE_OLDEST:
                        # The original's rule: the oldest entry (of whichever filter) for each new one, the queue
                        # staying as long as it was when another filter had filled it past this limit.
                        del queue[:1]
                        state[1] += 1
                        model_discards[spec.id] += 1
                    elif spec.discard_policy == DiscardPolicy.IGNORE_NEWEST:
                        state[1] += 1
                        model_discards[spec.id] += 1
                        continue
                queue.append((change.after or change.before)[0])
                state[0] += 1
                state[2] = max(state[2], len(queue))
        apply([Transaction(changes, Position("b.1", next_id))])

        for client_id, _ in clients:
            bounds = store.session_bounds(client_id)
            assert bounds is not None
            entries = store.read_entries(client_id, bounds.acked_seq, 1000)
            columns = [rowcodec.decode(entry.data)[0] for entry in entries]
            got = [next(v for v in (c.after, c.before) if isinstance(v, str)) for c in columns]
            assert got == queue_of[client_id], client_id
            state = QueueState.objects.get(client_id=client_id)
            assert [state.last_seq, state.discarded, state.max_queue] == model_state[client_id], client_id
        assert dict(Filter.objects.values_list("id", "discarded")) == model_discards


def test_a_small_batch_is_three_statements_on_postgresql_and_sets_the_checkpoint() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from relay.models import Checkpoint

    clients = [store.open_session(name).client_id for name in ("one", "two")]
    for client_id in clients:
        store.add_filter(client_id, 7, "*", "*")
    WorkerStatus.objects.get_or_create(source="src")
    ingestor = Ingestor("src")
    for ids in (range(1, 11), range(11, 21)):
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            ingestor.apply(batch(ids), status={"source_file": "binlog.000001", "source_pos": 200 + ids[-1]})
        statements = [query["sql"] for query in queries if query["sql"] not in ("BEGIN", "COMMIT")]
        if connection.vendor == "postgresql" and ids[0] > 1:  # the first batch loads the filters first
            # The filter version with the queues, the clients it writes to held (a deletion waits for the commit),
            # then the rest together (queue entries, states, usage, event counts, status, checkpoint, NOTIFY); the
            # ids come from a range reserved by the first batch, and the changes go by COPY, which is not a query of
            # Django's cursor.
            assert len(statements) == 3 and "FOR KEY SHARE" in statements[1], statements
        checkpoint = Checkpoint.objects.get(source="src")  # made by the first batch, moved by the second
        assert (checkpoint.binlog_file, checkpoint.binlog_pos) == ("binlog.000001", 200 + ids[-1])
    status = WorkerStatus.objects.get(source="src")
    assert (status.rows, status.transactions, status.source_pos) == (20, 2, 220)
    for client_id in clients:
        assert ids_in_queue(client_id) == [str(i) for i in range(1, 21)]


def test_a_batch_reads_the_queues_of_the_clients_it_routes_to_and_no_other() -> None:
    """Clients whose filters a batch does not touch cost it nothing, however many there are: its read of the queues
    names the clients it routes to."""
    from django.db import connection

    reads: list[tuple[str, list[int]]] = []

    def note(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if "acked_seq, q.last_seq" in sql:
            reads.append((sql, list(params or [])))
        return execute(sql, params, many, context)

    shop = store.open_session("shop").client_id
    store.add_filter(shop, 7, "shop", "orders")
    idle = [store.open_session(f"idle-{n}").client_id for n in range(40)]
    for client_id in idle:
        store.add_filter(client_id, 7, "elsewhere", "*")
    WorkerStatus.objects.get_or_create(source="src")
    ingestor = Ingestor("src")
    with connection.execute_wrapper(note):
        for ids in (range(1, 6), range(6, 11)):
            with transaction.atomic():
                ingestor.apply(batch(ids))
    assert reads and all(params == [shop] for _, params in reads), reads
    assert ids_in_queue(shop) == [str(i) for i in range(1, 11)]
    assert all(store.session_bounds(client_id).last_seq == 0 for client_id in idle)  # type: ignore[union-attr]


def test_a_batch_notifies_the_clients_whose_queues_grew_by_name() -> None:
    """On PostgreSQL the batch's NOTIFY names the clients it queued for (their long-polls wake, no other); SQLite has
    no NOTIFY (the relay server watches the waiting clients' queues instead)."""
    import psycopg2
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from relay.store.channels import QUEUE_CHANNEL, notice_clients

    shop, other, also = (store.open_session(name).client_id for name in ("shop", "other", "also"))
    store.add_filter(shop, 7, "shop", "*")
    store.add_filter(also, 7, "*", "orders")
    store.add_filter(other, 7, "other", "*")
    ingestor = Ingestor("src")
    if connection.vendor != "postgresql":
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            ingestor.apply(batch(range(1, 4)))
        assert not [query for query in queries if "pg_notify" in query["sql"]]
        assert ids_in_queue(shop) == ids_in_queue(also) == ["1", "2", "3"]
        return
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    listener = psycopg2.connect(**params)
    listener.autocommit = True
    try:
        with listener.cursor() as cursor:
            cursor.execute(f"LISTEN {QUEUE_CHANNEL}")
        with transaction.atomic():
            ingestor.apply(batch(range(1, 4)))
        wait_for(lambda: listener.poll() or bool(listener.notifies), timeout=5, message="the batch's NOTIFY")
        assert [notice_clients(n.payload) for n in listener.notifies] == [frozenset({shop, also})]
    finally:
        listener.close()


def test_a_notice_too_long_for_postgresql_names_every_client() -> None:
    from relay.store.channels import MAX_NOTICE, notice_clients, queue_notice

    assert notice_clients(queue_notice([40, 3, 12])) == frozenset({3, 12, 40})
    many = range(1, 3000)
    assert len(",".join(map(str, many))) > MAX_NOTICE
    assert queue_notice(many) == "" and notice_clients("") is None  # every waiter wakes
    assert notice_clients("3,x") is None  # a payload it cannot read wakes everyone too


def test_usage_minutes_are_of_this_hosts_clock_when_the_source_is_skewed() -> None:
    """The 1 h and 24 h windows are read against this host's clock: a source 15 minutes ahead must not put its
    changes 15 minutes into the future (nor one behind, into the past)."""
    WorkerStatus.objects.get_or_create(source="src")
    ingestor = Ingestor("src")
    ingestor.clock_offset = 900
    with transaction.atomic():
        ingestor.apply(batch(range(1, 4)))  # changes at 1_700_000_000 by the source's clock
    minutes = list(UsageMinute.objects.filter(table_name="orders").values_list("minute", "inserts"))
    here = 1_700_000_000 - 900
    assert minutes == [(here - here % 60, 3)]


def test_a_client_deleted_between_the_parts_of_a_large_transaction_gets_nothing_and_stops_nothing() -> None:
    """The parts after a large transaction's first keep its filters but read the clients again: a client deleted
    meanwhile has no queue in that read, and its changes go nowhere (they stopped the worker with a KeyError)."""
    doomed = store.open_session("doomed")
    store.add_filter(doomed.client_id, 7, "shop", "orders")
    bystander = store.open_session("bystander")
    store.add_filter(bystander.client_id, 7, "shop", "*")
    WorkerStatus.objects.get_or_create(source="src")
    ingestor = Ingestor("src")
    with transaction.atomic():
        ingestor.apply(batch(range(1, 11)), checkpoint=False, refresh_filters=True)
    store.delete_client(doomed.client_id)
    with transaction.atomic():
        ingestor.apply(batch(range(11, 21)), checkpoint=True, refresh_filters=False)
    assert ids_in_queue(bystander.client_id) == [str(i) for i in range(1, 21)]
    assert not QueueEntry.objects.filter(client_id=doomed.client_id).exists()


def test_filters_are_reloaded_for_the_clients_that_wrote_them_and_answer_as_a_full_load() -> None:
    """After each kind of filter write (ADDFILTER, an update of limit and policy, REMOVEFILTER, the admin's edit that
    gives a filter to another client, a client's deletion, the version's row deleted by hand), the worker's index
    answers as one loaded whole, and the filters of clients that wrote nothing are not read again."""
    from relay.models import Client, FilterVersion
    from relay.worker.ingest import load_filter_index

    keys = [(schema, table, kind) for schema in ("shop", "crm") for table in ("orders", "people") for kind in (1, 2, 4)]
    quiet, busy, other = (store.open_session(name).client_id for name in ("quiet", "busy", "other"))
    for n in range(50):
        store.add_filter(quiet, 7, "shop", f"t{n}")
    store.add_filter(quiet, 7, "shop", "orders")
    ingestor = Ingestor("src")
    ingestor.refresh_filters()
    quiet_filters = ingestor.index._clients[quiet]

    def check() -> None:
        assert ingestor.refresh_filters()
        whole = load_filter_index()
        assert len(ingestor.index) == len(whole)
        for key in keys:
            assert ingestor.index.match(*key) == whole.match(*key), key
        assert ingestor.index._clients[quiet] is quiet_filters  # not read again

    store.add_filter(busy, 1, "shop", "*")
    check()
    store.add_filter(busy, 1, "shop", "*", queue_limit=5, discard_policy=1)
    check()
    store.add_filter(other, 6, "*", "people")
    assert store.remove_filter(busy, 1, "shop", "*")
    check()
    store.add_filter(busy, 7, "crm", "*")
    check()
    moved = Filter.objects.get(client_id=busy)
    moved.client_id = other
    moved.save()  # the admin's change form
    check()
    Client.objects.filter(id=other).delete()
    check()
    FilterVersion.objects.all().delete()
    store.add_filter(busy, 2, "*", "orders")
    check()
