"""The store API on both stores: sessions, filters, and the consuming side of the queues as the relay server drives it
(session bounds, reads, the write of what a session delivered, ACK, history), purge and garbage collection."""

import threading
import time

import pytest
from django.db import connection, transaction

from relay import store
from relay.models import Change, Client, Filter, FilterVersion, QueueEntry, QueueState
from relay.server.queues import StaleSession
from relay.store import rowcodec
from tests.helpers.queues import Consumer, enqueue, queue_size

pytestmark = pytest.mark.django_db(transaction=True)


def rows(count: int) -> list[dict[str, str]]:
    return [{"id": str(i)} for i in range(count)]


def ids(entries: list[store.StoredEntry]) -> list[str]:
    """The id column of each entry (its after image: the rows here are inserts)."""
    return [rowcodec.decode(entry.data)[0].after for entry in entries]


def test_same_name_same_id_new_token_each_session() -> None:
    first = store.open_session("billing", "10.0.0.1:5000")
    second = store.open_session("billing", "10.0.0.2:6000")
    other = store.open_session("shipping")
    assert first.client_id == second.client_id != other.client_id
    assert first.token != second.token
    assert not store.token_is_current(first.client_id, first.token)
    assert store.token_is_current(second.client_id, second.token)
    assert store.session_tokens([first.client_id, other.client_id]) == {
        first.client_id: second.token,
        other.client_id: other.token,
    }
    client = Client.objects.get(id=first.client_id)
    assert client.connected and client.remote_address == "10.0.0.2:6000"
    store.close_session(first.client_id, first.token)  # an old session closing leaves the new one connected
    assert Client.objects.get(id=first.client_id).connected
    store.close_session(second.client_id, second.token)
    assert not Client.objects.get(id=first.client_id).connected
    with pytest.raises(store.StoreError, match="empty"):
        store.open_session("")


def test_filters_are_idempotent_and_removable() -> None:
    session = store.open_session("c")
    store.add_filter(session.client_id, 1, "shop", "orders", 10, 1)
    store.add_filter(session.client_id, 1, "shop", "orders", 20, 2)
    store.add_filter(session.client_id, 3, "shop", "orders")
    rows = list(Filter.objects.values_list("event_mask", "queue_limit", "discard_policy"))
    assert sorted(rows) == [(1, 20, 2), (3, 0, 0)]
    version = store.filter_version()
    assert store.remove_filter(session.client_id, 3, "shop", "orders")
    assert store.filter_version() == version + 1
    assert not store.remove_filter(session.client_id, 3, "shop", "orders")
    assert store.filter_version() == version + 1  # nothing removed, nothing to reload
    with pytest.raises(store.StoreError, match="event mask 8"):
        store.add_filter(session.client_id, 8, "shop", "orders")
    with pytest.raises(store.StoreError, match="discard policy 3"):
        store.add_filter(session.client_id, 1, "shop", "orders", 0, 3)


def test_concurrent_filter_writes_each_move_the_version_even_without_its_row() -> None:
    """The worker reloads its filters when the version moved: two filter writes that commit one after the other must
    give two versions, also in a store that has no version row (flushed, or edited by hand), where both create it."""
    first, second = store.open_session("first"), store.open_session("second")
    FilterVersion.objects.all().delete()
    assert store.filter_version() == 0
    first_written = threading.Event()
    errors: list[BaseException] = []

    def write(session: store.Session, hold: bool) -> None:
        try:
            if not hold:
                first_written.wait(10)
            with transaction.atomic():
                store.add_filter(session.client_id, 1, "shop", session.name)
                if hold:  # uncommitted while the other write runs
                    first_written.set()
                    time.sleep(0.5)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(first, True)), threading.Thread(target=write, args=(second, False))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert Filter.objects.count() == 2
    assert store.filter_version() == 2


def test_poll_takes_the_head_in_order() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(3))
    assert queue_size(session.client_id) == 3
    consumer = Consumer(session)
    taken = []
    while (item := consumer.poll()) is not None:
        entry, left = item
        taken.append((entry.seq, ids([entry])[0], left))
    assert taken == [(1, "0", 2), (2, "1", 1), (3, "2", 0)]
    assert queue_size(session.client_id) == 0
    assert Client.objects.get(id=session.client_id).served == 3


