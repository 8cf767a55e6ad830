"""A private MariaDB server with the binary log on: the demo's throwaway source, and the tests' real one.

The server runs from the installed ``mariadbd`` with ``--no-defaults`` (so the system's configuration and its running
server are never touched), in its own data directory, on a free TCP port and its own socket. It is stopped by PID,
at exit too, so a failing test run leaves no server behind.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pymysql

REPLICATION_USER = "relay_repl"
REPLICATION_PASSWORD = "relay-repl-secret"


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _binary(*names: str) -> str:
    for name in names:
        for folder in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"):
            candidate = Path(folder) / name
            if candidate.exists():
                return str(candidate)
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"none of {', '.join(names)} is installed (apt-get install mariadb-server)")


class MariaDB:
    """One private ``mariadbd`` process: start, stop, restart, and small SQL helpers."""

    def __init__(
        self,
        base_dir: Path,
        *,
        row_metadata_full: bool = True,
        row_metadata: str | None = None,
        server_id: int = 1,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.datadir = self.base_dir / "data"
        self.socket_path = self.base_dir / "mariadb.sock"
        self.pid_file = self.base_dir / "mariadb.pid"
        self.error_log = self.base_dir / "error.log"
        self.tmp_dir = self.base_dir / "tmp"
        self.host = "127.0.0.1"
        self.port = free_tcp_port()
        self.row_metadata_full = row_metadata_full
        # binlog_row_metadata: FULL or NO_LOG from row_metadata_full, unless given (MINIMAL: MySQL's default)
        self.row_metadata = row_metadata or ("FULL" if row_metadata_full else "NO_LOG")
        self.server_id = server_id
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> MariaDB:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(exist_ok=True)
        if not (self.datadir / "mysql").exists():
            self._install_datadir()
        args = [
            _binary("mariadbd", "mysqld"),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            # A folder of its own for temporary files: a server starting removes every #sql* file in its tmpdir, and
            # in a shared /tmp those are other running servers' temporary tables (an information_schema query's, on
            # disk), which then crash in the middle of the query.
            f"--tmpdir={self.tmp_dir}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--server-id={self.server_id}",
            "--log-bin=binlog",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            f"--binlog-row-metadata={self.row_metadata}",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=48M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-allowed-packet=256M",
            "--default-time-zone=+00:00",
            *self.extra_args,
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        log = open(self.base_dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child process
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        _RUNNING.add(self)
        self._wait_until_ready()
        self._create_users()
        return self

    def _install_datadir(self) -> None:
        result = subprocess.run(
            [
                _binary("mariadb-install-db", "mysql_install_db"),
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                f"--tmpdir={self.tmp_dir}",
                *(["--user=root"] if os.geteuid() == 0 else []),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {result.stdout}{result.stderr}")

    def _wait_until_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.process.returncode}: {self.error_tail()}")
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError as exc:
                last_error = exc
                time.sleep(0.1)
        raise RuntimeError(f"mariadbd did not accept connections in {timeout}s ({last_error}): {self.error_tail()}")

    def error_tail(self) -> str:
        """The end of the server's error log (why it stopped, when it did)."""
        try:
            return self.error_log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no error log)"

    def _create_users(self) -> None:
        self.execute(
            f"CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'%' IDENTIFIED BY '{REPLICATION_PASSWORD}'",
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* TO '{REPLICATION_USER}'@'%'",
        )

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        _RUNNING.discard(self)

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- SQL -------------------------------------------------------------------------------------------------------

    def connect(
        self, database: str | None = None, *, autocommit: bool = True, charset: str = "utf8mb4", **kwargs: Any
    ) -> pymysql.Connection:
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=autocommit,
            charset=charset,
            connect_timeout=5,
            **kwargs,
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Runs each statement in order on one connection (autocommit)."""
        with self.connect(database) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def executemany(self, statement: str, rows: Iterable[Sequence[Any]], *, database: str | None = None) -> None:
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.executemany(statement, list(rows))

    def query(self, statement: str, *params: Any, database: str | None = None) -> list[tuple[Any, ...]]:
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.execute(statement, params or None)
            return list(cur.fetchall())

    def binlog_position(self) -> tuple[str, int]:
        """The source's current binlog file and the position of the next event."""
        row = self.query("SHOW MASTER STATUS")[0]
        return str(row[0]), int(row[1])

    def binlog_files(self) -> list[Path]:
        names = [str(row[0]) for row in self.query("SHOW BINARY LOGS")]
        return [self.datadir / name for name in names]

    def replication_settings(self) -> dict[str, Any]:
        """What a replica needs to connect: host, port, user and password of the replication user."""
        return {"host": self.host, "port": self.port, "user": REPLICATION_USER, "password": REPLICATION_PASSWORD}

    def source_env(self) -> dict[str, str]:
        """The environment variables that make this server the relay's source (as its replication user)."""
        repl = self.replication_settings()
        return {
            "RELAY_SERVER_IPADDR": repl["host"],
            "RELAY_SERVER_SOURCEPORT": str(repl["port"]),
            "RELAY_SERVER_LOGIN": repl["user"],
            "RELAY_SERVER_PASSWORD": repl["password"],
        }


_RUNNING: set[MariaDB] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()
