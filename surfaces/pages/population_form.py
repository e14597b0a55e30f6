"""Making a population in the browser (operators; docs/populations.md, "Populations in the
browser"): its axes as rows (categorical with weights, numeric ranges with an optional marginal
table), size, sampler, seed and entity template, checked as it is typed by the store's own put
validation (an error names its field and is shown beside it) with a preview of what would be
stored: its hash, the coverage of its axes and each marginal against its target as the API
computes them, and the first agents drawn. Storing it (``population_put``) opens its page."""

from __future__ import annotations

import math
import re
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.population import CODE, MAX_AXES, SAMPLERS, TEMPLATE_FIELDS
from scenarios_app.population_selectors import population_preview
from scenarios_app.selectors import ComponentKind, component_get
from scenarios_app.services import population_put
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond

PAGE = "scenarios_app/population_form.html"
CHECK = "scenarios_app/_population_check.html"
AXIS_KINDS = ("categorical", "numeric")
AXIS_FIELDS = ("name", "kind", "categories", "low", "high", "integer", "marginal")
_AXIS_FIELD = re.compile(r"^content\.axes\[(\d+)\]")
_TEMPLATE_FIELD = re.compile(r"^content\.entity_template\.([a-z]+)")
_TOP_FIELD = re.compile(r"^content\.([a-z_]+)")