def test_manual_ack_redelivers_after_a_new_session() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(5))
    consumer = Consumer(session)
    batch, left = consumer.fetch(3, manual_ack=True)
    assert [entry.seq for entry in batch] == [1, 2, 3] and left == 2
    assert queue_size(session.client_id) == 5  # sent, not acknowledged: still queued
    batch, _ = consumer.fetch(3, manual_ack=True)
    assert [entry.seq for entry in batch] == [4, 5]
    assert consumer.fetch(3, manual_ack=True) == ([], 0)  # everything sent in this session
    assert consumer.ack(2) == (2, 2)
    assert consumer.ack(1) == (2, 0)  # idempotent, cumulative
    # The client dies without acking 3..5: the next session gets them again.
    consumer = Consumer(store.open_session("c"))
    batch, _ = consumer.fetch(10, manual_ack=True)
    assert [entry.seq for entry in batch] == [3, 4, 5]
    assert consumer.ack(99) == (5, 3)  # an ack past the newest entry stops there
    assert queue_size(session.client_id) == 0


def test_an_ack_carried_by_a_fetch_is_applied_before_the_batch() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(6))
    consumer = Consumer(session)
    consumer.fetch(4, manual_ack=True)
    batch, left = consumer.fetch(4, manual_ack=True, ack_upto=4)
    assert [entry.seq for entry in batch] == [5, 6] and left == 0
    assert queue_size(session.client_id) == 2


def test_a_replaced_session_can_no_longer_consume() -> None:
    old = store.open_session("c")
    enqueue(old.client_id, rows(4))
    stale = Consumer(old)
    assert [entry.seq for entry in stale.fetch(2, manual_ack=True)[0]] == [1, 2]
    new = store.open_session("c")
    with pytest.raises(StaleSession):
        stale.fetch(2, manual_ack=True)
    with pytest.raises(StaleSession):
        stale.poll()
    with pytest.raises(StaleSession):
        stale.ack(4)
    # Each primitive checks the token itself: nothing the old session writes lands.
    assert store.ack_session(old.client_id, old.token, 4) is None
    assert store.sync_session(old.client_id, old.token, 4, 4, 4) is None
    assert store.advance_head(old.client_id, old.token, 0, 4, 4) is None
    bounds = store.session_bounds(new.client_id)
    assert bounds == store.Bounds(acked_seq=0, delivered_seq=0, last_seq=4, token=new.token)
    assert Client.objects.get(id=new.client_id).served == 2


def test_session_writes_only_move_forward() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(5))
    client_id, token = session.client_id, session.token
    assert store.sync_session(client_id, token, 3, 4, 4) == store.Bounds(3, 4, 5, token)
    # A late write of an older delivery (or the worker's unqueue-oldest policy having moved the head) never rewinds.
    assert store.sync_session(client_id, token, 1, 2, 1) == store.Bounds(3, 4, 5, token)
    assert Client.objects.get(id=client_id).served == 5
    # The head moves by compare-and-set: from where the caller saw it, or not at all.
    assert store.advance_head(client_id, token, 1, 5, 2) is None
    assert store.advance_head(client_id, token, 3, 5, 2) == 5
    assert store.session_bounds(client_id) == store.Bounds(5, 5, 5, token)
    assert store.session_bounds(client_id + 1000) is None


def test_auto_ack_fetch_removes_what_it_returns() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(4))
    consumer = Consumer(session)
    batch, left = consumer.fetch(3)
    assert [entry.seq for entry in batch] == [1, 2, 3] and left == 1
    assert queue_size(session.client_id) == 1
    batch, left = consumer.fetch(3)
    assert [entry.seq for entry in batch] == [4] and left == 0
    assert consumer.fetch(3) == ([], 0)
    assert Client.objects.get(id=session.client_id).served == 4


def test_history_keeps_the_last_ten() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(15))
    consumer = Consumer(session)
    for _ in range(15):
        assert consumer.poll() is not None
    history = list(Client.objects.get(id=session.client_id).history.values_list("seq", flat=True))
    assert history == list(range(15, 5, -1))
    consumer.fetch(100)  # an empty queue serves nothing and records nothing
    assert Client.objects.get(id=session.client_id).history.count() == store.HISTORY_LENGTH


