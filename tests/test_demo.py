"""The README's first command: the whole relay on one machine, driven for a short run and stopped with Ctrl-C."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_demo_runs_end_to_end_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = {key: value for key, value in __import__("os").environ.items() if not key.startswith(("RELAY_", "DATABASE_"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    demo = subprocess.Popen(
        [sys.executable, "-m", "devtools.demo", "--data-dir", str(tmp_path / "demo"), "--rate", "20"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 240
        received = 0
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"(\d+) received by demo-consumer", line)
            if match and int(match.group(1)) > 0:
                received = int(match.group(1))
                break
        output = "".join(lines)
        assert received > 0, output
        dashboard = re.search(r"dashboard : (http://127\.0\.0\.1:(\d+)/)\s+login: admin / (\S+)", output)
        relay = re.search(r"relay     : 127\.0\.0\.1:(\d+)", output)
        assert dashboard and relay, output
        with urllib.request.urlopen(dashboard.group(1) + "healthz", timeout=10) as reply:
            assert reply.status == 200
        with urllib.request.urlopen(dashboard.group(1), timeout=10) as reply:  # login required: the login page
            assert "login" in reply.url
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=90)
        lines.append(rest)
        assert demo.returncode == 0, "".join(lines)
        assert "demo: stopped" in rest
        assert not _listening(int(relay.group(1)))
        assert not _listening(int(dashboard.group(2)))
        change_log = list((tmp_path / "demo" / "logs").glob("relaylogs-*.txt"))
        assert change_log and ";shop;orders;I;" in change_log[0].read_text()
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    # Again in the same folder: its MariaDB comes back on another port, and its worker goes on from its checkpoint.
    again = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--data-dir", str(tmp_path / "demo"), "--seconds", "8"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert again.returncode == 0 and "worker exited" not in again.stdout, again.stdout[-3000:]


@pytest.mark.slow
def test_demo_against_a_configured_source_and_postgresql(tmp_path: Path, mariadb) -> None:
    """The second mode: RELAY_CONFIG names the source, DATABASE_URL a PostgreSQL store; no throwaway MariaDB."""
    import os

    import psycopg2

    from tests.helpers.postgres import postgres_url

    admin_url = postgres_url()
    database = f"relay_demo_{os.getpid()}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {database}")
        cursor.execute(f"CREATE DATABASE {database}")
    store_url = admin_url.rsplit("/", 1)[0] + "/" + database
    schema = f"demo_{os.getpid()}"
    mariadb.execute(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.orders (id INT PRIMARY KEY)")
    repl = mariadb.replication_settings()
    config = tmp_path / "replicaterelay.conf"
    config.write_text(
        f"[Server]\nIPAddr={repl['host']}\nSourcePort={repl['port']}\nLogin={repl['user']}\n"
        f"Password={repl['password']}\nAuthSecret=Freedelity\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RELAY_", "DATABASE_"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(RELAY_CONFIG=str(config), DATABASE_URL=store_url)
    demo = subprocess.Popen(
        [sys.executable, "-m", "devtools.demo", "--data-dir", str(tmp_path / "demo"), "--consume", f"I,{schema}.*"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert demo.stdout is not None
        lines = []
        for line in demo.stdout:
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        output = "".join(lines)
        assert "throwaway MariaDB" not in output and f"store     : {store_url}" in output, output
        assert "(secret Freedelity)" in output
        time.sleep(3)  # the consumer subscribes; the worker is at the source's current position
        mariadb.execute(*(f"INSERT INTO {schema}.orders VALUES ({i})" for i in range(1, 11)))
        consumer_log = tmp_path / "demo" / "consumer.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if consumer_log.exists() and consumer_log.read_text().count(f'"schema":"{schema}"') >= 10:
                break
            time.sleep(0.5)
        assert consumer_log.read_text().count(f'"schema":"{schema}"') == 10, consumer_log.read_text()[-2000:]
        demo.send_signal(signal.SIGINT)
        demo.communicate(timeout=90)
        assert demo.returncode == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        mariadb.execute(f"DROP DATABASE IF EXISTS {schema}")
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.close()
