"""Site-level views: health and the home page."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def _database_status() -> dict[str, object]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT version()")
            (version,) = cursor.fetchone()
        return {"ok": True, "server": str(version).split(" on ")[0]}
    except Exception as exc:  # noqa: BLE001 - health reports any failure as data
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _redis_status() -> dict[str, object]:
    import redis

    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL.replace("redis+socket://", "unix://"), socket_timeout=2
        )
        client.ping()
        return {"ok": True}
    except (redis.RedisError, OSError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _worker_status() -> dict[str, object]:
    from chukwa_site.celery import app

    try:
        replies = app.control.ping(timeout=1.0) or []
    except Exception as exc:  # noqa: BLE001 - health reports any failure as data
        return {"ok": False, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    workers = sorted(name for reply in replies for name in reply)
    return {"ok": bool(workers), "workers": workers}


def healthz(request: HttpRequest) -> JsonResponse:
    """Database, Redis and Celery worker status; 200 only when all three are up."""
    checks = {
        "database": _database_status(),
        "redis": _redis_status(),
        "worker": _worker_status(),
    }
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": ok, **checks}, status=200 if ok else 503)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    from scenarios_app.selectors import store_counts

    return render(request, "home.html", {"counts": store_counts()})
