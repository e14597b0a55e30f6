"""Serve Chukwa's MCP tools over stdio (``surfaces/mcp/stdio.py``).

``manage.py`` refuses to start this command without DATABASE_URL and REDIS_URL, so it never
starts embedded servers of its own; here, a database it cannot use is one line, not a traceback.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from chukwa_core.errors import ChukwaError
from surfaces.mcp.stdio import TOKEN_VARIABLE, serve_stdio, stdio_caller


class Command(BaseCommand):
    help = (
        "Serve the MCP tools on stdin/stdout for a desktop MCP client, as the user of the API "
        f"token in {TOKEN_VARIABLE} (the token is never a command-line argument). Needs the "
        "deployment's DATABASE_URL and REDIS_URL."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            caller = stdio_caller()
        except ChukwaError as error:
            raise CommandError(error.message) from None
        except DatabaseError as error:
            # e.g. a database without Chukwa's tables: the driver's first line says which
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise CommandError(
                f"DATABASE_URL: cannot check {TOKEN_VARIABLE} against this database "
                f"({type(error).__name__}: {first}); is it the deployment's, migrated?"
            ) from None
        serve_stdio(caller)
