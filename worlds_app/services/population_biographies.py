"""Biographies for a population's agents, written by an LLM source (docs/populations.md,
"Biographies written by a model"): checking a request, asking the source, storing the version;
``worlds_app.services.biography_runs`` runs them on a worker.

An explicit action, never part of assembly: the source is asked once per drawn agent (its
prompt rendered from the agent's axis values), each call a traced generation of kind
``biography`` outside any world (its rows carry no world, the agent's id as their subject, and
its cost like any call's). The texts go into a new version of the population
(``content.biographies``: the source, the prompt and one text per agent), so its hash changes
once and is stable afterwards, and assembly reads the texts without asking any model. Every
agent has its text before the version is stored: a source failure stores no version (the calls
made until then stay traced, as every call does). The agents are asked one after another, or as
many at once as the source's ``limits.concurrency`` allows (up to ``BIOGRAPHY_THREADS``), each on
a thread of its own (``think_concurrently``); the first failure stops the calls still out.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.ids import is_hash
from chukwa_core.population import (
    MAX_BIOGRAPHY,
    MAX_BIOGRAPHY_PROMPT,
    TEMPLATE_FIELDS,
    draw,
    placeholders_problem,
    render,
    validate_population,
)
from cognition_app.budgets import BudgetLedger, BudgetLimits, Reservation
from cognition_app.models import InvocationKind, LlmCall
from cognition_app.sources import CallContext, CancelScope, SourceFailure, invoke_llm
from scenarios_app.models import ComponentKind, ResponseSource
from scenarios_app.selectors import component_get
from scenarios_app.services import population_put
from worlds_app.services.subject_threads import think_concurrently

CODE = "invalid_biographies"
# the most agents asked at once (the source's limits.concurrency, up to this)
BIOGRAPHY_THREADS = 16
LLM = "llm_chat_completions"
SYSTEM = (
    "You write short biographies of people in a simulation, in the third person, as plain "
    "prose: who they are, where they come from, what they care about. Answer with the "
    "biography alone."
)


@dataclass
class RequestBudget:
    """The request's own budget (``budget``: ``max_tokens_total``, ``max_cost_total``) over
    its calls, as an experiment's shared budget is over its worlds' (``SharedBudget``): each
    call reserves what it could spend before it is sent (refused: ``budget_exhausted``), and
    is settled to its real spend once its rows are written."""

    max_tokens: int | None
    max_cost: Decimal | None
    spent_tokens: int = 0
    spent_cost: Decimal = Decimal(0)
    _reserved_tokens: int = 0
    _reserved_cost: Decimal = Decimal(0)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def has_cost_limit(self) -> bool:
        return self.max_cost is not None

    @property
    def name(self) -> str:
        return "this biographies request"

    def reserve(
        self, *, tokens: int, cost: Decimal, reservation_id: UUID, attempt_id: UUID | None
    ) -> str | None:
        with self._lock:
            used_tokens = self.spent_tokens + self._reserved_tokens
            used_cost = self.spent_cost + self._reserved_cost
            if self.max_tokens is not None and used_tokens + tokens > self.max_tokens:
                return (
                    f"budget max_tokens_total of {self.name}: {used_tokens} of "
                    f"{self.max_tokens} spent or reserved, this call could spend {tokens}"
                )
            if self.max_cost is not None and used_cost + cost > self.max_cost:
                return (
                    f"budget max_cost_total of {self.name}: {used_cost} of {self.max_cost} "
                    f"spent or reserved, this call could cost {cost}"
                )
            self._reserved_tokens += tokens
            self._reserved_cost += cost
            return None

    def settle(self, *, reserved: Reservation, tokens: int, cost: Decimal) -> None:
        with self._lock:
            self._reserved_tokens -= reserved.tokens
            self._reserved_cost -= reserved.cost
            self.spent_tokens += tokens
            self.spent_cost += cost


def _budget(raw: Any) -> tuple[int | None, Decimal | None] | None:
    """The request's ``budget``, if given: at least one of its limits, each positive."""
    if raw is None:
        return None
    body = require_object(raw, "budget", CODE)
    check_keys(
        body, "budget", required=(), optional=("max_tokens_total", "max_cost_total"), code=CODE
    )
    if not body:
        raise invalid(CODE, "budget", "give max_tokens_total, max_cost_total or both")
    tokens = body.get("max_tokens_total")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
    ):
        raise invalid(CODE, "budget.max_tokens_total", "must be a whole number ≥ 1")
    cost: Decimal | None = None
    if "max_cost_total" in body:
        raw_cost = body["max_cost_total"]
        try:
            if isinstance(raw_cost, bool) or not isinstance(raw_cost, int | float | str):
                raise InvalidOperation
            cost = Decimal(str(raw_cost))
        except InvalidOperation:
            cost = None
        if cost is None or not cost.is_finite() or cost <= 0:
            raise invalid(CODE, "budget.max_cost_total", "must be a positive number (USD)")
    return tokens, cost


