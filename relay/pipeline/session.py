"""The Spark session of a run: which master, which address the driver binds to, and a quiet JVM.

A local master binds the driver to 127.0.0.1 (``spark.driver.bindAddress``, ``spark.driver.host`` and the JVM's
``SPARK_LOCAL_IP``): left to itself Spark picks the machine's outward address, so local runs and the tests would talk
to themselves over it, and every run would log that the host name resolves to loopback. A cluster master binds where
the operator says (``--conf spark.driver.host=...``), or where Spark's defaults put it.

The JVM's stderr (Spark's log, its warnings, Java traces) goes to a pipe: with ``verbose`` it is passed on as it
comes, otherwise only its last lines are kept, so that a failure is one line of ours and not a page of Java.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

LOOPBACK = "127.0.0.1"
LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")
HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
K8S_MASTER = re.compile(r"^k8s://(?:https?://)?(?P<rest>[^/]+)")
MASTER_FORMS = "local, local[N], local[*], spark://HOST:PORT[,HOST:PORT...], yarn or k8s://HOST:PORT"

# The last lines of the JVM's stderr, kept while a quiet JVM runs: what a --verbose run would have shown.
jvm_log_tail: collections.deque[str] = collections.deque(maxlen=200)


class MasterError(ValueError):
    """A --master that is not a Spark master URL; the message says why, in one line."""


@dataclass(frozen=True)
class Master:
    url: str
    kind: str  # "local", "spark" (standalone), "yarn", "k8s"
    endpoints: tuple[tuple[str, int], ...] = ()  # (host, port) to reach before starting: standalone masters, k8s API

    @property
    def local(self) -> bool:
        return self.kind == "local"


def parse_master(url: str) -> Master:
    url = url.strip()
    if LOCAL_MASTER.match(url):
        return Master(url, "local")
    if url == "yarn":
        return Master(url, "yarn")
    if url.startswith("spark://"):
        hosts = url[len("spark://") :].rstrip("/").split(",")
        return Master(url, "spark", tuple(_endpoint(url, part) for part in hosts))
    k8s = K8S_MASTER.match(url)
    if k8s:
        rest = k8s["rest"] if ":" in k8s["rest"] else f"{k8s['rest']}:443"
        return Master(url, "k8s", (_endpoint(url, rest),))
    raise MasterError(f"--master {url!r} is not a Spark master URL ({MASTER_FORMS})")


def _endpoint(url: str, part: str) -> tuple[str, int]:
    match = HOST_PORT.match(part.strip())
    if not match or not 0 < int(match["port"]) < 65536:
        raise MasterError(f"--master {url!r}: {part.strip()!r} is not HOST:PORT")
    return match["host"].strip("[]"), int(match["port"])


def session_settings(master: Master, conf: dict[str, str] | None = None) -> dict[str, str]:
    """The run's Spark settings: the pipeline's defaults, loopback for a local master, then the operator's."""
    settings = {
        # Only partial sums are shuffled (tables x hours), never rows: a few partitions do, 200 only cost tasks.
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.local:
        settings["spark.driver.bindAddress"] = LOOPBACK
        settings["spark.driver.host"] = LOOPBACK
    settings.update(conf or {})
    return settings


def build_session(
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "relay-usage",
    *,
    verbose: bool = False,
) -> Any:
    """A SparkSession in UTC (hours and days are UTC buckets), replacing only the partitions a run writes, with the
    tasks' packages shipped to its executors. Raises MasterError for a malformed ``master``."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.sql import SparkSession

    from relay.pipeline.shipping import ship_packages

    parsed = parse_master(master)
    # Local executors must run this interpreter (the one with binlog/'s dependencies), not whatever "python" is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_settings(parsed, conf)
    spark_conf = SparkConf().setAppName(app_name).setMaster(parsed.url)
    for key, value in settings.items():
        spark_conf.set(key, value)
    if SparkContext._gateway is None:
        with _environment(SPARK_LOCAL_IP=LOOPBACK if parsed.local else None):
            _start_jvm(spark_conf, verbose)
    builder = SparkSession.builder.appName(app_name).master(parsed.url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines about connections are noise in a report
    ship_packages(session.sparkContext)
    return session


def _start_jvm(spark_conf: Any, verbose: bool) -> None:
    """Starts Spark's JVM with its stderr on a pipe that a daemon thread drains (see the module's docstring)."""
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE})
    process = getattr(gateway, "proc", None)
    stream = process.stderr if process is not None else None
    if stream is not None:
        threading.Thread(target=_drain, args=(stream, verbose), name="spark-jvm-stderr", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)


def _drain(stream: IO[bytes], verbose: bool) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        jvm_log_tail.append(line.rstrip("\n"))
        if verbose:
            sys.stderr.write(line)
            sys.stderr.flush()


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Environment variables set (when not None and not already set) for the duration: the JVM inherits them."""
    added = [name for name, value in values.items() if value is not None and name not in os.environ]
    for name in added:
        os.environ[name] = values[name]  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
