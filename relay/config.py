"""The relay's configuration: the original relay's INI file, new keys, and environment overrides.

The file is the original's ``replicaterelay.conf`` read as it is, by the original's rules (``relay.inifile``):
``[Server]``, ``[MySQL]``, ``[Logger]``; keys are case-insensitive; both ``Database`` and ``DatabaseName`` name the
replication handshake's database. Keys the original hard-coded have new names here (``SourcePort``,
``ReplicaServerID``, ``StartFrom``, ...). Every key can be overridden by an environment variable
``RELAY_<SECTION>_<KEY>`` in upper case (``RELAY_SERVER_AUTHSECRET``), and the store by ``DATABASE_URL``. A
missing or bad value raises :class:`ConfigError` with one line naming the key.

This module imports nothing from Django: the settings module reads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binlog.cli import TOOL_SERVER_IDS
from relay.inifile import IniError, IniFile, read_ini, trim

DEFAULT_CONFIG_NAME = "replicaterelay.conf"
DEFAULT_REPLICA_SERVER_ID = 0x52454C  # "REL": never the PID, which could collide with a real replica's id


class ConfigError(ValueError):
    """A missing or invalid configuration value; the message names the key."""


@dataclass(frozen=True)
class SourceConfig:
    """The MySQL/MariaDB source the worker replicates from ([Server] in the original)."""

    host: str
    port: int
    user: str
    password: str
    database: str
    server_id: int
    start_from: tuple[str, int] | None
    start_gtid: str
    heartbeat_seconds: float
    #: What the store calls this source (its checkpoint, status, schema history): host:port unless set. Set it to keep
    #: the name a source had when it is reached by another address (a DNS name, a VIP, a proxy after a fail-over).
    name: str = ""


@dataclass(frozen=True)
class SchemaConfig:
    """The connection used for information_schema ([MySQL] in the original)."""

    host: str
    port: int
    user: str
    password: str
    database: str


@dataclass(frozen=True)
class LoggerConfig:
    """The per-day change log files ([Logger] in the original)."""

    path: Path
    schemas: tuple[str, ...]
    excludes: frozenset[str]
    formats: frozenset[str]

    @property
    def enabled(self) -> bool:
        return bool(self.schemas)


@dataclass(frozen=True)
class MailConfig:
    """The SMTP server the dashboard's password-reset mails go through ([Mail], new); no host: no password reset."""

    host: str
    port: int
    user: str
    password: str
    sender: str
    use_tls: bool

    @property
    def enabled(self) -> bool:
        return bool(self.host)


SNAPSHOT_METHODS = ("auto", "consistent-snapshot", "watermark")


@dataclass(frozen=True)
class SnapshotConfig:
    """How the worker reads snapshots ([Snapshot], new): see binlog/snapshot.py for the two methods."""

    method: str = "auto"  # a consistent snapshot on MariaDB, watermarks on MySQL
    chunk_rows: int = 2_000
    rows_per_second: float = 0.0  # 0: no limit but what the source and the store take
    signal_table: str = "relay.snapshot_signal"  # the watermark method's table on the source (created if missing)


# Host names the dashboard answers when neither DJANGO_ALLOWED_HOSTS nor [Server] AllowedHosts says: this machine
# only. Never "*": Django builds absolute URLs (password-reset links among them) from the Host header it accepts.
DEFAULT_ALLOWED_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class RelayConfig:
    source: SourceConfig
    schema: SchemaConfig
    logger: LoggerConfig
    auth_secret: str
    admin_secret: str
    listen_address: str
    server_port: int
    http_address: str
    http_port: int
    data_dir: Path
    database_url: str
    allowed_hosts: tuple[str, ...] = DEFAULT_ALLOWED_HOSTS
    mail: MailConfig = field(default_factory=lambda: MailConfig("", 25, "", "", "", False))
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    config_path: Path | None = None
    # What the file or the environment gives that the relay ignores (a key read twice, a typo): said at start-up.
    notes: tuple[str, ...] = ()


# -- reading the file and the environment -------------------------------------------------------------------------


