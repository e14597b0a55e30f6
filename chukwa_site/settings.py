"""The one settings module, driven by environment variables (see .env.example)."""

from __future__ import annotations

import logging
from pathlib import Path

import dj_database_url
from environs import Env
from marshmallow.validate import OneOf, Range

from chukwa_site import embedded

BASE_DIR = Path(__file__).resolve().parent.parent


# Every variable is parsed strictly: a typo in a boolean or a number stops the process with
# a message naming the variable, instead of silently meaning False or a default.
env = Env()

DEBUG = env.bool("CHUKWA_DEBUG", False)
# Without DJANGO_SECRET_KEY, a random key generated once and kept (0600) in the data folder.
SECRET_KEY = env.str("DJANGO_SECRET_KEY", "") or embedded.secret_key()
ALLOWED_HOSTS = [
    h.strip()
    for h in env.list("CHUKWA_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
    if h.strip()
]
# Behind TLS (a deployment sets CHUKWA_HTTPS=true): secure cookies, HSTS, redirects to https,
# and the proxy's X-Forwarded-Proto trusted for telling the two apart.
if env.bool("CHUKWA_HTTPS", False):
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = env.int("CHUKWA_HSTS_SECONDS", 31_536_000)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = [o for o in env.list("CHUKWA_CSRF_TRUSTED_ORIGINS", [], subcast=str) if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_htmx",
    "chukwa_site",
    "scenarios_app",
    "worlds_app",
    "cognition_app",
    "surfaces",
]

MIDDLEWARE = [
    # Outermost: database or broker outages become 503 `unavailable`, wherever they surface.
    "surfaces.outages.OutageMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "surfaces.signin_throttle.signin_throttle_middleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "chukwa_site.urls"
WSGI_APPLICATION = "chukwa_site.wsgi.application"

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
                "surfaces.pages.context_processors.roles",
                "surfaces.pages.context_processors.embedded_model",
            ],
        },
    },
]

# The hot API reads (scenarios_app.sql_rows) run on server-binding cursors that psycopg prepares
# on a connection after this many runs there (PostgreSQL then skips planning them); Django's own
# queries bind client-side and are never prepared. False for a pooler that cannot keep
# prepared statements (PgBouncer before 1.21 in transaction mode).
_DB_OPTIONS = {"prepare_threshold": 5 if env.bool("CHUKWA_DB_PREPARED_STATEMENTS", True) else None}

# PostgreSQL only. With no DATABASE_URL, the embedded server is found or started.
POSTGRESQL_ENGINE = "chukwa_site.postgresql"
if env.str("DATABASE_URL", ""):
    DATABASES = {
        "default": dj_database_url.parse(
            env.str("DATABASE_URL"), conn_max_age=60, conn_health_checks=True
        )
    }
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}), **_DB_OPTIONS}
else:
    _pg = embedded.postgres_ensure()
    DATABASES = {
        "default": {
            "ENGINE": POSTGRESQL_ENGINE,
            # CHUKWA_DB_NAME points a process (e.g. a test's Celery worker) at another database.
            "NAME": env.str("CHUKWA_DB_NAME", _pg.database),
            "USER": _pg.user,
            "HOST": _pg.socket_dir,
            "PORT": str(_pg.port),
            "CONN_MAX_AGE": 60,
            # A persistent connection broken by a database restart is noticed and replaced at
            # the next request instead of failing it (the process recovers by itself).
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": _DB_OPTIONS,
        }
    }
if env.str("CHUKWA_TEST_DB_NAME", ""):
    # Lets several test runs share one server without sharing a test database.
    DATABASES["default"]["TEST"] = {"NAME": env.str("CHUKWA_TEST_DB_NAME")}
if DATABASES["default"]["ENGINE"] not in (POSTGRESQL_ENGINE, "django.db.backends.postgresql"):
    raise RuntimeError("Chukwa runs on PostgreSQL only; DATABASE_URL must be postgres://…")
# Django's own, with a health check that costs no round trip while the server has said nothing
DATABASES["default"]["ENGINE"] = POSTGRESQL_ENGINE

