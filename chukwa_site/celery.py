"""The Celery application; tasks live in each app's tasks.py."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")

app = Celery("chukwa")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="chukwa.ping")
def ping() -> str:
    return "pong"
