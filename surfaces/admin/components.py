"""The admin of the eight component kinds, each stored through ``services.component_put``."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chukwa_core.patch_schema import world_patch_schema_hash
from scenarios_app import selectors, services
from scenarios_app.models import (
    CognitionProfile,
    CognitionWorkflow,
    ComponentKind,
    Entity,
    Environment,
    JsonSchema,
    Metric,
    Population,
    ResponseSource,
    Scenario,
)
from surfaces.admin.rendering import abbreviate, admin_url, hash_link, json_block, links_list
from surfaces.admin.store import StoreAdmin
from surfaces.forms import ComponentJsonForm, EnvironmentForm


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


class ComponentAdmin(StoreAdmin):
    kind: ClassVar[ComponentKind]
    form_class: ClassVar[type[forms.Form]] = ComponentJsonForm
    content_help: ClassVar[str] = ""
    search_fields: ClassVar[list[str] | tuple[str, ...]] = ("^hash",)

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
            return self.does_not_exist(request, object_id)
        return self.put_view(request, original=original)

    def put_view(self, request: HttpRequest, *, original: Model | None) -> HttpResponse:
        self.require_operator(request)
        if request.method == "POST":
            form = self.form_class(request.POST)

            def put() -> tuple[str, str]:
                content = form.cleaned_data["content"]
                result = services.component_put(kind=self.kind, content=content)
                message = _put_message(str(self.opts.verbose_name), result)
                return message, admin_url(self.model, result["hash"])

            done = self.submit_service_form(request, form, put, {}, default="content")
            if done is not None:
                return done
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
        items += [
            format_html("judge metric {} {}", m["label"], hash_link(Metric, m["hash"]))
            for m in found.get("metrics", [])
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
        'A source definition: {"version": 1, "label": …, "interface": {"name": '
        '"llm_chat_completions" | "http_json" | "mcp_tool", …}}. URL variables match '
        "^CHUKWA_[A-Z0-9_]+_URL$, key variables ^CHUKWA_[A-Z0-9_]+_API_KEY$."
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
            'A workflow. References may be {"hash": H} or {"inline": …}; the '
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


@admin.register(Metric)
class MetricAdmin(ComponentAdmin):
    kind = ComponentKind.METRIC
    content_help = (
        'A metric: {"version": 1, "label", "kind": "expression" | "llm_judge", "aggregate": '
        '"any" | "all" | "sum" | "mean" | "min" | "max" | "last"} with "expression" (JMESPath '
        'over the turn view) or "source", "system", "user_template", "scale" {"min", "max"}, '
        '"subject"?, "max_generation_attempts"? (1…5). See docs/measurement.md.'
    )
    list_display = ("short_hash", "label", "kind", "created_at")
    list_filter = ("kind",)
    search_fields = ("^hash", "label")
    fields = ("hash", "label", "kind", "source_link", "created_at", "pretty_content", "measured")
    readonly_fields = fields

    @admin.display(description="judge source")
    def source_link(self, obj: Metric) -> SafeString | str:
        return hash_link(ResponseSource, obj.source_id) if obj.source_id else "—"

    @admin.display(description="measured")
    def measured(self, obj: Metric) -> SafeString:
        found = selectors.component_uses(kind=self.kind, hash=obj.pk)
        return links_list(
            [
                format_html(
                    '<a href="/worlds/{}/">{}</a> ({} turns, {} errors)',
                    w["slug"],
                    w["slug"],
                    w["turns"],
                    w["error_turns"],
                )
                for w in found["worlds"]
            ]
        )


@admin.register(Population)
class PopulationAdmin(ComponentAdmin):
    kind = ComponentKind.POPULATION
    content_help = (
        'A population: {"version": 1, "label", "size", "sampler": "sobol" | "random", "seed", '
        '"axes": [{"name", "categories": [{"value", "weight"}]} | {"name", "range": [low, high], '
        '"integer"?, "marginal"?: [{"low", "high", "share"}]}], "entity_template": {"id", '
        '"name", "state", "goal", "memory"}} with {{index}} and {{axes.<name>}} (and '
        '{{biography}} when it has "biographies": {"source": {"hash"}, "prompt", "texts"}, '
        "written by POST /api/populations/<hash>/biographies/). See docs/populations.md."
    )
    list_display = ("short_hash", "label", "size", "sampler", "created_at")
    list_filter = ("sampler",)
    search_fields = ("^hash", "label")
    fields = ("hash", "label", "size", "sampler", "created_at", "pretty_content", "uses")
    readonly_fields = fields
