"""PostgreSQL for the tests: the one on 127.0.0.1:5432 when it runs, else a private cluster started here."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.mariadb import free_tcp_port


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _pg_binary(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if found:
        return str(found[-1])
    which = shutil.which(name)
    if which:
        return which
    raise RuntimeError(f"{name} not found: apt-get install postgresql")


class PrivateCluster:
    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="relay-pg-"))
        self.port = free_tcp_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        run_as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(self.base, "postgres")
            run_as = ["runuser", "-u", "postgres", "--"]
        data = self.base / "data"
        subprocess.run(
            [*run_as, _pg_binary("initdb"), "-A", "trust", "-U", "postgres", "-D", str(data)],
            check=True,
            capture_output=True,
        )
        log = open(self.base / "server.log", "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            [
                *run_as,
                _pg_binary("postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-k",
                str(self.base),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not _accepts("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"private PostgreSQL did not start: {(self.base / 'server.log').read_text()}")
            time.sleep(0.1)
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)


def postgres_url() -> str:
    """A URL of a PostgreSQL server the tests may create databases on."""
    if os.environ.get("RELAY_TEST_POSTGRES_URL"):
        return os.environ["RELAY_TEST_POSTGRES_URL"]
    if _accepts("127.0.0.1", 5432):
        return "postgres://postgres@127.0.0.1:5432/test"
    cluster = PrivateCluster()
    cluster.start()
    return f"postgres://postgres@127.0.0.1:{cluster.port}/postgres"


def store_session() -> Any:
    """A PostgreSQL session of its own on the test database (psycopg2), e.g. to hold a lock the relay meets."""
    import psycopg2
    from django.db import connection

    settings = connection.settings_dict
    return psycopg2.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        password=settings.get("PASSWORD") or None,
    )


@contextlib.contextmanager
def read_only_store() -> Iterator[None]:
    """The suite's PostgreSQL store refusing writes, as after a fail-over onto a hot standby: its database's new
    sessions read-only, and every session but the test's own ended (so the relay's processes reconnect into it).
    Writable again on leaving; sessions opened meanwhile stay read-only, as they would."""
    import psycopg2
    from django.db import connection

    settings = connection.settings_dict
    admin = psycopg2.connect(
        dbname="postgres", user=settings["USER"], host=settings["HOST"], port=settings["PORT"] or 5432
    )
    admin.autocommit = True
    database = settings["NAME"]
    own = connection.cursor().connection.info.backend_pid
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                [database, own],
            )
        yield
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        admin.close()
