"""Fixtures shared by the suite: private MariaDB servers (with and without row metadata), fresh schemas, the filled
store of the dashboard's tests with its users, and the clean-up of the relay processes a test started."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client as HttpClient

from tests.helpers.dashboard_data import PASSWORD, Filled, fill_store, make_users
from tests.helpers.mariadb import MariaDB
from tests.helpers.processes import stop_all
from tests.helpers.scratch import scratch_dir

#: The session's servers: a test after one that crashed its server finds it started again (the_servers_live).
_session_servers: list[MariaDB] = []


def _start_server(name: str, *, row_metadata_full: bool, row_metadata: str | None = None) -> MariaDB:
    base = scratch_dir(f"relay-{name}-")
    server = MariaDB(base, row_metadata_full=row_metadata_full, row_metadata=row_metadata).start()
    _session_servers.append(server)
    return server


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDB]:
    """A private MariaDB with ``--binlog-row-metadata=FULL`` (column names, signedness, enum labels in TABLE_MAP)."""
    server = _start_server("mariadb-full", row_metadata_full=True)
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def mariadb_no_metadata() -> Iterator[MariaDB]:
    """A private MariaDB that writes no optional TABLE_MAP metadata (the default of older sources)."""
    server = _start_server("mariadb-nometa", row_metadata_full=False)
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def mariadb_minimal_metadata() -> Iterator[MariaDB]:
    """A private MariaDB with ``--binlog-row-metadata=MINIMAL``: signedness and charsets, no column names (the
    default of MySQL)."""
    server = _start_server("mariadb-minimal", row_metadata_full=False, row_metadata="MINIMAL")
    yield server
    server.destroy()


@pytest.fixture(params=["full_metadata", "no_metadata"])
def any_mariadb(request: pytest.FixtureRequest) -> MariaDB:
    """Each test using this runs once against each of the two servers."""
    name = "mariadb" if request.param == "full_metadata" else "mariadb_no_metadata"
    return request.getfixturevalue(name)


_schema_numbers = itertools.count(1)


@pytest.fixture
def fresh_schema(request: pytest.FixtureRequest) -> Iterator[tuple[MariaDB, str]]:
    """A new, empty schema on the test's MariaDB (``any_mariadb`` when the test uses it, else ``mariadb``)."""
    server: MariaDB = (
        request.getfixturevalue("any_mariadb")
        if "any_mariadb" in request.fixturenames
        else request.getfixturevalue("mariadb")
    )
    name = f"t{os.getpid()}_{next(_schema_numbers)}"
    server.execute(f"CREATE DATABASE `{name}`")
    yield server, name
    if server.running:
        server.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(autouse=True)
def _the_servers_live() -> Iterator[None]:
    """A session server that died in a test (mariadbd itself crashing) is started again after it, saying so: the
    test that met it fails, the ones after it run against a live server."""
    yield
    for server in _session_servers:
        if server.process is not None and server.process.poll() is not None:
            print(f"\nmariadbd of {server.base_dir.name} exited ({server.process.returncode}); starting it again:\n"
                  f"{server.error_tail()}", file=sys.stderr)  # fmt: skip
            server.process = None
            server.start()


@pytest.fixture(autouse=True)
def _stop_relay_processes() -> Iterator[None]:
    """Kills every ``manage.py`` process the test started and left running (tests/helpers/processes.py)."""
    yield
    stop_all()


@pytest.fixture
def users() -> tuple[User, User]:
    """An administrator and a dashboard user without admin rights (tests/helpers/dashboard_data.py)."""
    return make_users()


@pytest.fixture
def filled(users: tuple[User, User]) -> Filled:
    """The dashboard's store: hostile names, three clients, a day of traffic (tests/helpers/dashboard_data.py)."""
    return fill_store()


@pytest.fixture
def viewer(client: HttpClient, users: tuple[User, User]) -> HttpClient:
    """The test client logged in as the dashboard user without admin rights."""
    assert client.login(username="viewer", password=PASSWORD)
    return client
