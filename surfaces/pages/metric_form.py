"""Making a metric in the browser (operators; docs/measurement.md, "Metrics in the browser"): a
form for every registered metric kind, checked as it is typed by the store's own put validation
(an error is shown beside its field), tried on a committed turn of a world before it is stored
(``metric_try``: the value or the error and the turn view; for a judge the messages, and the
score only when asked), then stored (``metric_put``). With ``next`` (a path on this site, the
launch form's for one), storing returns there with the new metric ticked."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.metric_judge import DEFAULT_JUDGE_GENERATION_ATTEMPTS, JUDGE_GENERATION_ATTEMPTS
from chukwa_core.metric_kinds import METRIC_KINDS, turn_scale, world_scale_of
from chukwa_core.metric_types import TYPES, scale_label
from chukwa_core.metric_validation import AGGREGATES
from scenarios_app import selectors
from scenarios_app.pickers import component_choices
from scenarios_app.selectors import ComponentKind
from scenarios_app.services import metric_draft, metric_put
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond
from worlds_app.indexes import world_choices
from worlds_app.services.metric_try import metric_try

PAGE = "scenarios_app/metric_form.html"
CHECK = "scenarios_app/_metric_check.html"
TRY = "scenarios_app/_metric_try.html"
ACTIONS = ("check", "try", "ask", "save")
# The fields every kind's form shows, and each kind's own (a kind with no form of its own is
# edited as JSON: its keys other than the common ones).
COMMON_FIELDS = ("label", "aggregate")
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "expression": ("expression", "type", "range_min", "range_max"),
    "llm_judge": (
        "source",
        "system",
        "user_template",
        "scale_min",
        "scale_max",
        "subject",
        "max_generation_attempts",
    ),
}
JSON_FIELDS = ("fields_json",)
# Where each kind's form shows an error beside a field (``field_key`` of the error's field).
KIND_ERROR_KEYS: dict[str, tuple[str, ...]] = {
    "expression": ("expression", "type", "range"),
    "llm_judge": (
        "source",
        "system",
        "user_template",
        "scale",
        "max_generation_attempts",
        "subject",
    ),
}
_FIELD_HEAD = re.compile(r"^content\.([a-z_]+)")


def _number(raw: str, field: str) -> int | float:
    """A number as typed: an integer stays one (a judge's 1…5 scale is ordinal)."""
    try:
        value = float(raw)
    except ValueError:
        raise invalid("invalid_input", field, f"must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise invalid("invalid_input", field, f"must be a finite number, got {raw!r}")
    return int(value) if value.is_integer() and "." not in raw else value


def _expression(form: dict[str, str]) -> dict[str, Any]:
    content: dict[str, Any] = {"expression": form["expression"]}
    if form["type"]:
        content["type"] = form["type"]
    bounds = {
        end: _number(form[f"range_{end}"], f"content.range.{end}")
        for end in ("min", "max")
        if form[f"range_{end}"]
    }
    if bounds:
        content["range"] = bounds
    return content


def _judge(form: dict[str, str]) -> dict[str, Any]:
    content: dict[str, Any] = {
        # the picker's value (chosen by label); an empty one is named by the put's validation
        "source": {"hash": form["source"]} if form["source"] else None,
        "system": form["system"],
        "user_template": form["user_template"],
        "scale": {
            end: _number(form[f"scale_{end}"], f"content.scale.{end}")
            for end in ("min", "max")
            if form[f"scale_{end}"]
        },
    }
    if form["subject"]:
        content["subject"] = form["subject"]
    if form["max_generation_attempts"].isdigit():
        content["max_generation_attempts"] = int(form["max_generation_attempts"])
    return content


def _as_json(form: dict[str, str]) -> dict[str, Any]:
    try:
        value = json.loads(form["fields_json"] or "{}")
    except ValueError as exc:
        raise invalid("invalid_json", "content", f"the kind's fields are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise invalid("invalid_json", "content", "the kind's fields must be a JSON object")
    return value


# What each kind's own fields on the form make of its content; the loop below has no branch
# per kind, and a registered kind without an entry is edited as JSON.
KIND_CONTENT: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
    "expression": _expression,
    "llm_judge": _judge,
}


def _edited(metric_hash: str) -> dict[str, str]:
    """A stored metric as the form's fields, to edit: saving stores a new version (its own hash,
    the same label unless changed); the stored one stays as it is, with every measurement and
    experiment that names it."""
    content = selectors.component_get(kind=ComponentKind.METRIC, hash=metric_hash)["content"]
    fields: dict[str, str] = {
        "kind": str(content["kind"]),
        "label": str(content["label"]),
        "aggregate": str(content["aggregate"]),
        "edit": metric_hash,
    }
    if content["kind"] == "expression":
        bounds = content.get("range") or {}
        fields.update(
            expression=str(content["expression"]),
            type=str(content.get("type", "")),
            range_min=_text(bounds.get("min")),
            range_max=_text(bounds.get("max")),
        )
    elif content["kind"] == "llm_judge":
        scale = content.get("scale") or {}
        fields.update(
            source=str((content.get("source") or {}).get("hash", "")),
            system=str(content.get("system", "")),
            user_template=str(content.get("user_template", "")),
            scale_min=_text(scale.get("min")),
            scale_max=_text(scale.get("max")),
            subject=str(content.get("subject", "")),
            max_generation_attempts=_text(content.get("max_generation_attempts")),
        )
    else:
        common = {"version", "label", "kind", "aggregate"}
        own = {k: v for k, v in content.items() if k not in common}
        fields["fields_json"] = json.dumps(own, indent=2, ensure_ascii=False)
    return fields


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _form(data: QueryDict | dict[str, str]) -> dict[str, Any]:
    kind = data.get("kind", "")
    kind = kind if kind in METRIC_KINDS else next(iter(METRIC_KINDS))
    names = (*COMMON_FIELDS, *KIND_FIELDS.get(kind, JSON_FIELDS))
    form: dict[str, Any] = {name: data.get(name, "").strip() for name in names}
    form["kind"] = kind
    if "label" not in data:  # a fresh form (perhaps with its kind chosen): the defaults
        form.update(aggregate="mean", scale_min="1", scale_max="5")
        form["max_generation_attempts"] = str(DEFAULT_JUDGE_GENERATION_ATTEMPTS)
    form["world"] = data.get("world", "").strip()
    form["turn"] = data.get("turn", "").strip()
    form["next"] = data.get("next", "")
    # the stored metric being edited (the form says so; saving stores a new version)
    form["edit"] = data.get("edit", "").strip()
    return form


def content_of(form: dict[str, Any]) -> dict[str, Any]:
    """The metric's content as the API's put would take it."""
    own = KIND_CONTENT.get(form["kind"], _as_json)(form)
    return {
        "version": 1,
        "label": form["label"],
        "kind": form["kind"],
        "aggregate": form["aggregate"],
        **own,
    }


def field_key(field: str) -> str:
    """Where an error's field is shown: ``content.expression`` beside the expression,
    ``content.range.min`` beside the range, ``world`` and ``turn`` on the try panel."""
    match = _FIELD_HEAD.match(field)
    return match.group(1) if match else field.split(".", 1)[0]


def _error(exc: ChukwaError) -> dict[str, Any]:
    error = error_dict(exc)
    error["key"] = field_key(str(error["field"]))
    # beside its field the message need not name the field again
    error["brief"] = str(error["message"]).removeprefix(f"{error['field']}: ")
    return error


def _checked(form: dict[str, Any]) -> dict[str, Any]:
    """What the store would keep: its hash, and the turn's and the world's types."""
    metric_hash, stored = metric_draft(content_of(form))
    return {
        "hash": metric_hash,
        "turn_type": scale_label(turn_scale(stored)),
        "world_type": scale_label(world_scale_of(stored)),
    }


def _turn(raw: str) -> int:
    if not raw.isdigit():
        raise invalid("invalid_turn", "turn", f"must be a turn number ≥ 0, got {raw!r}")
    return int(raw)


def _next_url(request: HttpRequest, raw: str) -> str | None:
    """``next`` when it is a path on this site (never another host)."""
    if raw and url_has_allowed_host_and_scheme(raw, {request.get_host()}) and raw[0] == "/":
        return raw
    return None


def _with_metric(url: str, metric_hash: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}metrics={metric_hash}"


def _context(request: HttpRequest, form: dict[str, Any]) -> dict[str, Any]:
    worlds = world_choices()
    if not form["world"] and worlds:
        form["world"] = worlds[0]["slug"]
    if not form["turn"]:
        current = next((w["current_turn"] for w in worlds if w["slug"] == form["world"]), 0)
        form["turn"] = str(current)
    return {
        "form": form,
        "kinds": [
            {
                "name": name,
                "summary": kind.summary,
                "url": f"{reverse('page-metric-new')}?kind={name}",
            }
            for name, kind in METRIC_KINDS.items()
        ],
        "kind_template": (
            f"scenarios_app/_metric_form_{form['kind']}.html"
            if form["kind"] in KIND_CONTENT
            else "scenarios_app/_metric_form_json.html"
        ),
        "aggregates": AGGREGATES,
        "types": TYPES,
        "attempts": range(JUDGE_GENERATION_ATTEMPTS[0], JUDGE_GENERATION_ATTEMPTS[1] + 1),
        "llm_sources": component_choices()["llm_sources"],
        "worlds": worlds,
        "next": _next_url(request, form["next"]),
        "editing": (
            selectors.component_get(kind=ComponentKind.METRIC, hash=form["edit"])
            if form["edit"]
            else None
        ),
        "asks_model": METRIC_KINDS[form["kind"]].source_key is not None,
        "error_keys": ("label", "aggregate", "content", *KIND_ERROR_KEYS.get(form["kind"], ())),
        "error": None,
        "checked": None,
        "tried": None,
        "try_error": None,
    }


@require_http_methods(["GET", "HEAD", "POST"])
@page
def metric_new_page(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request, "Making metrics")
    posted = request.method == "POST"
    source: QueryDict | dict[str, str] = request.POST if posted else request.GET
    if not posted and request.GET.get("edit"):
        source = {**_edited(request.GET["edit"]), "next": request.GET.get("next", "")}
    form = _form(source)
    action = request.POST.get("action", "") if posted else ""
    context = _context(request, form)
    htmx = bool(getattr(request, "htmx", False))
    if action not in ACTIONS:
        return respond(request, PAGE, context, {"form": form})
    try:
        context["checked"] = _checked(form)
    except ChukwaError as exc:
        context["error"] = _error(exc)
    if action in ("try", "ask") and context["error"] is None:
        try:
            context["tried"] = metric_try(
                content=content_of(form),
                world=form["world"],
                turn=_turn(form["turn"]),
                ask=action == "ask",
            )
        except ChukwaError as exc:
            context["try_error"] = _error(exc)
    if action == "save" and context["error"] is None:
        made = metric_put(content=content_of(form))
        back = context["next"]
        target = _with_metric(back, made["hash"]) if back else f"/store/metrics/{made['hash']}/"
        return HttpResponseRedirect(target)
    template = {"check": CHECK, "try": TRY, "ask": TRY}.get(action, PAGE) if htmx else PAGE
    # a partial also clears or sets every error beside a field, and a try refreshes the check
    context.update(oob=template == TRY, oob_errors=template != PAGE)
    data = {
        "error": context["error"],
        "checked": context["checked"],
        "tried": context["tried"],
        "try_error": context["try_error"],
    }
    response = respond(request, template, context, data)
    if not htmx and context["error"] is not None and action == "save":
        response.status_code = context["error"]["status"]
    return response