REDIS_URL = env.str("REDIS_URL", "") or embedded.redis_ensure()

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Sign-in throttling (docs/operations.md): the backend refuses a username+address after
# CHUKWA_SIGNIN_FAILURE_LIMIT failures within CHUKWA_SIGNIN_WINDOW_SECONDS; invalid API tokens
# are refused per address over the same limit, valid ones never.
AUTHENTICATION_BACKENDS = ["surfaces.signin_throttle.ThrottledModelBackend"]
CHUKWA_SIGNIN_FAILURE_LIMIT = env.int("CHUKWA_SIGNIN_FAILURE_LIMIT", 5)
CHUKWA_SIGNIN_WINDOW_SECONDS = env.int("CHUKWA_SIGNIN_WINDOW_SECONDS", 900)
# How many reverse proxies in front of the web server append to X-Forwarded-For; the client's
# address for throttling is read from the entry the outermost of them wrote. 0: REMOTE_ADDR only.
CHUKWA_TRUSTED_PROXY_HOPS = env.int("CHUKWA_TRUSTED_PROXY_HOPS", 0, validate=Range(min=0, max=16))
# The failure counts are rows of their own (surfaces.models.SigninFailure), never culled.
# Django's cache is the database's (table created by chukwa_site's migration), so anything that
# uses it is shared by every web process.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "chukwa_cache",
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise warns when its root is missing
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Request bodies: scenarios are limited to 256 KiB canonical; leave room for whitespace.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "surfaces.signin_throttle.ThrottledTokenAuthentication",
        "surfaces.signin_throttle.ThrottledBearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["surfaces.permissions.ReadAnyWriteOperators"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "surfaces.api.errors.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["surfaces.api.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["surfaces.api.parsers.ChukwaJSONParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Chukwa API",
    "DESCRIPTION": "Content-addressed scenario store, worlds, turns and traces.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Operations are tagged by their first path segment under /api (worlds, scenarios, …); the
    # prefix is explicit because /mcp/ is a DRF view too (left out of the document).
    "SCHEMA_PATH_PREFIX": "/api",
    # Several choice sets are named "status" or "kind": each has a name of its own, and the
    # first two keep the names they had before the others came (clients generated from the
    # document depend on them).
    "ENUM_NAME_OVERRIDES": {
        "StatusEnum": "surfaces.api.worlds.STATUSES",
        "KindEnum": "surfaces.api.annotations.ANNOTATION_TARGET_KINDS",
        "InvocationKindEnum": "surfaces.api.indexes.INVOCATION_KINDS",
        "InvocationStatusEnum": "surfaces.api.indexes.INVOCATION_STATUSES",
        "InterventionStatusEnum": "surfaces.api.interventions.INTERVENTION_STATUSES",
        "MetricKindEnum": "chukwa_core.metric_kinds.BUILT_IN_METRIC_KINDS",
        "ExperimentStatusEnum": "surfaces.api.experiments.STATUSES",
        "ExperimentModeEnum": "chukwa_core.experiment_design.EXPERIMENT_MODES",
        "ReplayModeEnum": "cognition_app.sources.REPLAY_MODES",
        "BiographyRunStatusEnum": "surfaces.api.populations.RUN_STATUSES",
    },
}