def test_history_of_many_clients_is_written_at_once_and_each_keeps_its_newest() -> None:
    import datetime

    sessions = [store.open_session(f"h{n}") for n in range(3)]
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for round_ in range(3):  # 0, 4 and 12 items a client a round
        items = {
            s.client_id: [
                store.HistoryItem(100 * round_ + k, 1, "shop", f"t{n}", at) for k in range(4 * round_ * (n + 1) // 2)
            ]
            for n, s in enumerate(sessions)
        }
        store.record_history(items)
    for n, s in enumerate(sessions):
        kept = list(Client.objects.get(id=s.client_id).history.order_by("-id").values_list("seq", "table_name"))
        newest = [200 + k for k in range(4 * (n + 1))][::-1] + [100 + k for k in range(2 * (n + 1))][::-1]
        assert kept == [(seq, f"t{n}") for seq in newest[: store.HISTORY_LENGTH]], n


def test_the_history_of_a_deleted_client_takes_no_other_clients_with_it() -> None:
    """A client deleted between its reply and the history's flush: its items are not written, and the others' are
    (one row of it failed the whole transaction at the foreign key, every client's items with it)."""
    import datetime

    kept, gone = store.open_session("kept"), store.open_session("gone")
    store.delete_client(gone.client_id)
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    store.record_history(
        {client_id: [store.HistoryItem(7, 1, "shop", "t", at)] for client_id in (gone.client_id, kept.client_id)}
    )
    assert list(Client.objects.get(id=kept.client_id).history.values_list("seq", flat=True)) == [7]


def test_garbage_collection_keeps_what_a_queue_needs() -> None:
    a = store.open_session("a")
    b = store.open_session("b")
    seqs = enqueue(a.client_id, rows(3))
    shared = [store.change_ids_at(a.client_id, seqs)[seq] for seq in seqs]
    QueueState.objects.filter(client_id=b.client_id).update(last_seq=1)
    QueueEntry.objects.create(client_id=b.client_id, seq=1, change_id=shared[1])
    consumer = Consumer(a)
    for _ in range(3):
        consumer.poll()
    entries, changes = store.collect_garbage(batch_size=2)
    assert entries == 3
    assert changes == 1  # shared[0]; shared[1] is still in b's queue, and so is everything after it
    assert set(Change.objects.values_list("id", flat=True)) == {shared[1], shared[2]}
    Consumer(b).poll()
    assert store.collect_garbage() == (1, 2)
    assert not Change.objects.exists()


def test_purge_and_delete_client() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, rows(4))
    consumer = Consumer(session)
    consumer.fetch(2, manual_ack=True)
    assert store.purge_queue(session.client_id) == 4
    assert queue_size(session.client_id) == 0
    assert consumer.poll() is None  # the session follows the head the store moved
    assert consumer.fetch(10, manual_ack=True) == ([], 0)
    with pytest.raises(store.StoreError, match="no client"):
        store.purge_queue(session.client_id + 1000)
    store.delete_client(session.client_id)
    assert not Client.objects.exists()
    assert not QueueEntry.objects.exists()


def make_changes(count: int) -> list[int]:
    """``count`` stored changes (binlog_pos 0, 1, ...), not yet in any queue; their ids."""
    return [
        Change.objects.create(
            schema_name="s",
            table_name="t",
            kind=1,
            binlog_file="b",
            binlog_pos=i,
            row_index=0,
            timestamp=0,
            data=rowcodec.encode(["id"], None, [str(i)]),
        ).id
        for i in range(count)
    ]


