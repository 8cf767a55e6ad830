"""Snapshots on the wire: a snapshot's rows and markers in POLL, POLLV2 and FETCH replies, and the SNAPSHOT command,
against a relay server over real sockets. The queues are written here as the binlog worker writes them (a change per
row, entries in order), so delivery is tested without a source."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import transaction

import clientproto as cp
from clientproto import (
    Command,
    RecordFlags,
    RecordType,
    RelayClient,
    Result,
    SnapshotAction,
    SnapshotItem,
    SnapshotState,
    TableMirror,
    decode_fetch_reply,
    decode_poll_reply,
    decode_pollv2_reply,
    decode_snapshot_reply,
    encode_fetch,
    encode_snapshot,
    fetch_reply,
)
from devtools.wait import wait_for
from relay import store
from relay.models import Change, Client, QueueEntry, QueueState, ServedEvent, Snapshot
from relay.server import render
from relay.store import StoredEntry, rowcodec
from tests.helpers.records import reference_record, reference_records
from tests.helpers.relay_server import SECRET, RawClient, ServerThread, authed

pytestmark = pytest.mark.django_db(transaction=True)

INSERT, DELETE, ROW, START, END = 1, 4, 8, 16, 32


@pytest.fixture
def relay() -> Iterator[ServerThread]:
    server = ServerThread().start()
    yield server
    server.stop()


def start_marker(snapshot_id: int = 7, where: str | None = None, estimate: int | None = None) -> tuple[int, dict]:
    return START, {
        "snapshot": str(snapshot_id),
        "where": where,
        "rows_estimate": None if estimate is None else str(estimate),
    }


def end_marker(snapshot_id: int = 7, rows: int = 0, state: str = "done", error: str | None = None) -> tuple[int, dict]:
    return END, {"snapshot": str(snapshot_id), "rows": str(rows), "state": state, "error": error}


def queue(client_id: int, changes: Sequence[tuple[int, dict[str, Any]]], *, pos: int = 5000) -> list[int]:
    """Appends changes to a client's queue in one transaction as the worker does: (kind, image) each, the image being
    the after image (the before image of a delete). Returns their sequence numbers."""
    seqs = []
    with transaction.atomic():
        state, _ = QueueState.objects.select_for_update().get_or_create(client_id=client_id)
        for index, (kind, image) in enumerate(changes):
            names, values = list(image), list(image.values())
            data = rowcodec.encode(names, values, None) if kind == DELETE else rowcodec.encode(names, None, values)
            change = Change.objects.create(
                schema_name="shop",
                table_name="orders",
                kind=kind,
                binlog_file="mysql-bin.000042",
                binlog_pos=pos + index,
                row_index=0 if kind in (START, END) else index,
                timestamp=1_700_000_100,
                gtid="" if kind in (ROW, START, END) else f"0-1-{index + 1}",
                data=data,
            )
            state.last_seq += 1
            QueueEntry.objects.create(client_id=client_id, seq=state.last_seq, change=change)
            seqs.append(state.last_seq)
        state.save()
    return seqs


def poll(client: RawClient, command: int = Command.POLL) -> cp.PollEvent | None:
    result, payload = client.request(command)
    if result == Result.EMPTY:
        return None
    assert result == Result.OK, payload
    return decode_poll_reply(payload) if command == Command.POLL else decode_pollv2_reply(payload)


def snapshot(client: RawClient, action: int, tables: Sequence[tuple[str, str]], where: str = "") -> Any:
    """SNAPSHOT: the reply's items, or the refusal's text."""
    result, payload = client.request(Command.SNAPSHOT, encode_snapshot(action, tables, where))
    if result == Result.OK:
        return decode_snapshot_reply(payload)
    assert result == Result.MALFORMED and payload.endswith(b"\x00")
    return payload[:-1].decode()


# -- rendering: the cached records against the reference encoder ----------------------------------------------------


def _entries() -> list[StoredEntry]:
    images = [
        (START, ["snapshot", "where", "rows_estimate"], ["7", None, "3"]),
        (ROW, ["id", "note", "blob"], ["1", None, b"\x00\xff"]),
        (ROW, ["id", "note", "blob"], ["2", "NULL", b""]),
        (END, ["snapshot", "rows", "state", "error"], ["7", "2", "failed", "Liège est tombée"]),
        (INSERT, ["id", "note", "blob"], ["3", "x", b"\x01"]),
    ]
    entries = []
    for form, encode in enumerate((rowcodec.encode, rowcodec.encode_json)):  # what the worker writes; older stores
        for i, (kind, names, after) in enumerate(images):
            entries.append(
                StoredEntry(
                    10 + form * 10 + i,
                    kind,
                    "shop",
                    "orders",
                    "mysql-bin.000042",
                    5000 + i,
                    0,
                    1 << 33,
                    "",
                    encode(names, None, after),
                )
            )
    return entries


def test_cached_records_of_snapshots_are_the_reference_encoders_bytes() -> None:
    entries = _entries()
    cache = render.RenderCache(size=4)  # small: evictions along the way
    for _ in range(2):
        for budget in (1, 200, 1 << 30):
            records = reference_records(entries, budget)
            frame, count = render.fetch_frame(cache, entries, budget, entries[-1].seq + 3)
            assert count == len(records)
            assert frame == fetch_reply(entries[-1].seq + 3 - entries[count - 1].seq, records)
    for entry in entries:
        record = reference_record(entry)
        assert render.fetch_tail(entry) == record[12:]
        # RecordFlags SNAPSHOT closes the relay's own kinds; a row change of the binlog ends with its columns.
        assert (record[-1:] == b"\x01") == (entry.kind != INSERT)
        assert record[12] == {START: 0x10, ROW: 0x01, END: 0x20, INSERT: 0x01}[entry.kind]
    # A snapshot's row is the same record as the insert of the same row, plus its flag.
    row = entries[1]
    insert = reference_record(row._replace(kind=INSERT))
    assert reference_record(row) == struct.pack("<I", len(insert) - 3) + insert[4:] + b"\x01"
    # The same change as an insert and as a snapshot row are different records: the cache keeps them apart.
    assert render.RenderCache().record(row._replace(kind=INSERT))[0] == insert[12:]
    # The legacy payloads of a snapshot's row are an INSERT's, byte for byte.
    assert render.poll_payload(row, 3) == render.poll_payload(row._replace(kind=INSERT), 3)
    assert render.pollv2_payload(row, 3, 9) == render.pollv2_payload(row._replace(kind=INSERT), 3, 9)


# -- POLL and POLLV2: rows as inserts, markers passed over ----------------------------------------------------------


def test_poll_serves_snapshot_rows_as_inserts_and_passes_over_markers(relay: ServerThread) -> None:
    client = authed(relay)
    queue(
        client.client_id,
        [
            start_marker(estimate=2),
            (ROW, {"id": "1", "note": None}),
            (ROW, {"id": "2", "note": "b"}),
            end_marker(rows=2),
        ],
    )
    queue(client.client_id, [(INSERT, {"id": "3", "note": "c"}), start_marker(8), end_marker(8, state="cancelled")])
    events = [poll(client), poll(client), poll(client)]
    assert [(e.event_type, e.columns[0].after, e.queue_size) for e in events if e] == [
        (1, b"1", 2),  # 2 and 3 left: the markers read ahead are not counted
        (1, b"2", 1),
        (1, b"3", 0),
    ]
    assert [(c.name, c.before, c.after) for c in events[0].columns] == [("id", b"", b"1"), ("note", b"", b"NULL")]
    assert events[0].position == (1_700_000_100 << 32) | 5001
    assert poll(client) is None  # the two markers at the end: passed over, nothing to send
    # Every entry left the queue; only the three rows count as served, and only they are in the History column.
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 7)
    assert Client.objects.get(id=client.client_id).served == 3
    wait_for(lambda: ServedEvent.objects.filter(client_id=client.client_id).count() == 3)
    assert sorted(ServedEvent.objects.filter(client_id=client.client_id).values_list("kind", flat=True)) == [1, 8, 8]


def test_a_queue_of_markers_only_answers_empty_and_moves_past_them(relay: ServerThread) -> None:
    client = authed(relay)
    queue(client.client_id, [start_marker(), end_marker()])
    assert poll(client) is None
    assert poll(client, Command.POLLV2) is None
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 2)
    assert Client.objects.get(id=client.client_id).served == 0
    # Markers by the hundred (past one read-ahead) before a row: one POLL passes over all of them.
    queue(client.client_id, [start_marker(n) for n in range(300)] + [(ROW, {"id": "9"})] + [end_marker()])
    event = poll(client, Command.POLLV2)
    assert event is not None and event.event_type == 1 and event.columns[0].after == b"9"
    assert event.queue_size == 0
    assert poll(client) is None
    wait_for(lambda: Client.objects.get(id=client.client_id).acked_seq == 304)
    assert Client.objects.get(id=client.client_id).served == 1


def test_markers_between_rows_keep_the_order_of_the_rows(relay: ServerThread) -> None:
    client = authed(relay)
    changes: list[tuple[int, dict[str, Any]]] = []
    for n in range(20):
        changes += [start_marker(n), (ROW, {"id": str(n)}), (INSERT, {"id": f"i{n}"}), end_marker(n)]
    queue(client.client_id, changes)
    seen = []
    sizes = []
    for n in range(40):
        event = poll(client, Command.POLLV2 if n % 2 else Command.POLL)
        assert event is not None and event.event_type == 1
        seen.append(event.columns[0].after.decode())
        sizes.append(event.queue_size)
    assert seen == [value for n in range(20) for value in (str(n), f"i{n}")]
    assert sizes == list(range(39, -1, -1))
    assert poll(client) is None


# -- FETCH: flags and markers ---------------------------------------------------------------------------------------


def test_fetch_delivers_snapshot_rows_with_their_flag_and_the_markers(relay: ServerThread) -> None:
    client = authed(relay)
    queue(client.client_id, [(INSERT, {"id": "0", "note": "x"})])
    queue(
        client.client_id,
        [start_marker(7, "id > 0", 2), (ROW, {"id": "1", "note": None}), end_marker(7, 1, "failed", "gone")],
    )
    expected = store.read_entries(client.client_id, 0, 100)
    client.send(
        cp.encode_request(
            Command.FETCH, encode_fetch(100, 0, manual_ack=True), client_id=client.client_id, token=client.token
        )
    )
    frame = client.reply()
    assert frame == fetch_reply(0, reference_records(expected, 1 << 30))
    events = decode_fetch_reply(frame[9:]).events
    assert [(e.seq, e.type, e.flags, e.snapshot) for e in events] == [
        (1, RecordType.INSERT, 0, False),
        (2, RecordType.SNAPSHOT_START, RecordFlags.SNAPSHOT, True),
        (3, RecordType.INSERT, RecordFlags.SNAPSHOT, True),
        (4, RecordType.SNAPSHOT_END, RecordFlags.SNAPSHOT, True),
    ]
    assert events[1].marker() == cp.SnapshotMarker(True, 7, "shop", "orders", where="id > 0", rows_estimate=2)
    assert events[3].marker() == cp.SnapshotMarker(False, 7, "shop", "orders", rows=1, state="failed", error="gone")
    assert events[2].after() == {"id": b"1", "note": None} and events[2].before() == {}
    assert (events[1].row, events[1].gtid, events[1].pos) == (0, "", 5000)
    # Delivered like any record: they count as served (manual ack: once sent), and the ACK removes them.
    assert client.request(Command.ACK, cp.encode_ack(4))[0] == Result.OK
    wait_for(lambda: Client.objects.get(id=client.client_id).served == 4)


def test_a_python_client_rebuilds_a_table_from_a_snapshot(relay: ServerThread) -> None:
    with RelayClient("127.0.0.1", relay.port, SECRET, "mirror", timeout=10) as py:
        py.add_filter("IUD", "shop", "orders")
        [item] = py.snapshot(["shop.orders"])
        assert (
            item.state == SnapshotState.PENDING and Snapshot.objects.get(id=item.snapshot_id).client_id == py.client_id
        )
        # What the worker queues for it, with a change of the stream between two chunks.
        queue(
            py.client_id, [start_marker(item.snapshot_id), (ROW, {"id": "1", "v": "a"}), (ROW, {"id": "2", "v": "b"})]
        )
        queue(py.client_id, [(DELETE, {"id": "1", "v": "a"}), (INSERT, {"id": "4", "v": "d"})])
        queue(py.client_id, [(ROW, {"id": "3", "v": "c"}), end_marker(item.snapshot_id, 3)])
        mirror = TableMirror(key=("id",))
        for event in py.events(batch=3, wait_ms=0, stop_when_idle=True):
            mirror.apply(event)
        assert mirror.rows("shop", "orders") == {
            (b"2",): {"id": b"2", "v": b"b"},
            (b"3",): {"id": b"3", "v": b"c"},
            (b"4",): {"id": b"4", "v": b"d"},
        }


# -- the SNAPSHOT command -------------------------------------------------------------------------------------------


def test_snapshot_is_refused_without_a_filter_covering_the_tables_inserts(relay: ServerThread) -> None:
    client = authed(relay)
    refusal = snapshot(client, SnapshotAction.START, [("shop", "orders")])
    assert refusal.startswith("SNAPSHOT: client 'test-test' has no filter that covers inserts on shop.orders")
    store.add_filter(client.client_id, 6, "shop", "orders", 0, 0)  # updates and deletes only
    assert "no filter that covers inserts" in snapshot(client, SnapshotAction.START, [("shop", "orders")])
    assert not Snapshot.objects.exists()
    assert client.request(Command.PING) == (Result.OK, b"PONG\x00")  # the connection stays open
    store.add_filter(client.client_id, 1, "sh?p", "*", 0, 0)
    [item] = snapshot(client, SnapshotAction.START, [("shop", "orders")])
    assert item.state == SnapshotState.PENDING and Snapshot.objects.count() == 1


def test_snapshot_start_status_and_cancel(relay: ServerThread) -> None:
    client = authed(relay)
    other = authed(relay, "other")
    for session in (client, other):
        store.add_filter(session.client_id, 7, "shop", "*", 0, 0)
    tables = [("shop", "orders"), ("shop", "items")]
    started = snapshot(client, SnapshotAction.START, tables, "id > 100")
    rows = list(Snapshot.objects.order_by("id"))
    assert [(s.client_id, s.schema_name, s.table_name, s.where, s.state) for s in rows] == [
        (client.client_id, "shop", "orders", "id > 100", "pending"),
        (client.client_id, "shop", "items", "id > 100", "pending"),
    ]
    assert started == [SnapshotItem(s.id, SnapshotState.PENDING, 0, None) for s in rows]
    # Asking again gives the snapshots under way; another condition is refused while they are.
    assert snapshot(client, SnapshotAction.START, tables[:1], "id > 100") == started[:1]
    refusal = snapshot(client, SnapshotAction.START, tables[:1])
    assert refusal.startswith(f"SNAPSHOT: snapshot #{rows[0].id} of shop.orders is already under way")
    # STATUS follows the worker's progress.
    Snapshot.objects.filter(id=rows[0].id).update(state="running", rows_done=1500, rows_total=4000)
    status = snapshot(client, SnapshotAction.STATUS, [*tables, ("shop", "never")])
    assert status == [
        SnapshotItem(rows[0].id, SnapshotState.RUNNING, 1500, 4000),
        started[1],
        SnapshotItem(0, SnapshotState.NONE, 0, None),
    ]
    assert snapshot(other, SnapshotAction.STATUS, tables) == [SnapshotItem(0, SnapshotState.NONE)] * 2
    assert snapshot(other, SnapshotAction.CANCEL, tables) == [SnapshotItem(0, SnapshotState.NONE)] * 2
    # CANCEL: idempotent, and only this client's.
    cancelled = snapshot(client, SnapshotAction.CANCEL, tables[:1])
    assert cancelled == [SnapshotItem(rows[0].id, SnapshotState.CANCELLED, 1500, 4000)]
    assert snapshot(client, SnapshotAction.CANCEL, tables[:1]) == cancelled
    assert Snapshot.objects.get(id=rows[0].id).state == "cancelled"
    assert Snapshot.objects.get(id=rows[1].id).state == "pending"
    # Once it ended, a new one may be asked for, with any condition; STATUS gives the newest.
    [again] = snapshot(client, SnapshotAction.START, tables[:1])
    assert again.snapshot_id > rows[1].id and Snapshot.objects.get(id=again.snapshot_id).where == ""
    assert snapshot(client, SnapshotAction.STATUS, tables[:1]) == [again]
    Snapshot.objects.filter(id=again.snapshot_id).update(state="done", rows_done=4, rows_total=None)
    assert snapshot(client, SnapshotAction.CANCEL, tables[:1]) == [
        SnapshotItem(again.snapshot_id, SnapshotState.DONE, 4)
    ]


@pytest.mark.parametrize(
    ("tables", "where", "reason"),
    [
        ([("shop", "ord*")], "", "shop.ord*: name one table, without wildcards"),
        ([("shop", "orders")], "1; DROP TABLE orders", "the condition holds ';' (a second statement)"),
        ([("shop", "orders")], "id IN (SELECT id FROM t)", "the condition uses 'SELECT'"),
        ([("shop", "o" * 256)], "", "a name is over 255 characters"),
        ([("shop", f"t{n}") for n in range(101)], "", "101 tables in one request, the limit is 100"),
    ],
)
def test_snapshot_refusals_name_the_reason(
    relay: ServerThread, tables: list[tuple[str, str]], where: str, reason: str
) -> None:
    client = authed(relay)
    store.add_filter(client.client_id, 1, "*", "*", 0, 0)
    assert reason in snapshot(client, SnapshotAction.START, tables, where)
    assert not Snapshot.objects.exists()
    assert snapshot(client, SnapshotAction.STATUS, [("shop", "orders")]) == [SnapshotItem(0, SnapshotState.NONE)]


def test_snapshot_needs_the_session_and_a_well_formed_payload(relay: ServerThread) -> None:
    client = authed(relay)
    payload = encode_snapshot(SnapshotAction.START, [("shop", "orders")])
    assert client.request(Command.SNAPSHOT, payload, token=client.token ^ 1)[0] == Result.BAD_SESSION
    result, message = client.request(Command.SNAPSHOT, b"\x05" + payload[1:])
    assert result == Result.MALFORMED and message.startswith(b"SNAPSHOT: Action 0x05 at offset 0")
    result, message = client.request(Command.SNAPSHOT, encode_snapshot(SnapshotAction.CANCEL, [("s", "t")], "x"))
    assert result == Result.MALFORMED and b"must be empty for CANCEL" in message
    assert not Snapshot.objects.exists()
    assert client.request(Command.POLL)[0] == Result.EMPTY


def test_the_python_client_snapshot_api(relay: ServerThread) -> None:
    with RelayClient("127.0.0.1", relay.port, SECRET, "py", timeout=10) as py:
        with pytest.raises(cp.RelayError, match=r"no filter that covers inserts on shop\.orders") as info:
            py.snapshot(["shop.orders"])
        assert info.value.result == Result.MALFORMED
        py.add_filter("I", "shop", "orders")
        [item] = py.snapshot([("shop", "orders")], where="id > 1")
        assert py.snapshot_status(["shop.orders"]) == [item] and item.active
        [cancelled] = py.cancel_snapshot(["shop.orders"])
        assert (cancelled.snapshot_id, cancelled.state_name, cancelled.active) == (item.snapshot_id, "cancelled", False)
        assert Snapshot.objects.get(id=item.snapshot_id).state == "cancelled"
        assert [i.state for i in py.snapshot_status(["shop.orders", "shop.other"])] == [
            SnapshotState.CANCELLED,
            SnapshotState.NONE,
        ]
