"""manage.py snapshot: asking (and the refusals), watching until the worker is done, the exit statuses, the terminal
and plain displays, --cancel, --timeout and Ctrl-C.

The binlog worker's part is played by a thread that moves the Snapshot rows as relay/worker/snapshots.py does
(pending, running with an estimated total and rows in chunks, then done or failed); the command only reads them.
"""

from __future__ import annotations

import io
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from devtools.wait import wait_for
from relay import store
from relay.management.snapshotwatch import bar_line, plain_line
from relay.models import Client, Snapshot, WorkerStatus
from relay.store.snapshots import cancel_snapshots
from tests.helpers.mariadb import MariaDB
from tests.helpers.processes import RelayProcess, relay_env
from tests.helpers.worker import caught_up, start_worker, subscribe

# The command's thread and the worker's thread each need to see what the other committed.
pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-seconds", "0.02")
ESCAPE = re.compile(r"\x1b\[[0-9]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def loader() -> Client:
    """A client with a filter on the inserts of every table of ``shop``, as a client would add over the protocol."""
    session = store.open_session("loader", "10.0.0.5:40000")
    store.add_filter(session.client_id, 1, "shop", "*", 0, 0)
    return Client.objects.get(id=session.client_id)


def worker_reporting() -> None:
    now = timezone.now()
    WorkerStatus.objects.update_or_create(
        source="main", defaults={"state": WorkerStatus.State.CONNECTED, "started": now, "heartbeat": now}
    )


def run(*args: str, stdout: io.StringIO | None = None) -> tuple[int | str, str, str]:
    """The command in this process: (exit status, or the message of a one-line failure; stdout; stderr)."""
    out, err = stdout or io.StringIO(), io.StringIO()
    try:
        call_command("snapshot", *args, stdout=out, stderr=err)
        status: int | str = 0
    except SystemExit as exc:
        status = exc.code if exc.code is not None else 0
    return status, out.getvalue(), err.getvalue()


def play_worker(
    client: Client,
    tables: int = 1,
    *,
    rows: int = 1000,
    chunks: int = 4,
    fail: str = "",
    before: Callable[[], None] | None = None,
    pause: float = 0.05,
) -> threading.Thread:
    """Waits for the client's pending snapshots (``tables`` of them), then reads each in ``chunks`` chunks as the worker
    would, ending done, or failed with ``fail`` as the error half-way."""

    def work() -> None:
        try:
            wait_for(
                lambda: Snapshot.objects.filter(client=client, state=Snapshot.State.PENDING).count() >= tables,
                timeout=30,
                message="the command's request",
            )
            time.sleep(pause)
            if before is not None:
                before()
            for snapshot in Snapshot.objects.filter(client=client, state=Snapshot.State.PENDING):
                started = timezone.now()
                rows_of = Snapshot.objects.filter(id=snapshot.id)
                rows_of.update(state=Snapshot.State.RUNNING, rows_total=rows, started=started, updated=started)
                for chunk in range(1, chunks + 1):
                    time.sleep(pause)
                    if fail and chunk > chunks // 2:
                        now = timezone.now()
                        rows_of.update(state=Snapshot.State.FAILED, error=fail, updated=now, finished=now)
                        break
                    rows_of.filter(state=Snapshot.State.RUNNING).update(
                        rows_done=rows * chunk // chunks, chunks_done=chunk, updated=timezone.now()
                    )
                else:
                    now = timezone.now()
                    rows_of.filter(state=Snapshot.State.RUNNING).update(
                        state=Snapshot.State.DONE, updated=now, finished=now
                    )
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def threads() -> Iterator[list[threading.Thread]]:
    started: list[threading.Thread] = []
    yield started
    for thread in started:
        thread.join(30)


# -- asking ------------------------------------------------------------------------------------------------------


def test_refused_without_a_filter_that_covers_the_table(loader: Client) -> None:
    status, out, _ = run("--client", "loader", "shop.orders", "other.things", "--no-wait")
    assert isinstance(status, str) and status.startswith("snapshot refused: ")
    assert "no filter that covers inserts on other.things" in status
    assert not Snapshot.objects.exists()  # nothing asked for, not even the table that was covered
    assert out == ""


def test_refused_where_condition(loader: Client) -> None:
    status, _, _ = run("--client", "loader", "shop.orders", "--where", "id > 1; DROP TABLE orders", "--no-wait")
    assert isinstance(status, str) and "snapshot refused" in status and "second statement" in status
    assert not Snapshot.objects.exists()


def test_unknown_client(loader: Client) -> None:
    status, _, _ = run("--client", "nobody", "shop.orders")
    assert status == (
        "snapshot: no client named 'nobody' (clients: loader); a client registers by connecting over the relay protocol"
    )


def test_not_schema_dot_table(loader: Client) -> None:
    status, _, _ = run("--client", "loader", "orders")
    assert status == "snapshot: 'orders' is not SCHEMA.TABLE"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--poll-seconds", "0"), "--poll-seconds must be more than 0"),
        (("--timeout", "-1"), "--timeout must be more than 0"),
        (("--cancel", "--where", "id > 1"), "--cancel takes no --where"),
    ],
)
def test_bad_options(loader: Client, args: tuple[str, ...], message: str) -> None:
    status, _, _ = run("--client", "loader", "shop.orders", *args)
    assert isinstance(status, str) and status.startswith(message)


