"""Start-up and misconfiguration, with real processes: a first start that a kill cannot make lose rows, one line and
exit 1 for each mistake an operator can make, retries for what can come back, --config for every key, and the
replica ids of `python -m binlog tail|check`."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devtools.sandbox import MariaDB, free_tcp_port
from devtools.wait import wait_for
from relay.models import Checkpoint, WorkerStatus
from relay.web import health
from tests.helpers.processes import REPO, RelayProcess, relay_env
from tests.helpers.scratch import scratch_dir
from tests.helpers.worker import caught_up, queue_of, subscribe


def manage(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def assert_one_line(output: str, *needles: str) -> str:
    """The output is one line (a process that failed at start-up), holding every needle; returns it."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback" not in output, output
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def error_lines(output: str) -> list[str]:
    assert "Traceback" not in output, output
    return [line for line in output.splitlines() if " ERROR " in line]


def plain_env(**overrides: str) -> dict[str, str]:
    """The environment of a process that reads its configuration only from what the test names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "DJANGO_")) and k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="relayproject.settings", PYTHONUNBUFFERED="1", **overrides)
    return env


# -- a safe first start ------------------------------------------------------------------------------------------


class Writer(threading.Thread):
    """One-row transactions, one after another, each with the binlog position it started at (the end of the one
    before: nothing else writes to the server meanwhile)."""

    def __init__(self, server: MariaDB, schema: str) -> None:
        super().__init__(name="writer", daemon=True)
        self.server = server
        self.schema = schema
        self.started_at: dict[int, tuple[str, int]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        with self.server.connect(self.schema) as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
            row_id = 0
            while not self.done.is_set():
                row_id += 1
                cur.execute("INSERT INTO t VALUES (%s)", (row_id,))
                self.started_at[row_id] = (str(file), int(pos))
                cur.execute("SHOW MASTER STATUS")
                file, pos = cur.fetchone()[:2]
                time.sleep(0.01)


_CHOSEN = re.compile(r"start position (?P<file>[^\s:]+):(?P<pos>\d+)\b.* stored as the checkpoint")
_RESUMED = re.compile(r"starting at (?P<file>[^\s:]+):(?P<pos>\d+)\b")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("after", "delay"),
    [("active", 0.0), ("active", 0.02), ("active", 0.05), ("active", 0.15), ("active", 0.4), ("active", 0.9),
     ("chosen", 0.0), ("chosen", 0.01)],
)  # fmt: skip
def test_a_kill_in_the_first_second_of_a_first_start_loses_nothing(
    fresh_schema: tuple[MariaDB, str], after: str, delay: float
) -> None:
    """SIGKILL at several instants of the first second of a first start on a fresh store, counted from the moment
    the worker is active (after Django's own start-up) or from the moment it has chosen its start position (before
    its first batch): every row written after the position that first start chose arrives once, in order."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    writer = Writer(server, schema)
    writer.start()
    try:
        wait_for(lambda: len(writer.started_at) >= 5, 10, message="rows written before the first start")
        first = RelayProcess(relay_env(server), "runbinlog", "--batch-ms", "50").start()
        mark = "active worker" if after == "active" else "stored as the checkpoint"
        wait_for(lambda: mark in first.output or not first.alive(), 30, interval=0.002)
        time.sleep(delay)
        first.kill()
        second = RelayProcess(relay_env(server), "runbinlog", "--batch-ms", "50").start()
        wait_for(lambda: "starting at" in second.output or not second.alive(), 30, message="the restart running")
        restarted_at = len(writer.started_at)
        wait_for(lambda: len(writer.started_at) >= restarted_at + 30, 30, message="rows written after the restart")
    finally:
        writer.done.set()
        writer.join()
    try:
        caught_up(server, second)
    except (AssertionError, TimeoutError) as exc:  # the outputs say which start chose what
        raise AssertionError(f"{exc}\nfirst:\n{first.output}\nsecond:\n{second.output[-3000:]}") from None
    chosen = [match for proc in (first, second) if (match := _CHOSEN.search(proc.output))]
    if len(chosen) == 2:  # the first start stored its choice before the kill ...
        pytest.fail(f"the restart chose a position again instead of resuming:\n{second.output}")
    # Without either line, the first start stored its choice and was killed before it could say so: the restart
    # resumed from it.
    stored = chosen[0] if chosen else _RESUMED.search(second.output)
    assert stored is not None, f"no start position was stored:\n{first.output}\n{second.output}"
    position = (stored["file"], int(stored["pos"]))
    expected = [str(i) for i, start in sorted(writer.started_at.items()) if start >= position]
    assert expected, f"no row was written after {position}"
    assert [key for *_, key in queue_of("c")] == expected
    assert second.stop() == 0


