"""The dashboard in headless Chromium: log in through the form, open every page with a filled store, save screenshots,
and fail on any JavaScript error, console error, failed request or missing chart.

Chromium is Debian's /usr/bin/chromium, driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so nothing is downloaded and no driver or websocket
library is needed. Screenshots go to $RELAY_SCREENSHOT_DIR, or to a temporary directory named in the test's output.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dashboard_data import PASSWORD, UNICODE, Filled
from tests.helpers.scratch import scratch_dir

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("RELAY_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",  # the tests may run as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]
TIMEOUT = 30.0


class BrowserError(AssertionError):
    pass


class Chromium:
    """A headless Chromium and one page, over the DevTools protocol on a pipe."""

    def __init__(self) -> None:
        self.profile = scratch_dir("relay-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_pipes() -> None:  # in the child: the protocol's fixed descriptors
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        self.log = open(self.profile / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            close_fds=False,  # os.pipe() descriptors are close-on-exec; only 3 and 4 are inherited
            preexec_fn=wire_pipes,  # dup2 only, before exec
            start_new_session=True,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._next_id = 0
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self._event_added = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = self._open_page()

    # -- protocol ---------------------------------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        box = self._replies.get(message["id"])
                    if box is not None:
                        box.put(message)
                else:
                    with self._event_added:
                        self.events.append(message)
                        self._event_added.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = "page") -> Any:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            box: queue.Queue[dict[str, Any]] = queue.Queue()
            self._replies[ident] = box
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session == "page":
            message["sessionId"] = self.session
        elif session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            reply = box.get(timeout=TIMEOUT)
        except queue.Empty:
            raise BrowserError(f"no reply to {method} within {TIMEOUT} s") from None
        finally:
            with self._lock:
                self._replies.pop(ident, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_for(self, method: str, since: int) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        with self._event_added:
            while True:
                for event in self.events[since:]:
                    if event.get("method") == method and event.get("sessionId") == self.session:
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrowserError(f"{method} did not come within {TIMEOUT} s")
                self._event_added.wait(remaining)

    def _open_page(self) -> str:
        targets = self.send("Target.getTargets", session=None)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}, session=None)
        self.session = session["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        return self.session

    # -- page -------------------------------------------------------------------------------------------------------

    def goto(self, url: str) -> None:
        mark = len(self.events)
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired", mark)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def submit_and_wait(self, expression: str) -> None:
        mark = len(self.events)
        self.evaluate(expression)
        self.wait_for("Page.loadEventFired", mark)

    def screenshot(self, path: Path, *, width: int = 1280) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": width < 700},
        )
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        height = min(max(height, 400), 6000)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
        )
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def move_mouse(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def errors(self) -> list[str]:
        """JavaScript exceptions, console errors, browser log errors and failed requests, so far."""
        found = []
        for event in list(self.events):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')} {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                found.append(f"request failed: {params.get('errorText')}")
            elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                found.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        return found

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close", session=None)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/bootstrap does)")
    chromium = Chromium()
    yield chromium
    chromium.close()


@pytest.fixture
def screenshots() -> Path:
    """Where the screenshots go: RELAY_SCREENSHOT_DIR to keep them, else the run's scratch folder."""
    folder = os.environ.get("RELAY_SCREENSHOT_DIR")
    path = Path(folder) if folder else scratch_dir("relay-screenshots-")
    path.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {path}")
    return path


CHART_CHECK = """
(() => {
  const charts = Array.from(document.querySelectorAll(%s));
  return charts.map(svg => {
    const box = svg.getBoundingClientRect();
    const drawn = svg.querySelectorAll('polyline, rect, polygon').length;
    return {width: box.width, height: box.height, drawn: drawn};
  });
})()
"""

# path, file name, {selector: minimum count of charts that must be drawn and visible}
PAGES = [
    ("/", "overview", {"svg.line-chart": 2}),
    ("/clients/", "clients", {}),
    ("/clients/{client}/", "client-detail", {"svg.line-chart": 1}),
    ("/usage/", "usage", {"svg.bar-chart": 1, "svg.sparkline": 2, "svg.column-chart": 2}),
    ("/usage/?sort=-day&q=shop", "usage-day-search", {"svg.bar-chart": 1, "svg.sparkline": 1}),
    ("/schema/", "schema", {}),
    ("/admin/", "admin", {}),
    ("/admin/relay/client/", "admin-clients", {}),
]


