"""The store threads: every blocking store call of the server runs here, never on the event loop.

Django keeps one database connection per thread, so each store thread has its own and keeps it (no reconnect per
call). A call that fails with a connection error closes that thread's connection so that the next call reconnects.
On PostgreSQL every connection of the server runs with ``synchronous_commit`` off: a consumer's acknowledgement
then costs no WAL flush. The trade (documented in the package docstring): after a crash of PostgreSQL itself the
last few acknowledgements may be lost and those events delivered again; a crash of the relay loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from relay.store.errors import refused_as_read_only

T = TypeVar("T")

THREAD_PREFIX = "relay-store"


def _tune_connection(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if connection.vendor == "postgresql" and threading.current_thread().name.startswith(THREAD_PREFIX):
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")


connection_created.connect(_tune_connection, dispatch_uid="relay.server.synchronous_commit")


class StoreThreads:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=THREAD_PREFIX)
        self._wrappers: set[BaseDatabaseWrapper] = set()
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        return await self.submit(function, *args)

    def submit(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """The call started in a store thread, as a future (to await, or to wait for beside other work)."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._pool, functools.partial(self._call, function, args))

    def _call(self, function: Callable[..., T], args: tuple[Any, ...]) -> T:
        wrapper = connections["default"]
        if wrapper not in self._wrappers:
            with self._lock:
                self._wrappers.add(wrapper)
        try:
            return function(*args)
        except DatabaseError as exc:
            # The connection may be dead (store restarted), or read-only for good (opened while the store took no
            # writes): drop it, the next call on this thread reconnects.
            if isinstance(exc, OperationalError | InterfaceError) or refused_as_read_only(exc):
                with contextlib.suppress(DatabaseError):
                    wrapper.close()
            raise
        finally:
            # Never leave a failed transaction open on a kept connection.
            if wrapper.connection is not None and not wrapper.get_autocommit():
                with contextlib.suppress(DatabaseError):
                    wrapper.rollback()

    def shutdown(self) -> None:
        """Waits for running calls, then closes every store thread's connection."""
        self._pool.shutdown(wait=True)
        with self._lock:
            wrappers, self._wrappers = list(self._wrappers), set()
        for wrapper in wrappers:
            # The threads are gone: closing from here is the only way, and nothing else uses these connections.
            wrapper.inc_thread_sharing()
            with contextlib.suppress(DatabaseError):
                wrapper.close()