@pytest.mark.django_db(transaction=True)
def test_from_is_stored_before_the_first_event(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    start = server.binlog_position()
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    # The worker is killed as soon as it logs its start: a restart without --from resumes at --from's position.
    first = RelayProcess(relay_env(server), "runbinlog", "--from", f"{start[0]}:{start[1]}").start()
    wait_for(lambda: "stored as the checkpoint" in first.output, 30, interval=0.005)
    first.kill()
    assert (Checkpoint.objects.get().binlog_file, Checkpoint.objects.get().binlog_pos) >= start
    server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")
    second = RelayProcess(relay_env(server), "runbinlog").start()
    caught_up(server, second)
    assert [key for *_, key in queue_of("c")] == ["1", "2"]


# -- the source refuses the user or a privilege ------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited_users(mariadb: MariaDB) -> MariaDB:
    mariadb.execute(
        "CREATE USER IF NOT EXISTS 'noslave'@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* TO 'noslave'@'%'",
        "CREATE USER IF NOT EXISTS 'nomonitor'@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION SLAVE, SELECT ON *.* TO 'nomonitor'@'%'",
    )
    return mariadb


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("user", "password", "needles"),
    [
        ("repl", "wrong", ["cannot connect as user 'repl'", "1045", "[Server] Login and Password"]),
        ("noslave", "pw", ["source user 'noslave' lacks the REPLICATION SLAVE privilege"]),
        ("nomonitor", "pw", ["source user 'nomonitor' lacks the SUPER, BINLOG MONITOR privilege", "1227"]),
    ],
    ids=["wrong-password-1045", "no-replication-slave", "no-binlog-monitor-1227"],
)
def test_a_refused_user_or_privilege_stops_the_worker_with_one_line(
    limited_users: MariaDB, user: str, password: str, needles: list[str]
) -> None:
    env = relay_env(limited_users, RELAY_SERVER_LOGIN=user, RELAY_SERVER_PASSWORD=password)
    worker = RelayProcess(env, "runbinlog").start()
    assert worker.wait(30) == 1
    [line] = error_lines(worker.output)
    for needle in needles:
        assert needle in line, (needle, line)
    assert "retry" not in worker.output.lower()
    status = WorkerStatus.objects.get()
    assert status.state == "failed" and user in status.last_error


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("start", [(), ("--from", "binlog.000001:4")], ids=["current", "from"])
def test_a_schema_login_the_source_refuses_stops_the_worker_and_is_not_waited_for(
    mariadb: MariaDB, start: tuple[str, ...]
) -> None:
    """The schema history's first baseline reads information_schema with the [MySQL] login; PyMySQL raises a refused
    login (1045) as the same error class as a connection it could not make: it is no outage to wait out."""
    env = relay_env(mariadb, RELAY_MYSQL_LOGIN="repl", RELAY_MYSQL_PASSWORD="wrong-password")
    worker = RelayProcess(env, "runbinlog", *start).start()
    assert worker.wait(60) == 1, worker.output[-3000:]
    [line] = error_lines(worker.output)
    assert "1045" in line and "unreachable" not in worker.output
    assert WorkerStatus.objects.get().state == "failed"


