"""Launching an experiment in the browser (operators): slug, name, arms (a label and a stored
scenario each; add and remove rows) and the control, or factors over a base scenario
(``experiment_form_factors``), replicates, turns, the metrics, a seed, the simulation's start
and a budget. "Estimate" shows what it could spend (``experiment_estimate``) before "Launch" creates it
(``experiment_create``); both read the same design, and an error is shown next to its field with
nothing written. With an effect to detect (and an sd or a pilot experiment), the estimate also
says how many replicates that needs."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.experiment_design import BUDGET_LIMITS, Stopping
from chukwa_core.experiment_time import LONG_SECONDS, duration_text
from scenarios_app.pickers import metric_choices, scenario_choices
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.experiment_form_factors import (
    FRACTIONS,
    apply_action,
    factor_key,
    factors_design,
    factors_form,
)
from surfaces.pages.rendering import page, respond, wants_json
from worlds_app.services.experiment_estimate import experiment_estimate
from worlds_app.services.experiments import experiment_create

PAGE = "experiments/experiment_form.html"
ESTIMATE = "experiments/_estimate.html"
MIN_ARMS = 2
MAX_ARM_ROWS = 20
TEXT_FIELDS = (
    *("slug", "name", "description", "replicates", "turns", "seed", "start_time", "reuse"),
    "mode",
)
REUSE_CHOICES = (
    ("exact", "reuse recorded replies (exact): an identical request is answered from the record"),
    ("off", "send every request (off)"),
)
MODE_CHOICES = (
    ("online", "online: every call sent as it comes"),
    ("batch", "batch: calls gathered into provider batches, at the batch price"),
)
# the estimate's optional power: which metric, the effect to detect, and sd or a pilot experiment
POWER_FIELDS = ("power_metric", "power_effect", "power_sd", "power_pilot")
BUDGET_FIELDS = BUDGET_LIMITS
# a stopping rule (docs/designs.md): on when max_replicates is given; the metric is the first
# ticked unless named; no default alpha or step (the spec has none)
STOPPING_FIELDS = tuple(
    f"stop_{name}"
    for name in (*Stopping.INPUT_REQUIRED, *Stopping.INPUT_OPTIONAL)
    if name != "metric"
)
ARM_FIELD = re.compile(r"^arms\[(\d+)\]\.(label|scenario_ref)")
# an arm's intervention (one per arm on the form; the API takes any number)
IV_FIELD = re.compile(r"^arms\[(\d+)\]\.interventions(?:\[0\](?:\.(turn|patch|note))?)?")
IV_PARTS = ("turn", "note", "patch")


def _form(data: QueryDict) -> dict[str, Any]:
    """The form as typed: text fields, the arm rows (label, scenario), the control row, the
    metrics ticked."""
    labels = data.getlist("arm_label")
    scenarios = data.getlist("arm_scenario")
    typed = {part: data.getlist(f"arm_iv_{part}") for part in IV_PARTS}
    count = max(len(labels), len(scenarios), MIN_ARMS)

    def nth(values: list[str], i: int) -> str:
        return (values[i] if i < len(values) else "").strip()

    arms = [
        {
            "label": nth(labels, i),
            "scenario": nth(scenarios, i),
            "iv": {part: nth(typed[part], i) for part in IV_PARTS},
            "iv_open": any(nth(typed[part], i) for part in IV_PARTS),
        }
        for i in range(min(count, MAX_ARM_ROWS))
    ]
    if not labels:  # a fresh form: the usual names
        arms[0]["label"], arms[1]["label"] = "control", "treatment"
    raw_control = data.get("control", "0")
    control = int(raw_control) if raw_control.isdigit() and int(raw_control) < len(arms) else 0
    form: dict[str, Any] = {name: data.get(name, "").strip() for name in TEXT_FIELDS}
    form.update({name: data.get(name, "").strip() for name in BUDGET_FIELDS})
    form.update({name: data.get(name, "").strip() for name in POWER_FIELDS})
    form.update({name: data.get(name, "").strip() for name in STOPPING_FIELDS})
    form["arms"] = arms
    form["control"] = control
    form["metrics"] = [h for h in data.getlist("metrics") if h]
    form.update(factors_form(data))
    if not data:
        form.update(replicates="5", turns="3", reuse="exact", mode="online")
    return form


def _whole(raw: str, field: str) -> int:
    if not raw.isdigit():
        raise invalid("invalid_input", field, f"must be a whole number, got {raw!r}")
    return int(raw)


def _number(raw: str, field: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise invalid("invalid_power", field, f"must be a number, got {raw!r}") from None


def _power(form: dict[str, Any]) -> dict[str, Any] | None:
    """The estimate's ``power`` from the form, when an effect is given (else none is asked);
    the estimate checks the rest, as for the API."""
    if not form["power_effect"]:
        return None
    power: dict[str, Any] = {
        "metric": {"hash": form["power_metric"] or next(iter(form["metrics"]), "")},
        "effect": _number(form["power_effect"], "power.effect"),
    }
    if form["power_sd"]:
        power["sd"] = _number(form["power_sd"], "power.sd")
    if form["power_pilot"]:
        power["pilot"] = form["power_pilot"]
    return power


def _intervention(typed: dict[str, str], where: str) -> dict[str, Any]:
    """An arm's intervention as the API takes it: the turn a number when it reads as one, the
    patch parsed from its JSON, the note when given; the design's rules check the rest (the
    same errors as the API's, naming ``arms[i].interventions[0].<field>``)."""
    item: dict[str, Any] = {}
    if typed["turn"]:
        item["turn"] = int(typed["turn"]) if typed["turn"].isdigit() else typed["turn"]
    if typed["patch"]:
        try:
            item["patch"] = json.loads(typed["patch"])
        except ValueError as exc:
            raise invalid("invalid_patch", f"{where}.patch", f"is not JSON: {exc}") from None
    if typed["note"]:
        item["note"] = typed["note"]
    return item


