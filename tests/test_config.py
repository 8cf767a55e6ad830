"""The configuration module: the original's INI file as it is, new keys, environment overrides, bad values."""

from pathlib import Path

import pytest

from relay.config import (
    DEFAULT_REPLICA_SERVER_ID,
    ConfigError,
    database_settings,
    load_config,
    require_auth_secret,
)

REPO = Path(__file__).resolve().parent.parent

# The original's sample file, as its README shows it (with '#' comments and the `Database` key).
ORIGINAL_SAMPLE = """\
[MySQL]
# MySQL access for schema
host=localhost
login=root
password=mypassword
database=mydatabase
[Server]
# Mysql configuration for binlog (replication client)
IPAddr=localhost
Login=root
Password=mypassword
Database=mydatabase
# Shared secret for client access
AuthSecret=Freedelity
# Admin secret
AdminSecret=AdminPassword
# Port where the clients will connect to
ServerPort=6002
# IP/Port for http monitoring page
HTTPAddress=0.0.0.0
HTTPPort=6081
# replication logger : name of database and eventually list of tables to exclude from logging
[Logger]
Schema=mydatabase
Excludes=table_to_exclude1,table_to_exclude2
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replicaterelay.conf"
    path.write_text(text)
    return path


def test_reads_the_original_sample_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ORIGINAL_SAMPLE), environ={})
    assert (config.source.host, config.source.user, config.source.password) == ("localhost", "root", "mypassword")
    assert config.source.database == "mydatabase"
    assert config.source.port == 3306
    assert config.source.server_id == DEFAULT_REPLICA_SERVER_ID
    assert config.auth_secret == "Freedelity"
    assert config.admin_secret == "AdminPassword"
    assert config.server_port == 6002
    assert (config.http_address, config.http_port) == ("0.0.0.0", 6081)
    assert (config.schema.host, config.schema.user, config.schema.database) == ("localhost", "root", "mydatabase")
    assert config.logger.schemas == ("mydatabase",)
    assert config.logger.excludes == {"table_to_exclude1", "table_to_exclude2"}
    assert config.logger.enabled


def test_database_name_is_read_too_and_keys_are_case_insensitive(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[server]\nIPADDR=db1\ndatabasename=shop\nSERVERPORT=7000\n"), environ={})
    assert (config.source.host, config.source.database, config.server_port) == ("db1", "shop", 7000)


def test_new_keys(tmp_path: Path) -> None:
    text = (
        "[Server]\nIPAddr=db\nSourcePort=3307\nReplicaServerID=0x1234\nStartFrom=binlog.000007:1234\n"
        "HeartbeatSeconds=2.5\nDataDir=state\n[Logger]\nSchema= shop , crm\nExcludes=a, b ,c\nFormat=text,json\n"
    )
    config = load_config(write(tmp_path, text), environ={})
    assert config.source.port == 3307
    assert config.source.server_id == 0x1234
    assert config.source.start_from == ("binlog.000007", 1234)
    assert config.source.heartbeat_seconds == 2.5
    assert config.data_dir == tmp_path / "state"
    assert config.database_url == f"sqlite:///{tmp_path / 'state' / 'relay.sqlite3'}"
    assert config.logger.schemas == ("shop", "crm")
    assert config.logger.excludes == {"a", "b", "c"}  # trimmed, unlike the original
    assert config.logger.formats == {"text", "json"}


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, ORIGINAL_SAMPLE)
    environ = {
        "RELAY_SERVER_AUTHSECRET": "from-env",
        "RELAY_SERVER_SERVERPORT": "6100",
        "RELAY_MYSQL_HOST": "schema-host",
        "DATABASE_URL": "postgres://relay:pw@pg:5433/relaydb",
    }
    config = load_config(path, environ=environ)
    assert config.auth_secret == "from-env"
    assert config.server_port == 6100
    assert config.schema.host == "schema-host"
    assert config.database_url == "postgres://relay:pw@pg:5433/relaydb"


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, ORIGINAL_SAMPLE)
    assert load_config(environ={"RELAY_CONFIG": str(path)}).config_path == path


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("[Server]\nServerPort=abc\n", {}, "[Server] ServerPort: 'abc' is not a whole number"),
        ("[Server]\nServerPort=70000\n", {}, "[Server] ServerPort: 70000 is out of range (1..65535)"),
        # The original kept inline comments in the value; a port with one is an error that names the key.
        ("[Server]\nServerPort=6001 // port\n", {}, "[Server] ServerPort: '6001 // port' is not a whole number"),
        ("[Server]\nHTTPPort=0\n", {}, "[Server] HTTPPort: 0 is out of range"),
        ("[Server]\nReplicaServerID=0\n", {}, "[Server] ReplicaServerID: 0 is out of range"),
        ("[Server]\nStartFrom=binlog.000001\n", {}, "[Server] StartFrom: 'binlog.000001' is not a binlog position"),
        ("[Server]\nStartFrom=b.1:4\nStartGTID=0-1-5\n", {}, "StartFrom and StartGTID: set one of them"),
        ("[Server]\nHeartbeatSeconds=never\n", {}, "[Server] HeartbeatSeconds: 'never' is not a number"),
        ("[Logger]\nFormat=xml\n", {}, "[Logger] Format: 'xml' must be a comma-separated list"),
        ("", {"RELAY_SERVER_SOURCEPORT": "-1"}, "RELAY_SERVER_SOURCEPORT: -1 is out of range"),
        ("", {"DATABASE_URL": "mysql://x"}, "DATABASE_URL: 'mysql://x' must start with postgres://"),
        ("[Snapshot]\nMethod=lock\n", {}, "[Snapshot] Method: 'lock' is not one of auto, consistent-snapshot"),
        ("[Snapshot]\nChunkRows=0\n", {}, "[Snapshot] ChunkRows: 0 is out of range"),
        ("", {"RELAY_SNAPSHOT_ROWSPERSECOND": "fast"}, "RELAY_SNAPSHOT_ROWSPERSECOND: 'fast' is not a whole number"),
        ("[Snapshot]\nSignalTable=marks\n", {}, "[Snapshot] SignalTable: 'marks' is not SCHEMA.TABLE"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ=environ)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file_and_missing_source_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.conf", environ={})
    with pytest.raises(ConfigError, match=r"\[Server\] IPAddr: the source host is not set"):
        load_config(write(tmp_path, "[Server]\nLogin=x\n"), environ={}, require_source=True)
    with pytest.raises(ConfigError, match=r"\[Server\] Login"):
        load_config(write(tmp_path, "[Server]\nIPAddr=x\n"), environ={}, require_source=True)


def test_empty_auth_secret_is_refused(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[Server]\nAuthSecret=\n"), environ={})
    with pytest.raises(ConfigError, match="AuthSecret: empty"):
        require_auth_secret(config)


def test_shipped_sample_config_loads(tmp_path: Path) -> None:
    config = load_config(REPO / "replicaterelay.conf.sample", environ={})
    assert config.auth_secret == "Freedelity"
    assert config.server_port == 6002
    assert config.logger.formats == {"text"}


def test_database_settings_from_urls() -> None:
    pg = database_settings("postgres://u:p%40ss@h:5433/db?sslmode=require")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == ("u", "p@ss", "h", "5433", "db")
    assert pg["OPTIONS"] == {"sslmode": "require", "connect_timeout": "5"}  # libpq would wait for ever by default
    assert database_settings("postgres://h/db?connect_timeout=30")["OPTIONS"] == {"connect_timeout": "30"}
    lite = database_settings("sqlite:////tmp/x.sqlite3")
    assert (lite["ENGINE"], lite["NAME"]) == ("django.db.backends.sqlite3", "/tmp/x.sqlite3")


def test_bad_config_stops_manage_py_with_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "RELAY_CONFIG": str(write(tmp_path, "[Server]\nServerPort=x\n"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.strip() == "configuration error: [Server] ServerPort: 'x' is not a whole number"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgres://u@127.0.0.1:notaport/db", "Port could not be cast"),
        ("postgres://u@127.0.0.1:99999/db", "Port out of range"),
        ("postgres://u:p#ss@h/db", "percent-encoded (# as %23"),
        ("postgres://u@[::1:5432/db", "Invalid IPv6 URL"),
    ],
)
def test_a_database_url_that_cannot_be_read_stops_manage_py_with_one_line(url: str, says: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "DATABASE_URL": url, "RELAY_CONFIG": os.devnull}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("configuration error: DATABASE_URL: the database URL cannot be read") and says in line


def test_replica_server_ids_of_the_binlog_tools_are_refused(tmp_path: Path) -> None:
    from binlog.cli import TOOL_SERVER_IDS, tool_server_id

    assert DEFAULT_REPLICA_SERVER_ID not in TOOL_SERVER_IDS
    assert tool_server_id() in TOOL_SERVER_IDS
    assert tool_server_id(1) != tool_server_id(2)
    with pytest.raises(ConfigError, match=r"\[Server\] ReplicaServerID: .* `python -m binlog tail\|check` use"):
        load_config(write(tmp_path, f"[Server]\nReplicaServerID={tool_server_id()}\n"), environ={})


def test_allowed_hosts_and_mail_keys(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), environ={})
    assert config.allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert not config.mail.enabled
    text = "[Server]\nAllowedHosts= relay.example.com ,10.0.0.5\n[Mail]\nHost=smtp.example.com\nFrom=r@example.com\n"
    config = load_config(write(tmp_path, text), environ={"RELAY_MAIL_PORT": "587", "RELAY_MAIL_USETLS": "yes"})
    assert config.allowed_hosts == ("relay.example.com", "10.0.0.5")
    assert (config.mail.host, config.mail.port, config.mail.sender, config.mail.use_tls) == (
        "smtp.example.com",
        587,
        "r@example.com",
        True,
    )
    with pytest.raises(ConfigError, match=r"RELAY_MAIL_USETLS: 'maybe' is not yes or no"):
        load_config(write(tmp_path, text), environ={"RELAY_MAIL_USETLS": "maybe"})


def test_manage_py_takes_config_off_the_command_line() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("relay_manage", REPO / "manage.py")
    assert spec is not None and spec.loader is not None
    manage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manage)
    environ: dict[str, str] = {}
    assert manage.take_config_option(["manage.py", "migrate", "--config", "a.conf", "--noinput"], environ) == [
        "manage.py",
        "migrate",
        "--noinput",
    ]
    assert environ == {"RELAY_CONFIG": "a.conf"}
    assert manage.take_config_option(["manage.py", "runbinlog", "--config=b.conf"], environ) == [
        "manage.py",
        "runbinlog",
    ]
    assert environ == {"RELAY_CONFIG": "b.conf"}
    # After "--" everything belongs to the command.
    assert manage.take_config_option(["m", "shell", "--", "--config", "x"], environ)[-2:] == ["--config", "x"]
    with pytest.raises(SystemExit, match="--config needs"):
        manage.take_config_option(["manage.py", "runbinlog", "--config"], {})


def test_snapshot_keys(tmp_path: Path) -> None:
    default = load_config(write(tmp_path, ""), environ={}).snapshot
    assert (default.method, default.chunk_rows, default.rows_per_second) == ("auto", 2_000, 0.0)
    text = "[snapshot]\nmethod=Watermark\nchunkrows=500\nRowsPerSecond=10000\nSignalTable=ops.marks\n"
    chosen = load_config(write(tmp_path, text), environ={}).snapshot
    assert (chosen.method, chosen.chunk_rows, chosen.rows_per_second, chosen.signal_table) == (
        "watermark",
        500,
        10_000.0,
        "ops.marks",
    )


def test_the_file_means_what_it_meant_to_the_original(tmp_path: Path) -> None:
    """Free Pascal's TIniFile rules: a byte order mark and indentation mean nothing, the first of a key (and of a
    section) given twice wins, a pair of quotes around a value goes, ':' separates nothing, '=' in a value stays, and
    lines the original ignored are ignored here too, each named in the notes."""
    text = (
        "\ufeff[Server]\r\n"
        "  IPAddr = db1\r\n"
        "\tLogin=repl\r\n"
        "    Password='se=cret'\r\n"
        'AuthSecret="Freedelity" // the note stays\r\n'
        "ServerPort=6100\r\n"
        "ServerPort=6200\r\n"
        "AdminSecret: admin\r\n"
        "a stray line\r\n"
        "[MySQL]\r\n"
        'login="schema"\r\n'
        "[ server ]\r\n"
        "SourcePort=3307\r\n"
        "[SERVER]\r\n"
        "SourcePort=3308\r\n"
    )
    path = tmp_path / "replicaterelay.conf"
    path.write_bytes(text.encode("utf-8"))
    config = load_config(path, environ={})
    assert (config.source.host, config.source.user, config.source.password) == ("db1", "repl", "se=cret")
    assert config.auth_secret == '"Freedelity" // the note stays'
    assert (config.server_port, config.source.port, config.admin_secret) == (6100, 3306, "")
    assert config.schema.user == "schema"
    assert config.notes == (
        f"{path} line 7: [Server] ServerPort again: the value of line 6 is used, as the original used it",
        f"{path} line 8: no = on this line: ignored",
        f"{path} line 9: no = on this line: ignored",
        f"{path} line 14: [SERVER] again: its keys are ignored, as the original ignored them (it reads the first "
        "[Server] only); merge the two blocks",
        f"{path} line 13: [ server ] SourcePort: a section the relay does not read; ignored",
    )


def test_lines_end_at_cr_and_lf_only_and_values_keep_all_but_control_characters_and_spaces(tmp_path: Path) -> None:
    """As TIniFile: a form feed or a line separator inside a value is part of it, and so is a no-break space at its
    end (only characters up to the space are trimmed): the secret is the original's, its key the same."""
    path = tmp_path / "replicaterelay.conf"
    path.write_bytes("[Server]\rAuthSecret=ab\x0ccd\u2028ef\u00a0 \t\rLogin=x\n".encode())
    config = load_config(path, environ={})
    assert (config.auth_secret, config.source.user, config.notes) == ("ab\x0ccd\u2028ef\u00a0", "x", ())