def test_no_wait_asks_and_returns(loader: Client) -> None:
    status, out, _ = run(
        "--client", "loader", "shop.orders", "shop.items", "shop.orders", "--no-wait", "--where", "id > 5"
    )
    assert status == 0
    snapshots = list(Snapshot.objects.order_by("id"))
    assert [(s.table_name, s.state, s.where) for s in snapshots] == [
        ("orders", "pending", "id > 5"),
        ("items", "pending", "id > 5"),
    ]
    first, second = snapshots
    assert out.splitlines() == [
        f"snapshot #{first.id} of shop.orders where id > 5 for client loader: asked for",
        f"snapshot #{second.id} of shop.items where id > 5 for client loader: asked for",
        "watch it with: manage.py snapshot --client loader shop.orders shop.items --where 'id > 5'",
    ]
    # Asking again attaches to the snapshots under way.
    Snapshot.objects.filter(id=first.id).update(state=Snapshot.State.RUNNING, rows_done=300)
    status, out, _ = run("--client", "loader", "shop.orders", "--where", "id > 5", "--no-wait")
    assert status == 0 and Snapshot.objects.count() == 2
    assert (
        f"snapshot #{first.id} of shop.orders where id > 5 for client loader: already under way (running, 300 "
        "rows so far)" in out.splitlines()
    )
    # ...with the same condition only.
    status, _, _ = run("--client", "loader", "shop.orders", "--no-wait")
    assert isinstance(status, str) and "already under way for this client with another condition" in status


# -- watching ----------------------------------------------------------------------------------------------------


def test_waits_until_done_with_plain_lines(loader: Client, threads: list[threading.Thread]) -> None:
    """Not a terminal: plain lines, one per change of state, no bar and no escape codes. The worker is not there at
    first (said once), then comes back (said too)."""
    threads.append(play_worker(loader, 2, rows=1000, chunks=4, before=worker_reporting, pause=0.1))
    status, out, err = run("--client", "loader", "shop.orders", "shop.items", *FAST)
    assert status == 0, (out, err)
    assert err == ""
    assert "\r" not in out and not ESCAPE.search(out) and "[#" not in out
    lines = out.splitlines()
    waiting = [line for line in lines if line.startswith("waiting for the binlog worker: ")]
    assert waiting == ["waiting for the binlog worker: no binlog worker has reported: start manage.py runbinlog"]
    assert "the binlog worker is reporting again" in lines
    assert "shop.orders: pending, waiting for the worker to start it" in lines
    running = [line for line in lines if line.startswith("shop.orders: running, ")]
    assert running and re.fullmatch(r"shop\.orders: running, [0-9,]+ / ~1,000 rows \([0-9]+%\)(, .*)?", running[0])
    done = [line for line in lines if line.startswith("shop.orders: done")]
    assert len(done) == 1 and re.fullmatch(r"shop\.orders: done, 1,000 rows in [0-9]+ s \([0-9.,]+ rows/s\)", done[0])
    assert any(line.startswith("shop.items: done, 1,000 rows") for line in lines)
    assert lines.index("shop.orders: pending, waiting for the worker to start it") < lines.index(running[0])
    assert set(Snapshot.objects.values_list("state", flat=True)) == {"done"}


