"""Waiting for a condition: the one polling loop of the tests, the soak and the test helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 60, interval: float = 0.05, message: str = "") -> T:
    """Calls ``predicate`` until it returns a true value, and returns that value.

    Raises TimeoutError after ``timeout`` seconds; an exception from ``predicate`` (a process that died while it was
    awaited) ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {message or predicate}")
        time.sleep(interval)
