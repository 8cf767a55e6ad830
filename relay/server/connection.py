"""One client connection: read frames, check them, run the command, send exactly one reply per request.

A connection is the event loop's protocol (callbacks, no task of its own): a POLL that its session's read-ahead
answers and a PING are served within the callback that brought them; every other request runs as a task.

Every failure stays inside its connection: a bad frame gets its error reply (and a close when the stream can no
longer be trusted), a store failure gets an empty reply (POLL, POLLV2, FETCH: the client simply polls again) or a
close (the other commands, which clients re-send after reconnecting), and anything unexpected is logged and closes
this connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import TYPE_CHECKING, cast

from django.db import DatabaseError

from clientproto import (
    EMPTY_REPLY,
    FETCH_BYTE_BUDGET,
    MAX_PAYLOAD,
    MAX_UNAUTHENTICATED_PAYLOAD,
    OK_REPLY,
    PONG_REPLY,
    REQUEST_HEADER_SIZE,
    AckRequest,
    AddFilterRequest,
    AuthRequest,
    BadChecksum,
    Command,
    FetchRequest,
    FilterIdentity,
    FilterInfo,
    ProtocolError,
    Result,
    SnapshotRequest,
    Status,
    UnknownCommand,
    ack_reply,
    auth_failed_reply,
    auth_reply,
    bad_session_reply,
    decode_request,
    decode_request_header,
    error_reply,
    message_reply,
    removefilter_reply,
    snapshot_reply,
    status_reply,
    verify_request,
)
from clientproto.codec import DECODERS, SESSIONLESS_COMMANDS, Request
from clientproto.header import RequestHeader, payload_sum, verify_summed_request
from relay import store
from relay.server import snapshots
from relay.server.queues import Delivery, SessionQueue, StaleSession
from relay.server.wakeup import Waiter

if TYPE_CHECKING:
    from relay.server.server import RelayServer

log = logging.getLogger("relay.server")

#: Longest filter name the store keeps (Filter.schema_name/table_name).
MAX_STORED_NAME = 255

#: Requests other than PING a connection may send without a session (AUTH and its retries): a client pipelining
#: them before AUTH is closed after this many, so it cannot keep the server busy. PINGs are not counted: the original
#: answers them without AUTH, and a health check may ping for as long as the AUTH deadline lets it.
MAX_UNAUTHENTICATED_REQUESTS = 16

# What a connection is doing, for the timeout sweeper.
IDLE, READING, BUSY, WRITING = "idle", "reading", "busy", "writing"

#: Bytes a connection keeps of what its client sent ahead while a request is served (past this, reading pauses and
#: the rest waits with TCP): requests are small, and a client's traffic is in its replies.
READ_LIMIT = 32 << 10

#: Requests a connection serves in one turn of the event loop before the other connections get theirs: a client
#: that sends hundreds at once (pipelined) is served on, a turn at a time, and never holds the loop meanwhile.
TURN_REQUESTS = 16

#: The request header's fields (clientproto.header), unpacked in place from what arrived.
_unpack_header = struct.Struct("<HHIIIIIII").unpack_from
_POLL = int(Command.POLL)
_POLLV2 = int(Command.POLLV2)
_POLLS = frozenset((_POLL, _POLLV2))
_MASK32 = 0xFFFFFFFF

#: Commands whose payload the protocol ignores. The original read such payloads whatever their size, and its PHP
#: client's POLL carries the previous reply as its payload (it never clears it): a session's payload of these, of any
#: size, is summed for the checksum as it streams in and dropped, never kept.
_PING = int(Command.PING)
_PAYLOAD_IGNORED = frozenset((_POLL, _POLLV2, _PING))


class _IgnoredPayload:
    """A request whose ignored payload is being read past: its header, the bytes still to come, their sum so far."""

    __slots__ = ("header", "remaining", "summed")

    def __init__(self, header: RequestHeader) -> None:
        self.header = header
        self.remaining = header.payload_size
        self.summed = 0

    def take(self, data: bytes | bytearray, at: int, end: int) -> int:
        """Reads past what ``data[at:end]`` holds of the payload; returns where the payload (or ``data``) ends."""
        upto = min(end, at + self.remaining)
        self.summed += payload_sum(memoryview(data)[at:upto])
        self.remaining -= upto - at
        return upto


class _Close(Exception):
    """Close this connection after the reply (if any) is sent."""


class Connection(asyncio.Protocol):
    """One client connection, as the event loop's protocol callbacks.

    Requests are parsed from what the transport delivers. One request is served at a time: a POLL served from its
    session's read-ahead and a PING are answered within the callback that brought them (no task, no await); every
    other request runs as a task, and what arrives meanwhile waits in the buffer (reading pauses past
    :data:`READ_LIMIT`). A reply counts as delivered once the transport holds none of it (its write buffer limit is
    0, so ``pause_writing`` says when TCP did not take a reply whole and ``resume_writing`` when it did); the next
    request is served only then, so a client that does not read its replies stops being read.
    """

    def __init__(self, server: RelayServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        #: The remote address, for the per-address connection limit.
        self.host = ""
        self.session: SessionQueue | None = None
        #: The name the session was opened for (the server finds a name's session by it when AUTH comes again).
        self.client_name = ""
        self.state = IDLE
        self.since = self.opened = self.loop.time()
        #: No whole request received yet (see the server's SILENT_GRACE).
        self.silent = True
        #: The clients this connection authenticated as (the server's register).
        self.registered: set[int] = set()
        self.closing = False
        #: True while an AUTH of this connection runs: its new session is not registered yet.
        self.authenticating = False
        #: Without a session, the connection is closed at this loop time (None while it holds a session; set by
        #: the server's ``unauthenticated``).
        self.auth_deadline: float | None = None
        #: Requests sent without a session, since the connection lacks one (bounded: MAX_UNAUTHENTICATED_REQUESTS).
        self.unauthenticated_requests = 0
        #: Done once the connection is closed and its session handed back (the server's shutdown waits for it).
        self.finished: asyncio.Future[None] = self.loop.create_future()
        self._waiter: Waiter | None = None
        #: The POLL/FETCH delivery whose reply is being sent: it counts as delivered once the reply is out.
        self._unsent: tuple[SessionQueue, Delivery] | None = None
        #: Loop time of the last PING written as activity (the client's last_seen), see _ping_activity.
        self._ping_written = 0.0
        self._ping_write: asyncio.Task[None] | None = (
            None  # the last PING's activity write (kept: a task needs a reference)
        )
        #: What arrived and is not served yet: the start of a request, or requests sent ahead.
        self._input: bytes | bytearray = b""
        #: The request being served by a task (every request but a PING and a POLL from the read-ahead).
        self._task: asyncio.Task[None] | None = None
        #: A reply that TCP has not taken whole yet; whether the connection closes once it has.
        self._writing = False
        self._close_after_write = False
        self._reading_paused = False
        #: Requests are left in the input for the next turn (TURN_REQUESTS): a callback to serve them is scheduled.
        self._next_turn = False
        self._eof = False
        self._lost = False
        self._finished = False
        #: A request of this session whose ignored payload is being read past.
        self._ignoring: _IgnoredPayload | None = None

    # -- transport callbacks --------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports do not derive from asyncio.Transport, but have its methods.)
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "")
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A reply is delivered once the transport holds none of it (see the class docstring).
        transport.set_write_buffer_limits(high=0)
        if not self.server.admit(self):
            self.closing = True
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        buffered = self._input
        if buffered:
            if type(buffered) is bytes:
                buffered = bytearray(buffered)
            buffered += data
            self._input = buffered
        else:
            self._input = data
        if self._task is not None or self._writing or self._next_turn:
            # The request in flight (or the requests left for the next turn) come first; what the client sends
            # meanwhile stays with TCP past the limit.
            if len(self._input) > READ_LIMIT and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        self._serve_input()

    def eof_received(self) -> bool:
        # The requests already received are answered; the connection closes once none is left in flight. A
        # long-poll ends now, empty: a client that closed the connection while waiting must not have the next
        # commit's rows sent, and counted, to a socket nobody reads.
        self._eof = True
        if self._waiter is not None:
            self._waiter.event.set()
        if self._task is None and not self._writing and not self._next_turn:
            self._close()
        return True

    def pause_writing(self) -> None:
        """TCP did not take the reply whole (the transport flags it at once: its high-water mark is 0)."""

    def resume_writing(self) -> None:
        """The rest of the reply is with TCP now: it counts, and the next request is served, at the loop's next turn
        (the transport calls this from its write callback, which ends the connection itself once its buffer is empty
        and it is closing: closed from here, the connection would end twice)."""
        if self._writing and not self._lost:
            self.loop.call_soon(self._written)

    def _written(self) -> None:
        if self._writing and not self._lost:
            self._writing = False
            self._sent(self._close_after_write)
            if not self.closing:
                self._serve_input()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.closing = True
        self._writing = False
        self._unsent = None  # a reply the client did not take whole delivers nothing
        if self._waiter is not None:
            self._waiter.event.set()  # a long-poll ends now
        if self._task is None:
            self._finish()
        # else the task's end finishes the connection: its session is handed back after its request.

    # -- serving requests -----------------------------------------------------------------------------------------

    def _serve_input(self) -> None:
        """Serves the requests received, in order, until one runs as a task, waits for TCP, or is incomplete, or
        TURN_REQUESTS were served (the rest in a later turn of the loop)."""
        if self._next_turn:
            return  # the scheduled turn serves them, in order
        data = self._input
        at = 0
        end = len(data)
        served = False
        turn = 0
        while not self.closing and self._task is None and not self._writing:
            ignoring = self._ignoring
            if ignoring is not None:
                at = ignoring.take(data, at, end)
                if ignoring.remaining:
                    break
                self._ignoring = None
                served = True
                self._request_past_payload(ignoring)
                continue
            if end - at < REQUEST_HEADER_SIZE:
                break
            if turn == TURN_REQUESTS:
                self._next_turn = True
                self.loop.call_soon(self._turn)
                break
            turn += 1
            fields = _unpack_header(data, at)
            command, sub, size, version, client_id, token, checksum, reserved1, reserved2 = fields
            session = self.session
            if (
                command in _POLLS
                and not size
                and session is not None
                and client_id == session.client_id
                and token == session.token
                and checksum == (command + sub + version + client_id + token + reserved1 + reserved2) & _MASK32
            ):
                # A well-formed POLL of this connection's session, as _request would find it: served from the
                # read-ahead when it holds an entry, with none of the general path's steps.
                delivery = session.take(command == _POLLV2)
                if delivery is not None:
                    at += REQUEST_HEADER_SIZE
                    served = True
                    self._unsent = (session, delivery)
                    self._send(delivery.payload)
                    continue
            # Before AUTH only small payloads are read: unauthenticated connections cost a few KiB each.
            limit = MAX_PAYLOAD if session is not None else MAX_UNAUTHENTICATED_PAYLOAD
            if size and session is not None and command in _PAYLOAD_IGNORED:
                at += REQUEST_HEADER_SIZE
                self._ignoring = _IgnoredPayload(RequestHeader._make(fields))
                continue
            if size > limit:  # the payload is never read
                try:
                    decode_request_header(bytes(data[at : at + REQUEST_HEADER_SIZE]), max_payload=limit)
                except ProtocolError as exc:
                    if self.session is None:
                        exc = type(exc)(f"{exc}; before AUTH the limit is {MAX_UNAUTHENTICATED_PAYLOAD} bytes")
                    self._input = b""
                    self._send(error_reply(exc), close=True)
                    return
            if end - at - REQUEST_HEADER_SIZE < size:
                break
            start = at + REQUEST_HEADER_SIZE
            payload = bytes(data[start : start + size]) if size else b""
            at = start + size
            served = True
            if self.silent:
                self.silent = False
                self.server.spoke(self)
            if session is None and command != _PING:
                self.unauthenticated_requests += 1
                if self.unauthenticated_requests > MAX_UNAUTHENTICATED_REQUESTS:
                    self.server.limit_log.note(
                        "unauthenticated-requests",
                        logging.INFO,
                        f"closed connections that sent over {MAX_UNAUTHENTICATED_REQUESTS} requests without AUTH",
                    )
                    self._input = b""
                    self._close()
                    return
            self._request(RequestHeader._make(fields), payload)
        if self.closing:
            self._input = b""
            return
        self._input = data[at:] if at else data
        if self._task is not None:
            state = BUSY
        elif self._writing:
            state = WRITING
        else:
            state = READING if self._input or self._ignoring else IDLE
        if served or state != self.state:
            # The first byte of a request starts its io_timeout (READING); a reply starts the idle timeout.
            self.state = state
            self.since = self.loop.time()
        if self._reading_paused and state in (IDLE, READING) and not self._next_turn:
            self._reading_paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        if self._eof and state in (IDLE, READING) and not self._next_turn:  # the client sent all it will, all answered
            self._close()

    def _turn(self) -> None:
        self._next_turn = False
        if not self.closing:
            self._serve_input()

    def _request_past_payload(self, ignoring: _IgnoredPayload) -> None:
        """A request whose ignored payload was read past: checked against the sum of what streamed in, then served
        as if it had none."""
        header = ignoring.header
        try:
            verify_summed_request(header, ignoring.summed)
        except BadChecksum as exc:
            log.info("connection %s: %s; closing", self.peer, exc)
            self._send(error_reply(exc), close=True)
            return
        self._request(header, b"", verified=True)

    def _request(self, header: RequestHeader, payload: bytes, *, verified: bool = False) -> None:
        # Order of the checks: checksum (0xFF, close), unknown command (0xFD), session (0xFB; an unauthenticated
        # connection learns nothing about payloads), payload (0xFA).
        command = header.command
        try:
            if not verified:
                verify_request(header, payload)
            if command not in DECODERS:
                raise UnknownCommand(f"command 0x{command:04x} is unknown")
            if command not in SESSIONLESS_COMMANDS:
                session = self.session
                if session is None or header.client_id != session.client_id or header.token != session.token:
                    self._send(bad_session_reply(header.client_id, header.token))
                    return
            request = decode_request(command, payload)
        except BadChecksum as exc:
            log.info("connection %s: %s; closing", self.peer, exc)
            self._send(error_reply(exc), close=True)
            return
        except ProtocolError as exc:
            self._send(error_reply(exc), close=exc.close)
            return
        # Served here, without a task: a POLL the read-ahead answers, and a PING that writes no activity.
        if command == Command.POLL or command == Command.POLLV2:
            session = self.session
            assert session is not None
            delivery = session.take(command == Command.POLLV2)
            if delivery is not None:
                self._unsent = (session, delivery)
                self._send(delivery.payload)
                return
        elif command == Command.PING:
            # Never waits for the store: the activity write (at most one per PING_ACTIVITY_SECONDS) goes behind it.
            self._send(PONG_REPLY)
            session = self.session
            now = self.loop.time()
            if (
                session is not None
                and now - self._ping_written >= PING_ACTIVITY_SECONDS
                and (self._ping_write is None or self._ping_write.done())  # a stalled store: one write at a time
            ):
                self._ping_written = now
                self._ping_write = self.loop.create_task(self._ping_activity(session))
            return
        self._task = self.loop.create_task(self._serve(header, request))

    async def _serve(self, header: RequestHeader, request: Request) -> None:
        """A request that needs the store (or waits): its reply is sent when it has one."""
        reply = b""
        close = True
        try:
            try:
                reply = await self._dispatch(header, request)
                close = False
            except _Close:
                pass
        except asyncio.CancelledError:
            pass  # the connection is being closed (timeout, shutdown)
        except Exception:
            log.exception("connection %s: unexpected error; closing it", self.peer)
        finally:
            self._task = None
        if self._lost:
            self._finish()
            return
        if reply:
            self._send(reply, close=close)
        elif close:
            self._close()
        if not self.closing and not self._writing:
            self._serve_input()

    def _send(self, frame: bytes, close: bool = False) -> None:
        """Writes a reply: header and payload in one buffer, one write, as the PHP client needs."""
        transport = self.transport
        assert transport is not None
        if self._lost or transport.is_closing():
            self._unsent = None
            return
        transport.write(frame)
        if transport.get_write_buffer_size():
            # TCP did not take it whole: it counts at resume_writing (or never, if the connection is lost first).
            self._writing = True
            self._close_after_write = close
            self.state = WRITING
            self.since = self.loop.time()
            return
        self._sent(close)

    def _sent(self, close: bool) -> None:
        """The reply is with TCP: its delivery counts now (never if the send failed or timed out, nor when the client
        had closed its side of the connection before: it may be gone, and the write succeeds all the same)."""
        unsent, self._unsent = self._unsent, None
        if unsent is not None and not self._eof:
            session, delivery = unsent
            session.sent(delivery)
            self.server.history.served(session.client_id, delivery.entries)
        if self.session is not None:
            self.session.schedule_sync()  # what the reply delivered is written now, behind it
        if close or self.server.stopping:
            self._close()

    def _close(self) -> None:
        """Closes after what was written (the transport sends it first)."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Closes now, dropping what is unsent (a timeout, an eviction, the end of the shutdown grace)."""
        self.closing = True
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.abort()

    # -- commands ------------------------------------------------------------------------------------------------

    async def _ping_activity(self, session: SessionQueue) -> None:
        """A PING is activity: the dashboard shows the session's last activity from last_seen. Written at most every
        PING_ACTIVITY_SECONDS per connection, behind the PONG, so a client that pings every few seconds costs one
        small update per interval, and a slow or failing store only delays it."""
        try:
            await self.server.threads.run(_touch_session, session.client_id, session.token)
        except (DatabaseError, RuntimeError):  # RuntimeError: the store threads are shut down
            log.debug("connection %s: last activity not written", self.peer, exc_info=True)

    async def _dispatch(self, header: RequestHeader, request: Request) -> bytes:
        command = header.command
        if command == Command.AUTH:
            assert isinstance(request, AuthRequest)
            return await self._auth(request)
        session = self.session
        if session is None:  # checked by _request, but a newer AUTH of the client took it over since (kick)
            return bad_session_reply(header.client_id, header.token)
        try:
            if command == Command.POLL or command == Command.POLLV2:
                return await self._poll(session, command == Command.POLLV2)
            if command == Command.FETCH:
                assert isinstance(request, FetchRequest)
                return await self._fetch(session, request)
            if command == Command.ACK:
                assert isinstance(request, AckRequest)
                acked, removed = await session.ack(request.seq)
                return ack_reply(acked, removed)
            if command == Command.ADDFILTER:
                assert isinstance(request, AddFilterRequest)
                return await self._add_filter(session, request)
            if command == Command.REMOVEFILTER:
                assert isinstance(request, FilterIdentity)
                await session.check()
                filter_removed = await self.server.threads.run(_remove_filter, session, request)
                return removefilter_reply(filter_removed)
            if command == Command.STATUS:
                return await self._status(session)
            if command == Command.SNAPSHOT:
                assert isinstance(request, SnapshotRequest)
                await session.check()
                items = await self.server.threads.run(snapshots.run, session.client_id, request)
                return snapshot_reply(items)
        except StaleSession:
            # A newer AUTH for this client (here or in another relay process) replaced the token.
            log.info("connection %s: session of client %d was replaced", self.peer, session.client_id)
            if self.session is session:
                self.session = None
                self.server.unauthenticated(self)  # AUTH again within auth_timeout, or be closed
            return bad_session_reply(header.client_id, header.token)
        except (DatabaseError, store.StoreError) as exc:
            log.warning("connection %s: store error on %s: %s", self.peer, Command(command).name, exc)
            if command in (Command.POLL, Command.POLLV2, Command.FETCH):
                return EMPTY_REPLY  # the client polls again; nothing was taken from its queue
            if isinstance(exc, store.StoreError):  # a request the store refuses (a limit): the client is told why
                return message_reply(Result.MALFORMED, f"{Command(command).name}: {exc}")
            raise _Close from exc
        raise AssertionError(f"command 0x{command:02x} decoded but not dispatched")

    async def _auth(self, request: AuthRequest) -> bytes:
        if request.key not in self.server.keys or not request.name:
            log.info("connection %s: AUTH refused for %r", self.peer, request.name)
            return auth_failed_reply(request.key)
        async with self.server.auth_lock(request.name):
            self.authenticating = True
            try:
                # What the name's current session here delivered is written before the new session replaces it:
                # written after, its writes would be refused, and its last replies delivered again.
                await self.server.hand_over(request.name, self)
                opened = await self.server.threads.run(
                    store.open_session, request.name, self.peer, self.server.process_id
                )
            except DatabaseError as exc:
                log.warning("connection %s: AUTH failed in the store: %s", self.peer, exc)
                raise _Close from exc
            except store.StoreError as exc:  # a limit of the store (the number of clients): the client is told why
                log.warning("connection %s: AUTH of %r refused: %s", self.peer, request.name, exc)
                return message_reply(Result.MALFORMED, f"AUTH: {exc}")
            finally:
                self.authenticating = False
            previous = self.session
            self.session = SessionQueue(
                opened.client_id,
                opened.token,
                self.server.threads,
                self.server.records,
                instance_id=self.server.instance_id,
                hears_heads=self.server.notifier.hears_heads,
            )
            if previous is not None and previous.client_id != opened.client_id:
                self.server.session_ended(self, previous)
            self.server.register(self, opened.client_id, request.name)
            self.server.authenticated(self)
        return auth_reply(request.key, opened.token, opened.client_id)

    async def _poll(self, session: SessionQueue, v2: bool) -> bytes:
        # The read-ahead had nothing to send (or the session is stale): the store decides.
        delivery = await session.poll(v2)
        if delivery is None:
            return EMPTY_REPLY
        self._unsent = (session, delivery)
        return delivery.payload

    async def _fetch(self, session: SessionQueue, request: FetchRequest) -> bytes:
        loop = self.server.loop
        deadline = loop.time() + request.wait_ms / 1000
        ack_upto = request.ack_upto
        notifier = self.server.notifier
        while True:
            generation = notifier.generation_of(session.client_id)  # before the read: a commit after it wakes the wait
            delivery = await session.fetch(request.max_events, request.manual_ack, ack_upto, FETCH_BYTE_BUDGET)
            ack_upto = 0  # acknowledged once; a retry after waiting must not count it again
            if delivery is not None:
                self._unsent = (session, delivery)
                return delivery.payload  # the whole reply frame, rendered off the event loop
            remaining = deadline - loop.time()
            if remaining <= 0 or self.closing or self._eof or self.server.stopping:
                return EMPTY_REPLY
            self._waiter = Waiter(session.client_id, session.last, generation)
            try:
                await notifier.wait(self._waiter, remaining)
            finally:
                self._waiter = None

    async def _add_filter(self, session: SessionQueue, request: AddFilterRequest) -> bytes:
        for what, name in (("SchemaName", request.schema), ("TableName", request.table)):
            if len(name) > MAX_STORED_NAME:
                return message_reply(
                    Result.MALFORMED, f"ADDFILTER: {what} is {len(name)} characters, the limit is {MAX_STORED_NAME}"
                )
        await session.check()
        await self.server.threads.run(_add_filter, session, request)
        return OK_REPLY

    async def _status(self, session: SessionQueue) -> bytes:
        await session.check()
        status = await self.server.threads.run(_status, session)
        return status_reply(status)

    # -- ending --------------------------------------------------------------------------------------------------

    def kick(self) -> None:
        """Close this connection: a newer connection authenticated with the same name."""
        self.session = None  # the newer session owns the client now; do not mark it disconnected
        if self._waiter is not None:
            self._waiter.event.set()
        if self._writing:
            # A reply TCP has not taken whole: the new session starts at what the old one delivered, which this
            # reply is not part of, so it must not reach the client whole either (its rows come to the new session).
            self.abort()
        else:
            self._close()

    def _finish(self) -> None:
        """The connection is closed and no request of it is in flight: hand its session back, count it out."""
        if self._finished:
            return
        self._finished = True
        self.closing = True
        if self.session is not None:
            self.server.session_ended(self, self.session)
            self.session = None
        self.server.release(self)
        self.server.unregister(self)
        self.finished.set_result(None)


