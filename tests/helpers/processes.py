"""Relay processes for the tests: ``manage.py runbinlog`` (and later ``runrelay``) against the test store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.db import connection

from devtools.sandbox import MariaDB
from devtools.wait import wait_for
from tests.helpers.scratch import scratch_dir, scratch_file

REPO = Path(__file__).resolve().parent.parent.parent
TEST_SECRET = "test-secret"  # the AuthSecret of every relay process the tests start


def test_store_url() -> str:
    """The URL of the database the test is using (the test database, not the configured one)."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    return f"postgres://{settings['USER']}{password}@{settings['HOST']}:{settings['PORT'] or 5432}/{settings['NAME']}"


def relay_env(server: MariaDB | None, **overrides: Any) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_")}
    env.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        DATABASE_URL=test_store_url(),
        RELAY_DATA_DIR=str(scratch_dir("relay-data-")),
        RELAY_SERVER_AUTHSECRET=TEST_SECRET,
        RELAY_SERVER_HEARTBEATSECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    if server is not None:
        env.update(server.source_env())
    env.update({key: str(value) for key, value in overrides.items()})
    return env


class RelayProcess:
    """One ``manage.py`` command as a child process, with its output kept for assertion messages."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.env = env
        self.args = args
        self.log_path = scratch_file("relay-proc-", ".log")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RelayProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", *self.args],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _RUNNING.add(self)
        return self

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def wait(self, timeout: float = 60) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{' '.join(self.args)} still running after {timeout}s:\n{self.output[-3000:]}"
            ) from None
        finally:
            if self.process.poll() is not None:
                _RUNNING.discard(self)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait()

    def stop(self, timeout: float = 60) -> int:
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


_RUNNING: set[RelayProcess] = set()


def stop_all() -> None:
    for process in list(_RUNNING):
        if process.alive():
            process.kill()
    _RUNNING.clear()


def start_relay(server: MariaDB | None = None, *args: str, **env: object) -> tuple[RelayProcess, int]:
    """A ``runrelay`` process (with ``args`` added) on a free loopback port, once it answers AUTH; returns it and its
    port."""
    from clientproto import RelayClient
    from devtools.sandbox import free_tcp_port

    port = free_tcp_port()
    relay = RelayProcess(
        relay_env(server, **env), "runrelay", "--address", "127.0.0.1", "--port", str(port), *args
    ).start()

    def listening() -> bool:
        if not relay.alive():
            raise AssertionError(f"runrelay exited:\n{relay.output[-3000:]}")
        try:
            RelayClient("127.0.0.1", port, TEST_SECRET, "probe", reconnect=False, timeout=2).connect()
            return True
        except OSError:
            return False

    wait_for(listening, timeout=60, message="runrelay listening")
    return relay, port
