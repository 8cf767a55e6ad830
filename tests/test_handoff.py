"""The reader-to-worker hand-off: bounded by rows, never blocking forever, in order."""

import threading
import time

import pytest

from relay.worker.handoff import Empty, RowBoundedHandoff


def test_items_come_out_in_order_and_rows_are_counted() -> None:
    handoff: RowBoundedHandoff[str] = RowBoundedHandoff(max_rows=10)
    assert handoff.put("a", 4, timeout=0)
    assert handoff.put("b", 6, timeout=0)
    assert handoff.rows == 10
    assert not handoff.put("c", 1, timeout=0.01)  # no room
    assert handoff.get(timeout=0) == "a"
    assert handoff.put("c", 1, timeout=0)
    assert [handoff.get(timeout=0), handoff.get(timeout=0)] == ["b", "c"]
    assert handoff.empty() and handoff.rows == 0
    with pytest.raises(Empty):
        handoff.get(timeout=0.01)


def test_an_item_larger_than_the_bound_passes_when_the_handoff_is_empty() -> None:
    handoff: RowBoundedHandoff[str] = RowBoundedHandoff(max_rows=10)
    assert handoff.put("huge", 1000, timeout=0)
    assert not handoff.put("next", 1, timeout=0.01)
    assert handoff.get(timeout=0) == "huge"
    assert handoff.put("next", 1, timeout=0)


def test_a_waiting_producer_resumes_when_the_consumer_takes() -> None:
    handoff: RowBoundedHandoff[int] = RowBoundedHandoff(max_rows=5)
    handoff.put(1, 5, timeout=0)
    accepted: list[bool] = []
    producer = threading.Thread(target=lambda: accepted.append(handoff.put(2, 5, timeout=5)))
    producer.start()
    time.sleep(0.05)
    assert accepted == []
    assert handoff.get(timeout=1) == 1
    producer.join(timeout=5)
    assert accepted == [True]
    assert handoff.get(timeout=1) == 2
