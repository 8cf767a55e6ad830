from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
    verbose_name = "Binlog relay"

    def ready(self) -> None:
        # Connects the signals that move the filter version on every filter write, in every process.
        from relay.store import filters  # noqa: F401
