"""The soak under faults, short: ``bench/soak.py`` for 1.5 minutes with fewer clients, on the suite's store.

It starts its own MariaDB, two workers, two relay servers and the clients as real processes, kills them at random
moments, and checks every client's stream (bench/soak.py says how). The long version (10 minutes, 20 clients, 30+
faults) is run by hand: docs/OPERATIONS.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_short_soak_under_faults_passes() -> None:
    store = os.environ.get("RELAY_TEST_STORE", "postgres").lower()
    args = [sys.executable, "bench/soak.py", "--minutes", "1.5", "--fault-every", "10", "--min-faults", "6"]
    if store == "postgres":
        from tests.harness.postgres import postgres_url

        # The soak creates (and drops) a database of its own on the suite's PostgreSQL server.
        args += ["--store", "postgres", "--pg-url", postgres_url(), "--clients", "8"]
    else:
        # SQLite serialises every write of the worker and of both relay servers: fewer clients keep the short soak
        # about the size of the PostgreSQL one, at the same write rate.
        args += ["--store", "sqlite", "--clients", "6"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RELAY_", "DJANGO_"))}
    started = time.monotonic()
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=420)
    output = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    assert "| result              | PASS |" in result.stdout, output
    assert time.monotonic() - started < 300, output
