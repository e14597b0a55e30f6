"""Create (or update) an operator: a staff user in the operators group, with an API token."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create an operator (may write through the API and admin) and print its API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password",
            help="set this password (default: a random one for a new user; unchanged otherwise)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"]
        if not username.strip():
            raise CommandError("username must be non-empty")
        with transaction.atomic():
            group = Group.objects.filter(name=settings.OPERATORS_GROUP).first()
            if group is None:
                raise CommandError("the operators group is missing: run `manage.py migrate` first")
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": options["email"], "is_staff": True}
            )
            password = options["password"]
            if created and not password:
                password = secrets.token_urlsafe(12)
            if password:
                user.set_password(password)
            user.is_staff = True
            user.save()
            user.groups.add(group)
            token, _ = Token.objects.get_or_create(user=user)
        verb = "created" if created else "updated"
        self.stdout.write(f"operator {username!r} {verb}")
        if password:
            self.stdout.write(f"  password: {password}")
        self.stdout.write(f"  API token: {token.key}")
