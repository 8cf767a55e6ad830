"""Start-up checks of the relay's processes: each problem is one line and exit status 1, never a traceback.

``manage.py runbinlog`` and ``runrelay`` call :func:`check_store` before they start: a store that cannot be reached,
was never migrated or was migrated by a newer release is a mistake of the installation, which no retry fixes (once
running, the worker retries a store that goes away instead). Configuration errors and a DataDir that cannot be created
are reported by the settings module, earlier still.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, connection

from relay.config import RelayConfig

if TYPE_CHECKING:
    from django.db.migrations.loader import MigrationLoader

EXIT_MISCONFIGURED = 1

log = logging.getLogger("relay.startup")


def first_line(exc: BaseException) -> str:
    """An exception as one line: drivers put hints and context on the lines after the first."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def store_description() -> str:
    """Where the store is, without its password: for messages."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"SQLite {settings['NAME']}"
    user = f"{settings.get('USER')}@" if settings.get("USER") else ""
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"PostgreSQL {user}{settings.get('HOST') or 'localhost'}{port}/{settings['NAME']}"


def fail(message: str) -> SystemExit:
    """The exception that stops the process with ``message`` on stderr and exit status 1 (raise it)."""
    return SystemExit(message)


def command_config(explicit: str | None) -> RelayConfig:
    """The settings' configuration; ``explicit`` (a command's --config) must be the file it was read from.

    manage.py turns --config into RELAY_CONFIG before the settings load, so the store and the secret key come from
    that file too. A different --config here means the command was started some other way (call_command,
    django-admin), when it is too late to change the store: refuse rather than mix two configurations.
    """
    config: RelayConfig = settings.RELAY_CONFIG
    if explicit and (config.config_path is None or config.config_path.resolve() != Path(explicit).resolve()):
        raise fail(
            f"configuration error: --config {explicit}: the settings were loaded from "
            f"{config.config_path or 'no file'}; pass --config to manage.py, or set RELAY_CONFIG"
        )
    return config


def newer_migrations(loader: MigrationLoader) -> list[str]:
    """Migrations applied to the store, of the apps this code migrates, that this code does not have ("app.name")."""
    known = set(loader.disk_migrations)
    return sorted(
        f"{app}.{name}"
        for app, name in loader.applied_migrations or {}
        if app in loader.migrated_apps and (app, name) not in known
    )


def check_store() -> None:
    """Raises SystemExit with one line when the store cannot be reached, is not migrated, or was migrated by a newer
    release."""
    where = store_description()
    if connection.vendor == "sqlite" and not Path(connection.settings_dict["NAME"]).exists():
        # Connecting would create an empty file (in a directory the operator did not mean, when the configuration
        # is not the one they think): say what is missing instead.
        raise fail(f"store error: {where} does not exist; run manage.py migrate (with the same configuration)")
    try:
        connection.ensure_connection()
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        unknown = newer_migrations(executor.loader)
    except DatabaseError as exc:
        raise fail(f"store error: cannot use the store ({where}): {first_line(exc)}") from None
    finally:
        connection.close()  # the command opens its own connections (in its own threads) from here on
    if unknown:
        # A newer release migrated this store (an upgrade rolled back without its store): its tables may hold
        # columns and meanings this code does not know, and its writes could break them. Say so rather than guess.
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise fail(
            f"store error: {where} was migrated by a newer release of the relay: it has {unknown[0]}{more} applied, "
            "which this release does not know; run that release, or restore the store from before the upgrade"
        )
    if plan:
        first = plan[0][0]
        raise fail(
            f"store error: {where} is not migrated ({len(plan)} migrations to apply, first "
            f"{first.app_label}.{first.name}); run manage.py migrate (with the same configuration)"
        )
