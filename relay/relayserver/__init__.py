"""The relay server (``manage.py runrelay``): the relay protocol over TCP, on the store's durable queues.

Architecture: one asyncio event loop accepts connections and parses frames (clientproto); every store call runs in
a small pool of store threads (:mod:`.database`), so a slow query never blocks the loop. Each connection has at most
one request in flight; each authenticated connection holds a session (:mod:`.queues`) with its own read-ahead of
its client's queue. Long-polling FETCHes wait on :mod:`.wakeup` (PostgreSQL LISTEN/NOTIFY, or a 10 ms poll of the
waiting clients' queues on SQLite). The History column is written in batches (:mod:`.history`).

Delivery semantics:

* POLL, POLLV2 and FETCH without MANUAL_ACK acknowledge what they send: the queue head moves in the store (one
  compare-and-set UPDATE that also checks the session token) *before* the reply is written. If the relay dies or
  the connection breaks between that UPDATE and the client reading the reply, those events are lost to that
  client: at-most-once, as in the original relay. Use FETCH with MANUAL_ACK for at-least-once delivery.
* FETCH with MANUAL_ACK only records how far the session was sent (``delivered_seq``); entries leave the queue when
  ACK (or a later FETCH's AckUpTo) covers them. A new session starts again after the last acknowledged entry, so a
  client or relay crash loses nothing: unacknowledged events are delivered again.
* Acknowledgements are committed before the reply is sent. On PostgreSQL the server's connections run with
  ``synchronous_commit`` off, so an acknowledgement costs no WAL flush: a crash of the relay (or of its host's
  relay process) loses nothing, but a crash of PostgreSQL itself may roll back the last few hundred milliseconds of
  acknowledgements, and those events are then delivered again (never lost: the worker's queue entries are
  committed with a synchronous commit).
* A session is (ClientID, token). Each AUTH issues a new token; every later request on the connection must carry
  it (0xFB otherwise), and every store statement that consumes checks it, so a session replaced by a newer AUTH in
  another relay process gets 0xFB on its next request. In this process the older connection is closed at once.
"""

from relay.relayserver.server import RelayServer, ServerOptions, serve

__all__ = ["RelayServer", "ServerOptions", "serve"]