def test_runs_of_entries_read_collect_and_expand_like_single_ones() -> None:
    from relay.worker.ingest import entry_runs

    session = store.open_session("runs")
    ids = make_changes(7)
    # seqs 1..7 -> changes ids[0..6], but with a hole in the change ids after the third: two runs.
    pairs = [(1, ids[0]), (2, ids[1]), (3, ids[2]), (4, ids[4]), (5, ids[5]), (6, ids[6])]
    runs = entry_runs(session.client_id, pairs)
    assert runs == [(session.client_id, 1, 3, ids[0]), (session.client_id, 4, 3, ids[4])]
    for client_id, seq, count, change_id in runs:
        QueueEntry.objects.create(client_id=client_id, seq=seq, count=count, change_id=change_id)
    QueueState.objects.filter(client_id=session.client_id).update(last_seq=6)
    assert store.entry_change_ids(session.client_id, 0, 100) == pairs
    assert store.entry_change_ids(session.client_id, 2, 3) == pairs[2:5]
    assert store.change_ids_at(session.client_id, [2, 5, 9]) == {2: ids[1], 5: ids[5]}
    read = store.read_entries(session.client_id, 1, 4)
    assert [(entry.seq, entry.binlog_pos) for entry in read] == [(2, 1), (3, 2), (4, 4), (5, 5)]
    consumer = Consumer(session)
    batch, left = consumer.fetch(2)
    assert [entry.binlog_pos for entry in batch] == [0, 1] and left == 4  # changes ids[0] and ids[1]
    # The first run is only partly consumed: it stays, and so do the changes it still needs.
    store.collect_garbage()
    assert QueueEntry.objects.filter(client_id=session.client_id).count() == 2
    assert not Change.objects.filter(id__in=ids[:2]).exists() and Change.objects.filter(id=ids[2]).exists()
    consumer.fetch(2)  # seq 3 and 4: the first run is done
    store.collect_garbage()
    assert list(QueueEntry.objects.filter(client_id=session.client_id).values_list("seq", flat=True)) == [4]
    assert set(Change.objects.values_list("id", flat=True)) == {ids[5], ids[6]}


def test_read_entries_matches_the_runs_for_every_window() -> None:
    from relay.worker.ingest import entry_runs

    session = store.open_session("windows")
    ids = make_changes(12)
    # Runs of several lengths, single entries with sparse change ids, and one change missing (a gap).
    pairs = [(seq, ids[k]) for seq, k in enumerate([0, 1, 2, 4, 6, 7, 8, 10, 11], start=1)]
    for client_id, seq, count, change_id in entry_runs(session.client_id, pairs):
        QueueEntry.objects.create(client_id=client_id, seq=seq, count=count, change_id=change_id)
    QueueState.objects.filter(client_id=session.client_id).update(last_seq=len(pairs))
    Change.objects.filter(id=ids[7]).delete()
    for after in range(len(pairs) + 1):
        for limit in (1, 2, 3, 5, 100):
            expected = [(seq, ids.index(cid)) for seq, cid in pairs[after : after + limit] if cid != ids[7]]
            read = store.read_entries(session.client_id, after, limit)
            assert [(entry.seq, entry.binlog_pos) for entry in read] == expected, (after, limit)
    # The same windows with copies held: of every change, of none, of some (a run held in part), and copies of which
    # one is out of date (a restored store): the entries are those the store holds, every time.
    everything = {entry.change_id: entry[1:] for entry in store.read_entries(session.client_id, 0, 100)}
    Change.objects.filter(id=ids[4]).update(gtid="0-9-9")
    for holding in ([], list(everything), [ids[1], ids[6], ids[10]], [ids[0], ids[2], ids[8], ids[11]]):
        held = {change_id: (everything[change_id], store.change_check(everything[change_id])) for change_id in holding}
        for after in range(len(pairs) + 1):
            for limit in (1, 2, 3, 5, 100):
                alone = store.read_entries(session.client_id, after, limit)
                for check_runs in (True, False):  # the runs read with their checks, or the copies checked after
                    read = store.read_entries(session.client_id, after, limit, known=held.get, check_runs=check_runs)
                    assert read == alone, (holding, after, limit, check_runs)


