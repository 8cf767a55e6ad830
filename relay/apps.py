import logging

from django.apps import AppConfig
from django.conf import settings


class RelayConfig(AppConfig):
    name = "relay"
    verbose_name = "Binlog relay"

    def ready(self) -> None:
        # Connects the signals that move the filter version on every filter write, in every process.
        from relay.store import filters  # noqa: F401

        # What the configuration gives that the relay ignores (a typo, a key given twice), said once by every
        # process as it starts (logging is set up before the apps are).
        for note in settings.RELAY_CONFIG.notes:
            logging.getLogger("relay.config").warning("configuration: %s", note)