def _number(raw: str, field: str) -> int | float:
    try:
        value = float(raw)
    except ValueError:
        raise invalid(CODE, field, f"must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise invalid(CODE, field, f"must be a finite number, got {raw!r}")
    return int(value) if value.is_integer() and "." not in raw and "e" not in raw.lower() else value


def _integer(raw: str) -> int | str:
    """A whole number as typed; anything else is passed on for the validation to name."""
    return int(raw) if re.fullmatch(r"-?\d{1,18}", raw) else raw


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _categories(text: str, at: str) -> list[dict[str, Any]]:
    """``value: weight`` per line (the weight after the last colon)."""
    found = []
    for i, line in enumerate(_lines(text)):
        value, colon, weight = line.rpartition(":")
        if not colon:
            raise invalid(
                CODE, f"{at}.categories[{i}].weight", f"write {line!r} as value: weight, e.g. a: 2"
            )
        found.append(
            {
                "value": value.strip(),
                "weight": _number(weight.strip(), f"{at}.categories[{i}].weight"),
            }
        )
    return found


def _marginal(text: str, at: str) -> list[dict[str, Any]]:
    """``low, high, share`` per line."""
    bins = []
    for i, line in enumerate(_lines(text)):
        parts = [p.strip() for p in re.split(r"[,;\s]+", line) if p.strip()]
        if len(parts) != 3:
            raise invalid(CODE, f"{at}.marginal[{i}]", f"write {line!r} as low, high, share")
        low, high, share = (
            _number(p, f"{at}.marginal[{i}].{k}")
            for p, k in zip(parts, ("low", "high", "share"), strict=True)
        )
        bins.append({"low": low, "high": high, "share": share})
    return bins


def _axis(row: dict[str, str], i: int) -> dict[str, Any]:
    at = f"content.axes[{i}]"
    if row["kind"] == "categorical":
        return {"name": row["name"], "categories": _categories(row["categories"], at)}
    bounds = [_number(row[end], f"{at}.range[{k}]") for k, end in enumerate(("low", "high"))]
    axis: dict[str, Any] = {"name": row["name"], "range": bounds}
    if row["integer"]:
        axis["integer"] = True
    if row["marginal"].strip():
        axis["marginal"] = _marginal(row["marginal"], at)
    return axis


def content_of(form: dict[str, Any]) -> dict[str, Any]:
    """The population's content as ``POST /api/populations/`` would take it."""
    return {
        "version": 1,
        "label": form["label"],
        "size": _integer(form["size"]),
        "sampler": form["sampler"],
        "seed": _integer(form["seed"]),
        "axes": [_axis(row, i) for i, row in enumerate(form["axes"])],
        "entity_template": {key: form["template"][key] for key in TEMPLATE_FIELDS},
    }


def field_key(field: str) -> str:
    """Where an error is shown: beside its axis row, its template field, or its own field."""
    if match := _AXIS_FIELD.match(field):
        return f"axis-{match.group(1)}"
    if match := _TEMPLATE_FIELD.match(field):
        return f"tpl-{match.group(1)}"
    if match := _TOP_FIELD.match(field):
        return match.group(1)
    return "content"


def _axis_rows(data: QueryDict | dict[str, str]) -> list[dict[str, str]]:
    raw = str(data.get("axis_count", "1"))
    count = min(int(raw), MAX_AXES) if raw.isdigit() else 1
    rows = []
    for i in range(count):
        row = {name: str(data.get(f"axis-{i}-{name}", "")) for name in AXIS_FIELDS}
        row["kind"] = row["kind"] if row["kind"] in AXIS_KINDS else "categorical"
        rows.append(row)
    return rows


def _form(data: QueryDict | dict[str, str]) -> dict[str, Any]:
    fresh = "label" not in data
    form: dict[str, Any] = {
        name: str(data.get(name, "")).strip() for name in ("label", "size", "sampler", "seed")
    }
    form["axes"] = _axis_rows(data)
    form["template"] = {key: str(data.get(f"tpl-{key}", "")) for key in TEMPLATE_FIELDS}
    if fresh:
        form.update(size="50", sampler="sobol", seed="1")
        form["template"].update(id="agent_{{index}}", name="Agent {{index}}")
    return form


def _number_text(value: Any) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _from_stored(population_hash: str) -> dict[str, str]:
    """A stored population as the form's fields, to start from: storing stores a new version
    (its own hash); the stored one stays as it is. Its biographies are not carried over (they
    were written for it: write them again for the new version)."""
    content = component_get(kind=ComponentKind.POPULATION, hash=population_hash)["content"]
    fields: dict[str, str] = {
        "label": str(content["label"]),
        "size": str(content["size"]),
        "sampler": str(content["sampler"]),
        "seed": str(content["seed"]),
        "axis_count": str(len(content["axes"])),
    }
    for i, axis in enumerate(content["axes"]):
        fields[f"axis-{i}-name"] = str(axis["name"])
        if "categories" in axis:
            fields[f"axis-{i}-kind"] = "categorical"
            fields[f"axis-{i}-categories"] = "\n".join(
                f"{c['value']}: {_number_text(c['weight'])}" for c in axis["categories"]
            )
            continue
        fields[f"axis-{i}-kind"] = "numeric"
        fields[f"axis-{i}-low"], fields[f"axis-{i}-high"] = (_number_text(v) for v in axis["range"])
        fields[f"axis-{i}-integer"] = "1" if axis.get("integer") else ""
        fields[f"axis-{i}-marginal"] = "\n".join(
            ", ".join(_number_text(b[k]) for k in ("low", "high", "share"))
            for b in axis.get("marginal", [])
        )
    for key in TEMPLATE_FIELDS:
        fields[f"tpl-{key}"] = str(content["entity_template"][key])
    return fields


def _error(exc: ChukwaError) -> dict[str, Any]:
    error = error_dict(exc)
    error["key"] = field_key(str(error["field"]))
    # beside its field the message names the field once, in front
    error["brief"] = str(error["message"]).removeprefix(f"{error['field']}: ")
    return error


def _edit_rows(form: dict[str, Any], action: str) -> None:
    """Add an axis row, or remove row ``n`` (``remove-n``); at least one row stays."""
    if action == "add" and len(form["axes"]) < MAX_AXES:
        form["axes"].append({name: "" for name in AXIS_FIELDS} | {"kind": "categorical"})
    elif action.startswith("remove-") and action[7:].isdigit() and len(form["axes"]) > 1:
        index = int(action[7:])
        if index < len(form["axes"]):
            del form["axes"][index]


@require_http_methods(["GET", "HEAD", "POST"])
@page
def population_new_page(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request, "Making populations")
    posted = request.method == "POST"
    source: QueryDict | dict[str, str] = request.POST if posted else request.GET
    starting = "" if posted else request.GET.get("from", "")
    if starting:
        source = _from_stored(starting)
    form = _form(source)
    action = request.POST.get("action", "") if posted else ""
    _edit_rows(form, action)
    for i, row in enumerate(form["axes"]):
        row["key"] = f"axis-{i}"
    context: dict[str, Any] = {
        "form": form,
        "template_rows": [
            {"key": key, "value": form["template"][key], "error_key": f"tpl-{key}"}
            for key in TEMPLATE_FIELDS
        ],
        "samplers": SAMPLERS,
        "axis_kinds": AXIS_KINDS,
        "template_fields": TEMPLATE_FIELDS,
        "error": None,
        "preview": None,
        "starting": starting,
    }
    context["error_keys"] = (
        "label",
        "size",
        "sampler",
        "seed",
        "axes",
        "content",
        *(f"axis-{i}" for i in range(len(form["axes"]))),
        *(f"tpl-{key}" for key in TEMPLATE_FIELDS),
    )
    if not posted and not starting:
        return respond(request, PAGE, context, {"form": form})
    # every post checks: a row added or removed shows the form's state at once
    try:
        context["preview"] = population_preview(content=content_of(form))
    except ChukwaError as exc:
        context["error"] = _error(exc)
    if action == "save" and context["error"] is None:
        made = population_put(content=content_of(form))
        return HttpResponseRedirect(f"/store/populations/{made['hash']}/")
    htmx = bool(getattr(request, "htmx", False))
    template = CHECK if htmx and action == "check" else PAGE
    context["oob_errors"] = template == CHECK
    data = {"form": form, "error": context["error"], "preview": context["preview"]}
    response = respond(request, template, context, data)
    if not htmx and context["error"] is not None and action == "save":
        response.status_code = context["error"]["status"]
    return response