# -- a source that cannot be reached is retried, and the status says so ----------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "start", [(), ("--from", "binlog.000001:4"), ("--from-gtid", "0-1-1")], ids=["checkpoint", "file", "gtid"]
)
def test_an_unreachable_source_is_retried_with_a_line_per_attempt(start: tuple[str, ...]) -> None:
    """Also on a first start at a given position: that position is stored as the checkpoint before the schema
    history's first baseline reads the source, so that read must wait the outage out too (a failure there would meet
    every later start again)."""
    port = free_tcp_port()  # nothing listens there
    env = relay_env(None, RELAY_SERVER_IPADDR="127.0.0.1", RELAY_SERVER_SOURCEPORT=str(port), RELAY_SERVER_LOGIN="repl")
    worker = RelayProcess(env, "runbinlog", *start).start()
    wait_for(lambda: worker.output.count("unreachable") >= 3 or not worker.alive(), 30, message="three attempts")
    assert worker.alive(), worker.output[-3000:]
    status = wait_for(lambda: WorkerStatus.objects.filter(state="reconnecting").first(), 10)
    assert str(port) in status.last_error
    attempts = [line for line in worker.output.splitlines() if "unreachable" in line]
    assert all("attempt" in line and "retrying in" in line for line in attempts), attempts
    assert worker.stop(30) == 0
    assert "Traceback" not in worker.output


@pytest.mark.django_db(transaction=True)
def test_a_source_that_goes_away_shows_as_reconnecting_then_connected() -> None:
    server = MariaDB(scratch_dir("relay-startup-"), row_metadata_full=True).start()
    try:
        worker = RelayProcess(relay_env(server), "runbinlog").start()
        wait_for(lambda: WorkerStatus.objects.filter(state="connected").exists(), 30, message="connected")
        caught_up(server, worker)
        assert not health.check().failing("worker_not_connected")
        server.stop()
        wait_for(lambda: WorkerStatus.objects.filter(state="reconnecting").exists(), 30, message="reconnecting")
        assert WorkerStatus.objects.get().last_error
        # The source stopped: the one health rule says so (/healthz 503, the banner, relay_healthy).
        stopped = health.check()
        assert not stopped.healthy and stopped.failing("worker_not_connected")
        server.start()
        server.execute("CREATE DATABASE IF NOT EXISTS s")
        caught_up(server, worker, timeout=60)
        wait_for(lambda: WorkerStatus.objects.filter(state="connected").exists(), 30, message="connected again")
        assert not health.check().failing("worker_not_connected")
        assert worker.stop() == 0
    finally:
        server.destroy()


# -- the store and the data directory at start-up ---------------------------------------------------------------

