"""What one LLM generation is: its text, its trace rows and Chukwa's verdict on it (shared by a
live call and one served from a recording)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cognition_app.models import LlmCall, SourceInvocation
from cognition_app.recording import Verdict


@dataclass
class Judgement:
    """What Chukwa made of a generation's text (computed before the rows are finished, so the
    finish and the judgement are written together)."""

    output_kind: str
    parse_error: str = ""
    validation_errors: list[Any] = field(default_factory=list)
    artifacts: dict[str, Any] = field(default_factory=dict)
    rejection: Any = None  # the node's rejection (a ModelContentRejected), if any
    output: Any = None


Judge = Callable[[str], Judgement]


@dataclass
class Generation:
    text: str
    invocation: SourceInvocation
    call: LlmCall
    finish_reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    judgement: Judgement | None = None


def verdict_fields(judgement: Judgement | None) -> Verdict:
    """The judgement as fields of the LLM call row and of the invocation row."""
    if judgement is None:
        return {}, {}
    errors = judgement.validation_errors
    call_verdict = {
        "parse_error": judgement.parse_error,
        "validation_errors": errors,
        "artifacts": judgement.artifacts,
    }
    inv_verdict = {
        "model_output_kind": judgement.output_kind,
        "validation_status": "invalid" if (judgement.parse_error or errors) else "valid",
        "validation_errors": errors,
    }
    return call_verdict, inv_verdict