# A turn attempt's Celery time limits (seconds); the soft limit lets it record its failure.
CHUKWA_ATTEMPT_SOFT_TIME_LIMIT = 900
CHUKWA_ATTEMPT_TIME_LIMIT = 960
# A worker task that has run for less than this (seconds) when it commits a turn claims the
# next attempt of the same batch in that commit's transaction and runs it itself, instead of a
# broker round trip; 0 turns that off. The time limits are the task's, so every attempt keeps at
# least the soft limit minus this to run.
CHUKWA_BATCH_CONTINUE_SECONDS = env.float("CHUKWA_BATCH_CONTINUE_SECONDS", 60)
if not 0 <= CHUKWA_BATCH_CONTINUE_SECONDS <= CHUKWA_ATTEMPT_SOFT_TIME_LIMIT / 4:
    raise RuntimeError(
        "CHUKWA_BATCH_CONTINUE_SECONDS must be 0…"
        f"{CHUKWA_ATTEMPT_SOFT_TIME_LIMIT / 4:g} (a quarter of the attempt's soft time limit)"
    )

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes a worker's database connections before and after every task
# unless this is set: every batch then started on a new PostgreSQL backend, its statements
# parsed and planned again (its first ten or so turns 1.5-2x slower). It is never reached;
# chukwa_site/celery.py treats a task as Django treats a request instead (CONN_MAX_AGE, health
# checks).
CELERY_DB_REUSE_MAX = 2**62
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Workers and beat keep reconnecting however long Redis is away (a restart, an outage).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # A message taken by a worker that died unacknowledged goes back to the queue after this
    # long. Longer than an attempt may run, so a live attempt's message is never handed to a
    # second worker; a dead worker's attempt is settled by the lease reaper long before.
    "visibility_timeout": CHUKWA_ATTEMPT_TIME_LIMIT + 300,
}
# Publishing while Redis is down gives up after a few quick retries: the attempt rows are
# already committed and the periodic re-drive sends them once Redis is back.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
# Interactive turns (a world that belongs to no experiment) go to the default queue.
CELERY_TASK_DEFAULT_QUEUE = env.str("CHUKWA_CELERY_QUEUE", "chukwa")
# Attempts of an experiment's worlds go to a queue of their own; every turn worker consumes
# both, and kombu's Redis transport takes them in turn (docs/operations.md, "Fair queues"), so
# an operator's turn waits behind at most one experiment attempt per worker process.
CHUKWA_EXPERIMENT_QUEUE = env.str("CHUKWA_CELERY_EXPERIMENT_QUEUE", "chukwa-experiments")
# How many worlds of one experiment are dispatched at a time (admitted: their turns run one
# after another until none is queued); the next world is admitted when one is done. Two
# experiments thus share the workers: the second waits for at most this many attempts of the
# first. Set it to at least the number of turn worker processes of the whole deployment, or a
# lone experiment leaves workers idle.
CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT = env.int(
    "CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT", 32, validate=Range(min=1, max=100_000)
)
# The periodic reaper/re-drive has a queue of its own, consumed by a worker that runs no turn
# attempts, so it never waits behind them.
CHUKWA_CONTROL_QUEUE = env.str("CHUKWA_CELERY_CONTROL_QUEUE", "chukwa-control")
# Measuring worlds (metrics over committed turns; LLM judges) has a queue of its own too, so it
# never delays a turn: its workers take no turn attempts.
CHUKWA_MEASURE_QUEUE = env.str("CHUKWA_CELERY_MEASURE_QUEUE", "chukwa-measure")
CELERY_TASK_ROUTES = {
    "worlds.reap_expired_attempts": {"queue": CHUKWA_CONTROL_QUEUE},
    "worlds.export_attempt_trace": {"queue": CHUKWA_CONTROL_QUEUE},
    "worlds.measure_world": {"queue": CHUKWA_MEASURE_QUEUE},
    "cognition.batch_tick": {"queue": CHUKWA_CONTROL_QUEUE},
}
# How often the reaper/re-drive runs: a lost dispatch delays an attempt by at most this long.
CHUKWA_REAPER_PERIOD_SECONDS = env.float("CHUKWA_REAPER_PERIOD_SECONDS", 15)
# Cluster-wide LLM source limits (cognition_app/sources/admission/cluster.py): how long a
# concurrency slot outlives a worker that died holding it, and the window the per-minute limits
# count over (60 s; shorter only in tests).
CHUKWA_LIMIT_LEASE_SECONDS = env.float("CHUKWA_LIMIT_LEASE_SECONDS", 15.0)
CHUKWA_LIMIT_WINDOW_SECONDS = env.float("CHUKWA_LIMIT_WINDOW_SECONDS", 60.0)
# How long an LLM call waits for Redis to come back (a restart, a failover) when its cluster
# limits or reuse's single-flight claim cannot be checked, before its try fails; 0 fails at once.
CHUKWA_REDIS_WAIT_SECONDS = env.float(
    "CHUKWA_REDIS_WAIT_SECONDS", 30.0, validate=Range(min=0, max=3600)
)
# How often pending provider batches are sent and polled (interface.batch sources).
CHUKWA_BATCH_POLL_SECONDS = env.float("CHUKWA_BATCH_POLL_SECONDS", 10)
CELERY_BEAT_SCHEDULE = {
    # Safety net for dead workers and lost dispatches: interrupt attempts whose lease expired,
    # then re-send the next attempt of every world with queued attempts and nothing running.
    "reap-expired-attempts": {
        "task": "worlds.reap_expired_attempts",
        "schedule": CHUKWA_REAPER_PERIOD_SECONDS,
        # A run that waited longer than a period is superseded by the next one.
        "options": {"queue": CHUKWA_CONTROL_QUEUE, "expires": CHUKWA_REAPER_PERIOD_SECONDS},
    },
    # Provider batches (cognition_app/batches.py): send what is pending, poll what was sent.
    "batch-tick": {
        "task": "cognition.batch_tick",
        "schedule": CHUKWA_BATCH_POLL_SECONDS,
        "options": {"queue": CHUKWA_CONTROL_QUEUE, "expires": CHUKWA_BATCH_POLL_SECONDS},
    },
}
# At most this many idle worlds are re-driven per period (the longest-waiting first).
CHUKWA_REDRIVE_LIMIT = env.int("CHUKWA_REDRIVE_LIMIT", 500)
# OpenTelemetry export of finished attempts: the standard OTLP variables; an empty
# endpoint turns export off (nothing is enqueued). The exporter appends /v1/traces to it.
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", "")
OTEL_EXPORTER_OTLP_HEADERS = env.str("OTEL_EXPORTER_OTLP_HEADERS", "")
OTEL_EXPORTER_OTLP_TIMEOUT = env.float("OTEL_EXPORTER_OTLP_TIMEOUT", 10)
# Off by default, like OpenTelemetry's own switch: exported spans then carry no prompt, reply,
# tool argument or result, only the paths of the pages that show them.
CHUKWA_OTEL_CAPTURE_CONTENT = env.bool("CHUKWA_OTEL_CAPTURE_CONTENT", False)
# A running attempt renews its lease while it works; one that stops renewing for this long is
# considered dead and is marked interrupted by the reaper.
CHUKWA_ATTEMPT_LEASE_SECONDS = env.int("CHUKWA_ATTEMPT_LEASE_SECONDS", 60)
# How many subjects of a turn's concurrent phase think at the same time in one worker
# process (each on a thread with its own database connection); the rest wait for a free thread.
CHUKWA_MAX_CONCURRENT_SUBJECTS = env.int(
    "CHUKWA_MAX_CONCURRENT_SUBJECTS", 16, validate=Range(min=1, max=256)
)

