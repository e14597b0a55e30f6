"""The admin of scenario names, with their history; every move goes through the name services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from scenarios_app import selectors, services
from scenarios_app.models import Scenario, ScenarioName, ScenarioNameHistory
from surfaces.admin.rendering import admin_url, hash_link, links_list
from surfaces.admin.store import StoreAdmin
from surfaces.forms import NameSetForm, NameUnsetForm

# Where a name service's error shows on the set and unset forms (by its ``details["field"]``).
_CAS_FIELDS = {"expected_current_hash": "expected_current_hash", "note": "note"}


@admin.register(ScenarioName)
class ScenarioNameAdmin(StoreAdmin):
    add_label = "Set a name"
    list_display = ("name", "scenario_link", "updated_at")
    list_select_related = ("scenario",)
    search_fields = ("name", "^scenario__hash")
    fields = ("name", "scenario_link", "updated_at", "history")
    readonly_fields = fields

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_unset"
        return [
            path("<path:object_id>/unset/", self.admin_site.admin_view(self.unset_view), name=name),
            *super().get_urls(),
        ]

    def object_tools(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        current = ScenarioName.objects.filter(pk=object_id).values_list("scenario_id", flat=True)
        move = reverse("admin:scenarios_app_scenarioname_add")
        query = urlencode({"name": object_id, "expected_current_hash": current.first() or ""})
        return [
            {"label": "Move…", "url": f"{move}?{query}"},
            {"label": "Unset…", "url": admin_url(ScenarioName, object_id, "unset")},
        ]

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Set (or move) a name through ``services.scenario_name_set``, with optional CAS."""
        self.require_operator(request)
        if request.method == "POST":
            form = NameSetForm(request.POST)

            def set_name() -> tuple[str, str]:
                cleaned = form.cleaned_data
                result = services.scenario_name_set(
                    name=cleaned["name"],
                    scenario_hash=cleaned["scenario_hash"],
                    expected_current_hash=form.expected(),
                    note=cleaned["note"],
                    operator=request.user.get_username(),
                )
                if result["previous_hash"] == result["hash"]:
                    text = f"name {result['name']} already points to {result['hash']}; unchanged"
                else:
                    text = (
                        f"name {result['name']} now points to {result['hash']} "
                        f"(was {result['previous_hash'] or 'unset'})"
                    )
                return text, admin_url(ScenarioName, result["name"])

            fields = {"name": "name", "hash": "scenario_hash", **_CAS_FIELDS}
            done = self.submit_service_form(request, form, set_name, fields)
            if done is not None:
                return done
        else:
            keys = ("name", "scenario_hash", "expected_current_hash")
            form = NameSetForm(initial={k: request.GET[k] for k in keys if k in request.GET})
        return self.render_service_form(
            request, form=form, title="Set a scenario name", submit_label="Set name"
        )

    def unset_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Unset through ``services.scenario_name_unset``; the history keeps a tombstone."""
        self.require_operator(request)
        original = self.get_object(request, unquote(object_id))
        if original is None:
            return self.does_not_exist(request, object_id)
        assert isinstance(original, ScenarioName)  # this admin's model
        if request.method == "POST":
            form = NameUnsetForm(request.POST)

            def unset_name() -> tuple[str, str]:
                result = services.scenario_name_unset(
                    name=original.pk,
                    expected_current_hash=form.expected(),
                    note=form.cleaned_data["note"],
                    operator=request.user.get_username(),
                )
                history = reverse("admin:scenarios_app_scenarionamehistory_changelist")
                query = urlencode({"name": result["name"]})
                text = f"name {result['name']} unset (was {result['previous_hash']})"
                return text, f"{history}?{query}"

            done = self.submit_service_form(request, form, unset_name, _CAS_FIELDS)
            if done is not None:
                return done
        else:
            form = NameUnsetForm(initial={"expected_current_hash": original.scenario_id})
        return self.render_service_form(
            request,
            form=form,
            title=f"Unset the name {original.pk}",
            submit_label="Unset name",
            original=original,
            reference_title="Currently points to",
            reference=hash_link(Scenario, original.scenario_id, str(original.scenario)),
        )

    @admin.display(description="scenario", ordering="scenario__scenario_slug")
    def scenario_link(self, obj: ScenarioName) -> SafeString:
        return format_html(
            "{} {}", obj.scenario.scenario_slug, hash_link(Scenario, obj.scenario_id)
        )

    @admin.display(description="history")
    def history(self, obj: ScenarioName) -> SafeString:
        return _history_list(selectors.scenario_name_get(name=obj.pk)["history"])


def _history_list(history: list[dict[str, Any]]) -> SafeString:
    items = [
        format_html(
            "{}: {} → {} by {}{}",
            h["changed_at"].isoformat(timespec="seconds"),
            hash_link(Scenario, h["old_hash"]) if h["old_hash"] else "unset",
            hash_link(Scenario, h["new_hash"]) if h["new_hash"] else "unset (tombstone)",
            h["operator"] or "unknown",
            f" — {h['note']}" if h["note"] else "",
        )
        for h in history
    ]
    return links_list(items)


@admin.register(ScenarioNameHistory)
class ScenarioNameHistoryAdmin(StoreAdmin):
    list_display = ("name", "old", "new", "operator", "note", "changed_at")
    list_select_related = ("new_scenario",)
    search_fields = ("name",)
    fields = ("name", "old", "new", "operator", "note", "changed_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        # History rows are written by the name services only.
        return False

    @admin.display(description="old hash")
    def old(self, obj: ScenarioNameHistory) -> SafeString | str:
        return hash_link(Scenario, obj.old_hash) if obj.old_hash else "unset"

    @admin.display(description="new hash")
    def new(self, obj: ScenarioNameHistory) -> SafeString | str:
        if obj.new_scenario_id is None:
            return "unset (tombstone)"
        return hash_link(Scenario, obj.new_scenario_id)
