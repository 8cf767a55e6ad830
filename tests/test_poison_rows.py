"""No poison rows: a row of any size is delivered, and a reply a client cannot take is never counted as delivered.

In the test process: a batch holds one event at least whatever its size, a refused reply raises at once instead of
reconnecting for ever, and neither a manual-ack nor a failed auto-ack reply moves the head. With real processes
(MariaDB, ``runbinlog``, ``runrelay``): an 80 MB update image reaches a manual-ack FETCH client, then the row behind it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from clientproto import FETCH_BYTE_BUDGET, MAX_REPLY_PAYLOAD, RelayClient, ReplyTooLarge
from devtools.wait import wait_for
from relay.models import Client
from tests.helpers.mariadb import MariaDB
from tests.helpers.processes import start_relay
from tests.helpers.queues import enqueue
from tests.helpers.relay_server import SECRET, ServerThread
from tests.helpers.worker import fetch_events, filtered_client, start_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def relay() -> Iterator[ServerThread]:
    server = ServerThread().start()
    yield server
    server.stop()


def client_of(relay: ServerThread, name: str, **options: object) -> RelayClient:
    client = RelayClient("127.0.0.1", relay.port, SECRET, name, timeout=30, **options)  # type: ignore[arg-type]
    client.connect()
    return client


def acked_seq(client_id: int) -> int:
    return Client.objects.get(id=client_id).acked_seq


def test_the_default_client_limit_covers_the_largest_row() -> None:
    assert MAX_REPLY_PAYLOAD >= (1 << 30) + FETCH_BYTE_BUDGET  # MySQL's largest row event, plus a batch's budget
    assert MAX_REPLY_PAYLOAD <= 0xFFFFFFFF  # what PayloadSize can say


def test_a_fetch_batch_always_holds_one_event_whatever_its_size(relay: ServerThread) -> None:
    client = client_of(relay, "big")
    big = "b" * (FETCH_BYTE_BUDGET + (2 << 20))  # one row over the whole batch budget
    enqueue(client.client_id, [{"id": "1", "v": big}, {"id": "2", "v": "small"}, {"id": "3", "v": "small"}])
    first = client.fetch(500, manual_ack=True)
    assert [e.seq for e in first] == [1] and first[0].after()["v"] == big.encode()
    assert [e.seq for e in client.fetch(500, manual_ack=True, ack_upto=1)] == [2, 3]
    client.ack(3)
    assert acked_seq(client.client_id) == 3


def test_a_reply_over_the_client_limit_raises_and_a_manual_ack_one_is_delivered_again(relay: ServerThread) -> None:
    small = client_of(relay, "refuses", max_reply_payload=1 << 20)
    enqueue(small.client_id, [{"id": "1", "v": "x" * (2 << 20)}, {"id": "2", "v": "after"}])
    started = time.monotonic()
    with pytest.raises(ReplyTooLarge, match="max_reply_payload is 1048576"):
        small.fetch(10, manual_ack=True)
    assert time.monotonic() - started < 5  # raised at once: reconnecting would only get the same reply again
    assert not small.connected
    time.sleep(0.3)
    assert acked_seq(small.client_id) == 0
    # A client that takes it (the default limit) gets the row, then the one behind it.
    taker = client_of(relay, "refuses")
    events = taker.fetch(10, manual_ack=True)
    assert [e.seq for e in events] == [1, 2] and len(events[0].after()["v"]) == 2 << 20
    taker.ack(2)
    assert acked_seq(taker.client_id) == 2


def test_an_auto_ack_reply_whose_sending_failed_is_not_counted_as_delivered(relay: ServerThread) -> None:
    # 32 MB is more than loopback's socket buffers hold: the client closes after the header, so the relay's send
    # fails and the head must stay where it was.
    client = client_of(relay, "auto", max_reply_payload=1 << 20)
    enqueue(client.client_id, [{"id": "1", "v": "y" * (32 << 20)}, {"id": "2", "v": "after"}])
    with pytest.raises(ReplyTooLarge):
        client.fetch(10)
    wait_for(lambda: not Client.objects.get(id=client.client_id).connected, timeout=10, message="session end")
    assert acked_seq(client.client_id) == 0
    again = client_of(relay, "auto")
    assert [e.seq for e in again.fetch(10)] == [1]  # alone: it is over the batch budget
    assert [e.seq for e in again.fetch(10)] == [2]
    wait_for(lambda: acked_seq(again.client_id) == 2, timeout=10, message="the delivery written behind the reply")


def test_an_80_mb_update_reaches_a_manual_ack_client_and_the_row_behind_it_follows(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    server, schema = fresh_schema
    size = 40_000_000
    server.execute(f"CREATE TABLE `{schema}`.files (id INT PRIMARY KEY, body LONGBLOB)")
    _relay, port = start_relay(server)
    consumer = filtered_client(port, "large-rows", "UI", schema, "files", timeout=120)
    worker = start_worker(server, server.binlog_position(), batch_ms=10)
    # The 40 MB values are made by the source (REPEAT), so the test sends no large statement itself.
    server.execute(
        f"INSERT INTO `{schema}`.files VALUES (1, REPEAT('a', {size}))",
        f"UPDATE `{schema}`.files SET body = REPEAT('b', {size}) WHERE id = 1",
        f"INSERT INTO `{schema}`.files VALUES (2, 'the row behind it')",
    )
    events = fetch_events(consumer, worker, 3, 240, manual_ack=True)
    assert [(e.seq, e.type) for e in events] == [(1, 1), (2, 2), (3, 1)], worker.output[-3000:]
    update = events[1]
    before, after = update.before()["body"], update.after()["body"]
    assert isinstance(before, bytes) and isinstance(after, bytes)
    assert (len(before), len(after)) == (size, size)
    assert before == b"a" * size and after == b"b" * size
    assert events[2].after() == {"id": b"2", "body": b"the row behind it"}
    assert acked_seq(consumer.client_id) == 3
    consumer.close()
    worker.stop()
