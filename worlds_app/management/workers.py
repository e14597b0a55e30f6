"""Whether any Celery worker is up, for the commands that wait on workers (run_turns,
run_experiment): they refuse to wait for nobody."""

from __future__ import annotations


def worker_names() -> list[str]:
    """The names of the workers that answer a ping within a second."""
    # the project's Celery app, registered as current by chukwa_site on import
    from celery import current_app as app

    replies = app.control.ping(timeout=1.0) or []
    return [name for reply in replies for name in reply]
