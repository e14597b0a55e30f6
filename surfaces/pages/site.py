"""Site-level views: health, and the JSON 404 of unknown API paths."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt

from chukwa_core.errors import NotFoundError


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
    # the project's Celery app, registered as current by chukwa_site on import
    from celery import current_app as app

    try:
        replies = app.control.ping(timeout=1.0) or []
    except Exception as exc:  # noqa: BLE001 - health reports any failure as data
        return {"ok": False, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    workers = sorted(name for reply in replies for name in reply)
    return {"ok": bool(workers), "workers": workers}


def healthz(request: HttpRequest) -> JsonResponse:
    """Database, Redis and Celery worker status; 200 only when all three are up. Anonymous
    callers get ``{"ok": …}`` alone: failure text can carry a DSN or a socket path."""
    checks = {
        "database": _database_status(),
        "redis": _redis_status(),
        "worker": _worker_status(),
    }
    ok = all(check["ok"] for check in checks.values())
    body: dict[str, object] = {"ok": ok}
    if request.user.is_authenticated:
        body.update(checks)
    return JsonResponse(body, status=200 if ok else 503)


@csrf_exempt  # a JSON 404 for any method; a CSRF 403 page would hide the real answer
def api_not_found(request: HttpRequest) -> JsonResponse:
    """Every path under /api/ that no endpoint serves: the API's JSON error, not an HTML page."""
    message = f"path: no API endpoint at {request.path}"
    if not request.path.endswith("/"):
        # CommonMiddleware's slash redirect never fires here (this view matches first).
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.url_name != "api-not-found":
            message += f" (did you mean {request.path}/ ?)"
    error = NotFoundError("not_found", message, {"field": "path", "path": request.path})
    return JsonResponse({"error": error.as_dict()}, status=error.status_code)