def ledger_of(
    raw: Any, *, spent_tokens: int = 0, spent_cost: Decimal = Decimal(0)
) -> BudgetLedger | None:
    """The ledger of a request's checked ``budget`` (None: no budget), counting what its calls
    already spent (a run's earlier tries)."""
    limits = _budget(raw)
    if limits is None:
        return None
    shared = RequestBudget(*limits, spent_tokens=spent_tokens, spent_cost=spent_cost)
    return BudgetLedger(limits=BudgetLimits(), shared=shared)


def _source(raw: Any) -> str:
    source = require_object(raw, "source", CODE)
    if set(source) not in ({"hash"}, {"label"}):
        raise invalid(CODE, "source", 'must be {"hash": H} or {"label": L} of a stored LLM source')
    if "hash" in source:
        found = is_hash(source["hash"]) and (
            ResponseSource.objects.filter(pk=source["hash"], interface=LLM).exists()
        )
        if not found:
            raise invalid(CODE, "source.hash", f"no stored {LLM} source has this hash")
        return str(source["hash"])
    hashes = list(
        ResponseSource.objects.filter(label=source["label"], interface=LLM).values_list(
            "hash", flat=True
        )[:2]
        if isinstance(source["label"], str)
        else []
    )
    if len(hashes) != 1:
        raise invalid(
            CODE,
            "source.label",
            f"no stored {LLM} source has this label"
            if not hashes
            else "several stored sources have this label: give the hash",
        )
    return str(hashes[0])


@dataclass(frozen=True)
class Asked:
    """A checked biographies request: what every try of its run asks."""

    population: str  # the version the biographies are written for
    content: dict[str, Any]  # its content, without biographies
    source_hash: str
    prompt: str
    template: dict[str, str]  # the new version's entity template
    budget: Any  # the request's ``budget``, as given (checked)


def biographies_checked(*, hash: str, data: Any) -> Asked:
    """The request for population ``hash``'s biographies, checked before any call (a 400
    naming the field): the body, the source, the prompt's placeholders, the new version."""
    content = dict(component_get(kind=ComponentKind.POPULATION, hash=hash)["content"])
    body = require_object(data, "body", CODE)
    check_keys(
        body,
        "body",
        required=("source", "prompt"),
        optional=("entity_template", "budget"),
        code=CODE,
    )
    prompt = body["prompt"]
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > MAX_BIOGRAPHY_PROMPT:
        raise invalid(
            CODE, "prompt", f"must be non-empty text of at most {MAX_BIOGRAPHY_PROMPT} characters"
        )
    problem = placeholders_problem(prompt, content)
    if problem is not None:
        raise invalid(CODE, "prompt", problem)
    template = body.get("entity_template", content["entity_template"])
    source_hash = _source(body["source"])
    _budget(body.get("budget"))
    content.pop("biographies", None)
    # the new version is checked before any call: a bad template costs nothing
    try:
        validate_population(
            _version(content, template, source_hash, prompt, ["…"] * content["size"])
        )
    except ChukwaError as exc:
        field = str(exc.details.get("field", ""))
        if not field.startswith("content.entity_template"):
            raise
        raise invalid(
            exc.code, field.removeprefix("content."), exc.message.removeprefix(f"{field}: ")
        ) from None
    return Asked(hash, content, source_hash, prompt, template, body.get("budget"))


def _version(
    content: dict[str, Any], template: Any, source_hash: str, prompt: str, texts: list[str]
) -> dict[str, Any]:
    biographies = {"source": {"hash": source_hash}, "prompt": prompt, "texts": texts}
    return {**content, "entity_template": template, "biographies": biographies}


