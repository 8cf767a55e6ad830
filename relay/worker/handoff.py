"""The reader thread's hand-over of transactions to the worker's main thread, bounded by rows, not items.

Bounding by rows keeps memory flat whatever the transaction sizes (a part of a large transaction holds thousands
of rows, a typical transaction a few), while letting many small transactions queue up so the main thread can take
them as one batch. The worker counts a transaction's rows weighted by their bytes (``Transaction.weight``), so wide rows
fill it sooner.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Empty(Exception):
    """Nothing arrived in time."""


class RowBoundedHandoff(Generic[T]):
    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._items: deque[tuple[T, int]] = deque()
        self._rows = 0
        self._lock = threading.Condition()

    def put(self, item: T, rows: int, timeout: float) -> bool:
        """Adds ``item`` (carrying ``rows`` rows); False if there was no room within ``timeout`` seconds.

        An item is always accepted into an empty hand-off, however large, so nothing can wait forever.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: not self._items or self._rows + rows <= self.max_rows, timeout):
                return False
            self._items.append((item, rows))
            self._rows += rows
            self._lock.notify_all()
            return True

    def get(self, timeout: float) -> T:
        with self._lock:
            if not self._lock.wait_for(lambda: bool(self._items), timeout):
                raise Empty
            item, rows = self._items.popleft()
            self._rows -= rows
            self._lock.notify_all()
            return item

    def empty(self) -> bool:
        with self._lock:
            return not self._items

    @property
    def rows(self) -> int:
        return self._rows
