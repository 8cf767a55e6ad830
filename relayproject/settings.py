"""Django settings for the relay. Values come from relay.config (the INI file and the environment).

The configuration file is RELAY_CONFIG, which manage.py sets from ``--config`` before Django loads this module, so
that every key (the store and the secret key included) comes from the file the command line names. A bad value, or
a DataDir that cannot be created, stops start-up here with one line and exit status 1.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from relay.config import ConfigError, check_environment, database_settings, load_config

BASE_DIR = Path(__file__).resolve().parent.parent

try:
    RELAY_CONFIG = load_config()
    LOG_LEVEL = check_environment()
except ConfigError as exc:  # a bad value must stop start-up with one line naming the key
    raise SystemExit(f"configuration error: {exc}") from None

try:
    RELAY_CONFIG.data_dir.mkdir(parents=True, exist_ok=True)
except OSError as exc:
    raise SystemExit(
        f"configuration error: [Server] DataDir: cannot create {RELAY_CONFIG.data_dir}: {exc.strerror or exc}"
    ) from None


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, or one kept in the data directory so sessions survive restarts."""
    if os.environ.get("DJANGO_SECRET_KEY"):
        return os.environ["DJANGO_SECRET_KEY"]
    key_file = RELAY_CONFIG.data_dir / "django-secret-key"
    try:
        if not key_file.exists():
            key_file.write_text(secrets.token_urlsafe(50))
            key_file.chmod(0o600)
        return key_file.read_text().strip()
    except OSError as exc:
        raise SystemExit(
            f"configuration error: [Server] DataDir: cannot keep the secret key in {key_file}: {exc.strerror or exc}"
            " (set DJANGO_SECRET_KEY, or make DataDir writable)"
        ) from None


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
# DJANGO_ALLOWED_HOSTS (comma-separated) wins over [Server] AllowedHosts; the default is this machine's names only.
ALLOWED_HOSTS = [
    host.strip() for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",") if host.strip()
] or list(RELAY_CONFIG.allowed_hosts)
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "relay",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "relayproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "relayproject.wsgi.application"

DATABASES = {"default": database_settings(RELAY_CONFIG.database_url)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# The password-reset views exist only when [Mail] names an SMTP server (relayproject/urls.py): without one, a public
# form that cannot send anything would only invite abuse.
PASSWORD_RESET_ENABLED = RELAY_CONFIG.mail.enabled
if RELAY_CONFIG.mail.enabled:
    EMAIL_HOST = RELAY_CONFIG.mail.host
    EMAIL_PORT = RELAY_CONFIG.mail.port
    EMAIL_HOST_USER = RELAY_CONFIG.mail.user
    EMAIL_HOST_PASSWORD = RELAY_CONFIG.mail.password
    EMAIL_USE_TLS = RELAY_CONFIG.mail.use_tls
    DEFAULT_FROM_EMAIL = RELAY_CONFIG.mail.sender

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = RELAY_CONFIG.data_dir / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "binlog.logformat.OneLineFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }
    },
    "filters": {"health_probes": {"()": "relay.web.logfilters.HealthProbeFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["health_probes"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