def biographies_ask(
    asked: Asked,
    *,
    indexes: list[int],
    ledger: BudgetLedger | None,
    node_id: str,
    on_text: Callable[[int, str, str], None],
    until: float = math.inf,
) -> None:
    """Ask the source for the biographies of the agents ``indexes`` (1…size), ``on_text``
    (index, text, call id) told of each as it arrives: one after another, or as many at once
    as the source's ``limits.concurrency`` (up to ``BIOGRAPHY_THREADS``), the first failure
    stopping the calls still out; an agent not yet asked at ``until`` (``time.monotonic()``) is
    left for later. A ``ChukwaError`` names the agent that failed."""
    content = asked.content
    _, rows = draw(content)
    counter = itertools.count(1)
    lock = threading.Lock()

    def next_seq() -> int:
        with lock:  # the agents' calls may run on several threads
            return next(counter)

    wanted = set(indexes)
    template = content["entity_template"]
    asks = [
        {"id": render(template, index, values)["id"], "index": index, "values": values}
        for index, values in enumerate(rows, start=1)
        if index in wanted
    ]
    scope = CancelScope()

    def ask(agent: dict[str, Any]) -> None:
        if time.monotonic() >= until:
            return  # the try's time is up: the next try asks it
        text, call = _biography(agent, asked, node_id, ledger, next_seq, scope)
        on_text(agent["index"], text, call)

    bound = _concurrency(asked.source_hash)
    if bound == 1 or len(asks) <= 1:  # one after another, on the caller's own connection
        for agent in asks:
            ask(agent)
    else:
        think_concurrently(asks, ask, cancel=scope, bound=bound)


def biographies_store(asked: Asked, texts: list[str], calls: list[str]) -> dict[str, Any]:
    """Store the version holding ``texts`` (one per agent, in order); what it made."""
    version = _version(asked.content, asked.template, asked.source_hash, asked.prompt, texts)
    made = population_put(content=version)
    costs = LlmCall.objects.filter(pk__in=calls).values_list("cost", flat=True)
    known = [c for c in costs if c is not None]
    return {
        "hash": made["hash"],
        "was_new": made["was_new"],
        "derived_from": asked.population,
        "source": {"hash": asked.source_hash},
        "agents": len(texts),
        "llm_calls": calls,
        "cost": str(sum(known)) if len(known) == len(calls) else None,
    }


def _concurrency(source_hash: str) -> int:
    """How many agents are asked at once: the source's own ``limits.concurrency`` (what its
    provider allows in flight), else one at a time."""
    content = ResponseSource.objects.get(pk=source_hash).content
    limits = (content.get("interface") or {}).get("limits") or {}
    return max(1, min(int(limits.get("concurrency") or 1), BIOGRAPHY_THREADS))


def _biography(
    agent: dict[str, Any],
    asked: Asked,
    node_id: str,
    ledger: BudgetLedger | None,
    next_seq: Callable[[], int],
    cancel: CancelScope,
) -> tuple[str, str]:
    """One agent's biography and its call's id (a ``ChukwaError`` naming the agent when the
    source fails, answers nothing, or the budget refuses)."""
    index, values = agent["index"], agent["values"]
    ctx = CallContext(
        attempt_id=None,
        world_id=None,
        world_slug="",
        attempted_turn=0,
        next_seq=next_seq,
        node_id=node_id,
        subject_id=agent["id"][:200],
        who=f"population {asked.content['label']}'s biography of agent {index}",
        budget=ledger,
        cancel=cancel,
    )
    user = render({**dict.fromkeys(TEMPLATE_FIELDS, ""), "id": asked.prompt}, index, values)
    try:
        gen = invoke_llm(
            source_hash=asked.source_hash,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": user["id"]},
            ],
            ctx=ctx,
            response_schema=None,
            kind=InvocationKind.BIOGRAPHY,
        )
    except SourceFailure as exc:
        if exc.failure_class == "budget_exhausted":
            raise ChukwaError(
                "budget_exhausted",
                f"budget: agent {index}'s biography was not asked: {exc.message[:500]}; "
                "nothing was stored",
                {"field": "budget", "agent": index},
                status_code=409,
            ) from None
        raise ChukwaError(
            "biography_failed",
            f"source: the source failed writing agent {index}'s biography "
            f"({exc.failure_class}): {exc.message[:500]}; nothing was stored",
            {"field": "source", "agent": index, "failure_class": exc.failure_class},
            status_code=502,
        ) from None
    text = gen.text.strip()
    if not text or len(text) > MAX_BIOGRAPHY:
        raise ChukwaError(
            "biography_failed",
            f"source: agent {index}'s biography is "
            f"{'empty' if not text else f'longer than {MAX_BIOGRAPHY} characters'}; "
            "nothing was stored",
            {"field": "source", "agent": index},
            status_code=502,
        )
    return text, str(gen.call.pk)
