"""The write path (``manage.py runbinlog``): from the source's binlog stream into the store, exactly once.

* ``runner``: the worker process: leader lock, reader thread, group commit, reconnects, garbage collection;
* ``handoff``: the reader thread's bounded hand-over of transactions to the main thread;
* ``ingest``: one batch into the store, atomically with the checkpoint (routing, queues, usage, schema);
* ``filterindex``: which clients want a row change (linear-time wildcard matching);
* ``bulk``: COPY / executemany writes and id allocation; ``usage``: the usage tally;
* ``leader``: one active worker per source; ``changelog``: the ``[Logger]`` per-day files.
"""
