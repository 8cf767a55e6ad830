"""The collector's pace in the relay server (relay/gcpolicy.py): fewer collections, and cycles still collected."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from relay import gcpolicy


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: object = self


def test_collections_are_spaced_out(restored_gc: None) -> None:
    gcpolicy.space_out_collections()
    assert gc.get_threshold() == (gcpolicy.YOUNG_THRESHOLD, *gcpolicy.OLDER_THRESHOLDS)


def test_a_cycle_is_still_collected_at_the_new_pace(restored_gc: None) -> None:
    gcpolicy.space_out_collections()
    gc.collect()
    cycle = Node()
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # a cycle: reference counting alone never frees it
    # Enough new containers alive at once for a young collection at the new pace (the count is of containers
    # allocated and not yet freed).
    alive = [[] for _ in range(gcpolicy.YOUNG_THRESHOLD * 2)]
    assert gone() is None and len(alive) == gcpolicy.YOUNG_THRESHOLD * 2
