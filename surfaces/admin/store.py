"""The base every store admin shares: read-only for staff, writes for operators only through
service forms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString

from chukwa_core.errors import ChukwaError
from surfaces.forms import add_service_error
from surfaces.permissions import is_operator

FORM_TEMPLATE = "admin/scenarios_app/service_form.html"


def _plausible_key(object_id: str) -> bool:
    """Could ``object_id`` be a primary key of the store (a 64-char hash, a label, a number)?"""
    return "\x00" not in object_id and len(object_id) <= 64


class StoreAdmin(admin.ModelAdmin):
    """Read-only for staff, writes only through custom service views for operators."""

    def does_not_exist(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Django's own "… doesn't exist" redirect, as the admin answers a missing object."""
        redirect: HttpResponse = self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]  # private in the stubs
            request, self.opts, object_id
        )
        return redirect

    change_form_template = "admin/scenarios_app/readonly_change_form.html"
    change_list_template = "admin/scenarios_app/change_list.html"
    # The changelist's add button; blank means "Add <verbose name>".
    add_label: ClassVar[str] = ""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Content-addressed rows never change in place; see "save as new".
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def require_operator(self, request: HttpRequest) -> None:
        if not is_operator(request.user):
            raise PermissionDenied

    def object_tools(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        return []

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Model | None:
        # Keys here are hashes and labels. An id that cannot be one names no row, and a NUL byte
        # must not reach PostgreSQL (it rejects NUL in text parameters with an error, a 500).
        if not _plausible_key(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        label = self.add_label or f"Add {self.opts.verbose_name}"
        context = {"chukwa_add_label": label, **(extra_context or {})}
        return super().changelist_view(request, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not _plausible_key(unquote(object_id)):
            return self.does_not_exist(request, object_id)
        tools = self.object_tools(request, unquote(object_id)) if is_operator(request.user) else []
        context = {"chukwa_tools": tools, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    def submit_service_form(
        self,
        request: HttpRequest,
        form: forms.Form,
        call: Callable[[], tuple[str, str]],
        error_fields: Mapping[str, str],
        *,
        default: str | None = None,
    ) -> HttpResponse | None:
        """A POSTed form through its service: ``call`` (run only when the form is valid) returns
        the message to show and the URL to go to. None means show the form again, with the
        service's error on the field ``error_fields`` maps it to (``add_service_error``)."""
        if not form.is_valid():
            return None
        try:
            message, url = call()
        except ChukwaError as exc:
            add_service_error(form, exc, error_fields, default=default)
            return None
        self.message_user(request, message)
        return HttpResponseRedirect(url)

    def render_service_form(
        self,
        request: HttpRequest,
        *,
        form: forms.Form,
        title: str,
        submit_label: str,
        original: Model | None = None,
        reference_title: str = "",
        reference: SafeString | str = "",
    ) -> TemplateResponse:
        request.current_app = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "form": form,
            "original": original,
            "submit_label": submit_label,
            "reference_title": reference_title,
            "reference": reference,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, FORM_TEMPLATE, context)
