"""Experiment pages (docs/experiments.md, "In the browser"): the index, and an experiment's page
with its design, its progress (polled while it runs), its results with their plots, its worlds,
and the operators' actions (cancel, add replicates, add metrics). Every page also answers
``?format=json``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_POST

from chukwa_core.errors import ChukwaError, NotFoundError
from chukwa_core.experiment_design import ExperimentDesign
from scenarios_app.pickers import metric_choices
from surfaces.api.experiments import ExperimentResultsSerializer
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.design_plots import interaction_svg, stopping_svg
from surfaces.pages.live import stop_polling_when
from surfaces.pages.rendering import page, respond, wants_json
from surfaces.permissions import is_operator
from worlds_app import experiment_results
from worlds_app import experiment_selectors as selectors
from worlds_app.services import experiments as services

PAGE = "experiments/experiment_detail.html"
PROGRESS = "experiments/_progress.html"
WORLDS_OPEN = 40  # the worlds table starts folded beyond this many worlds


def _public(data: dict[str, Any]) -> dict[str, Any]:
    """The experiment's read as ``?format=json`` gives it: the design in its stored form."""
    design: ExperimentDesign = data["design"]
    return {**data, "design": design.public_json()}


def _percent(done: int, planned: int) -> int:
    return min(100, round(100 * done / planned)) if planned else 100


def _duration(seconds: float | None) -> str:
    """An estimated time left as people say it: "about 40 s", "about 12 min", "about 3 h"."""
    if seconds is None:
        return ""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def _live(data: dict[str, Any]) -> bool:
    """Still changing: turns to run, or (every turn run) measurements still to come. A failed
    or cancelled experiment's missing measurements never come, so it stops."""
    progress = data["progress"]
    if data["status"] == selectors.RUNNING:
        return True
    return (
        data["status"] == selectors.COMPLETED
        and progress["measurements_done"] < progress["measurements_planned"]
    )


def _progress_context(request: HttpRequest, data: dict[str, Any]) -> dict[str, Any]:
    progress = data["progress"]
    budget = data["design"].budget
    return {
        "experiment": data,
        "progress": progress,
        "turns_percent": _percent(progress["turns_committed"], progress["turns_planned"]),
        "measured_percent": _percent(
            progress["measurements_done"], progress["measurements_planned"]
        ),
        "budget": budget,
        # the ledger (experiment_get's "budget"): set when a call was refused for want of it
        "budget_exhausted_at": (data.get("budget") or {}).get("exhausted_at"),
        "eta_text": _duration(progress.get("eta_seconds")),
        "live": _live(data),
        "poll_url": request.path,
    }


def _world_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    design: ExperimentDesign = data["design"]
    control = design.control
    failed = {w["slug"] for w in data["failed_worlds"]}
    pairs = {w["replicate"]: w["slug"] for w in data["worlds"] if w["arm"] == control}
    return [
        {
            **w,
            "failed": w["slug"] in failed,
            "done": design.world_finished(w["current_turn"]),
            "pair": pairs.get(w["replicate"]) if w["arm"] != control else None,
        }
        for w in data["worlds"]
    ]