# How long a conformance-check verdict on an LLM backend stands: trusted for hours
# when the backend enforces response_format schemas, checked again soon when it did not.
CHUKWA_PROBE_TTL_SECONDS = env.int("CHUKWA_PROBE_TTL_SECONDS", 21600)
CHUKWA_PROBE_RETRY_SECONDS = env.int("CHUKWA_PROBE_RETRY_SECONDS", 60)

OPERATORS_GROUP = "operators"

# Where people reach the web pages; commands that print a link (run_experiment, the demo) build
# it on this. The default is where ./bin/stack serves them (its port, CHUKWA_PORT, default 8000).
CHUKWA_SITE_URL = env.str(
    "CHUKWA_SITE_URL", f"http://127.0.0.1:{env.int('CHUKWA_PORT', 8000)}"
).rstrip("/")

# One JSON object per line by default (what log collectors read); `text` for a terminal. The web
# process and the Celery workers (chukwa_site.celery) both log through this configuration.
CHUKWA_LOG_FORMAT = env.str("CHUKWA_LOG_FORMAT", "json", validate=OneOf(["json", "text"]))
# Set by the stack and the demo when they start the embedded toy model for CHUKWA_LLM_BASE_URL:
# every page then says, in a banner, that replies come from a 135M toy model.
CHUKWA_EMBEDDED_MODEL = env.bool("CHUKWA_EMBEDDED_MODEL", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "log_context": {"()": "chukwa_core.log_context.LogContextFilter"},
        "health_checks": {"()": "chukwa_site.logs.HealthCheckFilter"},
    },
    "formatters": {
        "json": {"()": "chukwa_site.logs.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["log_context"],
            "formatter": CHUKWA_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": env.log_level("CHUKWA_LOG_LEVEL", logging.WARNING)},
    # httpx logs every request's full URL at INFO, query string included; "source call
    # finished" (cognition_app.recording) says what happened without the URL. The MCP
    # SDK's client (mcp_tool sources) uses httpx2 the same way, and logs a server's malformed
    # replies (which may echo a key) at ERROR: the call's scrubbed trace row says it instead.
    # urllib3 (the connections under source calls, cognition_app.sources.transport) logs each
    # new connection's host and port at DEBUG.
    # A health check answering 503 (a service warming up or down) is what /healthz is for, not
    # an error of the web server: logged at INFO (the answer's body says what is down).
    "loggers": {
        "django.request": {"filters": ["health_checks"]},
        "httpx": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "mcp": {"level": "CRITICAL"},
    },
}
