"""Helpers shared by the test modules, so that no test module imports another.

Real processes and servers:

* ``mariadb``: the private MariaDB with the binlog on (devtools/sandbox.py), fresh schemas on it, its binlog drained
  with the live stream;
* ``postgres``: PostgreSQL, the local one or a private cluster;
* ``processes``: ``manage.py`` commands (``runbinlog``, ``runrelay``) against the test store;
* ``relay_server``: the relay server in a thread of the test process, and a raw-socket client;
* ``proxy``: a TCP proxy in front of a server, to cut or freeze its connections.
* ``scratch``: the run's one temporary folder (servers' data, processes' logs), removed when the run ends.

Data and bytes:

* ``queues``: filling a client's queue as the worker does, and consuming it as a relay session does;
* ``worker``: subscribing clients, waiting for the binlog worker to catch up, and reading what it queued;
* ``dashboard_data``: a store filled for the dashboard, the API, the metrics and the admin;
* ``records``: the reference FETCH records of stored changes (the oracle of the server's pre-rendered frames);
* ``binlog_events``: binlog events built as bytes, and the event bodies captured from real MySQL servers;
* ``jsonb``: MySQL binary JSON and partial-JSON diffs, encoded from the documented layout;
* ``binlog_types``: the column type cases (edge values of every MariaDB type) and a binlog span read back from files;
* ``mysql_payload``: MySQL 8.0 binlogs as bytes (packed integers, ROWS v2, the captured table t10);
* ``clientproto_frames``: the relay protocol's reference frames;
* ``pipeline``: the usage pipeline's workload, the events of a binlog file, ``manage.py usagepipeline``.

Fixtures are in ``tests/conftest.py``; the polling loop is ``devtools.wait.wait_for``.
"""