def _add_filter(session: SessionQueue, request: AddFilterRequest) -> None:
    store.add_filter(session.client_id, request.types, request.schema, request.table, request.limit, request.policy)


PING_ACTIVITY_SECONDS = 10.0


def _touch_session(client_id: int, token: int) -> None:
    # Moves nothing but last_seen: both cursors only ever move forward, so writing 0 for them leaves them as they are.
    store.sync_session(client_id, token, 0, 0, 0)


def _remove_filter(session: SessionQueue, request: FilterIdentity) -> bool:
    return store.remove_filter(session.client_id, request.types, request.schema, request.table)


def _status(session: SessionQueue) -> Status:
    info = store.client_status(session.client_id)
    if info is None or not store.token_is_current(session.client_id, session.token):
        raise StaleSession
    acked = info["acked_seq"]
    return Status(
        client_id=session.client_id,
        name=info["name"],
        queue_size=max(0, info["last_seq"] - acked),
        pending=max(0, info["delivered_seq"] - acked),
        acked_seq=acked,
        last_seq=info["last_seq"],
        served=info["served"],
        discarded=info["discarded"],
        max_queue=info["max_queue"],
        binlog_file=info["binlog_file"],
        binlog_pos=info["binlog_pos"],
        filters=[FilterInfo(*row) for row in info["filters"]],
    )
