"""Serve Chukwa's MCP tools over stdio (``surfaces/mcp/stdio.py``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from chukwa_core.errors import ChukwaError
from surfaces.mcp.stdio import TOKEN_VARIABLE, serve_stdio, stdio_caller


class Command(BaseCommand):
    help = (
        "Serve the MCP tools on stdin/stdout for a desktop MCP client, as the user of the API "
        f"token in {TOKEN_VARIABLE} (the token is never a command-line argument)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            caller = stdio_caller()
        except ChukwaError as error:
            raise CommandError(error.message) from None
        serve_stdio(caller)