def test_dashboard_in_chromium(live_server, browser: Chromium, screenshots: Path, filled: Filled) -> None:
    base = live_server.url

    browser.goto(base + "/")
    assert browser.evaluate("location.pathname") == "/accounts/login/"  # anonymous: the login page
    browser.screenshot(screenshots / "login.png")
    _log_in(browser)
    assert browser.evaluate("location.pathname") == "/"

    for path, name, expected in PAGES:
        url = base + path.format(client=filled.client_ids[UNICODE])
        browser.goto(url)
        assert browser.evaluate("location.pathname") == path.split("?")[0].format(client=filled.client_ids[UNICODE]), (
            f"{name}: redirected"
        )
        assert browser.evaluate("document.querySelectorAll('script:not([src])').length") == 0 or name.startswith(
            "admin"
        ), f"{name}: inline script on a dashboard page"
        for selector, minimum in expected.items():
            charts = browser.evaluate(CHART_CHECK % json.dumps(selector))
            assert len(charts) >= minimum, f"{name}: {len(charts)} {selector}, expected {minimum}"
            for chart in charts:
                assert chart["width"] > 20 and chart["height"] > 10, f"{name}: {selector} not visible: {chart}"
                assert chart["drawn"] > 0, f"{name}: {selector} draws nothing"
        # A hostile name must have arrived as text, never as an element.
        assert browser.evaluate("window.__xss === undefined && !document.querySelector('body script:not([src])')")
        browser.screenshot(screenshots / f"{name}.png")

    # The page script: pointing at a chart shows the value under the pointer.
    browser.goto(base + "/")
    browser.send(
        "Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    )
    box = browser.evaluate(
        "(() => { const r = document.querySelector('svg.line-chart').getBoundingClientRect();"
        " return {x: r.left + r.width * 0.9, y: r.top + r.height / 2}; })()"
    )
    browser.move_mouse(box["x"], box["y"])
    readout = browser.evaluate("document.querySelector('.readout').textContent")
    assert "rows/min" in readout, readout

    # The auto-refresh switch keeps its state across pages.
    browser.evaluate("document.getElementById('autorefresh').click()")
    browser.goto(base + "/clients/")
    assert browser.evaluate("document.getElementById('autorefresh').checked") is True
    browser.evaluate("document.getElementById('autorefresh').click()")

    # Phone width: the usage table scrolls inside its box, the page itself does not.
    browser.goto(base + "/usage/")
    browser.screenshot(screenshots / "usage-phone.png", width=390)
    assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    browser.goto(base + "/clients/")
    browser.screenshot(screenshots / "clients-phone.png", width=390)

    errors = browser.errors()
    assert not errors, "\n".join(errors)
    assert len(list(screenshots.glob("*.png"))) >= len(PAGES) + 3


def test_dashboard_with_a_real_worker_run(
    live_server, browser: Chromium, screenshots: Path, fresh_schema, users
) -> None:
    """The pages over what a real worker stored from a real source, not over fabricated rows."""
    from relay import store
    from tests.helpers.processes import RelayProcess, relay_env, stop_all
    from tests.helpers.worker import caught_up

    server, schema = fresh_schema
    server.execute(
        f"CREATE TABLE `{schema}`.orders (id INT PRIMARY KEY, total DECIMAL(8,2), placed DATETIME(3), note TEXT)"
    )
    session = store.open_session("browser-client")
    store.add_filter(session.client_id, 7, schema, "*", 1000, 1)
    start = server.binlog_position()
    worker = RelayProcess(relay_env(server), "runbinlog", "--from", f"{start[0]}:{start[1]}").start()
    try:
        server.execute(
            *(f"INSERT INTO `{schema}`.orders VALUES ({i}, {i}.25, NOW(3), 'note {i}')" for i in range(1, 41)),
            f"UPDATE `{schema}`.orders SET total = total + 1 WHERE id <= 10",
            f"DELETE FROM `{schema}`.orders WHERE id > 35",
        )
        caught_up(server, worker)
    finally:
        worker.stop()
        stop_all()

    base = live_server.url
    browser.goto(base + "/")
    _log_in(browser)
    checks = [
        ("/", "real-overview", {"svg.line-chart": 2}, ["CONNECTED", "STOPPED"], start[0]),
        ("/clients/", "real-clients", {}, ["browser-client"], f"{schema}.*"),
        (f"/clients/{session.client_id}/", "real-client-detail", {"svg.line-chart": 1}, ["note 1"], "orders"),
        ("/usage/", "real-usage", {"svg.bar-chart": 1, "svg.sparkline": 1}, [f"{schema}.orders"], "40"),
        ("/schema/", "real-schema", {}, ["placed"], "decimal(8,2)"),
    ]
    for path, name, expected, any_of, must in checks:
        browser.goto(base + path)
        text = browser.evaluate("document.body.innerText")
        assert must in text, f"{name}: {must!r} missing"
        assert any(word in text for word in any_of), f"{name}: none of {any_of} shown"
        for selector, minimum in expected.items():
            charts = browser.evaluate(CHART_CHECK % json.dumps(selector))
            assert len(charts) >= minimum and all(chart["drawn"] > 0 for chart in charts), f"{name}: {selector}"
        browser.screenshot(screenshots / f"{name}.png")
    errors = browser.errors()
    assert not errors, "\n".join(errors)


# Every table that does not fit its box, and anything wider than the window. At 1440 px every table must fit (its
# columns all visible without scrolling); at 390 px a table may scroll, but only inside a .scroll box of its own.
LAYOUT_CHECK = """
(() => {
  const wide = %s;
  const width = document.documentElement.clientWidth;
  const problems = [];
  if (document.documentElement.scrollWidth > width + 1) {
    problems.push('page is ' + document.documentElement.scrollWidth + ' px wide in ' + width);
  }
  for (const table of document.querySelectorAll('main table')) {
    const box = table.closest('.scroll');
    const name = table.id || table.className || table.rows[0].innerText.slice(0, 40);
    if (!box) {
      if (table.getBoundingClientRect().right > width + 1) problems.push(name + ' sticks out and cannot scroll');
    } else if (wide && table.scrollWidth > box.clientWidth + 1) {
      problems.push(name + ' is ' + table.scrollWidth + ' px in a ' + box.clientWidth + ' px box');
    } else if (box.getBoundingClientRect().right > width + 1) {
      problems.push(name + "'s box sticks out");
    }
  }
  return problems;
})()
"""

LAYOUT_PAGES = [
    ("/", "overview"),
    ("/clients/", "clients"),
    ("/clients/{client}/", "client"),
    ("/usage/", "usage"),
    ("/schema/", "schema"),
    ("/no-such-page/", "not-found"),
]


def _log_in(browser: Chromium) -> None:
    """Submits the login page that the browser shows, as the fixture's admin."""
    browser.submit_and_wait(
        f"""document.querySelector('#id_username').value = 'admin';
        document.querySelector('#id_password').value = {json.dumps(PASSWORD)};
        document.querySelector('form[action="/accounts/login/"]').submit();"""
    )


def _set_width(browser: Chromium, width: int) -> None:
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 700},
    )