def test_keys_and_variables_the_relay_does_not_read_are_named(tmp_path: Path) -> None:
    """A typo keeps the value it meant to set at its default: it is named, with its line, not passed over."""
    path = write(tmp_path, "Stray=1\n[Server]\nAuthSecrte=x\nIPAddr=db\n[Loger]\nSchema=shop\n[MySQL]\npassword=p\n")
    environ = {"RELAY_SERVER_SERVERPROT": "7000", "RELAY_SERVER_IPADDR": "db2", "RELAY_DATA_DIR": str(tmp_path)}
    config = load_config(path, environ=environ)
    assert config.source.host == "db2"
    assert config.notes == (
        f"{path} line 1: Stray is before any [section]: ignored",
        f"{path} line 3: [Server] AuthSecrte: no key the relay reads; ignored",
        f"{path} line 6: [Loger] Schema: a section the relay does not read; ignored",
        "environment: RELAY_SERVER_SERVERPROT names no key the relay reads; ignored",
    )
    assert load_config(REPO / "replicaterelay.conf.sample", environ={}).notes == ()
    overridden = write(tmp_path, "[Store]\nURL=sqlite:////var/lib/relay.sqlite3\n")
    assert load_config(overridden, environ={"DATABASE_URL": "postgres://db/relay"}).notes == ()