def _design(form: dict[str, Any]) -> dict[str, Any]:
    """The API's design from the form: empty fields left out, numbers read as numbers; the
    experiment service checks everything else, as for the API."""
    design: dict[str, Any] = {"slug": form["slug"]}
    if form["design_kind"] == "factors":
        design.update(factors_design(form))
    else:
        design.update(arms=_arms(form), control=form["arms"][form["control"]]["label"])
    design.update(
        replicates=_whole(form["replicates"], "replicates"),
        turns=_whole(form["turns"], "turns"),
        metrics=[{"hash": h} for h in form["metrics"]],
    )
    for name in ("name", "description"):
        if form[name]:
            design[name] = form[name]
    if form["seed"]:
        design["seed"] = _whole(form["seed"], "seed")
    if form["start_time"]:
        design["start_time"] = form["start_time"]  # the service checks it, naming `start_time`
    if form["reuse"]:
        design["reuse"] = form["reuse"]  # the design's rules refuse others, naming `reuse`
    if form["mode"]:
        design["mode"] = form["mode"]  # likewise, naming `mode`
    budget: dict[str, Any] = {}
    if form["max_cost_total"]:
        budget["max_cost_total"] = form["max_cost_total"]
    if form["max_tokens_total"]:
        budget["max_tokens_total"] = _whole(form["max_tokens_total"], "budget.max_tokens_total")
    if budget:
        design["budget"] = budget
    if any(form[name] for name in STOPPING_FIELDS):
        design["stopping"] = _stopping(form)
    return design


def _arms(form: dict[str, Any]) -> list[dict[str, Any]]:
    """The arm rows as the API takes them."""
    arms: list[dict[str, Any]] = []
    for index, row in enumerate(form["arms"]):
        ref = {"hash": row["scenario"]} if row["scenario"] else {}
        arm: dict[str, Any] = {"label": row["label"], "scenario_ref": ref}
        if any(row["iv"].values()):
            where = f"arms[{index}].interventions[0]"
            arm["interventions"] = [_intervention(row["iv"], where)]
        arms.append(arm)
    return arms


def _stopping(form: dict[str, Any]) -> dict[str, Any]:
    """The design's ``stopping`` from the form (the service checks it, naming the field)."""
    if not form["metrics"]:
        raise invalid("invalid_stopping", "stopping.metric", "tick a metric for the rule to test")
    stopping: dict[str, Any] = {"metric": {"hash": form["metrics"][0]}}
    for name in ("max_replicates", "every"):
        raw = form[f"stop_{name}"]
        if not raw:
            raise invalid("invalid_stopping", f"stopping.{name}", "is required for a stopping rule")
        stopping[name] = _whole(raw, f"stopping.{name}")
    if not form["stop_alpha"]:
        raise invalid("invalid_stopping", "stopping.alpha", "is required for a stopping rule")
    try:
        stopping["alpha"] = float(form["stop_alpha"])
    except ValueError:
        raise invalid(
            "invalid_stopping", "stopping.alpha", f"must be a number, got {form['stop_alpha']!r}"
        ) from None
    if form["stop_treatment"]:
        stopping["treatment"] = form["stop_treatment"]
    return stopping


