"""The Celery application; tasks live in each app's tasks.py."""

from __future__ import annotations

import logging.config
import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")

app = Celery("chukwa")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _use_django_logging(**_kwargs: Any) -> None:
    """Workers and beat log through settings.LOGGING (JSON lines, the turn's ids) instead of
    Celery's own format: connecting this signal is what stops Celery configuring the root
    logger. The level is CHUKWA_LOG_LEVEL's, not the command line's --loglevel."""
    logging.config.dictConfig(settings.LOGGING)


@app.task(name="chukwa.ping")
def ping() -> str:
    return "pong"
