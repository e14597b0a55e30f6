"""The admin of scenarios, assembled or forked through the scenario services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    Entity,
    Environment,
    Scenario,
    ScenarioName,
)
from surfaces.admin.rendering import abbreviate, admin_url, hash_link, json_block, links_list
from surfaces.admin.store import StoreAdmin
from surfaces.forms import AssembleForm, ForkForm
from surfaces.permissions import with_default_operator

_DETAIL_CACHE_ATTR = "_chukwa_detail"


def _scenario_detail(obj: Scenario) -> dict[str, Any]:
    """``selectors.scenario_get``, read once per page although several columns show parts of it."""
    detail = getattr(obj, _DETAIL_CACHE_ATTR, None)
    if detail is None:
        detail = selectors.scenario_get(ref=obj.pk)
        setattr(obj, _DETAIL_CACHE_ATTR, detail)
    return detail


ASSEMBLE_SKELETON: dict[str, Any] = {
    "scenario_slug": "",
    "description": "",
    "chronon_seconds": 60,
    "cognition_profiles": {},
    "environments": {},
    "entities": [],
}
FORK_SKELETON: dict[str, Any] = {
    "cognition_profile_upserts": {},
    "cognition_profile_removals": [],
    "environment_upserts": {},
    "environment_removals": [],
}


@admin.register(Scenario)
class ScenarioAdmin(StoreAdmin):
    add_label = "Assemble from JSON"
    list_display = ("scenario_slug", "short_hash", "name_list", "created_at")
    search_fields = ("^hash", "scenario_slug", "names__name")
    actions = ("fork_selected",)
    fields = (
        "hash",
        "scenario_slug",
        "description",
        "chronon_seconds",
        "created_at",
        "name_list",
        "counts",
        "profiles_table",
        "environments_table",
        "entities_table",
        "derivations",
        "reconstruction",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Scenario]:
        return super().get_queryset(request).prefetch_related("names")

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_fork"
        return [
            path("<path:object_id>/fork/", self.admin_site.admin_view(self.fork_view), name=name),
            *super().get_urls(),
        ]

    def object_tools(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        set_name = reverse("admin:scenarios_app_scenarioname_add")
        return [
            {"label": "Fork…", "url": admin_url(Scenario, object_id, "fork")},
            {
                "label": "Set a name…",
                "url": f"{set_name}?{urlencode({'scenario_hash': object_id})}",
            },
        ]

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Assemble from JSON, through ``services.scenario_assemble``."""
        self.require_operator(request)
        if request.method == "POST":
            form = AssembleForm(request.POST)

            def assemble() -> tuple[str, str]:
                data = with_default_operator(form.cleaned_data["data"], request.user)
                result = services.scenario_assemble(data=data)
                message = _scenario_message("assembled", result)
                return message, admin_url(Scenario, result["scenario_hash"])

            done = self.submit_service_form(request, form, assemble, {}, default="data")
            if done is not None:
                return done
        else:
            form = AssembleForm(initial={"data": ASSEMBLE_SKELETON})
        return self.render_service_form(
            request, form=form, title="Assemble a scenario from JSON", submit_label="Assemble"
        )

    def fork_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Fork through ``services.scenario_fork`` with this scenario as the primary parent."""
        self.require_operator(request)
        parent = self.get_object(request, unquote(object_id))
        if parent is None:
            return self.does_not_exist(request, object_id)
        assert isinstance(parent, Scenario)  # this admin's model
        if request.method == "POST":
            form = ForkForm(request.POST)

            def fork() -> tuple[str, str]:
                cleaned = form.cleaned_data
                data: services.ScenarioForkInput = {
                    "primary_parent": {"hash": parent.pk},
                    "changes": cleaned["changes"],
                    "operator": request.user.get_username(),
                    "note": cleaned["note"],
                }
                if cleaned["additional_parents"] is not None:
                    data["additional_parents"] = cleaned["additional_parents"]
                if cleaned["name"]:
                    data["name"] = cleaned["name"]
                result = services.scenario_fork(data=data)
                message = _scenario_message("forked", result)
                return message, admin_url(Scenario, result["scenario_hash"])

            fields = {k: k for k in ("changes", "additional_parents", "name", "note")}
            done = self.submit_service_form(request, form, fork, fields)
            if done is not None:
                return done
        else:
            form = ForkForm(initial={"changes": FORK_SKELETON})
        detail = _scenario_detail(parent)
        bindings = {
            "cognition_profiles": detail["cognition_profiles"],
            "environments": detail["environments"],
            "entities": detail["entities"],
        }
        return self.render_service_form(
            request,
            form=form,
            title=f"Fork {parent}",
            submit_label="Fork",
            original=parent,
            reference_title="The parent's bindings (label → hash)",
            reference=json_block(bindings),
        )

    @admin.action(description="Fork the selected scenario", permissions=["operate"])
    def fork_selected(
        self, request: HttpRequest, queryset: QuerySet[Scenario]
    ) -> HttpResponse | None:
        hashes = list(queryset.values_list("pk", flat=True)[:2])
        if len(hashes) != 1:
            self.message_user(request, "Select exactly one scenario to fork.", messages.WARNING)
            return None
        return HttpResponseRedirect(admin_url(Scenario, hashes[0], "fork"))

    # --- columns ------------------------------------------------------------------------------

    @admin.display(description="hash", ordering="hash")
    def short_hash(self, obj: Scenario) -> SafeString:
        return format_html('<code title="{}">{}</code>', obj.pk, abbreviate(obj.pk))

    @admin.display(description="names")
    def name_list(self, obj: Scenario) -> SafeString:
        names = sorted(n.name for n in obj.names.all())
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((admin_url(ScenarioName, n), n) for n in names),
        )

    @admin.display(description="lineage")
    def counts(self, obj: Scenario) -> str:
        detail = _scenario_detail(obj)
        parents = "has parents" if detail["has_parents"] else "no parents"
        return f"{parents}; {detail['child_count']} children; {detail['world_count']} worlds"

    @admin.display(description="cognition profiles")
    def profiles_table(self, obj: Scenario) -> SafeString:
        profiles = _scenario_detail(obj)["scenario"]["cognition_profiles"]
        return links_list(
            [
                format_html(
                    "<code>{}</code> → profile {} (workflow {})",
                    label,
                    hash_link(CognitionProfile, profile_hash),
                    hash_link(CognitionWorkflow, profiles[label]["workflow_hash"]),
                )
                for label, profile_hash in _scenario_detail(obj)["cognition_profiles"].items()
            ]
        )

    @admin.display(description="environments")
    def environments_table(self, obj: Scenario) -> SafeString:
        return links_list(
            [
                format_html("<code>{}</code> → {}", label, hash_link(Environment, env_hash))
                for label, env_hash in _scenario_detail(obj)["environments"].items()
            ]
        )

    @admin.display(description="entities")
    def entities_table(self, obj: Scenario) -> SafeString:
        detail = _scenario_detail(obj)
        return links_list(
            [
                format_html(
                    "[{}] <code>{}</code> {}", index, content["id"], hash_link(Entity, entity_hash)
                )
                for index, (entity_hash, content) in enumerate(
                    zip(detail["entities"], detail["scenario"]["entities"], strict=True)
                )
            ]
        )

    @admin.display(description="derivations")
    def derivations(self, obj: Scenario) -> SafeString:
        items = []
        for d in selectors.scenario_derivations(scenario_hash=obj.pk):
            parents = format_html_join(
                ", ",
                "{} ({})",
                ((hash_link(Scenario, p["hash"]), p["role"]) for p in d["parents"]),
            )
            items.append(
                format_html(
                    "#{} {} by {}: parents {}; {}{}",
                    d["id"],
                    d["created_at"].isoformat(timespec="seconds"),
                    d["operator"] or "unknown",
                    parents or "none",
                    d["note"] or "no note",
                    json_block(d["metadata"]) if d["metadata"] else "",
                )
            )
        return links_list(items)

    @admin.display(description="reconstruction")
    def reconstruction(self, obj: Scenario) -> SafeString:
        return json_block(_scenario_detail(obj)["scenario"])


def _scenario_message(verb: str, result: services.AssembleResult) -> str:
    created = {k: n for k, n in result["new_components"].items() if n}
    text = (
        f"{verb}: stored new scenario {result['scenario_hash']}"
        if result["was_new_scenario"]
        else f"{verb}: scenario already stored, was_new false: {result['scenario_hash']}"
    )
    if created:
        text += " (new rows: " + ", ".join(f"{k} {n}" for k, n in created.items()) + ")"
    if result["name"]:
        text += f"; name {result['name']} points to it"
    return text
