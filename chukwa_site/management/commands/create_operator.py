"""Create (or update) an operator: ``create_user NAME --operator`` under its older name."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from chukwa_site.management.commands import create_user


class Command(create_user.Command):
    help = "Create an operator (may write through the API and admin) and print its API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password",
            help="set this password (default: a random one for a new user; unchanged otherwise)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, **{**options, "operator": True, "reader": False})