COMMANDS = [("runbinlog",), ("runrelay", "--port", "0")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unreachable_store_is_one_line(command: tuple[str, ...], tmp_path: Path) -> None:
    port = free_tcp_port()
    env = relay_env(None, DATABASE_URL=f"postgres://relay@127.0.0.1:{port}/relay", RELAY_SERVER_IPADDR="db")
    env["RELAY_SERVER_LOGIN"] = "repl"
    result = manage(env, *command)
    assert result.returncode == 1
    assert_one_line(result.stderr, "store error: cannot use the store", f"127.0.0.1:{port}", "refused")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_store_never_migrated_says_run_migrate(command: tuple[str, ...], state: str, tmp_path: Path) -> None:
    store = tmp_path / "relay.sqlite3"
    if state == "empty":
        sqlite3.connect(store).close()
    env = relay_env(None, DATABASE_URL=f"sqlite:///{store}", RELAY_SERVER_IPADDR="db", RELAY_SERVER_LOGIN="repl")
    result = manage(env, *command)
    assert result.returncode == 1
    assert_one_line(result.stderr, "store error:", str(store), "run manage.py migrate")
    if state == "missing":
        assert not store.exists()  # no empty file left behind


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_store_migrated_by_a_newer_release_is_refused_with_the_migration(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """An upgrade rolled back without its store: the store holds a migration this release does not have."""
    store = tmp_path / "relay.sqlite3"
    env = relay_env(None, DATABASE_URL=f"sqlite:///{store}", RELAY_SERVER_IPADDR="db", RELAY_SERVER_LOGIN="repl")
    assert manage(env, "migrate", "--no-input").returncode == 0
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO django_migrations (app, name, applied) VALUES ('relay', '9999_newer', '2030-01-01')")
    result = manage(env, *command)
    assert result.returncode == 1
    assert_one_line(result.stderr, "store error:", str(store), "newer release", "relay.9999_newer")


@pytest.mark.django_db(transaction=True)
def test_an_unmigrated_postgres_store_says_run_migrate() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test store")
    import psycopg2

    from tests.helpers.processes import test_store_url

    name = f"relay_unmigrated_{os.getpid()}"
    params = connection.get_connection_params()
    admin = psycopg2.connect(**params)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        url = test_store_url().rsplit("/", 1)[0] + f"/{name}"
        env = relay_env(None, DATABASE_URL=url, RELAY_SERVER_IPADDR="db", RELAY_SERVER_LOGIN="repl")
        result = manage(env, "runbinlog")
        assert result.returncode == 1
        assert_one_line(result.stderr, "store error:", name, "is not migrated", "run manage.py migrate")
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@pytest.mark.parametrize("command", [*COMMANDS, ("check",)], ids=lambda c: c[0])
def test_a_data_dir_that_cannot_be_created_is_one_line(command: tuple[str, ...], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = relay_env(None, RELAY_DATA_DIR="", RELAY_SERVER_DATADIR=str(blocker / "data"))
    result = manage(env, *command)
    assert result.returncode == 1
    assert_one_line(result.stderr, "configuration error: [Server] DataDir: cannot create", str(blocker / "data"))


def test_a_missing_source_key_is_one_line(tmp_path: Path) -> None:
    env = relay_env(None, DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}")
    result = manage(env, "runbinlog")
    assert result.returncode == 1
    assert_one_line(result.stderr, "configuration error: [Server] IPAddr: the source host is not set")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--batch-rows", "0"), "--batch-rows 0: must be a number of at least 1"),
        (("--batch-ms", "-1"), "--batch-ms -1: must be a number of at least 0"),
        (("--takeover-after", "nan"), "--takeover-after nan: must be a number of at least 0"),
        (("--max-runtime", "-1"), "--max-runtime -1.0: must be over 0 seconds"),
    ],
)
def test_runbinlog_refuses_numbers_no_run_could_mean(flags: tuple[str, str], says: str, tmp_path: Path) -> None:
    env = relay_env(None, DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}", RELAY_SERVER_IPADDR="127.0.0.1")
    env["RELAY_SERVER_LOGIN"] = "repl"
    result = manage(env, "runbinlog", *flags)
    assert result.returncode == 1
    assert_one_line(result.stderr, says)


def test_an_empty_auth_secret_is_one_line(tmp_path: Path) -> None:
    env = relay_env(None, DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}", RELAY_SERVER_AUTHSECRET="")
    result = manage(env, "runrelay")
    assert result.returncode == 1
    assert_one_line(result.stderr, "configuration error: [Server] AuthSecret: empty")


# -- --config names every key ------------------------------------------------------------------------------------


def test_config_option_names_the_store_and_the_secret_too(mariadb: MariaDB, tmp_path: Path) -> None:
    """RELAY_CONFIG names another file (another store, another secret): --config wins for every key."""
    repl = mariadb.replication_settings()
    good_store, other_store = tmp_path / "good.sqlite3", tmp_path / "other.sqlite3"
    good = tmp_path / "good.conf"
    good.write_text(
        f"[Server]\nIPAddr={repl['host']}\nSourcePort={repl['port']}\nLogin={repl['user']}\n"
        f"Password={repl['password']}\nAuthSecret=good-secret\nDataDir={tmp_path / 'good-data'}\n"
        f"HeartbeatSeconds=1\n[Store]\nURL=sqlite:///{good_store}\n"
    )
    other = tmp_path / "other.conf"
    other.write_text(
        f"[Server]\nAuthSecret=other-secret\nDataDir={tmp_path / 'other-data'}\n[Store]\nURL=sqlite:///{other_store}\n"
    )
    env = plain_env(RELAY_CONFIG=str(other))
    assert manage(env, "migrate", "--noinput", "--config", str(good)).returncode == 0
    assert good_store.exists() and not other_store.exists()

    worker = manage(env, "runbinlog", f"--config={good}", "--max-runtime", "2")
    assert worker.returncode == 0, worker.stderr
    with sqlite3.connect(good_store) as db:
        assert db.execute("SELECT COUNT(*) FROM relay_checkpoint").fetchone()[0] == 1

    from clientproto import RelayClient

    port = free_tcp_port()
    relay = RelayProcess(env, "runrelay", "--config", str(good), "--address", "127.0.0.1", "--port", str(port))
    relay.start()

    def answers() -> bool:
        assert relay.alive(), relay.output
        try:
            RelayClient("127.0.0.1", port, "good-secret", "probe", reconnect=False, timeout=2).connect()
            return True
        except OSError:
            return False

    wait_for(answers, 60, message="runrelay answering AUTH with the secret of --config")
    assert relay.stop() == 0
    assert not other_store.exists()
    assert not (tmp_path / "other-data").exists()


def test_config_option_naming_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = manage(plain_env(), "runbinlog", "--config", str(tmp_path / "nowhere.conf"))
    assert result.returncode == 1
    assert_one_line(result.stderr, f"configuration error: config file {tmp_path / 'nowhere.conf'} does not exist")


# -- binlog tail and check never take the worker's place ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_binlog_tail_and_check_do_not_knock_the_worker_off(fresh_schema: tuple[MariaDB, str]) -> None:
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    worker = RelayProcess(relay_env(server), "runbinlog", "--batch-ms", "50").start()
    wait_for(lambda: WorkerStatus.objects.filter(state="connected").exists(), 30, message="connected")
    caught_up(server, worker)
    repl = server.replication_settings()
    connection = ["--host", repl["host"], "--port", str(repl["port"]), "--user", "root"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["tail", *connection, "--stop-at-end"], ["check", *connection]):
        subprocess.run([sys.executable, "-m", "binlog", *args], cwd=REPO, env=env, capture_output=True, timeout=60)
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, worker)
    assert [key for *_, key in queue_of("c")] == ["1"]
    assert WorkerStatus.objects.get().reconnects == 0, worker.output
    assert "lost" not in worker.output
    assert worker.alive()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


