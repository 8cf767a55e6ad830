"""Helpers shared by the test modules, so that no test module imports another.

* ``queues``: filling a client's queue as the worker does, and consuming it as a relay session does;
* ``worker``: subscribing clients, waiting for the binlog worker to catch up, and reading what it queued;
* ``dashboard_data``: a store filled for the dashboard, the API, the metrics and the admin.

Real processes and servers (MariaDB, PostgreSQL, ``manage.py`` commands, the relay server in a thread) are in
``tests/harness/``; fixtures are in ``tests/conftest.py``; the polling loop is ``devtools.wait.wait_for``.
"""
