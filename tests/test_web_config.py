"""The dashboard's production settings, in real processes: ALLOWED_HOSTS from configuration (never "*"), password
reset only with mail configured; and, in the test process, who sees the dashboard and who sees the admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client as HttpClient

from tests.helpers.processes import REPO

# Run inside `manage.py shell`: the settings and URLs as production loads them, asked with Django's test client
# (which, outside a test run, enforces ALLOWED_HOSTS like a real server).
PROBE = """
import json
from django.conf import settings
from django.test import Client
client = Client()
print(json.dumps({
    "allowed_hosts": settings.ALLOWED_HOSTS,
    "evil_host": client.get("/healthz", HTTP_HOST="evil.example").status_code,
    "reset": client.get("/accounts/password_reset/", HTTP_HOST=settings.ALLOWED_HOSTS[0]).status_code,
    "login": client.get("/accounts/login/", HTTP_HOST=settings.ALLOWED_HOSTS[0]).status_code,
}))
"""


def probe(tmp_path: Path, **env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "DJANGO_")) and k != "DATABASE_URL"}
    environ.update(
        DJANGO_SETTINGS_MODULE="relayproject.settings",
        RELAY_DATA_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'relay.sqlite3'}",
        **env,
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", PROBE], cwd=REPO, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_allowed_hosts_default_to_this_machine_never_star(tmp_path: Path) -> None:
    answer = probe(tmp_path)
    assert answer["allowed_hosts"] == ["localhost", "127.0.0.1", "[::1]"]
    assert answer["evil_host"] == 400


def test_allowed_hosts_from_the_environment_or_the_config_key(tmp_path: Path) -> None:
    assert probe(tmp_path, DJANGO_ALLOWED_HOSTS="relay.example.com, .corp.example")["allowed_hosts"] == [
        "relay.example.com",
        ".corp.example",
    ]
    conf = tmp_path / "relay.conf"
    conf.write_text("[Server]\nAllowedHosts=relay.example.com,10.0.0.5\n")
    assert probe(tmp_path, RELAY_CONFIG=str(conf))["allowed_hosts"] == ["relay.example.com", "10.0.0.5"]
    # The environment wins over the file.
    assert probe(tmp_path, RELAY_CONFIG=str(conf), DJANGO_ALLOWED_HOSTS="other.example")["allowed_hosts"] == [
        "other.example"
    ]


def test_password_reset_is_off_unless_mail_is_configured(tmp_path: Path) -> None:
    without = probe(tmp_path)
    assert (without["login"], without["reset"]) == (200, 404)
    with_mail = probe(tmp_path, RELAY_MAIL_HOST="smtp.example.com", RELAY_MAIL_FROM="relay@example.com")
    assert (with_mail["login"], with_mail["reset"]) == (200, 200)


def test_mail_without_a_sender_is_one_line(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "DJANGO_"))}
    environ.update(RELAY_DATA_DIR=str(tmp_path), RELAY_MAIL_HOST="smtp.example.com")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "configuration error: [Mail] From: the sender address is not set (password-reset mails need one)"
    )


@pytest.mark.django_db
def test_a_logged_in_non_staff_user_sees_the_dashboard_but_not_the_admin(client: HttpClient) -> None:
    user = User.objects.create_user("viewer", password="pw-viewer-1")
    client.force_login(user)
    assert client.get("/").status_code == 200
    assert client.get("/clients/").status_code == 200
    admin = client.get("/admin/")
    assert admin.status_code == 302 and admin["Location"].startswith("/admin/login/")
    assert client.get("/admin/relay/client/").status_code == 302
    user.is_staff = True
    user.save()
    assert client.get("/admin/").status_code == 200


@pytest.mark.django_db
def test_anonymous_users_see_neither(client: HttpClient) -> None:
    assert client.get("/")["Location"].startswith("/accounts/login/")
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
