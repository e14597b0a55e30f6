"""Create (or update) a user with the rights asked for: a reader (reads everything, may
annotate) or an operator (also writes, and uses the admin); prints the password of a new user
and the API token."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = (
        "Create a user: manage.py create_user NAME --reader (reads, annotates) or --operator "
        "(also writes); prints its password (a new user's) and its API token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        role = parser.add_mutually_exclusive_group(required=True)
        role.add_argument("--reader", action="store_true", help="read everything, annotate")
        role.add_argument("--operator", action="store_true", help="also write, and the admin")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password",
            help="set this password (default: a random one for a new user; unchanged otherwise)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"]
        if not username.strip() or len(username) > 150:
            raise CommandError("username must be 1…150 characters")
        operator = bool(options["operator"])
        with transaction.atomic():
            group = Group.objects.filter(name=settings.OPERATORS_GROUP).first()
            if group is None:
                raise CommandError("the operators group is missing: run `manage.py migrate` first")
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": options["email"]}
            )
            password = options["password"]
            if created and not password:
                password = secrets.token_urlsafe(12)
            if password:
                user.set_password(password)
            # Operators manage content in the admin (staff); readers never see it.
            user.is_staff = operator
            user.save()
            if operator:
                user.groups.add(group)
            else:
                user.groups.remove(group)
            token, _ = Token.objects.get_or_create(user=user)
        role = "operator" if operator else "reader"
        self.stdout.write(f"{role} {username!r} {'created' if created else 'updated'}")
        if password:
            self.stdout.write(f"  password: {password}")
        self.stdout.write(f"  API token: {token.key}")
