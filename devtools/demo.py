"""The relay end to end on one machine: ``scripts/demo`` (``python -m devtools.demo``).

Without a configured source it starts a throwaway MariaDB with the binlog on; with ``RELAY_CONFIG`` (and
``DATABASE_URL``) it uses the configured source and store. It migrates the store, creates a dashboard login, starts
the binlog worker, the relay server and the dashboard as child processes, subscribes an example consumer, writes a
little sample traffic, prints where to look, and stops everything on Ctrl-C (or after ``--seconds``).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from devtools.sandbox import MariaDB, free_tcp_port
from relay.config import ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent
DEMO_SECRET = "demo-secret"

SAMPLE_SCHEMA = [
    "CREATE DATABASE IF NOT EXISTS shop",
    "CREATE TABLE IF NOT EXISTS shop.customers (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL,"
    " email VARCHAR(200), created DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))",
    "CREATE TABLE IF NOT EXISTS shop.orders (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL,"
    " total DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped','cancelled') NOT NULL DEFAULT 'new',"
    " note TEXT, updated TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))",
]


def wait_for_port(
    port: int, what: str, children: list[tuple[str, subprocess.Popen[bytes]]], timeout: float = 60
) -> None:
    """Blocks until something listens on 127.0.0.1:``port``; fails early if a child process has died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            for name, process in children:
                if process.poll() is not None:
                    raise SystemExit(
                        f"demo: {name} exited with {process.returncode} before the {what} was up"
                    ) from None
            time.sleep(0.2)
    raise SystemExit(f"demo: the {what} did not listen on port {port} within {timeout:.0f} s")


