"""Checks before the work: a run over months of archives must not find out after hours of decoding that its master
was never there, that it cannot write its output, or that a name it was given lists nothing.

Each check raises :class:`PreflightError` with one line that names the thing and the cause.
"""

from __future__ import annotations

import socket
from typing import Any

from relay.pipeline.inputs import Inputs
from relay.pipeline.outputs import OutputError, OutputLocation
from relay.pipeline.session import Master

# Seconds to wait for a master's port: a master that is up answers within milliseconds, even across a network.
CONNECT_TIMEOUT = 3.0


class PreflightError(Exception):
    """A run that cannot succeed; the message says why, in one line."""


def check_master(master: Master, timeout: float = CONNECT_TIMEOUT) -> None:
    """A standalone master (or the Kubernetes API) accepts connections: without this, Spark retries an unreachable
    master for a minute and then fails with pages of Java. A local master needs nothing; YARN is found through its
    configuration, which Spark reads itself."""
    failures = []
    for host, port in master.endpoints:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reason = exc.strerror or str(exc) or exc.__class__.__name__
            if isinstance(exc, TimeoutError) or "timed out" in reason:
                reason = f"no answer within {timeout:g}s"
            failures.append(f"{host}:{port}: {reason.lower()}")
    if failures:
        raise PreflightError(f"master {master.url} is not reachable ({'; '.join(failures)})")


def check_output(spark: Any, out: str) -> OutputLocation:
    """The output location can be written: a probe file is written and removed through Hadoop's file system."""
    try:
        location = OutputLocation(spark, out)
        location.probe()
    except OutputError as exc:
        raise PreflightError(str(exc)) from None
    return location


def check_inputs(inputs: Inputs) -> None:
    """Every name given lists readable files, and there is at least one."""
    if inputs.missing:
        listed = "; ".join(f"{what}: {why}" for what, why in inputs.missing)
        raise PreflightError(f"missing input: {listed}")
    if not inputs.binlogs and not inputs.logs:
        raise PreflightError("no input files")
