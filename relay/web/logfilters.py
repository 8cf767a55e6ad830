"""Logging filters of the web process (referenced by name from relayproject/settings.py's LOGGING, so this module
imports nothing that needs the app registry)."""

from __future__ import annotations

import logging


class HealthProbeFilter(logging.Filter):
    """Drops Django's "Service Unavailable: /healthz" records: an unhealthy relay answers 503 to every probe of its
    load balancer, and one ERROR line per probe would bury the worker's own lines that say what is wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not (getattr(record, "status_code", None) == 503 and getattr(request, "path", "") == "/healthz")
