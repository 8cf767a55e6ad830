"""One client connection: read frames, check them, run the command, send exactly one reply per request.

Every failure stays inside its connection: a bad frame gets its error reply (and a close when the stream can no
longer be trusted), a store failure gets an empty reply (POLL, POLLV2, FETCH: the client simply polls again) or a
close (the other commands, which clients re-send after reconnecting), and anything unexpected is logged and closes
this connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

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
    poll_reply,
    removefilter_reply,
    status_reply,
    verify_request,
)
from clientproto.codec import DECODERS, SESSIONLESS_COMMANDS, Request
from clientproto.header import RequestHeader
from relay import store
from relay.server.queues import Delivery, SessionQueue, StaleSession
from relay.server.wakeup import Waiter

if TYPE_CHECKING:
    from relay.server.server import RelayServer

log = logging.getLogger("relay.server")

#: Longest name the store keeps (Client.name, Filter.schema_name/table_name).
MAX_STORED_NAME = 255

#: Requests a connection may send without a session (PING, AUTH and their retries): a client pipelining requests
#: before AUTH is closed after this many, so it cannot keep the server busy answering them.
MAX_UNAUTHENTICATED_REQUESTS = 16

# What a connection is doing, for the timeout sweeper.
IDLE, READING, BUSY, WRITING = "idle", "reading", "busy", "writing"


class _Close(Exception):
    """Close this connection after the reply (if any) is sent."""


class Connection:
    def __init__(self, server: RelayServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "")
        #: The remote address, for the per-address connection limit.
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        self.session: SessionQueue | None = None
        self.state = IDLE
        self.since = server.loop.time()
        self.closing = False
        #: True while an AUTH of this connection runs: its new session is not registered yet.
        self.authenticating = False
        #: Without a session, the connection is closed at this loop time (None while it holds a session; set by
        #: the server's ``unauthenticated``).
        self.auth_deadline: float | None = None
        #: Requests sent without a session, since the connection lacks one (bounded: MAX_UNAUTHENTICATED_REQUESTS).
        self.unauthenticated_requests = 0
        self._waiter: Waiter | None = None
        #: The POLL/FETCH delivery whose reply is being sent: it counts as delivered once the reply is out.
        self._unsent: tuple[SessionQueue, Delivery] | None = None
        #: Loop time of the last PING written as activity (the client's last_seen), see _ping_activity.
        self._ping_written = 0.0

    # -- the loop ------------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        try:
            while not self.closing and not self.server.stopping:
                self._enter(IDLE)
                # The first byte ends IDLE: from there a partial header, like a partial payload, has io_timeout to
                # arrive, not the idle timeout.
                first = await self.reader.readexactly(1)
                self._enter(READING)
                head = first + await self.reader.readexactly(REQUEST_HEADER_SIZE - 1)
                try:
                    # Before AUTH only small payloads are read: unauthenticated connections cost a few KiB each.
                    limit = MAX_PAYLOAD if self.session is not None else MAX_UNAUTHENTICATED_PAYLOAD
                    header = decode_request_header(head, max_payload=limit)
                except ProtocolError as exc:  # PayloadSize over the limit: the payload is never read
                    if self.session is None:
                        exc = type(exc)(f"{exc}; before AUTH the limit is {MAX_UNAUTHENTICATED_PAYLOAD} bytes")
                    await self._send(error_reply(exc))
                    break
                if self.session is None:
                    self.unauthenticated_requests += 1
                    if self.unauthenticated_requests > MAX_UNAUTHENTICATED_REQUESTS:
                        self.server.limit_log.note(
                            "unauthenticated-requests",
                            logging.INFO,
                            f"closed connections that sent over {MAX_UNAUTHENTICATED_REQUESTS} requests without AUTH",
                        )
                        break
                payload = await self.reader.readexactly(header.payload_size) if header.payload_size else b""
                self._enter(BUSY)
                reply, close = await self._request(header, payload)
                if reply:
                    self._enter(WRITING)
                    await self._send(reply)
                if self._unsent is not None:
                    # The reply is with TCP: its delivery counts now (never if the send failed or timed out).
                    session, delivery = self._unsent
                    self._unsent = None
                    session.sent(delivery)
                    self.server.history.served(session.client_id, delivery.entries)
                if self.session is not None:
                    self.session.schedule_sync()  # what the reply delivered is written now, behind it
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away, possibly in the middle of a request: nothing to answer
        except asyncio.CancelledError:
            pass  # shutdown of an idle connection, or a timeout
        except Exception:
            log.exception("connection %s: unexpected error; closing it", self.peer)
        finally:
            self._finish()

    def _enter(self, state: str) -> None:
        self.state = state
        self.since = self.server.loop.time()

    async def _send(self, frame: bytes) -> None:
        self.writer.write(frame)  # header and payload in one buffer: one write, as the PHP client needs
        await self.writer.drain()

    async def _request(self, header: RequestHeader, payload: bytes) -> tuple[bytes, bool]:
        # Order of the checks: checksum (0xFF, close), unknown command (0xFD), session (0xFB; an unauthenticated
        # connection learns nothing about payloads), payload (0xFA).
        command = header.command
        try:
            verify_request(header, payload)
            if command not in DECODERS:
                raise UnknownCommand(f"command 0x{command:04x} is unknown")
            if command not in SESSIONLESS_COMMANDS:
                session = self.session
                if session is None or header.client_id != session.client_id or header.token != session.token:
                    return bad_session_reply(header.client_id, header.token), False
            request = decode_request(command, payload)
        except BadChecksum as exc:
            log.info("connection %s: %s; closing", self.peer, exc)
            return error_reply(exc), True
        except ProtocolError as exc:
            return error_reply(exc), exc.close
        try:
            return await self._dispatch(header, request), False
        except _Close:
            return b"", True

    # -- commands ------------------------------------------------------------------------------------------------

    async def _ping_activity(self) -> None:
        """A PING is activity: the dashboard shows the session's last activity from last_seen. Written at most every
        PING_ACTIVITY_SECONDS per connection, so a client that pings every few seconds costs one small update per
        interval; a store error only delays it (the PONG is still sent)."""
        session = self.session
        now = self.server.loop.time()
        if session is None or now - self._ping_written < PING_ACTIVITY_SECONDS:
            return
        self._ping_written = now
        try:
            await self.server.threads.run(_touch_session, session.client_id, session.token)
        except DatabaseError:
            log.debug("connection %s: last activity not written", self.peer, exc_info=True)

    async def _dispatch(self, header: RequestHeader, request: Request) -> bytes:
        command = header.command
        if command == Command.PING:
            await self._ping_activity()
            return PONG_REPLY
        if command == Command.AUTH:
            assert isinstance(request, AuthRequest)
            return await self._auth(request)
        session = self.session
        assert session is not None  # checked by _request
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
        if len(request.name) > MAX_STORED_NAME:
            return message_reply(
                Result.MALFORMED, f"AUTH: ClientName is {len(request.name)} characters, the limit is {MAX_STORED_NAME}"
            )
        async with self.server.auth_lock(request.name):
            self.authenticating = True
            try:
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
                opened.client_id, opened.token, self.server.threads, instance_id=self.server.instance_id
            )
            if previous is not None and previous.client_id != opened.client_id:
                self.server.session_ended(self, previous)
            self.server.register(self, opened.client_id)
            self.server.authenticated(self)
        return auth_reply(request.key, opened.token, opened.client_id)

    async def _poll(self, session: SessionQueue, v2: bool) -> bytes:
        # A POLL may be served from the read-ahead without a store call: first hear whether a newer session of this
        # client was announced (by any relay process); if so the read-ahead is dropped and the store decides.
        self.server.notifier.pending()
        delivery = await session.poll(v2)
        if delivery is None:
            return EMPTY_REPLY
        self._unsent = (session, delivery)
        assert isinstance(delivery.payload, bytes)
        return poll_reply(delivery.payload)

    async def _fetch(self, session: SessionQueue, request: FetchRequest) -> bytes:
        self.server.notifier.pending()  # as for POLL: an auto-ack FETCH may be served from its read-ahead
        loop = self.server.loop
        deadline = loop.time() + request.wait_ms / 1000
        ack_upto = request.ack_upto
        notifier = self.server.notifier
        while True:
            generation = notifier.generation  # before the read: a commit after it wakes the wait below
            delivery = await session.fetch(request.max_events, request.manual_ack, ack_upto, FETCH_BYTE_BUDGET)
            ack_upto = 0  # acknowledged once; a retry after waiting must not count it again
            if delivery is not None:
                self._unsent = (session, delivery)
                return delivery.payload  # the whole reply frame, rendered off the event loop
            remaining = deadline - loop.time()
            if remaining <= 0 or self.closing or self.server.stopping:
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
        """Close this connection: a newer connection authenticated with the same name, or it timed out."""
        self.closing = True
        self.session = None  # the newer session owns the client now; do not mark it disconnected
        if self._waiter is not None:
            self._waiter.event.set()
        with contextlib.suppress(Exception):
            self.writer.close()

    def _finish(self) -> None:
        self.closing = True
        if self.session is not None:
            self.server.session_ended(self, self.session)
            self.session = None
        self.server.unregister(self)
        with contextlib.suppress(Exception):
            self.writer.close()


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
