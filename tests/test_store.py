"""The store API: sessions, filters, and the consuming side of the queues on both stores."""

import pytest

from relay import store
from relay.models import Change, Client, Filter, QueueEntry, QueueState
from relay.store import rowcodec

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue(client_id: int, count: int, table: str = "orders") -> list[int]:
    """Appends ``count`` changes to a client's queue the way the worker does."""
    state, _ = QueueState.objects.get_or_create(client_id=client_id)
    ids = []
    for _ in range(count):
        change = Change.objects.create(
            schema_name="shop",
            table_name=table,
            kind=1,
            binlog_file="binlog.000001",
            binlog_pos=100 + len(ids),
            row_index=0,
            timestamp=1_700_000_000,
            data=rowcodec.encode(["id"], None, [str(len(ids))]),
        )
        state.last_seq += 1
        QueueEntry.objects.create(client_id=client_id, seq=state.last_seq, change=change)
        ids.append(change.id)
    state.save()
    return ids


def test_same_name_same_id_new_token_each_session() -> None:
    first = store.open_session("billing", "10.0.0.1:5000")
    second = store.open_session("billing", "10.0.0.2:6000")
    other = store.open_session("shipping")
    assert first.client_id == second.client_id != other.client_id
    assert first.token != second.token
    assert not store.session_is_current(first.client_id, first.token)
    assert store.session_is_current(second.client_id, second.token)
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
    signature = store.filters_signature()
    assert store.remove_filter(session.client_id, 3, "shop", "orders")
    assert not store.remove_filter(session.client_id, 3, "shop", "orders")
    assert store.filters_signature() != signature
    with pytest.raises(store.StoreError, match="event mask 8"):
        store.add_filter(session.client_id, 8, "shop", "orders")
    with pytest.raises(store.StoreError, match="discard policy 3"):
        store.add_filter(session.client_id, 1, "shop", "orders", 0, 3)


def test_poll_takes_the_head_in_order() -> None:
    session = store.open_session("c")
    ids = enqueue(session.client_id, 3)
    assert store.queue_size(session.client_id) == 3
    taken = []
    while (item := store.poll(session.client_id)) is not None:
        queued, remaining = item
        taken.append((queued.change.id, remaining))
    assert taken == [(ids[0], 2), (ids[1], 1), (ids[2], 0)]
    assert store.queue_size(session.client_id) == 0
    assert Client.objects.get(id=session.client_id).served == 3


def test_manual_ack_redelivers_after_a_new_session() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, 5)
    batch, remaining = store.fetch(session.client_id, 3, manual_ack=True)
    assert [item.seq for item in batch] == [1, 2, 3] and remaining == 5
    batch, _ = store.fetch(session.client_id, 3, manual_ack=True)
    assert [item.seq for item in batch] == [4, 5]
    assert store.ack(session.client_id, 2) == 2
    assert store.ack(session.client_id, 1) == 2  # idempotent, cumulative
    # The client dies without acking 3..5: the next session gets them again.
    store.open_session("c")
    batch, _ = store.fetch(session.client_id, 10, manual_ack=True)
    assert [item.seq for item in batch] == [3, 4, 5]
    assert store.ack(session.client_id, 99) == 5  # an ack past what was delivered stops there
    assert store.queue_size(session.client_id) == 0


def test_auto_ack_fetch_removes_what_it_returns() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, 4)
    batch, remaining = store.fetch(session.client_id, 3, manual_ack=False)
    assert [item.seq for item in batch] == [1, 2, 3] and remaining == 1
    batch, remaining = store.fetch(session.client_id, 3, manual_ack=False)
    assert [item.seq for item in batch] == [4] and remaining == 0
    assert store.fetch(session.client_id, 3, manual_ack=False) == ([], 0)


def test_history_keeps_the_last_ten() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, 15)
    for _ in range(15):
        queued, _ = store.poll(session.client_id)
        store.record_served(session.client_id, [queued])
    history = list(Client.objects.get(id=session.client_id).history.values_list("seq", flat=True))
    assert history == list(range(15, 5, -1))


def test_garbage_collection_keeps_what_a_queue_needs() -> None:
    a = store.open_session("a")
    b = store.open_session("b")
    shared = enqueue(a.client_id, 3)
    QueueState.objects.filter(client_id=b.client_id).update(last_seq=1)
    QueueEntry.objects.create(client_id=b.client_id, seq=1, change_id=shared[1])
    for _ in range(3):
        store.poll(a.client_id)
    entries, changes = store.collect_garbage(batch_size=2)
    assert entries == 3
    assert changes == 1  # shared[0]; shared[1] is still in b's queue, and so is everything after it
    assert set(Change.objects.values_list("id", flat=True)) == {shared[1], shared[2]}
    store.poll(b.client_id)
    assert store.collect_garbage() == (1, 2)
    assert not Change.objects.exists()


def test_purge_and_delete_client() -> None:
    session = store.open_session("c")
    enqueue(session.client_id, 4)
    assert store.purge_queue(session.client_id) == 4
    assert store.queue_size(session.client_id) == 0
    assert store.poll(session.client_id) is None
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
    batch, remaining = store.fetch(session.client_id, 2, manual_ack=False)
    assert [item.change.id for item in batch] == [ids[0], ids[1]] and remaining == 4
    # The first run is only partly consumed: it stays, and so do the changes it still needs.
    store.collect_garbage()
    assert QueueEntry.objects.filter(client_id=session.client_id).count() == 2
    assert not Change.objects.filter(id__in=ids[:2]).exists() and Change.objects.filter(id=ids[2]).exists()
    store.fetch(session.client_id, 2, manual_ack=False)  # seq 3 and 4: the first run is done
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


def test_garbage_collection_works_off_a_backlog_in_time_slices() -> None:
    session = store.open_session("slices")
    enqueue(session.client_id, 30)
    store.fetch(session.client_id, 30, manual_ack=False)
    assert store.collect_garbage(batch_size=5, max_seconds=-1) == (0, 0)  # no time left: nothing started
    total = (0, 0)
    for _ in range(100):
        step = store.collect_garbage(batch_size=5, max_seconds=0.001)
        total = (total[0] + step[0], total[1] + step[1])
        if total == (30, 30):
            break
    assert total == (30, 30)
    assert not Change.objects.exists()
