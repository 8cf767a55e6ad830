"""Fixtures shared by the suite: private MariaDB servers (with and without row metadata) and fresh schemas."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.mariadb import MariaDB


def _start_server(name: str, *, row_metadata_full: bool) -> MariaDB:
    base = Path(tempfile.mkdtemp(prefix=f"relay-{name}-"))
    return MariaDB(base, row_metadata_full=row_metadata_full).start()


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