def test_terminal_bars_are_rewritten_in_place(
    loader: Client, threads: list[threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    worker_reporting()
    threads.append(play_worker(loader, 2, rows=400, chunks=4, pause=0.2))  # each chunk seen by several polls
    status, out, err = run("--client", "loader", "shop.orders", "shop.items", *FAST, stdout=Terminal())
    assert status == 0, (out, err)
    assert "waiting for the binlog worker" not in out
    assert out.endswith("\n") and "\r" in out
    assert "\x1b[1A" in out  # back up over the first table's line to rewrite both
    # What the terminal shows at the end: the last redraw, one line per table, each cleared to its end.
    last = out.rsplit("\x1b[1A", 1)[1]
    shown = [ESCAPE.sub("", line).strip("\r") for line in last.strip("\n").split("\n")]
    assert len(shown) == 2
    assert re.fullmatch(r"shop\.orders  \[#{24}\] 100%  done: 400 rows in [0-9]+ s", shown[0]), shown[0]
    assert shown[1].startswith("shop.items   [########################] 100%  done: 400 rows")
    # Along the way: a part-filled bar with the rows out of the estimate and the rate.
    assert re.search(r"shop\.orders  \[#{6}-{18}\]  25%  100 / ~400 rows  [0-9.,]+ rows/s", out), out


def test_failed_snapshot_exits_1_with_its_error(loader: Client, threads: list[threading.Thread]) -> None:
    worker_reporting()
    error = "shop.orders has no primary key and no unique key over NOT NULL columns\nadd one, or ask with a key"
    threads.append(play_worker(loader, rows=100, chunks=4, fail=error))
    status, out, err = run("--client", "loader", "shop.orders", *FAST)
    assert status == 1
    assert (
        "shop.orders: failed after 50 rows: shop.orders has no primary key and no unique key over NOT NULL "
        "columns" in out.splitlines()
    )
    assert err == f"shop.orders: failed after 50 rows: {error}\n"


def test_cancelled_while_watched_exits_1(loader: Client, threads: list[threading.Thread]) -> None:
    worker_reporting()

    def cancel() -> None:
        cancel_snapshots(list(Snapshot.objects.filter(client=loader)))

    threads.append(play_worker(loader, rows=100, before=cancel))
    status, out, err = run("--client", "loader", "shop.orders", *FAST)
    assert status == 1
    assert "shop.orders: cancelled after 0 rows (those stay queued)" in out.splitlines()
    assert err == "shop.orders: cancelled after 0 rows\n"


def test_timeout_exits_2_and_the_snapshot_goes_on(loader: Client) -> None:
    """No worker: said once however many polls, then the deadline."""
    WorkerStatus.objects.create(
        source="main",
        state=WorkerStatus.State.CONNECTED,
        started=timezone.now() - timedelta(minutes=5),
        heartbeat=timezone.now() - timedelta(minutes=2),
    )
    started = time.monotonic()
    status, out, err = run("--client", "loader", "shop.orders", "--timeout", "0.5", *FAST)
    assert status == 2
    assert 0.5 <= time.monotonic() - started < 10
    waiting = [line for line in out.splitlines() if line.startswith("waiting for the binlog worker")]
    assert len(waiting) == 1 and "worker for main last reported 2 min" in waiting[0]
    assert err == (
        "timed out after 0.5 s with shop.orders (pending) under way; the snapshot continues in the worker; run the "
        "same command again to watch it, or --cancel\n"
    )
    assert Snapshot.objects.get().state == Snapshot.State.PENDING


def test_cancel(loader: Client) -> None:
    run("--client", "loader", "shop.orders", "shop.items", "--no-wait")
    orders, items = Snapshot.objects.order_by("id")
    Snapshot.objects.filter(id=orders.id).update(state=Snapshot.State.RUNNING, rows_done=1500)
    status, out, _ = run("--client", "loader", "shop.orders", "--cancel")
    assert status == 0
    assert (
        out == f"snapshot #{orders.id} of shop.orders for client loader: cancelled after 1,500 rows (those stay "
        "queued)\n"
    )
    assert Snapshot.objects.get(id=orders.id).state == Snapshot.State.CANCELLED
    assert Snapshot.objects.get(id=items.id).state == Snapshot.State.PENDING  # only the tables named
    status, out, _ = run("--client", "loader", "shop.orders", "--cancel")
    assert status == 0 and out == "shop.orders: no snapshot under way for client loader, nothing to cancel\n"
    # Another client's snapshot of the same table is not this client's to cancel.
    other = store.open_session("other")
    store.add_filter(other.client_id, 1, "shop", "items", 0, 0)
    run("--client", "other", "shop.items", "--no-wait")
    run("--client", "loader", "shop.items", "--cancel")
    assert Snapshot.objects.get(client_id=other.client_id).state == Snapshot.State.PENDING


def test_ctrl_c_leaves_the_snapshot_to_the_worker(loader: Client) -> None:
    """The real command line: SIGINT while it waits ends the watch with 130 and a word on what goes on."""
    process = RelayProcess(relay_env(None), "snapshot", "--client", "loader", "shop.orders", *FAST).start()
    wait_for(lambda: "asked for" in process.output or not process.alive(), timeout=60, message="the request")
    wait_for(lambda: "waiting for the binlog worker" in process.output, timeout=30, message="the watch")
    process.signal(signal.SIGINT)
    assert process.wait(30) == 130, process.output
    assert process.output.rstrip().endswith(
        "interrupted: the snapshot continues in the worker; run the same command again to watch it, or --cancel"
    )
    assert "Traceback" not in process.output
    assert Snapshot.objects.get().state == Snapshot.State.PENDING


def test_exit_statuses_of_the_real_command_line(loader: Client) -> None:
    env = relay_env(None)
    refused = RelayProcess(env, "snapshot", "--client", "loader", "other.t").start()
    assert refused.wait(60) == 1 and "snapshot refused: client 'loader' has no filter" in refused.output
    timeout = RelayProcess(env, "snapshot", "--client", "loader", "shop.orders", "--timeout", "0.3", *FAST).start()
    assert timeout.wait(60) == 2 and "timed out after 0.3 s" in timeout.output


def test_rerunning_attaches_to_the_snapshot_under_way(loader: Client, threads: list[threading.Thread]) -> None:
    run("--client", "loader", "shop.orders", "--no-wait")
    (snapshot,) = Snapshot.objects.all()
    worker_reporting()
    threads.append(play_worker(loader, rows=10, chunks=2))
    status, out, _ = run("--client", "loader", "shop.orders", *FAST)
    assert status == 0 and Snapshot.objects.get().state == Snapshot.State.DONE
    assert out.splitlines()[0] == (
        f"snapshot #{snapshot.id} of shop.orders for client loader: already under way (pending): watching it"
    )
    assert "shop.orders: done, 10 rows" in out


def test_control_characters_never_reach_the_terminal(
    loader: Client, threads: list[threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    worker_reporting()
    threads.append(play_worker(loader, rows=10, chunks=2, fail="bad \x1b[2J thing\r\nsecond \x07line"))
    status, out, err = run("--client", "loader", "shop.orders", *FAST, stdout=Terminal())
    assert status == 1
    assert "\x1b[2J" not in out + err and "\x07" not in out + err
    assert "FAILED after 5 rows: bad ?[2J thing" in out
    assert err == "shop.orders: failed after 5 rows: bad ?[2J thing\nsecond ?line\n"


# -- the lines themselves ----------------------------------------------------------------------------------------


def test_lines_of_each_state(loader: Client) -> None:
    run("--client", "loader", "shop.orders", "--no-wait")
    snapshot = Snapshot.objects.get()
    now = timezone.now()
    assert plain_line(snapshot, now) == "shop.orders: pending, waiting for the worker to start it"
    assert bar_line(snapshot, now, 12) == (
        "shop.orders   [------------------------]    ?  pending: waiting for the worker to start it"
    )
    snapshot.state = Snapshot.State.RUNNING
    snapshot.started = now - timedelta(seconds=10)
    snapshot.updated = now
    snapshot.rows_done = 5000
    assert plain_line(snapshot, now) == "shop.orders: running, 5,000 rows, 500 rows/s"  # the total not known yet
    snapshot.rows_total = 20_000
    assert plain_line(snapshot, now) == "shop.orders: running, 5,000 / ~20,000 rows (25%), 500 rows/s, ETA 30 s"
    assert bar_line(snapshot, now, 11) == (
        "shop.orders  [######------------------]  25%  5,000 / ~20,000 rows  500 rows/s, ETA 30 s"
    )
    assert bar_line(snapshot, now, 5).startswith("shop~  [######")  # a long name is cut
    snapshot.rows_done = 25_000  # past the estimate: the bar stays full until the worker says done
    assert "[########################] 100%  25,000 / ~20,000 rows" in bar_line(snapshot, now, 11)
    snapshot.state = Snapshot.State.FAILED
    snapshot.error = "lost the source\nmore"
    assert plain_line(snapshot, now) == "shop.orders: failed after 25,000 rows: lost the source"


# -- with the real worker ----------------------------------------------------------------------------------------


def test_with_the_real_worker(fresh_schema: tuple[MariaDB, str]) -> None:
    """The whole path once: a private MariaDB, ``manage.py runbinlog`` and this command as the operator runs them."""
    server, schema = fresh_schema
    server.execute(f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    server.execute(f"CREATE TABLE `{schema}`.nokey (a INT)")
    values = ", ".join(f"({i}, 'v{i}')" for i in range(1, 1201))
    server.execute(f"INSERT INTO `{schema}`.t VALUES {values}")
    worker = start_worker(
        server, server.binlog_position(), batch_ms=20, RELAY_SNAPSHOT_CHUNKROWS=200, RELAY_SNAPSHOT_ROWSPERSECOND=2000
    )
    caught_up(server, worker)
    subscribe("copy", 1, schema, "*")
    env = relay_env(None)
    watch = RelayProcess(env, "snapshot", "--client", "copy", f"{schema}.t", "--timeout", "120", *FAST).start()
    assert watch.wait(150) == 0, watch.output
    assert re.search(rf"^{schema}\.t: done, 1,200 rows in [0-9]+ s", watch.output, re.MULTILINE), watch.output
    failing = RelayProcess(env, "snapshot", "--client", "copy", f"{schema}.nokey", "--timeout", "60", *FAST).start()
    assert failing.wait(90) == 1, failing.output
    assert f"{schema}.nokey: failed after 0 rows: " in failing.output
    assert "no primary key" in failing.output
    worker.stop()


def test_the_clients_named_for_an_unknown_one_carry_no_control_characters() -> None:
    store.open_session("evil\x1b[2J\x1b]0;pwned\x07", "10.0.0.9:4000")
    with pytest.raises(SystemExit) as stopped:
        call_command("snapshot", "--client", "nobody", "shop.orders")
    message = str(stopped.value.code)
    assert message.startswith("snapshot: no client named 'nobody' (clients: evil")
    assert "\x1b" not in message and "\x07" not in message, repr(message)


def test_a_usage_error_exits_1_not_the_timeout_status() -> None:
    """Exit 2 means --timeout passed and the snapshot goes on: a bad argument must not say that."""
    process = RelayProcess(relay_env(None), "snapshot", "--client", "loader", "shop.orders", "--timeout", "abc").start()
    assert process.wait(60) == 1 and "invalid float value" in process.output, process.output