class _Values:
    """Lookup of raw values: the environment first, then the INI file; keys are case-insensitive. Every key asked
    for is noted, so that what the file and the environment give beyond them can be named (:meth:`unread`)."""

    def __init__(self, ini: IniFile, environ: Mapping[str, str]) -> None:
        self._ini = ini
        self._environ = environ
        self._asked: set[tuple[str, str]] = set()

    def raw(self, section: str, *keys: str) -> tuple[str, str] | None:
        """The first of ``keys`` that is set, as (name used in messages, value)."""
        self._asked.update((section.lower(), key.lower()) for key in keys)
        for key in keys:
            env_name = f"RELAY_{section}_{key}".upper()
            if env_name in self._environ:
                return env_name, self._environ[env_name]
        for key in keys:
            value = self._ini.get(section, key)
            if value is not None:
                return f"[{section}] {key}", value
        return None

    def unread(self) -> list[str]:
        """Keys of the file, and RELAY_<SECTION>_<KEY> variables, that name nothing the relay reads (a typo, most
        likely: the value it was meant to set keeps its default)."""
        sections = {section for section, _ in self._asked}
        notes = []
        for section, key in self._ini.given():
            if (section, key) in self._asked:
                continue
            number, written = self._ini.lines[(section, key)]
            name = self._ini.section_names[section]
            what = "no key the relay reads" if section in sections else "a section the relay does not read"
            notes.append(f"{self._ini.path} line {number}: [{name}] {written}: {what}; ignored")
        asked_env = {f"RELAY_{section}_{key}".upper() for section, key in self._asked}
        prefixes = tuple(f"RELAY_{section.upper()}_" for section in sections)
        for name in sorted(self._environ):
            if name.startswith(prefixes) and name not in asked_env:
                notes.append(f"environment: {name} names no key the relay reads; ignored")
        return notes

    def text(self, section: str, *keys: str, default: str = "") -> str:
        found = self.raw(section, *keys)
        return default if found is None else trim(found[1])

    def parsed(self, section: str, key: str, default: Any, parse: Callable[[str, str], Any]) -> Any:
        found = self.raw(section, key)
        if found is None or trim(found[1]) == "":
            return default
        name, value = found
        return parse(name, trim(value))


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        try:
            number = int(value, 0) if value.lower().startswith("0x") else int(value)
        except ValueError:
            raise ConfigError(f"{name}: {value!r} is not a whole number") from None
        if not low <= number <= high:
            raise ConfigError(f"{name}: {number} is out of range ({low}..{high})")
        return number

    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        chosen = value.strip().lower()
        if chosen not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return chosen

    return parse


