"""Operator admin for the scenario store (SPEC §9).

Stored rows are immutable: change pages are read-only, nothing can be deleted, and "editing" saves
a new content-addressed row through the same services the API uses ("save as new").

Every write goes through a custom view, never ``ModelAdmin.changeform_view``: that view wraps the
request in ``transaction.atomic``, and the services own a durable transaction of their own.
Staff users may look; only operators (``is_operator``) may write.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from chukwa_core.errors import ChukwaError
from chukwa_core.patch_schema import world_patch_schema_hash
from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    ComponentKind,
    Entity,
    Environment,
    JsonSchema,
    ResponseSource,
    Scenario,
    ScenarioName,
    ScenarioNameHistory,
)
from surfaces.forms import (
    AssembleForm,
    ComponentJsonForm,
    EnvironmentForm,
    ForkForm,
    NameSetForm,
    NameUnsetForm,
    add_service_error,
    pretty_json,
)
from surfaces.permissions import is_operator

FORM_TEMPLATE = "admin/scenarios_app/service_form.html"
_DETAIL_CACHE_ATTR = "_chukwa_detail"

# --- rendering helpers ---------------------------------------------------------------------


def admin_url(model: type[Model], pk: str, view: str = "change") -> str:
    return reverse(
        f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=[quote(pk)]
    )


def abbreviate(value: str) -> str:
    return f"{value[:12]}…"


def hash_link(model: type[Model], pk: str, text: str | None = None) -> SafeString:
    return format_html(
        '<a href="{}" title="{}"><code>{}</code></a>',
        admin_url(model, pk),
        pk,
        text or abbreviate(pk),
    )


def json_block(value: Any) -> SafeString:
    return format_html('<pre class="chukwa-json">{}</pre>', pretty_json(value))


def links_list(items: list[SafeString]) -> SafeString:
    if not items:
        return format_html("<span>{}</span>", "none")
    return format_html(
        "<ul class='chukwa-links'>{}</ul>",
        format_html_join("", "<li>{}</li>", ((i,) for i in items)),
    )


def _put_message(kind_label: str, result: services.PutResult) -> str:
    text = (
        f"stored new {kind_label} {result['hash']}"
        if result["was_new"]
        else f"already stored, was_new false: {kind_label} {result['hash']}"
    )
    created = {k: n for k, n in result.get("new_components", {}).items() if n}
    if created:
        text += " (new rows: " + ", ".join(f"{k} {n}" for k, n in created.items()) + ")"
    return text


# --- shared admin behaviour ----------------------------------------------------------------


def _plausible_key(object_id: str) -> bool:
    """Could ``object_id`` be a primary key of the store (a 64-char hash, a label, a number)?"""
    return "\x00" not in object_id and len(object_id) <= 64


class StoreAdmin(admin.ModelAdmin):
    """Read-only for staff, writes only through custom service views for operators."""

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
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        tools = self.object_tools(request, unquote(object_id)) if is_operator(request.user) else []
        context = {"chukwa_tools": tools, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

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


# --- components ----------------------------------------------------------------------------


class ComponentAdmin(StoreAdmin):
    kind: ClassVar[ComponentKind]
    form_class: ClassVar[type[forms.Form]] = ComponentJsonForm
    content_help: ClassVar[str] = ""
    search_fields = ("^hash",)

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_save_as_new"
        return [
            path(
                "<path:object_id>/save-as-new/",
                self.admin_site.admin_view(self.save_as_new_view),
                name=name,
            ),
            *super().get_urls(),
        ]

    def object_tools(self, request: HttpRequest, object_id: str) -> list[dict[str, str]]:
        return [{"label": "Save as new…", "url": admin_url(self.model, object_id, "save_as_new")}]

    def get_content_help(self) -> str:
        return self.content_help

    def initial_content(self, obj: Any) -> Any:
        """What "save as new" starts from: content that puts back to the same hash."""
        return obj.content

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.put_view(request, original=None)

    def save_as_new_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        original = self.get_object(request, unquote(object_id))
        if original is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        return self.put_view(request, original=original)

    def put_view(self, request: HttpRequest, *, original: Model | None) -> HttpResponse:
        self.require_operator(request)
        if request.method == "POST":
            form = self.form_class(request.POST)
            if form.is_valid():
                try:
                    result = services.component_put(
                        kind=self.kind, content=form.cleaned_data["content"]
                    )
                except ChukwaError as exc:
                    add_service_error(form, exc, {}, default="content")
                else:
                    self.message_user(request, _put_message(self.opts.verbose_name, result))
                    return HttpResponseRedirect(admin_url(self.model, result["hash"]))
        elif original is not None:
            form = self.form_class(initial={"content": self.initial_content(original)})
        else:
            form = self.form_class()
        form.fields["content"].help_text = self.get_content_help()
        if original is None:
            title = f"Add {self.opts.verbose_name}"
            reference_title, reference = "", ""
        else:
            title = f"Save {self.opts.verbose_name} as new"
            reference_title = "Starting from"
            reference = hash_link(self.model, str(original.pk), str(original.pk))
        return self.render_service_form(
            request,
            form=form,
            title=title,
            submit_label="Store",
            original=original,
            reference_title=reference_title,
            reference=reference,
        )

    # --- list and detail columns --------------------------------------------------------------

    @admin.display(description="hash", ordering="hash")
    def short_hash(self, obj: Any) -> SafeString:
        return format_html('<code title="{}">{}</code>', obj.pk, abbreviate(obj.pk))

    @admin.display(description="content")
    def pretty_content(self, obj: Any) -> SafeString:
        return json_block(obj.content)

    @admin.display(description="used by")
    def uses(self, obj: Any) -> SafeString:
        found = selectors.component_uses(kind=self.kind, hash=obj.pk)
        items = [
            format_html("workflow {}", hash_link(CognitionWorkflow, w["hash"]))
            for w in found["workflows"]
        ]
        items += [
            format_html("profile {}", hash_link(CognitionProfile, p["hash"]))
            for p in found["cognition_profiles"]
        ]
        items += [
            format_html("scenario {} {}", s["scenario_slug"], hash_link(Scenario, s["hash"]))
            for s in found["scenarios"]
        ]
        return links_list(items)


@admin.register(JsonSchema)
class JsonSchemaAdmin(ComponentAdmin):
    kind = ComponentKind.JSON_SCHEMA
    content_help = "A Draft 2020-12 JSON Schema object."
    list_display = ("short_hash", "title", "created_at")
    fields = ("hash", "created_at", "pretty_content", "uses")
    readonly_fields = fields

    @admin.display(description="title")
    def title(self, obj: JsonSchema) -> str:
        return str(obj.content.get("title", "")) if isinstance(obj.content, dict) else ""


@admin.register(ResponseSource)
class ResponseSourceAdmin(ComponentAdmin):
    kind = ComponentKind.RESPONSE_SOURCE
    content_help = (
        'A source definition (SPEC §5): {"version": 1, "label": …, "interface": {"name": '
        '"llm_chat_completions" | "http_json", …}}. Variable names must match ^CHUKWA_[A-Z0-9_]+$.'
    )
    list_display = ("short_hash", "label", "interface", "created_at")
    list_filter = ("interface",)
    search_fields = ("^hash", "label")
    fields = ("hash", "label", "interface", "created_at", "pretty_content", "uses")
    readonly_fields = fields


@admin.register(CognitionWorkflow)
class CognitionWorkflowAdmin(ComponentAdmin):
    kind = ComponentKind.COGNITION_WORKFLOW
    list_display = ("short_hash", "nodes", "created_at")
    fields = ("hash", "created_at", "references", "pretty_content", "uses")
    readonly_fields = fields

    def get_content_help(self) -> str:
        return (
            'A workflow (SPEC §4). References may be {"hash": H} or {"inline": …}; the '
            f"WorldPatch schema is {world_patch_schema_hash()}."
        )

    @admin.display(description="nodes")
    def nodes(self, obj: CognitionWorkflow) -> str:
        nodes = obj.content.get("nodes", []) if isinstance(obj.content, dict) else []
        return " → ".join(str(n.get("id", "?")) for n in nodes if isinstance(n, dict))

    @admin.display(description="references")
    def references(self, obj: CognitionWorkflow) -> SafeString:
        model_by_kind: dict[str, type[Model]] = {
            ComponentKind.JSON_SCHEMA: JsonSchema,
            ComponentKind.RESPONSE_SOURCE: ResponseSource,
        }
        return links_list(
            [
                format_html(
                    "<code>{}</code> → {} {}",
                    ref.path,
                    ref.get_kind_display(),
                    hash_link(model_by_kind[ref.kind], ref.component_hash),
                )
                for ref in obj.refs.order_by("path")
            ]
        )


@admin.register(CognitionProfile)
class CognitionProfileAdmin(ComponentAdmin):
    kind = ComponentKind.COGNITION_PROFILE
    content_help = 'A profile: {"workflow": {"hash": H}} or {"workflow": {"inline": <workflow>}}.'
    list_display = ("short_hash", "workflow_link", "created_at")
    fields = ("hash", "workflow_link", "created_at", "pretty_content", "uses")
    readonly_fields = fields

    def initial_content(self, obj: Any) -> Any:
        return {"workflow": {"hash": obj.workflow_id}}

    @admin.display(description="workflow", ordering="workflow")
    def workflow_link(self, obj: CognitionProfile) -> SafeString:
        return hash_link(CognitionWorkflow, obj.workflow_id)


@admin.register(Environment)
class EnvironmentAdmin(ComponentAdmin):
    kind = ComponentKind.ENVIRONMENT
    form_class = EnvironmentForm
    content_help = "Prose, non-empty, at most 64 KiB. Hashed exactly as written."
    list_display = ("short_hash", "excerpt", "created_at")
    fields = ("hash", "created_at", "pretty_content", "uses")
    readonly_fields = fields

    @admin.display(description="text")
    def excerpt(self, obj: Environment) -> str:
        text = obj.content.strip()
        first = text.splitlines()[0] if text else ""
        return first if len(first) <= 80 else first[:79] + "…"

    @admin.display(description="content")
    def pretty_content(self, obj: Any) -> SafeString:
        return format_html('<pre class="chukwa-text">{}</pre>', obj.content)


@admin.register(Entity)
class EntityAdmin(ComponentAdmin):
    kind = ComponentKind.ENTITY
    content_help = (
        'An entity: {"id", "name", "state", "environment", "kind": "prop" | {"agent": '
        '{"goal", "memory", "cognition_profile"}}}. The id is normalized before hashing.'
    )
    list_display = ("short_hash", "entity_id", "is_agent", "created_at")
    list_filter = ("is_agent",)
    search_fields = ("^hash", "entity_id")
    fields = ("hash", "entity_id", "is_agent", "created_at", "pretty_content", "uses")
    readonly_fields = fields


# --- scenarios -----------------------------------------------------------------------------


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
        """Assemble from JSON (SPEC §3), through ``services.scenario_assemble``."""
        self.require_operator(request)
        if request.method == "POST":
            form = AssembleForm(request.POST)
            if form.is_valid():
                data = form.cleaned_data["data"]
                if isinstance(data, dict) and "operator" not in data:
                    data = {**data, "operator": request.user.get_username()}
                try:
                    result = services.scenario_assemble(data=data)
                except ChukwaError as exc:
                    add_service_error(form, exc, {}, default="data")
                else:
                    self.message_user(request, _scenario_message("assembled", result))
                    return HttpResponseRedirect(admin_url(Scenario, result["scenario_hash"]))
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
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if request.method == "POST":
            form = ForkForm(request.POST)
            if form.is_valid():
                cleaned = form.cleaned_data
                data: dict[str, Any] = {
                    "primary_parent": {"hash": parent.pk},
                    "changes": cleaned["changes"],
                    "operator": request.user.get_username(),
                    "note": cleaned["note"],
                }
                if cleaned["additional_parents"] is not None:
                    data["additional_parents"] = cleaned["additional_parents"]
                if cleaned["name"]:
                    data["name"] = cleaned["name"]
                try:
                    result = services.scenario_fork(data=data)
                except ChukwaError as exc:
                    add_service_error(
                        form,
                        exc,
                        {
                            "changes": "changes",
                            "additional_parents": "additional_parents",
                            "name": "name",
                            "note": "note",
                        },
                    )
                else:
                    self.message_user(request, _scenario_message("forked", result))
                    return HttpResponseRedirect(admin_url(Scenario, result["scenario_hash"]))
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


# --- names ---------------------------------------------------------------------------------


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
            if form.is_valid():
                cleaned = form.cleaned_data
                try:
                    result = services.scenario_name_set(
                        name=cleaned["name"],
                        scenario_hash=cleaned["scenario_hash"],
                        expected_current_hash=form.expected(),
                        note=cleaned["note"],
                        operator=request.user.get_username(),
                    )
                except ChukwaError as exc:
                    add_service_error(
                        form,
                        exc,
                        {
                            "name": "name",
                            "hash": "scenario_hash",
                            "expected_current_hash": "expected_current_hash",
                            "note": "note",
                        },
                    )
                else:
                    if result["previous_hash"] == result["hash"]:
                        text = (
                            f"name {result['name']} already points to {result['hash']}; unchanged"
                        )
                    else:
                        text = (
                            f"name {result['name']} now points to {result['hash']} "
                            f"(was {result['previous_hash'] or 'unset'})"
                        )
                    self.message_user(request, text)
                    return HttpResponseRedirect(admin_url(ScenarioName, result["name"]))
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
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if request.method == "POST":
            form = NameUnsetForm(request.POST)
            if form.is_valid():
                try:
                    result = services.scenario_name_unset(
                        name=original.pk,
                        expected_current_hash=form.expected(),
                        note=form.cleaned_data["note"],
                        operator=request.user.get_username(),
                    )
                except ChukwaError as exc:
                    add_service_error(
                        form,
                        exc,
                        {"expected_current_hash": "expected_current_hash", "note": "note"},
                    )
                else:
                    self.message_user(
                        request, f"name {result['name']} unset (was {result['previous_hash']})"
                    )
                    history = reverse("admin:scenarios_app_scenarionamehistory_changelist")
                    query = urlencode({"name": result["name"]})
                    return HttpResponseRedirect(f"{history}?{query}")
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