# -- one source under two names -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_source_reached_by_another_address_is_not_started_afresh_unless_told(
    fresh_schema: tuple[MariaDB, str],
) -> None:
    """The store keys a source by host:port. The same server reached by another address (a DNS name, a VIP, a proxy
    after a fail-over) has no checkpoint of its own: started at its current position it would skip what was written
    since the other name's checkpoint. The worker stops and says how to go on: SourceName keeps the old name and its
    checkpoint; --new-source says it is another server."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY)")
    subscribe("c", 1, schema, "t")
    first = RelayProcess(relay_env(server, RELAY_SERVER_IPADDR="127.0.0.1"), "runbinlog").start()
    wait_for(lambda: Checkpoint.objects.exists(), 60, message="the first start's checkpoint")
    server.execute(f"INSERT INTO `{schema}`.t VALUES (1)")
    caught_up(server, first)
    assert first.stop(30) == 0
    server.execute(f"INSERT INTO `{schema}`.t VALUES (2)")  # while no worker runs
    named = f"127.0.0.1:{server.port}"

    renamed = RelayProcess(relay_env(server, RELAY_SERVER_IPADDR="localhost"), "runbinlog").start()
    wait_for(lambda: not renamed.alive(), 60, message="the worker stops")
    assert renamed.process.returncode == 1 and "Traceback" not in renamed.output
    assert f"has other sources' ({named} at" in renamed.output and "SourceName" in renamed.output
    assert WorkerStatus.objects.get(source=f"localhost:{server.port}").state == "failed"
    assert not Checkpoint.objects.filter(source=f"localhost:{server.port}").exists()

    kept = RelayProcess(relay_env(server, RELAY_SERVER_IPADDR="localhost", RELAY_SERVER_SOURCENAME=named), "runbinlog")
    kept.start()
    caught_up(server, kept)
    assert [entry[2] for entry in queue_of("c")] == ["1", "2"]
    assert kept.stop(30) == 0

    other = RelayProcess(relay_env(server, RELAY_SERVER_IPADDR="localhost"), "runbinlog", "--new-source").start()
    wait_for(lambda: Checkpoint.objects.filter(source=f"localhost:{server.port}").exists(), 60, message="a start")
    assert other.stop(30) == 0
