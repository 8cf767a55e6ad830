"""The PostgreSQL NOTIFY channels that the store's writers and the relay processes share (SQLite has none: its
readers poll instead)."""

#: The worker notifies it (empty payload) in each batch transaction that queued entries: long-polling FETCHes wake.
QUEUE_CHANNEL = "relay_queues"

#: PostgreSQL channel on which :func:`open_session` announces "client_id:token": every relay process LISTENs on it
#: and closes its own older connection of that client at once (several ``runrelay`` processes share one store).
SESSION_CHANNEL = "relay_sessions"
