from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class ScenariosAppConfig(AppConfig):
    name = "scenarios_app"
    verbose_name = "Scenario store"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        connection_created.connect(_json_read_strictly, dispatch_uid="chukwa_json_loader")


def _json_read_strictly(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Values of type ``json`` (a read's ``json_agg``, decoded by psycopg) are read by
    ``loads_strict``: json's values, mostly read by orjson (psycopg's own ``json.loads`` was a
    sixteenth of a web process's busy time under 20 API clients). ``jsonb`` is left to Django,
    which reads it as text for its JSONField."""
    if connection.vendor != "postgresql":
        return
    from scenarios_app.sql_rows import register_json_loader

    register_json_loader(connection.connection)
