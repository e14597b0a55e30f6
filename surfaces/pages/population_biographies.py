"""Writing a population's biographies in the browser (operators; docs/populations.md,
"Biographies written by a model"): the same action as ``POST /api/populations/<hash>/
biographies/`` — a stored LLM source asked once per agent with a prompt over its axes, the texts
stored in a new version whose template may use ``{{biography}}`` — with its errors shown beside
the field they name. Success queues the run and opens its page, which follows it (every second
while a worker writes the texts) and then links the new version."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from chukwa_core.errors import ChukwaError
from chukwa_core.population import TEMPLATE_FIELDS
from scenarios_app.pickers import component_choices
from scenarios_app.selectors import ComponentKind, component_get
from surfaces.pages.authoring.common import error_dict, forbidden_unless_operator
from surfaces.pages.rendering import page, respond
from worlds_app.services.biography_runs import (
    biography_run_create,
    biography_run_get,
    biography_run_read,
)
from worlds_app.services.population_biographies import LLM

PAGE = "scenarios_app/population_biographies.html"
RUN_PAGE = "scenarios_app/biography_run.html"
DEFAULT_PROMPT = "Write a short biography of a person with these traits: {traits}."


def _form(request: HttpRequest, content: dict[str, Any]) -> dict[str, Any]:
    data = request.POST
    template = content["entity_template"]
    if request.method != "POST":
        traits = ", ".join(f"{a['name']} {{{{axes.{a['name']}}}}}" for a in content["axes"])
        existing = content.get("biographies")
        return {
            "source": existing["source"]["hash"] if existing else "",
            "prompt": existing["prompt"] if existing else DEFAULT_PROMPT.format(traits=traits),
            "template": [{"key": k, "value": template[k]} for k in TEMPLATE_FIELDS],
            "max_tokens_total": "",
        }
    return {
        "source": data.get("source", "").strip(),
        "prompt": data.get("prompt", ""),
        "template": [{"key": k, "value": data.get(f"tpl-{k}", "")} for k in TEMPLATE_FIELDS],
        "max_tokens_total": data.get("max_tokens_total", "").strip(),
    }


def _body(form: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "source": {"hash": form["source"]},
        "prompt": form["prompt"],
        "entity_template": {t["key"]: t["value"] for t in form["template"]},
    }
    if form["max_tokens_total"]:
        raw = form["max_tokens_total"]
        body["budget"] = {"max_tokens_total": int(raw) if raw.isdigit() else raw}
    return body


def _error(exc: ChukwaError) -> dict[str, Any]:
    error = error_dict(exc)
    field = str(error["field"])
    error["key"] = (
        "budget"
        if field.startswith("budget")
        else f"tpl-{field.split('.')[1]}"
        if field.startswith("entity_template.")
        else field.split(".")[0] or "source"
    )
    error["brief"] = str(error["message"]).removeprefix(f"{field}: ")
    return error


@require_http_methods(["GET", "HEAD", "POST"])
@page
def population_biographies_page(request: HttpRequest, hash: str) -> HttpResponse:
    forbidden_unless_operator(request, "Writing biographies")
    population = component_get(kind=ComponentKind.POPULATION, hash=hash)
    form = _form(request, population["content"])
    context: dict[str, Any] = {
        "population": population,
        "form": form,
        "llm_sources": [s for s in component_choices()["llm_sources"] if s["detail"] == LLM],
        "error": None,
    }
    if request.method == "POST":
        try:
            run = biography_run_create(
                hash=hash, data=_body(form), created_by=request.user.get_username()
            )
        except ChukwaError as exc:
            context["error"] = _error(exc)
            response = respond(request, PAGE, context, {"error": context["error"]})
            response.status_code = exc.status_code
            return response
        return HttpResponseRedirect(f"/biography-runs/{run.pk}/")
    return respond(request, PAGE, context, {"form": form})


@require_http_methods(["GET", "HEAD"])
@page
def biography_run_page(request: HttpRequest, id: int) -> HttpResponse:
    """A biographies run: its progress while a worker writes the texts, then the new version or
    why nothing was stored."""
    run = biography_run_read(biography_run_get(id))
    live = run["status"] in ("queued", "running")
    percent = round(100 * run["done"] / run["agents"]) if run["agents"] else 0
    context = {"run": run, "live": live, "percent": percent}
    return respond(request, RUN_PAGE, context, run)
