"""The relay server (``manage.py runrelay``): the relay protocol over TCP, on the store's durable queues.

Architecture: one asyncio event loop (the standard one, or uvloop's: :func:`event_loop_factory`) accepts connections;
each connection is a protocol whose callbacks parse its frames (clientproto); every store call runs in a small pool
of store threads (:mod:`.database`), so a slow query never blocks the loop. Each connection has at most one request
in flight; each authenticated connection holds a session (:mod:`.queues`) with its own read-ahead of its client's
queue, rendered in the store threads and topped up with the session's write-behind, so a legacy POLL is answered
within the callback that brought it: no task, no store call, a few microseconds of Python. Long-polling FETCHes
wait on :mod:`.wakeup` (PostgreSQL LISTEN/NOTIFY, or a 10 ms poll of the waiting clients' queues on SQLite). The
History column is written in batches (:mod:`.history`). A FETCH record is rendered once per change and shared by
the sessions (:class:`.render.RenderCache`, by change id): a session reading changes the server holds only checks them
in the store (binlog coordinates, timestamp, kind, GTID and stored size, one text per run of its queue, read with the
run) instead of reading them. SNAPSHOT requests go through the
store's snapshot API (:mod:`.snapshots`); a snapshot's rows and markers are rendered by :mod:`.render` and passed over
by POLL sessions (:mod:`.queues`).

Limits (:class:`ServerOptions`): before AUTH a request's payload is at most ``MAX_UNAUTHENTICATED_PAYLOAD`` and a
connection must authenticate within ``auth_timeout``; a request begun must arrive within ``io_timeout``; connections
are capped in total and per remote address, a new one replacing the oldest connection that has sent no whole request
(after 50 ms), else the oldest unauthenticated one (after a second). So connections that never authenticate cost a
few KiB each, for a few seconds, and cannot lock clients out however fast they come.

Delivery semantics:

* A reply delivers its events only once all of it is with TCP (the transport holds none of it: its write buffer
  limit is 0, so it says at once when TCP did not take a reply whole, and again when it has): a reply whose
  sending fails (the client went away, refused it, or did not read it within the I/O timeout) moves nothing, and
  its events come again.
* POLL, POLLV2 and FETCH without MANUAL_ACK acknowledge what they send: the reply goes out first, then the head
  moves in the store, written behind the reply within a few milliseconds (one UPDATE for every delivery of that
  interval, see :mod:`.queues`). A relay crash in between loses nothing: those events are delivered again to the
  next session (at-least-once; the original relay lost its whole memory instead).
* FETCH with MANUAL_ACK only records how far the session was sent (``delivered_seq``); entries leave the queue when
  ACK (or a later FETCH's AckUpTo) covers them, and ACK is committed before its reply. A new session starts again
  after the last acknowledged entry, so a client or relay crash loses nothing.
* On PostgreSQL the server's store connections run with ``synchronous_commit`` off, so recording a delivery costs
  no WAL flush: a crash of PostgreSQL itself (not of the relay) may roll back the last few hundred milliseconds of
  acknowledgements, and those events are delivered again. Queue entries are written by the worker with a
  synchronous commit and are never lost.
* A session is (ClientID, token). Each AUTH issues a new token; every later request on the connection must carry
  it (0xFB otherwise), and every store write of a session checks it. Several relay processes may serve one
  store: each AUTH is announced at its commit (PostgreSQL ``NOTIFY relay_sessions``), and the process holding an
  older connection of that client drops its read-ahead on hearing it (milliseconds), so that connection's next
  request gets 0xFB, and closes it once the store confirms the newer token (a late notification never closes a
  newer session). Each process also compares its sessions' tokens with the store every 2 s (0.2 s on SQLite,
  which has no notification). Until then a replaced session may serve from its read-ahead what the new session
  gets again: at-least-once.
* The read-ahead may serve an entry the worker's unqueue-oldest policy dropped a moment before (at most two
  read-aheads of 128 entries for POLL, one batch for auto-ack FETCH); it never skips an entry the policy kept.
  An auto-ack FETCH that left entries queued reads the next batch right after its reply (with the write-behind
  of that reply); the next FETCH of the same size serves it, any other request reads the queue again.
"""

from relay.server.server import RelayServer, ServerOptions, event_loop_factory, serve

__all__ = ["RelayServer", "ServerOptions", "event_loop_factory", "serve"]