def _detail_context(request: HttpRequest, slug: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data = selectors.experiment_get(slug=slug)
    results = experiment_results.experiment_results(slug=slug)
    # the results as the API answers them: the page's JSON and the plots' data
    serialized = ExperimentResultsSerializer(results).data["results"]
    design: ExperimentDesign = data["design"]
    labels = {r.metric.hash: r.metric.label for r in results.results}
    context = {
        **_progress_context(request, data),
        "design": design,
        # each arm with the names that point at its scenario (shown beside the short hash)
        "arm_rows": [
            (arm, data["arm_scenarios"][arm.label]["scenario_names"]) for arm in design.arms
        ],
        "metrics": [{"hash": h, "label": labels.get(h, h[:12])} for h in design.metrics],
        "results": results.results,
        "analysis": results,
        "plot_data": {
            "control": results.control,
            "arms": list(design.arm_labels),
            "metrics": serialized,
        },
        # the SVGs escape every text they write (surfaces/pages/design_plots.py)
        "factorial_plots": [
            (fit, mark_safe(interaction_svg(fit)))  # noqa: S308
            for fit in results.factorial
        ],
        "stopping_plot": mark_safe(  # noqa: S308
            stopping_svg(results.stopping.looks if results.stopping is not None else ())
        ),
        "world_rows": _world_rows(data),
        "worlds_open": len(data["worlds"]) <= WORLDS_OPEN,
        "addable_metrics": [m for m in metric_choices() if m["hash"] not in design.metrics]
        if is_operator(request.user)
        else [],
        "action_error": None,
        "action": "",
    }
    return context, {**_public(data), "results": serialized}


@page
@require_http_methods(["GET", "HEAD"])
def experiment_index_page(request: HttpRequest) -> HttpResponse:
    found = selectors.experiment_list()
    rows = [
        {
            **e,
            "turns_percent": _percent(
                e["progress"]["turns_committed"], e["progress"]["turns_planned"]
            ),
        }
        for e in found
    ]
    return respond(
        request, "experiments/experiment_index.html", {"experiments": rows}, {"results": found}
    )


@page
@require_http_methods(["GET", "HEAD"])
def experiment_page(request: HttpRequest, slug: str) -> HttpResponse:
    if getattr(request, "htmx", False) and not wants_json(request):
        # a poll: the progress alone (the results are read once the page reloads)
        data = selectors.experiment_get(slug=slug)
        context = _progress_context(request, data)
        response = respond(request, PROGRESS, context, _public(data), partial=PROGRESS)
        if not context["live"]:
            # finished while watched: reload once, so the results and worlds are current too
            response["HX-Refresh"] = "true"
        stop_polling_when(response, request, not context["live"])
        return response
    context, data = _detail_context(request, slug)
    return respond(request, PAGE, context, data)


def _action(request: HttpRequest, slug: str, action: str, work: Any, **values: str) -> HttpResponse:
    """Run an operator's action; on success back to the page, on a bad input the page again with
    the error next to the action's form (400), nothing written."""
    forbidden_unless_operator(request, "Changing experiments")
    try:
        work()
    except NotFoundError:
        raise
    except ChukwaError as exc:
        if wants_json(request):
            raise
        context, data = _detail_context(request, slug)
        context.update(action=action, action_error=error_dict(exc), **values)
        response = respond(request, PAGE, context, data)
        response.status_code = 400 if exc.status_code < 500 else exc.status_code
        return response
    if wants_json(request):
        return respond(request, "", {}, _public(selectors.experiment_get(slug=slug)))
    return HttpResponseRedirect(reverse("page-experiment-detail", args=[slug]))


@page
@require_POST
def experiment_cancel_page(request: HttpRequest, slug: str) -> HttpResponse:
    return _action(request, slug, "cancel", lambda: services.experiment_cancel(slug=slug))


@page
@require_POST
def experiment_replicates_page(request: HttpRequest, slug: str) -> HttpResponse:
    raw = request.POST.get("count", "").strip()

    def work() -> None:
        if not raw.isdigit():
            raise ChukwaError(
                "invalid_count",
                f"count: must be a whole number of replicates, got {raw!r}",
                {"field": "count"},
            )
        services.experiment_add_replicates(
            slug=slug, count=int(raw), created_by=request.user.get_username()
        )

    return _action(request, slug, "replicates", work, replicates_count=raw)


@page
@require_POST
def experiment_metrics_page(request: HttpRequest, slug: str) -> HttpResponse:
    chosen = [h for h in request.POST.getlist("metrics") if h]

    def work() -> None:
        if not chosen:
            raise ChukwaError(
                "invalid_metrics", "metrics: choose at least one metric", {"field": "metrics"}
            )
        services.experiment_add_metrics(
            slug=slug,
            metrics=[{"hash": h} for h in chosen],
            created_by=request.user.get_username(),
        )

    return _action(request, slug, "metrics", work)