def field_key(field: str) -> str:
    """Where on the form an error's field is shown: ``arms[1].label`` on the second arm row's
    label, ``metrics[0]`` on the metrics, ``budget.max_cost_total`` on that budget field,
    ``factors[1].levels[0].fork…`` on that level's fork."""
    factor = factor_key(field)
    if factor is not None:
        return factor
    match = IV_FIELD.match(field)
    if match:
        return f"arm-{match.group(1)}-iv" + (f"-{match.group(2)}" if match.group(2) else "")
    match = ARM_FIELD.match(field)
    if match:
        which = "label" if match.group(2) == "label" else "scenario"
        return f"arm-{match.group(1)}-{which}"
    head = re.split(r"[.\[]", field, maxsplit=1)[0]
    if head == "budget":
        tail = field.removeprefix("budget.")
        return tail if tail in BUDGET_FIELDS else "budget"
    if head == "stopping":
        key = "stop_" + field.removeprefix("stopping.")
        return key if key in STOPPING_FIELDS else "stopping"
    if head == "power":
        key = "power_" + field.removeprefix("power.")
        return key if key in POWER_FIELDS else "power"
    return head


def _time_text(seconds: int | None) -> str:
    return "unknown" if seconds is None else duration_text(seconds)


def _with_error(exc: ChukwaError) -> dict[str, Any]:
    error = error_dict(exc)
    error["key"] = field_key(str(error["field"]))
    return error


@require_http_methods(["GET", "HEAD", "POST"])
@page
def experiment_new_page(request: HttpRequest) -> HttpResponse:
    forbidden_unless_operator(request, "Launching experiments")
    posted = request.method == "POST"
    form = _form(request.POST if posted else request.GET)
    action = request.POST.get("action", "") if posted else ""
    if action == "new_metric":
        # to the metric form, which returns here with what was typed and the new metric ticked
        typed = [
            (k, v) for k, v in request.POST.lists() if k not in ("action", "csrfmiddlewaretoken")
        ]
        back = f"{reverse('page-experiment-new')}?{urlencode(typed, doseq=True)}"
        return HttpResponseRedirect(f"{reverse('page-metric-new')}?{urlencode({'next': back})}")
    if apply_action(form, action):
        pass
    elif action == "add_arm" and len(form["arms"]) < MAX_ARM_ROWS:
        form["arms"].append(
            {"label": "", "scenario": "", "iv": dict.fromkeys(IV_PARTS, ""), "iv_open": False}
        )
    elif action.startswith("remove_arm_") and len(form["arms"]) > MIN_ARMS:
        index = action.removeprefix("remove_arm_")
        if index.isdigit() and int(index) < len(form["arms"]):
            del form["arms"][int(index)]
            if form["control"] >= len(form["arms"]) or form["control"] == int(index):
                form["control"] = 0
            elif form["control"] > int(index):
                form["control"] -= 1
    context: dict[str, Any] = {
        "form": form,
        "scenarios": scenario_choices(),
        "metric_choices": metric_choices(),
        "error": None,
        "estimate_error": None,
        "estimate": None,
        "form_action": action,
        "can_remove": len(form["arms"]) > MIN_ARMS,
        "can_add": len(form["arms"]) < MAX_ARM_ROWS,
        "fractions": FRACTIONS,
        "reuse_choices": REUSE_CHOICES,
        "mode_choices": MODE_CHOICES,
    }
    if action not in ("estimate", "launch"):
        data = {"form": form, "scenarios": context["scenarios"]}
        return respond(request, PAGE, context, data)
    try:
        design = _design(form)
        if action == "estimate":
            power = _power(form)
            asked = design if power is None else {**design, "power": power}
            context["estimate"] = experiment_estimate(data=asked)
        else:
            made = experiment_create(data=design, created_by=request.user.get_username())
    except ChukwaError as exc:
        if wants_json(request):
            raise
        context["error"] = _with_error(exc)
        key = str(context["error"]["key"])
        for row, arm in enumerate(form["arms"]):
            arm["iv_open"] = arm["iv_open"] or key.startswith(f"arm-{row}-iv")
        partial = action == "estimate" and getattr(request, "htmx", False)
        if partial:
            context["estimate_error"] = context["error"]
        template = ESTIMATE if partial else PAGE
        response = respond(request, template, context, {"error": context["error"]})
        if not getattr(request, "htmx", False):
            response.status_code = exc.status_code
        return response
    if action == "estimate":
        estimate = context["estimate"]
        context["time_text"] = _time_text(estimate["seconds"])
        context["time_long"] = (estimate["seconds"] or 0) > LONG_SECONDS
        power = estimate["power"]
        data = {**estimate, "power": None if power is None else asdict(power)}
        if getattr(request, "htmx", False) and not wants_json(request):
            return respond(request, ESTIMATE, context, data)
        return respond(request, PAGE, context, data)
    if wants_json(request):
        return respond(request, "", {}, {"slug": made.slug})
    return HttpResponseRedirect(reverse("page-experiment-detail", args=[made.slug]))