def _seconds(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a number of seconds") from None
    if not 0.1 <= number <= 3600:
        raise ConfigError(f"{name}: {number} is out of range (0.1..3600 seconds)")
    return number


_POSITION = re.compile(r"^(?P<file>[^:\s]+):(?P<pos>\d+)$")


def parse_position(name: str, value: str) -> tuple[str, int]:
    """``FILE:POS`` as in ``binlog.000042:1234``."""
    match = _POSITION.match(value)
    if not match or int(match["pos"]) < 4:
        raise ConfigError(f"{name}: {value!r} is not a binlog position of the form FILE:POS (POS >= 4)")
    return match["file"], int(match["pos"])


_LOGGER_FORMATS = frozenset({"text", "json"})


def _formats(name: str, value: str) -> frozenset[str]:
    formats = frozenset(part.strip().lower() for part in value.split(",") if part.strip())
    unknown = formats - _LOGGER_FORMATS
    if unknown or not formats:
        raise ConfigError(f"{name}: {value!r} must be a comma-separated list of: text, json")
    return formats


def _boolean(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "yes", "true", "on"):
        return True
    if lowered in ("0", "no", "false", "off"):
        return False
    raise ConfigError(f"{name}: {value!r} is not yes or no")


def _server_id(name: str, value: str) -> int:
    number: int = _integer(1, 2**32 - 1)(name, value)
    if number in TOOL_SERVER_IDS:
        # binlog tail/check register with ids from this range, so that running them never takes the worker's place.
        raise ConfigError(
            f"{name}: {number} is in {TOOL_SERVER_IDS.start}..{TOOL_SERVER_IDS.stop - 1}, "
            "the ids `python -m binlog tail|check` use; choose another"
        )
    return number


def _database_url(name: str, value: str) -> str:
    if not (value.startswith(("postgres://", "postgresql://", "sqlite:///"))):
        raise ConfigError(f"{name}: {value!r} must start with postgres://, postgresql:// or sqlite:///")
    try:
        database_settings(value)  # read whole now: a bad port or host is named with its key, not met later
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return value


def _split_names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def config_path_from(environ: Mapping[str, str], explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit:
        return Path(explicit)
    if environ.get("RELAY_CONFIG"):
        return Path(environ["RELAY_CONFIG"])
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    return local if local.exists() else None


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    require_source: bool = False,
) -> RelayConfig:
    """Reads the configuration; ``require_source`` makes the source host and user mandatory (the worker needs them)."""
    environ = os.environ if environ is None else environ
    config_path = config_path_from(environ, path)
    try:
        ini = read_ini(config_path) if config_path else IniFile()
    except IniError as exc:
        raise ConfigError(str(exc)) from None
    values = _Values(ini, environ)

    data_dir = Path(values.text("Server", "DataDir") or environ.get("RELAY_DATA_DIR", "") or "var").expanduser()
    if not data_dir.is_absolute():
        data_dir = (config_path.parent if config_path else Path.cwd()) / data_dir

    source_host = values.text("Server", "IPAddr")
    source_user = values.text("Server", "Login")
    if require_source:
        if not source_host:
            raise ConfigError("[Server] IPAddr: the source host is not set")
        if not source_user:
            raise ConfigError("[Server] Login: the replication user is not set")

    database_name = values.text("Server", "DatabaseName", "Database")
    start_from = values.parsed("Server", "StartFrom", None, parse_position)
    start_gtid = values.text("Server", "StartGTID")
    if start_from and start_gtid:
        raise ConfigError("[Server] StartFrom and StartGTID: set one of them, not both")

    source = SourceConfig(
        host=source_host,
        port=values.parsed("Server", "SourcePort", 3306, _integer(1, 65535)),
        user=source_user,
        password=values.text("Server", "Password"),
        database=database_name,
        server_id=values.parsed("Server", "ReplicaServerID", DEFAULT_REPLICA_SERVER_ID, _server_id),
        start_from=start_from,
        start_gtid=start_gtid,
        heartbeat_seconds=values.parsed("Server", "HeartbeatSeconds", 5.0, _seconds),
        name=values.text("Server", "SourceName"),
    )
    schema_password = values.text("MySQL", "password")  # the [MySQL] login's: without one, the source user's
    schema = SchemaConfig(
        host=values.text("MySQL", "host") or source.host,
        port=values.parsed("MySQL", "port", source.port, _integer(1, 65535)),
        user=values.text("MySQL", "login") or source.user,
        password=schema_password if values.raw("MySQL", "login") else source.password,
        database=values.text("MySQL", "database"),
    )
    logger = LoggerConfig(
        path=Path(values.text("Logger", "Path") or str(data_dir / "logs")).expanduser(),
        schemas=tuple(_split_names(values.text("Logger", "Schema"))),
        excludes=frozenset(_split_names(values.text("Logger", "Excludes"))),
        formats=values.parsed("Logger", "Format", frozenset({"text"}), _formats),
    )

    auth_secret = values.text("Server", "AuthSecret")
    admin_secret = values.text("Server", "AdminSecret")
    database_url = environ.get("DATABASE_URL", "").strip()
    if database_url:
        database_url = _database_url("DATABASE_URL", database_url)
        values.raw("Store", "URL")  # a key the relay reads, which DATABASE_URL overrides: not one to warn of
    else:
        database_url = values.parsed("Store", "URL", f"sqlite:///{data_dir / 'relay.sqlite3'}", _database_url)

    mail = MailConfig(
        host=values.text("Mail", "Host"),
        port=values.parsed("Mail", "Port", 25, _integer(1, 65535)),
        user=values.text("Mail", "User"),
        password=values.text("Mail", "Password"),
        sender=values.text("Mail", "From"),
        use_tls=values.parsed("Mail", "UseTLS", False, _boolean),
    )
    if mail.enabled and not mail.sender:
        raise ConfigError("[Mail] From: the sender address is not set (password-reset mails need one)")
    allowed_hosts = tuple(_split_names(values.text("Server", "AllowedHosts"))) or DEFAULT_ALLOWED_HOSTS
    snapshot = SnapshotConfig(
        method=values.parsed("Snapshot", "Method", "auto", _choice(SNAPSHOT_METHODS)),
        chunk_rows=values.parsed("Snapshot", "ChunkRows", 2_000, _integer(1, 1_000_000)),
        rows_per_second=float(values.parsed("Snapshot", "RowsPerSecond", 0, _integer(0, 100_000_000))),
        signal_table=values.text("Snapshot", "SignalTable") or "relay.snapshot_signal",
    )
    if "." not in snapshot.signal_table.strip(".") or snapshot.signal_table.count(".") != 1:
        raise ConfigError(f"[Snapshot] SignalTable: {snapshot.signal_table!r} is not SCHEMA.TABLE")

    return RelayConfig(
        source=source,
        schema=schema,
        logger=logger,
        auth_secret=auth_secret,
        admin_secret=admin_secret,
        listen_address=values.text("Server", "ListenAddress") or "0.0.0.0",
        server_port=values.parsed("Server", "ServerPort", 6001, _integer(1, 65535)),
        http_address=values.text("Server", "HTTPAddress") or "0.0.0.0",
        http_port=values.parsed("Server", "HTTPPort", 6081, _integer(1, 65535)),
        data_dir=data_dir,
        database_url=database_url,
        allowed_hosts=allowed_hosts,
        mail=mail,
        snapshot=snapshot,
        config_path=config_path,
        notes=tuple(ini.notes + values.unread()),
    )


# -- environment variables outside the file ------------------------------------------------------------------------

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: The health rule's variables: (default, least value) in seconds. A store timeout of 0 would wait for ever.
HEALTH_SECONDS = {
    "RELAY_HEALTH_MAX_LAG": (60.0, 0.0),
    "RELAY_HEALTH_REPORT_MARGIN": (5.0, 0.0),
    "RELAY_HEALTH_MAX_QUEUE_AGE": (600.0, 0.0),
    "RELAY_HEALTH_STORE_TIMEOUT": (5.0, 0.1),
}


def environment_seconds(name: str, environ: Mapping[str, str] | None = None) -> float:
    """One of HEALTH_SECONDS from the environment. A value that is not a finite number of seconds at least the
    variable's least is refused (a NaN maximum lag would never be passed: health green whatever the lag)."""
    environ = os.environ if environ is None else environ
    default, least = HEALTH_SECONDS[name]
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not a number of seconds") from None
    if not least <= number < float("inf"):
        raise ConfigError(f"{name}: {text!r} must be a number of seconds, {least:g} or more")
    return number


def check_environment(environ: Mapping[str, str] | None = None) -> str:
    """Checks the variables every process reads besides the file's keys; returns the log level."""
    environ = os.environ if environ is None else environ
    for name in HEALTH_SECONDS:
        environment_seconds(name, environ)
    level = environ.get("RELAY_LOG_LEVEL", "").strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise ConfigError(f"RELAY_LOG_LEVEL: {environ['RELAY_LOG_LEVEL']!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def require_auth_secret(config: RelayConfig) -> str:
    """The relay server refuses to start without a secret: the original accepted a well-known key then."""
    if not config.auth_secret:
        raise ConfigError("[Server] AuthSecret: empty; the relay refuses to start without a shared secret")
    return config.auth_secret


_ENCODE_HINT = "; a user or password with # / ? @ : or % in it is written percent-encoded (# as %23, @ as %40)"


def database_settings(url: str) -> dict[str, Any]:
    """Django's DATABASES['default'] for a ``postgres://`` or ``sqlite:///`` URL."""
    from urllib.parse import parse_qs, unquote, urlsplit

    if url.startswith("sqlite:///"):
        name = url[len("sqlite:///") :]  # sqlite:////abs/path is absolute, sqlite:///rel is relative
        if not name.startswith("/"):
            name = str(Path.cwd() / name)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            # IMMEDIATE: a transaction takes the write lock when it begins, so it waits (up to the timeout) for
            # another process's writes instead of failing with "database is locked" when it upgrades from reading.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is no number or out of range, a broken [IPv6] host
        raise ConfigError(f"the database URL cannot be read: {exc}{_ENCODE_HINT}") from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"DATABASE_URL: unsupported scheme {parts.scheme!r}")
    if parts.fragment:
        raise ConfigError(f"the database URL has a '#' (what follows it is not read){_ENCODE_HINT}")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    # libpq waits for ever for a server that accepts and never answers (frozen): the health check, a worker and a
    # relay would hang on connecting instead of saying the store does not answer. The URL may set its own.
    options.setdefault("connect_timeout", "5")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "relay",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "OPTIONS": options,
        "CONN_MAX_AGE": 60,
    }