def test_a_secret_in_a_file_that_is_not_utf8_keys_as_its_bytes(tmp_path: Path) -> None:
    """The original hashed the bytes after '=': a latin1 file's secret gives the key of those bytes."""
    from clientproto.auth import server_key

    path = tmp_path / "replicaterelay.conf"
    path.write_bytes("[Server]\nAuthSecret=Fr\u00e9e\n".encode("latin-1"))
    secret = require_auth_secret(load_config(path, environ={}))
    assert server_key(secret) == server_key("Fr\u00e9e".encode("latin-1")) != server_key("Fr\u00e9e")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RELAY_LOG_LEVEL", "LOUD", "RELAY_LOG_LEVEL: 'LOUD' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("RELAY_HEALTH_MAX_LAG", "nan", "RELAY_HEALTH_MAX_LAG: 'nan' must be a number of seconds, 0 or more"),
        ("RELAY_HEALTH_MAX_QUEUE_AGE", "10m", "RELAY_HEALTH_MAX_QUEUE_AGE: '10m' is not a number of seconds"),
        ("RELAY_HEALTH_REPORT_MARGIN", "-1", "RELAY_HEALTH_REPORT_MARGIN: '-1' must be a number of seconds, 0 or more"),
        ("RELAY_HEALTH_STORE_TIMEOUT", "0", "RELAY_HEALTH_STORE_TIMEOUT: '0' must be a number of seconds, 0.1 or more"),
    ],
)
def test_bad_environment_values_stop_start_up_naming_the_variable(name: str, value: str, message: str) -> None:
    """A maximum lag of NaN would never be passed (health green whatever the lag): such values stop every process
    with one line, as a bad key of the file does."""
    import os
    import subprocess
    import sys

    from relay.config import check_environment

    with pytest.raises(ConfigError) as caught:
        check_environment({name: value})
    assert str(caught.value) == message
    env = {**os.environ, name: value}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert (result.returncode, result.stderr.strip()) == (1, f"configuration error: {message}")


def test_every_process_says_what_the_configuration_gives_that_it_ignores(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = write(tmp_path, f"[Server]\nDataDir={tmp_path}\nServerPort=6100\nServerPort=6200\nHeartbeatSecond=9\n")
    env = {**os.environ, "RELAY_CONFIG": str(path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    warnings = [line.split(" relay.config: ", 1)[1] for line in result.stderr.splitlines() if "relay.config" in line]
    assert warnings == [
        f"configuration: {path} line 4: [Server] ServerPort again: the value of line 3 is used, as the original "
        "used it",
        f"configuration: {path} line 5: [Server] HeartbeatSecond: no key the relay reads; ignored",
    ]
