"""Settings for the test suite: the production settings, with the store chosen by RELAY_TEST_STORE.

RELAY_TEST_STORE=postgres (the default) uses PostgreSQL on 127.0.0.1:5432, or a private cluster when none runs;
RELAY_TEST_STORE=sqlite uses a SQLite file. The test database's name carries the process id so that several test
runs can share one PostgreSQL server.
"""

import os

from relay.config import database_settings
from relayproject.settings import *
from tests.helpers.scratch import scratch_dir

STORE = os.environ.get("RELAY_TEST_STORE", "postgres").lower()

if STORE == "postgres":
    from tests.helpers.postgres import postgres_url

    DATABASES = {"default": database_settings(postgres_url())}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["TEST"] = {"NAME": f"test_relay_{os.getpid()}"}
elif STORE == "sqlite":
    _folder = scratch_dir("relay-sqlite-")
    DATABASES = {"default": database_settings(f"sqlite:///{_folder}/relay.sqlite3")}
    DATABASES["default"]["TEST"] = {"NAME": f"{_folder}/test-relay.sqlite3"}
else:
    raise SystemExit(f"RELAY_TEST_STORE: {STORE!r} is neither postgres nor sqlite")

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
