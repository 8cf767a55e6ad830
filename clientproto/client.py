"""A blocking Python client for the relay: legacy POLL/POLLV2 and the FETCH/ACK extensions, with reconnection.

::

    with RelayClient("relay.example", 6002, "secret", "billing", timeout=10) as client:
        client.add_filter("IU", "shop", "orders")
        for event in client.events(manual_ack=True):
            handle(event)          # acknowledged when the next batch is requested: at-least-once delivery

Every request after AUTH carries the session's ClientID and token. On a socket error (or a reply that fails its
checksum, or a 0xFB session error) the client reconnects with exponential backoff: PING, AUTH, the remembered filters
again, then the failed request once more. Requests are idempotent for this (ADDFILTER, REMOVEFILTER, ACK, FETCH in
manual-ack mode) except auto-ack POLL/FETCH, whose lost reply loses its events: use manual ack when that matters.
A reply over ``max_reply_payload`` is not retried (the relay would send it again): the connection is closed and
:class:`ReplyTooLarge` raised. The default takes every reply a relay can send, the largest row included.
One client is one connection; it is not thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import time
from collections.abc import Iterable, Iterator

from .auth import server_key
from .constants import (
    MAX_FETCH_EVENTS,
    MAX_REPLY_PAYLOAD,
    PROTOCOL_VERSION,
    REPLY_HEADER_SIZE,
    Command,
    EventType,
    Result,
    SnapshotAction,
    type_mask,
)
from .errors import (
    AuthFailed,
    BadSession,
    ClientReset,
    ConnectionLost,
    PayloadTooLarge,
    ProtocolError,
    RelayError,
    ReplyTooLarge,
)
from .extensions import (
    AckReply,
    SnapshotItem,
    Status,
    decode_ack_reply,
    decode_fetch_reply,
    decode_removefilter_reply,
    decode_snapshot_reply,
    decode_status_reply,
    encode_ack,
    encode_fetch,
    encode_removefilter,
    encode_snapshot,
)
from .header import decode_reply_header, encode_request, verify_reply
from .payloads import (
    PollEvent,
    decode_auth_reply,
    decode_poll_reply,
    decode_pollv2_reply,
    encode_addfilter,
    encode_auth,
)
from .records import ABSENT, Column, Event

log = logging.getLogger(__name__)

FilterKey = tuple[int, str, str]
#: A table as the snapshot methods take it: ``"schema.table"`` (split at the first dot) or ``(schema, table)``.
TableRef = str | tuple[str, str]

#: Largest single recv: a big reply is read in pieces of this size, so memory follows the bytes that arrived rather
#: than the PayloadSize a header announced.
_RECV_CHUNK = 1 << 20


def legacy_event(reply: PollEvent) -> Event:
    """A POLL/POLLV2 reply as an Event: seq 0, no file or GTID, and NULL still the text b"NULL" (the legacy
    format cannot tell them apart); the image an event type does not have becomes ABSENT."""
    columns = [
        Column(
            c.name,
            ABSENT if reply.event_type == EventType.INSERT else c.before,
            ABSENT if reply.event_type == EventType.DELETE else c.after,
        )
        for c in reply.columns
    ]
    return Event(
        seq=0,
        type=reply.event_type,
        schema=reply.schema,
        table=reply.table,
        pos=reply.position & 0xFFFFFFFF,
        timestamp=reply.position >> 32,
        columns=columns,
    )


def table_name(table: TableRef) -> tuple[str, str]:
    """``"schema.table"`` or ``(schema, table)`` as (schema, table)."""
    if isinstance(table, tuple):
        return table
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise ValueError(f"table {table!r}: expected SCHEMA.TABLE")
    return schema, name


class RelayClient:
    def __init__(
        self,
        host: str,
        port: int,
        secret: str | bytes,
        name: str,
        *,
        timeout: float = 30.0,
        reconnect: bool = True,
        max_retries: int | None = None,
        backoff: float = 0.1,
        max_backoff: float = 30.0,
        key: int | None = None,
        max_reply_payload: int = MAX_REPLY_PAYLOAD,
    ) -> None:
        if not 0 < max_reply_payload <= 0xFFFFFFFF:
            raise ValueError(f"max_reply_payload {max_reply_payload}: must be 1..4294967295 (PayloadSize is a u32)")
        self.host = host
        self.port = port
        self.name = name
        self.timeout = timeout
        self.reconnect = reconnect
        #: Reconnection attempts per request before giving up with ConnectionLost (None: keep trying).
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        #: The original server's key variant, which every relay accepts.
        self.key = server_key(secret) if key is None else key
        #: Largest reply payload taken; a bigger one raises ReplyTooLarge (see the module's docstring).
        self.max_reply_payload = max_reply_payload
        self.client_id = 0
        self.token = 0
        #: QueueSize of the latest POLL/FETCH reply.
        self.queue_size = 0
        #: Number of successful connections (the first one included).
        self.sessions = 0
        self._sock: socket.socket | None = None
        self._filters: dict[FilterKey, tuple[int, int]] = {}

    # ------------------------------------------------------------------------------------------------ connection

    def __enter__(self) -> RelayClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open a session: PING (must answer 0), AUTH, then every remembered filter again."""
        self.close()
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        try:
            result, _ = self._roundtrip(Command.PING, b"")
            if result != Result.OK:
                raise RelayError(result, f"PING answered 0x{result:02x}")
            # AUTH goes out with ClientID/token 0, as the original clients send it.
            self.client_id = self.token = 0
            result, payload = self._roundtrip(Command.AUTH, encode_auth(self.key, self.name))
            if result != Result.OK:
                raise AuthFailed(result, f"AUTH refused for client {self.name!r} (result 0x{result:02x})")
            reply = decode_auth_reply(payload)
            self.client_id, self.token = reply.client_id, reply.token
            for (types, schema, table), (limit, policy) in self._filters.items():
                request = encode_addfilter(types, schema, table, limit, policy)
                result, payload = self._roundtrip(Command.ADDFILTER, request)
                self._check(result, payload, "ADDFILTER")
        except BaseException:
            self.close()
            raise
        self.sessions += 1
        log.debug("relay session %d: client %r is ClientID %d", self.sessions, self.name, self.client_id)

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            with contextlib.suppress(OSError):
                sock.close()

    def _recv_exactly(self, size: int) -> bytes:
        assert self._sock is not None
        chunks = []
        left = size
        while left:
            chunk = self._sock.recv(min(left, _RECV_CHUNK))
            if not chunk:
                raise ConnectionResetError("the relay closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _roundtrip(self, command: int, payload: bytes, timeout: float | None = None) -> tuple[int, bytes]:
        """One request, one reply, on the current socket. Socket and framing errors propagate."""
        if self._sock is None:
            raise ConnectionResetError("not connected")
        frame = encode_request(command, payload, version=PROTOCOL_VERSION, client_id=self.client_id, token=self.token)
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        self._sock.sendall(frame)
        try:
            header = decode_reply_header(self._recv_exactly(REPLY_HEADER_SIZE), max_payload=self.max_reply_payload)
        except PayloadTooLarge as exc:
            # The payload stays unread, so the stream is unusable: close it. With MANUAL_ACK nothing of this reply
            # is acknowledged and the next session gets it again; an auto-ack reply (POLL, FETCH without
            # MANUAL_ACK) counts as delivered once the relay handed all of it to TCP.
            self.close()
            raise ReplyTooLarge(
                f"relay {self.host}:{self.port}: {exc}; this client's max_reply_payload is {self.max_reply_payload}"
            ) from exc
        body = self._recv_exactly(header.payload_size) if header.payload_size else b""
        verify_reply(header, body)
        return header.result, body

    def _call(
        self, command: int, payload: bytes, timeout: float | None = None, *, names_seqs: bool = False
    ) -> tuple[int, bytes]:
        """A request with reconnect-and-retry on socket errors, corrupt replies and lost sessions.

        ``names_seqs``: the request names sequence numbers of this client's queue; after a reconnection that finds
        the client under another ClientID (a new queue), it raises ClientReset instead of going out again."""
        failures = 0
        delay = self.backoff
        owner = self.client_id
        while True:
            try:
                if self._sock is None:
                    self.connect()
                    if names_seqs and owner and self.client_id != owner:
                        raise ClientReset(
                            Result.BAD_SESSION,
                            f"client {self.name!r} is ClientID {self.client_id} now, not {owner} (it was deleted and "
                            "registered again): its queue starts over at Seq 1",
                        )
                result, body = self._roundtrip(command, payload, timeout)
                if result != Result.BAD_SESSION:
                    return result, body
                error: Exception = BadSession(result, body.rstrip(b"\x00").decode("utf-8", "replace"))
            except ReplyTooLarge:
                raise  # the same reply would come again: reconnecting cannot help
            except (OSError, ProtocolError) as exc:
                error = exc
            self.close()
            failures += 1
            if not self.reconnect or (self.max_retries is not None and failures > self.max_retries):
                raise ConnectionLost(f"relay {self.host}:{self.port}: {error}") from error
            log.warning("relay %s:%d: %s; reconnecting in %.1fs", self.host, self.port, error, delay)
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.max_backoff)

    @staticmethod
    def _check(result: int, payload: bytes, what: str) -> None:
        if result != Result.OK:
            message = payload.rstrip(b"\x00").decode("utf-8", "replace")
            raise RelayError(result, f"{what} failed with result 0x{result:02x}: {message}")

    # ------------------------------------------------------------------------------------------------ commands

    def ping(self) -> None:
        result, payload = self._call(Command.PING, b"")
        self._check(result, payload, "PING")

    def add_filter(self, types: int | str, schema: str, table: str, limit: int = 0, policy: int = 0) -> None:
        """Ask for ``types`` (mask or letters "IUD") on schema.table (``*`` and ``?`` match); re-sent on reconnect."""
        mask = type_mask(types)
        result, payload = self._call(Command.ADDFILTER, encode_addfilter(mask, schema, table, limit, policy))
        self._check(result, payload, "ADDFILTER")
        self._filters[(mask, schema, table)] = (limit, policy)

    def remove_filter(self, types: int | str, schema: str, table: str) -> bool:
        """Remove the filter with exactly this identity; False when there was none."""
        mask = type_mask(types)
        result, payload = self._call(Command.REMOVEFILTER, encode_removefilter(mask, schema, table))
        self._check(result, payload, "REMOVEFILTER")
        self._filters.pop((mask, schema, table), None)
        return decode_removefilter_reply(payload)

    def poll(self) -> Event | None:
        """Legacy POLL: the next event (removed from the queue as it is sent), or None when the queue is empty."""
        return self._poll(Command.POLL)

    def poll_v2(self) -> Event | None:
        """Legacy POLLV2: as poll()."""
        return self._poll(Command.POLLV2)

    def _poll(self, command: Command) -> Event | None:
        result, payload = self._call(command, b"")
        if result == Result.EMPTY:
            return None
        self._check(result, payload, command.name)
        reply = decode_poll_reply(payload) if command == Command.POLL else decode_pollv2_reply(payload)
        self.queue_size = reply.queue_size
        return legacy_event(reply)

    def fetch(
        self, max_events: int = 500, wait_ms: int = 0, manual_ack: bool = False, ack_upto: int = 0
    ) -> list[Event]:
        """Up to ``max_events`` events, waiting up to ``wait_ms`` for the first; [] when none came.

        With ``manual_ack`` the events stay queued until :meth:`ack` (or a later fetch's ``ack_upto``) covers them,
        and come again in the next session if the client dies first.
        """
        max_events = max(1, min(max_events, MAX_FETCH_EVENTS))
        payload = encode_fetch(max_events, wait_ms, manual_ack=manual_ack, ack_upto=ack_upto)
        result, body = self._call(
            Command.FETCH, payload, timeout=self.timeout + wait_ms / 1000, names_seqs=ack_upto > 0
        )
        if result == Result.EMPTY:
            self.queue_size = 0
            return []
        self._check(result, body, "FETCH")
        reply = decode_fetch_reply(body)
        self.queue_size = reply.queue_size
        return reply.events

    def ack(self, seq: int) -> AckReply:
        """Acknowledge every event up to ``seq`` (cumulative, idempotent)."""
        result, payload = self._call(Command.ACK, encode_ack(seq), names_seqs=True)
        self._check(result, payload, "ACK")
        return decode_ack_reply(payload)

    def status(self) -> Status:
        result, payload = self._call(Command.STATUS, b"")
        self._check(result, payload, "STATUS")
        return decode_status_reply(payload)

    def snapshot(self, tables: Iterable[TableRef], where: str = "") -> list[SnapshotItem]:
        """Ask for the current rows of ``tables`` (those meeting ``where``, an SQL condition, when given).

        The rows come in this client's queue as INSERT events with ``snapshot`` set, in order with the changes, between
        a SNAPSHOT_START and a SNAPSHOT_END marker per table (FETCH only; POLL gets the rows, never the markers). Each
        table needs a filter of this client that covers its inserts. Asking again for a table whose snapshot is under
        way returns that snapshot. Returns one item per table, in order; a refusal raises RelayError (result 0xFA)
        with the relay's reason, and asks for nothing.
        """
        return self._snapshot(SnapshotAction.START, tables, where)

    def cancel_snapshot(self, tables: Iterable[TableRef]) -> list[SnapshotItem]:
        """Cancel the snapshots of ``tables`` still under way (rows already queued stay queued; the end marker says
        "cancelled"). Returns each table's newest snapshot after it; idempotent."""
        return self._snapshot(SnapshotAction.CANCEL, tables)

    def snapshot_status(self, tables: Iterable[TableRef]) -> list[SnapshotItem]:
        """Each table's newest snapshot: its state and rows queued so far (state NONE, id 0, when there is none)."""
        return self._snapshot(SnapshotAction.STATUS, tables)

    def _snapshot(self, action: SnapshotAction, tables: Iterable[TableRef], where: str = "") -> list[SnapshotItem]:
        pairs = [table_name(table) for table in tables]
        result, payload = self._call(Command.SNAPSHOT, encode_snapshot(action, pairs, where))
        self._check(result, payload, f"SNAPSHOT {action.name}")
        return decode_snapshot_reply(payload)

    def events(
        self,
        batch: int = 500,
        wait_ms: int = 1000,
        manual_ack: bool = True,
        *,
        stop_when_idle: bool = False,
        limit: int = 0,
    ) -> Iterator[Event]:
        """Every event, forever (or until a fetch comes back empty, with ``stop_when_idle``; or ``limit`` events, when
        it is set: no fetch then asks for more than are still wanted, so that without manual ack, where the relay
        takes a batch from the queue as it sends it, no event is taken that the caller will not be given).

        In manual-ack mode a batch is acknowledged when the caller asks for the event after its last one (the
        acknowledgement rides on the next FETCH), so an event the caller has not finished with is never
        acknowledged. Events a reconnection delivers again are skipped by their sequence number. A reconnection that
        finds the client under a new ClientID (deleted and registered again: a new queue, from Seq 1) starts the
        count over, with a warning: the events of the old queue not yet acknowledged are gone with it.
        """
        last_seq = 0
        acked = 0
        given = 0
        owner = self.client_id
        while not limit or given < limit:
            ack_upto = last_seq if manual_ack and last_seq > acked else 0
            wanted = batch if not limit else min(batch, limit - given)
            try:
                events = self.fetch(wanted, wait_ms, manual_ack=manual_ack, ack_upto=ack_upto)
            except ClientReset as reset:
                log.warning("relay %s:%d: %s", self.host, self.port, reset)
                owner, last_seq, acked = self.client_id, 0, 0
                continue
            if self.client_id != owner:
                if owner:
                    log.warning(
                        "relay %s:%d: client %r is ClientID %d now, not %d: its queue starts over at Seq 1",
                        self.host,
                        self.port,
                        self.name,
                        self.client_id,
                        owner,
                    )
                owner, last_seq, acked = self.client_id, 0, 0
            if ack_upto:
                acked = ack_upto
            if not events and stop_when_idle:
                if manual_ack and last_seq > acked:
                    self.ack(last_seq)
                return
            for event in events:
                if event.seq <= last_seq:
                    continue
                last_seq = event.seq
                given += 1
                yield event