def _healthy_now(filled: Filled) -> None:
    """The fixture's worker and relay process reporting right now (the page reads them as the test runs)."""
    from django.utils import timezone

    from relay.models import RelayProcess, WorkerStatus

    now = timezone.now()
    WorkerStatus.objects.update(heartbeat=now, caught_up=now, heartbeat_seconds=5.0)
    RelayProcess.objects.filter(pid=4343).update(heartbeat=now, expires=now + timezone.timedelta(hours=1))


def test_every_page_fits_and_the_banner_shows(
    live_server, browser: Chromium, screenshots: Path, filled: Filled
) -> None:
    from django.utils import timezone

    from relay.models import WorkerStatus

    base = live_server.url
    browser.goto(base + "/")
    _log_in(browser)
    for state in ("healthy", "stalled"):
        _healthy_now(filled)
        if state == "stalled":  # the worker stopped reporting two minutes ago, its stored state still "connected"
            WorkerStatus.objects.update(
                started=timezone.now() - timezone.timedelta(hours=1),
                heartbeat=timezone.now() - timezone.timedelta(minutes=2),
            )
        for width in (1440, 390):
            for path, name in LAYOUT_PAGES:
                _set_width(browser, width)
                browser.goto(base + path.format(client=filled.client_ids[UNICODE]))
                problems = browser.evaluate(LAYOUT_CHECK % ("true" if width >= 1000 else "false"))
                browser.screenshot(screenshots / f"{state}-{name}-{width}.png", width=width)
                assert not problems, f"{state} {name} at {width} px: {problems}"
                if name == "not-found":
                    assert "Not found" in browser.evaluate("document.body.innerText")
                    assert browser.evaluate("document.querySelectorAll('header nav a').length") >= 4
                if name != "overview":
                    continue
                level = browser.evaluate("document.getElementById('health').className")
                text = browser.evaluate("document.getElementById('health').innerText")
                if state == "stalled":
                    assert "banner-red" in level and "Unhealthy" in text and "last reported" in text, text
                else:
                    # The fixture's queues hold day-old entries and a disconnected client: degraded, not down.
                    assert "banner-amber" in level and "Degraded" in text, text
                visible = browser.evaluate(
                    "(() => { const r = document.getElementById('health').getBoundingClientRect();"
                    " return r.width > 200 && r.top < 200; })()"
                )
                assert visible, f"the banner is not at the top of the page at {width} px"
    errors = [error for error in browser.errors() if "/no-such-page/" not in error]
    assert not errors, "\n".join(errors)
