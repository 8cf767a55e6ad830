"""The soak under faults, short: devtools/soak.py for 1.5 minutes with fewer clients, on the suite's store.

It starts its own MariaDB, two workers, two relay servers and the clients as real processes, kills them at random
moments, and checks every client's stream (devtools/soak.py says how). The long version (10 minutes, 20 clients, 30+
faults) is run by hand with bench/soak.py: docs/OPERATIONS.md.
"""

from __future__ import annotations

import os
import time

import pytest

from devtools import soak


@pytest.mark.slow
def test_short_soak_under_faults_passes() -> None:
    store = os.environ.get("RELAY_TEST_STORE", "postgres").lower()
    argv = ["--minutes", "1.5", "--fault-every", "10", "--min-faults", "6"]
    if store == "postgres":
        from tests.helpers.postgres import postgres_url

        # The soak creates (and drops) a database of its own on the suite's PostgreSQL server.
        argv += ["--store", "postgres", "--pg-url", postgres_url(), "--clients", "8"]
    else:
        # SQLite serialises every write of the worker and of both relay servers: fewer clients keep the short soak
        # about the size of the PostgreSQL one, at the same write rate.
        argv += ["--store", "sqlite", "--clients", "6"]
    started = time.monotonic()
    run = soak.Soak(soak.parse_args(argv))
    status = run.run()
    assert run.result.failures == [], f"logs kept in {run.workdir}"
    assert status == 0
    assert run.result.faults.total() >= 6
    assert time.monotonic() - started < 300
