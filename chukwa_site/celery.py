"""The Celery application; tasks live in each app's tasks.py."""

from __future__ import annotations

import logging.config
import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun, worker_init
from django.conf import settings
from django.db import close_old_connections

from chukwa_site.broker import install as install_broker_transport

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")

install_broker_transport()  # one Redis client per channel, not one per message
app = Celery("chukwa")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _use_django_logging(**_kwargs: Any) -> None:
    """Workers and beat log through settings.LOGGING (JSON lines, the turn's ids) instead of
    Celery's own format: connecting this signal is what stops Celery configuring the root
    logger. The level is CHUKWA_LOG_LEVEL's, not the command line's --loglevel."""
    logging.config.dictConfig(settings.LOGGING)


GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"


def worker_database_options(options: dict[str, Any]) -> None:
    """A worker's connections prepare a statement bound server-side at its first run (the
    turn's claim, its commit, the trace's writes, reuse's lookup: ``cognition_app.rows``) and
    PostgreSQL plans each prepared statement once per connection, not once per run. By
    default it plans a prepared statement's first five runs for their values, and a worker's
    connection runs each only a few dozen times an experiment, so planning cost PostgreSQL
    about as much as running them (~8 ms of an attempt's ~15). These statements find rows by
    key, where a plan made for no value in particular is the one any value gets. Left alone
    when prepared statements are off (a pooler that cannot keep them)."""
    if options.get("prepare_threshold") is None:
        return
    options["prepare_threshold"] = 0
    if GENERIC_PLANS not in options.get("options", ""):
        options["options"] = f"{options.get('options', '')} {GENERIC_PLANS}".strip()


@worker_init.connect
def _worker_plans(**_kwargs: Any) -> None:
    worker_database_options(settings.DATABASES["default"].setdefault("OPTIONS", {}))


@task_prerun.connect
@task_postrun.connect
def _connections_as_for_a_request(sender: Any = None, **_kwargs: Any) -> None:
    """A task's database connections are handled as Django handles a request's, at its start
    and end: kept (settings.CELERY_DB_REUSE_MAX stops Celery closing them), but closed when
    unusable, after an error, or older than CONN_MAX_AGE, and checked before their first use
    in the task (CONN_HEALTH_CHECKS: a PostgreSQL restart costs one reconnect, not a failed
    task). So a worker's next batch runs on the backend whose statements are prepared. A task
    run eagerly, inside its caller's work, leaves the caller's connections alone (as Celery's
    fixup does)."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    close_old_connections()


@app.task(name="chukwa.ping")
def ping() -> str:
    return "pong"
