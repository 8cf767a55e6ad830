"""The relay server: an asyncio TCP listener, its connections, their sessions, limits and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from django.db import DatabaseError, connections

from clientproto import accepted_keys
from relay import store
from relay.server import render
from relay.server.connection import BUSY, IDLE, READING, WRITING, Connection
from relay.server.database import StoreThreads
from relay.server.history import HistoryRecorder
from relay.server.queues import SessionQueue
from relay.server.wakeup import Notifier, make_notifier
from relay.store import relayprocess

log = logging.getLogger("relay.server")

#: How often the tokens of this process's sessions are compared with the store, to close connections whose client
#: authenticated again on another relay process. On PostgreSQL the session notification does this at once and the
#: sweep only covers a LISTEN connection that was down; SQLite has no notification.
SESSION_CHECK_INTERVAL = {"postgresql": 2.0, "sqlite": 0.2}
#: Lines about connection limits (a cap hit, connections closed at their AUTH deadline) are logged at most once per
#: this many seconds per kind, with the number of occurrences: a flood of connections does not flood the log.
LIMIT_LOG_INTERVAL = 10.0
#: The receive buffer of a connection's socket (the kernel doubles it), so one read brings at most that much; with
#: the connection's own READ_LIMIT this bounds the memory a client costs whatever it sends, without slowing anything:
#: requests are small (AUTH about 1 KiB, the largest 1 MiB, read in pieces), a connection's traffic is its replies.
READ_BUFFER = 16 << 10
#: A connection without a session can be closed to make room for a new one only once it has been without one for
#: this long: a flood arriving faster than clients can send PING and AUTH would otherwise close every newcomer (the
#: newest is then refused instead, and the client retries).
EVICTION_GRACE = 1.0
#: A connection that has not sent one whole request this long after it was accepted is closed first to make room:
#: a client sends its PING (or AUTH) as soon as it connects, a flood of connections that send a byte or nothing
#: never does. So however fast a flood comes, it takes the place of its own older connections, not a client's.
SILENT_GRACE = 0.05


class ThrottledLog:
    """One log line per kind and interval, counting the occurrences it stands for."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        #: kind -> (occurrences since the last line, level, latest message)
        self._pending: dict[str, tuple[int, int, str]] = {}

    def note(self, kind: str, level: int, message: str, count: int = 1) -> None:
        pending = self._pending.pop(kind, (0, level, message))[0] + count
        now = time.monotonic()
        if now - self._last.get(kind, -self.interval) >= self.interval:
            self._emit(kind, level, message, pending, now)
        else:
            self._pending[kind] = (pending, level, message)

    def flush(self) -> None:
        """Logs what the interval held back, once it has passed (the sweeper calls this every second or so)."""
        now = time.monotonic()
        for kind, (count, level, message) in list(self._pending.items()):
            if now - self._last.get(kind, -self.interval) >= self.interval:
                del self._pending[kind]
                self._emit(kind, level, message, count, now)

    def _emit(self, kind: str, level: int, message: str, count: int, now: float) -> None:
        self._last[kind] = now
        log.log(level, "%s (%d time%s in the last %.0fs)", message, count, "" if count == 1 else "s", self.interval)


@dataclass(frozen=True)
class ServerOptions:
    address: str = "0.0.0.0"
    port: int = 6001
    #: Connections open at once. At the limit, a new connection takes the place of the oldest one that has not
    #: authenticated (so a flood of connections that never authenticate cannot lock clients out); when every open
    #: connection has authenticated, the new one is closed as soon as it is accepted.
    max_connections: int = 10_000
    #: The same limit, per remote address.
    max_connections_per_address: int = 1_000
    #: A connection without a session (no AUTH yet, or its session was replaced) is closed after this long.
    auth_timeout: float = 10.0
    #: A connection that sends no request for this long is closed.
    idle_timeout: float = 3600.0
    #: A request whose header or payload, once begun, does not arrive within this long, or whose reply the client
    #: does not read within this long, closes its connection (a slow or stuck client costs only its own connection).
    io_timeout: float = 60.0
    #: Threads running store calls; each holds one store connection.
    store_threads: int = 8
    #: On SIGTERM/SIGINT, in-flight requests get this long to finish before their connections are cut.
    shutdown_grace: float = 10.0
    #: How often the process reports to the store that it is alive; after ``relayprocess.MISSED_REPORTS`` intervals
    #: without a report, its clients count as disconnected.
    heartbeat_interval: float = 5.0


