"""Reads for any signed-in user; writes for members of the operators group."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


def is_operator(user: object) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name=settings.OPERATORS_GROUP).exists()  # type: ignore[attr-defined]


def with_default_operator(data: Any, user: Any) -> Any:
    """Who did it (recorded on derivations and name history): the operator the input names,
    else the signed-in user. The one place this rule lives (API, admin)."""
    if isinstance(data, dict) and "operator" not in data:
        return {**data, "operator": user.get_username()}
    return data


class ReadAnyWriteOperators(BasePermission):
    message = "Writing requires membership of the operators group."

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        return is_operator(request.user)


class SignedInAnnotates(BasePermission):
    """Annotations are written by reviewers: any signed-in user may read them and
    create one, not only operators. Changing or deleting one is for its author or an operator."""

    message = "Only the annotation's author or an operator may change or delete it."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return bool(obj.author_id == request.user.pk or is_operator(request.user))
