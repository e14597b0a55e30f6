"""The call's budgets (``cognition_app.budgets``): the world's limits and the shared budget of its
experiment, reserved for each request sent — a try waiting to be tried again holds no
reservation — at what it could spend (prompt estimate + max_tokens, and that at worst in cost).
It never waits: a request that does not fit is refused with ``budget_exhausted``. Taken last,
once every other limit holds, so that no reservation sits idle while a request waits for
capacity (a reservation can only refuse others early). The reservation is settled by whoever
writes the try's finished rows, once its real spend is known, not when the try ends. The
try's rows are opened before its limits are passed, so the reservation takes the id of its call's
row (``CallRequest.call_id``), by which the settle and the reaper find the call.
"""

from __future__ import annotations

from cognition_app.failures import SourceFailure
from cognition_app.sources.admission.base import CallRequest, Held, Refused, Wait


class Budget:
    name = "budget"

    def take(self, request: CallRequest) -> Held | Wait | Refused:
        ctx, iface = request.ctx, request.interface
        if ctx.budget is None:
            return Held()
        outcome = ctx.budget.reserve(
            world_id=ctx.world_id,
            attempt_id=ctx.attempt_id,
            prompt_tokens=request.prompt_tokens,
            max_completion=request.max_completion,
            price=request.price,
            price_key=f"({iface['base_url_env']}, {iface['model']})",
            call_id=request.call_id,
        )
        if isinstance(outcome, str):
            return Refused(SourceFailure("budget_exhausted", outcome))
        return Held(reservation=outcome)


LIMIT = Budget()
