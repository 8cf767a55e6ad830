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
        [sys.executable, "-m", "relay.demo", "--data-dir", str(tmp_path / "demo"), "--rate", "20"],
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
