"""The collector's settings of the long-running processes (relay/gcpolicy.py): fewer, cheaper collections, and
cycles still collected."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from relay import gcpolicy


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: object = self


def test_what_start_up_made_is_frozen_and_collections_are_spaced_out(restored_gc: None) -> None:
    started = Node()  # alive at start-up: frozen, never walked again
    gcpolicy.settle_after_start()
    assert gc.get_threshold() == (gcpolicy.YOUNG_THRESHOLD, *gcpolicy.OLDER_THRESHOLDS)
    assert gc.get_freeze_count() > 0
    assert not any(obj is started for obj in gc.get_objects())  # frozen objects are in no generation
    assert started.other is started


def test_a_cycle_made_after_start_up_is_still_collected(restored_gc: None) -> None:
    gcpolicy.settle_after_start()
    cycle = Node()
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # a cycle: reference counting alone never frees it
    # Enough new containers alive at once for a young collection under the new threshold (the count is of
    # containers allocated and not yet freed).
    alive = [[] for _ in range(gcpolicy.YOUNG_THRESHOLD * 2)]
    assert gone() is None and len(alive) == gcpolicy.YOUNG_THRESHOLD * 2