def test_a_read_holds_about_its_byte_budget_of_change_data_however_many_changes_it_may_return() -> None:
    """A FETCH may ask for 10,000 entries and POLL's read-ahead for 128: changes of up to LARGE_CHANGE come with their
    data in the range read, so 10,000 of almost 1 MiB would be held at once to send a few MiB. The data comes while
    the changes before it stay within the budget; past it, a change's data is read only if the budget has room."""
    import tracemalloc

    session = store.open_session("big-rows")
    value = "x" * 150_000  # about 200 kB stored (base64): 60 of them, 12 MB
    for _ in range(3):
        enqueue(session.client_id, [{"id": str(n), "b": value} for n in range(20)], notify=False)
    tracemalloc.start()
    try:
        entries = store.read_entries(session.client_id, 0, 60, byte_budget=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stored = len(entries[0].data)
    assert len(entries) == (1 << 20) // stored  # within the budget, in queue order
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    assert peak < 3 << 20, f"a read of a 1 MiB budget held {peak >> 20} MiB"
    # A budget smaller than one change still gives the first (a reader always moves on).
    assert [entry.seq for entry in store.read_entries(session.client_id, 3, 60, byte_budget=1000)] == [4]


def test_changes_the_reader_holds_are_checked_not_read_and_read_whole_when_they_differ() -> None:
    session = store.open_session("known")
    enqueue(session.client_id, rows(6))
    first = store.read_entries(session.client_id, 0, 100)
    assert [entry.change_id for entry in first] == sorted(Change.objects.values_list("id", flat=True))
    held = {entry.change_id: (entry[1:], store.change_check(entry[1:])) for entry in first[:4]}
    asked: list[int] = []

    def known(change_id: int) -> store.KnownChange | None:
        asked.append(change_id)
        return held.get(change_id)

    again = store.read_entries(session.client_id, 0, 100, known=known)
    assert again == first and sorted(asked) == [entry.change_id for entry in first]
    # The held entries came back as they were (their fields the very objects held): the copy was only checked.
    assert all(a.data is b.data for a, b in zip(again[:4], first[:4], strict=True))
    assert all(a.data is not b.data for a, b in zip(again[4:], first[4:], strict=True))
    # The byte budget counts a held change as it counts one read.
    assert store.read_entries(session.client_id, 0, 100, byte_budget=2 * len(first[0].data), known=known) == first[:2]
    # A store that hands out ids again (restored, recreated): a held copy whose coordinates or size differ from the
    # stored change is never served; the change is read whole.
    enqueue(session.client_id, rows(4))
    first = store.read_entries(session.client_id, 0, 100)
    held.update((entry.change_id, (entry[1:], store.change_check(entry[1:]))) for entry in first)
    stale = first[1]
    Change.objects.filter(id=stale.change_id).update(data=rowcodec.encode(["id"], None, ["other"]))
    Change.objects.filter(id=first[2].change_id).update(binlog_pos=first[2].binlog_pos + 1)
    Change.objects.filter(id=first[3].change_id).update(timestamp=first[3].timestamp + 1)
    Change.objects.filter(id=first[4].change_id).update(binlog_file="mysql-bin.000099")
    Change.objects.filter(id=first[5].change_id).update(gtid="0-2-77")
    Change.objects.filter(id=first[6].change_id).update(kind=4)
    read = store.read_entries(session.client_id, 0, 100, known=known)
    assert ids(read) == ["0", "other", "2", "3", "4", "5", "0", "1", "2", "3"]
    assert read[2].binlog_pos == first[2].binlog_pos + 1 and read[3].timestamp == first[3].timestamp + 1
    assert (read[4].binlog_file, read[5].gtid, read[6].kind) == ("mysql-bin.000099", "0-2-77", 4)
    assert read[0].data is first[0].data and all(a.data is b.data for a, b in zip(read[7:], first[7:], strict=True))
    assert all(a.data is not b.data for a, b in zip(read[1:7], first[1:7], strict=True))


def test_held_changes_that_are_current_are_checked_with_the_read_of_their_runs() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    session = store.open_session("checked")
    enqueue(session.client_id, rows(40))
    # Coordinates far from the small numbers the helpers write: the store's text of a check must be the reader's.
    for n, change_id in enumerate(Change.objects.order_by("id").values_list("id", flat=True)):
        Change.objects.filter(id=change_id).update(binlog_pos=(1 << 40) + n, timestamp=0, row_index=n * 1000)
    first = store.read_entries(session.client_id, 0, 100)
    held = {entry.change_id: (entry[1:], store.change_check(entry[1:])) for entry in first}
    with CaptureQueriesContext(connection) as queries:
        again = store.read_entries(session.client_id, 0, 100, known=held.get)
    assert again == first and all(a.data is b.data for a, b in zip(again, first, strict=True))
    assert len(queries) == 1, [query["sql"] for query in queries]  # the runs, each with the check of its changes
    # A reader expecting to hold nothing reads the runs alone; what it does hold is then checked in one statement.
    with CaptureQueriesContext(connection) as queries:
        again = store.read_entries(session.client_id, 0, 100, known=held.get, check_runs=False)
    assert again == first and all(a.data is b.data for a, b in zip(again, first, strict=True))
    assert len(queries) == 2, [query["sql"] for query in queries]
    # A held change gone from the store (ids handed out again by a restored store may not reach it) is not served.
    Change.objects.filter(id=first[5].change_id).delete()
    after = store.read_entries(session.client_id, 0, 100, known=held.get)
    kept = first[:5] + first[6:]
    assert after == kept and all(a.data is b.data for a, b in zip(after, kept, strict=True))


def test_auth_of_a_known_name_restarts_its_session_announced_and_in_one_statement_on_postgresql() -> None:
    import select

    import psycopg2
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from relay.store.channels import SESSION_CHANNEL

    first = store.open_session("again")
    # A store written before queue states were made at registration: the next AUTH makes the missing one.
    QueueState.objects.filter(client_id=first.client_id).delete()
    listener = None
    if connection.vendor == "postgresql":
        listener = psycopg2.connect(**connection.get_connection_params())
        listener.autocommit = True
        with listener.cursor() as cursor:
            cursor.execute(f"LISTEN {SESSION_CHANNEL}")
    try:
        with CaptureQueriesContext(connection) as queries:
            second = store.open_session("again", "10.0.0.1:5000")
        client = Client.objects.get(id=first.client_id)
        assert second.client_id == first.client_id and second.token != first.token
        assert (client.token, client.connected, client.remote_address) == (second.token, True, "10.0.0.1:5000")
        assert QueueState.objects.filter(client_id=first.client_id, last_seq=0).exists()
        if listener is None:  # SQLite: no announcement; the session and the queue state in one transaction
            writes = [query["sql"].split()[0] for query in queries if query["sql"].startswith(("UPDATE", "INSERT"))]
            assert writes == ["UPDATE", "INSERT"], [query["sql"] for query in queries]
            return
        assert len(queries) == 1, [query["sql"] for query in queries]
        deadline = time.monotonic() + 10
        heard: list[str] = []
        while f"{second.client_id}:{second.token}" not in heard and time.monotonic() < deadline:
            select.select([listener], [], [], 0.5)
            listener.poll()
            heard += [notify.payload for notify in listener.notifies if notify.channel == SESSION_CHANNEL]
            listener.notifies.clear()
        assert f"{second.client_id}:{second.token}" in heard
        # A name never seen writes nothing in the one statement, and is then registered as before.
        third = store.open_session("new-name")
        assert Client.objects.get(id=third.client_id).token == third.token
        assert QueueState.objects.filter(client_id=third.client_id).exists()
    finally:
        if listener is not None:
            listener.close()
    store.close_session(second.client_id, first.token)  # an older session's close leaves the newer one connected
    assert Client.objects.get(id=second.client_id).connected
    store.close_session(second.client_id, second.token)
    assert not Client.objects.get(id=second.client_id).connected


def test_a_fetch_asks_for_the_runs_checks_after_reading_held_changes_in_long_runs() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from relay.server import queues, render

    ids = make_changes(40)
    sessions = {name: store.open_session(name) for name in ("first", "behind", "single")}
    for name, session in sessions.items():
        runs = [(1, 40, ids[0])] if name != "single" else [(n + 1, 1, ids[n]) for n in range(40)]
        for seq, count, change_id in runs:
            QueueEntry.objects.create(client_id=session.client_id, seq=seq, count=count, change_id=change_id)
        QueueState.objects.filter(client_id=session.client_id).update(last_seq=40)
    records = render.RenderCache()

    def read(name: str, expect_held: bool) -> tuple[queues.FetchRead, int]:
        session = sessions[name]
        with CaptureQueriesContext(connection) as queries:
            result = queues._fetch(session.client_id, session.token, None, records, 0, None, 100, 1 << 24, expect_held)
        return result, len(queries)

    first, _ = read("first", False)
    assert [entry.binlog_pos for entry in first.entries] == list(range(40)) and not first.held  # nothing held yet
    behind, statements = read("behind", True)  # held, one run: checked with the read of its run
    assert behind.entries == first.entries and behind.held and statements == 2  # the bounds, the run with its check
    # Held, but 40 runs of one entry: the next read checks the copies after reading the runs, not a run at a time.
    single, _ = read("single", True)
    assert [entry.binlog_pos for entry in single.entries] == list(range(40)) and not single.held
    again, statements = read("single", False)
    assert again.entries == single.entries and statements == 3  # the bounds, the runs, one check of the 40 copies


def test_garbage_collection_works_off_a_backlog_in_time_slices() -> None:
    session = store.open_session("slices")
    enqueue(session.client_id, rows(30))
    Consumer(session).fetch(30)
    assert store.collect_garbage(batch_size=5, max_seconds=-1) == (0, 0)  # no time left: nothing started
    assert store.collect_garbage(batch_size=5, max_seconds=0) == (0, 0)
    total = (0, 0)
    for _ in range(100):  # a generous bound: 6 batches of changes, the entries in as many or fewer
        step = store.collect_garbage(batch_size=5, max_seconds=60)
        total = (total[0] + step[0], total[1] + step[1])
        if total == (30, 30) or step == (0, 0):
            break
    assert total == (30, 30)
    assert not Change.objects.exists()


def test_garbage_collection_frees_both_kinds_when_a_batch_outlasts_the_slice() -> None:
    """Every statement outlasts a slice of a nanosecond, as one does on a slow store or with many clients: each call
    still deletes a batch of every client's consumed entries and a batch of changes, so that neither the changes nor
    the clients late in the list starve."""
    sessions = [store.open_session(f"starved-{n}") for n in range(3)]
    for session in sessions:
        enqueue(session.client_id, rows(10))  # an entry per change: 10 entries and 10 changes per client
        Consumer(session).fetch(10)

    def entries_left() -> list[int]:
        return [QueueEntry.objects.filter(client_id=session.client_id).count() for session in sessions]

    assert entries_left() == [10, 10, 10]
    calls = 0
    while Change.objects.exists() or QueueEntry.objects.exists():
        entries_before, changes_before = entries_left(), Change.objects.count()
        deleted = store.collect_garbage(batch_size=4, max_seconds=1e-9)
        calls += 1
        entries_after = entries_left()
        assert all(after < before for before, after in zip(entries_before, entries_after, strict=True) if before)
        assert Change.objects.count() < changes_before or not changes_before
        assert deleted == (sum(entries_before) - sum(entries_after), changes_before - Change.objects.count())
        assert calls <= 8  # 30 changes by 4 a call; each client's 10 entries by 4 a call meanwhile


def test_a_read_of_large_changes_stops_at_its_byte_budget() -> None:
    from relay.store.queues import LARGE_CHANGE

    session = store.open_session("big-rows")
    blob = "x" * (LARGE_CHANGE + 10)  # each change's stored text is over LARGE_CHANGE: read alone
    enqueue(session.client_id, [{"id": str(i), "blob": blob} for i in range(5)] + [{"id": "5"}])
    sizes = [len(change.data) for change in Change.objects.order_by("id")]
    one = sizes[0]
    # The first entry always comes, whatever its size; then as many as the budget holds.
    assert ids(store.read_entries(session.client_id, 0, 100, byte_budget=1)) == ["0"]
    assert ids(store.read_entries(session.client_id, 0, 100, byte_budget=3 * one)) == ["0", "1", "2"]
    whole = store.read_entries(session.client_id, 0, 100, byte_budget=sum(sizes))
    assert ids(whole) == ["0", "1", "2", "3", "4", "5"]
    assert [entry.data for entry in whole] == list(Change.objects.order_by("id").values_list("data", flat=True))
    # Reading on from there: the budget only shortens a read, it never skips an entry.
    assert ids(store.read_entries(session.client_id, 3, 100, byte_budget=1)) == ["3"]  # seqs start at 1


def test_changing_a_filters_limit_keeps_the_discards_the_worker_counted_meanwhile() -> None:
    """ADDFILTER of a known filter with another limit or policy writes those two: the worker adds to the filter's
    discard count at any moment (here, between the read of the filter and its save), and a save of every column
    would write the old count back."""
    from django.db.models import F
    from django.db.models.signals import pre_save

    session = store.open_session("toggler")
    spec = store.add_filter(session.client_id, 1, "shop", "orders", 1, 2)

    def worker_discards(sender: object, instance: Filter, **kwargs: object) -> None:
        Filter.objects.filter(id=instance.id).update(discarded=F("discarded") + 5)

    pre_save.connect(worker_discards, sender=Filter)
    try:
        store.add_filter(session.client_id, 1, "shop", "orders", 2, 2)
    finally:
        pre_save.disconnect(worker_discards, sender=Filter)
    assert Filter.objects.filter(id=spec.id).values_list("queue_limit", "discarded").get() == (2, 5)
