#!/usr/bin/env python
"""Django's command-line utility for the relay: runbinlog, runrelay, migrate, createsuperuser, ...

``--config FILE`` (or ``--config=FILE``) is taken off the command line here and becomes RELAY_CONFIG before Django
loads its settings, so that every key of that file applies (the store and the secret key are read by the settings,
before any command runs) and every command accepts it (``manage.py migrate --config FILE``).
"""

import os
import sys
from collections.abc import MutableMapping


def take_config_option(argv: list[str], environ: MutableMapping[str, str]) -> list[str]:
    """``argv`` without ``--config FILE``; the file, when given, is put in ``environ["RELAY_CONFIG"]``."""
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--":  # everything after it belongs to the command
            rest.append(arg)
            rest.extend(args)
            break
        if arg == "--config":
            value = next(args, None)
            if not value:
                raise SystemExit("configuration error: --config needs the path of the configuration file")
            environ["RELAY_CONFIG"] = value
        elif arg.startswith("--config="):
            environ["RELAY_CONFIG"] = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return rest


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "relayproject.settings")
    argv = take_config_option(sys.argv, os.environ)
    from django.core.management import execute_from_command_line
    from django.db import InterfaceError, OperationalError

    try:
        execute_from_command_line(argv)
    except (OperationalError, InterfaceError) as exc:
        # A store that cannot be reached (or a table that is missing) as one line, not Django's 40-line traceback:
        # manage.py migrate, createsuperuser and the rest report it the way runbinlog and runrelay do.
        from relay.startup import first_line

        raise SystemExit(f"store error: {first_line(exc)}") from None


if __name__ == "__main__":
    main()
