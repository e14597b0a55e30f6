"""A metric's LLM judge: one scored generation about a committed turn, outside any attempt.

The judge's reply is constrained to ``{"score": number in [min, max], "rationale": string}`` and
checked here; a reply that is not (non-JSON, off the scale, no rationale) goes to the same
corrective retry lane as an LLM node's: appended to the conversation as the assistant's message
with a user message naming exactly what was wrong, each try its own traced generation (kind
``judge``), up to ``max_generation_attempts``. A source failure (transport, HTTP, budget) is not
the model's content: it ends the judging at once. The caller (the worlds layer) gives the call's
context: the world, the turn, its budget, its replay, and the recorder of the judge's rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from chukwa_core.component_validation import schema_validator_for
from chukwa_core.json_values import UnstorableValue, check_storable, loads_strict
from cognition_app.models import InvocationKind
from cognition_app.sources import CallContext, Judgement, SourceFailure, invoke_llm
from cognition_app.sources.components import schema_errors

CORRECTIVE = (
    "Your previous response was rejected. {complaint}\n\n"
    'Return a corrected JSON object {{"score": <number>, "rationale": "<why>"}} with the score '
    "between {low} and {high}."
)


def score_schema(low: float, high: float) -> dict[str, Any]:
    """What a judge must answer: the score on the metric's scale and its rationale."""
    return {
        "type": "object",
        "properties": {
            "score": {"type": "number", "minimum": low, "maximum": high},
            "rationale": {"type": "string", "minLength": 1},
        },
        "required": ["score", "rationale"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class JudgeScore:
    score: float
    rationale: str
    llm_call_id: UUID  # the accepted generation's
    tries: int


class JudgeFailed(Exception):
    """No score: ``code`` is ``judge_output`` (every try rejected) or the source's failure
    class; ``llm_call_id`` the last generation's, when one was made."""

    def __init__(self, code: str, message: str, llm_call_id: UUID | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.llm_call_id = llm_call_id


def _judge(low: float, high: float) -> Any:
    validator = schema_validator_for(score_schema(low, high))

    def judge(text: str) -> Judgement:
        try:
            value = loads_strict(text)
            check_storable(value)
        except (ValueError, UnstorableValue) as exc:
            complaint = f"the response is not JSON ({exc})."
            return Judgement(output_kind="judge_score", parse_error=complaint, output=complaint)
        errors = schema_errors(validator, value)
        if errors:
            first = errors[0]
            complaint = f"{first['pointer'] or '(root)'}: {first['message']}."
            return Judgement(output_kind="judge_score", validation_errors=errors, output=complaint)
        return Judgement(output_kind="judge_score", artifacts={"judge_score": value}, output=value)

    return judge


def judge_turn(
    *,
    ctx: CallContext,
    source_hash: str,
    system: str,
    user: str,
    low: float,
    high: float,
    max_generation_attempts: int,
) -> JudgeScore:
    """Ask the judge for a score of the turn rendered into ``user``."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    judge = _judge(low, high)
    last_call: UUID | None = None
    complaint = ""
    for attempt_no in range(1, max_generation_attempts + 1):
        try:
            gen = invoke_llm(
                source_hash=source_hash,
                messages=messages,
                ctx=dataclasses.replace(ctx, generation_attempt=attempt_no),
                response_schema=score_schema(low, high),
                schema_name="judge_score",
                judge=judge,
                kind=InvocationKind.JUDGE,
            )
        except SourceFailure as exc:
            raise JudgeFailed(exc.failure_class, exc.message, last_call) from None
        last_call = gen.call.pk
        judgement = gen.judgement
        assert judgement is not None
        if not (judgement.parse_error or judgement.validation_errors):
            value = judgement.output
            return JudgeScore(float(value["score"]), value["rationale"], gen.call.pk, attempt_no)
        complaint = str(judgement.output)
        messages = [
            *messages,
            {"role": "assistant", "content": gen.text},
            {
                "role": "user",
                "content": CORRECTIVE.format(complaint=complaint, low=low, high=high),
            },
        ]
    raise JudgeFailed(
        "judge_output",
        f"{max_generation_attempts} judge generation(s) rejected; last rejection: {complaint}",
        last_call,
    )