#: Descriptors kept for what is not a client connection: the listener, the store threads' connections, the LISTEN
#: connection, logs, the event loop's own.
RESERVED_DESCRIPTORS = 64


def descriptor_room(options: ServerOptions) -> ServerOptions:
    """Raises the soft RLIMIT_NOFILE to what --max-connections needs (up to the hard limit); when it cannot, lowers
    --max-connections to what the descriptors allow, so that the connection limits (which close unauthenticated
    connections to make room) act before accept() fails with EMFILE."""
    import resource

    reserve = RESERVED_DESCRIPTORS + options.store_threads
    wanted = options.max_connections + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return options
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft >= wanted:
        return options
    room = max(1, soft - reserve)
    log.warning(
        "only %d file descriptors (RLIMIT_NOFILE): serving at most %d connections instead of %d (--max-connections)",
        soft,
        room,
        options.max_connections,
    )
    return dataclasses.replace(
        options, max_connections=room, max_connections_per_address=min(options.max_connections_per_address, room)
    )


class RelayServer:
    def __init__(self, secret: str, options: ServerOptions | None = None) -> None:
        self.keys = accepted_keys(secret)  # ValueError on an empty secret
        self.options = options or ServerOptions()
        #: POLLV2's InstanceID: this server's start time, unix seconds.
        self.instance_id = int(time.time()) & 0xFFFFFFFF
        self.stopping = False
        self.threads = StoreThreads(self.options.store_threads)
        self.history = HistoryRecorder(self.threads)
        #: FETCH records rendered for this server's sessions, by change id (one server, one store: ids are unique).
        self.records = render.RenderCache()
        self.notifier: Notifier
        self.connections: set[Connection] = set()
        #: Open connections per remote address (host), and the connections without a session, oldest first (in
        #: total and per address): the candidates to close when a connection limit is reached.
        self._per_address: dict[str, int] = {}
        self._unauthenticated: dict[Connection, None] = {}
        self._unauthenticated_by_address: dict[str, dict[Connection, None]] = {}
        #: Connections that have not sent a whole request yet, oldest first (in total and per address): the first
        #: to close when a limit is reached.
        self._silent: dict[Connection, None] = {}
        self._silent_by_address: dict[str, dict[Connection, None]] = {}
        #: Lines about connection limits, throttled (connections report theirs here too).
        self.limit_log = ThrottledLog(LIMIT_LOG_INTERVAL)
        self._by_client: dict[int, Connection] = {}
        #: The connection holding each name's session here, and the session ends still being written, by name.
        self._by_name: dict[str, Connection] = {}
        self._ending: dict[str, set[asyncio.Task[None]]] = {}
        #: A lock per name while some AUTH of it runs, with the number of AUTHs holding or awaiting it.
        self._auth_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._session_closes: set[asyncio.Task[None]] = set()
        self._listener: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._session_watch: asyncio.Task[None] | None = None
        self._reporter: asyncio.Task[None] | None = None
        #: This process's RelayProcess row (None until started).
        self.process_id: int | None = None
        self._process_info: relayprocess.ProcessInfo
        self._stop_requested: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.options = descriptor_room(self.options)
        self._stop_requested = asyncio.Event()
        self.notifier = make_notifier(self.threads, self.session_announced, self.heads_moved)
        await self.notifier.start()
        self.history.start()
        self._listener = await self.loop.create_server(
            lambda: Connection(self),
            self.options.address,
            self.options.port,
            reuse_address=True,
            backlog=1024,
        )
        for sock in self._listener.sockets:
            # Accepted sockets inherit it: requests are small, and what a client sends ahead is kept by TCP, not here.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READ_BUFFER)
        self._process_info = relayprocess.ProcessInfo(
            socket.gethostname(),
            os.getpid(),
            ", ".join(f"{a[0]}:{a[1]}" for a in self.addresses),
            self.instance_id,
            datetime.datetime.fromtimestamp(self.instance_id, datetime.UTC),
        )
        self.process_id = await self.threads.run(
            relayprocess.register, self._process_info, self.options.heartbeat_interval
        )
        self._sweeper = asyncio.create_task(self._sweep(), name="relay-timeouts")
        self._session_watch = asyncio.create_task(self._watch_sessions(), name="relay-sessions")
        self._reporter = asyncio.create_task(self._report(), name="relay-heartbeat")
        log.info(
            "relay server listening on %s (instance %d, event loop %s)",
            ", ".join(f"{a[0]}:{a[1]}" for a in self.addresses),
            self.instance_id,
            "uvloop" if type(self.loop).__module__.startswith("uvloop") else "asyncio",
        )

    @property
    def addresses(self) -> list[tuple[str, int]]:
        assert self._listener is not None
        return [sock.getsockname()[:2] for sock in self._listener.sockets]

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    def request_stop(self) -> None:
        """Signal-safe from the loop's thread; from another thread use ``loop.call_soon_threadsafe``."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def serve_until_stopped(self) -> None:
        assert self._stop_requested is not None
        await self._stop_requested.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish and send their replies, mark the sessions disconnected."""
        if self.stopping:
            return
        self.stopping = True
        log.info("relay server stopping: %d connections", len(self.connections))
        if self._listener is not None:
            self._listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._session_watch is not None:
            self._session_watch.cancel()
        if self._reporter is not None:
            self._reporter.cancel()
        await self.notifier.stop()  # long-polling FETCHes answer now (empty) instead of waiting out WaitMs
        # Idle connections close now; the others after the reply to the request they are on (Connection._sent).
        for conn in list(self.connections):
            if conn.state == IDLE:
                conn.abort()
        waiting = [conn.finished for conn in self.connections]
        if waiting:
            _, late = await asyncio.wait(waiting, timeout=self.options.shutdown_grace)
            for conn in list(self.connections):
                if not conn.finished.done():
                    conn.abort()
            if late:
                await asyncio.wait(late, timeout=5)
        if self._session_closes:
            await asyncio.wait(list(self._session_closes), timeout=10)
        if self.process_id is not None:
            try:
                await self.threads.run(relayprocess.end, self.process_id)
            except DatabaseError as exc:
                log.warning("could not remove this relay process from the store: %s", exc)
        await self.history.stop()
        await self.loop.run_in_executor(None, self.threads.shutdown)
        log.info("relay server stopped")

    # -- connections ----------------------------------------------------------------------------------------------

    def admit(self, conn: Connection) -> bool:
        """Counts a new connection in, making room under the limits by closing the oldest connections without a
        session; False (refused) when the server is stopping or every connection under a full limit has a session."""
        if self.stopping:
            return False
        options = self.options
        host = conn.host
        if self._per_address.get(host, 0) >= options.max_connections_per_address:
            if not self._make_room(
                self._silent_by_address.get(host, {}), self._unauthenticated_by_address.get(host, {})
            ):
                self.limit_log.note(
                    "address-refused",
                    logging.WARNING,
                    f"refusing connections from {host}: {options.max_connections_per_address} connections from it "
                    f"are open (--max-connections-per-address), none without a session for over {EVICTION_GRACE:g}s",
                )
                return False
            self.limit_log.note(
                "address-evicted",
                logging.WARNING,
                f"{options.max_connections_per_address} connections from {host} are open "
                "(--max-connections-per-address): closing the oldest unauthenticated one for each new one",
            )
        if len(self.connections) >= options.max_connections:
            if not self._make_room(self._silent, self._unauthenticated):
                self.limit_log.note(
                    "total-refused",
                    logging.WARNING,
                    f"refusing connections: {options.max_connections} connections are open (--max-connections), "
                    f"none without a session for over {EVICTION_GRACE:g}s",
                )
                return False
            self.limit_log.note(
                "total-evicted",
                logging.WARNING,
                f"{options.max_connections} connections are open (--max-connections): closing the oldest "
                "unauthenticated one for each new one",
            )
        self.connections.add(conn)
        self._per_address[host] = self._per_address.get(host, 0) + 1
        self.unauthenticated(conn)
        self._silent[conn] = None
        self._silent_by_address.setdefault(host, {})[conn] = None
        return True

    def spoke(self, conn: Connection) -> None:
        """``conn`` sent its first whole request: it is no longer among the first to close to make room."""
        self._silent.pop(conn, None)
        same_host = self._silent_by_address.get(conn.host)
        if same_host is not None:
            same_host.pop(conn, None)
            if not same_host:
                del self._silent_by_address[conn.host]

    def _make_room(self, silent: dict[Connection, None], unauthenticated: dict[Connection, None]) -> bool:
        """Closes one connection to make room: the oldest that has not sent a whole request within SILENT_GRACE, else
        the oldest without a session for over EVICTION_GRACE; False when there is none."""
        oldest = next(iter(silent), None)
        if oldest is not None and oldest.opened <= self.loop.time() - SILENT_GRACE:
            self._close_now(oldest)
            return True
        return self._close_oldest_unauthenticated(unauthenticated)

    def _close_oldest_unauthenticated(self, candidates: dict[Connection, None]) -> bool:
        # Oldest first, so the AUTH deadlines (all auth_timeout after the connection lost or lacked its session)
        # come in order: the first one within its grace ends the search.
        youngest_deadline = self.loop.time() + self.options.auth_timeout - EVICTION_GRACE
        for conn in candidates:
            if conn.auth_deadline is not None and conn.auth_deadline > youngest_deadline:
                return False
            if not conn.authenticating:  # an AUTH under way is about to end that state: leave it be
                self._close_now(conn)
                return True
        return False

    def _close_now(self, conn: Connection) -> None:
        self.release(conn)  # counted out at once: its transport closes at the loop's next turn
        conn.abort()

    def release(self, conn: Connection) -> None:
        """Counts a connection out (once: eviction and the connection's end both call this)."""
        if conn not in self.connections:
            return
        self.connections.discard(conn)
        self.authenticated(conn)
        self.spoke(conn)  # out of the silent ones too
        left = self._per_address[conn.host] - 1
        if left:
            self._per_address[conn.host] = left
        else:
            del self._per_address[conn.host]

    def authenticated(self, conn: Connection) -> None:
        """``conn`` holds a session: it no longer has an AUTH deadline, nor can it be closed to make room."""
        conn.auth_deadline = None
        self._unauthenticated.pop(conn, None)
        same_host = self._unauthenticated_by_address.get(conn.host)
        if same_host is not None:
            same_host.pop(conn, None)
            if not same_host:
                del self._unauthenticated_by_address[conn.host]

    def unauthenticated(self, conn: Connection) -> None:
        """``conn`` has no session (new, or its session was replaced): it must AUTH within ``auth_timeout``."""
        if conn not in self.connections:
            return
        conn.auth_deadline = self.loop.time() + self.options.auth_timeout
        conn.unauthenticated_requests = 0
        self._unauthenticated[conn] = None
        self._unauthenticated_by_address.setdefault(conn.host, {})[conn] = None

    def register(self, conn: Connection, client_id: int, name: str) -> None:
        """``conn`` now holds the session of ``client_id``: an older connection of that client is closed."""
        older = self._by_client.get(client_id)
        self._by_client[client_id] = conn
        if conn.client_name != name and self._by_name.get(conn.client_name) is conn:
            del self._by_name[conn.client_name]  # the connection authenticated before under another name
        conn.client_name = name
        self._by_name[name] = conn
        conn.registered.add(client_id)
        if older is not None and older is not conn:
            log.info("client %d authenticated again from %s: closing %s", client_id, conn.peer, older.peer)
            older.kick()

    def heads_moved(self, client_ids: frozenset[int] | None) -> None:
        """The worker's unqueue-oldest policy moved these clients' queue heads (None: any client's): what their
        sessions here read ahead may be entries it discarded, so their next POLL or FETCH reads the store."""
        held = self._by_client if client_ids is None else {cid: self._by_client.get(cid) for cid in client_ids}
        for conn in held.values():
            session = None if conn is None else conn.session
            if session is not None:
                session.forget_read_ahead()

    def session_announced(self, client_id: int, token: int) -> None:
        """A relay process (this one or another) opened session ``token`` for ``client_id``.

        If a connection here holds another session of that client, its read-ahead is dropped at once (so its next
        POLL asks the store, which refuses a replaced session with 0xFB), and the store is asked whether that
        session is still the newest: if not, the connection is closed. The store decides, not the order in which
        notifications arrive, so a late notification never closes a newer session.
        """
        conn = self._by_client.get(client_id)
        session = None if conn is None else conn.session
        if conn is None or session is None or session.token == token:
            return
        session.forget_read_ahead()
        task = self.loop.create_task(self._verify_sessions({client_id: (conn, session)}))
        self._session_closes.add(task)
        task.add_done_callback(self._session_closes.discard)

    async def _verify_sessions(self, held: dict[int, tuple[Connection, SessionQueue]]) -> None:
        """Closes the connections of ``held`` whose session the store no longer holds."""
        try:
            tokens = await self.threads.run(store.session_tokens, sorted(held))
        except (DatabaseError, RuntimeError) as exc:  # RuntimeError: the store threads are shut down
            log.warning("could not check the sessions: %s", exc)
            return
        for client_id, (conn, session) in held.items():
            # The session read before the query: one this process opened meanwhile is newer than what the query
            # read, and must stay; so must an AUTH still in progress (it registers its own session).
            if tokens.get(client_id) != session.token and conn.session is session and not conn.authenticating:
                log.info("client %d has a newer session: closing %s", client_id, conn.peer)
                session.stale = True
                conn.kick()

    async def _watch_sessions(self) -> None:
        """Every few moments, the same check for every session here (SQLite has no notification; on PostgreSQL
        this covers the moments the LISTEN connection was down)."""
        interval = SESSION_CHECK_INTERVAL.get(connections["default"].vendor, 1.0)
        while True:
            await asyncio.sleep(interval)
            held = {
                client_id: (conn, conn.session)
                for client_id, conn in self._by_client.items()
                if conn.session is not None and not conn.authenticating
            }
            if held:
                await self._verify_sessions(held)

    def unregister(self, conn: Connection) -> None:
        for client_id in conn.registered:
            if self._by_client.get(client_id) is conn:
                del self._by_client[client_id]
        if self._by_name.get(conn.client_name) is conn:
            del self._by_name[conn.client_name]

    async def hand_over(self, name: str, conn: Connection) -> None:
        """Before ``conn`` opens a new session for ``name`` (under the name's AUTH lock): the session this process
        holds for it stops serving and writes what it delivered, and the ends of its earlier sessions here (a
        connection just closed) are written, so the new session starts after everything they sent.

        The connection holding it (another one) is closed first, so nothing more is served from it meanwhile; the
        same connection authenticating again serves nothing while its AUTH runs.
        """
        holder = self._by_name.get(name)
        session = None if holder is None else holder.session
        if holder is not None and session is not None:
            if holder is not conn:
                holder.kick()
            try:
                await session.flush()
            except (DatabaseError, RuntimeError) as exc:  # RuntimeError: the store threads are shut down
                log.warning("client %d: could not record deliveries before a new AUTH: %s", session.client_id, exc)
        ending = self._ending.get(name)
        if ending:
            await asyncio.wait(list(ending))

    def session_ended(self, conn: Connection, session: SessionQueue) -> None:
        """Marks the client disconnected in the store, unless a newer session (any process) took over."""
        if self._by_client.get(session.client_id) is conn:
            del self._by_client[session.client_id]
        task = self.loop.create_task(self._close_session(session))
        self._session_closes.add(task)
        task.add_done_callback(self._session_closes.discard)
        ending = self._ending.setdefault(conn.client_name, set())
        ending.add(task)

        def done(task: asyncio.Task[None], name: str = conn.client_name) -> None:
            ending.discard(task)
            if not ending and self._ending.get(name) is ending:
                del self._ending[name]

        task.add_done_callback(done)

    async def _close_session(self, session: SessionQueue) -> None:
        try:
            await session.flush()
            await self.threads.run(store.close_session, session.client_id, session.token)
        except (DatabaseError, RuntimeError) as exc:  # RuntimeError: the store threads are already shut down
            log.warning("could not mark client %d disconnected: %s", session.client_id, exc)

    async def _report(self) -> None:
        """Tells the store every few seconds that this process is alive (its sessions are real), and ends the
        sessions of relay processes that stopped reporting (killed, host lost)."""
        assert self.process_id is not None
        interval = self.options.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            sessions = {
                client_id: conn.session.token for client_id, conn in self._by_client.items() if conn.session is not None
            }
            try:
                ended = await self.threads.run(
                    relayprocess.report, self.process_id, self._process_info, interval, len(self.connections), sessions
                )
            except (DatabaseError, RuntimeError) as exc:  # RuntimeError: the store threads are shut down
                log.warning("could not report to the store: %s", exc)
                continue
            if ended:
                log.warning("ended %d session(s) of relay processes that stopped reporting", ended)

    @contextlib.asynccontextmanager
    async def auth_lock(self, name: str) -> AsyncIterator[None]:
        """AUTHs of one name run one at a time, so the newest session in the store is the one registered here; those
        of other names never wait for them (a storm of AUTHs of one name slows that name alone)."""
        lock, users = self._auth_locks.get(name, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._auth_locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._auth_locks[name][1] - 1
            if users:
                self._auth_locks[name] = (lock, users)
            else:
                del self._auth_locks[name]

    async def _sweep(self) -> None:
        """Closes idle connections and those stuck mid-request (a slow client costs only its own connection)."""
        options = self.options
        interval = max(0.05, min(1.0, options.idle_timeout / 4, options.io_timeout / 4, options.auth_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
            # Oldest first: the first one whose AUTH deadline is still ahead ends the scan (an AUTH under way is
            # left to finish; a refused one leaves the connection here for the next sweep).
            late = []
            for conn in self._unauthenticated:
                deadline = conn.auth_deadline
                if deadline is not None and now <= deadline:
                    break
                if not conn.authenticating:
                    late.append(conn)
            for conn in late:
                self._close_now(conn)
            if late:
                self.limit_log.note(
                    "auth-timeout",
                    logging.INFO,
                    f"closed connections that did not authenticate within {options.auth_timeout:g}s",
                    len(late),
                )
            self.limit_log.flush()
            for conn in list(self.connections):
                limit = {IDLE: options.idle_timeout, READING: options.io_timeout, WRITING: options.io_timeout}.get(
                    conn.state
                )
                if conn.state != BUSY and limit is not None and now - conn.since > limit:
                    log.info("connection %s: %s for %.0fs; closing", conn.peer, conn.state, now - conn.since)
                    conn.abort()


#: The environment variable that chooses the event loop (:func:`event_loop_factory`).
EVENT_LOOP_VARIABLE = "RELAY_EVENT_LOOP"
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def event_loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the server's event loop: the standard library's, or uvloop's (libuv: about a tenth less CPU per
    POLL, bench/serve.py). ``choice`` (default: $RELAY_EVENT_LOOP, else ``asyncio``) is ``asyncio``, ``uvloop``, or
    ``auto``: uvloop when it is installed. Everything else is refused (ValueError).

    The standard loop is the default: uvloop accepts a flood of connections so fast that they churn through the
    connection cap in tens of milliseconds, and a real client connecting meanwhile waited up to 10 s to get in
    (tests/test_server_limits.py's flood, through runrelay) where the standard loop lets it in at once."""
    choice = (choice or os.environ.get(EVENT_LOOP_VARIABLE) or "asyncio").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ValueError(f"{EVENT_LOOP_VARIABLE}={choice!r}: not one of {', '.join(EVENT_LOOPS)}")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ImportError(f"{EVENT_LOOP_VARIABLE}=uvloop: uvloop is not installed") from None
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def serve(secret: str, options: ServerOptions, *, install_signals: bool = True) -> None:
    """The body of ``manage.py runrelay``: a relay server until SIGTERM or SIGINT, on the event loop
    :func:`event_loop_factory` chooses (an ``asyncio.Runner`` with that loop factory: no event loop policy, which
    Python deprecates). A bad $RELAY_EVENT_LOOP (or uvloop asked for and not installed) stops the process with one
    line, as a bad key does.
    """
    try:
        factory = event_loop_factory()
    except (ValueError, ImportError) as exc:
        raise SystemExit(f"configuration error: {exc}") from None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(secret, options, install_signals=install_signals))


async def _serve(secret: str, options: ServerOptions, *, install_signals: bool) -> None:
    server = RelayServer(secret, options)
    await server.start()
    if install_signals:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, server.request_stop)
    await server.serve_until_stopped()