class Demo:
    def __init__(self, data_dir: Path, http_port: int, relay_port: int, consume: str = "IUD,shop.*") -> None:
        self.data_dir = data_dir
        self.consume = consume  # the example consumer's filter
        self.http_port = http_port
        self.relay_port = relay_port
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.sandbox: MariaDB | None = None
        self.stop = threading.Event()
        self.env: dict[str, str] = dict(os.environ)
        self.written = 0  # row changes the sample traffic committed

    # -- set-up ---------------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.env.setdefault("DATABASE_URL", f"sqlite:///{self.data_dir / 'relay.sqlite3'}")
        self.env["RELAY_SERVER_DATADIR"] = str(self.data_dir)
        self.env["RELAY_SERVER_SERVERPORT"] = str(self.relay_port)
        self.env["PYTHONUNBUFFERED"] = "1"
        # The dashboard answers on 127.0.0.1 here; production names its hosts (DJANGO_ALLOWED_HOSTS or
        # [Server] AllowedHosts), and the settings never default to "*".
        self.env.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
        configured = load_config(environ=self.env)
        if not configured.source.host:
            print("demo: no source configured; starting a throwaway MariaDB with the binlog on ...", flush=True)
            self.sandbox = MariaDB(self.data_dir / "mariadb").start()
            self.sandbox.execute(*SAMPLE_SCHEMA)
            self.env.update(self.sandbox.source_env())
            # Its data directory is kept between runs, its port is not: one name for it, so that a second run goes
            # on from the first one's checkpoint (the store keys a source by its name, host:port unless set).
            self.env["RELAY_SERVER_SOURCENAME"] = "demo-mariadb"
        if not configured.auth_secret:
            self.env["RELAY_SERVER_AUTHSECRET"] = DEMO_SECRET
        self.secret = configured.auth_secret or DEMO_SECRET
        self.env["RELAY_LOGGER_SCHEMA"] = self.env.get("RELAY_LOGGER_SCHEMA", "shop")
        self.env["RELAY_LOGGER_FORMAT"] = self.env.get("RELAY_LOGGER_FORMAT", "text,json")
        self.manage("migrate", "--noinput", quiet=True)
        self.password = secrets.token_urlsafe(9)
        self.manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import User;"
            "u, _ = User.objects.get_or_create(username='admin', defaults={'is_staff': True, 'is_superuser': True});"
            f"u.is_staff = u.is_superuser = True; u.set_password('{self.password}'); u.save()",
            quiet=True,
        )

    def manage(self, *args: str, quiet: bool = False) -> None:
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=quiet, text=True
        )
        if result.returncode != 0:
            raise SystemExit(
                f"demo: manage.py {' '.join(args[:1])} failed:\n{result.stdout or ''}{result.stderr or ''}"
            )

    def spawn(self, name: str, *args: str) -> None:
        log = open(self.data_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(args, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.children.append((name, process))

    def start_services(self) -> None:
        python = sys.executable
        self.spawn("worker", python, "manage.py", "runbinlog")
        if (REPO / "relay" / "management" / "commands" / "runrelay.py").exists():
            self.spawn("relay", python, "manage.py", "runrelay")
        gunicorn = Path(python).with_name("gunicorn")
        self.spawn(
            "dashboard",
            str(gunicorn),
            "relayproject.wsgi",
            "--bind",
            f"127.0.0.1:{self.http_port}",
            "--workers",
            "2",
            "--access-logfile",
            "-",
        )
        wait_for_port(self.relay_port, "relay server", self.children)
        wait_for_port(self.http_port, "dashboard", self.children)
        if (REPO / "clientproto" / "example.py").exists():
            self.spawn(
                "consumer",
                python,
                "-m",
                "clientproto.example",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.relay_port),
                "--secret",
                self.secret,
                "--name",
                "demo-consumer",
                "--filter",
                self.consume,
            )

    # -- traffic --------------------------------------------------------------------------------------------------

    def traffic(self, rate: float) -> None:
        if self.sandbox is None:
            return
        rng = random.Random(7)
        with self.sandbox.connect("shop") as conn, conn.cursor() as cur:
            while not self.stop.wait(1 / rate):
                choice = rng.random()
                if choice < 0.5:
                    cur.execute(
                        "INSERT INTO customers (name, email) VALUES (%s, %s)",
                        (f"customer {rng.randrange(10**6)}", f"c{rng.randrange(10**6)}@example.com"),
                    )
                    cur.execute(
                        "INSERT INTO orders (customer_id, total, note) VALUES (%s, %s, %s)",
                        (cur.lastrowid, f"{rng.uniform(1, 500):.2f}", "first order"),
                    )
                    self.written += 2
                elif choice < 0.85:
                    # Only a row whose status changes: the binlog has no row change for one set to what it was,
                    # though the driver counts it (it asks for the rows found, not changed).
                    status = rng.choice(["paid", "shipped"])
                    self.written += cur.execute(
                        "UPDATE orders SET status = %s WHERE id = %s AND status <> %s",
                        (status, rng.randrange(1, 50), status),
                    )
                else:
                    self.written += cur.execute("DELETE FROM orders WHERE status = 'shipped' ORDER BY id LIMIT 1")

    def progress(self) -> str:
        consumer_log = self.data_dir / "consumer.log"
        received = 0
        if consumer_log.exists():
            with open(consumer_log, "rb") as handle:
                received = sum(1 for line in handle if line.startswith(b"{"))
        return f"demo: {self.written} row changes written on the source, {received} received by demo-consumer"

    # -- running --------------------------------------------------------------------------------------------------

    def summary(self) -> str:
        lines = [
            "",
            "binlog relay demo is running",
            f"  dashboard : http://127.0.0.1:{self.http_port}/   login: admin / {self.password}",
            f"  relay     : 127.0.0.1:{self.relay_port} (secret {self.secret})",
            f"  store     : {self.env['DATABASE_URL']}",
            f"  logs      : {self.data_dir}/*.log, change logs in {self.data_dir}/logs",
        ]
        if self.sandbox is not None:
            lines.append(f"  source    : throwaway MariaDB on 127.0.0.1:{self.sandbox.port} (schema shop)")
        lines.append("Ctrl-C stops everything.")
        return "\n".join(lines)

    def check_children(self) -> str | None:
        for name, process in self.children:
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}; see {self.data_dir / (name + '.log')}"
        return None

    def shutdown(self) -> None:
        self.stop.set()
        for _, process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in reversed(self.children):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                print(f"demo: {name} did not stop in 20 s; killing it", flush=True)
                process.kill()
                process.wait()
        if self.sandbox is not None:
            self.sandbox.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=REPO / "var" / "demo")
    parser.add_argument("--http-port", type=int, default=0, help="dashboard port (default: a free one)")
    parser.add_argument("--relay-port", type=int, default=0, help="relay protocol port (default: a free one)")
    parser.add_argument("--rate", type=float, default=5.0, help="sample transactions per second")
    parser.add_argument("--seconds", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    parser.add_argument("--consume", default="IUD,shop.*", help="the example consumer's filter (TYPES,SCHEMA.TABLE)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "relayproject.settings")
    demo = Demo(
        args.data_dir.resolve(), args.http_port or free_tcp_port(), args.relay_port or free_tcp_port(), args.consume
    )
    interrupted = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        interrupted.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    status = 0
    try:
        demo.prepare()
        demo.start_services()
        threading.Thread(target=demo.traffic, args=(args.rate,), daemon=True, name="traffic").start()
        print(demo.summary(), flush=True)
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        next_progress = time.monotonic() + 10
        while not interrupted.wait(0.5):
            if time.monotonic() >= next_progress:
                print(demo.progress(), flush=True)
                next_progress += 10
            problem = demo.check_children()
            if problem:
                print(f"demo: {problem}", flush=True)
                status = 1
                break
            if deadline is not None and time.monotonic() > deadline:
                break
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        status = 1
    finally:
        print(demo.progress(), flush=True)
        print("demo: stopping ...", flush=True)
        demo.shutdown()
        print("demo: stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
